//! Reading: dnodes, level-0 blocks, allocation maps and blobs, newest version first (the
//! pending change sets, then the published tree, walked with `tree`'s primitives). Every
//! pointer taken from disk is checked (`check`) before it is followed.

use crate::check::check_dnode;
use crate::memo::{self, block_memo_bytes, dnode_memo_bytes, memoised, unlock_dropping_retired};
use crate::patch::{Base, cloned_patches, merge, version_chain};
use crate::tree::{TreeReader, read_tree_block, tree_block_pointer};
use crate::{MEMO_META_OBJECT, MemoBlock, ObjectError, ObjectSet, Retired, State, tree};
use bytes::Bytes;
use cairn_arc::CacheMode;
use cairn_format::dnode::{DNODE_SIZE, DNODES_PER_BLOCK};
use cairn_format::{BlockPointer, Dnode};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What `ObjectSet::memo_lookup` found. Made and matched at once, never stored: a boxed
/// dnode would cost an allocation on every read.
#[allow(clippy::large_enum_variant)]
enum MemoLookup {
    /// The block (or the object is gone).
    Block(Result<Bytes, ObjectError>),
    /// Only the block's dnode.
    Dnode(Dnode),
    Miss,
}

impl ObjectSet {
    /// What `object` takes on disk as `stat`'s block count should show it: its synced
    /// `used_bytes`, plus the blocks its unsynced txgs give data beyond the synced tree's last
    /// block (appends, or every block of an object with no synced data), each in whole
    /// sectors. Without the second part a file just written shows no blocks until its txg
    /// syncs, and tools that take "no blocks" for "all hole" (GNU tar's `--sparse`, cp, backup
    /// tools) store it as zeros. Holes filled inside the synced range and overwrites add
    /// nothing until they sync (so the figure errs low there, never to zero for a file with
    /// data); frees subtract nothing until they sync.
    ///
    /// Cost: the pending dnodes of `object` (one lookup per unsynced txg) and its pending
    /// blocks past the synced tree's last block only. Overwrites inside the file count
    /// nothing, so they are never walked: NFS asks for this figure after every WRITE, and a
    /// walk of every pending block of a large file cost more than the write itself.
    pub fn allocated_bytes_estimate(&self, object: u64) -> Result<u64, ObjectError> {
        let sector_bytes = self.sector_bytes();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        // Newest first: the unsynced txgs whose blocks count, each with the size a patched
        // block of it takes (the newest dnode's block size as of that txg).
        let mut visited: Vec<(u64, u64)> = Vec::new();
        let mut newest_dnode: Option<&Dnode> = None;
        let mut fresh = false;
        for (&txg, changes) in state.changes.iter().rev() {
            let dnode = changes.dnodes.get(&object);
            if newest_dnode.is_none() {
                newest_dnode = dnode;
            }
            let patch_bytes = newest_dnode
                .or(dnode)
                .map_or(0, |dnode| u64::from(dnode.data_block_size));
            visited.push((txg, patch_bytes));
            if let Some(dnode) = dnode {
                if dnode.is_free() {
                    return Err(ObjectError::NoSuchObject(object));
                }
                // Created in this txg: nothing older counts.
                if dnode.birth_txg == txg {
                    fresh = true;
                    break;
                }
            }
        }
        let synced = if fresh {
            None
        } else {
            let dnode = self.synced_dnode(state, object)?;
            (!dnode.is_free()).then_some(dnode)
        };
        let synced_bytes = synced.as_ref().map_or(0, |dnode| dnode.used_bytes);
        let first_counted_block = synced
            .as_ref()
            .filter(|dnode| dnode.used_bytes > 0)
            .map_or(0, |dnode| dnode.max_block_id.saturating_add(1));
        // Each block's newest pending version counts once: a block is skipped in a txg when a
        // newer visited txg changes it too (a lookup, not a map built per call: a file being
        // appended to has thousands of pending blocks, and NFS asks after every WRITE).
        let range = (object, first_counted_block)..=(object, u64::MAX);
        let mut pending_bytes = 0u64;
        for (index, &(txg, patch_bytes)) in visited.iter().enumerate() {
            let Some(changes) = state.changes.get(&txg) else {
                continue;
            };
            let newer = &visited[..index];
            for (key, change) in changes.blocks.range(range.clone()) {
                let superseded = newer.iter().any(|(newer_txg, _)| {
                    state
                        .changes
                        .get(newer_txg)
                        .is_some_and(|newer| newer.blocks.contains_key(key))
                });
                if superseded {
                    continue;
                }
                let bytes = match (&change.data, &change.patch) {
                    (Some(data), _) => data.len() as u64,
                    (None, Some(_)) => patch_bytes,
                    (None, None) => 0,
                };
                pending_bytes += bytes.next_multiple_of(sector_bytes);
            }
        }
        unlock_dropping_retired(guard);
        Ok(synced_bytes + pending_bytes)
    }

