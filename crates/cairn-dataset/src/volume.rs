//! Block volumes at byte granularity over object 1 of an object set.
//!
//! The block mechanics (pieces, whole blocks and holes, partial blocks under stripe locks,
//! writes in place) are `block_write.rs`'s, shared with filesystems' files; this module keeps
//! what is a volume's own: byte ranges checked against its size, trim and write-zeroes, FUA
//! and flush, the log records of NBD requests, block status and read-ahead hints.
//!
//! Every operation is split at `volblocksize` boundaries. A write covering a whole block replaces
//! it; a partial write gives the object set only its bytes (`ObjectSet::write_partial`): the
//! old block is not read in the writer's path but merged in when the txg syncs (or patched at
//! once when it is in memory), under the block's stripe lock. Trim and write-zeroes punch
//! holes for whole blocks and zero the covered bytes of partial ones.
//!
//! Writers join a txg through `block_write::join_txg`, as files do: the write throttle comes
//! first, so a burst of writes slows smoothly as dirty data approaches its limit instead of
//! stalling at it, and space is checked before any change is made (`SpaceCheck`, the engine's one policy for volumes and filesystems): a write
//! that cannot fit returns `NoSpace` (the pool is full) or `QuotaExceeded` (a `quota` or
//! `refquota` binds, an ancestor's included) and changes nothing.
//!
//! Durability: every change is also appended to the volume's intent log (inside the same txg
//! hold, so the record names the txg the change joined). `flush` commits the log; a write with
//! `fua` (or any write under `sync=always`) commits its own record before returning. Under
//! `sync=disabled` nothing is ever committed: flushes return at once and acknowledged writes
//! are lost if the machine stops before the next txg sync (documented as unsafe). Without a log
//! (a volume opened for tools) a flush waits for a txg sync instead.
//!
//! Synchronous writes under `logbias=throughput` (`IntentLog::writes_in_place`) are written
//! once: their whole, non-zero blocks go straight to their final place with FUA, inside the txg
//! hold, and only the block pointers are logged; the txg sync links those blocks into the tree instead of writing
//! them again. Partial blocks at the edges are logged as ordinary writes. If the write in place
//! fails, the write falls back to the ordinary path (the log or the txg sync then carries it).

use crate::block_write::{self, BlockStripes};
use crate::{DatasetError, SpaceAsk, SpaceCheck, SyncMode};
use bytes::Bytes;
use cairn_format::{LogRecord, LogRecordKind};
use cairn_object::{ObjectSet, is_all_zero};
use cairn_pool::txg::{TxgEngine, TxgHold};
use cairn_zil::{IntentLog, ItxData, LogOp, LogSource, Ticket};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

/// The object that holds a volume's data.
pub const VOLUME_OBJECT: u64 = 1;
/// Blocks one block-status query looks at; clients ask again for the rest.
const BLOCK_STATUS_BLOCKS_MAX: u64 = 1 << 16;

/// What a modification does to space: writes take it; trims and zeroing give it back (partial
/// blocks aside, which the pool's reserved slice covers), so they must work on a full pool or
/// nothing could ever make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Write,
    Discard,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Write => "write",
            Change::Discard => "trim",
        }
    }
}

/// One record of a change, before it is logged.
struct Logged {
    kind: LogRecordKind,
    offset: u64,
    length: u64,
    data: ItxData,
}

/// How one modification is made.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Forced unit access: durable before the call returns.
    pub fua: bool,
    /// Which log lane to use (callers pass a per-connection number so independent streams
    /// commit in parallel).
    pub lane: usize,
}

/// Largest plain write `try_write_now` carries out on its caller's thread: it only files whole
/// blocks (slices of the caller's buffer) under a txg hold, but a bigger one would still keep
/// an async worker from its other connections for the bookkeeping of many blocks.
const WRITE_NOW_BYTES_MAX: u64 = 256 << 10;

#[derive(Debug, Default)]
pub struct VolumeStats {
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub flushes: AtomicU64,
    pub trims: AtomicU64,
    pub trim_bytes: AtomicU64,
    /// Synchronous writes meant for their final place that could not be written there (a
    /// device error) and went through the log instead.
    pub in_place_fallbacks: AtomicU64,
}

