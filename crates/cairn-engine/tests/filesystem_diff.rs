//! `Pool::diff_files` (`cairn diff` of a filesystem): after random creates, writes, chmods,
//! extended attributes, hard links, deletes, renames and moves between snapshots, the lines
//! it reports between every pair of snapshots, and between each snapshot and the live
//! filesystem, equal those a model of the namespace predicts; the model knows nothing of
//! object sets, only names, inodes and which inodes each operation touched, and applies the
//! rules of `cairn_fs::diff`'s module doc to them. Also: a clone compares with its origin's
//! snapshot, the cost follows the change and not the filesystem's size, and what cannot be
//! compared is refused with a clear error.

mod common;

use cairn_engine::{EngineError, Pool};
use cairn_fs::attrs::FileKind;
use cairn_fs::{Filesystem, NewInode, RenameMode, SetAttrs, XattrMode};
use common::*;
use std::collections::{BTreeMap, BTreeSet};

/// A model inode's id (the root is 0); never reused.
type Id = u64;
const ROOT: Id = 0;

#[derive(Clone, Debug)]
struct Inode {
    kind: FileKind,
    /// Where the documented `parent` rule says it is: made in, or last moved to another
    /// directory.
    parent: Id,
    mode: u32,
    /// A directory's entries.
    entries: BTreeMap<Vec<u8>, Id>,
}

/// The namespace as a user sees it.
#[derive(Clone, Debug)]
struct Model {
    inodes: BTreeMap<Id, Inode>,
}

/// One expected or reported line: change letter, path, new path of a rename.
type Line = (char, Vec<u8>, Option<Vec<u8>>);

impl Model {
    fn new() -> Model {
        let root = Inode {
            kind: FileKind::Directory,
            parent: ROOT,
            mode: 0o755,
            entries: BTreeMap::new(),
        };
        Model {
            inodes: BTreeMap::from([(ROOT, root)]),
        }
    }

    /// Every (directory, name) naming `id`.
    fn links(&self, id: Id) -> BTreeSet<(Id, Vec<u8>)> {
        let mut out = BTreeSet::new();
        for (dir, inode) in &self.inodes {
            for (name, child) in &inode.entries {
                if *child == id {
                    out.insert((*dir, name.clone()));
                }
            }
        }
        out
    }

    fn dir_path(&self, dir: Id) -> Vec<u8> {
        if dir == ROOT {
            return Vec::new();
        }
        let (parent, name) = self
            .links(dir)
            .into_iter()
            .next()
            .expect("a named directory");
        let mut path = self.dir_path(parent);
        path.push(b'/');
        path.extend_from_slice(&name);
        path
    }

    fn path(&self, (dir, name): &(Id, Vec<u8>)) -> Vec<u8> {
        let mut path = self.dir_path(*dir);
        path.push(b'/');
        path.extend_from_slice(name);
        path
    }

