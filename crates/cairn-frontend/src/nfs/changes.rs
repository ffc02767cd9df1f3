//! The NFSv3 procedures that change the namespace or attributes: SETATTR, CREATE, MKDIR,
//! SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK.
//!
//! Each checks what a local caller would need (write and search permission on the
//! directories it changes; the sticky bit; ownership for SETATTR) and then makes one
//! cairn-fs call, which joins the open txg and is logged in the intent log like every change,
//! and then commits the log before the reply (`commit`): an NFSv3 client takes a namespace or
//! attribute change as done once answered (RFC 1813 wants it on stable storage; Linux's nfsd
//! commits the metadata, which on ZFS commits the ZIL), and has nothing to resend if the
//! server then stops. `sync=disabled` skips the commit, as it skips every other. New inodes belong to the caller (root
//! squashed) and take a set-group-ID directory's group, as the FUSE front end does.
//! Retransmissions of these calls are answered from the duplicate-request cache
//! (`connection.rs`), so none of them runs twice. Nothing under `.cairn` changes: a handle
//! there answers ROFS, and `.cairn` in the root EXIST (`dir_to_change`). Uses `context.rs`, `handle.rs`,
//! `convert.rs` and `procs.rs` (`may_io`).

use super::context::NfsContext;
use super::convert::{
    Caller, MAY_EXEC, MAY_WRITE, nfs_error, rdev, set_attrs, timestamp, wcc_after,
};
use super::handle::Resolved;
use super::procs::may_io;
use super::snapdir;
use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::{FsError, NewInode, RenameMode, SetAttrs};
use cairn_nfs::nfs3::*;

/// A refusal and the directory's wcc data (boxed: the pair is large).
type Failed = Box<(Nfs3Error, WccData)>;

/// Makes a change just made durable (the fsync path: the namespace changes before it go
/// with it). A failure that may have lost UNSTABLE writes moved the pool's durability epoch,
/// and so the verifier, wherever it was met.
fn commit(fs: &cairn_fs::Filesystem, object: u64) -> Result<(), Nfs3Error> {
    fs.fsync(object).map_err(|err| nfs_error(&err))
}

/// A directory the caller may change (write and search permission) at its entry `name`:
/// ROFS under `.cairn` (`NfsContext::resolve`), EXIST for `.cairn` in the root (the name is
/// the control directory's, which exists and cannot be replaced, taken or removed).
fn dir_to_change(
    ctx: &NfsContext,
    caller: &Caller,
    dir: &FileHandle,
    name: &Filename,
) -> Result<Resolved, Failed> {
    let r = ctx
        .resolve(dir)
        .map_err(|err| Box::new((err, WccData::empty())))?;
    let wcc = wcc_after(Some(r.export.fattr(r.object, &r.attrs)));
    if r.attrs.kind != FileKind::Directory {
        return Err(Box::new((Nfs3Error::NotDir, wcc)));
    }
    if snapdir::is_control_name(&r, name.as_bytes()) {
        return Err(Box::new((Nfs3Error::Exist, wcc)));
    }
    if !caller.may(&r.attrs, MAY_WRITE | MAY_EXEC) {
        return Err(Box::new((Nfs3Error::Acces, wcc)));
    }
    Ok(r)
}

fn dir_wcc(dir: &Resolved) -> WccData {
    wcc_after(dir.export.post_attr(dir.object))
}

/// The new inode `caller` makes in `dir`.
fn new_inode(caller: &Caller, dir: &Resolved, kind: FileKind, mode: u32, rdev: u64) -> NewInode {
    let mut new = NewInode {
        kind,
        mode: mode & 0o7777,
        uid: caller.uid,
        gid: caller.gid,
        rdev,
    };
    if dir.attrs.mode & 0o2000 != 0 {
        new.gid = dir.attrs.gid;
        if kind == FileKind::Directory {
            new.mode |= 0o2000;
        }
    }
    new
}

