//! The block-write mechanics volumes (`Volume`) and filesystems (cairn-fs's file data) share,
//! below what differs between them (NBD semantics; inodes and the namespace):
//!
//! - splitting a byte range at block boundaries into whole and partial blocks (`pieces`);
//! - storing a whole block, or a hole in its place, counting its dirty bytes once per txg
//!   (`store_block`; `block_or_hole` turns an all-zero block into a hole);
//! - writing part of a block without reading the old one (`write_part`: the object set merges
//!   it in when the txg syncs, cairn-object's `patch.rs`), under a per-block stripe lock when
//!   the caller has no lock of its own that orders writers to the block (`BlockStripes`: a
//!   volume's concurrent NBD writers; a filesystem holds the inode's lock instead);
//! - writing whole blocks in place for a synchronous write (`write_in_place`: FUA to their
//!   final place, only their pointers logged).
//!
//! Every change enters the same way (`join_txg`): the space check (`space_check.rs`) if it
//! can take room, then the write throttle, then the caller's own locks, then a hold on the open
//! txg. Whether a change commits before it returns is `SyncMode::commits`. The callers log
//! what they changed after.
//!
//! Why that order: a refusal must come before anything changed; a writer the throttle delays
//! must hold no lock (it would stall every other writer of the same object for the delay) and
//! no hold (a hold keeps the txg from syncing, and the throttle waits for exactly that sync);
//! the hold comes last so the txg cannot close between the locks and the change.
//!
//! Costs: nothing here allocates per block or takes a lock the caller did not take before;
//! each block's dirty bytes are counted after its stripe lock is released.

use bytes::Bytes;
use cairn_format::BlockPointer;
use cairn_object::{ObjectError, ObjectSet, is_all_zero};
use cairn_pool::txg::{TxgEngine, TxgError, TxgHold};
use parking_lot::Mutex;
use std::ops::Range;

use crate::space_check::{SpaceAsk, SpaceCheck, SpaceRefusal};

/// Why a change could not join a txg; nothing was changed.
#[derive(Debug)]
pub enum JoinError {
    /// The space check refused what the change asked.
    Space(SpaceRefusal),
    /// The txg engine takes no more changes (suspended, read-only, shut down).
    Txg(TxgError),
}

/// Admits a change into the open txg: asks `space` (a change that can take room: the check and
/// what it asks), throttles for `dirty_bytes`, takes the caller's locks (`lock`), then holds
/// the txg. Returns the hold and the locks; the change is made under both and the locks are
/// dropped before any commit. See the module doc for why in this order.
pub fn join_txg<G>(
    txg: &TxgEngine,
    space: Option<(&SpaceCheck, SpaceAsk)>,
    dirty_bytes: u64,
    lock: impl FnOnce() -> G,
) -> Result<(TxgHold, G), JoinError> {
    if let Some((check, ask)) = space {
        debug_assert!(ask.may_wait, "a change that joins a txg may wait for room");
        check(ask).map_err(JoinError::Space)?;
    }
    txg.throttle(dirty_bytes);
    let guards = lock();
    let hold = txg.try_hold().map_err(JoinError::Txg)?;
    Ok((hold, guards))
}

/// The pieces of `[offset, offset + len)` cut at `block_bytes` boundaries, in order: (block
/// number, offset in the block, length). A piece as long as a block is a whole block.
pub fn pieces(block_bytes: u64, offset: u64, len: u64) -> Pieces {
    Pieces {
        block_bytes,
        position: offset,
        end: offset + len,
    }
}

/// See `pieces`.
#[derive(Debug, Clone)]
pub struct Pieces {
    block_bytes: u64,
    position: u64,
    end: u64,
}

impl Iterator for Pieces {
    type Item = (u64, usize, usize);

    #[inline]
    fn next(&mut self) -> Option<(u64, usize, usize)> {
        if self.position >= self.end {
            return None;
        }
        let blkid = self.position / self.block_bytes;
        let within = self.position % self.block_bytes;
        let take = (self.block_bytes - within).min(self.end - self.position);
        self.position += take;
        Some((blkid, within as usize, take as usize))
    }
}

/// Locks by block number that order concurrent partial writes to one block.
pub struct BlockStripes {
    locks: Vec<Mutex<()>>,
}

/// Stripes of a `BlockStripes` table.
const BLOCK_STRIPES: usize = 64;

