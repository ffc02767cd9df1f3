//! The filesystem crash test's model of a thread's subtree (`Tree`: its inodes, what `getattr`
//! and reads must show of them, `seen`), reading a subtree back (`read_tree`), and the words
//! and maps a failure prints (`difference`, `sector_maps`). A model state is compared whole
//! (names, inode numbers, kinds, modes, sizes, link counts, parents, bytes, xattrs), or split
//! as the intent log commits it: the namespace (`namespace_view`), which every fsync commits,
//! and each inode's own part (`Own`: mode, a file's bytes), which only its own fsync does.

use crate::common::Rng;
use cairn_fs::attrs::FileKind;
use cairn_fs::{Filesystem, NewInode};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where the log may split a write (see `Tree::own_torn`).
const SECTOR_BYTES: u64 = 512;

/// One inode as a model keeps it (and as it is read back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: FileKind,
    pub mode: u32,
    /// A file's bytes, or a symlink's target.
    pub data: Arc<Vec<u8>>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// A directory's entries: name to inode.
    pub entries: BTreeMap<Vec<u8>, u64>,
}

impl Node {
    pub fn new(kind: FileKind, mode: u32, data: Vec<u8>) -> Node {
        Node {
            kind,
            mode,
            data: Arc::new(data),
            xattrs: BTreeMap::new(),
            entries: BTreeMap::new(),
        }
    }
}

/// A thread's subtree: its inodes by object number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    pub top: u64,
    pub nodes: BTreeMap<u64, Node>,
    /// Files the thread holds open (`open_inode`).
    pub open: Vec<u64>,
    /// Open files whose last name went away: still written, truncated and fsynced, gone
    /// after a crash (the delete queue is drained at import).
    pub orphans: BTreeMap<u64, Node>,
    /// A create that failed (the power went): it may have happened all the same (its record
    /// reached the log), under an object number it never returned: (directory, name, inode).
    pub unsure_create: Option<(u64, Vec<u8>, Node)>,
    /// The write that made this state from the one before, if it was one: (object, offset,
    /// length, seed of its bytes).
    pub last_write: Option<(u64, u64, u64, u64)>,
}

/// An inode with what is derived from the tree's shape: what `getattr` must say.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub node: Node,
    pub size: u64,
    pub links: u64,
    /// A directory's parent.
    pub parent: Option<u64>,
}

impl Tree {
    pub fn new(top: u64) -> Tree {
        let mut nodes = BTreeMap::new();
        nodes.insert(top, Node::new(FileKind::Directory, 0o755, Vec::new()));
        Tree {
            top,
            nodes,
            open: Vec::new(),
            orphans: BTreeMap::new(),
            unsure_create: None,
            last_write: None,
        }
    }

    pub fn node(&self, object: u64) -> &Node {
        self.nodes
            .get(&object)
            .or_else(|| self.orphans.get(&object))
            .expect("model inode")
    }

    pub fn node_mut(&mut self, object: u64) -> &mut Node {
        match self.nodes.get_mut(&object) {
            Some(node) => node,
            None => self.orphans.get_mut(&object).expect("model inode"),
        }
    }

    /// Inodes (named, and open orphans) that `want`.
    pub fn objects_of(&self, want: impl Fn(&Node) -> bool) -> Vec<u64> {
        self.nodes
            .iter()
            .chain(self.orphans.iter())
            .filter(|(_, node)| want(node))
            .map(|(object, _)| *object)
            .collect()
    }