/// The reply of a call that made `result` in `dir`, applying the rest of `sattr` (size,
/// times) to the new inode first.
fn made(
    dir: &Resolved,
    result: Result<(u64, InodeAttrs), FsError>,
    sattr: Option<&Sattr3>,
) -> Outcome<CreateOk, WccData> {
    let (object, mut attrs) = match result {
        Ok(made) => made,
        Err(err) => return Outcome::Fail(nfs_error(&err), dir_wcc(dir)),
    };
    if let Some(sattr) = sattr {
        let changes = SetAttrs {
            mode: None,
            uid: None,
            gid: None,
            ..set_attrs(sattr, Timestamp::now())
        };
        if changes != SetAttrs::default() {
            match dir.export.fs.setattr(object, changes) {
                Ok(after) => attrs = after,
                Err(err) => return Outcome::Fail(nfs_error(&err), dir_wcc(dir)),
            }
        }
    }
    if let Err(err) = commit(&dir.export.fs, object) {
        return Outcome::Fail(err, dir_wcc(dir));
    }
    Outcome::Ok(CreateOk {
        object: Some(dir.export.handle(object, &attrs)),
        obj_attributes: Some(dir.export.fattr(object, &attrs)),
        dir_wcc: dir_wcc(dir),
    })
}

/// Why `caller` may not make the changes `sattr` asks of `r`, if it may not.
fn setattr_refusal(caller: &Caller, r: &Resolved, sattr: &Sattr3) -> Option<Nfs3Error> {
    let owner = caller.is_root() || caller.uid == r.attrs.uid;
    if sattr.mode.is_some() && !owner {
        return Some(Nfs3Error::Perm);
    }
    if sattr.uid.is_some_and(|uid| uid != r.attrs.uid) && !caller.is_root() {
        return Some(Nfs3Error::Perm);
    }
    if let Some(gid) = sattr.gid
        && gid != r.attrs.gid
        && !(caller.is_root() || (owner && caller.in_group(gid)))
    {
        return Some(Nfs3Error::Perm);
    }
    if sattr.size_bytes.is_some() {
        match r.attrs.kind {
            FileKind::File if may_io(caller, r, MAY_WRITE) => {}
            FileKind::File => return Some(Nfs3Error::Acces),
            FileKind::Directory => return Some(Nfs3Error::IsDir),
            _ => return Some(Nfs3Error::Inval),
        }
    }
    let client_time = |how: &SetTime| matches!(how, SetTime::ClientTime(_));
    let server_time = |how: &SetTime| matches!(how, SetTime::ServerTime);
    if (client_time(&sattr.atime) || client_time(&sattr.mtime)) && !owner {
        return Some(Nfs3Error::Perm);
    }
    if (server_time(&sattr.atime) || server_time(&sattr.mtime))
        && !owner
        && !caller.may(&r.attrs, MAY_WRITE)
    {
        return Some(Nfs3Error::Acces);
    }
    None
}

pub fn setattr(ctx: &NfsContext, caller: &Caller, args: &SetattrArgs) -> Nfs3Reply {
    let r = match ctx.resolve(&args.object) {
        Ok(r) => r,
        Err(err) => return Nfs3Reply::Setattr(Outcome::Fail(err, WccData::empty())),
    };
    let wcc_now = || wcc_after(r.export.post_attr(r.object));
    if let Some(guard) = &args.guard
        && timestamp(guard) != r.attrs.ctime
    {
        return Nfs3Reply::Setattr(Outcome::Fail(Nfs3Error::NotSync, wcc_now()));
    }
    if let Some(err) = setattr_refusal(caller, &r, &args.new_attributes) {
        return Nfs3Reply::Setattr(Outcome::Fail(err, wcc_now()));
    }
    let changes = set_attrs(&args.new_attributes, Timestamp::now());
    let result = r.export.fs.setattr(r.object, changes);
    let strips = changes.uid.is_some() || changes.gid.is_some() || changes.size.is_some();
    if result.is_ok() && strips && !caller.is_root() && changes.mode.is_none() {
        // A change of owner or size by an unprivileged caller takes set-ID bits away.
        let _ = r.export.fs.remove_privileges(r.object);
    }
    let result = result
        .map_err(|err| nfs_error(&err))
        .and_then(|_| commit(&r.export.fs, r.object));
    Nfs3Reply::Setattr(match result {
        Ok(()) => Outcome::Ok(wcc_now()),
        Err(err) => Outcome::Fail(err, wcc_now()),
    })
}

