//! # Partial writes without a read first
//!
//! A write that covers part of a block used to read the block's current version, patch it and
//! dirty the whole block: on a pool of disks every such write waited for a disk read (an 8 KiB
//! write into a 16 KiB block ran at the disk's random-read rate). Here the writer waits for
//! nothing: `write_partial` records only the bytes it was given, a `Patch`, and the older
//! version is merged in later.
//!
//! - **At write.** If the block's newest version is in memory already (a change of this or an
//!   older pending txg, or the block in the ARC), it is patched at once into a whole block, as
//!   before: no read is saved by waiting. Otherwise the bytes go into the txg's patch for the
//!   block (one buffer of the block's size and the list of byte ranges written; later partial
//!   writes in the same txg add to it), and a read of the older version is started in the
//!   background when its pointer is at hand, so that it is usually cached by the time it is
//!   needed.
//! - **On read.** A reader walks the versions newest first, collecting patches until it meets a
//!   whole version (a pending change, a hole, or the synced tree), reads that and applies the
//!   patches oldest first. A read of bytes the patches cover alone (the intent log reading back
//!   what a write gave, a database reading the page it just wrote) never reads the older
//!   version (`read_block_range`).
//! - **At txg sync.** `resolve_patches` runs before the tree is rewritten: it reads the older
//!   versions of all the txg's patched blocks, many at a time in disk order (the device queues
//!   sort and aggregate them), merges, and stores whole blocks in the change set. The
//!   copy-on-write code below never sees a patch (asserted).
//!
//! Invariants: a patch's buffer has the block's size and holds zeros outside its ranges; its
//! ranges are sorted, disjoint and not adjacent; a txg holds at most one version of a block
//! (whole, hole or patch). The dirty-data accounting is unchanged: a patched block counts its
//! whole size once per txg, as the whole block will be written.
//!
//! Known gap: if the older version cannot be read at sync (every copy bad), the bytes the
//! patch does not cover are written as zeros — they were lost already, and every read before
//! the sync failed with the error — and the loss is counted (`PatchStats::bases_lost`), not yet
//! listed as a permanent error of the file.

use crate::tree::{TreeReader, tree_block_pointer};
use crate::{BlockChange, ObjectError, ObjectSet, State};
use bytes::Bytes;
use cairn_arc::CacheMode;
use cairn_format::BlockPointer;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Reads of older versions in flight at once while a txg sync resolves patches.
const RESOLVE_READERS_MAX: usize = 32;

/// The bytes partial writes gave a block in one txg.
#[derive(Clone)]
pub(crate) struct Patch {
    /// The block's size; zeros outside `ranges`.
    bytes: Vec<u8>,
    /// Byte ranges written: sorted, disjoint, not adjacent.
    ranges: Vec<Range<usize>>,
}

impl Patch {
    fn new(block_bytes: usize) -> Patch {
        Patch {
            bytes: vec![0; block_bytes],
            ranges: Vec::new(),
        }
    }

    pub(crate) fn block_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Lets `fill` write `range` of the block and records it as written.
    fn fill(&mut self, range: Range<usize>, fill: impl FnOnce(&mut [u8])) {
        assert!(range.end <= self.bytes.len() && range.start < range.end);
        fill(&mut self.bytes[range.clone()]);
        add_range(&mut self.ranges, range);
    }

    /// Copies the written bytes over `block` (a version of the same block).
    fn apply(&self, block: &mut [u8]) {
        for range in &self.ranges {
            let end = range.end.min(block.len());
            if range.start < end {
                block[range.start..end].copy_from_slice(&self.bytes[range.start..end]);
            }
        }
    }

    /// Copies the written bytes that fall in `window` over `out` (`out` holds `window`).
    fn apply_window(&self, window: &Range<usize>, out: &mut [u8]) {
        for range in &self.ranges {
            let start = range.start.max(window.start);
            let end = range.end.min(window.end);
            if start < end {
                out[start - window.start..end - window.start]
                    .copy_from_slice(&self.bytes[start..end]);
            }
        }
    }
}

/// Adds `new` to sorted, disjoint, non-adjacent `ranges`, keeping them so.
fn add_range(ranges: &mut Vec<Range<usize>>, new: Range<usize>) {
    let mut merged = new;
    let mut kept = Vec::with_capacity(ranges.len() + 1);
    for range in ranges.drain(..) {
        if range.end < merged.start || range.start > merged.end {
            kept.push(range);
        } else {
            merged = merged.start.min(range.start)..merged.end.max(range.end);
        }
    }
    let at = kept.partition_point(|range| range.start < merged.start);
    kept.insert(at, merged);
    *ranges = kept;
}

