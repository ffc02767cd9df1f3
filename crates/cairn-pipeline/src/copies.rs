//! Every copy of a block: reading one copy from one child and verifying it against the pointer
//! (`read_copy`, `verify_copy`), surveying every copy on every child (`scrub_block`,
//! `verify_all_copies`), and rewriting a bad copy from a good one (`repair`, `write_copy`).
//!
//! A copy on a raidz vdev is surveyed column by column (`raidz`): each column is compared
//! with the one recomputed from the verified block, parity included, so a scrub finds and
//! repairs bad parity as well as bad data.
//!
//! Invariants: a copy counts as good only if its stored bytes' checksum equals the pointer's;
//! nothing is rewritten on a read-only pool; a failed read or checksum is counted on the leaf
//! that returned it. This file uses `raidz`, `io` and `error` below it; `read` sits above.

use crate::error::{CopyError, PipelineError, decompress_error, outside_pool};
use crate::io::BlockIo;
use crate::raidz::RaidzReadOptions;
use bytes::Bytes;
use cairn_device::queue::{IoClass, IoHandle};
use cairn_device::{DeviceError, ReadBuf};
use cairn_format::compress;
use cairn_format::label::VDEV_DATA_START;
use cairn_format::{BlockPointer, Compression, Dva};
use cairn_pool::vdev::{Leaf, TopVdev};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Result of verifying every copy of one block (scrub).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScrubOutcome {
    pub copies_checked: u64,
    pub bad_copies: u64,
    pub repaired_copies: u64,
    /// Bytes rewritten: a whole copy per repaired mirror side, a column per raidz column.
    pub repaired_bytes: u64,
    pub bytes_read: u64,
    pub unrecoverable: bool,
}

impl BlockIo {
    /// Verifies every copy on every child (scrub), repairing what it can. The bytes returned
    /// are the block's logical contents (decompressed).
    pub fn scrub_block(&self, bp: &BlockPointer) -> (ScrubOutcome, Option<Bytes>) {
        let mut survey = self.survey_copies(bp, true);
        let mut outcome = ScrubOutcome {
            copies_checked: survey.checked,
            bytes_read: survey.bytes_read,
            bad_copies: survey.bad.len() as u64,
            repaired_copies: survey.repaired_columns,
            repaired_bytes: survey.repaired_bytes,
            ..ScrubOutcome::default()
        };
        match &survey.good {
            Some(data) => {
                for (leaf, dva, _) in &survey.bad {
                    if let Some(leaf) = leaf
                        && self.repair(leaf, dva, data)
                    {
                        outcome.repaired_copies += 1;
                        outcome.repaired_bytes += data.len() as u64;
                    }
                }
                let tree = self.tree();
                for dva in &survey.lost_stripes {
                    if self.rewrite_raidz(&tree, dva, data) {
                        outcome.repaired_copies += 1;
                        outcome.repaired_bytes += u64::from(dva.asize);
                    }
                }
            }
            None => {
                outcome.unrecoverable = true;
                self.stats.unrecoverable.fetch_add(1, Ordering::Relaxed);
            }
        }
        match survey.logical(bp) {
            Ok(good) => (outcome, good),
            Err(_) => {
                outcome.unrecoverable = true;
                self.stats.unrecoverable.fetch_add(1, Ordering::Relaxed);
                (outcome, None)
            }
        }
    }

    /// Verifies every copy of `bp` on every child without repairing anything (offline check).
    /// Returns the number of copies checked, the descriptions of bad ones, and good data.
    pub fn verify_all_copies(&self, bp: &BlockPointer) -> (u64, Vec<String>, Option<Bytes>) {
        let mut survey = self.survey_copies(bp, false);
        let good = survey.logical(bp);
        let mut problems: Vec<String> = survey
            .bad
            .into_iter()
            .map(|(_, _, reason)| reason.to_string())
            .collect();
        let good = match good {
            Ok(good) => good,
            Err(err) => {
                problems.push(cairn_device::error_chain(&err));
                None
            }
        };
        (survey.checked, problems, good)
    }

    /// Reads and verifies every copy of `bp` on every child of its vdevs; on a raidz vdev
    /// every column, parity included, rewriting the bad ones if `repair`.
    fn survey_copies(&self, bp: &BlockPointer, repair: bool) -> CopySurvey {
        let mut survey = CopySurvey::default();
        let tree = self.tree();
        for dva in bp.copies() {
            let Some(top) = tree.top_for_dva(dva) else {
                survey.bad.push((None, *dva, outside_pool(dva)));
                continue;
            };
            if top.raidz().is_some() {
                self.survey_raidz(top, dva, bp, repair, &mut survey);
                continue;
            }
            for leaf in top.read_order_for(bp.birth_txg) {
                survey.checked += 1;
                survey.bytes_read += u64::from(bp.psize);
                match self.read_copy(&leaf, dva, bp, IoClass::Scrub) {
                    Ok(data) => survey.good = Some(Bytes::from_owner(data)),
                    Err(reason) => survey.bad.push((Some(leaf), *dva, reason)),
                }
            }
        }
        survey
    }