/// The times an exclusive create keeps its verifier in (as Linux's nfsd does): atime's and
/// mtime's seconds.
fn verifier_times(verf: &CreateVerf) -> (Timestamp, Timestamp) {
    let secs = |bytes: &[u8]| {
        let mut word = [0; 4];
        word.copy_from_slice(bytes);
        Timestamp {
            secs: i64::from(u32::from_be_bytes(word)),
            nanos: 0,
        }
    };
    (secs(&verf[..4]), secs(&verf[4..]))
}

pub fn create(ctx: &NfsContext, caller: &Caller, args: &CreateArgs) -> Nfs3Reply {
    let dir = match dir_to_change(ctx, caller, &args.location.dir, &args.location.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Nfs3Reply::Create(Outcome::Fail(err, wcc));
        }
    };
    let fs = &dir.export.fs;
    let name = args.location.name.as_bytes();
    let existing = fs.lookup(dir.object, name).ok();
    let reply = match (&args.how, existing) {
        (CreateHow::Guarded(_), Some(_)) => Outcome::Fail(Nfs3Error::Exist, dir_wcc(&dir)),
        (CreateHow::Unchecked(sattr), Some((object, attrs))) => {
            if attrs.kind != FileKind::File {
                Outcome::Fail(Nfs3Error::Exist, dir_wcc(&dir))
            } else {
                // An existing file is opened as O_CREAT without O_EXCL would: truncated if
                // a size is asked, which needs the right to write it.
                let mut sattr = sattr.clone();
                sattr.mode = None;
                let file = dir.at(object, attrs.clone());
                if sattr.size_bytes.is_some() && !may_io(caller, &file, MAY_WRITE) {
                    Outcome::Fail(Nfs3Error::Acces, dir_wcc(&dir))
                } else {
                    made(&dir, Ok((object, attrs)), Some(&sattr))
                }
            }
        }
        (CreateHow::Exclusive(verf), Some((object, attrs))) => {
            let (atime, mtime) = verifier_times(verf);
            if attrs.kind == FileKind::File && attrs.atime == atime && attrs.mtime == mtime {
                made(&dir, Ok((object, attrs)), None)
            } else {
                Outcome::Fail(Nfs3Error::Exist, dir_wcc(&dir))
            }
        }
        (CreateHow::Unchecked(sattr) | CreateHow::Guarded(sattr), None) => {
            let new = new_inode(caller, &dir, FileKind::File, sattr.mode.unwrap_or(0o644), 0);
            made(&dir, fs.create(dir.object, name, new), Some(sattr))
        }
        (CreateHow::Exclusive(verf), None) => {
            let new = new_inode(caller, &dir, FileKind::File, 0o600, 0);
            let (atime, mtime) = verifier_times(verf);
            let sattr = Sattr3 {
                atime: SetTime::ClientTime(super::convert::nfs_time(atime)),
                mtime: SetTime::ClientTime(super::convert::nfs_time(mtime)),
                ..Sattr3::default()
            };
            made(&dir, fs.create(dir.object, name, new), Some(&sattr))
        }
    };
    Nfs3Reply::Create(reply)
}

pub fn mkdir(ctx: &NfsContext, caller: &Caller, args: &MkdirArgs) -> Nfs3Reply {
    let dir = match dir_to_change(ctx, caller, &args.location.dir, &args.location.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Nfs3Reply::Mkdir(Outcome::Fail(err, wcc));
        }
    };
    let mode = args.attributes.mode.unwrap_or(0o755);
    let new = new_inode(caller, &dir, FileKind::Directory, mode, 0);
    let result = dir
        .export
        .fs
        .mkdir(dir.object, args.location.name.as_bytes(), new);
    Nfs3Reply::Mkdir(made(&dir, result, Some(&args.attributes)))
}

