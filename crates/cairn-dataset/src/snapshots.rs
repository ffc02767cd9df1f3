//! Snapshots: every dataset's snapshots and the deadlists of heads and snapshots, with the
//! space figures ZFS users read (`used`, `referenced`, `written`, `usedbysnapshots`,
//! `written@snap`), each kept exact as blocks die rather than computed by walking trees.
//!
//! A snapshot is a frozen object-set root plus a deadlist. Taking one (in txg t, after the
//! head's object set synced in t) copies the head's root into a new record and hands the
//! head's deadlist to it; the head starts an empty deadlist, and its object set is told t is
//! now its newest snapshot txg, so from t+1 on a block born at or before t that the head stops
//! referencing is kept (cairn-object's birth-txg rule) and arrives here through `kill`.
//!
//! Accounting, for a dataset with snapshots S1 < … < Sn (by txg) and its head H, where the
//! deadlist of Si holds what died between S(i-1) and Si, and H's what died since Sn:
//! - `referenced(S)`: the head's referenced bytes when S was taken (never changes);
//! - `written(S)` = referenced(S) − referenced(prev) + space(deadlist(S)): what S references
//!   that its predecessor did not (set at creation; `written` of the head the same, live);
//! - `used(S)`, unique to S: the blocks born after its predecessor that died before its
//!   successor: `space_range(prev, S)` of the successor's deadlist. Only the newest snapshot's
//!   changes while the head writes (`kill`); a destroy recomputes its neighbours' (`destroy`);
//! - `usedbysnapshots(dataset)`: the sum of every deadlist of the dataset (each block held
//!   only by snapshots has died exactly once, into exactly one of them);
//! - `written@S` of the head: referenced(H) − referenced(S) plus the blocks born by S's txg
//!   that died after S, a range sum over the deadlists after S.
//!
//! On disk each snapshot and each head deadlist is one record in a hashed map in the MOS
//! (`record_key`: 's' or 'h', then the id big-endian), so creating a snapshot rewrites one
//! leaf of the map and never the whole table (10,000 snapshots stay cheap); records changed
//! since the last sync are `dirty` and written by the sync that follows. Records are checked
//! when read (`decode_record`).
//!
//! Destroy (`destroy`) frees what only the snapshot held: its successor's blocks born after its
//! predecessor, marked freed in the successor's deadlist parts and queued as background free
//! work (`FreeWork`, a bounded share per txg: `process_frees`), while its own deadlist joins
//! the successor's. User holds (`hold`, `release`) keep a snapshot from destroy; `destroy -d`
//! marks it to go with its last hold (`defer_destroy`).
//!
//! Clones. A clone is a dataset whose head started as a snapshot's tree (its *origin*, txg
//! t0): it shares every block born by t0 with the origin, and the origin cannot be destroyed
//! while it exists. To the clone's accounting the origin is a predecessor snapshot that it
//! does not own: its head keeps what was born by t0 (`prev_snap_txg` is t0 until it has
//! snapshots of its own), a block born by t0 that it stops referencing goes onto its
//! deadlist keyed as the origin's own lineage would key it (`key_of` follows the origin chain),
//! and is never freed by the clone (the origin holds it). So for a clone with floor t0:
//! `usedbysnapshots` counts only its deadlists' blocks born after t0, `usedbydataset` is
//! referenced less what it still shares with the origin (`origin_shared_bytes`: the origin's
//! referenced bytes less every block born by t0 on the clone's deadlists), and its first
//! snapshot's `written` is relative to the origin. Promote (`promote`) moves the origin and
//! the snapshots before it to the clone and makes the old parent a clone of the origin; as
//! every deadlist was keyed by lineage, no pointer is rewritten, only the origin's `used`
//! is recomputed. Which dataset is a clone of what is one record per clone ('o'); the
//! snapshot record's `clones` field is reserved and stays empty.
//!
//! Bookmarks (`bookmarks.rs`) are records of this table too (tag 'b'); they hold no block.

use crate::deadlist::{DeadSpace, Deadlist, DeadlistPhys};
use crate::figure_cache::FigureCache;
pub use crate::records::{Bookmark, FreeWork, RecordKey, TreeFree};
use crate::{DatasetError, SnapshotName};
use cairn_format::BlockPointer;
use cairn_format::blkptr::BLOCK_POINTER_SIZE;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Version byte that starts every record value this build writes. Version 2 adds a guid at
/// the end of snapshot and bookmark records; version 1 records (no guid) are still read,
/// their guid 0 ("derive it", see `SnapshotInfo::guid`). Other records are the same in both.
pub const SNAPSHOT_RECORD_VERSION: u8 = 2;
/// The oldest record version this build reads.
pub const SNAPSHOT_RECORD_VERSION_MIN: u8 = 1;
/// Longest chain of clones of clones followed before a table is called damaged (a loop).
pub(crate) const ORIGIN_CHAIN_MAX: usize = 1 << 16;