    /// Named inodes that `want`.
    pub fn named_of(&self, want: impl Fn(&Node) -> bool) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, node)| want(node))
            .map(|(object, _)| *object)
            .collect()
    }

    pub fn dirs(&self) -> Vec<u64> {
        self.objects_of(|node| node.kind == FileKind::Directory)
    }

    /// Every (directory, name, inode) entry.
    pub fn entries(&self) -> Vec<(u64, Vec<u8>, u64)> {
        let mut out = Vec::new();
        for (dir, node) in &self.nodes {
            for (name, object) in &node.entries {
                out.push((*dir, name.clone(), *object));
            }
        }
        out
    }

    pub fn parent_of(&self, dir: u64) -> Option<u64> {
        self.nodes.iter().find_map(|(parent, node)| {
            node.entries
                .values()
                .any(|object| *object == dir)
                .then_some(*parent)
        })
    }

    /// True when `dir` is `ancestor` or lies beneath it.
    pub fn within(&self, ancestor: u64, dir: u64) -> bool {
        let mut at = dir;
        loop {
            if at == ancestor {
                return true;
            }
            match self.parent_of(at) {
                Some(parent) => at = parent,
                None => return false,
            }
        }
    }

    /// Drops inodes no name reaches any more (after an unlink or a replacing rename); open
    /// ones become orphans.
    pub fn collect(&mut self) {
        let mut named: Vec<u64> = vec![self.top];
        for node in self.nodes.values() {
            named.extend(node.entries.values());
        }
        let unnamed: Vec<u64> = self
            .nodes
            .keys()
            .filter(|object| !named.contains(object))
            .copied()
            .collect();
        for object in unnamed {
            if let Some(node) = self.nodes.remove(&object)
                && self.open.contains(&object)
            {
                self.orphans.insert(object, node);
            }
        }
    }

    /// True when `found` shows this state (with a failed create, either without it or with
    /// it under whatever object number `found` gives it).
    pub fn shows(&self, found: &BTreeMap<u64, Seen>) -> bool {
        self.shows_in(found, |seen| seen)
    }

    /// True when `found_namespace` (a `namespace_view`) shows this state's namespace.
    pub fn shows_namespace(&self, found_namespace: &BTreeMap<u64, Seen>) -> bool {
        self.shows_in(found_namespace, |seen| namespace_view(&seen))
    }

    /// `shows`, comparing `view` of this state with `found` (already seen through it).
    fn shows_in(
        &self,
        found: &BTreeMap<u64, Seen>,
        view: impl Fn(BTreeMap<u64, Seen>) -> BTreeMap<u64, Seen>,
    ) -> bool {
        if view(self.seen()) == *found {
            return true;
        }
        let Some((dir, name, node)) = &self.unsure_create else {
            return false;
        };
        let Some(object) = found
            .get(dir)
            .and_then(|seen| seen.node.entries.get(name))
            .copied()
        else {
            return false;
        };
        if self.nodes.contains_key(&object) {
            return false;
        }
        let mut made = self.clone();
        made.nodes.insert(object, node.clone());
        made.node_mut(*dir).entries.insert(name.clone(), object);
        view(made.seen()) == *found
    }

    /// Inode `object`'s own part in this state (named or an open orphan), if it exists.
    pub fn own(&self, object: u64) -> Option<Own> {
        self.nodes
            .get(&object)
            .or_else(|| self.orphans.get(&object))
            .map(Own::of_node)
    }

    /// True when `found` is inode `object`'s own part in this state with a prefix of `write`
    /// (the next operation) applied, cut at a 512-byte boundary of the file strictly inside
    /// it: the log splits a long write into records at absolute sector boundaries, and a
    /// durable prefix of the log can end between two of them.
    pub fn own_torn(&self, object: u64, write: (u64, u64, u64, u64), found: &Own) -> bool {
        let (written, offset, len, seed) = write;
        let Some(mut own) = self.own(object).filter(|_| written == object) else {
            return false;
        };
        let data = pattern(len as usize, seed);
        let held = data
            .iter()
            .enumerate()
            .take_while(|(at, byte)| found.data.get(offset as usize + at) == Some(byte))
            .count() as u64;
        let last = (offset + held) / SECTOR_BYTES * SECTOR_BYTES;
        let before = own.data.clone();
        [last, last.saturating_sub(SECTOR_BYTES)]
            .into_iter()
            .filter(|cut| *cut > offset && *cut < offset + len)
            .any(|cut| {
                let mut contents = (*before).clone();
                if (contents.len() as u64) < cut {
                    contents.resize(cut as usize, 0);
                }
                contents[offset as usize..cut as usize]
                    .copy_from_slice(&data[..(cut - offset) as usize]);
                own.size = contents.len() as u64;
                own.data = Arc::new(contents);
                own == *found
            })
    }

    /// What `getattr` and reads must show for every inode of the subtree.
    pub fn seen(&self) -> BTreeMap<u64, Seen> {
        let mut links: BTreeMap<u64, u64> = BTreeMap::new();
        let mut parents: BTreeMap<u64, u64> = BTreeMap::new();
        for (dir, node) in &self.nodes {
            for object in node.entries.values() {
                *links.entry(*object).or_default() += 1;
                if self.node(*object).kind == FileKind::Directory {
                    parents.insert(*object, *dir);
                    *links.entry(*dir).or_default() += 1;
                }
            }
        }
        self.nodes
            .iter()
            .map(|(object, node)| {
                let is_dir = node.kind == FileKind::Directory;
                let names = links.get(object).copied().unwrap_or(0);
                let seen = Seen {
                    node: node.clone(),
                    size: if is_dir {
                        node.entries.len() as u64
                    } else {
                        node.data.len() as u64
                    },
                    // A directory: its name, its `.`, and each subdirectory's `..` (the top's
                    // name is in the root, outside the tree).
                    links: if is_dir {
                        names + 1 + u64::from(*object == self.top)
                    } else {
                        names
                    },
                    parent: is_dir.then(|| {
                        parents
                            .get(object)
                            .copied()
                            .unwrap_or(cairn_fs::ROOT_OBJECT)
                    }),
                };
                (*object, seen)
            })
            .collect()
    }
}