    fn directories(&self) -> Vec<Id> {
        self.inodes
            .iter()
            .filter(|(_, inode)| inode.kind == FileKind::Directory)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `dir` is `ancestor` or beneath it.
    fn is_within(&self, dir: Id, ancestor: Id) -> bool {
        let mut at = dir;
        loop {
            if at == ancestor {
                return true;
            }
            if at == ROOT {
                return false;
            }
            at = self.links(at).into_iter().next().expect("named").0;
        }
    }
}

/// The lines the documented rules give from `old` to `new`, where `touched` are the inodes
/// changed in between (contents, attributes, links, a name of theirs).
fn expected(old: &Model, new: &Model, touched: &BTreeSet<Id>) -> Vec<Line> {
    let mut lines = Vec::new();
    let ids: BTreeSet<Id> = old
        .inodes
        .keys()
        .chain(new.inodes.keys())
        .copied()
        .collect();
    for id in ids {
        let (was, is) = (old.inodes.get(&id), new.inodes.get(&id));
        let (old_links, new_links) = (old.links(id), new.links(id));
        match (was, is) {
            (Some(_), None) => {
                lines.extend(old_links.iter().map(|link| ('-', old.path(link), None)));
            }
            (None, Some(_)) => {
                lines.extend(new_links.iter().map(|link| ('+', new.path(link), None)));
            }
            (Some(_), Some(inode)) => {
                let mut lost: Vec<Vec<u8>> = old_links
                    .difference(&new_links)
                    .map(|link| old.path(link))
                    .collect();
                let mut gained: Vec<Vec<u8>> = new_links
                    .difference(&old_links)
                    .map(|link| new.path(link))
                    .collect();
                lost.sort();
                gained.sort();
                let pairs = lost.len().min(gained.len());
                for (from, to) in lost.iter().zip(&gained) {
                    lines.push(('R', from.clone(), Some(to.clone())));
                }
                lines.extend(lost[pairs..].iter().map(|path| ('-', path.clone(), None)));
                lines.extend(gained[pairs..].iter().map(|path| ('+', path.clone(), None)));
                if !touched.contains(&id) {
                    continue;
                }
                if inode.kind == FileKind::Directory {
                    if gained.is_empty() {
                        let path = if id == ROOT {
                            b"/".to_vec()
                        } else {
                            new.dir_path(id)
                        };
                        lines.push(('M', path, None));
                    }
                    continue;
                }
                let kept: Vec<&(Id, Vec<u8>)> = old_links.intersection(&new_links).collect();
                let in_parent: Vec<&&(Id, Vec<u8>)> =
                    kept.iter().filter(|link| link.0 == inode.parent).collect();
                if in_parent.is_empty() {
                    lines.extend(kept.iter().map(|link| ('M', new.path(link), None)));
                } else {
                    lines.extend(in_parent.iter().map(|link| ('M', new.path(link), None)));
                }
            }
            (None, None) => {}
        }
    }
    let rank = |change: char| match change {
        '-' => 0,
        '+' => 1,
        'M' => 2,
        _ => 3,
    };
    lines.sort_by(|a, b| (&a.1, rank(a.0)).cmp(&(&b.1, rank(b.0))));
    lines
}

fn reported(pool: &Pool, older: &str, newer: &str) -> Vec<Line> {
    pool.diff_files(older, newer)
        .unwrap_or_else(|err| panic!("diff {older} {newer}: {err}"))
        .diff
        .changes
        .into_iter()
        .map(|change| (change.change.symbol(), change.path, change.new_path))
        .collect()
}

fn show(lines: &[Line]) -> String {
    lines
        .iter()
        .map(|(change, path, new_path)| {
            let new_path = new_path
                .as_ref()
                .map(|path| format!(" -> {}", String::from_utf8_lossy(path)))
                .unwrap_or_default();
            format!("{change} {}{new_path}\n", String::from_utf8_lossy(path))
        })
        .collect()
}

/// Names from a small set (so that names collide and renames replace), some with bytes a
/// path printer must escape.
const NAMES: &[&[u8]] = &[b"a", b"b", b"c d", b"e\tf", b"\xff\xfe", b"g", b"h"];

fn new_inode(kind: FileKind) -> NewInode {
    NewInode {
        kind,
        mode: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
    }
}

/// Drives the filesystem and the model together.
struct Driver {
    fs: std::sync::Arc<Filesystem>,
    model: Model,
    objects: BTreeMap<Id, u64>,
    next_id: Id,
    touched: BTreeSet<Id>,
}

impl Driver {
    fn pick_dir(&self, rng: &mut Rng) -> Id {
        let dirs = self.model.directories();
        dirs[rng.below(dirs.len() as u64) as usize]
    }

    fn pick_name(rng: &mut Rng) -> Vec<u8> {
        NAMES[rng.below(NAMES.len() as u64) as usize].to_vec()
    }

    /// A random existing non-directory, if any.
    fn pick_file(&self, rng: &mut Rng) -> Option<Id> {
        let files: Vec<Id> = self
            .model
            .inodes
            .iter()
            .filter(|(_, inode)| inode.kind != FileKind::Directory)
            .map(|(id, _)| *id)
            .collect();
        (!files.is_empty()).then(|| files[rng.below(files.len() as u64) as usize])
    }