pub struct Volume {
    name: String,
    objset: Arc<ObjectSet>,
    txg: Arc<TxgEngine>,
    size_bytes: u64,
    block_size: u32,
    readonly: AtomicBool,
    space_check: SpaceCheck,
    /// Newest txg this volume dirtied: what a flush must wait for.
    last_dirty_txg: AtomicU64,
    stripes: BlockStripes,
    intent_log: Option<Arc<IntentLog>>,
    sync_mode: AtomicU8,
    /// Client reads, one line per request (`CAIRN_READ_TRACE_DIR`).
    read_trace: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    pub stats: VolumeStats,
}

/// Opens `DIR/<pool>_<volume>.trace` for appending: one line per client read
/// (`first-block block-count`), the block trace that `bench/cache` replays through cache
/// policies. A diagnostic: a formatted line per read.
fn open_read_trace(
    dir: &std::path::Path,
    name: &str,
) -> std::io::Result<Mutex<std::io::BufWriter<std::fs::File>>> {
    let path = dir.join(format!("{}.trace", name.replace('/', "_")));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    Ok(Mutex::new(std::io::BufWriter::new(file)))
}

impl Volume {
    pub fn new(
        name: String,
        objset: Arc<ObjectSet>,
        txg: Arc<TxgEngine>,
        size_bytes: u64,
        block_size: u32,
        readonly: bool,
        space_check: SpaceCheck,
    ) -> Volume {
        assert!(block_size.is_power_of_two() && block_size >= 512);
        Volume {
            name,
            objset,
            txg,
            size_bytes,
            block_size,
            readonly: AtomicBool::new(readonly),
            space_check,
            last_dirty_txg: AtomicU64::new(0),
            stripes: BlockStripes::new(),
            intent_log: None,
            sync_mode: AtomicU8::new(SyncMode::Standard as u8),
            read_trace: None,
            stats: VolumeStats::default(),
        }
    }

    /// Records every client read in a trace file under `dir` (before the volume is shared).
    pub fn with_read_trace(mut self, dir: &std::path::Path) -> std::io::Result<Volume> {
        self.read_trace = Some(open_read_trace(dir, &self.name)?);
        Ok(self)
    }

    /// Gives the volume its intent log (before it is shared).
    pub fn with_intent_log(mut self, intent_log: Arc<IntentLog>) -> Volume {
        self.intent_log = Some(intent_log);
        self
    }

    pub fn intent_log(&self) -> Option<&Arc<IntentLog>> {
        self.intent_log.as_ref()
    }

    pub fn sync_mode(&self) -> SyncMode {
        match self.sync_mode.load(Ordering::Relaxed) {
            1 => SyncMode::Always,
            2 => SyncMode::Disabled,
            _ => SyncMode::Standard,
        }
    }

