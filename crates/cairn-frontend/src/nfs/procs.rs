//! The NFSv3 procedures that change nothing (beyond access times): GETATTR, LOOKUP, ACCESS,
//! READLINK, READ, READDIR, READDIRPLUS, FSSTAT, FSINFO, PATHCONF.
//!
//! Each resolves its handle (`NfsContext::resolve_any`: STALE for a deleted object; the live
//! filesystem, `.cairn` or a snapshot, whose reads run inside its gate: `Resolved::with`,
//! `snapdir.rs`), checks the caller's permission the way a local open would (search on
//! directories for LOOKUP, read on files and directories for READ and READDIR; a file's owner
//! may read it whatever its mode, as Linux's nfsd allows, since NFS has no open to have
//! checked it at), and answers with post-operation attributes so the client's cache stays
//! coherent.
//!
//! Directory cookies are cairn-fs's own (`DirEntry::cookie`: the entry's hash key, stable
//! across restarts; `snapdir.rs`'s for `.cairn`), so the cookie verifier is always zero. Uses
//! `context.rs`, `handle.rs`, `snapdir.rs` and `convert.rs`.

use super::context::NfsContext;
use super::convert::{Caller, MAY_EXEC, MAY_READ, MAY_WRITE, nfs_error};
use super::handle::{Place, Resolved};
pub use super::memory::IO_BYTES_MAX;
use super::snapdir::{self, CONTROL_DIR_COOKIE, CONTROL_DIR_NAME};
use cairn_fs::attrs::FileKind;
use cairn_nfs::nfs3::*;

/// Preferred READDIR size.
const DIR_PREF_BYTES: u32 = 64 * 1024;
/// Bytes of a READDIR(PLUS) reply besides its entries (header, attributes, verifier, eof).
const DIR_REPLY_OVERHEAD_BYTES: usize = 200;

pub fn getattr(ctx: &NfsContext, args: &HandleArgs) -> Nfs3Reply {
    Nfs3Reply::Getattr(match ctx.resolve_any(&args.object) {
        Ok(r) => Outcome::Ok(r.fattr()),
        Err(err) => Outcome::Fail(err, ()),
    })
}

pub fn lookup(ctx: &NfsContext, caller: &Caller, args: &DirOpArgs3) -> Nfs3Reply {
    let dir = match ctx.resolve_any(&args.dir) {
        Ok(dir) => dir,
        Err(err) => return Nfs3Reply::Lookup(Outcome::Fail(err, None)),
    };
    let dir_attr = Some(dir.fattr());
    if dir.attrs.kind != FileKind::Directory {
        return Nfs3Reply::Lookup(Outcome::Fail(Nfs3Error::NotDir, dir_attr));
    }
    if !caller.may(&dir.attrs, MAY_EXEC) {
        return Nfs3Reply::Lookup(Outcome::Fail(Nfs3Error::Acces, dir_attr));
    }
    let name = args.name.as_bytes();
    let result = ctx.control_lookup(&dir, name).unwrap_or_else(|| {
        // `..` of the export's root stays in it (the client never climbs out of its mount).
        if name == b".." && dir.is_live() && dir.object == dir.export.fs.root() {
            return Ok(dir.clone());
        }
        dir.with(|fs| fs.lookup(dir.object, name))
            .map(|(object, attrs)| dir.at(object, attrs))
    });
    Nfs3Reply::Lookup(match result {
        Ok(found) => Outcome::Ok(LookupOk {
            object: found.handle(),
            obj_attributes: Some(found.fattr()),
            dir_attributes: dir_attr,
        }),
        Err(err) => Outcome::Fail(nfs_error(&err), dir_attr),
    })
}

