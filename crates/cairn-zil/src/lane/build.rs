//! Records to log blocks: what a builder does off the lane's lock with the records it took. It
//! materializes each record's data (reading the data of writes not copied when logged,
//! splitting writes longer than a record can carry), packs records into the chain's
//! pre-allocated blocks (splitting a write to fill the end of a block), allocates and sizes
//! each next block for what is left, and encodes the blocks.
//!
//! Invariants: a write is only split at an absolute multiple of `SECTOR_BYTES`, so a replay
//! that stops between two pieces never leaves a sector half written; every block names its
//! successor, allocated before the block is encoded, and the `Built` holds the txgs of those
//! allocations until the batch is written. Apart from starting a chain (`chain.rs`) nothing here
//! touches the lane's state: `commit.rs` takes the records and puts the `Built` in flight.

use super::{Chain, Itx, Lane, WrittenBlock, block_size_for, payload_len};
use crate::{IntentLog, ItxData, LogSource, ZilError};
use cairn_format::intent_log::{
    LOG_BLOCK_HEADER_SIZE, LOG_BLOCK_SIZE_MIN, LOG_RECORD_HEADER_SIZE, LOG_RECORD_PAYLOAD_MAX,
};
use cairn_format::{ChainPosition, Dva, LogBlock, LogRecord, LogRecordKind};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// The smallest piece a write is split into to fill the end of a block.
const SPLIT_BYTES_MIN: usize = 512;
/// Writes are only split at multiples of this (absolute offsets): a replay that stops between
/// two pieces must never leave a sector half old and half new, since disks (and the clients
/// that rely on them) treat a sector as written whole or not at all.
pub(super) const SECTOR_BYTES: u64 = 512;

/// What a builder produced.
pub(super) struct Built {
    pub(super) last_ticket: u64,
    pub(super) chain: Chain,
    pub(super) next_alloc_txg: u64,
    pub(super) blocks: Vec<WrittenBlock>,
    /// Each block's bytes, in chain order, not yet written.
    pub(super) encoded: Vec<Vec<u8>>,
    pub(super) log_bytes: u64,
    /// Log bytes the batch's records needed (headers included).
    pub(super) total_bytes: usize,
    /// Holds on the txgs the batch's new blocks were allocated in, kept until the batch is
    /// written. A txg that records a block's allocation must not sync before the block that
    /// points to it is on media: else a power cut that catches that write in flight (torn, or
    /// never issued) leaves the block allocated and unreachable from the chain, a leak. (A
    /// chain's first block is the exception: its header is synced first, and a chain that
    /// ends at it frees it at import.)
    pub(super) txg_holds: Vec<cairn_pool::txg::TxgHold>,
}

impl Built {
    /// Every block this build allocated, as finished blocks of a retired chain.
    pub(super) fn orphans(&self) -> Vec<WrittenBlock> {
        let mut blocks: Vec<WrittenBlock> = self
            .blocks
            .iter()
            .map(|block| WrittenBlock {
                done: true,
                max_txg: 0,
                ..*block
            })
            .collect();
        blocks.push(WrittenBlock {
            dva: self.chain.next,
            chain_guid: self.chain.guid,
            sequence: self.chain.next_sequence,
            alloc_txg: self.next_alloc_txg,
            max_txg: 0,
            done: true,
        });
        blocks
    }
}

impl IntentLog {
    /// Turns records into written-out blocks (the writes are issued, not waited for).
    pub(super) fn build(
        &self,
        lane: &Lane,
        itxs: Vec<Itx>,
        chain: Option<Chain>,
        next_alloc_txg: u64,
        previous_batch_bytes: usize,
        source: &dyn LogSource,
    ) -> Result<Built, ZilError> {
        let last_ticket = itxs.last().expect("at least one record").ticket;
        let (chain, next_alloc_txg) = match chain {
            Some(chain) => (chain, next_alloc_txg),
            None => {
                let bytes = LOG_BLOCK_HEADER_SIZE
                    + itxs
                        .iter()
                        .map(|itx| LOG_RECORD_HEADER_SIZE + payload_len(&itx.op))
                        .sum::<usize>();
                self.start_chain(lane, bytes)?
            }
        };
        let synced = self.txg.last_synced_txg();
        let records = self.materialize(itxs, synced, source)?;
        // `chain` and `next_alloc_txg` advance as each block is appended.
        let mut built = Built {
            last_ticket,
            chain,
            next_alloc_txg,
            blocks: Vec::new(),
            encoded: Vec::new(),
            total_bytes: 0,
            log_bytes: 0,
            txg_holds: Vec::new(),
        };
        if records.is_empty() {
            return Ok(built);
        }
        let total_bytes: usize =
            records.iter().map(LogRecord::encoded_size).sum::<usize>() + LOG_BLOCK_HEADER_SIZE;
        built.total_bytes = total_bytes;
        let mut queue: VecDeque<LogRecord> = records.into();
        let mut remaining_bytes = total_bytes;
        while !queue.is_empty() {
            // What the block can hold: its allocation (on raidz, less its parity).
            let capacity = crate::log_block_len(&self.io, &built.chain.next);
            let (block_records, used) = pack_block(&mut queue, capacity, &mut remaining_bytes);
            // The next block is sized for what is left of this batch, or, at its end, for the
            // smaller of this batch and the one before: the unused end of a pre-allocated
            // block is a hole the disk head must pass over, while a batch that outgrows its
            // first block just continues in blocks allocated right after it (written in the
            // same device call).
            let next_size = if queue.is_empty() {
                block_size_for(total_bytes.min(previous_batch_bytes.max(1)))
            } else {
                block_size_for(remaining_bytes + LOG_BLOCK_HEADER_SIZE)
            };
            let fill = BlockFill { used, capacity };
            self.append_block(lane, &mut built, block_records, fill, next_size)?;
        }
        Ok(built)
    }