    /// The newest version of a dnode: pending changes first, then the synced tree.
    pub fn dnode(&self, object: u64) -> Result<Dnode, ObjectError> {
        self.with_dnode(object, Dnode::clone)
    }

    /// Calls `f` with the dnode of `object` as `dnode` would return it, without copying it
    /// (a file's attributes are read on every lookup; the copy was most of its cost).
    pub fn with_dnode<R>(
        &self,
        object: u64,
        f: impl FnOnce(&Dnode) -> R,
    ) -> Result<R, ObjectError> {
        let budget = self.memo_generation_bytes_max();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let result = if let Some(dnode) = state
            .changes
            .values()
            .rev()
            .find_map(|changes| changes.dnodes.get(&object))
        {
            Ok(f(dnode))
        } else {
            let (hit, retired) = state.dnodes.get(object, budget);
            state.retired.extend(retired.map(Retired::Dnodes));
            match hit {
                Some(dnode) => Ok(f(dnode)),
                None => self.load_dnode(state, object).map(|dnode| f(&dnode)),
            }
        };
        unlock_dropping_retired(guard);
        result
    }

    pub(crate) fn synced_dnode(
        &self,
        state: &mut State,
        object: u64,
    ) -> Result<Dnode, ObjectError> {
        let budget = self.memo_generation_bytes_max();
        let (hit, retired) = state.dnodes.get(object, budget);
        let hit = hit.cloned();
        state.retired.extend(retired.map(Retired::Dnodes));
        match hit {
            Some(dnode) => Ok(dnode),
            None => self.load_dnode(state, object),
        }
    }

