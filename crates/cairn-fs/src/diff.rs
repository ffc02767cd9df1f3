//! What changed in a filesystem between two versions of its object set (`cairn diff`, as
//! `zfs diff`): files and directories created (`+`), removed (`-`), renamed or moved (`R`), and
//! changed in contents or attributes (`M`), each with its path. The older version is a
//! snapshot; the newer one a later snapshot of the same dataset or of a clone of it, or the
//! head's last synced root (the engine checks which pairs are allowed and keeps both trees
//! from being freed while this reads them).
//!
//! Why its cost follows the changes: `cairn_object::changed_objects` reads only dnode blocks
//! rewritten since the older snapshot (birth txgs), so the objects examined are those whose
//! dnodes changed. A directory whose entries changed is among them; its entries are compared
//! only in the map blocks rewritten since (`changed_blocks`, then
//! `HashedMap::entries_in_blocks`): an entry in a block both versions share is the same in
//! both. Paths are then found upwards through `parent` attributes (`diff_paths.rs`); a name
//! the diff did not already find costs one scan of the directory holding it, remembered for
//! every later name there (`zfs diff` scans the parent once per changed object).
//!
//! What is reported, per inode (an object number and its generation: a number reused by a
//! later inode is another inode):
//! - created: `+` for each of its names; removed: `-` for each name it had.
//! - kept: each name it lost and each it gained are paired into `R old -> new` lines, in path
//!   order (the lost ones' old paths with the gained ones' new paths); a name gained beyond those is `+` (a new hard link), a name lost beyond them `-`.
//!   If the inode itself changed (contents, attributes, link count; an access time alone is
//!   no change, as `zfs diff` ignores it), `M` for its names that did not change: a
//!   directory's one name, a file's names in its `parent` directory (where it was made or
//!   last moved to). A file with unchanged names only in other directories is reported under
//!   all of them, found by walking the whole namespace (the one case whose cost is the
//!   filesystem's size: a hard-linked file changed after its name in its `parent` went).
//! - a directory whose entries changed is itself changed (its times and size), so `M`.
//!
//! Lines are sorted by path (the old path of a rename), then by kind. Paths are bytes, from
//! the dataset's root ("/" is the root itself); escaping and a mountpoint are the caller's.

use crate::attrs::{FileKind, InodeAttrs, Timestamp};
use crate::diff_paths::{Link, NamedEntry, Side, entries};
use crate::raw::decode_entry_value;
use crate::{FsError, ROOT_OBJECT};
use cairn_format::Dnode;
use cairn_object::map::{HashedMap, MAP_BLOCK_BYTES};
use cairn_object::{ObjectSet, changed_blocks, changed_objects};
use std::collections::{BTreeMap, BTreeSet};

/// Byte range of the access time in an inode's attributes (`attrs.rs`).
const ATIME_BYTES: std::ops::Range<usize> = 32..44;

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Removed,
    Created,
    Modified,
    Renamed,
}

impl Change {
    /// `zfs diff`'s letter for it.
    pub fn symbol(self) -> char {
        match self {
            Change::Removed => '-',
            Change::Created => '+',
            Change::Modified => 'M',
            Change::Renamed => 'R',
        }
    }
}

/// One line of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsChange {
    pub change: Change,
    /// From the dataset's root: "/" for the root, "/a/b" below it; the old path of a rename.
    pub path: Vec<u8>,
    /// The new path of a rename.
    pub new_path: Option<Vec<u8>>,
    pub kind: FileKind,
    /// The inode's change time (the older version's for a removal).
    pub ctime: Timestamp,
    pub object: u64,
}

/// What changed, and what finding it read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsDiff {
    pub changes: Vec<FsChange>,
    /// Objects whose dnodes differ between the versions.
    pub objects_changed: u64,
    /// Blocks the walks by birth txg read (dnodes and changed directory blocks).
    pub blocks_visited: u64,
    /// Directories scanned whole to find a name (or, rarely, every directory).
    pub directories_scanned: u64,
}

/// An inode in both versions, or one of them.
#[derive(Debug, Clone)]
struct Versions {
    old: Option<InodeAttrs>,
    new: Option<InodeAttrs>,
    /// Its dnode changed beyond the access time.
    modified: bool,
}