impl BlockStripes {
    pub fn new() -> BlockStripes {
        BlockStripes {
            locks: (0..BLOCK_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    #[inline]
    fn of(&self, blkid: u64) -> &Mutex<()> {
        &self.locks[blkid as usize % BLOCK_STRIPES]
    }
}

impl Default for BlockStripes {
    fn default() -> BlockStripes {
        BlockStripes::new()
    }
}

/// Stores whole block `blkid` of `object` in the txg of `hold`: `Some` its data, `None` a
/// hole. A block changed again in the same txg replaces its earlier version in memory and is
/// written once: its dirty bytes (`block_bytes`) count once per txg.
#[inline]
pub fn store_block(
    objset: &ObjectSet,
    hold: &TxgHold,
    object: u64,
    blkid: u64,
    block_bytes: u64,
    data: Option<Bytes>,
) {
    debug_assert!(
        data.as_ref()
            .is_none_or(|data| data.len() as u64 == block_bytes),
        "a whole block of {block_bytes} bytes stored with another length"
    );
    let newly_dirty = match data {
        Some(data) => objset.write_block(hold.txg(), object, blkid, data),
        None => objset.free_block(hold.txg(), object, blkid),
    };
    if newly_dirty {
        hold.add_dirty(block_bytes);
    }
}

/// A whole block as it is stored: `None` (a hole) when all its bytes are zeros.
#[inline]
pub fn block_or_hole(block: Vec<u8>) -> Option<Bytes> {
    (!is_all_zero(&block)).then(|| Bytes::from(block))
}

/// Writes bytes `range` of block `blkid` through `fill` without reading the old block (the
/// object set merges it in later), in the txg of `hold`, under the block's lock in `stripes`
/// if given.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn write_part(
    objset: &ObjectSet,
    hold: &TxgHold,
    stripes: Option<&BlockStripes>,
    object: u64,
    blkid: u64,
    block_bytes: u32,
    range: Range<usize>,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), ObjectError> {
    // A part, not the whole block (that is `store_block`'s), and inside it.
    debug_assert!(
        range.start < range.end && range.end <= block_bytes as usize,
        "part {range:?} of a {block_bytes}-byte block"
    );
    debug_assert!(
        range.len() < block_bytes as usize,
        "a whole block written as a part"
    );
    let newly_dirty = {
        let _stripe = stripes.map(|stripes| stripes.of(blkid).lock());
        objset.write_partial(hold.txg(), object, blkid, block_bytes, range, fill)?
    };
    if newly_dirty {
        hold.add_dirty(u64::from(block_bytes));
    }
    Ok(())
}

/// Writes `blocks` (block number, whole non-zero block) of `object` to their final place now,
/// durably, in the txg of `hold`, counting the newly dirty ones; returns each block's number
/// and pointer, in the order given. On error nothing was written in place (the caller stores
/// them the ordinary way).
pub fn write_in_place(
    objset: &ObjectSet,
    hold: &TxgHold,
    object: u64,
    block_bytes: u64,
    blocks: Vec<(u64, Bytes)>,
) -> Result<Vec<(u64, BlockPointer)>, ObjectError> {
    let blkids: Vec<u64> = blocks.iter().map(|(blkid, _)| *blkid).collect();
    // Whole blocks, each once, in order: the callers log them as one ascending run.
    debug_assert!(blkids.windows(2).all(|pair| pair[0] < pair[1]));
    debug_assert!(
        blocks
            .iter()
            .all(|(_, bytes)| bytes.len() as u64 == block_bytes)
    );
    let written = objset.write_blocks_in_place(hold.txg(), object, blocks)?;
    assert_eq!(
        written.len(),
        blkids.len(),
        "the object set wrote another number of blocks in place than it was given"
    );
    Ok(blkids
        .into_iter()
        .zip(written)
        .map(|(blkid, (bp, newly_dirty))| {
            if newly_dirty {
                hold.add_dirty(block_bytes);
            }
            (blkid, bp)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn pieces_cut_at_block_boundaries() {
        let cut = |offset, len| pieces(4096, offset, len).collect::<Vec<_>>();
        assert_eq!(cut(0, 0), vec![]);
        assert_eq!(cut(0, 4096), vec![(0, 0, 4096)]);
        assert_eq!(cut(100, 50), vec![(0, 100, 50)]);
        assert_eq!(
            cut(4000, 8400),
            vec![(0, 4000, 96), (1, 0, 4096), (2, 0, 4096), (3, 0, 112)]
        );
        assert_eq!(cut(8192, 4097), vec![(2, 0, 4096), (3, 0, 1)]);
    }

    struct NoSync;

    impl cairn_pool::txg::TxgSyncer for NoSync {
        fn sync_txg(&self, _txg: u64) -> Result<(), cairn_pool::txg::SyncError> {
            Ok(())
        }
    }

    #[test]
    fn a_change_is_refused_before_it_locks_or_holds_and_joins_the_open_txg_otherwise() {
        let engine = TxgEngine::start(cairn_pool::txg::TxgConfig::default(), 6, Arc::new(NoSync));
        let full: SpaceCheck =
            Arc::new(|ask: SpaceAsk| Err(SpaceRefusal::Quota(format!("{}", ask.bytes))));
        let roomy: SpaceCheck = Arc::new(|_| Ok(()));
        let locked = std::cell::Cell::new(0);
        let refused = join_txg(&engine, Some((&full, SpaceAsk::bytes(512))), 512, || {
            locked.set(locked.get() + 1)
        });
        assert!(matches!(refused, Err(JoinError::Space(SpaceRefusal::Quota(why))) if why == "512"));
        assert_eq!(locked.get(), 0, "a refused change took the caller's locks");
        let (hold, ()) = join_txg(&engine, Some((&roomy, SpaceAsk::bytes(512))), 512, || {
            locked.set(locked.get() + 1)
        })
        .expect("room and an open txg");
        assert_eq!(locked.get(), 1);
        assert_eq!(hold.txg(), engine.open_txg());
        drop(hold);
        engine.shutdown().expect("shut down");
        let closed = join_txg(&engine, None, 0, || ());
        assert!(matches!(closed, Err(JoinError::Txg(TxgError::ShutDown))));
    }

    #[test]
    fn an_all_zero_block_is_a_hole() {
        assert_eq!(block_or_hole(vec![0; 512]), None);
        let mut block = vec![0; 512];
        block[511] = 1;
        assert_eq!(block_or_hole(block.clone()), Some(Bytes::from(block)));
    }
}