    /// Reads a synced dnode the memo does not hold from its dnode block, and memoises it.
    fn load_dnode(&self, state: &mut State, object: u64) -> Result<Dnode, ObjectError> {
        let budget = self.memo_generation_bytes_max();
        let block_id = object / DNODES_PER_BLOCK;
        let dnode = match self.meta_block(state, block_id, budget)? {
            None => Dnode::free(),
            Some(block) => {
                let slot = (object % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
                let raw = block.get(slot..slot + DNODE_SIZE).ok_or_else(|| {
                    ObjectError::Corrupt(format!("dnode {object}: dnode block too short"))
                })?;
                let dnode = Dnode::decode(raw)
                    .map_err(|err| ObjectError::Corrupt(format!("dnode {object}: {err}")))?;
                check_dnode(&dnode, Some(object), state.last_synced_txg)?;
                dnode
            }
        };
        let retired = state
            .dnodes
            .insert(object, dnode.clone(), dnode_memo_bytes(&dnode), budget);
        state.retired.extend(retired.map(Retired::Dnodes));
        Ok(dnode)
    }

    /// Block `block_id` of the meta-dnode (32 dnodes), from the memo or the tree.
    fn meta_block(
        &self,
        state: &mut State,
        block_id: u64,
        budget: u64,
    ) -> Result<Option<Bytes>, ObjectError> {
        let key = (MEMO_META_OBJECT, block_id);
        let (hit, retired) = state.blocks.get(key, budget);
        let hit = hit.map(|memo| memo.data.clone());
        state.retired.extend(retired.map(Retired::Blocks));
        if hit.is_some() {
            return Ok(hit);
        }
        let meta = state.meta_dnode.clone();
        let block = read_tree_block(&self.reader(), &meta, block_id)?;
        if let Some(data) = &block
            && self.cache_mode().primary != CacheMode::None
        {
            let memo = MemoBlock {
                birth_txg: 0,
                data_block_size: 0,
                data: data.clone(),
            };
            let retired = state
                .blocks
                .insert(key, memo, block_memo_bytes(data), budget);
            state.retired.extend(retired.map(Retired::Blocks));
        }
        Ok(block)
    }

    /// The memos' sizes and use (`memo`).
    pub fn memo_stats(&self) -> memo::MemoStats {
        let state = self.state.lock();
        memo::MemoStats {
            dnodes: state.dnodes.counts(),
            blocks: state.blocks.counts(),
            generation_bytes_max: self.memo_generation_bytes_max(),
        }
    }

    /// A memo generation's byte budget now (`memo`): it follows the ARC's target.
    pub(crate) fn memo_generation_bytes_max(&self) -> u64 {
        memo::generation_bytes_max(self.io.cache().target_bytes())
    }

    /// Reads block `blkid` of `object`; `None` is a hole (reads as zeros).
    pub fn read_block(&self, object: u64, blkid: u64) -> Result<Option<Bytes>, ObjectError> {
        self.read_block_with(object, blkid, false)
    }

    /// `read_block` for a caller that must not wait for I/O (a reader on an async runtime):
    /// `None` when the block, a pointer on the way to it, or its dnode is not in memory (the
    /// caller then reads it the ordinary way, which also reports any error).
    pub fn read_block_cached(&self, object: u64, blkid: u64) -> Option<Option<Bytes>> {
        self.read_block_with(object, blkid, true).ok()
    }

    pub(crate) fn read_block_with(
        &self,
        object: u64,
        blkid: u64,
        cached_only: bool,
    ) -> Result<Option<Bytes>, ObjectError> {
        self.read_version(object, blkid, None, cached_only)
    }

    /// The block as of the versions below txg `below` (all with `None`): pending patches
    /// (`patch.rs`) applied over the newest whole version, pending or synced.
    pub(crate) fn read_version(
        &self,
        object: u64,
        blkid: u64,
        below: Option<u64>,
        cached_only: bool,
    ) -> Result<Option<Bytes>, ObjectError> {
        let (patches, dnode, published) = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let (txgs, base) = version_chain(state, object, blkid, below)?;
            let patches = cloned_patches(state, object, blkid, &txgs);
            let dnode = match base {
                Base::Version(version) => return Ok(merge(version, &patches)),
                Base::Tree => match self.memo_lookup(state, object, blkid) {
                    MemoLookup::Block(hit) => {
                        unlock_dropping_retired(guard);
                        return hit.map(|data| merge(Some(data), &patches));
                    }
                    MemoLookup::Dnode(dnode) => dnode,
                    MemoLookup::Miss if cached_only => return Err(ObjectError::NotCached),
                    MemoLookup::Miss => self.load_dnode(state, object)?,
                },
            };
            if dnode.is_free() {
                unlock_dropping_retired(guard);
                return Err(ObjectError::NoSuchObject(object));
            }
            let published = state.last_synced_txg;
            unlock_dropping_retired(guard);
            (patches, dnode, published)
        };
        let mode = self.cache_mode();
        let reader = TreeReader {
            io: &self.io,
            mode,
            cached_only,
        };
        let block = read_tree_block(&reader, &dnode, blkid)?;
        if let Some(data) = &block
            && memoised(&dnode)
            && mode.primary != CacheMode::None
        {
            self.memoise_block(object, blkid, &dnode, data, published);
        }
        Ok(merge(block, &patches))
    }

    /// What the memo holds for block `blkid` of `object`: the block itself when both its dnode
    /// and the block are there (the common case for a directory at rest: no copy of the dnode,
    /// no walk), else the dnode when it is there (one lookup on every read of a file or volume).
    fn memo_lookup(&self, state: &mut State, object: u64, blkid: u64) -> MemoLookup {
        let budget = self.memo_generation_bytes_max();
        let (dnode, retired) = state.dnodes.get(object, budget);
        state.retired.extend(retired.map(Retired::Dnodes));
        let Some(dnode) = dnode else {
            return MemoLookup::Miss;
        };
        if dnode.is_free() {
            return MemoLookup::Block(Err(ObjectError::NoSuchObject(object)));
        }
        if !memoised(dnode) {
            return MemoLookup::Dnode(dnode.clone());
        }
        let (block, retired) = state.blocks.get((object, blkid), budget);
        let data = block
            .filter(|memo| {
                memo.birth_txg == dnode.birth_txg && memo.data_block_size == dnode.data_block_size
            })
            .map(|memo| memo.data.clone());
        state.retired.extend(retired.map(Retired::Blocks));
        match data {
            Some(data) => MemoLookup::Block(Ok(data)),
            None => MemoLookup::Dnode(dnode.clone()),
        }
    }

