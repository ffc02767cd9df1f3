//! The pseudo filesystem (RFC 8881 §7.3) and the attributes of `fattr4`.
//!
//! v4 clients mount a path from one root (PUTROOTFH) instead of asking MOUNT. The root and
//! the directories above the shared filesystems are made up: a pseudo directory is a path
//! that starts the name (`POOL/DATASET`) of at least one shared filesystem, and lists the
//! next components of those names. LOOKUP of a path that is a shared filesystem crosses into
//! it (its root's handle, the same handle v3's MOUNT gives); LOOKUPP from a filesystem's root
//! climbs back into the pseudo directory above it. A shared filesystem below another shared
//! filesystem is reached only through v3 (the pseudo tree stops at the first one).
//!
//! A pseudo directory's handle is `cP`, a version byte and its path (at most 61 bytes: the
//! v3 handle type's 64; longer paths are not listed); it is read-only, owned by root, mode
//! 0555, in its own `fsid` (major 0), with a file id and change attribute hashed from its
//! path and its listing. Attributes of real objects come from v3's `fattr3` (the same
//! values v3 clients see), with the change attribute the ctime in nanoseconds and owners as
//! numeric strings.

use super::super::context::NfsContext;
use super::super::handle::shared;
use super::super::memory::IO_BYTES_MAX;
use super::super::sessions::LEASE_SECONDS;
use cairn_nfs::nfs3::{Fattr3, FileHandle, Ftype3, NfsTime3};
use cairn_nfs::nfs4::attrs::{AttrValues, Fsid4, Specdata4, supported};
use cairn_nfs::nfs4::types::{Bitmap4, Ftype4, Nfs4Fh, NfsTime4, Opaque4};
use std::collections::BTreeSet;

const PSEUDO_MAGIC: &[u8; 3] = b"cP\x01";
/// Longest pseudo directory path with a handle.
const PSEUDO_PATH_BYTES_MAX: usize = FileHandle::MAX_BYTES - PSEUDO_MAGIC.len();

/// The current (or saved) filehandle of a compound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fh {
    /// A pseudo directory: its path ("" is the root).
    Pseudo(String),
    /// A cairn handle (as v3's).
    Real(FileHandle),
}

impl Fh {
    pub fn to_wire(&self) -> Nfs4Fh {
        let bytes = match self {
            Fh::Pseudo(path) => [PSEUDO_MAGIC.as_slice(), path.as_bytes()].concat(),
            Fh::Real(handle) => handle.as_bytes().to_vec(),
        };
        Nfs4Fh::new(bytes).unwrap_or_default()
    }

    /// What a client's handle is: a pseudo directory's, or one for v3's resolution (which
    /// answers BADHANDLE or STALE itself); None: too long to be ours.
    pub fn from_wire(fh: &Nfs4Fh) -> Option<Fh> {
        let bytes = fh.as_bytes();
        if let Some(path) = bytes.strip_prefix(PSEUDO_MAGIC.as_slice()) {
            return Some(Fh::Pseudo(String::from_utf8(path.to_vec()).ok()?));
        }
        FileHandle::new(bytes.to_vec()).ok().map(Fh::Real)
    }
}

/// The names (`POOL/DATASET`) of every shared filesystem.
pub fn shared_names(ctx: &NfsContext) -> Vec<String> {
    let mut names = Vec::new();
    for pool in ctx.served.all() {
        for name in pool.dataset_names() {
            if pool
                .dataset_properties(&name)
                .is_ok_and(|properties| shared(&properties))
            {
                names.push(name);
            }
        }
    }
    names
}

/// What a pseudo directory's entry `name` leads to.
pub enum PseudoChild {
    Pseudo(String),
    /// A shared filesystem (its name).
    Export(String),
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}/{name}")
    }
}

/// The entries of pseudo directory `path` (None: it is not one any more).
pub fn pseudo_children(ctx: &NfsContext, path: &str) -> Option<Vec<(String, PseudoChild)>> {
    let names = shared_names(ctx);
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    };
    let mut seen = BTreeSet::new();
    let mut children = Vec::new();
    let mut exists = path.is_empty();
    for name in &names {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        exists = true;
        let component = rest.split('/').next().unwrap_or(rest);
        if component.is_empty() || !seen.insert(component.to_string()) {
            continue;
        }
        let child = join(path, component);
        // The first shared filesystem on the way ends the pseudo tree.
        if names.contains(&child) {
            children.push((component.to_string(), PseudoChild::Export(child)));
        } else if child.len() <= PSEUDO_PATH_BYTES_MAX {
            children.push((component.to_string(), PseudoChild::Pseudo(child)));
        }
    }
    exists.then_some(children)
}

/// FNV-1a of some bytes: pseudo directories' file ids and change attributes.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A pseudo directory's file id (bit 62 set: no object number or control-directory id has it).
pub fn pseudo_fileid(path: &str) -> u64 {
    (fnv(path.as_bytes()) >> 2) | (1 << 62)
}

fn time4(time: &NfsTime3) -> NfsTime4 {
    NfsTime4 {
        seconds: i64::from(time.seconds),
        nseconds: time.nseconds,
    }
}

fn numeric(id: u32) -> Opaque4 {
    Opaque4::new(id.to_string().into_bytes()).unwrap_or_default()
}