pub fn symlink(ctx: &NfsContext, caller: &Caller, args: &SymlinkArgs) -> Nfs3Reply {
    let dir = match dir_to_change(ctx, caller, &args.location.dir, &args.location.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Nfs3Reply::Symlink(Outcome::Fail(err, wcc));
        }
    };
    let new = new_inode(caller, &dir, FileKind::Symlink, 0o777, 0);
    let result = dir.export.fs.symlink(
        dir.object,
        args.location.name.as_bytes(),
        args.target.as_bytes(),
        new,
    );
    Nfs3Reply::Symlink(made(&dir, result, None))
}

pub fn mknod(ctx: &NfsContext, caller: &Caller, args: &MknodArgs) -> Nfs3Reply {
    let dir = match dir_to_change(ctx, caller, &args.location.dir, &args.location.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Nfs3Reply::Mknod(Outcome::Fail(err, wcc));
        }
    };
    let (kind, sattr, device) = match &args.what {
        MknodData::Chr(sattr, spec) => (FileKind::CharDevice, sattr, rdev(spec)),
        MknodData::Blk(sattr, spec) => (FileKind::BlockDevice, sattr, rdev(spec)),
        MknodData::Sock(sattr) => (FileKind::Socket, sattr, 0),
        MknodData::Fifo(sattr) => (FileKind::Fifo, sattr, 0),
        MknodData::NotSpecial(_) => {
            return Nfs3Reply::Mknod(Outcome::Fail(Nfs3Error::BadType, dir_wcc(&dir)));
        }
    };
    // Device nodes need privilege, which a squashed root does not have.
    if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && !caller.is_root() {
        return Nfs3Reply::Mknod(Outcome::Fail(Nfs3Error::Perm, dir_wcc(&dir)));
    }
    let new = new_inode(caller, &dir, kind, sattr.mode.unwrap_or(0o644), device);
    let result = dir
        .export
        .fs
        .create(dir.object, args.location.name.as_bytes(), new);
    Nfs3Reply::Mknod(made(&dir, result, Some(sattr)))
}

/// Whether `caller` may take `name` out of `dir` (the sticky bit).
fn may_take_away(caller: &Caller, dir: &Resolved, name: &[u8]) -> Result<(), Nfs3Error> {
    match dir.export.fs.lookup(dir.object, name) {
        Ok((_, victim)) if !caller.may_unlink_from(&dir.attrs, &victim) => Err(Nfs3Error::Acces),
        Ok(_) => Ok(()),
        Err(err) => Err(nfs_error(&err)),
    }
}

fn remove_entry(
    ctx: &NfsContext,
    caller: &Caller,
    args: &DirOpArgs3,
    rmdir: bool,
) -> Outcome<WccData, WccData> {
    let dir = match dir_to_change(ctx, caller, &args.dir, &args.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Outcome::Fail(err, wcc);
        }
    };
    let name = args.name.as_bytes();
    if let Err(err) = may_take_away(caller, &dir, name) {
        return Outcome::Fail(err, dir_wcc(&dir));
    }
    let result = if rmdir {
        dir.export.fs.rmdir(dir.object, name)
    } else {
        dir.export.fs.unlink(dir.object, name)
    };
    let result = result
        .map_err(|err| nfs_error(&err))
        .and_then(|()| commit(&dir.export.fs, dir.object));
    match result {
        Ok(()) => Outcome::Ok(dir_wcc(&dir)),
        Err(err) => Outcome::Fail(err, dir_wcc(&dir)),
    }
}

pub fn remove(ctx: &NfsContext, caller: &Caller, args: &DirOpArgs3) -> Nfs3Reply {
    Nfs3Reply::Remove(remove_entry(ctx, caller, args, false))
}

pub fn rmdir(ctx: &NfsContext, caller: &Caller, args: &DirOpArgs3) -> Nfs3Reply {
    Nfs3Reply::Rmdir(remove_entry(ctx, caller, args, true))
}