/// What a snapshot record holds besides its deadlist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// Unique among datasets and snapshots (both take ids from the directory's counter).
    pub id: u64,
    pub dataset_id: u64,
    /// The part after '@'.
    pub name: String,
    pub created_txg: u64,
    pub creation_ms: u64,
    /// Encoded root of the frozen object set.
    pub objset_bp: Vec<u8>,
    pub referenced_bytes: u64,
    /// Bytes only this snapshot references (`used`).
    pub unique_bytes: u64,
    /// Bytes this snapshot references that its predecessor did not (`written`).
    pub written_bytes: u64,
    /// User holds by tag, with the time each was placed (`hold`, a later step).
    pub holds: BTreeMap<String, u64>,
    /// Datasets cloned from this snapshot, by id (a later step).
    pub clones: Vec<u64>,
    /// Destroy once the last hold is released (`destroy -d`, a later step).
    pub defer_destroy: bool,
    /// The snapshot's identity in send streams: random when taken, the sender's for a
    /// received snapshot. 0 for a snapshot read from a version-1 record, whose guid the
    /// engine derives (`cairn_engine::send::snapshot_guid`). Stored after the deadlist
    /// (`SnapshotPhys`), not with the fields above.
    #[serde(skip)]
    pub guid: u64,
}

impl SnapshotInfo {
    pub fn objset_bp(&self) -> Result<BlockPointer, DatasetError> {
        BlockPointer::decode(&self.objset_bp)
            .map_err(|err| DatasetError::Corrupt(format!("snapshot {}: {err}", self.id)))
    }
}

/// One snapshot in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub info: SnapshotInfo,
    pub deadlist: Deadlist,
}

/// A snapshot record's body (version 2; version 1 ends before `guid`).
#[derive(Serialize, Deserialize)]
struct SnapshotPhys {
    info: SnapshotInfo,
    deadlist: DeadlistPhys,
    guid: u64,
}

/// A version-1 snapshot record's body.
#[derive(Deserialize)]
struct SnapshotPhysV1 {
    info: SnapshotInfo,
    deadlist: DeadlistPhys,
}

/// A bookmark record's body (version 2; version 1 is the bookmark alone).
#[derive(Serialize, Deserialize)]
struct BookmarkPhys {
    bookmark: Bookmark,
    guid: u64,
}

/// See the module doc. `Clone` lets a caller try changes on a copy (what a destroy would
/// free, `destroy -n`): it holds totals and records, never blocks.
#[derive(Debug, Default, Clone)]
pub struct SnapshotTable {
    pub(crate) snapshots: BTreeMap<u64, Snapshot>,
    /// (dataset id, created txg) → snapshot id: each dataset's snapshots, oldest first.
    pub(crate) by_dataset: BTreeMap<(u64, u64), u64>,
    /// (dataset id, name) → snapshot id: the name index `find` uses, so a lookup costs the
    /// same at 10 snapshots and at 10,000. In memory only, built at load; it always holds
    /// exactly the entries of `snapshots` (`index_snapshot`, `unindex_snapshot`,
    /// `check_name_index`).
    pub(crate) by_name: HashMap<(u64, String), u64>,
    /// `usedbysnapshots` kept per deadlist, so a txg's refresh costs what changed in it.
    pub(crate) figures: FigureCache,
    /// Deadlists of heads that have one (a dataset with no snapshot has none).
    pub(crate) heads: BTreeMap<u64, Deadlist>,
    /// Background frees of destroys, oldest first.
    pub(crate) free_queue: BTreeMap<u64, FreeWork>,
    /// Clone dataset id → its origin snapshot's id.
    pub(crate) origins: BTreeMap<u64, u64>,
    /// Dead trees being freed in the background, oldest first.
    pub(crate) tree_frees: BTreeMap<u64, TreeFree>,
    /// Bookmarks by id.
    pub(crate) bookmarks: BTreeMap<u64, Bookmark>,
    /// Why the last tree-free step stopped short (a block it could not read), if it did.
    pub(crate) tree_free_problem: Option<String>,
    /// Records changed since the last `flush`.
    pub(crate) dirty: BTreeSet<RecordKey>,
    /// The background free queued since the last flush and not started: later destroys of
    /// the same txg add their scans to it (`queue_free`). In memory only.
    pub(crate) open_free: Option<u64>,
}

/// A record to write (`Some` value) or remove (`None`), as `flush` returns it.
pub type RecordChange = (RecordKey, Option<Vec<u8>>);

/// A decoded record (`decode_record`).
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    Snapshot(Snapshot),
    Head(u64, Deadlist),
    Free(u64, FreeWork),
    /// A clone's dataset id and its origin snapshot's id.
    Origin(u64, u64),
    TreeFree(u64, TreeFree),
    Bookmark(Bookmark),
}

/// An origin record's value.
#[derive(Serialize, Deserialize)]
struct OriginPhys {
    snapshot_id: u64,
}

