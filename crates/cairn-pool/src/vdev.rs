//! The runtime vdev tree: leaves (one device each, with its I/O queue and error counters)
//! grouped into top-level vdevs (a single leaf, an N-way mirror or a raidz vdev).
//!
//! A block's copy (`Dva`) names a top-level vdev and an offset in that vdev's data region; the
//! same offset is used on every child of a mirror, at `VDEV_DATA_START + offset` on the leaf.
//! A raidz vdev's data region is its children's regions interleaved by sector, and a block is
//! a stripe of columns, one per child (`cairn_format::raidz`, `TopVdev::raidz`).
//!
//! Health follows zpool's vocabulary: a leaf is ONLINE, FAULTED (too many errors or an I/O
//! failure on write) or UNAVAIL (missing at import). A mirror is ONLINE when every child is,
//! DEGRADED while at least one child is ONLINE, UNAVAIL when none is; a raidz vdev is DEGRADED
//! while at most `parity` children are unreadable, UNAVAIL beyond. The pool takes the worst
//! state of its top-level vdevs.
//!
//! A leaf being resilvered (a side just attached to a mirror, or one back after missing
//! writes) is written like any other but never read: it lacks blocks until the resilver has
//! copied them (`Leaf::set_resilvering`), and it does not count as a healthy copy (its mirror
//! stays DEGRADED until it is done). A side back after missing some txgs (`Leaf::set_missed`)
//! lacks only the blocks born in them: it is read for every other block (it may hold the only
//! good copy of a block born after it came back, or of an intent-log block), never for those.
//! `TopVdev::read_order_for` takes the birth txg for that reason.
//!
//! Counters (`LeafErrors`) are what `cairn pool status` shows as READ / WRITE / CKSUM; they are
//! in-memory, reset at import, as in zpool.

use cairn_device::queue::LeafQueue;
use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError};
use cairn_format::label::{TopVdevConfig, TopVdevKind, VdevRole, VdevTreeConfig};
use cairn_format::raidz::RaidzGeometry;
use cairn_format::{Dva, LeafConfig};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A flush that left some data vdev with no working device: the txg cannot commit. The
/// device error that took its last leaf is the source (none if the leaves were gone already).
#[derive(Debug, thiserror::Error)]
#[error("vdev {vdev} has no working device")]
pub struct FlushError {
    pub vdev: String,
    #[source]
    pub source: Option<DeviceError>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Health {
    Online,
    Degraded,
    Faulted,
    Unavail,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Online => "ONLINE",
            Health::Degraded => "DEGRADED",
            Health::Faulted => "FAULTED",
            Health::Unavail => "UNAVAIL",
        }
    }
}

#[derive(Debug, Default)]
pub struct LeafErrors {
    pub read: AtomicU64,
    pub write: AtomicU64,
    pub checksum: AtomicU64,
    /// Bytes rewritten on this leaf by self-heal or scrub.
    pub repaired_bytes: AtomicU64,
}

impl LeafErrors {
    /// Sets every counter (restoring persisted values at import, or clearing).
    pub fn restore(&self, read: u64, write: u64, checksum: u64, repaired_bytes: u64) {
        self.read.store(read, Ordering::Relaxed);
        self.write.store(write, Ordering::Relaxed);
        self.checksum.store(checksum, Ordering::Relaxed);
        self.repaired_bytes.store(repaired_bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.write.load(Ordering::Relaxed),
            self.checksum.load(Ordering::Relaxed),
        )
    }
}

/// One device in the pool.
pub struct Leaf {
    pub guid: u64,
    pub spec: DeviceSpec,
    /// Both are taken out at `shutdown`, so a closed pool releases its devices (and their
    /// locks) even while other handles to the tree still exist.
    device: Mutex<Option<Arc<dyn Device>>>,
    queue: Mutex<Option<Arc<LeafQueue>>>,
    state: Mutex<Health>,
    /// Attached but not yet resilvered: written, never read.
    resilvering: AtomicBool,
    /// Back after missing txgs `first..=last` (inclusive; `u64::MAX` while open): not read
    /// for blocks born in them until a resilver has copied those.
    missed: Mutex<Option<(u64, u64)>>,
    pub errors: LeafErrors,
}