    /// One raidz copy of `bp` read whole for `survey_copies`: each bad column is a bad copy
    /// (on its child, already rewritten if `repair`); a stripe no combination rebuilt is one
    /// bad copy, rewritten whole from another copy by `scrub_block`.
    fn survey_raidz(
        &self,
        top: &TopVdev,
        dva: &Dva,
        bp: &BlockPointer,
        repair: bool,
        survey: &mut CopySurvey,
    ) {
        let options = RaidzReadOptions {
            class: IoClass::Scrub,
            birth_txg: Some(bp.birth_txg),
            every_column: true,
            repair,
        };
        let read = self.read_raidz(top, dva, u64::from(bp.psize), options, &mut |data| {
            bp.checksum_algorithm.compute(data) == bp.checksum
        });
        self.count_raidz_read(&read);
        survey.checked += read.columns_read;
        survey.bytes_read += read.bytes_read;
        survey.repaired_columns += read.repaired_columns;
        survey.repaired_bytes += read.repaired_bytes;
        for _ in 0..read.bad_columns {
            survey.bad.push((
                None,
                *dva,
                CopyError::Raidz {
                    vdev: top.kind_name(),
                    reason: format!("a bad column at offset {:#x}", dva.offset),
                },
            ));
        }
        match read.data {
            Some(data) => survey.good = Some(Bytes::from_owner(data)),
            None => {
                survey.lost_stripes.push(*dva);
                survey.bad.push((
                    None,
                    *dva,
                    CopyError::Raidz {
                        vdev: top.kind_name(),
                        reason: read.failure.unwrap_or_default(),
                    },
                ));
            }
        }
    }

    pub(crate) fn read_copy(
        &self,
        leaf: &Arc<Leaf>,
        dva: &Dva,
        bp: &BlockPointer,
        class: IoClass,
    ) -> Result<ReadBuf, CopyError> {
        let queue = leaf.queue().ok_or_else(|| CopyError::Unavailable {
            device: leaf.spec.to_string(),
        })?;
        let offset = VDEV_DATA_START + dva.offset;
        let device = queue.device();
        // A synchronous read from flash gains nothing from the queue (no seek to order, nothing
        // to merge with while someone waits) and pays two thread hops: read it here instead.
        let direct = class == IoClass::SyncRead && !device.is_rotational();
        let result = if direct {
            self.stats.direct_reads.fetch_add(1, Ordering::Relaxed);
            queue.read_direct(class, offset, bp.psize as usize)
        } else {
            queue.read(class, offset, bp.psize as usize).wait()
        };
        self.verify_copy(leaf, offset, bp, result)
    }

    /// Counts a copy's read and checks it against the block pointer.
    pub(crate) fn verify_copy(
        &self,
        leaf: &Arc<Leaf>,
        offset: u64,
        bp: &BlockPointer,
        result: Result<ReadBuf, DeviceError>,
    ) -> Result<ReadBuf, CopyError> {
        let data = match result {
            Ok(data) => data,
            Err(err) => {
                leaf.errors.read.fetch_add(1, Ordering::Relaxed);
                return Err(CopyError::Device(err));
            }
        };
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes_read
            .fetch_add(u64::from(bp.psize), Ordering::Relaxed);
        if bp.checksum_algorithm.compute(&data) != bp.checksum {
            leaf.errors.checksum.fetch_add(1, Ordering::Relaxed);
            self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
            return Err(CopyError::Checksum {
                device: leaf.spec.to_string(),
                offset,
            });
        }
        Ok(data)
    }

    /// Writes `data`, the verified contents of the copy at `dva`, to one child of its vdev at
    /// the copy's offset (resilver: the child lacks it). `None` if the child is unusable; the
    /// caller waits on the handle and flushes the leaf before relying on the write.
    pub fn write_copy(&self, leaf: &Arc<Leaf>, dva: &Dva, data: Bytes) -> Option<IoHandle<()>> {
        // A raidz child holds columns, never a whole copy.
        if self
            .tree()
            .top(dva.vdev)
            .is_some_and(|top| top.raidz().is_some())
        {
            return None;
        }
        let queue = leaf.queue()?;
        Some(queue.write(IoClass::Scrub, VDEV_DATA_START + dva.offset, data))
    }

    /// Rewrites a bad copy in place with verified data. Safe because the block is live: nothing
    /// else may occupy its space.
    pub(crate) fn repair(&self, leaf: &Arc<Leaf>, dva: &Dva, data: &Bytes) -> bool {
        if self.read_only.load(Ordering::SeqCst) {
            return false;
        }
        debug_assert!(
            self.tree()
                .top(dva.vdev)
                .is_none_or(|top| top.raidz().is_none()),
            "a whole copy written to a raidz child"
        );
        let Some(queue) = leaf.queue() else {
            return false;
        };
        let offset = VDEV_DATA_START + dva.offset;
        match queue.write(IoClass::SyncWrite, offset, data.clone()).wait() {
            Ok(()) => {
                leaf.errors
                    .repaired_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                self.stats.repairs.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// Every copy of one block, read and verified (scrub and check).
#[derive(Default)]
struct CopySurvey {
    checked: u64,
    bytes_read: u64,
    good: Option<Bytes>,
    /// Copies that failed, with the leaf that returned them (none if the copy's address is
    /// outside the pool, or the copy is a raidz column or stripe) and why.
    bad: Vec<(Option<Arc<Leaf>>, Dva, CopyError)>,
    /// Raidz columns rewritten while surveying, and their bytes.
    repaired_columns: u64,
    repaired_bytes: u64,
    /// Raidz copies no combination of columns rebuilt.
    lost_stripes: Vec<Dva>,
}

impl CopySurvey {
    /// The good copy's logical bytes (taken out of the survey).
    fn logical(&mut self, bp: &BlockPointer) -> Result<Option<Bytes>, PipelineError> {
        match self.good.take() {
            Some(physical) if bp.compression != Compression::Off => {
                let data = compress::decompress(&physical, bp.compression, bp.lsize as usize)
                    .map_err(|cause| decompress_error(bp, cause))?;
                Ok(Some(Bytes::from(data)))
            }
            other => Ok(other),
        }
    }
}