/// What destroying a snapshot did, for the engine to carry out.
#[derive(Debug, Default)]
pub struct Destroyed {
    /// Blocks to free in this txg (they died in it, so no part holds them yet).
    pub free_now: Vec<BlockPointer>,
    /// The head's new newest snapshot txg, when the newest snapshot went.
    pub prev_snap_txg: Option<u64>,
    /// What the destroy frees in all, now and in the background.
    pub freed: DeadSpace,
    /// The background free work it queued (`FreeWork`'s number) and its bytes, if any.
    pub queued_free: Option<(u64, u64)>,
    /// Deadlist objects to free in this txg: parts left holding nothing live that no
    /// background free reads.
    pub free_objects: Vec<u64>,
}

/// What `SnapshotTable::create` is given.
pub struct NewSnapshot {
    pub id: u64,
    pub dataset_id: u64,
    pub name: String,
    pub txg: u64,
    pub creation_ms: u64,
    pub objset_bp: BlockPointer,
    pub referenced_bytes: u64,
    /// Its guid (`SnapshotInfo::guid`): random, or the sender's for a received snapshot.
    pub guid: u64,
}

impl SnapshotTable {
    pub fn new() -> SnapshotTable {
        SnapshotTable::default()
    }

    /// Builds the table from every record of the map, checking each and their agreement
    /// (one snapshot per (dataset, txg), names unique per dataset, heads only of datasets
    /// that have snapshots or deadlists). `dataset_known` says whether a dataset id exists.
    pub fn load(
        records: impl IntoIterator<Item = Record>,
        dataset_known: impl Fn(u64) -> bool,
    ) -> Result<SnapshotTable, DatasetError> {
        let mut table = SnapshotTable::new();
        for record in records {
            match record {
                Record::Snapshot(snapshot) => {
                    let info = &snapshot.info;
                    if !dataset_known(info.dataset_id) {
                        return Err(DatasetError::Corrupt(format!(
                            "snapshot {} of unknown dataset {}",
                            info.id, info.dataset_id
                        )));
                    }
                    if table.find(info.dataset_id, &info.name).is_some()
                        || table
                            .by_dataset
                            .insert((info.dataset_id, info.created_txg), info.id)
                            .is_some()
                    {
                        return Err(DatasetError::Corrupt(format!(
                            "snapshot {} ({}) repeats a name or a txg of dataset {}",
                            info.id, info.name, info.dataset_id
                        )));
                    }
                    table.index_snapshot(info.dataset_id, &info.name, info.id);
                    table.snapshots.insert(info.id, snapshot);
                }
                Record::Head(dataset_id, deadlist) => {
                    if !dataset_known(dataset_id) {
                        return Err(DatasetError::Corrupt(format!(
                            "deadlist of unknown dataset {dataset_id}"
                        )));
                    }
                    table.heads.insert(dataset_id, deadlist);
                }
                Record::Free(seq, work) => {
                    table.free_queue.insert(seq, work);
                }
                Record::TreeFree(seq, work) => {
                    table.tree_frees.insert(seq, work);
                }
                Record::Bookmark(bookmark) => {
                    table.bookmarks.insert(bookmark.id, bookmark);
                }
                Record::Origin(dataset_id, snapshot_id) => {
                    if !dataset_known(dataset_id) {
                        return Err(DatasetError::Corrupt(format!(
                            "origin of unknown dataset {dataset_id}"
                        )));
                    }
                    table.origins.insert(dataset_id, snapshot_id);
                }
            }
        }
        table.check_origins()?;
        table.check_bookmarks(&dataset_known)?;
        table.check_name_index();
        Ok(table)
    }