/// Whether the union of the patches' ranges covers `window`.
fn covered(patches: &[&Patch], window: &Range<usize>) -> bool {
    let mut union = Vec::new();
    for patch in patches {
        for range in &patch.ranges {
            add_range(&mut union, range.clone());
        }
    }
    union
        .iter()
        .any(|range| range.start <= window.start && range.end >= window.end)
}

/// Where a block's versions stop being patches.
pub(crate) enum Base {
    /// A whole version (or a hole: `None`) in a pending change set.
    Version(Option<Bytes>),
    /// The synced tree.
    Tree,
}

/// Counters of the partial-write path (cumulative, per object set).
#[derive(Default)]
pub(crate) struct PatchCounters {
    deferred: AtomicU64,
    merged_at_write: AtomicU64,
    resolved: AtomicU64,
    bases_lost: AtomicU64,
}

/// What the partial-write path did, for `stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PatchStats {
    /// Partial writes recorded without reading the block (a read saved in the writer's path).
    pub deferred: u64,
    /// Partial writes merged at once with a version already in memory.
    pub merged_at_write: u64,
    /// Patched blocks merged with their older version by a txg sync.
    pub resolved: u64,
    /// Patched blocks whose older version could not be read at sync (see the module doc).
    pub bases_lost: u64,
}

/// The pending versions of a block, newest first, below txg `below` (all with `None`): the txgs
/// holding patches, and where a whole version is found.
pub(crate) fn version_chain(
    state: &State,
    object: u64,
    blkid: u64,
    below: Option<u64>,
) -> Result<(Vec<u64>, Base), ObjectError> {
    let mut patched = Vec::new();
    let versions = match below {
        Some(txg) => state.changes.range(..txg),
        None => state.changes.range(..),
    };
    for (&txg, changes) in versions.rev() {
        if let Some(change) = changes.blocks.get(&(object, blkid)) {
            if change.patch.is_none() {
                return Ok((patched, Base::Version(change.data.clone())));
            }
            patched.push(txg);
        }
        if let Some(dnode) = changes.dnodes.get(&object) {
            // Object freed, or (re)created in this very txg: nothing older is visible.
            // A dnode changed in a later txg than its birth (a bonus, a block size)
            // hides nothing: older txgs' blocks still count.
            if dnode.is_free() {
                return Err(ObjectError::NoSuchObject(object));
            }
            if dnode.birth_txg == txg {
                return Ok((patched, Base::Version(None)));
            }
        }
    }
    Ok((patched, Base::Tree))
}

/// The patches of `txgs` (newest first, from `version_chain`).
fn patches_of<'s>(state: &'s State, object: u64, blkid: u64, txgs: &[u64]) -> Vec<&'s Patch> {
    txgs.iter()
        .filter_map(|txg| state.changes.get(txg)?.blocks.get(&(object, blkid)))
        .filter_map(|change| change.patch.as_deref())
        .collect()
}

/// `base` with `patches` (newest first) applied oldest first.
pub(crate) fn merge(base: Option<Bytes>, patches: &[Patch]) -> Option<Bytes> {
    let Some(newest) = patches.first() else {
        return base;
    };
    let mut block = vec![0u8; newest.block_bytes()];
    if let Some(base) = &base {
        let len = base.len().min(block.len());
        block[..len].copy_from_slice(&base[..len]);
    }
    for patch in patches.iter().rev() {
        patch.apply(&mut block);
    }
    Some(Bytes::from(block))
}

/// What `write_partial` found under the state lock.
enum Step {
    Done {
        newly_dirty: bool,
        freed: Option<BlockPointer>,
    },
    /// The older version is in the synced tree: look in the cache, then come back.
    NeedTree,
}

/// What `write_partial` knows of the synced version when it takes the lock.
enum Synced {
    /// Not looked for yet.
    Unknown,
    /// Found in the cache (`None`: a hole).
    Cached(Option<Bytes>),
    /// Not in memory: the write is deferred.
    NotCached,
}