    /// Encodes the chain's next block with `records`, after allocating the block it will
    /// name as its successor (`next_size` bytes), and advances `built`'s chain to that block.
    fn append_block(
        &self,
        lane: &Lane,
        built: &mut Built,
        records: Vec<LogRecord>,
        fill: BlockFill,
        next_size: u32,
    ) -> Result<(), ZilError> {
        let chain = built.chain;
        let (next, hold) = self.allocate_block(next_size)?;
        let alloc_txg = hold.txg();
        if built.txg_holds.iter().all(|held| held.txg() != alloc_txg) {
            built.txg_holds.push(hold);
        }
        let max_txg = records.iter().map(|r| r.txg).max().unwrap_or(0);
        let block = LogBlock {
            position: ChainPosition {
                pool_guid: self.pool_guid,
                chain_guid: chain.guid,
                lane: lane.index(),
                sequence: chain.next_sequence,
            },
            next,
            records,
        };
        let granule = self.sector_bytes(&chain.next);
        let encoded = block.encode(granule);
        built.log_bytes += encoded.len() as u64;
        self.stats.count_block(fill.used, fill.capacity);
        built.encoded.push(encoded);
        built.blocks.push(WrittenBlock {
            dva: chain.next,
            chain_guid: chain.guid,
            sequence: chain.next_sequence,
            alloc_txg: built.next_alloc_txg,
            max_txg,
            done: false,
        });
        built.chain = Chain {
            guid: chain.guid,
            next,
            next_sequence: chain.next_sequence + 1,
        };
        built.next_alloc_txg = alloc_txg;
        Ok(())
    }

    /// Log records for `itxs`, with data, skipping those already in a synced txg; writes longer
    /// than one record can carry are split.
    fn materialize(
        &self,
        itxs: Vec<Itx>,
        synced_txg: u64,
        source: &dyn LogSource,
    ) -> Result<Vec<LogRecord>, ZilError> {
        let mut records = Vec::with_capacity(itxs.len());
        for itx in itxs {
            let op = itx.op;
            if op.txg <= synced_txg {
                continue;
            }
            let data = match (&op.kind, op.data) {
                (LogRecordKind::Write | LogRecordKind::Fs, ItxData::Copied(bytes)) => {
                    bytes.to_vec()
                }
                (LogRecordKind::WriteInPlace, ItxData::Pointer(bp)) => {
                    assert_eq!(
                        bp.birth_txg, op.txg,
                        "block written in place for another txg"
                    );
                    bp.to_bytes().to_vec()
                }
                (LogRecordKind::WriteInPlace, _) => {
                    panic!("a write in place logged without its block pointer")
                }
                (LogRecordKind::Write, _) => {
                    let mut buf = vec![0u8; op.length as usize];
                    source
                        .read_for_log(op.object, op.offset, &mut buf)
                        .map_err(|err| ZilError::SourceRead {
                            dataset: self.dataset.clone(),
                            object: op.object,
                            offset: op.offset,
                            len: buf.len(),
                            source: std::sync::Arc::from(err),
                        })?;
                    self.stats.needcopy_reads.fetch_add(1, Ordering::Relaxed);
                    buf
                }
                _ => Vec::new(),
            };
            let record = LogRecord {
                kind: op.kind,
                sequence: itx.sequence,
                txg: op.txg,
                object: op.object,
                offset: op.offset,
                length: op.length,
                data,
            };
            if record.kind == LogRecordKind::Write && record.data.len() > LOG_RECORD_PAYLOAD_MAX {
                split_into_records(record, &mut records);
            } else {
                records.push(record);
            }
        }
        Ok(records)
    }