    /// Decodes one map entry, checking what a later use relies on (a valid name, a decodable
    /// root born by the snapshot's txg, consistent deadlist totals).
    pub fn decode_record(key: &[u8], value: &[u8]) -> Result<Record, DatasetError> {
        let key = RecordKey::decode(key)?;
        let corrupt = |what: String| DatasetError::Corrupt(format!("{key:?}: {what}"));
        let (&version, body) = value
            .split_first()
            .ok_or_else(|| corrupt("empty record".into()))?;
        if !(SNAPSHOT_RECORD_VERSION_MIN..=SNAPSHOT_RECORD_VERSION).contains(&version) {
            return Err(corrupt(format!(
                "record version {version} (this build reads {SNAPSHOT_RECORD_VERSION_MIN} to \
                 {SNAPSHOT_RECORD_VERSION})"
            )));
        }
        let with_guid = version >= 2;
        match key {
            RecordKey::Snapshot(id) => {
                let phys: SnapshotPhys = if with_guid {
                    postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?
                } else {
                    let old: SnapshotPhysV1 =
                        postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?;
                    SnapshotPhys {
                        info: old.info,
                        deadlist: old.deadlist,
                        guid: 0,
                    }
                };
                let mut info = phys.info;
                info.guid = phys.guid;
                if info.id != id || info.objset_bp.len() != BLOCK_POINTER_SIZE {
                    return Err(corrupt(format!("holds snapshot {}", info.id)));
                }
                SnapshotName::parse(&format!("a@{}", info.name))?;
                let root = info.objset_bp()?;
                // A hole: a snapshot of a dataset with no object set yet (the pool's root).
                if root.birth_txg > info.created_txg {
                    return Err(corrupt(format!(
                        "root born in txg {} after the snapshot's txg {}",
                        root.birth_txg, info.created_txg
                    )));
                }
                let deadlist = Deadlist::from_phys(&phys.deadlist)?;
                Ok(Record::Snapshot(Snapshot { info, deadlist }))
            }
            RecordKey::Head(id) => {
                let phys: DeadlistPhys =
                    postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?;
                Ok(Record::Head(id, Deadlist::from_phys(&phys)?))
            }
            RecordKey::Bookmark(id) => {
                let bookmark = if with_guid {
                    let phys: BookmarkPhys =
                        postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?;
                    Bookmark {
                        guid: phys.guid,
                        ..phys.bookmark
                    }
                } else {
                    postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?
                };
                if bookmark.id != id {
                    return Err(corrupt(format!("holds bookmark {}", bookmark.id)));
                }
                crate::BookmarkName::parse(&format!("a#{}", bookmark.name))?;
                Ok(Record::Bookmark(bookmark))
            }
            RecordKey::TreeFree(seq) => {
                let work: TreeFree =
                    postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?;
                let root = work.root()?;
                if root.is_hole()
                    || work.root.len() != BLOCK_POINTER_SIZE
                    || work.path.len() > cairn_object::tree_free::TREE_PATH_DEPTH_MAX
                {
                    return Err(corrupt(format!("tree free {seq}: {work:?}")));
                }
                Ok(Record::TreeFree(seq, work))
            }
            RecordKey::Origin(id) => {
                let phys: OriginPhys =
                    postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?;
                Ok(Record::Origin(id, phys.snapshot_id))
            }
            RecordKey::Free(seq) => {
                let work: FreeWork =
                    postcard::from_bytes(body).map_err(|err| corrupt(err.to_string()))?;
                let in_bounds = work
                    .scans
                    .iter()
                    .all(|scan| scan.object != 0 && scan.min_txg < scan.max_txg)
                    && (work.scan_index as usize) <= work.scans.len()
                    // Past the last scan (done; the next txg's frees remove it): nothing left
                    // in flight.
                    && work
                        .scans
                        .get(work.scan_index as usize)
                        .map_or(work.next_entry == 0, |scan| work.next_entry <= scan.entries);
                if !in_bounds {
                    return Err(corrupt(format!("free work {seq}: {work:?}")));
                }
                Ok(Record::Free(seq, work))
            }
        }
    }

    /// A record's map key and value, as `flush` writes them (every deadlist pointer written:
    /// for tools, the fuzz cases and tests).
    pub fn encode_record(record: &Record) -> (RecordKey, Vec<u8>) {
        match record {
            Record::Snapshot(snapshot) => (
                RecordKey::Snapshot(snapshot.info.id),
                encode_value(&SnapshotPhys {
                    info: snapshot.info.clone(),
                    deadlist: snapshot.deadlist.to_phys(),
                    guid: snapshot.info.guid,
                }),
            ),
            Record::Head(id, deadlist) => (RecordKey::Head(*id), encode_value(&deadlist.to_phys())),
            Record::Free(seq, work) => (RecordKey::Free(*seq), encode_value(work)),
            Record::TreeFree(seq, work) => (RecordKey::TreeFree(*seq), encode_value(work)),
            Record::Bookmark(bookmark) => (
                RecordKey::Bookmark(bookmark.id),
                encode_value(&BookmarkPhys {
                    bookmark: bookmark.clone(),
                    guid: bookmark.guid,
                }),
            ),
            Record::Origin(id, snapshot_id) => (
                RecordKey::Origin(*id),
                encode_value(&OriginPhys {
                    snapshot_id: *snapshot_id,
                }),
            ),
        }
    }

    /// The snapshots of a dataset, oldest first.
    pub fn snapshots_of(&self, dataset_id: u64) -> impl DoubleEndedIterator<Item = &Snapshot> {
        self.by_dataset
            .range((dataset_id, 0)..=(dataset_id, u64::MAX))
            .map(|(_, id)| &self.snapshots[id])
    }

    /// Every snapshot, by id.
    pub fn all(&self) -> impl Iterator<Item = &Snapshot> {
        self.snapshots.values()
    }

    pub fn len(&self) -> usize {
        self.snapshots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.snapshots.is_empty()
    }

    pub fn get(&self, id: u64) -> Option<&Snapshot> {
        self.snapshots.get(&id)
    }

    /// A dataset's snapshot by its name (the part after '@').
    pub fn find(&self, dataset_id: u64, name: &str) -> Option<&Snapshot> {
        // The key is owned: a borrowed (u64, &str) cannot look up a (u64, String) key.
        self.by_name
            .get(&(dataset_id, name.to_string()))
            .map(|id| &self.snapshots[id])
    }