    /// Keeps a block just read from the published tree in the memo, unless a txg was published
    /// since the read began (the block may have changed: see `memo`).
    fn memoise_block(&self, object: u64, blkid: u64, dnode: &Dnode, data: &Bytes, published: u64) {
        let budget = self.memo_generation_bytes_max();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.last_synced_txg != published {
            return;
        }
        let memo = MemoBlock {
            birth_txg: dnode.birth_txg,
            data_block_size: dnode.data_block_size,
            data: data.clone(),
        };
        let retired = state
            .blocks
            .insert((object, blkid), memo, block_memo_bytes(data), budget);
        state.retired.extend(retired.map(Retired::Blocks));
        unlock_dropping_retired(guard);
    }

    /// Tells the object set a client read blocks `first .. first + count` of `object`: a read
    /// that continues a sequential stream starts read-ahead of the blocks that follow (read
    /// in the background into the cache). Read-ahead is a hint: failures are left to the
    /// demand reads that follow.
    ///
    /// Never waits for I/O (a reader on an async runtime calls it): finding the pointers of
    /// the blocks ahead, which may read indirect blocks, happens on a prefetch thread.
    pub fn note_read(self: &Arc<Self>, object: u64, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        let ahead = self.streams.lock().observe_request(object, first, count);
        let mode = self.cache_mode();
        if ahead.is_empty() || mode.primary != CacheMode::All {
            // Read-ahead of blocks the cache would not keep is wasted work.
            return;
        }
        // Usually the pointers are in cached indirect blocks: queue the reads now, ahead of
        // the demand reads that follow. Otherwise a prefetch thread reads the indirects.
        if let Some(bps) = self.blocks_ahead(object, ahead.clone(), true) {
            self.io.prefetch(&bps, mode);
            return;
        }
        let this = self.clone();
        self.io.spawn_prefetch_task(move || {
            if let Some(bps) = this.blocks_ahead(object, ahead, false) {
                this.io.prefetch(&bps, mode);
            }
        });
    }

    /// Starts reading blocks `blkids` of `object` into the cache in the background, for a
    /// caller about to read many small objects one after another (a destroy's background
    /// frees reading deadlist parts in the sync), so their reads overlap instead of each
    /// waiting in turn. The dnode and indirect blocks on the way are read now (many dnodes
    /// share a block). A hint: failures are left to the reads that follow.
    pub fn prefetch_blocks(&self, object: u64, blkids: std::ops::Range<u64>) {
        let mode = self.cache_mode();
        if blkids.is_empty() || mode.primary == CacheMode::None {
            return;
        }
        if let Some(bps) = self.blocks_ahead(object, blkids, false) {
            self.io.prefetch(&bps, mode);
        }
    }

    /// The pointers of the blocks `ahead` of `object` that are on disk (blocks changed in an
    /// unsynced txg are in memory already). With `cached_only`, `None` if finding them would
    /// need a read (an indirect block or the dnode not in memory); `None` also on errors
    /// (read-ahead is a hint: the demand reads that follow report them).
    fn blocks_ahead(
        &self,
        object: u64,
        ahead: std::ops::Range<u64>,
        cached_only: bool,
    ) -> Option<Vec<BlockPointer>> {
        let (dnode, blkids) = {
            let mut state = self.state.lock();
            // A pending change of the dnode (a file's access time, its size) leaves the synced
            // tree valid for every block no pending txg changed, as reads see it; only an
            // object freed or created in a pending txg has no synced tree to read ahead in.
            // (Skipping every dirty dnode skipped every file read with atime on: each read
            // dirtied its dnode.)
            let unsynced = state.changes.iter().any(|(&txg, changes)| {
                changes
                    .dnodes
                    .get(&object)
                    .is_some_and(|dnode| dnode.is_free() || dnode.birth_txg == txg)
            });
            if unsynced {
                return Some(Vec::new());
            }
            let blkids: Vec<u64> = ahead
                .filter(|&blkid| {
                    !state
                        .changes
                        .values()
                        .any(|changes| changes.blocks.contains_key(&(object, blkid)))
                })
                .collect();
            let dnode = if cached_only {
                state.dnodes.peek(object).cloned()?
            } else {
                self.synced_dnode(&mut state, object).ok()?
            };
            (dnode, blkids)
        };
        let reader = TreeReader {
            io: &self.io,
            mode: self.cache_mode(),
            cached_only,
        };
        let mut bps = Vec::with_capacity(blkids.len());
        for blkid in blkids {
            if let Some(bp) = tree_block_pointer(&reader, &dnode, blkid).ok()? {
                bps.push(bp);
            }
        }
        Some(bps)
    }