pub fn access(ctx: &NfsContext, caller: &Caller, args: &AccessArgs) -> Nfs3Reply {
    let r = match ctx.resolve_any(&args.object) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Access(Outcome::Fail(err, None)),
    };
    let mut granted = 0;
    let is_dir = r.attrs.kind == FileKind::Directory;
    // Nothing under `.cairn` can be changed.
    let readonly = !r.is_live() || r.export.fs.is_readonly();
    if caller.may(&r.attrs, MAY_READ) {
        granted |= access::READ;
    }
    if caller.may(&r.attrs, MAY_WRITE) && !readonly {
        granted |= access::MODIFY | access::EXTEND;
        if is_dir {
            granted |= access::DELETE;
        }
    }
    if caller.may(&r.attrs, MAY_EXEC) {
        granted |= if is_dir {
            access::LOOKUP
        } else {
            access::EXECUTE
        };
    }
    Nfs3Reply::Access(Outcome::Ok(AccessOk {
        obj_attributes: Some(r.fattr()),
        access: args.access & granted,
    }))
}

pub fn readlink(ctx: &NfsContext, args: &HandleArgs) -> Nfs3Reply {
    let r = match ctx.resolve_any(&args.object) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Readlink(Outcome::Fail(err, None)),
    };
    let attr = Some(r.fattr());
    if r.attrs.kind != FileKind::Symlink {
        return Nfs3Reply::Readlink(Outcome::Fail(Nfs3Error::Inval, attr));
    }
    Nfs3Reply::Readlink(match r.with(|fs| fs.readlink(r.object)) {
        Ok(target) => match NfsPath::new(target) {
            Ok(target) => Outcome::Ok(ReadlinkOk {
                symlink_attributes: attr,
                target,
            }),
            Err(_) => Outcome::Fail(Nfs3Error::NameTooLong, attr),
        },
        Err(err) => Outcome::Fail(nfs_error(&err), attr),
    })
}

/// Whether `caller` may read or write file `r`: by its mode, or as its owner (no open
/// checked the mode first, and a file made read-only after it was opened stays readable
/// and writable to the owner that opened it).
pub fn may_io(caller: &Caller, r: &Resolved, want: u32) -> bool {
    caller.uid == r.attrs.uid || caller.may(&r.attrs, want)
}

pub fn read(ctx: &NfsContext, caller: &Caller, args: &RangeArgs) -> Nfs3Reply {
    let r = match ctx.resolve_any(&args.file) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Read(Outcome::Fail(err, None)),
    };
    let attr = Some(r.fattr());
    let refusal = match r.attrs.kind {
        FileKind::File if may_io(caller, &r, MAY_READ) => None,
        FileKind::File => Some(Nfs3Error::Acces),
        FileKind::Directory => Some(Nfs3Error::IsDir),
        _ => Some(Nfs3Error::Inval),
    };
    if let Some(err) = refusal {
        return Nfs3Reply::Read(Outcome::Fail(err, attr));
    }
    let count = args.count_bytes.min(IO_BYTES_MAX) as usize;
    // The data and the size it is compared with, read in one go (a snapshot's under one hold
    // of its gate).
    let read = r.with(|fs| {
        let data = fs.read(r.object, args.offset_bytes, count)?;
        let after = fs.getattr(r.object).unwrap_or_else(|_| r.attrs.clone());
        Ok((data, after))
    });
    Nfs3Reply::Read(match read {
        Ok((data, after)) => {
            let end = args.offset_bytes.saturating_add(data.len() as u64);
            Outcome::Ok(ReadOk {
                eof: end >= after.size,
                file_attributes: Some(r.at(r.object, after).fattr()),
                data,
            })
        }
        Err(err) => Outcome::Fail(nfs_error(&err), attr),
    })
}

/// A listing's directory, checked: a directory the caller may read.
fn listed_dir(
    ctx: &NfsContext,
    caller: &Caller,
    dir: &FileHandle,
) -> Result<Resolved, (Nfs3Error, PostOpAttr)> {
    let r = ctx.resolve_any(dir).map_err(|err| (err, None))?;
    let attr = Some(r.fattr());
    if r.attrs.kind != FileKind::Directory {
        return Err((Nfs3Error::NotDir, attr));
    }
    if !caller.may(&r.attrs, MAY_READ) {
        return Err((Nfs3Error::Acces, attr));
    }
    Ok(r)
}

/// Encoded bytes of a READDIR entry: list link, fileid, name (padded), cookie.
fn entry_bytes(name_len: usize) -> usize {
    4 + 8 + 4 + name_len.div_ceil(4) * 4 + 8
}