    /// The txg of the dataset's newest snapshot (0: none): what its object set keeps blocks
    /// for (`ObjectSet::set_prev_snap_txg`).
    pub fn prev_snap_txg(&self, dataset_id: u64) -> u64 {
        self.newest(dataset_id)
            .map_or(self.floor_txg(dataset_id), |snapshot| {
                snapshot.info.created_txg
            })
    }

    /// Every deadlist of a dataset: its snapshots' and its head's.
    pub(crate) fn lists_of(&self, dataset_id: u64) -> impl Iterator<Item = &Deadlist> {
        self.snapshots_of(dataset_id)
            .map(|snapshot| &snapshot.deadlist)
            .chain(self.heads.get(&dataset_id))
    }

    pub fn newest(&self, dataset_id: u64) -> Option<&Snapshot> {
        self.snapshots_of(dataset_id).next_back()
    }

    /// The key a block born in `birth_txg` is counted under in the dataset's deadlists: the
    /// txg of its newest snapshot taken before that birth, 0 if none.
    /// For a clone, a birth by its origin's txg is keyed as the origin's dataset keys it (and
    /// so on up a chain of clones), so keys stay right when a promote moves those snapshots.
    pub fn key_of(&self, dataset_id: u64, birth_txg: u64) -> u64 {
        let mut dataset = dataset_id;
        for _ in 0..ORIGIN_CHAIN_MAX {
            if let Some((&(_, txg), _)) = self
                .by_dataset
                .range((dataset, 0)..(dataset, birth_txg))
                .next_back()
            {
                return txg;
            }
            match self.origin_of(dataset) {
                Some(origin) if origin.info.created_txg < birth_txg => {
                    return origin.info.created_txg;
                }
                Some(origin) => dataset = origin.info.dataset_id,
                None => return 0,
            }
        }
        unreachable!("a chain of origins checked loop-free at load and at every change")
    }

    /// The head's deadlist (empty if it has none).
    pub fn head_deadlist(&self, dataset_id: u64) -> Option<&Deadlist> {
        self.heads.get(&dataset_id)
    }

    /// Takes a snapshot of a head whose object set has synced in `new.txg` (see the module
    /// doc): the name must be new for the dataset and the txg newer than its snapshots.
    pub fn create(&mut self, new: NewSnapshot) -> Result<&Snapshot, DatasetError> {
        if self.find(new.dataset_id, &new.name).is_some() {
            return Err(DatasetError::Exists(format!("@{}", new.name)));
        }
        let (prev_txg, prev_referenced) = self
            .newest(new.dataset_id)
            .or_else(|| self.origin_of(new.dataset_id))
            .map_or((0, 0), |prev| {
                (prev.info.created_txg, prev.info.referenced_bytes)
            });
        assert!(
            prev_txg < new.txg,
            "a snapshot in txg {} not after the dataset's newest",
            new.txg
        );
        assert!(
            new.objset_bp.birth_txg <= new.txg,
            "a snapshot of a root born after its txg"
        );
        let deadlist = self.heads.remove(&new.dataset_id).unwrap_or_default();
        let written_bytes = (new.referenced_bytes + deadlist.space().allocated_bytes)
            .checked_sub(prev_referenced)
            .expect("a snapshot references what its predecessor did, less what died since");
        let info = SnapshotInfo {
            id: new.id,
            dataset_id: new.dataset_id,
            name: new.name,
            created_txg: new.txg,
            creation_ms: new.creation_ms,
            objset_bp: new.objset_bp.to_bytes().to_vec(),
            referenced_bytes: new.referenced_bytes,
            unique_bytes: 0,
            written_bytes,
            holds: BTreeMap::new(),
            clones: Vec::new(),
            defer_destroy: false,
            guid: new.guid,
        };
        self.by_dataset.insert((new.dataset_id, new.txg), new.id);
        self.index_snapshot(new.dataset_id, &info.name, new.id);
        self.dirty.insert(RecordKey::Snapshot(new.id));
        // The head's record goes: its deadlist now belongs to the snapshot.
        self.dirty.insert(RecordKey::Head(new.dataset_id));
        let snapshot = Snapshot { info, deadlist };
        Ok(self.snapshots.entry(new.id).or_insert(snapshot))
    }