    /// A random existing entry (directory, name, inode), if any.
    fn pick_entry(&self, rng: &mut Rng) -> Option<(Id, Vec<u8>, Id)> {
        let all: Vec<(Id, Vec<u8>, Id)> = self
            .model
            .inodes
            .iter()
            .flat_map(|(dir, inode)| {
                inode
                    .entries
                    .iter()
                    .map(move |(name, child)| (*dir, name.clone(), *child))
            })
            .collect();
        (!all.is_empty()).then(|| all[rng.below(all.len() as u64) as usize].clone())
    }

    fn obj(&self, id: Id) -> u64 {
        self.objects[&id]
    }

    fn one_change(&mut self, rng: &mut Rng) {
        match rng.below(10) {
            0 | 1 => self.make(rng),
            2 => self.write(rng),
            3 => self.chmod(rng),
            4 => self.remove(rng),
            5 | 6 => self.rename(rng),
            7 => self.link(rng),
            8 => self.xattr(rng),
            _ => self.make(rng),
        }
    }

    fn make(&mut self, rng: &mut Rng) {
        let dir = self.pick_dir(rng);
        let name = Self::pick_name(rng);
        if self.model.inodes[&dir].entries.contains_key(&name) {
            return;
        }
        let kind = [
            FileKind::File,
            FileKind::Directory,
            FileKind::Symlink,
            FileKind::Fifo,
        ][rng.below(4) as usize];
        let at = self.obj(dir);
        let (object, _) = match kind {
            FileKind::Directory => self.fs.mkdir(at, &name, new_inode(kind)),
            FileKind::Symlink => self.fs.symlink(at, &name, b"target", new_inode(kind)),
            _ => self.fs.create(at, &name, new_inode(kind)),
        }
        .unwrap();
        let id = self.next_id;
        self.next_id += 1;
        self.objects.insert(id, object);
        self.model.inodes.insert(
            id,
            Inode {
                kind,
                parent: dir,
                mode: 0o644,
                entries: BTreeMap::new(),
            },
        );
        let entries = &mut self.model.inodes.get_mut(&dir).unwrap().entries;
        entries.insert(name, id);
        self.touched.insert(dir);
    }

    fn write(&mut self, rng: &mut Rng) {
        let Some(id) = self.pick_file(rng) else {
            return;
        };
        if self.model.inodes[&id].kind != FileKind::File {
            return;
        }
        let len = 1 + rng.below(20_000) as usize;
        let data = pattern(len, rng.next());
        self.fs
            .write(self.obj(id), rng.below(50_000), &data)
            .unwrap();
        self.touched.insert(id);
    }

    fn chmod(&mut self, rng: &mut Rng) {
        let ids: Vec<Id> = self.model.inodes.keys().copied().collect();
        let id = ids[rng.below(ids.len() as u64) as usize];
        let inode = self.model.inodes.get_mut(&id).unwrap();
        if inode.kind == FileKind::Symlink {
            return;
        }
        // Always another mode, so the change is a change.
        inode.mode ^= 0o010;
        let changes = SetAttrs {
            mode: Some(inode.mode),
            ..SetAttrs::default()
        };
        self.fs.setattr(self.obj(id), changes).unwrap();
        self.touched.insert(id);
    }

    fn xattr(&mut self, rng: &mut Rng) {
        let Some(id) = self.pick_file(rng) else {
            return;
        };
        if self.model.inodes[&id].kind != FileKind::File {
            return;
        }
        let value = pattern(1 + rng.below(100) as usize, rng.next());
        self.fs
            .setxattr(self.obj(id), b"user.test", &value, XattrMode::Any)
            .unwrap();
        self.touched.insert(id);
    }

    fn remove(&mut self, rng: &mut Rng) {
        let Some((dir, name, id)) = self.pick_entry(rng) else {
            return;
        };
        let inode = &self.model.inodes[&id];
        if inode.kind == FileKind::Directory {
            if !inode.entries.is_empty() {
                return;
            }
            self.fs.rmdir(self.obj(dir), &name).unwrap();
        } else {
            self.fs.unlink(self.obj(dir), &name).unwrap();
        }
        self.detach(dir, &name);
        self.touched.insert(dir);
    }

    /// Drops entry `name` of `dir` from the model, and its inode with its last name.
    fn detach(&mut self, dir: Id, name: &[u8]) {
        let id = self
            .model
            .inodes
            .get_mut(&dir)
            .unwrap()
            .entries
            .remove(name)
            .unwrap();
        if self.model.links(id).is_empty() {
            self.model.inodes.remove(&id);
            self.objects.remove(&id);
        } else {
            // One link fewer: its link count changed.
            self.touched.insert(id);
        }
    }