/// Entries of `r` after `cookie` while `budget_bytes` lasts, each costing `cost(name_len)`;
/// whether the listing reached its end. The root of the live filesystem lists `.cairn` last
/// when `snapdir=visible` (and never a `.cairn` of its own, which it shadows); `.cairn` and
/// `.cairn/snapshot` list what `snapdir.rs` says.
fn gather(
    r: &Resolved,
    cookie: u64,
    budget_bytes: usize,
    cost: impl Fn(usize) -> usize,
) -> Result<(Vec<cairn_fs::DirEntry>, bool), cairn_fs::FsError> {
    let mut entries = Vec::new();
    let mut used = DIR_REPLY_OVERHEAD_BYTES;
    let mut eof = true;
    let mut take = |entry: &cairn_fs::DirEntry| {
        let bytes = cost(entry.name.len());
        if used + bytes > budget_bytes {
            eof = false;
            return false;
        }
        used += bytes;
        entries.push(entry.clone());
        true
    };
    if let Some(listing) = snapdir::control_listing(r) {
        for entry in listing?.iter().filter(|entry| entry.cookie > cookie) {
            if !take(entry) {
                break;
            }
        }
        return Ok((entries, eof));
    }
    let root = r.is_live() && r.object == r.export.fs.root();
    if root && cookie >= CONTROL_DIR_COOKIE {
        return Ok((entries, true));
    }
    let mut ended = true;
    r.with(|fs| {
        fs.readdir(r.object, cookie, |entry| {
            if root && entry.name == CONTROL_DIR_NAME {
                return true;
            }
            ended = take(entry);
            ended
        })
    })?;
    if root && ended && snapdir::visible(&r.export) {
        take(&snapdir::control_dir_entry());
    }
    Ok((entries, eof))
}

/// The file id a listing of `dir` gives `entry`: `..` of a snapshot's root is
/// `.cairn/snapshot`.
fn listed_fileid(dir: &Resolved, entry: &cairn_fs::DirEntry) -> u64 {
    let snapshot = matches!(dir.place, Place::Snapshot { .. });
    if snapshot && entry.name == b".." && dir.object == cairn_fs::ROOT_OBJECT {
        return super::handle::SNAPSHOT_DIR_FILEID;
    }
    entry.object
}

pub fn readdir(ctx: &NfsContext, caller: &Caller, args: &ReaddirArgs) -> Nfs3Reply {
    let r = match listed_dir(ctx, caller, &args.dir) {
        Ok(r) => r,
        Err((err, attr)) => return Nfs3Reply::Readdir(Outcome::Fail(err, attr)),
    };
    let budget = (args.count_bytes.min(IO_BYTES_MAX)) as usize;
    let (entries, eof) = match gather(&r, args.cookie, budget, entry_bytes) {
        Ok(found) => found,
        Err(err) => {
            let attr = Some(r.fattr());
            return Nfs3Reply::Readdir(Outcome::Fail(nfs_error(&err), attr));
        }
    };
    if entries.is_empty() && !eof {
        let attr = Some(r.fattr());
        return Nfs3Reply::Readdir(Outcome::Fail(Nfs3Error::TooSmall, attr));
    }
    let entries = entries
        .into_iter()
        .filter_map(|entry| {
            Some(Entry3 {
                fileid: listed_fileid(&r, &entry),
                name: Filename::new(entry.name).ok()?,
                cookie: entry.cookie,
            })
        })
        .collect();
    Nfs3Reply::Readdir(Outcome::Ok(DirListOk {
        dir_attributes: r.post_attr(),
        cookieverf: [0; 8],
        entries,
        eof,
    }))
}