pub fn rename(ctx: &NfsContext, caller: &Caller, args: &RenameArgs) -> Nfs3Reply {
    let empty = || RenameWcc {
        fromdir_wcc: WccData::empty(),
        todir_wcc: WccData::empty(),
    };
    let from = match dir_to_change(ctx, caller, &args.from.dir, &args.from.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Nfs3Reply::Rename(Outcome::Fail(
                err,
                RenameWcc {
                    fromdir_wcc: wcc,
                    ..empty()
                },
            ));
        }
    };
    let to = match dir_to_change(ctx, caller, &args.to.dir, &args.to.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return Nfs3Reply::Rename(Outcome::Fail(
                err,
                RenameWcc {
                    todir_wcc: wcc,
                    ..empty()
                },
            ));
        }
    };
    let wccs = || RenameWcc {
        fromdir_wcc: dir_wcc(&from),
        todir_wcc: dir_wcc(&to),
    };
    if from.export.dataset_id != to.export.dataset_id
        || from.export.pool_guid != to.export.pool_guid
    {
        return Nfs3Reply::Rename(Outcome::Fail(Nfs3Error::XDev, wccs()));
    }
    let (old_name, new_name) = (args.from.name.as_bytes(), args.to.name.as_bytes());
    let target_ok = match to.export.fs.lookup(to.object, new_name) {
        Ok((_, victim)) => caller.may_unlink_from(&to.attrs, &victim),
        Err(_) => true,
    };
    if let Err(err) = may_take_away(caller, &from, old_name) {
        return Nfs3Reply::Rename(Outcome::Fail(err, wccs()));
    }
    if !target_ok {
        return Nfs3Reply::Rename(Outcome::Fail(Nfs3Error::Acces, wccs()));
    }
    let result = from.export.fs.rename(
        from.object,
        old_name,
        to.object,
        new_name,
        RenameMode::Replace,
    );
    let result = result
        .map_err(|err| nfs_error(&err))
        .and_then(|()| commit(&to.export.fs, to.object));
    Nfs3Reply::Rename(match result {
        Ok(()) => Outcome::Ok(wccs()),
        Err(err) => Outcome::Fail(err, wccs()),
    })
}

pub fn link(ctx: &NfsContext, caller: &Caller, args: &LinkArgs) -> Nfs3Reply {
    let fail = |err, file: Option<Fattr3>, wcc| {
        Nfs3Reply::Link(Outcome::Fail(
            err,
            LinkWcc {
                file_attributes: file,
                linkdir_wcc: wcc,
            },
        ))
    };
    let file = match ctx.resolve(&args.file) {
        Ok(file) => file,
        Err(err) => return fail(err, None, WccData::empty()),
    };
    let dir = match dir_to_change(ctx, caller, &args.link.dir, &args.link.name) {
        Ok(dir) => dir,
        Err(failed) => {
            let (err, wcc) = *failed;
            return fail(err, file.export.post_attr(file.object), wcc);
        }
    };
    if file.export.dataset_id != dir.export.dataset_id
        || file.export.pool_guid != dir.export.pool_guid
    {
        return fail(
            Nfs3Error::XDev,
            file.export.post_attr(file.object),
            dir_wcc(&dir),
        );
    }
    if file.attrs.kind == FileKind::Directory {
        return fail(
            Nfs3Error::IsDir,
            file.export.post_attr(file.object),
            dir_wcc(&dir),
        );
    }
    let result = dir
        .export
        .fs
        .link(file.object, dir.object, args.link.name.as_bytes())
        .map_err(|err| nfs_error(&err))
        .and_then(|_| commit(&dir.export.fs, dir.object));
    let file_attributes = file.export.post_attr(file.object);
    match result {
        Ok(()) => Nfs3Reply::Link(Outcome::Ok(LinkWcc {
            file_attributes,
            linkdir_wcc: dir_wcc(&dir),
        })),
        Err(err) => fail(err, file_attributes, dir_wcc(&dir)),
    }
}