impl ObjectSet {
    /// Writes bytes `range` of block `blkid` of `object` (whose blocks are `block_bytes` long)
    /// in `txg`, through `fill`, without waiting for the block's older version to be read (see
    /// the module doc). `range` must be a proper part of the block. Returns whether the block
    /// is newly dirty in `txg` (as `write_block`).
    pub fn write_partial(
        &self,
        txg: u64,
        object: u64,
        blkid: u64,
        block_bytes: u32,
        range: Range<usize>,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool, ObjectError> {
        let block_bytes = block_bytes as usize;
        assert!(
            range.start < range.end && range.end <= block_bytes,
            "partial write {range:?} of a {block_bytes}-byte block"
        );
        let mut fill = Some(fill);
        let mut synced = Synced::Unknown;
        loop {
            let deferring = matches!(synced, Synced::NotCached);
            let step = {
                let mut state = self.state.lock();
                self.partial_step(
                    &mut state,
                    (txg, object, blkid),
                    block_bytes,
                    &range,
                    &mut fill,
                    std::mem::replace(&mut synced, Synced::Unknown),
                )?
            };
            match step {
                Step::Done { newly_dirty, freed } => {
                    if let Some(bp) = freed {
                        self.io.free_block(&bp, txg);
                    }
                    if deferring {
                        self.prefetch_base(object, blkid);
                    }
                    return Ok(newly_dirty);
                }
                // Without the lock: this may read indirect blocks from the cache.
                Step::NeedTree => {
                    synced = match self.read_block_with(object, blkid, true) {
                        Ok(version) => Synced::Cached(version),
                        Err(ObjectError::NotCached) => Synced::NotCached,
                        Err(err) => return Err(err),
                    }
                }
            }
        }
    }

    /// One look at the block's versions up to `txg` under the lock: extend a pending patch,
    /// patch a whole version in memory at once, or defer; `NeedTree` when the synced version
    /// has not been looked for yet.
    fn partial_step(
        &self,
        state: &mut State,
        (txg, object, blkid): (u64, u64, u64),
        block_bytes: usize,
        range: &Range<usize>,
        fill: &mut Option<impl FnOnce(&mut [u8])>,
        synced: Synced,
    ) -> Result<Step, ObjectError> {
        if let Some(step) =
            self.patch_own_version(state, (txg, object, blkid), block_bytes, range, fill)
        {
            return Ok(step);
        }
        let (patched, base) = version_chain(state, object, blkid, Some(txg + 1))?;
        let version = match (patched.is_empty(), base, synced) {
            (true, Base::Version(version), _) | (true, Base::Tree, Synced::Cached(version)) => {
                version
            }
            (true, Base::Tree, Synced::Unknown) => return Ok(Step::NeedTree),
            // A pending patch (this txg's or an older one) or nothing in memory: defer.
            _ => {
                return Ok(self.defer_partial(
                    state,
                    (txg, object, blkid),
                    block_bytes,
                    range,
                    fill,
                ));
            }
        };
        let mut block = match version {
            Some(data) if data.len() == block_bytes => data.to_vec(),
            None => vec![0u8; block_bytes],
            // Never zeros in place of data: `set_block_size` replaces block 0 in the same txg.
            Some(data) => {
                return Err(ObjectError::Corrupt(format!(
                    "block {blkid} of object {object}: a pending version of {} bytes, blocks are \
                     {block_bytes}",
                    data.len()
                )));
            }
        };
        let fill = fill.take().expect("fill used once");
        fill(&mut block[range.clone()]);
        let change = BlockChange {
            cache_written: true,
            ..BlockChange::data(Bytes::from(block))
        };
        let new_bytes = self.new_block_bytes(state, txg, object, blkid, block_bytes as u64);
        let changes = state.changes_of(txg);
        let replaced = changes.blocks.insert((object, blkid), change);
        if replaced.is_none() {
            changes.new_data_bytes += new_bytes;
        }
        self.patch_counters
            .merged_at_write
            .fetch_add(1, Ordering::Relaxed);
        Ok(Step::Done {
            newly_dirty: replaced.is_none(),
            freed: replaced.and_then(|old| old.written),
        })
    }

    /// A whole version of this very txg is patched where it lies (copied only if a reader or
    /// the front end's buffer shares it). `None` when the txg has no whole version.
    fn patch_own_version(
        &self,
        state: &mut State,
        (txg, object, blkid): (u64, u64, u64),
        block_bytes: usize,
        range: &Range<usize>,
        fill: &mut Option<impl FnOnce(&mut [u8])>,
    ) -> Option<Step> {
        let change = state
            .changes
            .get_mut(&txg)?
            .blocks
            .get_mut(&(object, blkid))?;
        if change.patch.is_some()
            || change.written.is_some()
            || change
                .data
                .as_ref()
                .is_none_or(|data| data.len() != block_bytes)
        {
            // A patch, a block written in place, a hole, or (never kept past
            // `set_block_size`) a version of another size: the general path decides.
            return None;
        }
        let data = change.data.take()?;
        let mut block = match data.try_into_mut() {
            Ok(unique) => unique,
            Err(shared) => bytes::BytesMut::from(&shared[..]),
        };
        (fill.take().expect("fill used once"))(&mut block[range.clone()]);
        change.data = Some(block.freeze());
        change.cache_written = true;
        self.patch_counters
            .merged_at_write
            .fetch_add(1, Ordering::Relaxed);
        Some(Step::Done {
            newly_dirty: false,
            freed: None,
        })
    }

    /// Records the bytes in the txg's patch of the block (made if the txg has no version of
    /// the block yet: `partial_step` found none that is whole).
    fn defer_partial(
        &self,
        state: &mut State,
        (txg, object, blkid): (u64, u64, u64),
        block_bytes: usize,
        range: &Range<usize>,
        fill: &mut Option<impl FnOnce(&mut [u8])>,
    ) -> Step {
        let new_bytes = self.new_block_bytes(state, txg, object, blkid, block_bytes as u64);
        let changes = state.changes_of(txg);
        let newly_dirty = !changes.blocks.contains_key(&(object, blkid));
        if newly_dirty {
            changes.new_data_bytes += new_bytes;
        }
        let change = changes
            .blocks
            .entry((object, blkid))
            .or_insert_with(|| BlockChange {
                patch: Some(Box::new(Patch::new(block_bytes))),
                cache_written: true,
                ..BlockChange::default()
            });
        let patch = change.patch.as_mut().expect("the txg's version is a patch");
        assert_eq!(patch.block_bytes(), block_bytes, "patch of another size");
        patch.fill(range.clone(), fill.take().expect("fill used once"));
        self.patch_counters.deferred.fetch_add(1, Ordering::Relaxed);
        Step::Done {
            newly_dirty,
            freed: None,
        }
    }

    /// Starts reading the synced version of a block in the background, when its pointer is at
    /// hand without I/O and the cache would keep it (a hint: failures are the sync's to meet).
    fn prefetch_base(&self, object: u64, blkid: u64) {
        let policy = self.cache_mode();
        if policy.primary != CacheMode::All {
            return;
        }
        let dnode = match self.state.lock().dnodes.peek(object) {
            Some(dnode) => dnode.clone(),
            None => return,
        };
        let reader = TreeReader {
            io: &self.io,
            mode: policy,
            cached_only: true,
        };
        if let Ok(Some(bp)) = tree_block_pointer(&reader, &dnode, blkid) {
            self.io.prefetch(&[bp], policy);
        }
    }

    /// Reads bytes `window` of block `blkid` of `object` into `out`, as `read_block` would see
    /// them, without reading an older version the pending patches cover. Holes read as zeros.
    pub fn read_block_range(
        &self,
        object: u64,
        blkid: u64,
        window: Range<usize>,
        out: &mut [u8],
    ) -> Result<(), ObjectError> {
        assert_eq!(out.len(), window.len(), "window and buffer differ");
        self.block_range(object, blkid, window, RangeOut::Slice(out))
    }

    /// `read_block_range` appending to `out`: the bytes are copied once, with no zeroed
    /// buffer to copy them over (a file read's reply is built this way).
    pub fn append_block_range(
        &self,
        object: u64,
        blkid: u64,
        window: Range<usize>,
        out: &mut Vec<u8>,
    ) -> Result<(), ObjectError> {
        self.block_range(object, blkid, window, RangeOut::Append(out))
    }

    fn block_range(
        &self,
        object: u64,
        blkid: u64,
        window: Range<usize>,
        mut out: RangeOut<'_>,
    ) -> Result<(), ObjectError> {
        {
            let state = self.state.lock();
            let (txgs, _) = version_chain(&state, object, blkid, None)?;
            let patches = patches_of(&state, object, blkid, &txgs);
            if !patches.is_empty() && covered(&patches, &window) {
                let target = out.zeroed(window.len());
                for patch in patches.iter().rev() {
                    patch.apply_window(&window, target);
                }
                return Ok(());
            }
        }
        match self.read_block(object, blkid)? {
            Some(block) if block.len() >= window.end => out.copy(&block[window]),
            Some(_) => {
                return Err(ObjectError::Corrupt(format!(
                    "block {blkid} of object {object} is shorter than a read of {window:?}"
                )));
            }
            None => {
                out.zeroed(window.len());
            }
        }
        Ok(())
    }

    /// Merges every patched block of `txg` with its older version (the txg sync, before the
    /// tree is rewritten; see the module doc).
    pub(crate) fn resolve_patches(&self, txg: u64) -> Result<(), ObjectError> {
        let keys: Vec<(u64, u64)> = {
            let state = self.state.lock();
            state.changes.get(&txg).map_or_else(Vec::new, |changes| {
                changes
                    .blocks
                    .iter()
                    .filter(|(_, change)| change.patch.is_some())
                    .map(|(&key, _)| key)
                    .collect()
            })
        };
        if keys.is_empty() {
            return Ok(());
        }
        let next = AtomicU64::new(0);
        let readers = keys.len().min(RESOLVE_READERS_MAX);
        let bases: Vec<Vec<(usize, Option<Bytes>)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..readers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let index = next.fetch_add(1, Ordering::Relaxed) as usize;
                            let Some(&(object, blkid)) = keys.get(index) else {
                                return done;
                            };
                            done.push((index, self.older_version(object, blkid, txg)));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().unwrap_or_default())
                .collect()
        });
        let mut resolved = 0usize;
        let mut state = self.state.lock();
        let Some(changes) = state.changes.get_mut(&txg) else {
            return Ok(());
        };
        for (index, base) in bases.into_iter().flatten() {
            let Some(change) = changes.blocks.get_mut(&keys[index]) else {
                continue;
            };
            if let Some(patch) = change.patch.take() {
                change.data = merge(base, &[*patch]);
                resolved += 1;
            }
        }
        // A worker that panicked left its blocks unresolved: never write a patch as a block.
        if changes.blocks.values().any(|change| change.patch.is_some()) {
            return Err(ObjectError::Corrupt(format!(
                "txg {txg}: a partial write could not be merged with its block"
            )));
        }
        self.patch_counters
            .resolved
            .fetch_add(resolved as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The version of a block below `txg`; an unreadable one counts as lost (module doc).
    fn older_version(&self, object: u64, blkid: u64, txg: u64) -> Option<Bytes> {
        match self.read_version(object, blkid, Some(txg), false) {
            Ok(version) => version,
            Err(_) => {
                self.patch_counters
                    .bases_lost
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The partial-write path's counters.
    pub fn patch_stats(&self) -> PatchStats {
        let counters = &self.patch_counters;
        PatchStats {
            deferred: counters.deferred.load(Ordering::Relaxed),
            merged_at_write: counters.merged_at_write.load(Ordering::Relaxed),
            resolved: counters.resolved.load(Ordering::Relaxed),
            bases_lost: counters.bases_lost.load(Ordering::Relaxed),
        }
    }
}

/// Clones of the patches of `txgs` (newest first).
pub(crate) fn cloned_patches(state: &State, object: u64, blkid: u64, txgs: &[u64]) -> Vec<Patch> {
    patches_of(state, object, blkid, txgs)
        .into_iter()
        .cloned()
        .collect()
}

/// Where `block_range` puts the bytes: over a caller's buffer of the window's length, or
/// appended to a growing one.
enum RangeOut<'a> {
    Slice(&'a mut [u8]),
    Append(&'a mut Vec<u8>),
}

impl RangeOut<'_> {
    fn copy(&mut self, bytes: &[u8]) {
        match self {
            RangeOut::Slice(out) => out.copy_from_slice(bytes),
            RangeOut::Append(out) => out.extend_from_slice(bytes),
        }
    }

    /// The `len` bytes to write, zeroed.
    fn zeroed(&mut self, len: usize) -> &mut [u8] {
        match self {
            RangeOut::Slice(out) => {
                out.fill(0);
                out
            }
            RangeOut::Append(out) => {
                let start = out.len();
                out.resize(start + len, 0);
                &mut out[start..]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_stay_sorted() {
        let mut ranges = Vec::new();
        add_range(&mut ranges, 10..20);
        add_range(&mut ranges, 30..40);
        add_range(&mut ranges, 0..5);
        assert_eq!(ranges, vec![0..5, 10..20, 30..40]);
        add_range(&mut ranges, 20..30);
        assert_eq!(ranges, vec![0..5, 10..40]);
        add_range(&mut ranges, 3..12);
        assert_eq!(ranges, vec![0..40]);
    }

    #[test]
    fn newer_patches_win_and_coverage_spans_patches() {
        let mut old = Patch::new(16);
        old.fill(0..8, |b| b.fill(1));
        let mut new = Patch::new(16);
        new.fill(4..12, |b| b.fill(2));
        let merged = merge(
            Some(Bytes::from(vec![9u8; 16])),
            &[new.clone(), old.clone()],
        )
        .expect("a block");
        assert_eq!(
            &merged[..],
            &[1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 9, 9, 9, 9]
        );
        assert!(covered(&[&new, &old], &(0..12)));
        assert!(!covered(&[&new, &old], &(0..13)));
        let mut out = [0u8; 6];
        for patch in [&old, &new] {
            patch.apply_window(&(2..8), &mut out);
        }
        assert_eq!(out, [1, 1, 2, 2, 2, 2]);
    }
}