    /// Blocks the head of `dataset_id` stopped referencing that a snapshot still references
    /// (`SyncedObjset::dead_blocks`): onto its deadlist; those born after the newest
    /// snapshot's predecessor were the newest snapshot's alone, which its `used` now counts.
    pub fn kill(&mut self, dataset_id: u64, blocks: &[BlockPointer]) {
        if blocks.is_empty() {
            return;
        }
        let newest: Vec<(u64, u64)> = self
            .snapshots_of(dataset_id)
            .rev()
            .take(2)
            .map(|snapshot| (snapshot.info.id, snapshot.info.created_txg))
            .collect();
        let floor_txg = self.floor_txg(dataset_id);
        // A clone without snapshots of its own keeps blocks for its origin only: no snapshot
        // of its own holds them alone.
        let newest_id = newest.first().map(|&(id, _)| id);
        let prev_snap_txg = newest.first().map_or(floor_txg, |&(_, txg)| txg);
        assert!(
            prev_snap_txg > 0,
            "blocks kept for a snapshot of a dataset that has none"
        );
        let before_newest_txg = newest.get(1).map_or(floor_txg, |&(_, txg)| txg);
        let keyed: Vec<(u64, BlockPointer)> = blocks
            .iter()
            .map(|bp| {
                assert!(
                    bp.birth_txg <= prev_snap_txg,
                    "a block born in txg {} kept for a snapshot of txg {prev_snap_txg}",
                    bp.birth_txg
                );
                (self.key_of(dataset_id, bp.birth_txg), *bp)
            })
            .collect();
        let mut unique = 0;
        let deadlist = self.heads.entry(dataset_id).or_default();
        for (key, bp) in keyed {
            deadlist.insert(key, bp);
            if bp.birth_txg > before_newest_txg {
                unique += bp.allocated_bytes();
            }
        }
        self.dirty.insert(RecordKey::Head(dataset_id));
        if let Some(newest_id) = newest_id
            && unique > 0
        {
            let newest = self.snapshots.get_mut(&newest_id).expect("found above");
            newest.info.unique_bytes += unique;
            self.dirty.insert(RecordKey::Snapshot(newest_id));
        }
    }

    /// `usedbysnapshots`: bytes held only by the dataset's snapshots.
    /// For a clone, only blocks born after its origin count: the origin holds the others.
    pub fn used_by_snapshots(&self, dataset_id: u64) -> u64 {
        let floor = self.floor_txg(dataset_id);
        self.lists_of(dataset_id)
            .map(|list| list.space_range(floor, u64::MAX).allocated_bytes)
            .sum()
    }

    /// `written` of the head: what it references that its newest snapshot does not (all it
    /// references when it has none).
    /// A clone without snapshots: what it references that its origin does not.
    pub fn head_written(&self, dataset_id: u64, head_referenced_bytes: u64) -> u64 {
        match self
            .newest(dataset_id)
            .or_else(|| self.origin_of(dataset_id))
        {
            None => head_referenced_bytes,
            Some(newest) => self.head_written_since(dataset_id, newest, head_referenced_bytes),
        }
    }

    /// `written@snap` of the head: what it references that `since` (one of its snapshots, or
    /// a clone's origin) does not.
    pub fn head_written_since(
        &self,
        dataset_id: u64,
        since: &Snapshot,
        head_referenced_bytes: u64,
    ) -> u64 {
        let since_txg = since.info.created_txg;
        let mut died = self
            .heads
            .get(&dataset_id)
            .map_or(DeadSpace::default(), |head| head.space_range(0, since_txg));
        for later in self
            .by_dataset
            .range((dataset_id, since_txg + 1)..=(dataset_id, u64::MAX))
        {
            died.add(self.snapshots[later.1].deadlist.space_range(0, since_txg));
        }
        (head_referenced_bytes + died.allocated_bytes).saturating_sub(since.info.referenced_bytes)
    }

    /// The records changed since the last flush, each with its value (`None`: remove it),
    /// after the deadlists' pending pointers are written into `mos` in `txg` (sync context;
    /// `new_object` numbers a deadlist's first object).
    pub fn flush(
        &mut self,
        mos: &cairn_object::ObjectSet,
        txg: u64,
        new_object: &mut dyn FnMut() -> u64,
    ) -> Result<Vec<RecordChange>, DatasetError> {
        let mut out = Vec::new();
        self.open_free = None;
        let dirty = std::mem::take(&mut self.dirty);
        // What changed stays known to the next figure refresh (`changed_snapshot_bytes`).
        self.figures.note_flushed(&dirty);
        for key in dirty {
            let value = match key {
                RecordKey::Snapshot(id) => match self.snapshots.get_mut(&id) {
                    None => None,
                    Some(snapshot) => {
                        snapshot.deadlist.write(mos, txg, &mut *new_object)?;
                        let phys = SnapshotPhys {
                            info: snapshot.info.clone(),
                            deadlist: snapshot.deadlist.to_phys(),
                            guid: snapshot.info.guid,
                        };
                        Some(encode_value(&phys))
                    }
                },
                RecordKey::Head(id) => match self.heads.get_mut(&id) {
                    None => None,
                    Some(deadlist) => {
                        deadlist.write(mos, txg, &mut *new_object)?;
                        Some(encode_value(&deadlist.to_phys()))
                    }
                },
                RecordKey::Free(seq) => self.free_queue.get(&seq).map(encode_value),
                RecordKey::TreeFree(seq) => self.tree_frees.get(&seq).map(encode_value),
                RecordKey::Bookmark(id) => self.bookmarks.get(&id).map(|bookmark| {
                    encode_value(&BookmarkPhys {
                        bookmark: bookmark.clone(),
                        guid: bookmark.guid,
                    })
                }),
                RecordKey::Origin(id) => self
                    .origins
                    .get(&id)
                    .map(|&snapshot_id| encode_value(&OriginPhys { snapshot_id })),
            };
            out.push((key, value));
        }
        Ok(out)
    }