    fn rename(&mut self, rng: &mut Rng) {
        let Some((from_dir, from_name, id)) = self.pick_entry(rng) else {
            return;
        };
        let to_dir = self.pick_dir(rng);
        let to_name = Self::pick_name(rng);
        let source_is_dir = self.model.inodes[&id].kind == FileKind::Directory;
        if (from_dir, &from_name) == (to_dir, &to_name)
            || (source_is_dir && self.model.is_within(to_dir, id))
        {
            return;
        }
        if let Some(&target) = self.model.inodes[&to_dir].entries.get(&to_name) {
            let target = &self.model.inodes[&target];
            let replaceable = match (source_is_dir, target.kind == FileKind::Directory) {
                (true, true) => target.entries.is_empty(),
                (false, false) => true,
                _ => false,
            };
            // Two names of one inode: POSIX renames nothing.
            if !replaceable || self.model.inodes[&to_dir].entries[&to_name] == id {
                return;
            }
        }
        self.fs
            .rename(
                self.obj(from_dir),
                &from_name,
                self.obj(to_dir),
                &to_name,
                RenameMode::Replace,
            )
            .unwrap();
        if self.model.inodes[&to_dir].entries.contains_key(&to_name) {
            let target = self.model.inodes[&to_dir].entries[&to_name];
            self.touched.insert(target);
            self.detach(to_dir, &to_name);
        }
        self.model
            .inodes
            .get_mut(&from_dir)
            .unwrap()
            .entries
            .remove(&from_name);
        let entries = &mut self.model.inodes.get_mut(&to_dir).unwrap().entries;
        entries.insert(to_name, id);
        if from_dir != to_dir {
            self.model.inodes.get_mut(&id).unwrap().parent = to_dir;
        }
        self.touched.extend([from_dir, to_dir, id]);
    }