/// What namespace changes alone decide of a subtree, the part every fsync commits (they go
/// to the log's lane at once): which inodes exist, their names, kinds, link counts, parents,
/// extended attributes and symlink targets. An inode's mode and a file's bytes and size are
/// its own (`Own`): only its own fsync promises them.
pub fn namespace_view(seen: &BTreeMap<u64, Seen>) -> BTreeMap<u64, Seen> {
    seen.iter()
        .map(|(object, seen)| {
            let mut node = seen.node.clone();
            node.mode = 0;
            let mut size = seen.size;
            if node.kind == FileKind::File {
                node.data = Arc::new(Vec::new());
                size = 0;
            }
            let view = Seen {
                node,
                size,
                links: seen.links,
                parent: seen.parent,
            };
            (*object, view)
        })
        .collect()
}

/// An inode's own part: what only its own changes (writes, truncation, chmod, fallocate)
/// decide, and what its fsync commits (`FsOp::per_object` in cairn-fs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Own {
    pub mode: u32,
    /// A file's size and bytes (nothing for other kinds: a symlink's target is its create's).
    pub size: u64,
    pub data: Arc<Vec<u8>>,
}

impl Own {
    pub fn of_node(node: &Node) -> Own {
        let file = node.kind == FileKind::File;
        Own {
            mode: node.mode,
            size: if file { node.data.len() as u64 } else { 0 },
            data: if file {
                node.data.clone()
            } else {
                Arc::new(Vec::new())
            },
        }
    }

    pub fn of_seen(seen: &Seen) -> Own {
        let file = seen.node.kind == FileKind::File;
        Own {
            mode: seen.node.mode,
            size: if file { seen.size } else { 0 },
            data: if file {
                seen.node.data.clone()
            } else {
                Arc::new(Vec::new())
            },
        }
    }
}

/// Reads a thread's subtree back from the filesystem.
pub fn read_tree(fs: &Filesystem, top: u64) -> Result<BTreeMap<u64, Seen>, String> {
    let mut out = BTreeMap::new();
    let mut queue = vec![top];
    while let Some(object) = queue.pop() {
        if out.contains_key(&object) {
            continue;
        }
        let attrs = fs
            .getattr(object)
            .map_err(|err| format!("getattr {object}: {err}"))?;
        let mut node = Node::new(attrs.kind, attrs.mode, Vec::new());
        match attrs.kind {
            FileKind::Directory => {
                let mut failure = None;
                fs.readdir(object, 0, |entry| {
                    if entry.name != b"." && entry.name != b".." {
                        if node
                            .entries
                            .insert(entry.name.clone(), entry.object)
                            .is_some()
                        {
                            failure = Some(format!(
                                "directory {object} lists {:?} twice",
                                String::from_utf8_lossy(&entry.name)
                            ));
                        }
                        queue.push(entry.object);
                    }
                    true
                })
                .map_err(|err| format!("readdir {object}: {err}"))?;
                if let Some(failure) = failure {
                    return Err(failure);
                }
            }
            FileKind::File => {
                let data = fs
                    .read(object, 0, attrs.size as usize + 1)
                    .map_err(|err| format!("read {object}: {err}"))?;
                node.data = Arc::new(data);
            }
            FileKind::Symlink => {
                let target = fs
                    .readlink(object)
                    .map_err(|err| format!("readlink {object}: {err}"))?;
                node.data = Arc::new(target);
            }
            other => return Err(format!("inode {object} is a {other:?}")),
        }
        if attrs.kind != FileKind::Symlink {
            let names = fs
                .listxattr(object)
                .map_err(|err| format!("listxattr {object}: {err}"))?;
            for name in names {
                let value = fs
                    .getxattr(object, &name)
                    .map_err(|err| format!("getxattr {object}: {err}"))?;
                node.xattrs.insert(name, value);
            }
        }
        let seen = Seen {
            node,
            size: attrs.size,
            links: attrs.links,
            parent: (attrs.kind == FileKind::Directory).then_some(attrs.parent),
        };
        out.insert(object, seen);
    }
    Ok(out)
}