    /// Destroys snapshot `name` of dataset `dataset_id` (see the module doc): its blocks that
    /// no other snapshot or the head references are freed (the pending ones now, the rest in
    /// the background), its deadlist joins its successor's, and its neighbours' figures are
    /// recomputed as sums.
    pub fn destroy(&mut self, dataset_id: u64, name: &str) -> Result<Destroyed, DatasetError> {
        let snapshot = self
            .find(dataset_id, name)
            .ok_or_else(|| DatasetError::NoSuchDataset(format!("@{name}")))?;
        let (id, txg) = (snapshot.info.id, snapshot.info.created_txg);
        if let Some(&clone) = self.clones_of(id).first() {
            return Err(DatasetError::HasDependents {
                name: format!("@{name}"),
                what: format!("clones (dataset {clone})"),
            });
        }
        let (prev_id, prev_txg) = self.neighbour(dataset_id, txg, false);
        let (next_id, _) = self.neighbour(dataset_id, txg, true);
        let gone = self.snapshots.remove(&id).expect("found above");
        self.by_dataset.remove(&(dataset_id, txg));
        self.unindex_snapshot(dataset_id, name);
        self.dirty.insert(RecordKey::Snapshot(id));
        // The successor's list: blocks born after the predecessor and by this snapshot were
        // this snapshot's alone.
        let next_list = match next_id {
            Some(next) => &mut self.snapshot_mut(next).deadlist,
            None => self.heads.entry(dataset_id).or_default(),
        };
        let freed = next_list.space_range(prev_txg, txg);
        let (free_now, scans) = next_list.exclude(prev_txg, txg);
        next_list.merge(gone.deadlist);
        let free_now_bytes: u64 = free_now.iter().map(BlockPointer::allocated_bytes).sum();
        let (mut queued_free, mut free_objects) = (None, Vec::new());
        if !scans.is_empty() && freed.allocated_bytes > free_now_bytes {
            let bytes = freed.allocated_bytes - free_now_bytes;
            queued_free = Some((self.queue_free(scans, bytes), bytes));
        } else {
            // Nothing written to free: the scans are not queued, but a part they left dead
            // still goes once the scans queued before have read it.
            let dead = scans.iter().filter(|scan| scan.free_part);
            free_objects = self.retire_parts(dead.map(|scan| scan.object));
        }
        match next_id {
            Some(next) => {
                self.dirty.insert(RecordKey::Snapshot(next));
                self.refresh_neighbour_figures(dataset_id, next, prev_txg);
            }
            None => {
                self.dirty.insert(RecordKey::Head(dataset_id));
            }
        }
        if let Some(prev) = prev_id {
            self.dirty.insert(RecordKey::Snapshot(prev));
            let before_prev = self.neighbour(dataset_id, prev_txg, false).1;
            let successor_list = match next_id {
                Some(next) => &self.snapshots[&next].deadlist,
                None => &self.heads[&dataset_id],
            };
            let unique = successor_list
                .space_range(before_prev, prev_txg)
                .allocated_bytes;
            self.snapshot_mut(prev).info.unique_bytes = unique;
        }
        // The head's keys of the gone interval join the one before.
        if let Some(head) = self.heads.get_mut(&dataset_id) {
            head.merge_key(txg, prev_txg);
        }
        Ok(Destroyed {
            free_now,
            prev_snap_txg: next_id.is_none().then_some(prev_txg),
            freed,
            queued_free,
            free_objects,
        })
    }

    /// The snapshot of `dataset_id` just before (or after, `later`) txg `txg`: its id and txg
    /// (none and the floor before the first — 0, or a clone's origin txg, the origin being
    /// no snapshot of this dataset; none and `u64::MAX` after the last, the head).
    pub(crate) fn neighbour(&self, dataset_id: u64, txg: u64, later: bool) -> (Option<u64>, u64) {
        let found = if later {
            self.by_dataset
                .range((dataset_id, txg + 1)..=(dataset_id, u64::MAX))
                .next()
        } else {
            self.by_dataset
                .range((dataset_id, 0)..(dataset_id, txg))
                .next_back()
        };
        match found {
            Some((&(_, txg), &id)) => (Some(id), txg),
            None if later => (None, u64::MAX),
            None => (None, self.floor_txg(dataset_id)),
        }
    }

    pub(crate) fn snapshot_mut(&mut self, id: u64) -> &mut Snapshot {
        self.snapshots
            .get_mut(&id)
            .expect("a snapshot of the table's own indexes")
    }