    fn link(&mut self, rng: &mut Rng) {
        let Some(id) = self.pick_file(rng) else {
            return;
        };
        let dir = self.pick_dir(rng);
        let name = Self::pick_name(rng);
        if self.model.inodes[&dir].entries.contains_key(&name) {
            return;
        }
        self.fs.link(self.obj(id), self.obj(dir), &name).unwrap();
        let entries = &mut self.model.inodes.get_mut(&dir).unwrap().entries;
        entries.insert(name, id);
        self.touched.extend([id, dir]);
    }
}

fn new_pool(dir: &std::path::Path) -> Pool {
    create_mirror(&device_paths(dir, 2), plain_opener())
}

fn snapshot(pool: &Pool, name: &str) {
    pool.snapshot(&[name.to_string()], false).unwrap();
    // A change right after a snapshot gets a later change time than one right before it
    // (the coarse clock ticks every few milliseconds), so that a change that only sets the
    // change time (a rename within a directory) is a change.
    std::thread::sleep(std::time::Duration::from_millis(15));
}

#[test]
fn random_changes_between_snapshots_are_reported_as_the_model_predicts() {
    for seed in 1..=4u64 {
        let dir = tempfile::tempdir().unwrap();
        let pool = new_pool(dir.path());
        let fs = new_filesystem(&pool, "tank/fs", &[]);
        let mut driver = Driver {
            fs,
            model: Model::new(),
            objects: BTreeMap::from([(ROOT, cairn_fs::ROOT_OBJECT)]),
            next_id: 1,
            touched: BTreeSet::new(),
        };
        let mut rng = Rng(seed);
        // (snapshot, the model then, inodes touched from the previous snapshot to it)
        let mut taken: Vec<(String, Model, BTreeSet<Id>)> = Vec::new();
        for round in 0..6 {
            for _ in 0..(if round == 0 { 40 } else { 25 }) {
                driver.one_change(&mut rng);
            }
            let name = format!("tank/fs@s{round}");
            snapshot(&pool, &name);
            taken.push((
                name,
                driver.model.clone(),
                std::mem::take(&mut driver.touched),
            ));
        }
        for _ in 0..25 {
            driver.one_change(&mut rng);
        }
        let head = (
            "tank/fs".to_string(),
            driver.model.clone(),
            driver.touched.clone(),
        );
        let mut sides = taken.clone();
        sides.push(head);
        let mut compared = 0;
        for older in 0..taken.len() {
            for newer in older + 1..sides.len() {
                let touched: BTreeSet<Id> = sides[older + 1..=newer]
                    .iter()
                    .flat_map(|(_, _, touched)| touched.iter().copied())
                    .collect();
                let want = expected(&taken[older].1, &sides[newer].1, &touched);
                let got = reported(&pool, &taken[older].0, &sides[newer].0);
                assert_eq!(
                    show(&got),
                    show(&want),
                    "seed {seed}: {} -> {}: reported (left) vs model (right)",
                    taken[older].0,
                    sides[newer].0
                );
                compared += usize::from(!want.is_empty());
            }
        }
        assert!(compared > 15, "seed {seed}: the rounds changed something");
    }
}

#[test]
fn each_kind_of_change_gives_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = cairn_fs::ROOT_OBJECT;
    let (docs, _) = fs
        .mkdir(root, b"docs", new_inode(FileKind::Directory))
        .unwrap();
    let (keep, _) = fs.create(docs, b"keep", new_inode(FileKind::File)).unwrap();
    let (edit, _) = fs.create(docs, b"edit", new_inode(FileKind::File)).unwrap();
    fs.create(docs, b"gone", new_inode(FileKind::File)).unwrap();
    fs.create(docs, b"old name", new_inode(FileKind::File))
        .unwrap();
    fs.write(keep, 0, b"unchanged").unwrap();
    snapshot(&pool, "tank/fs@a");
    assert!(
        reported(&pool, "tank/fs@a", "tank/fs").is_empty(),
        "no change, no line"
    );
    fs.write(edit, 0, b"new contents").unwrap();
    fs.unlink(docs, b"gone").unwrap();
    fs.rename(docs, b"old name", root, b"new name", RenameMode::Replace)
        .unwrap();
    fs.create(docs, b"fresh", new_inode(FileKind::File))
        .unwrap();
    fs.link(keep, root, b"second").unwrap();
    let diff = pool.diff_files("tank/fs@a", "tank/fs").unwrap();
    let lines: Vec<(char, String, Option<String>, FileKind)> = diff
        .diff
        .changes
        .iter()
        .map(|change| {
            (
                change.change.symbol(),
                String::from_utf8_lossy(&change.path).into_owned(),
                change
                    .new_path
                    .as_ref()
                    .map(|path| String::from_utf8_lossy(path).into_owned()),
                change.kind,
            )
        })
        .collect();
    let line = |change, path: &str, new: Option<&str>, kind| {
        (change, path.to_string(), new.map(str::to_string), kind)
    };
    assert_eq!(
        lines,
        vec![
            line('M', "/", None, FileKind::Directory),
            line('M', "/docs", None, FileKind::Directory),
            line('M', "/docs/edit", None, FileKind::File),
            line('+', "/docs/fresh", None, FileKind::File),
            line('-', "/docs/gone", None, FileKind::File),
            line('M', "/docs/keep", None, FileKind::File),
            line('R', "/docs/old name", Some("/new name"), FileKind::File),
            line('+', "/second", None, FileKind::File),
        ]
    );
    // The change time is the inode's: the removed file's from before, the others' now.
    let edited = &diff.diff.changes[2];
    assert_eq!(edited.ctime, fs.getattr(edit).unwrap().ctime);
}