impl Leaf {
    pub fn open(guid: u64, spec: DeviceSpec, device: Arc<dyn Device>) -> Arc<Leaf> {
        let queue = LeafQueue::new(device.clone());
        Arc::new(Leaf {
            guid,
            spec,
            device: Mutex::new(Some(device)),
            queue: Mutex::new(Some(queue)),
            state: Mutex::new(Health::Online),
            resilvering: AtomicBool::new(false),
            missed: Mutex::new(None),
            errors: LeafErrors::default(),
        })
    }

    pub fn missing(guid: u64, spec: DeviceSpec) -> Arc<Leaf> {
        Arc::new(Leaf {
            guid,
            spec,
            device: Mutex::new(None),
            queue: Mutex::new(None),
            state: Mutex::new(Health::Unavail),
            resilvering: AtomicBool::new(false),
            missed: Mutex::new(None),
            errors: LeafErrors::default(),
        })
    }

    pub fn health(&self) -> Health {
        *self.state.lock()
    }

    pub fn is_usable(&self) -> bool {
        self.health() == Health::Online && self.queue.lock().is_some()
    }

    /// Whether the leaf still lacks blocks a resilver has to copy to it (all of them, or
    /// those born in txgs it missed).
    pub fn is_resilvering(&self) -> bool {
        self.resilvering.load(Ordering::SeqCst) || self.missed.lock().is_some()
    }

    /// Records the txgs `first..=last` whose blocks the leaf lacks (`last` `u64::MAX`: every
    /// txg from `first` on), or none once it holds them all again.
    pub fn set_missed(&self, range: Option<(u64, u64)>) {
        if let Some((first, last)) = range {
            assert!(first <= last, "missed txgs {first}..={last}");
        }
        *self.missed.lock() = range;
    }

    /// Whether a read of a block born in `birth_txg` may be served by this leaf: usable, not
    /// waiting for a full resilver, and not lacking that txg.
    pub fn can_read(&self, birth_txg: u64) -> bool {
        self.is_usable()
            && !self.resilvering.load(Ordering::SeqCst)
            && !self
                .missed
                .lock()
                .is_some_and(|(first, last)| (first..=last).contains(&birth_txg))
    }

    /// Marks the leaf as being resilvered (reads avoid it) or done.
    pub fn set_resilvering(&self, resilvering: bool) {
        self.resilvering.store(resilvering, Ordering::SeqCst);
    }

    /// Usable and holding every block: a copy reads may use and detach may rely on.
    pub fn is_readable(&self) -> bool {
        self.is_usable() && !self.is_resilvering()
    }

    /// Marks the leaf FAULTED after an error that makes its contents untrustworthy (a failed
    /// write). Reads are no longer sent to it.
    pub fn fault(&self) {
        let mut state = self.state.lock();
        if *state == Health::Online {
            *state = Health::Faulted;
            drop(state);
            cairn_metrics::events::record(
                "pool",
                format!("device {} FAULTED after a failed write or flush", self.spec),
            );
        }
    }

    /// Takes a FAULTED leaf as healthy again (`pool clear` after its device came back); a
    /// leaf without a device stays as it is.
    pub fn unfault(&self) {
        let mut state = self.state.lock();
        if *state == Health::Faulted && self.queue.lock().is_some() {
            *state = Health::Online;
        }
    }

    pub fn queue(&self) -> Option<Arc<LeafQueue>> {
        if self.health() != Health::Online {
            return None;
        }
        self.queue.lock().clone()
    }

    pub fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.lock().clone()
    }

    pub fn config(&self) -> LeafConfig {
        LeafConfig {
            guid: self.guid,
            path: self.spec.path.display().to_string(),
            model: self.spec.model.clone(),
        }
    }

    /// Queue depth, used to send mirror reads to the least busy side.
    pub fn load(&self) -> usize {
        self.queue
            .lock()
            .as_ref()
            .map_or(usize::MAX, |queue| queue.in_flight())
    }

    pub fn flush(&self) -> Result<(), DeviceError> {
        match self.queue() {
            Some(queue) => queue.flush(),
            None => Ok(()),
        }
    }

    /// Finishes queued I/O, stops the workers and drops the device (releasing its lock).
    pub fn shutdown(&self) {
        let queue = self.queue.lock().take();
        if let Some(queue) = queue {
            queue.shutdown();
        }
        self.device.lock().take();
    }
}

