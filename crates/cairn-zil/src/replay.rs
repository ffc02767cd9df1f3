//! Reading a dataset's log at import: walk every lane's chain from the header until the first
//! block that does not verify, and collect the records that are not already in the imported
//! txg, in the order replay must apply them: by (txg, sequence), across all lanes.
//!
//! Nothing is changed here. The engine then claims the blocks found (they may have been
//! allocated in a txg that never synced), applies the records in a new txg, and frees the blocks
//! and empties the header in that same txg, so a crash during replay simply replays again.

use cairn_device::queue::IoClass;
use cairn_format::intent_log::LOG_BLOCK_SIZE_MAX;
use cairn_format::{ChainPosition, Dva, IntentLogHeader, LogBlock, LogRecord};
use cairn_pipeline::BlockIo;

/// Blocks one chain may have before the walk gives up (a guard, far above any real chain:
/// a chain only holds the records of the last few unsynced txgs).
const CHAIN_BLOCKS_MAX: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct ReplayLog {
    /// Records newer than the imported txg, in replay order.
    pub records: Vec<LogRecord>,
    /// Records found but already contained in the imported txg.
    pub records_skipped: u64,
    /// Every block that verified, all lanes.
    pub blocks: Vec<Dva>,
    /// Per lane, the address where the chain ended (pre-allocated, possibly never written).
    pub chain_ends: Vec<Dva>,
}

/// Reads every lane of `header` (see the module comment).
pub fn read_log(
    io: &BlockIo,
    pool_guid: u64,
    header: &IntentLogHeader,
    imported_txg: u64,
) -> ReplayLog {
    let mut log = ReplayLog::default();
    for (lane, head) in header.lanes.iter().enumerate() {
        if head.is_empty() {
            continue;
        }
        let mut position = ChainPosition {
            pool_guid,
            chain_guid: head.chain_guid,
            lane: lane as u32,
            sequence: head.sequence,
        };
        let mut dva = head.block;
        for _ in 0..CHAIN_BLOCKS_MAX {
            let Some(block) = read_block(io, &dva, &position) else {
                break;
            };
            log.blocks.push(dva);
            for record in block.records {
                if record.txg > imported_txg {
                    log.records.push(record);
                } else {
                    log.records_skipped += 1;
                }
            }
            dva = block.next;
            position.sequence += 1;
        }
        log.chain_ends.push(dva);
    }
    log.records
        .sort_by_key(|record| (record.txg, record.sequence));
    log
}

/// Most bytes a log block allocates: its largest size, four times over on the narrowest
/// raidz3 vdev (one data column, three parity columns).
const LOG_BLOCK_ASIZE_MAX: u32 = 4 * LOG_BLOCK_SIZE_MAX;

fn read_block(io: &BlockIo, dva: &Dva, position: &ChainPosition) -> Option<LogBlock> {
    if dva.asize == 0 || dva.asize > LOG_BLOCK_ASIZE_MAX {
        return None;
    }
    io.read_raw(
        dva,
        crate::log_block_len(io, dva),
        IoClass::SyncRead,
        |bytes| LogBlock::decode(bytes, position).ok(),
    )
}