    pub fn set_sync_mode(&self, mode: SyncMode) {
        let raw = match mode {
            SyncMode::Standard => 0,
            SyncMode::Always => 1,
            SyncMode::Disabled => 2,
        };
        self.sync_mode.store(raw, Ordering::Relaxed);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::Relaxed)
    }

    pub fn set_readonly(&self, readonly: bool) {
        self.readonly.store(readonly, Ordering::Relaxed);
    }

    pub fn objset(&self) -> &Arc<ObjectSet> {
        &self.objset
    }

    fn check_range(&self, op: &'static str, offset: u64, len: u64) -> Result<(), DatasetError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(DatasetError::OutOfRange {
                name: self.name.clone(),
                op,
                offset,
                len,
                size: self.size_bytes,
            }),
        }
    }

    fn check_writable(&self) -> Result<(), DatasetError> {
        if self.is_readonly() {
            return Err(DatasetError::ReadOnly(self.name.clone()));
        }
        Ok(())
    }

    fn io_error(&self, err: impl Into<crate::IoCause>) -> DatasetError {
        DatasetError::Io {
            name: self.name.clone(),
            source: err.into(),
        }
    }

    /// Splits `[offset, offset+len)` into (blkid, offset in block, length) pieces.
    fn pieces(&self, offset: u64, len: u64) -> block_write::Pieces {
        block_write::pieces(u64::from(self.block_size), offset, len)
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DatasetError> {
        self.check_range("read", offset, buf.len() as u64)?;
        if !buf.is_empty() {
            // Read-ahead starts before this read waits on the disk, so the two overlap.
            self.note_client_read(offset, buf.len() as u64);
        }
        self.read_unlogged(offset, buf)?;
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// A read served without waiting for I/O (a reader on an async runtime tries it first):
    /// `None` if some block is not in memory or the request is not valid (the caller then
    /// calls `read`, which reads what is missing and reports errors). Counted like `read`.
    pub fn try_read_cached(&self, offset: u64, buf: &mut [u8]) -> Option<()> {
        if buf.is_empty() || self.check_range("read", offset, buf.len() as u64).is_err() {
            return None;
        }
        let mut cursor = 0;
        for (blkid, within, take) in self.pieces(offset, buf.len() as u64) {
            let out = &mut buf[cursor..cursor + take];
            match self.objset.read_block_cached(VOLUME_OBJECT, blkid)? {
                Some(block) => out.copy_from_slice(&block[within..within + take]),
                None => out.fill(0),
            }
            cursor += take;
        }
        self.note_client_read(offset, buf.len() as u64);
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Some(())
    }

    /// Tells read-ahead (and the read trace) about a client read.
    fn note_client_read(&self, offset: u64, len: u64) {
        let block = u64::from(self.block_size);
        let first = offset / block;
        let count = (offset + len).div_ceil(block) - first;
        if let Some(trace) = &self.read_trace {
            use std::io::Write;
            let _ = writeln!(trace.lock(), "{first} {count}");
        }
        self.objset.note_read(VOLUME_OBJECT, first, count);
    }

    /// A read that is not counted (the intent log fetching data to log).
    fn read_unlogged(&self, offset: u64, buf: &mut [u8]) -> Result<(), DatasetError> {
        self.check_range("read", offset, buf.len() as u64)?;
        let mut cursor = 0;
        for (blkid, within, take) in self.pieces(offset, buf.len() as u64) {
            let out = &mut buf[cursor..cursor + take];
            // A piece that pending partial writes cover is read without the old block.
            self.objset
                .read_block_range(VOLUME_OBJECT, blkid, within..within + take, out)
                .map_err(|err| self.io_error(err))?;
            cursor += take;
        }
        Ok(())
    }

    /// Applies `fill(piece, cursor)` (partial blocks) or `whole_block(cursor)` (whole blocks:
    /// data, or `None` for a hole) to each piece, in the txg of `hold`.
    fn apply(
        &self,
        hold: &TxgHold,
        offset: u64,
        len: u64,
        mut fill: impl FnMut(&mut [u8], usize),
        whole_block: impl Fn(usize) -> Option<Bytes>,
    ) -> Result<(), DatasetError> {
        let txg = hold.txg();
        // `check_range` ran: no piece reaches past the volume's end.
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.size_bytes),
            "{}: change of {len} bytes at {offset} past the end",
            self.name
        );
        let block_size = self.block_size as usize;
        let mut cursor = 0;
        for (blkid, within, take) in self.pieces(offset, len) {
            if take == block_size {
                let data = whole_block(cursor);
                block_write::store_block(
                    &self.objset,
                    hold,
                    VOLUME_OBJECT,
                    blkid,
                    block_size as u64,
                    data,
                );
            } else {
                // Concurrent writers to one block are ordered by its stripe lock.
                block_write::write_part(
                    &self.objset,
                    hold,
                    Some(&self.stripes),
                    VOLUME_OBJECT,
                    blkid,
                    self.block_size,
                    within..within + take,
                    |piece| fill(piece, cursor),
                )
                .map_err(|err| self.io_error(err))?;
            }
            cursor += take;
        }
        debug_assert_eq!(cursor as u64, len, "the pieces do not cover the change");
        self.last_dirty_txg.fetch_max(txg, Ordering::AcqRel);
        Ok(())
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), DatasetError> {
        self.write_with(offset, data, WriteOptions::default())
    }

    /// A write; durable on return if `options.fua` or `sync=always`.
    pub fn write_with(
        &self,
        offset: u64,
        data: &[u8],
        options: WriteOptions,
    ) -> Result<(), DatasetError> {
        self.write_from(offset, data, None, options)
    }

    /// `write_with` of a buffer the volume may keep: whole blocks become slices of it instead
    /// of copies (a front end that read the payload into its own buffer saves one copy of
    /// every byte). A kept slice holds the whole buffer in memory until its block is synced
    /// or rewritten, so at most one request's buffer per dirty block.
    pub fn write_bytes_with(
        &self,
        offset: u64,
        data: Bytes,
        options: WriteOptions,
    ) -> Result<(), DatasetError> {
        self.write_from(offset, &data, Some(&data), options)
    }

    /// A plain (not FUA) write of whole blocks carried out only if nothing in it has to wait:
    /// no throttle delay, room known without a txg sync, no old block to read, no commit
    /// (`sync=always`). A front end on an async runtime tries it first and saves handing the
    /// write to a thread that may block. `None` when it would wait or the request is not
    /// plainly valid: nothing was changed, and the caller makes the ordinary call (which waits,
    /// or reports the error). Once it returns `Some` the write was made (or failed) exactly as
    /// `write_bytes_with` would have made it.
    pub fn try_write_now(
        &self,
        offset: u64,
        data: &Bytes,
        options: WriteOptions,
    ) -> Option<Result<(), DatasetError>> {
        let len = data.len() as u64;
        let block = u64::from(self.block_size);
        let whole_blocks = offset.is_multiple_of(block) && len.is_multiple_of(block);
        if len == 0
            || len > WRITE_NOW_BYTES_MAX
            || !whole_blocks
            || options.fua
            || self.wants_commit(options)
            || self.check_writable().is_err()
            || self.check_range("write", offset, len).is_err()
            || (self.space_check)(SpaceAsk {
                bytes: len,
                quota_margin_bytes: 0,
                may_wait: false,
            })
            .is_err()
        {
            return None;
        }
        let hold = self.txg.try_hold_now(len)?;
        Some(self.apply_write(&hold, offset, data, Some(data)).map(|()| {
            let logged = vec![self.logged_write(offset, data, Some(data), false)];
            self.log_change(&hold, logged, options);
            self.count_write(len);
        }))
    }

    fn count_write(&self, len: u64) {
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats.write_bytes.fetch_add(len, Ordering::Relaxed);
    }

    /// `data`, and `shared` when the same bytes may be kept.
    fn write_from(
        &self,
        offset: u64,
        data: &[u8],
        shared: Option<&Bytes>,
        options: WriteOptions,
    ) -> Result<(), DatasetError> {
        let commit = self.wants_commit(options);
        let len = data.len() as u64;
        let in_place = commit
            && self
                .intent_log
                .as_ref()
                .is_some_and(|log| log.writes_in_place());
        let ticket = self.modify_logged(LogRecordKind::Write, offset, len, options, |hold| {
            if in_place {
                return self.write_in_place(hold, offset, data, shared);
            }
            self.apply_write(hold, offset, data, shared)?;
            Ok(vec![self.logged_write(offset, data, shared, commit)])
        })?;
        self.count_write(len);
        self.finish(ticket, commit)
    }

    /// Discards a range: whole blocks become holes, partial blocks get zeros.
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), DatasetError> {
        self.trim_with(offset, len, WriteOptions::default())
    }

    pub fn trim_with(
        &self,
        offset: u64,
        len: u64,
        options: WriteOptions,
    ) -> Result<(), DatasetError> {
        self.discard(LogRecordKind::Trim, offset, len, options)?;
        self.stats.trims.fetch_add(1, Ordering::Relaxed);
        self.stats.trim_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Zeroes a range. Zeros are stored as holes, so this is the same as `trim`.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), DatasetError> {
        self.write_zeroes_with(offset, len, WriteOptions::default())
    }

    pub fn write_zeroes_with(
        &self,
        offset: u64,
        len: u64,
        options: WriteOptions,
    ) -> Result<(), DatasetError> {
        self.discard(LogRecordKind::Zero, offset, len, options)?;
        self.stats.trims.fetch_add(1, Ordering::Relaxed);
        self.stats.trim_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    fn discard(
        &self,
        kind: LogRecordKind,
        offset: u64,
        len: u64,
        options: WriteOptions,
    ) -> Result<(), DatasetError> {
        let commit = self.wants_commit(options);
        let ticket = self.modify_logged(kind, offset, len, options, |hold| {
            self.apply_discard(hold, offset, len)?;
            Ok(vec![Logged {
                kind,
                offset,
                length: len,
                data: ItxData::None,
            }])
        })?;
        self.finish(ticket, commit)
    }

    fn apply_write(
        &self,
        hold: &TxgHold,
        offset: u64,
        data: &[u8],
        shared: Option<&Bytes>,
    ) -> Result<(), DatasetError> {
        let block_size = self.block_size as usize;
        self.apply(
            hold,
            offset,
            data.len() as u64,
            |piece, cursor| piece.copy_from_slice(&data[cursor..cursor + piece.len()]),
            |cursor| {
                Some(match shared {
                    Some(bytes) => bytes.slice(cursor..cursor + block_size),
                    None => Bytes::copy_from_slice(&data[cursor..cursor + block_size]),
                })
            },
        )
    }

    /// The record of an ordinary write: its data copied now when it is small and about to be
    /// committed, or kept when it is small and the write's whole blocks keep the same buffer
    /// anyway (no memory the dirty blocks do not hold already, and a FLUSH after the write
    /// finds its record ready instead of reading the data back); else read back at commit.
    fn logged_write(
        &self,
        offset: u64,
        data: &[u8],
        shared: Option<&Bytes>,
        commit: bool,
    ) -> Logged {
        let block = u64::from(self.block_size);
        let small = data.len() <= self.copy_bytes_max();
        let kept_by_blocks = shared.is_some()
            && offset.is_multiple_of(block)
            && (data.len() as u64).is_multiple_of(block);
        Logged {
            kind: LogRecordKind::Write,
            offset,
            length: data.len() as u64,
            data: match shared {
                Some(bytes) if small && (commit || kept_by_blocks) => {
                    ItxData::Copied(bytes.clone())
                }
                None if small && commit => ItxData::Copied(Bytes::copy_from_slice(data)),
                _ => ItxData::NeedCopy,
            },
        }
    }

    /// A synchronous write whose whole, non-zero blocks go to their final place now (durably),
    /// logged as block pointers; the rest (partial blocks at the edges, zero blocks) is applied
    /// and logged the ordinary way. Falls back to the ordinary write if the blocks cannot be
    /// written in place.
    fn write_in_place(
        &self,
        hold: &TxgHold,
        offset: u64,
        data: &[u8],
        shared: Option<&Bytes>,
    ) -> Result<Vec<Logged>, DatasetError> {
        let block_size = u64::from(self.block_size);
        let mut blocks: Vec<(u64, Bytes)> = Vec::new();
        let mut cursor = 0usize;
        for (blkid, _, take) in self.pieces(offset, data.len() as u64) {
            let piece = &data[cursor..cursor + take];
            if take as u64 == block_size && !is_all_zero(piece) {
                let bytes = shared.map_or_else(
                    || Bytes::copy_from_slice(piece),
                    |bytes| bytes.slice(cursor..cursor + take),
                );
                blocks.push((blkid, bytes));
            }
            cursor += take;
        }
        let written = match blocks.is_empty() {
            true => Vec::new(),
            false => {
                match block_write::write_in_place(
                    &self.objset,
                    hold,
                    VOLUME_OBJECT,
                    block_size,
                    blocks,
                ) {
                    Ok(written) => written,
                    Err(_) => {
                        self.stats
                            .in_place_fallbacks
                            .fetch_add(1, Ordering::Relaxed);
                        Vec::new()
                    }
                }
            }
        };
        let mut logged = Vec::with_capacity(written.len() + 2);
        let mut position = offset;
        let end = offset + data.len() as u64;
        for (blkid, bp) in written {
            let block_start = blkid * block_size;
            // Blocks come back in order and inside the write: the records tile its range.
            debug_assert!(block_start >= position && block_start + block_size <= end);
            if block_start > position {
                logged.push(self.write_between(
                    hold,
                    offset,
                    data,
                    shared,
                    position,
                    block_start,
                )?);
            }
            logged.push(Logged {
                kind: LogRecordKind::WriteInPlace,
                offset: block_start,
                length: block_size,
                data: ItxData::Pointer(bp),
            });
            position = block_start + block_size;
        }
        if position < end {
            logged.push(self.write_between(hold, offset, data, shared, position, end)?);
        }
        self.last_dirty_txg.fetch_max(hold.txg(), Ordering::AcqRel);
        Ok(logged)
    }

    /// Applies and logs bytes `start .. end` of a write of `data` at `offset` the ordinary way.
    fn write_between(
        &self,
        hold: &TxgHold,
        offset: u64,
        data: &[u8],
        shared: Option<&Bytes>,
        start: u64,
        end: u64,
    ) -> Result<Logged, DatasetError> {
        let range = (start - offset) as usize..(end - offset) as usize;
        let part = &data[range.clone()];
        let shared_part = shared.map(|bytes| bytes.slice(range));
        self.apply_write(hold, start, part, shared_part.as_ref())?;
        Ok(self.logged_write(start, part, shared_part.as_ref(), true))
    }

    fn apply_discard(&self, hold: &TxgHold, offset: u64, len: u64) -> Result<(), DatasetError> {
        self.apply(hold, offset, len, |piece, _| piece.fill(0), |_| None)
    }

    fn wants_commit(&self, options: WriteOptions) -> bool {
        self.sync_mode().commits(options.fua)
    }

    fn copy_bytes_max(&self) -> usize {
        self.intent_log
            .as_ref()
            .map_or(0, |log| log.config().copy_bytes_max)
    }

    /// `modify` whose change is also logged: `change_fn` applies it under the hold and returns
    /// the records describing it (one, or for a write in place several covering its range).
    /// Returns the ticket of the last record (no log: `None`); committing it commits them all.
    fn modify_logged(
        &self,
        kind: LogRecordKind,
        offset: u64,
        len: u64,
        options: WriteOptions,
        change_fn: impl FnOnce(&TxgHold) -> Result<Vec<Logged>, DatasetError>,
    ) -> Result<Option<Ticket>, DatasetError> {
        let change = match kind {
            LogRecordKind::Write | LogRecordKind::WriteInPlace => Change::Write,
            LogRecordKind::Zero | LogRecordKind::Trim => Change::Discard,
            LogRecordKind::Fs => panic!("a volume logs no filesystem changes"),
        };
        self.check_writable()?;
        self.check_range(change.name(), offset, len)?;
        if len == 0 {
            return Ok(None);
        }
        let space = (change == Change::Write).then(|| (&self.space_check, SpaceAsk::bytes(len)));
        // A volume's writers order themselves per block (`BlockStripes`): no lock of its own.
        let (hold, ()) =
            block_write::join_txg(&self.txg, space, len, || ()).map_err(|err| match err {
                block_write::JoinError::Space(refusal) => DatasetError::from(refusal),
                block_write::JoinError::Txg(err) => self.io_error(err),
            })?;
        let logged = change_fn(&hold)?;
        debug_assert_eq!(logged.iter().map(|part| part.length).sum::<u64>(), len);
        Ok(self.log_change(&hold, logged, options))
    }

    /// Appends the records of a change just made under `hold` to the log; the last one's
    /// ticket (no log: `None`).
    fn log_change(
        &self,
        hold: &TxgHold,
        logged: Vec<Logged>,
        options: WriteOptions,
    ) -> Option<Ticket> {
        let log = self.intent_log.as_ref()?;
        let mut ticket = None;
        for part in logged {
            ticket = Some(log.log(
                options.lane,
                LogOp {
                    kind: part.kind,
                    txg: hold.txg(),
                    object: VOLUME_OBJECT,
                    offset: part.offset,
                    length: part.length,
                    data: part.data,
                },
            ));
        }
        ticket
    }

    /// Commits `ticket` when the operation must be durable on return.
    fn finish(&self, ticket: Option<Ticket>, commit: bool) -> Result<(), DatasetError> {
        if !commit {
            return Ok(());
        }
        match (ticket, &self.intent_log) {
            (Some(ticket), Some(log)) => log.commit(ticket, self).map_err(|err| self.io_error(err)),
            _ => self.wait_for_txg(),
        }
    }

    /// Applies one replayed log record in the txg of `hold` (import; no log, no checks). A
    /// write in place reads its block, verified against the logged pointer (the caller has
    /// claimed the block's space and frees it afterwards): a block that fails to verify is an
    /// error, since the change it carries was acknowledged.
    pub fn replay_record(&self, hold: &TxgHold, record: &LogRecord) -> Result<(), DatasetError> {
        self.check_range("replay", record.offset, record.length)?;
        match record.kind {
            LogRecordKind::Write => self.apply_write(hold, record.offset, &record.data, None),
            LogRecordKind::WriteInPlace => {
                let replay_error = |problem: String, source| DatasetError::Replay {
                    name: self.name.clone(),
                    offset: record.offset,
                    txg: record.txg,
                    problem,
                    source,
                };
                let bp = record
                    .block_pointer()
                    .ok_or_else(|| replay_error("no block pointer".into(), None))?;
                if record.length != u64::from(self.block_size)
                    || !record.offset.is_multiple_of(u64::from(self.block_size))
                {
                    return Err(replay_error(
                        format!(
                            "{} bytes is not one block of {}",
                            record.length, self.block_size
                        ),
                        None,
                    ));
                }
                // The log block checksummed, but its pointer must still name one level-0
                // volume block of this volume's size, or the block read would not be one.
                if bp.lsize != self.block_size
                    || bp.level != 0
                    || bp.object_type != cairn_format::ObjectType::VolumeData
                {
                    return Err(replay_error(
                        format!(
                            "the logged pointer is a level-{} {:?} block of {} bytes",
                            bp.level, bp.object_type, bp.lsize
                        ),
                        None,
                    ));
                }
                let data = self
                    .objset
                    .io()
                    .read_block(&bp, cairn_device::queue::IoClass::SyncRead)
                    .map_err(|err| {
                        replay_error("reading the logged block".into(), Some(Box::new(err)))
                    })?;
                self.apply_write(hold, record.offset, &data, Some(&data))
            }
            LogRecordKind::Zero | LogRecordKind::Trim => {
                self.apply_discard(hold, record.offset, record.length)
            }
            LogRecordKind::Fs => Err(DatasetError::Replay {
                name: self.name.clone(),
                offset: record.offset,
                txg: record.txg,
                problem: "a filesystem change in a volume's log".into(),
                source: None,
            }),
        }
    }

    /// Allocation map from `offset`: runs of (length, is_hole) covering at most `len` bytes
    /// (fewer if the range is large), whole blocks only, clipped to the volume.
    pub fn block_status(&self, offset: u64, len: u64) -> Result<Vec<(u64, bool)>, DatasetError> {
        self.check_range("block status", offset, len)?;
        let block = u64::from(self.block_size);
        let first = offset / block;
        let end_block = (offset + len).div_ceil(block);
        let count = (end_block - first).min(BLOCK_STATUS_BLOCKS_MAX);
        let map = self
            .objset
            .block_map(VOLUME_OBJECT, first, count)
            .map_err(|err| self.io_error(err))?;
        let mut runs: Vec<(u64, bool)> = Vec::new();
        for (index, has_data) in map.into_iter().enumerate() {
            let start = ((first + index as u64) * block).max(offset);
            let stop = ((first + index as u64 + 1) * block)
                .min(offset + len)
                .min(self.size_bytes);
            let hole = !has_data;
            match runs.last_mut() {
                Some((run_len, run_hole)) if *run_hole == hole => *run_len += stop - start,
                _ => runs.push((stop - start, hole)),
            }
        }
        Ok(runs)
    }

    /// Returns once every write completed before the call is on stable media: in the intent
    /// log, or (without one) in a synced txg. Returns at once under `sync=disabled`.
    pub fn flush(&self) -> Result<(), DatasetError> {
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        if self.sync_mode() == SyncMode::Disabled {
            return Ok(());
        }
        match &self.intent_log {
            Some(log) => log.commit_all(self).map_err(|err| self.io_error(err)),
            None => self.wait_for_txg(),
        }
    }

    /// Waits until every change made so far is in a synced txg.
    pub fn wait_for_txg(&self) -> Result<(), DatasetError> {
        let txg = self.last_dirty_txg.load(Ordering::Acquire);
        if txg == 0 || txg <= self.txg.last_synced_txg() {
            return Ok(());
        }
        self.txg.wait_synced(txg).map_err(|err| self.io_error(err))
    }
}

impl LogSource for Volume {
    fn read_for_log(
        &self,
        object: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), cairn_zil::LogSourceError> {
        if object != VOLUME_OBJECT {
            return Err(Box::new(DatasetError::Io {
                name: self.name.clone(),
                source: cairn_object::ObjectError::NoSuchObject(object).into(),
            }));
        }
        Ok(self.read_unlogged(offset, buf)?)
    }
}
