//! The filesystem crash test's operations: `step` draws an operation its thread's model says
//! succeeds, applies it to the model and to the filesystem; `run_thread` runs a thread's
//! operations until its count or the first error (the power is gone).

use crate::Scenario;
use crate::common::Rng;
use crate::model::{Node, Tree, new_inode, pattern};
use cairn_emulate::PowerSwitch;
use cairn_fs::attrs::FileKind;
use cairn_fs::{Fallocate, Filesystem, FsError, RenameMode, SetAttrs, XattrMode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const FILE_BYTES_MAX: u64 = 300_000;
const DIRS_PER_THREAD_MAX: usize = 4;
/// Names every kind of entry draws from, so renames and creates collide.
const NAMES: [&[u8]; 8] = [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"];
const XATTR_NAMES: [&[u8]; 3] = [b"user.one", b"user.two", b"user.three"];

/// What one thread did.
pub struct ThreadRun {
    /// Model states: `states[m]` is the subtree after the thread's first `m` operations (a
    /// rollback counts as one, whose state is the snapshot's).
    pub states: Vec<Tree>,
    /// Operations up to and including the last fsync that returned Ok (or the last rollback,
    /// clone promote...: durable on return): every namespace change up to there is durable
    /// (an fsync of any inode commits them all).
    pub fsynced: usize,
    /// Per inode, operations up to and including its last fsync (or synchronous write) that
    /// returned Ok: its own changes (bytes, mode) up to there are durable.
    pub own_fsynced: BTreeMap<u64, usize>,
    /// Operations through which every inode's own changes are durable (`sync=always`, a
    /// rollback, a clone's promote).
    pub all_durable: usize,
    /// Operations started (the last one may have failed: it may or may not have happened).
    pub started: usize,
    /// The operation that failed, its error, and whether the power had gone by then.
    pub failure: Option<(String, String, bool)>,
    /// What each operation was, for a failure's message.
    pub described: Vec<String>,
    /// The state after the operations that returned, the next one's starting point.
    pub model: Tree,
    rng: Rng,
    /// Numbers the data seeds apart from other threads'.
    thread: usize,
}

impl ThreadRun {
    /// A thread (`thread`, numbering its draws and its data apart from the others') whose
    /// subtree starts as `start`.
    pub fn new(seed: u64, thread: usize, start: Tree) -> ThreadRun {
        ThreadRun {
            states: vec![start.clone()],
            fsynced: 0,
            own_fsynced: BTreeMap::new(),
            all_durable: 0,
            started: 0,
            failure: None,
            described: Vec::new(),
            model: start,
            rng: Rng(seed.wrapping_mul(7919).wrapping_add(thread as u64)),
            thread,
        }
    }

    /// A change made outside the thread's operations (a rollback): one more state, `state`,
    /// with what it was; `Ok` (durable on return, so promised from now) or the error.
    pub fn outside_change(&mut self, text: String, state: Tree, result: Result<(), String>) {
        self.started += 1;
        self.described.push(text.clone());
        self.states.push(state.clone());
        match result {
            Ok(()) => {
                self.model = state;
                self.all_durable();
            }
            Err(err) => self.failure = Some((text, err, true)),
        }
    }
}

impl ThreadRun {
    /// Every change so far is durable (a txg holds them all).
    pub fn all_durable(&mut self) {
        self.fsynced = self.started;
        self.all_durable = self.started;
    }

    /// Operations through which `object`'s own changes (bytes, mode) are promised durable.
    pub fn own_durable(&self, object: u64) -> usize {
        self.own_fsynced
            .get(&object)
            .copied()
            .unwrap_or(0)
            .max(self.all_durable)
    }
}

/// How far a thread has come, for a snapshot taken while it runs: the snapshot holds the
/// state after `done` operations (read before it started) or later, and at most after those
/// `begun` (read after it returned).
#[derive(Default)]
pub struct Progress {
    pub begun: AtomicUsize,
    pub done: AtomicUsize,
}

impl Progress {
    pub fn reset(&self, run: &ThreadRun) {
        self.begun.store(run.started, Ordering::SeqCst);
        self.done.store(run.started, Ordering::SeqCst);
    }
}

/// One step: builds a valid operation from the model, applies it to the model and to the
/// filesystem; returns what it was, the inode it fsynced if it was an fsync (or a
/// synchronous write), and the filesystem's answer. `None` when the drawn kind had nothing to
/// act on.
pub fn step(
    fs: &Filesystem,
    model: &mut Tree,
    rng: &mut Rng,
    recordsize: u64,
    data_seed: u64,
) -> Option<(String, Option<u64>, Result<(), FsError>)> {
    let pick = |rng: &mut Rng, items: &[u64]| -> Option<u64> {
        (!items.is_empty()).then(|| items[rng.below(items.len() as u64) as usize])
    };
    let name = |rng: &mut Rng| NAMES[rng.below(NAMES.len() as u64) as usize].to_vec();
    let show = |name: &[u8]| String::from_utf8_lossy(name).into_owned();
    let files = model.objects_of(|node| node.kind == FileKind::File);
    let dirs = model.dirs();
    let choice = rng.below(100);
    Some(match choice {
        0..=16 => {
            let kind = match choice {
                0..=9 => FileKind::File,
                10..=13 => FileKind::Directory,
                _ => FileKind::Symlink,
            };
            if kind == FileKind::Directory && dirs.len() >= DIRS_PER_THREAD_MAX {
                return None;
            }
            let dir = pick(rng, &dirs)?;
            let name = name(rng);
            if model.node(dir).entries.contains_key(&name) {
                return None;
            }
            let mode = 0o600 | rng.below(0o200) as u32;
            let target = pattern(1 + rng.below(60) as usize, data_seed)
                .iter()
                .map(|b| b'a' + b % 26)
                .collect::<Vec<u8>>();
            let result = match kind {
                FileKind::File => fs.create(dir, &name, new_inode(kind, mode)),
                FileKind::Directory => fs.mkdir(dir, &name, new_inode(kind, mode | 0o700)),
                _ => fs.symlink(dir, &name, &target, new_inode(kind, 0)),
            };
            let text = format!("{kind:?} {dir}/{}", show(&name));
            let mode = match kind {
                FileKind::File => mode,
                FileKind::Directory => mode | 0o700,
                _ => 0o777,
            };
            match result {
                Ok((object, _)) => {
                    let node = match kind {
                        FileKind::Symlink => Node::new(kind, mode, target),
                        _ => Node::new(kind, mode, Vec::new()),
                    };
                    model.nodes.insert(object, node);
                    model.node_mut(dir).entries.insert(name, object);
                    (format!("{text} = {object}"), None, Ok(()))
                }
                Err(err) => {
                    let data = if kind == FileKind::Symlink {
                        target
                    } else {
                        Vec::new()
                    };
                    model.unsure_create = Some((dir, name, Node::new(kind, mode, data)));
                    (text, None, Err(err))
                }
            }
        }
        17..=41 => {
            let object = pick(rng, &files)?;
            let size = model.node(object).data.len() as u64;
            let len = match rng.below(10) {
                0..=3 => 1 + rng.below(600),
                4..=7 => 1 + rng.below(20_000),
                _ => 1 + rng.below(100_000),
            };
            let offset = match rng.below(5) {
                0 => size,
                1 => size + rng.below(2 * recordsize),
                2 => rng.below(size / recordsize + 2) * recordsize,
                _ => rng.below(size + 1),
            }
            .min(FILE_BYTES_MAX.saturating_sub(len));
            let data = pattern(len as usize, data_seed);
            let node = model.node_mut(object);
            let contents = Arc::make_mut(&mut node.data);
            let end = (offset + len) as usize;
            if contents.len() < end {
                contents.resize(end, 0);
            }
            contents[offset as usize..end].copy_from_slice(&data);
            model.last_write = Some((object, offset, len, data_seed));
            // One write in four is synchronous (a file opened O_DSYNC): durable on return,
            // its whole blocks written in place under logbias=throughput.
            if rng.below(4) == 0 {
                (
                    format!("sync write {object} at {offset}, {len} bytes"),
                    Some(object),
                    fs.write_sync(object, offset, &data).map(|_| ()),
                )
            } else {
                (
                    format!("write {object} at {offset}, {len} bytes"),
                    None,
                    fs.write(object, offset, &data).map(|_| ()),
                )
            }
        }
        42..=46 => {
            let object = pick(rng, &files)?;
            let size = model.node(object).data.len() as u64;
            let new_size = rng.below(2 * size + 1000).min(FILE_BYTES_MAX);
            Arc::make_mut(&mut model.node_mut(object).data).resize(new_size as usize, 0);
            let changes = SetAttrs {
                size: Some(new_size),
                ..SetAttrs::default()
            };
            (
                format!("truncate {object} from {size} to {new_size}"),
                None,
                fs.setattr(object, changes).map(|_| ()),
            )
        }
        47..=49 => {
            let targets = model.objects_of(|node| node.kind != FileKind::Symlink);
            let object = pick(rng, &targets)?;
            let mode = 0o700 | rng.below(0o100) as u32;
            model.node_mut(object).mode = mode;
            let changes = SetAttrs {
                mode: Some(mode),
                ..SetAttrs::default()
            };
            (
                format!("chmod {object} {mode:o}"),
                None,
                fs.setattr(object, changes).map(|_| ()),
            )
        }
        50..=59 => {
            let entries = model.entries();
            if entries.is_empty() {
                return None;
            }
            let (old_dir, old_name, source) =
                entries[rng.below(entries.len() as u64) as usize].clone();
            let new_dir = pick(rng, &dirs)?;
            let new_name = name(rng);
            let target = model.node(new_dir).entries.get(&new_name).copied();
            if target == Some(source) {
                return None;
            }
            let mode = match rng.below(6) {
                0 => RenameMode::NoReplace,
                1 => RenameMode::Exchange,
                _ => RenameMode::Replace,
            };
            let source_dir = model.node(source).kind == FileKind::Directory;
            if source_dir && old_dir != new_dir && model.within(source, new_dir) {
                return None;
            }
            match (mode, target) {
                (RenameMode::NoReplace, Some(_)) | (RenameMode::Exchange, None) => return None,
                (RenameMode::Exchange, Some(target)) => {
                    let target_dir = model.node(target).kind == FileKind::Directory;
                    if target_dir && old_dir != new_dir && model.within(target, old_dir) {
                        return None;
                    }
                    model
                        .node_mut(old_dir)
                        .entries
                        .insert(old_name.clone(), target);
                    model
                        .node_mut(new_dir)
                        .entries
                        .insert(new_name.clone(), source);
                }
                (_, target) => {
                    if let Some(target) = target {
                        let target_node = model.node(target);
                        let target_dir = target_node.kind == FileKind::Directory;
                        if source_dir != target_dir || target_dir && !target_node.entries.is_empty()
                        {
                            return None;
                        }
                    }
                    model.node_mut(old_dir).entries.remove(&old_name);
                    model
                        .node_mut(new_dir)
                        .entries
                        .insert(new_name.clone(), source);
                    model.collect();
                }
            }
            (
                format!(
                    "rename {old_dir}/{} to {new_dir}/{} {mode:?} (source {source}, target {target:?})",
                    show(&old_name),
                    show(&new_name)
                ),
                None,
                fs.rename(old_dir, &old_name, new_dir, &new_name, mode),
            )
        }
        60..=63 => {
            let linkable = model.named_of(|node| node.kind != FileKind::Directory);
            let object = pick(rng, &linkable)?;
            let dir = pick(rng, &dirs)?;
            let name = name(rng);
            if model.node(dir).entries.contains_key(&name) {
                return None;
            }
            model.node_mut(dir).entries.insert(name.clone(), object);
            (
                format!("link {object} as {dir}/{}", show(&name)),
                None,
                fs.link(object, dir, &name).map(|_| ()),
            )
        }
        64..=72 => {
            let entries = model.entries();
            let (dir, name, object) = entries
                .get(rng.below(entries.len().max(1) as u64) as usize)?
                .clone();
            let node = model.node(object);
            let is_dir = node.kind == FileKind::Directory;
            if is_dir && !node.entries.is_empty() {
                return None;
            }
            model.node_mut(dir).entries.remove(&name);
            model.collect();
            let text = format!(
                "{} {dir}/{} ({object})",
                if is_dir { "rmdir" } else { "unlink" },
                show(&name)
            );
            let result = if is_dir {
                fs.rmdir(dir, &name)
            } else {
                fs.unlink(dir, &name)
            };
            (text, None, result)
        }
        73..=77 => {
            let targets = model.objects_of(|node| node.kind != FileKind::Symlink);
            let object = pick(rng, &targets)?;
            let name = XATTR_NAMES[rng.below(XATTR_NAMES.len() as u64) as usize];
            let exists = model.node(object).xattrs.contains_key(name);
            if exists && rng.below(3) == 0 {
                model.node_mut(object).xattrs.remove(name);
                (
                    format!("removexattr {object} {}", show(name)),
                    None,
                    fs.removexattr(object, name),
                )
            } else {
                // One value in four too large for the attribute map (its own object).
                let len = if rng.below(4) == 0 {
                    1025 + rng.below((64 << 10) - 1024)
                } else {
                    rng.below(300)
                };
                let value = pattern(len as usize, data_seed);
                model
                    .node_mut(object)
                    .xattrs
                    .insert(name.to_vec(), value.clone());
                (
                    format!("setxattr {object} {} ({} bytes)", show(name), value.len()),
                    None,
                    fs.setxattr(object, name, &value, XattrMode::Any),
                )
            }
        }
        78..=83 => {
            let object = pick(rng, &files)?;
            let size = model.node(object).data.len() as u64;
            let offset = rng.below(size + recordsize);
            let len = 1 + rng.below(3 * recordsize);
            let end = offset + len;
            let op = match rng.below(4) {
                0 | 1 => Fallocate::PunchHole,
                2 => Fallocate::ZeroRange { keep_size: false },
                _ => Fallocate::Allocate { keep_size: false },
            };
            if end > FILE_BYTES_MAX {
                return None;
            }
            let contents = Arc::make_mut(&mut model.node_mut(object).data);
            if op != (Fallocate::Allocate { keep_size: false }) && offset < size {
                contents[offset as usize..end.min(size) as usize].fill(0);
            }
            if op != Fallocate::PunchHole && end > size {
                contents.resize(end as usize, 0);
            }
            (
                format!("fallocate {object} {op:?} at {offset}, {len} bytes"),
                None,
                fs.fallocate(object, offset, len, op).map(|_| ()),
            )
        }
        84..=86 => {
            // Open a named file, or let go of one (an orphan is then freed).
            if !model.open.is_empty() && rng.below(2) == 0 {
                let object = model
                    .open
                    .remove(rng.below(model.open.len() as u64) as usize);
                model.orphans.remove(&object);
                (format!("release {object}"), None, fs.release_inode(object))
            } else {
                let closed = model.named_of(|node| node.kind == FileKind::File);
                let closed: Vec<u64> = closed
                    .into_iter()
                    .filter(|object| !model.open.contains(object))
                    .collect();
                let object = pick(rng, &closed)?;
                model.open.push(object);
                (format!("open {object}"), None, fs.open_inode(object))
            }
        }
        _ => {
            let all = model.objects_of(|_| true);
            let object = pick(rng, &all)?;
            (format!("fsync {object}"), Some(object), fs.fsync(object))
        }
    })
}

/// One thread's workload on its subtree until it has started `until` operations; stops at
/// the first error (the power is gone).
pub fn run_thread(
    fs: &Filesystem,
    run: &mut ThreadRun,
    seed: u64,
    until: usize,
    scenario: &Scenario,
    power: &PowerSwitch,
    progress: &Progress,
) {
    let recordsize = scenario.recordsize;
    while run.started < until && run.failure.is_none() {
        let data_seed = (seed << 32) | ((run.thread as u64) << 20) | run.started as u64;
        let mut next = run.model.clone();
        next.last_write = None;
        next.unsure_create = None;
        progress.begun.store(run.started + 1, Ordering::SeqCst);
        let Some((text, fsynced, result)) =
            step(fs, &mut next, &mut run.rng, recordsize, data_seed)
        else {
            continue;
        };
        run.started += 1;
        run.described.push(text.clone());
        run.states.push(next.clone());
        match result {
            Ok(()) => {
                run.model = next;
                progress.done.store(run.started, Ordering::SeqCst);
                // An fsync commits its inode's own changes and every namespace change; under
                // sync=always every change is durable when it returns.
                if let Some(object) = fsynced {
                    run.fsynced = run.started;
                    run.own_fsynced.insert(object, run.started);
                }
                if scenario.sync_always {
                    run.all_durable();
                }
            }
            Err(err) => {
                run.failure = Some((text, err.to_string(), power.tripped()));
            }
        }
    }
}