    /// Recomputes `used` and `written` of snapshot `id` after its predecessor changed to
    /// the snapshot of txg `prev_txg`.
    fn refresh_neighbour_figures(&mut self, dataset_id: u64, id: u64, prev_txg: u64) {
        let txg = self.snapshots[&id].info.created_txg;
        let (next_id, _) = self.neighbour(dataset_id, txg, true);
        let successor = match next_id {
            Some(next) => Some(&self.snapshots[&next].deadlist),
            None => self.heads.get(&dataset_id),
        };
        let unique = successor.map_or(0, |list| list.space_range(prev_txg, txg).allocated_bytes);
        let prev_referenced = self
            .by_dataset
            .get(&(dataset_id, prev_txg))
            .and_then(|prev| self.snapshots.get(prev))
            .or_else(|| self.origin_of(dataset_id))
            .filter(|prev| prev.info.created_txg == prev_txg)
            .map_or(0, |prev| prev.info.referenced_bytes);
        let snapshot = self.snapshot_mut(id);
        snapshot.info.unique_bytes = unique;
        snapshot.info.written_bytes = (snapshot.info.referenced_bytes
            + snapshot.deadlist.space().allocated_bytes)
            .saturating_sub(prev_referenced);
    }

    /// The head of `dataset_id` rolled back to its newest snapshot (the engine swapped its
    /// tree): its deadlist goes (the head references those blocks again) and the newest
    /// snapshot holds nothing alone any more. Returns the deadlist's objects no background
    /// free still reads, for the caller to free.
    pub fn rollback(&mut self, dataset_id: u64) -> Vec<u64> {
        if let Some(newest) = self.newest(dataset_id).map(|s| s.info.id) {
            self.snapshot_mut(newest).info.unique_bytes = 0;
            self.dirty.insert(RecordKey::Snapshot(newest));
        }
        self.forget_head(dataset_id)
    }

    /// A dataset without snapshots is destroyed: its head's record goes (every block its
    /// deadlist still listed was freed with the last snapshot). Returns the deadlist's objects
    /// no background free still reads, for the caller to free; the others are freed by the
    /// last scan that reads them (`retire_parts`).
    pub fn forget_head(&mut self, dataset_id: u64) -> Vec<u64> {
        let Some(head) = self.heads.remove(&dataset_id) else {
            return Vec::new();
        };
        self.dirty.insert(RecordKey::Head(dataset_id));
        self.retire_parts(head.objects().collect::<Vec<_>>())
    }

    /// Places user hold `tag` on snapshot `name` of `dataset_id` at `now_ms`: a held snapshot
    /// cannot be destroyed (`destroy -d` defers it). A tag is placed once per snapshot.
    pub fn hold(
        &mut self,
        dataset_id: u64,
        name: &str,
        tag: &str,
        now_ms: u64,
    ) -> Result<(), DatasetError> {
        let id = self.id_of(dataset_id, name)?;
        let snapshot = self.snapshot_mut(id);
        if snapshot.info.holds.contains_key(tag) {
            return Err(DatasetError::Exists(format!("hold '{tag}' on @{name}")));
        }
        snapshot.info.holds.insert(tag.to_string(), now_ms);
        self.dirty.insert(RecordKey::Snapshot(id));
        Ok(())
    }

    /// Releases hold `tag`; true if the snapshot is now due for destroy (`destroy -d` asked
    /// for it and this was its last hold): the caller destroys it in the same txg.
    pub fn release(
        &mut self,
        dataset_id: u64,
        name: &str,
        tag: &str,
    ) -> Result<bool, DatasetError> {
        let id = self.id_of(dataset_id, name)?;
        let snapshot = self.snapshot_mut(id);
        if snapshot.info.holds.remove(tag).is_none() {
            return Err(DatasetError::NoSuchDataset(format!(
                "hold '{tag}' on @{name}"
            )));
        }
        let due = snapshot.info.holds.is_empty() && snapshot.info.defer_destroy;
        self.dirty.insert(RecordKey::Snapshot(id));
        Ok(due)
    }

    /// Marks a held snapshot for destroy once its last hold is released (`destroy -d`).
    pub fn defer_destroy(&mut self, dataset_id: u64, name: &str) -> Result<(), DatasetError> {
        let id = self.id_of(dataset_id, name)?;
        self.snapshot_mut(id).info.defer_destroy = true;
        self.dirty.insert(RecordKey::Snapshot(id));
        Ok(())
    }

    fn id_of(&self, dataset_id: u64, name: &str) -> Result<u64, DatasetError> {
        self.find(dataset_id, name)
            .map(|snapshot| snapshot.info.id)
            .ok_or_else(|| DatasetError::NoSuchDataset(format!("@{name}")))
    }

    /// Whether a flush has anything to write.
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }
}

fn encode_value(value: &impl Serialize) -> Vec<u8> {
    let mut out = vec![SNAPSHOT_RECORD_VERSION];
    out.extend(postcard::to_stdvec(value).expect("records serialise"));
    out
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
