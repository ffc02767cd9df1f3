//! Send and receive helpers shared by the receive tests: a stream of a snapshot, a receive
//! that returns the snapshot made or the error's text, and comparisons of two snapshots'
//! objects and of two filesystems' trees.

use cairn_engine::{Pool, ReceiveOptions};
use cairn_fs::Filesystem;

pub fn send(pool: &Pool, snapshot: &str, from: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    pool.send(snapshot, from, &mut out, &mut |_| {}).unwrap();
    out
}

pub fn receive(pool: &Pool, target: &str, stream: &[u8]) -> Result<String, String> {
    let mut input = stream;
    pool.receive(target, &mut input, ReceiveOptions::default())
        .map(|summary| summary.snapshot)
        .map_err(|err| err.to_string())
}

/// Two snapshots' object sets hold the same objects: type, block size, bonus, every block.
pub fn assert_same_objects(a: &Pool, a_name: &str, b: &Pool, b_name: &str) {
    let (left, right) = (
        a.snapshot_objset(a_name).unwrap(),
        b.snapshot_objset(b_name).unwrap(),
    );
    let bound = left.object_id_bound().max(right.object_id_bound());
    for object in 1..bound {
        let (l, r) = (left.dnode(object).unwrap(), right.dnode(object).unwrap());
        assert_eq!(l.is_free(), r.is_free(), "object {object}");
        if l.is_free() {
            continue;
        }
        assert_eq!(l.object_type, r.object_type, "object {object}");
        assert_eq!(l.data_block_size, r.data_block_size, "object {object}");
        assert_eq!(l.bonus, r.bonus, "object {object} bonus");
        assert_eq!(l.max_block_id, r.max_block_id, "object {object}");
        for blkid in 0..=l.max_block_id {
            assert_eq!(
                left.read_block(object, blkid).unwrap(),
                right.read_block(object, blkid).unwrap(),
                "object {object} block {blkid}"
            );
        }
    }
}

/// Walks both trees from their roots, comparing every entry's attributes (times included;
/// access times only if `atime`, and only at an inode's first name: reads move them, relatime,
/// each side at its own moment), xattrs, symlink targets and contents. `seen` holds the inodes
/// met so far.
pub fn assert_same_tree(
    (a, b): (&Filesystem, &Filesystem),
    (dir_a, dir_b): (u64, u64),
    path: &str,
    atime: bool,
    seen: &mut std::collections::BTreeSet<u64>,
) {
    let entries = |fs: &Filesystem, dir: u64| {
        let mut out = Vec::new();
        fs.readdir(dir, 0, |entry| {
            out.push((entry.name.clone(), entry.object, entry.kind));
            true
        })
        .unwrap();
        out.sort();
        out
    };
    let (left, right) = (entries(a, dir_a), entries(b, dir_b));
    assert_eq!(left.len(), right.len(), "{path}: entries");
    for ((name, ia, kind), (name_b, ib, kind_b)) in left.into_iter().zip(right) {
        assert_eq!((&name, kind), (&name_b, kind_b), "{path}");
        if name == b"." || name == b".." {
            continue;
        }
        let here = format!("{path}/{}", String::from_utf8_lossy(&name));
        let (attrs_a, attrs_b) = (a.getattr(ia).unwrap(), b.getattr(ib).unwrap());
        let first_name = seen.insert(ia);
        let fields = |x: &cairn_fs::attrs::InodeAttrs| {
            let access = if atime && first_name {
                x.atime
            } else {
                x.mtime
            };
            (
                x.kind, x.mode, x.uid, x.gid, x.links, x.size, access, x.mtime, x.ctime, x.crtime,
            )
        };
        assert_eq!(fields(&attrs_a), fields(&attrs_b), "{here}");
        let (mut xa, mut xb) = (a.listxattr(ia).unwrap(), b.listxattr(ib).unwrap());
        xa.sort();
        xb.sort();
        assert_eq!(xa, xb, "{here}: xattr names");
        for xattr in &xa {
            assert_eq!(
                a.getxattr(ia, xattr).unwrap(),
                b.getxattr(ib, xattr).unwrap(),
                "{here}"
            );
        }
        match kind {
            cairn_fs::attrs::FileKind::Directory => {
                assert_same_tree((a, b), (ia, ib), &here, atime, seen)
            }
            cairn_fs::attrs::FileKind::Symlink => {
                assert_eq!(a.readlink(ia).unwrap(), b.readlink(ib).unwrap(), "{here}")
            }
            _ => assert_eq!(
                a.read(ia, 0, attrs_a.size as usize).unwrap(),
                b.read(ib, 0, attrs_b.size as usize).unwrap(),
                "{here}: content"
            ),
        }
    }
}