    /// Which of blocks `first .. first + count` of `object` hold data (true) or are holes,
    /// as a reader would see them now: pending changes first, then the synced tree. Reads no
    /// data blocks, only the indirect blocks covering the range.
    pub fn block_map(&self, object: u64, first: u64, count: u64) -> Result<Vec<bool>, ObjectError> {
        let (dnode, overlay) = {
            let mut state = self.state.lock();
            let mut overlay: BTreeMap<u64, bool> = BTreeMap::new();
            let mut fresh = false;
            for (&txg, changes) in state.changes.iter().rev() {
                for (&(_, blkid), change) in changes
                    .blocks
                    .range((object, first)..(object, first.saturating_add(count)))
                {
                    overlay
                        .entry(blkid)
                        .or_insert(change.data.is_some() || change.patch.is_some());
                }
                if let Some(dnode) = changes.dnodes.get(&object) {
                    if dnode.is_free() {
                        return Err(ObjectError::NoSuchObject(object));
                    }
                    // Created in this txg: nothing older counts (as in `read_block_with`).
                    if dnode.birth_txg == txg {
                        fresh = true;
                        break;
                    }
                }
            }
            let dnode = if fresh {
                None
            } else {
                Some(self.synced_dnode(&mut state, object)?)
            };
            (dnode, overlay)
        };
        let mut map = vec![false; count as usize];
        if let Some(dnode) = dnode.filter(|dnode| !dnode.is_free()) {
            let top_span = dnode.top_span();
            let per = dnode.pointers_per_indirect();
            for (index, bp) in dnode.block_pointers.iter().enumerate() {
                map_subtree(
                    &self.reader(),
                    per,
                    bp,
                    index as u64 * top_span,
                    top_span,
                    first,
                    &mut map,
                )?;
            }
        }
        for (blkid, has_data) in overlay {
            map[(blkid - first) as usize] = has_data;
        }
        Ok(map)
    }

    /// Reads a blob written by `write_blob`; `None` if the object does not exist.
    pub fn read_blob(&self, object: u64) -> Result<Option<Vec<u8>>, ObjectError> {
        let dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Ok(None);
        }
        let len = blob_len(&dnode);
        let block_size = u64::from(dnode.data_block_size);
        if len > block_size * dnode.capacity_blocks(dnode.levels) {
            return Err(ObjectError::Corrupt(format!(
                "blob {object} claims {len} bytes"
            )));
        }
        let mut out = Vec::with_capacity(len as usize);
        for blkid in 0..len.div_ceil(block_size) {
            let want = (len - blkid * block_size).min(block_size) as usize;
            match self.read_block(object, blkid)? {
                Some(block) => out.extend_from_slice(&block[..want.min(block.len())]),
                None => out.resize(out.len() + want, 0),
            }
        }
        Ok(Some(out))
    }
}

pub(crate) fn blob_len(dnode: &Dnode) -> u64 {
    dnode.bonus.get(..8).map_or(0, |raw| {
        u64::from_le_bytes(raw.try_into().expect("8 bytes"))
    })
}

/// Marks in `map` (indexed from `first`) which level-0 blocks under `bp` hold data, reading only
/// indirect blocks, and only those that overlap the range.
fn map_subtree(
    io: &TreeReader<'_>,
    per: u64,
    bp: &BlockPointer,
    start: u64,
    span: u64,
    first: u64,
    map: &mut [bool],
) -> Result<(), ObjectError> {
    let end = first + map.len() as u64;
    if bp.is_hole() || start >= end || start + span <= first {
        return Ok(());
    }
    if bp.level == 0 {
        map[(start - first) as usize] = true;
        return Ok(());
    }
    let block = io.read(bp)?;
    let child_span = span / per;
    for index in 0..per {
        let child_start = start + index * child_span;
        if child_start >= end {
            break;
        }
        if child_start + child_span <= first {
            continue;
        }
        let child = tree::child_pointer(&block, index as usize)?;
        map_subtree(io, per, &child, child_start, child_span, first, map)?;
    }
    Ok(())
}