/// A top-level vdev: the unit blocks are allocated on.
#[derive(Clone)]
pub struct TopVdev {
    pub config: TopVdevConfig,
    pub leaves: Vec<Arc<Leaf>>,
    /// Bytes of allocatable data region (a whole number of metaslabs).
    pub data_size_bytes: u64,
}

impl TopVdev {
    pub fn id(&self) -> u32 {
        self.config.id
    }

    /// UNAVAIL without a readable child: a side still being resilvered is no copy of the
    /// vdev, so a write that reached only it must not count as written. For the same reason a
    /// mirror is DEGRADED, not ONLINE, while a side is being resilvered: it is no redundancy
    /// until it holds every block.
    ///
    /// A raidz vdev is DEGRADED with 1 to `parity` children unreadable (every block can still
    /// be rebuilt) and UNAVAIL with more.
    pub fn health(&self) -> Health {
        let readable = self.leaves.iter().filter(|leaf| leaf.is_readable()).count();
        let unreadable = self.leaves.len() - readable;
        match (self.config.kind, readable) {
            (_, 0) => Health::Unavail,
            (TopVdevKind::RaidZ { parity }, _) if unreadable > usize::from(parity) => {
                Health::Unavail
            }
            (TopVdevKind::Mirror | TopVdevKind::RaidZ { .. }, n) if n < self.leaves.len() => {
                Health::Degraded
            }
            _ => Health::Online,
        }
    }

    /// The layout of a raidz vdev (its children, parity and sector); `None` for a leaf or a
    /// mirror, and for a raidz config the layout cannot hold (refused at import by the label
    /// checks, so not met in a running pool).
    pub fn raidz(&self) -> Option<RaidzGeometry> {
        match self.config.kind {
            TopVdevKind::RaidZ { parity } => {
                RaidzGeometry::new(self.leaves.len() as u32, parity, self.config.ashift).ok()
            }
            _ => None,
        }
    }

    /// The children that may be read for a block born in `birth_txg` (usable, not lacking
    /// it), least busy first: the order mirror reads try them in.
    pub fn read_order_for(&self, birth_txg: u64) -> Vec<Arc<Leaf>> {
        let mut leaves: Vec<_> = self
            .leaves
            .iter()
            .filter(|leaf| leaf.can_read(birth_txg))
            .cloned()
            .collect();
        leaves.sort_by_key(|leaf| leaf.load());
        leaves
    }

    /// For reads of unknown birth (self-checksummed blocks, verified by their reader): the
    /// complete children least busy first, then those back from missing txgs (which hold
    /// every block born outside them), never a side waiting for a full resilver.
    pub fn read_order(&self) -> Vec<Arc<Leaf>> {
        let mut leaves: Vec<_> = self
            .leaves
            .iter()
            .filter(|leaf| leaf.is_usable() && !leaf.resilvering.load(Ordering::SeqCst))
            .cloned()
            .collect();
        leaves.sort_by_key(|leaf| (!leaf.is_readable(), leaf.load()));
        leaves
    }

    pub fn kind_name(&self) -> String {
        match self.config.kind {
            TopVdevKind::Leaf => self.leaves[0].spec.to_string(),
            TopVdevKind::Mirror => format!("mirror-{}", self.config.id),
            TopVdevKind::RaidZ { parity } => format!("raidz{parity}-{}", self.config.id),
        }
    }
}

pub struct VdevTree {
    pub tops: Vec<TopVdev>,
}

impl VdevTree {
    /// This tree plus `top` (`pool add`). Its id must be new.
    pub fn with_top(&self, top: TopVdev) -> VdevTree {
        assert!(
            self.top(top.id()).is_none(),
            "vdev id {} is taken",
            top.id()
        );
        let mut tops = self.tops.clone();
        tops.push(top);
        VdevTree { tops }
    }