    fn sector_bytes(&self, dva: &Dva) -> u32 {
        self.io
            .tree()
            .top(dva.vdev)
            .map_or(LOG_BLOCK_SIZE_MIN, |top| 1u32 << top.config.ashift)
    }
}

/// How full one packed block is: bytes its records and header take, of its size.
#[derive(Clone, Copy)]
struct BlockFill {
    used: usize,
    capacity: usize,
}

/// Takes from the front of `queue` the records one block of `capacity` bytes carries
/// (splitting a write to fill its end), counting them off `remaining_bytes`; returns them and
/// the bytes the block uses.
fn pack_block(
    queue: &mut VecDeque<LogRecord>,
    capacity: usize,
    remaining_bytes: &mut usize,
) -> (Vec<LogRecord>, usize) {
    let mut used = LOG_BLOCK_HEADER_SIZE;
    let mut block_records: Vec<LogRecord> = Vec::new();
    while let Some(record) = queue.pop_front() {
        let size = record.encoded_size();
        if used + size <= capacity {
            used += size;
            *remaining_bytes = remaining_bytes.saturating_sub(size);
            block_records.push(record);
            continue;
        }
        // A record that does not fit moves whole to the next block (so a write's
        // sectors reach the log together), unless even an empty block is too small
        // for it (a small pre-allocated block): then it fills this one and goes on.
        let room = capacity - used;
        let take = (record.kind == LogRecordKind::Write
            && block_records.is_empty()
            && room >= LOG_RECORD_HEADER_SIZE + SPLIT_BYTES_MIN)
            .then(|| split_point(record.offset, room - LOG_RECORD_HEADER_SIZE))
            .flatten()
            .filter(|&take| take < record.data.len());
        if let Some(take) = take {
            let (head, tail) = split_write(record, take);
            used += head.encoded_size();
            *remaining_bytes = remaining_bytes.saturating_sub(head.encoded_size());
            block_records.push(head);
            queue.push_front(tail);
        } else {
            queue.push_front(record);
        }
        break;
    }
    // A block takes nothing only when the next record is larger than all of it: a
    // filesystem change (an extended attribute of up to 64 KiB) cannot be split, and
    // the chain's pre-allocated block may be smaller. A zero-record block is still a
    // valid link, and the next one is sized for what is left, so the chain goes on.
    debug_assert!(
        !block_records.is_empty()
            || queue
                .front()
                .is_some_and(|record| LOG_BLOCK_HEADER_SIZE + record.encoded_size() > capacity),
        "a log block of {capacity} bytes took no record"
    );
    (block_records, used)
}

/// The largest piece of at most `max_bytes` starting at `offset` that ends on a sector
/// boundary, if there is one.
pub(super) fn split_point(offset: u64, max_bytes: usize) -> Option<usize> {
    let end = (offset + max_bytes as u64) / SECTOR_BYTES * SECTOR_BYTES;
    (end > offset).then(|| (end - offset) as usize)
}

/// Splits a write longer than one record can carry into records of at most
/// `LOG_RECORD_PAYLOAD_MAX` bytes ending on sector boundaries, copying each byte once. (Splitting
/// the head off again and again would copy the rest each time and leave every head holding the
/// whole buffer's capacity: a 32 MiB FUA write took seconds and gigabytes that way.)
pub(super) fn split_into_records(record: LogRecord, records: &mut Vec<LogRecord>) {
    let len = record.data.len();
    let mut start = 0;
    while start < len {
        let offset = record.offset + start as u64;
        let take = if len - start <= LOG_RECORD_PAYLOAD_MAX {
            len - start
        } else {
            split_point(offset, LOG_RECORD_PAYLOAD_MAX)
                .expect("a full record has room for a sector")
        };
        records.push(LogRecord {
            kind: record.kind,
            sequence: record.sequence,
            txg: record.txg,
            object: record.object,
            offset,
            length: take as u64,
            data: record.data[start..start + take].to_vec(),
        });
        start += take;
    }
}

/// Splits a write record after `head_bytes` of data; both parts own exactly their bytes.
pub(super) fn split_write(record: LogRecord, head_bytes: usize) -> (LogRecord, LogRecord) {
    assert!(head_bytes > 0 && head_bytes < record.data.len());
    let mut data = record.data;
    let tail_data = data.split_off(head_bytes);
    data.shrink_to_fit();
    let head = LogRecord {
        length: head_bytes as u64,
        data,
        ..record
    };
    let tail = LogRecord {
        offset: head.offset + head_bytes as u64,
        length: tail_data.len() as u64,
        data: tail_data,
        ..head.clone()
    };
    (head, tail)
}