/// The first difference between what was read and a model state, in words.
pub fn difference(found: &BTreeMap<u64, Seen>, model: &BTreeMap<u64, Seen>) -> String {
    for object in model.keys() {
        if !found.contains_key(object) {
            return format!("inode {object} missing ({:?})", model[object].node.kind);
        }
    }
    for (object, seen) in found {
        let Some(want) = model.get(object) else {
            return format!("inode {object} ({:?}) should not exist", seen.node.kind);
        };
        if seen == want {
            continue;
        }
        let (a, b) = (&seen.node, &want.node);
        if a.kind != b.kind || a.mode != b.mode {
            return format!(
                "inode {object}: {:?} mode {:o}, model {:?} mode {:o}",
                a.kind, a.mode, b.kind, b.mode
            );
        }
        if seen.size != want.size || seen.links != want.links || seen.parent != want.parent {
            return format!(
                "inode {object}: size {} links {} parent {:?}, model size {} links {} parent {:?}",
                seen.size, seen.links, seen.parent, want.size, want.links, want.parent
            );
        }
        if a.entries != b.entries {
            return format!(
                "directory {object}: entries {:?}, model {:?}",
                printable(&a.entries),
                printable(&b.entries)
            );
        }
        if a.xattrs != b.xattrs {
            return format!(
                "inode {object}: xattrs {:?}, model {:?}",
                a.xattrs
                    .keys()
                    .map(|k| String::from_utf8_lossy(k))
                    .collect::<Vec<_>>(),
                b.xattrs
                    .keys()
                    .map(|k| String::from_utf8_lossy(k))
                    .collect::<Vec<_>>()
            );
        }
        if a.data != b.data {
            return format!(
                "inode {object}: {} bytes, model {}; differing ranges (found all zeros?): {}",
                a.data.len(),
                b.data.len(),
                differing_ranges(&a.data, &b.data)
            );
        }
    }
    "no difference".into()
}

/// For each file whose bytes match neither `a` nor `b`: its 512-byte sectors as runs of
/// `=` (both agree), `a`, `b`, `0` (zeros, neither), `?` (neither).
pub fn sector_maps(
    found: &BTreeMap<u64, Seen>,
    a: &BTreeMap<u64, Seen>,
    b: &BTreeMap<u64, Seen>,
) -> String {
    let mut out = String::new();
    for (object, seen) in found {
        let (Some(sa), Some(sb)) = (a.get(object), b.get(object)) else {
            continue;
        };
        let data = &seen.node.data;
        if seen.node.kind != FileKind::File || *data == sa.node.data || *data == sb.node.data {
            continue;
        }
        let mut runs: Vec<(char, usize, usize)> = Vec::new();
        for start in (0..data.len()).step_by(512) {
            let end = (start + 512).min(data.len());
            let sector = &data[start..end];
            let in_a = sa.node.data.get(start..end) == Some(sector);
            let in_b = sb.node.data.get(start..end) == Some(sector);
            let class = match (in_a, in_b) {
                (true, true) => '=',
                (true, false) => 'a',
                (false, true) => 'b',
                _ if sector.iter().all(|byte| *byte == 0) => '0',
                _ => '?',
            };
            match runs.last_mut() {
                Some((last, _, run_end)) if *last == class => *run_end = end,
                _ => runs.push((class, start, end)),
            }
        }
        let text: Vec<String> = runs
            .iter()
            .map(|(class, start, end)| format!("{class} {start}..{end}"))
            .collect();
        out.push_str(&format!("\ninode {object}: {}", text.join(", ")));
    }
    out
}

/// The first few byte ranges where `found` and `want` differ, each marked with whether
/// `found` holds zeros there.
pub fn differing_ranges(found: &[u8], want: &[u8]) -> String {
    let mut ranges: Vec<String> = Vec::new();
    let mut start = None;
    let len = found.len().max(want.len());
    for at in 0..=len {
        let differs = at < len && found.get(at) != want.get(at);
        match (differs, start) {
            (true, None) => start = Some(at),
            (false, Some(first)) => {
                let zeros = found
                    .get(first..at.min(found.len()))
                    .is_some_and(|bytes| bytes.iter().all(|b| *b == 0));
                ranges.push(format!("{first}..{at} ({zeros})"));
                start = None;
                if ranges.len() == 8 {
                    ranges.push("...".into());
                    break;
                }
            }
            _ => {}
        }
    }
    ranges.join(", ")
}

pub fn printable(entries: &BTreeMap<Vec<u8>, u64>) -> Vec<(String, u64)> {
    entries
        .iter()
        .map(|(name, object)| (String::from_utf8_lossy(name).into_owned(), *object))
        .collect()
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn new_inode(kind: FileKind, mode: u32) -> NewInode {
    NewInode {
        kind,
        mode,
        uid: 1000,
        gid: 1000,
        rdev: 0,
    }
}