impl Versions {
    /// The same inode on both sides (not a number reused).
    fn same(&self) -> bool {
        match (&self.old, &self.new) {
            (Some(old), Some(new)) => old.generation == new.generation && old.kind == new.kind,
            _ => false,
        }
    }

    fn is_directory_on_either_side(&self) -> bool {
        [&self.old, &self.new]
            .into_iter()
            .flatten()
            .any(|attrs| attrs.kind == FileKind::Directory)
    }
}

/// The changes from `old`, a version of a filesystem as of txg `old_txg` (a snapshot taken
/// then), to `new`, a later version of it (see the module doc). Both are read-only here.
pub fn diff(old: &ObjectSet, old_txg: u64, new: &ObjectSet) -> Result<FsDiff, FsError> {
    let changed = changed_objects(new.cached_io(), &old.root_bp(), old_txg, &new.root_bp())?;
    let mut run = Run {
        old: Side::new(old),
        new: Side::new(new),
        old_txg,
        versions: BTreeMap::new(),
        removed: BTreeMap::new(),
        added: BTreeMap::new(),
        changes: Vec::new(),
        hidden: Vec::new(),
        blocks_visited: changed.blocks_visited,
    };
    for object in &changed.objects {
        let old_attrs = run.old.note_dnode(object.object, &object.old)?;
        let new_attrs = run.new.note_dnode(object.object, &object.new)?;
        if old_attrs.is_none() && new_attrs.is_none() {
            continue;
        }
        let modified = differs_beyond_atime(&object.old, &object.new);
        run.versions.insert(
            object.object,
            Versions {
                old: old_attrs,
                new: new_attrs,
                modified,
            },
        );
    }
    let directories: Vec<(u64, Versions)> = run
        .versions
        .iter()
        .filter(|(_, versions)| versions.is_directory_on_either_side())
        .map(|(object, versions)| (*object, versions.clone()))
        .collect();
    for (dir, versions) in &directories {
        run.diff_entries(*dir, versions)?;
    }
    let objects: BTreeSet<u64> = run
        .versions
        .keys()
        .chain(run.removed.keys())
        .chain(run.added.keys())
        .copied()
        .collect();
    for object in &objects {
        run.report(*object)?;
    }
    run.report_hidden_names()?;
    let mut changes = run.changes;
    changes.sort_by(|a, b| (&a.path, a.change).cmp(&(&b.path, b.change)));
    Ok(FsDiff {
        changes,
        objects_changed: changed.objects.len() as u64,
        blocks_visited: run.blocks_visited,
        directories_scanned: run.old.directories_scanned + run.new.directories_scanned,
    })
}

/// Whether two dnodes of an inode differ in anything but the access time.
fn differs_beyond_atime(old: &Dnode, new: &Dnode) -> bool {
    let mut old = old.clone();
    let mut new = new.clone();
    for dnode in [&mut old, &mut new] {
        if let Some(atime) = dnode.bonus.get_mut(ATIME_BYTES) {
            atime.fill(0);
        }
    }
    old != new
}

/// One diff in progress.
struct Run<'a> {
    old: Side<'a>,
    new: Side<'a>,
    old_txg: u64,
    versions: BTreeMap<u64, Versions>,
    /// Names lost (entries only the older version has), by the object they named.
    removed: BTreeMap<u64, Vec<Link>>,
    /// Names gained, by object.
    added: BTreeMap<u64, Vec<Link>>,
    changes: Vec<FsChange>,
    hidden: Vec<Hidden>,
    blocks_visited: u64,
}

/// A changed file whose unchanged names are only outside its `parent` directory (found at the
/// end, by one walk of the namespace for all of them).
struct Hidden {
    object: u64,
    attrs: InodeAttrs,
    /// Its paths already reported as gained.
    added_paths: BTreeSet<Vec<u8>>,
}