    /// This tree without top-level vdev `id` (`pool remove`).
    pub fn without_top(&self, id: u32) -> VdevTree {
        VdevTree {
            tops: self
                .tops
                .iter()
                .filter(|top| top.id() != id)
                .cloned()
                .collect(),
        }
    }

    /// This tree with top-level vdev `top` in place of the one with its id (`pool attach`,
    /// `detach`: the same vdev with other children).
    pub fn with_top_replaced(&self, top: TopVdev) -> VdevTree {
        VdevTree {
            tops: self
                .tops
                .iter()
                .map(|old| {
                    if old.id() == top.id() {
                        top.clone()
                    } else {
                        old.clone()
                    }
                })
                .collect(),
        }
    }

    /// An id no top-level vdev of this tree has (ids are never reused while the tree has them).
    pub fn next_top_id(&self) -> u32 {
        self.tops.iter().map(|top| top.id() + 1).max().unwrap_or(0)
    }

    pub fn top(&self, id: u32) -> Option<&TopVdev> {
        self.tops.iter().find(|top| top.id() == id)
    }

    /// The top-level vdev holding a copy, if the copy lies inside its data region.
    pub fn top_for_dva(&self, dva: &Dva) -> Option<&TopVdev> {
        self.top(dva.vdev).filter(|_| self.dva_in_range(dva))
    }

    /// Whether a copy lies inside its vdev's data region.
    pub fn dva_in_range(&self, dva: &Dva) -> bool {
        self.top(dva.vdev).is_some_and(|top| {
            dva.offset
                .checked_add(u64::from(dva.asize))
                .is_some_and(|end| end <= top.data_size_bytes)
        })
    }

    pub fn leaves(&self) -> impl Iterator<Item = &Arc<Leaf>> {
        self.tops.iter().flat_map(|top| top.leaves.iter())
    }

    /// The pool's health: its worst top-level vdev, except that a lost log device only
    /// degrades the pool (nothing a txg needs lives there; the log moves to the pool's disks).
    pub fn health(&self) -> Health {
        self.tops
            .iter()
            .map(|top| match (top.config.role, top.health()) {
                (VdevRole::Log, health) => health.min(Health::Degraded),
                (_, health) => health,
            })
            .max()
            .unwrap_or(Health::Unavail)
    }

    pub fn config(&self) -> VdevTreeConfig {
        VdevTreeConfig {
            tops: self
                .tops
                .iter()
                .map(|top| {
                    let mut config = top.config.clone();
                    config.children = top.leaves.iter().map(|leaf| leaf.config()).collect();
                    config
                })
                .collect(),
        }
    }