/// Attributes every object shares: what the server and its filesystems can do.
fn common(values: &mut AttrValues) {
    values.supported_attrs = Some(supported());
    values.fh_expire_type = Some(0);
    values.link_support = Some(true);
    values.symlink_support = Some(true);
    values.named_attr = Some(false);
    values.unique_handles = Some(true);
    values.lease_time = Some(LEASE_SECONDS);
    values.rdattr_error = Some(0);
    values.cansettime = Some(true);
    values.case_insensitive = Some(false);
    values.case_preserving = Some(true);
    values.chown_restricted = Some(true);
    values.homogeneous = Some(true);
    values.maxfilesize = Some(i64::MAX as u64);
    values.maxlink = Some(u32::MAX);
    values.maxname = Some(cairn_fs::NAME_BYTES_MAX as u32);
    values.maxread = Some(u64::from(IO_BYTES_MAX));
    values.maxwrite = Some(u64::from(IO_BYTES_MAX));
    values.no_trunc = Some(true);
    values.time_delta = Some(NfsTime4 {
        seconds: 0,
        nseconds: 1,
    });
    values.suppattr_exclcreat = Some(Bitmap4::from_bits(&[
        cairn_nfs::nfs4::attrs::attr::mode,
        cairn_nfs::nfs4::attrs::attr::owner,
        cairn_nfs::nfs4::attrs::attr::owner_group,
    ]));
}

pub fn ftype4(ftype: Ftype3) -> Ftype4 {
    match ftype {
        Ftype3::Reg => Ftype4::Reg,
        Ftype3::Dir => Ftype4::Dir,
        Ftype3::Blk => Ftype4::Blk,
        Ftype3::Chr => Ftype4::Chr,
        Ftype3::Lnk => Ftype4::Lnk,
        Ftype3::Sock => Ftype4::Sock,
        Ftype3::Fifo => Ftype4::Fifo,
    }
}

/// Space figures of an object's filesystem: (total, available, used objects).
pub type Space = (u64, u64, u64);

/// The attributes of a real object from its v3 attributes.
pub fn real_values(fattr: &Fattr3, fh: &Fh, space: Space) -> AttrValues {
    let mut values = AttrValues::default();
    common(&mut values);
    let (total_bytes, avail_bytes, used_objects) = space;
    let free_files = avail_bytes / 512;
    values.r#type = Some(ftype4(fattr.ftype));
    values.change =
        Some(u64::from(fattr.ctime.seconds) * 1_000_000_000 + u64::from(fattr.ctime.nseconds));
    values.size = Some(fattr.size_bytes);
    values.fsid = Some(Fsid4 {
        major: fattr.fsid,
        minor: 0,
    });
    values.filehandle = Some(fh.to_wire());
    values.fileid = Some(fattr.fileid);
    values.mounted_on_fileid = Some(fattr.fileid);
    values.files_avail = Some(free_files);
    values.files_free = Some(free_files);
    values.files_total = Some(used_objects + free_files);
    values.mode = Some(fattr.mode & 0o7777);
    values.numlinks = Some(fattr.nlink);
    values.owner = Some(numeric(fattr.uid));
    values.owner_group = Some(numeric(fattr.gid));
    values.rawdev = Some(Specdata4 {
        major: fattr.rdev.major,
        minor: fattr.rdev.minor,
    });
    values.space_avail = Some(avail_bytes);
    values.space_free = Some(avail_bytes);
    values.space_total = Some(total_bytes);
    values.space_used = Some(fattr.used_bytes);
    values.time_access = Some(time4(&fattr.atime));
    values.time_metadata = Some(time4(&fattr.ctime));
    values.time_modify = Some(time4(&fattr.mtime));
    values
}

/// The attributes of pseudo directory `path` with `entries` entries.
pub fn pseudo_values(path: &str, entries: &[(String, PseudoChild)]) -> AttrValues {
    let mut values = AttrValues::default();
    common(&mut values);
    let listing: Vec<u8> = entries
        .iter()
        .flat_map(|(name, _)| name.bytes().chain([0]))
        .collect();
    let fileid = pseudo_fileid(path);
    let epoch = NfsTime4 {
        seconds: 0,
        nseconds: 0,
    };
    values.r#type = Some(Ftype4::Dir);
    values.change = Some(fnv(&listing));
    values.size = Some(entries.len() as u64);
    values.fsid = Some(Fsid4 { major: 0, minor: 1 });
    values.filehandle = Some(Fh::Pseudo(path.to_string()).to_wire());
    values.fileid = Some(fileid);
    values.mounted_on_fileid = Some(fileid);
    values.files_avail = Some(0);
    values.files_free = Some(0);
    values.files_total = Some(0);
    values.mode = Some(0o555);
    values.numlinks = Some(2 + entries.len() as u32);
    values.owner = Some(numeric(0));
    values.owner_group = Some(numeric(0));
    values.rawdev = Some(Specdata4 { major: 0, minor: 0 });
    values.space_avail = Some(0);
    values.space_free = Some(0);
    values.space_total = Some(0);
    values.space_used = Some(0);
    values.time_access = Some(epoch.clone());
    values.time_metadata = Some(epoch.clone());
    values.time_modify = Some(epoch);
    values
}