impl Run<'_> {
    /// Records the entries directory `dir` lost and gained.
    fn diff_entries(&mut self, dir: u64, versions: &Versions) -> Result<(), FsError> {
        let is_dir = |attrs: &Option<InodeAttrs>| {
            attrs
                .as_ref()
                .is_some_and(|attrs| attrs.kind == FileKind::Directory)
        };
        let (old_entries, new_entries) = if versions.same() && is_dir(&versions.new) {
            let changed = changed_blocks(
                self.new.objset().cached_io(),
                &self.old.objset().root_bp(),
                self.old_txg,
                &self.new.objset().root_bp(),
                dir,
            )?;
            self.blocks_visited += changed.blocks_visited;
            let block_bytes = u64::from(MAP_BLOCK_BYTES);
            let blkids: Vec<u64> = changed
                .ranges
                .iter()
                .flat_map(|range| {
                    let first = range.offset_bytes / block_bytes;
                    first..first + range.length_bytes.div_ceil(block_bytes)
                })
                .collect();
            (
                entries_in_blocks(self.old.objset(), dir, &blkids)?,
                entries_in_blocks(self.new.objset(), dir, &blkids)?,
            )
        } else {
            let all = |side: &Side<'_>, attrs: &Option<InodeAttrs>| {
                if is_dir(attrs) {
                    entries(side.objset(), dir).map(|list| list.into_iter().collect())
                } else {
                    Ok(BTreeSet::new())
                }
            };
            (
                all(&self.old, &versions.old)?,
                all(&self.new, &versions.new)?,
            )
        };
        for (name, (object, kind)) in old_entries.difference(&new_entries) {
            let link = Link {
                dir,
                name: name.clone(),
                object: *object,
                kind: *kind,
            };
            self.old.learn(&link);
            self.removed.entry(*object).or_default().push(link);
        }
        for (name, (object, kind)) in new_entries.difference(&old_entries) {
            let link = Link {
                dir,
                name: name.clone(),
                object: *object,
                kind: *kind,
            };
            self.new.learn(&link);
            self.added.entry(*object).or_default().push(link);
        }
        Ok(())
    }

    /// The lines of one object.
    fn report(&mut self, object: u64) -> Result<(), FsError> {
        let versions = match self.versions.get(&object) {
            Some(versions) => versions.clone(),
            None => Versions {
                old: self.old.attrs(object)?,
                new: self.new.attrs(object)?,
                modified: false,
            },
        };
        let mut removed = self.removed.remove(&object).unwrap_or_default();
        let mut added = self.added.remove(&object).unwrap_or_default();
        removed.sort();
        added.sort();
        if !versions.same() {
            // Gone, new, or a number reused: the old inode's names went, the new one's came.
            if let Some(attrs) = &versions.old {
                let names = self.names_or_parent(true, object, attrs, removed)?;
                self.push_links(true, Change::Removed, object, attrs, &names)?;
            }
            if let Some(attrs) = &versions.new {
                let names = self.names_or_parent(false, object, attrs, added)?;
                self.push_links(false, Change::Created, object, attrs, &names)?;
            }
            return Ok(());
        }
        let (Some(old_attrs), Some(new_attrs)) = (&versions.old, &versions.new) else {
            return Ok(());
        };
        let mut lost = Vec::with_capacity(removed.len());
        for link in &removed {
            lost.push(self.old.path_of(link.dir, &link.name)?);
        }
        let mut gained = Vec::with_capacity(added.len());
        for link in &added {
            gained.push(self.new.path_of(link.dir, &link.name)?);
        }
        lost.sort();
        gained.sort();
        let pairs = lost.len().min(gained.len());
        for (from, to) in lost.iter().zip(&gained) {
            self.push(
                Change::Renamed,
                from.clone(),
                Some(to.clone()),
                object,
                new_attrs,
            );
        }
        for path in lost.into_iter().skip(pairs) {
            self.push(Change::Removed, path, None, object, old_attrs);
        }
        for path in gained.into_iter().skip(pairs) {
            self.push(Change::Created, path, None, object, new_attrs);
        }
        if versions.modified {
            self.report_modified(object, new_attrs, &added)?;
        }
        Ok(())
    }

    /// `M` lines for the unchanged names of `object`, changed, which gained names `added`.
    fn report_modified(
        &mut self,
        object: u64,
        attrs: &InodeAttrs,
        added: &[Link],
    ) -> Result<(), FsError> {
        if attrs.kind == FileKind::Directory {
            // One name: unchanged unless it was just reported as gained.
            if added.is_empty() {
                let path = self.new.dir_path(object)?;
                let path = if object == ROOT_OBJECT {
                    b"/".to_vec()
                } else {
                    path
                };
                self.push(Change::Modified, path, None, object, attrs);
            }
            return Ok(());
        }
        let unchanged_names = attrs.links.saturating_sub(added.len() as u64);
        if unchanged_names == 0 {
            return Ok(());
        }
        let parent = attrs.parent;
        let names: Vec<Vec<u8>> = self
            .new
            .names_in(parent, object)?
            .into_iter()
            .filter(|name| {
                !added
                    .iter()
                    .any(|link| link.dir == parent && link.name == *name)
            })
            .collect();
        if names.is_empty() {
            let mut added_paths = BTreeSet::new();
            for link in added {
                added_paths.insert(self.new.path_of(link.dir, &link.name)?);
            }
            self.hidden.push(Hidden {
                object,
                attrs: attrs.clone(),
                added_paths,
            });
            return Ok(());
        }
        for name in names {
            let path = self.new.path_of(parent, &name)?;
            self.push(Change::Modified, path, None, object, attrs);
        }
        Ok(())
    }
}