    /// Flushes every usable leaf, in parallel; leaves whose flush fails are faulted. Fails only
    /// if some top-level vdev is left with no leaf that flushed.
    pub fn flush_all(&self) -> Result<(), FlushError> {
        let results: Vec<(Arc<Leaf>, Result<(), DeviceError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .leaves()
                .filter(|leaf| leaf.is_usable())
                .map(|leaf| {
                    let leaf = leaf.clone();
                    scope.spawn(move || {
                        let result = leaf.flush();
                        (leaf, result)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("flush thread panicked"))
                .collect()
        });
        // The failures, by leaf guid: the cause of a vdev lost now is its leaves' last error.
        let mut failures: Vec<(u64, DeviceError)> = Vec::new();
        for (leaf, result) in results {
            if let Err(err) = result {
                leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                leaf.fault();
                cairn_metrics::events::record(
                    "pool",
                    format!(
                        "flush failed, leaf faulted: {}",
                        cairn_device::error_chain(&err)
                    ),
                );
                failures.push((leaf.guid, err));
            }
        }
        // A lost log device holds nothing a txg needs (the intent log falls back to the
        // pool's disks); any other vdev without a working device fails the sync.
        for top in &self.tops {
            if top.health() == Health::Unavail && top.config.role != VdevRole::Log {
                let source = failures
                    .iter()
                    .position(|(guid, _)| top.leaves.iter().any(|leaf| leaf.guid == *guid))
                    .map(|index| failures.swap_remove(index).1);
                return Err(FlushError {
                    vdev: top.kind_name(),
                    source,
                });
            }
        }
        Ok(())
    }

    pub fn shutdown(&self) {
        for leaf in self.leaves() {
            leaf.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_device::mem::MemDevice;

    fn leaf(guid: u64) -> Arc<Leaf> {
        let spec = DeviceSpec {
            path: format!("/dev/mem{guid}").into(),
            model: None,
        };
        Leaf::open(guid, spec, Arc::new(MemDevice::new(64 << 20)))
    }

    /// A mirror of `leaves`, in that order.
    fn mirror(leaves: Vec<Arc<Leaf>>) -> TopVdev {
        TopVdev {
            config: TopVdevConfig {
                id: 0,
                guid: 9,
                kind: TopVdevKind::Mirror,
                role: VdevRole::Normal,
                ashift: 12,
                metaslab_shift: 24,
                metaslab_count: 3,
                children: Vec::new(),
            },
            leaves,
            data_size_bytes: 3 << 24,
        }
    }

    #[test]
    fn a_leaf_back_from_missed_txgs_is_read_only_outside_them() {
        let (complete, back) = (leaf(1), leaf(2));
        let top = mirror(vec![back.clone(), complete.clone()]);
        back.set_missed(Some((10, 20)));
        let order = |txg: u64| -> Vec<u64> {
            top.read_order_for(txg)
                .iter()
                .map(|leaf| leaf.guid)
                .collect()
        };
        assert_eq!(order(15), vec![1]);
        assert_eq!(order(10), vec![1]);
        assert_eq!(order(20), vec![1]);
        assert_eq!(order(9), vec![2, 1]);
        assert_eq!(order(21), vec![2, 1]);
        // No redundancy until it is resilvered; reads of unknown birth try it last.
        assert!(back.is_resilvering() && !back.is_readable());
        assert_eq!(top.health(), Health::Degraded);
        let any: Vec<u64> = top.read_order().iter().map(|leaf| leaf.guid).collect();
        assert_eq!(any, vec![1, 2]);
        back.set_missed(None);
        assert_eq!(top.health(), Health::Online);
        top.leaves.iter().for_each(|leaf| leaf.shutdown());
    }

    #[test]
    fn a_leaf_being_resilvered_is_written_but_never_read() {
        let (old, new) = (leaf(1), leaf(2));
        // The new side first: were it readable, it would be tried first.
        let top = mirror(vec![new.clone(), old.clone()]);
        new.set_resilvering(true);
        let order: Vec<u64> = top.read_order().iter().map(|leaf| leaf.guid).collect();
        assert_eq!(order, vec![1]);
        assert!(
            new.is_usable() && new.queue().is_some(),
            "writes still reach it"
        );
        assert!(!new.is_readable() && old.is_readable());
        new.set_resilvering(false);
        let order: Vec<u64> = top.read_order().iter().map(|leaf| leaf.guid).collect();
        assert_eq!(order, vec![2, 1]);
        top.leaves.iter().for_each(|leaf| leaf.shutdown());
    }

    #[test]
    fn a_raidz_vdev_is_degraded_up_to_parity_unreadable_children_and_unavail_beyond() {
        let leaves: Vec<Arc<Leaf>> = (1..=5).map(leaf).collect();
        let mut top = mirror(leaves.clone());
        top.config.kind = TopVdevKind::RaidZ { parity: 2 };
        let geometry = top.raidz().expect("a raidz layout");
        assert_eq!((geometry.width(), geometry.parity()), (5, 2));
        assert_eq!(top.kind_name(), "raidz2-0");
        assert_eq!(top.health(), Health::Online);
        leaves[0].fault();
        assert_eq!(top.health(), Health::Degraded);
        leaves[3].fault();
        assert_eq!(top.health(), Health::Degraded);
        leaves[4].fault();
        assert_eq!(top.health(), Health::Unavail);
        leaves[4].unfault();
        assert_eq!(top.health(), Health::Degraded);
        assert!(mirror(leaves.clone()).raidz().is_none());
        leaves.iter().for_each(|leaf| leaf.shutdown());
    }
}