#[test]
fn a_clone_compares_with_the_snapshot_it_descends_from() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = cairn_fs::ROOT_OBJECT;
    fs.create(root, b"shared", new_inode(FileKind::File))
        .unwrap();
    snapshot(&pool, "tank/fs@a");
    fs.create(root, b"later", new_inode(FileKind::File))
        .unwrap();
    snapshot(&pool, "tank/fs@b");
    pool.clone_snapshot("tank/fs@b", "tank/copy", &[]).unwrap();
    let copy = pool.filesystem("tank/copy").unwrap();
    copy.create(root, b"in the clone", new_inode(FileKind::File))
        .unwrap();
    let paths = |lines: Vec<Line>| -> Vec<(char, String)> {
        lines
            .into_iter()
            .map(|(change, path, _)| (change, String::from_utf8_lossy(&path).into_owned()))
            .collect()
    };
    assert_eq!(
        paths(reported(&pool, "tank/fs@b", "tank/copy")),
        vec![('M', "/".into()), ('+', "/in the clone".into())]
    );
    // From an older snapshot of the origin, through the origin.
    assert_eq!(
        paths(reported(&pool, "tank/fs@a", "tank/copy")),
        vec![
            ('M', "/".into()),
            ('+', "/in the clone".into()),
            ('+', "/later".into())
        ]
    );
    snapshot(&pool, "tank/copy@c");
    assert_eq!(
        paths(reported(&pool, "tank/fs@a", "tank/copy@c")).len(),
        3,
        "a snapshot of the clone too"
    );
    // The other way round, the origin does not descend from the clone.
    let refused = pool.diff_files("tank/copy@c", "tank/fs").unwrap_err();
    assert!(
        matches!(&refused, EngineError::Diff(message) if message.contains("does not descend")),
        "{refused}"
    );
}

#[test]
fn what_cannot_be_compared_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    new_filesystem(&pool, "tank/fs", &[]);
    new_filesystem(&pool, "tank/other", &[]);
    pool.create_volume_as(
        "tank/vol",
        1 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[],
    )
    .unwrap();
    for name in ["tank/fs@a", "tank/fs@b", "tank/other@a", "tank/vol@a"] {
        snapshot(&pool, name);
    }
    let message = |older: &str, newer: &str| match pool.diff_files(older, newer) {
        Err(EngineError::Diff(message)) => message,
        other => panic!("{older} {newer}: {other:?}"),
    };
    assert!(message("tank/fs", "tank/fs").contains("is not a snapshot"));
    assert!(message("tank/fs@b", "tank/fs@a").contains("name the older snapshot first"));
    assert!(message("tank/fs@a", "tank/fs@a").contains("compared with itself"));
    assert!(message("tank/fs@a", "tank/other").contains("does not descend"));
    assert!(message("tank/vol@a", "tank/vol").contains("--blocks"));
    assert!(pool.diff_files("tank/fs@nope", "tank/fs").is_err());
}

#[test]
fn the_cost_follows_the_change_not_the_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = cairn_fs::ROOT_OBJECT;
    let mut files = Vec::new();
    for d in 0..40 {
        let (sub, _) = fs
            .mkdir(
                root,
                format!("d{d}").as_bytes(),
                new_inode(FileKind::Directory),
            )
            .unwrap();
        for f in 0..100 {
            let name = format!("f{f}");
            let (file, _) = fs
                .create(sub, name.as_bytes(), new_inode(FileKind::File))
                .unwrap();
            files.push((sub, file));
        }
    }
    fs.write(files[0].1, 0, b"x").unwrap();
    snapshot(&pool, "tank/fs@a");
    // Three files written in place, one created, in three directories.
    fs.write(files[5].1, 0, b"changed").unwrap();
    fs.write(files[950].1, 0, b"changed").unwrap();
    fs.write(files[3990].1, 0, b"changed").unwrap();
    fs.create(files[950].0, b"new", new_inode(FileKind::File))
        .unwrap();
    let diff = pool.diff_files("tank/fs@a", "tank/fs").unwrap().diff;
    assert_eq!(diff.changes.len(), 5, "{:?}", diff.changes);
    println!(
        "4,040 inodes, 4 changes: {} blocks visited, {} objects changed, {} directories scanned",
        diff.blocks_visited, diff.objects_changed, diff.directories_scanned
    );
    // 4,000 inodes take 126 dnode blocks (32 each): the walk read a handful.
    assert!(
        diff.blocks_visited < 30,
        "visited {} blocks for 4 changes among 4,040 inodes",
        diff.blocks_visited
    );
    assert!(
        diff.objects_changed <= 6,
        "{} objects",
        diff.objects_changed
    );
    // Names: the three changed files' directories (100 entries each) and the root.
    assert!(
        diff.directories_scanned <= 4,
        "{}",
        diff.directories_scanned
    );
}