impl Run<'_> {
    /// `M` lines for the changed files whose unchanged names are all outside their `parent`
    /// directory: one walk of the newer namespace finds them all.
    fn report_hidden_names(&mut self) -> Result<(), FsError> {
        if self.hidden.is_empty() {
            return Ok(());
        }
        let wanted: BTreeSet<u64> = self.hidden.iter().map(|hidden| hidden.object).collect();
        let mut paths = self.new.all_paths(&wanted)?;
        for hidden in std::mem::take(&mut self.hidden) {
            for path in paths.remove(&hidden.object).unwrap_or_default() {
                if !hidden.added_paths.contains(&path) {
                    self.push(Change::Modified, path, None, hidden.object, &hidden.attrs);
                }
            }
        }
        Ok(())
    }

    /// `links`, or when there are none (an inode whose entry stayed while its number was
    /// reused), its names in its `parent` directory, on the older side (`old`) or the newer.
    fn names_or_parent(
        &mut self,
        old: bool,
        object: u64,
        attrs: &InodeAttrs,
        links: Vec<Link>,
    ) -> Result<Vec<Link>, FsError> {
        if !links.is_empty() || object == ROOT_OBJECT {
            return Ok(links);
        }
        let side = if old { &mut self.old } else { &mut self.new };
        Ok(side
            .names_in(attrs.parent, object)?
            .into_iter()
            .map(|name| Link {
                dir: attrs.parent,
                name,
                object,
                kind: attrs.kind,
            })
            .collect())
    }

    /// One line per link, its path on the older side (`old`) or the newer.
    fn push_links(
        &mut self,
        old: bool,
        change: Change,
        object: u64,
        attrs: &InodeAttrs,
        links: &[Link],
    ) -> Result<(), FsError> {
        for link in links {
            let side = if old { &mut self.old } else { &mut self.new };
            let path = side.path_of(link.dir, &link.name)?;
            self.push(change, path, None, object, attrs);
        }
        Ok(())
    }

    fn push(
        &mut self,
        change: Change,
        path: Vec<u8>,
        new_path: Option<Vec<u8>>,
        object: u64,
        attrs: &InodeAttrs,
    ) {
        self.changes.push(FsChange {
            change,
            path,
            new_path,
            kind: attrs.kind,
            ctime: attrs.ctime,
            object,
        });
    }
}

/// The entries of directory `dir` kept in blocks `blkids` (see
/// `HashedMap::entries_in_blocks`): name → (object, kind).
fn entries_in_blocks(
    objset: &ObjectSet,
    dir: u64,
    blkids: &[u64],
) -> Result<BTreeSet<NamedEntry>, FsError> {
    HashedMap::new(objset, dir)
        .entries_in_blocks(blkids)?
        .into_iter()
        .map(|entry| Ok((entry.name, decode_entry_value(&entry.value)?)))
        .collect()
}