pub fn readdirplus(ctx: &NfsContext, caller: &Caller, args: &ReaddirplusArgs) -> Nfs3Reply {
    let r = match listed_dir(ctx, caller, &args.dir) {
        Ok(r) => r,
        Err((err, attr)) => return Nfs3Reply::Readdirplus(Outcome::Fail(err, attr)),
    };
    // Attributes (4 + 84) and a handle (4 + 4 + 36) per entry on top of READDIR's.
    let plus = |len: usize| entry_bytes(len) + 88 + 44;
    let budget = (args.maxcount_bytes.min(IO_BYTES_MAX)) as usize;
    let (entries, eof) = match gather(&r, args.cookie, budget, plus) {
        Ok(found) => found,
        Err(err) => {
            let attr = Some(r.fattr());
            return Nfs3Reply::Readdirplus(Outcome::Fail(nfs_error(&err), attr));
        }
    };
    if entries.is_empty() && !eof {
        let attr = Some(r.fattr());
        return Nfs3Reply::Readdirplus(Outcome::Fail(Nfs3Error::TooSmall, attr));
    }
    let root = r.export.fs.root();
    let entries = entries
        .into_iter()
        .filter_map(|entry| {
            // What the entry leads to, as LOOKUP finds it (`..` of the export's root is the
            // root itself to the client); a snapshot destroyed since it was listed, or an
            // entry removed meanwhile, is listed without attributes.
            let target = ctx
                .control_lookup(&r, &entry.name)
                .unwrap_or_else(|| {
                    let object = if entry.name == b".." && r.is_live() && r.object == root {
                        root
                    } else {
                        entry.object
                    };
                    r.with(|fs| fs.getattr(object))
                        .map(|attrs| r.at(object, attrs))
                })
                .ok();
            Some(EntryPlus3 {
                fileid: target
                    .as_ref()
                    .map_or_else(|| listed_fileid(&r, &entry), |target| target.object),
                name: Filename::new(entry.name).ok()?,
                cookie: entry.cookie,
                name_handle: target.as_ref().map(Resolved::handle),
                name_attributes: target.as_ref().map(Resolved::fattr),
            })
        })
        .collect();
    Nfs3Reply::Readdirplus(Outcome::Ok(DirListOk {
        dir_attributes: r.post_attr(),
        cookieverf: [0; 8],
        entries,
        eof,
    }))
}

pub fn fsstat(ctx: &NfsContext, args: &HandleArgs) -> Nfs3Reply {
    let r = match ctx.resolve_any(&args.object) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Fsstat(Outcome::Fail(err, None)),
    };
    let (total_bytes, avail_bytes) = r.export.space();
    // A snapshot counts its own objects; `.cairn` is in the live filesystem.
    let space = r
        .with(|fs| Ok(fs.space(total_bytes, avail_bytes)))
        .unwrap_or_else(|_| r.export.fs.space(total_bytes, avail_bytes));
    // Inodes are not preallocated: as many more as 512-byte blocks fit.
    let free_files = space.available_bytes / 512;
    Nfs3Reply::Fsstat(Outcome::Ok(FsstatOk {
        obj_attributes: Some(r.fattr()),
        total_bytes: space.total_bytes,
        free_bytes: space.available_bytes,
        avail_bytes: space.available_bytes,
        total_files: space.used_objects + free_files,
        free_files,
        avail_files: free_files,
        invarsec: 0,
    }))
}

pub fn fsinfo(ctx: &NfsContext, args: &HandleArgs) -> Nfs3Reply {
    let r = match ctx.resolve_any(&args.object) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Fsinfo(Outcome::Fail(err, None)),
    };
    Nfs3Reply::Fsinfo(Outcome::Ok(FsinfoOk {
        obj_attributes: Some(r.fattr()),
        rtmax_bytes: IO_BYTES_MAX,
        rtpref_bytes: IO_BYTES_MAX,
        rtmult_bytes: 4096,
        wtmax_bytes: IO_BYTES_MAX,
        wtpref_bytes: IO_BYTES_MAX,
        wtmult_bytes: 4096,
        dtpref_bytes: DIR_PREF_BYTES,
        maxfilesize_bytes: i64::MAX as u64,
        time_delta: NfsTime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: fsf::LINK | fsf::SYMLINK | fsf::HOMOGENEOUS | fsf::CANSETTIME,
    }))
}

pub fn pathconf(ctx: &NfsContext, args: &HandleArgs) -> Nfs3Reply {
    let r = match ctx.resolve_any(&args.object) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Pathconf(Outcome::Fail(err, None)),
    };
    Nfs3Reply::Pathconf(Outcome::Ok(PathconfOk {
        obj_attributes: Some(r.fattr()),
        linkmax: u32::MAX,
        name_max: cairn_fs::NAME_BYTES_MAX as u32,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true,
    }))
}
