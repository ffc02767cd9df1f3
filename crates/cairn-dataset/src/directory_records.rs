//! The dataset directory on disk: one record per map entry, so that a txg rewrites only the
//! records that changed (one dataset of 1,000, one new history entry), never the whole
//! directory. The engine keeps the records in a hashed map in the MOS (its layout:
//! docs/format.md, "Dataset directory"); this module says what the keys and values are, checks
//! each as it is read (`decode_record`), checks the whole when it is put together (`load`:
//! every dataset record validated as `insert` would have, names and ids unique, history
//! contiguous), and works out what a txg must write (`WrittenRecords::changes`).
//!
//! Keys are 9 bytes, a tag and a u64 big-endian: `d` + dataset id (a dataset's record: renames
//! rewrite one value, its key never changes), `p` + 0 (the pool-wide record: next id, leaf
//! error counters, resilver, missed txgs), `r` + 0 (the last scrub, absent if none), `c` +
//! sequence number (one history entry; the oldest are removed as new ones come, so at most
//! `HISTORY_ENTRIES_MAX` exist). A value is a version byte and a postcard body.
//!
//! Crash safety is the engine's: every change of a txg goes into the MOS of that txg, which
//! its uberblock commits whole or not at all. `WrittenRecords` only remembers what the MOS
//! already holds, so it must be told of a txg's records only when they are in it.
//!
//! `encode`/`decode` frame every record into one byte string: not a format the pool stores,
//! but one image of the directory for tests and the fuzz cases.

use crate::DatasetError;
use crate::directory::{
    DatasetDirectory, DatasetRecord, HISTORY_ENTRIES_MAX, LeafErrorRecord, MissedTxgsTable,
    ResilverRecord, ScrubRecord,
};
use cairn_format::blkptr::BLOCK_POINTER_SIZE;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Version byte that starts every directory record value.
pub const DIRECTORY_RECORD_VERSION: u8 = 1;

const DATASET_KEY_TAG: u8 = b'd';
const POOL_KEY_TAG: u8 = b'p';
const SCRUB_KEY_TAG: u8 = b'r';
const HISTORY_KEY_TAG: u8 = b'c';

/// Which directory record a map key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DirectoryKey {
    /// A dataset's record, by dataset id.
    Dataset(u64),
    /// The pool-wide record.
    Pool,
    /// The last scrub's result.
    Scrub,
    /// One history entry, by sequence number.
    History(u64),
}

impl DirectoryKey {
    /// The map key: a tag byte, then the id big-endian (0 for the single records).
    pub fn encode(self) -> [u8; 9] {
        let (tag, id) = match self {
            DirectoryKey::Dataset(id) => (DATASET_KEY_TAG, id),
            DirectoryKey::Pool => (POOL_KEY_TAG, 0),
            DirectoryKey::Scrub => (SCRUB_KEY_TAG, 0),
            DirectoryKey::History(seq) => (HISTORY_KEY_TAG, seq),
        };
        let mut key = [0u8; 9];
        key[0] = tag;
        key[1..].copy_from_slice(&id.to_be_bytes());
        key
    }

    pub fn decode(raw: &[u8]) -> Result<DirectoryKey, DatasetError> {
        let id = raw
            .get(1..)
            .and_then(|id| <[u8; 8]>::try_from(id).ok())
            .map(u64::from_be_bytes);
        match (raw.first(), id) {
            (Some(&DATASET_KEY_TAG), Some(id)) => Ok(DirectoryKey::Dataset(id)),
            (Some(&POOL_KEY_TAG), Some(0)) => Ok(DirectoryKey::Pool),
            (Some(&SCRUB_KEY_TAG), Some(0)) => Ok(DirectoryKey::Scrub),
            (Some(&HISTORY_KEY_TAG), Some(seq)) => Ok(DirectoryKey::History(seq)),
            _ => Err(DatasetError::Corrupt(format!(
                "directory: a key of {} bytes starting {:?}",
                raw.len(),
                raw.first()
            ))),
        }
    }
}

/// The pool-wide record's body (postcard: fields in this order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub next_id: u64,
    pub leaf_errors: BTreeMap<u64, LeafErrorRecord>,
    pub resilver: Option<ResilverRecord>,
    pub missed_txgs: MissedTxgsTable,
}

/// `PoolRecord` borrowed from a directory, for encoding without copies (same field order).
#[derive(Serialize)]
struct PoolRecordRef<'a> {
    next_id: u64,
    leaf_errors: &'a BTreeMap<u64, LeafErrorRecord>,
    resilver: &'a Option<ResilverRecord>,
    missed_txgs: &'a MissedTxgsTable,
}

/// One decoded record (`decode_record`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectoryRecord {
    Dataset(DatasetRecord),
    Pool(PoolRecord),
    Scrub(ScrubRecord),
    History(u64, String),
}

/// A record to write (`Some` value) or remove (`None`), as `WrittenRecords::changes` returns it.
pub type DirectoryChange = (DirectoryKey, Option<Vec<u8>>);

fn encode_value(body: &impl Serialize) -> Vec<u8> {
    let mut value = vec![DIRECTORY_RECORD_VERSION];
    // Postcard fails only on types it cannot size (none here) or a full buffer (a Vec grows).
    value.extend(postcard::to_stdvec(body).expect("directory records serialise"));
    value
}

impl DatasetDirectory {
    /// Decodes one map entry, checking what a later use relies on (the record's id agrees with
    /// its key, a root pointer of the right size); `load` checks the records together.
    pub fn decode_record(key: &[u8], value: &[u8]) -> Result<DirectoryRecord, DatasetError> {
        let key = DirectoryKey::decode(key)?;
        let corrupt = |what: String| DatasetError::Corrupt(format!("record {key:?}: {what}"));
        let (&version, body) = value
            .split_first()
            .ok_or_else(|| corrupt("empty value".into()))?;
        if version != DIRECTORY_RECORD_VERSION {
            return Err(corrupt(format!(
                "version {version} (this build reads {DIRECTORY_RECORD_VERSION})"
            )));
        }
        let body_error = |err: postcard::Error| corrupt(err.to_string());
        match key {
            DirectoryKey::Dataset(id) => {
                let record: DatasetRecord = postcard::from_bytes(body).map_err(body_error)?;
                if record.id != id || record.objset_bp.len() != BLOCK_POINTER_SIZE {
                    return Err(corrupt(format!(
                        "holds dataset {} ({}) with a root of {} bytes",
                        record.id,
                        record.name,
                        record.objset_bp.len()
                    )));
                }
                Ok(DirectoryRecord::Dataset(record))
            }
            DirectoryKey::Pool => Ok(DirectoryRecord::Pool(
                postcard::from_bytes(body).map_err(body_error)?,
            )),
            DirectoryKey::Scrub => Ok(DirectoryRecord::Scrub(
                postcard::from_bytes(body).map_err(body_error)?,
            )),
            DirectoryKey::History(seq) => Ok(DirectoryRecord::History(
                seq,
                postcard::from_bytes(body).map_err(body_error)?,
            )),
        }
    }

    /// A record's map key and value, as the engine writes them.
    pub fn encode_record(record: &DirectoryRecord) -> (DirectoryKey, Vec<u8>) {
        match record {
            DirectoryRecord::Dataset(record) => {
                (DirectoryKey::Dataset(record.id), encode_value(record))
            }
            DirectoryRecord::Pool(pool) => (DirectoryKey::Pool, encode_value(pool)),
            DirectoryRecord::Scrub(scrub) => (DirectoryKey::Scrub, encode_value(scrub)),
            DirectoryRecord::History(seq, entry) => {
                (DirectoryKey::History(*seq), encode_value(entry))
            }
        }
    }

    fn pool_value(&self) -> Vec<u8> {
        encode_value(&PoolRecordRef {
            next_id: self.next_id,
            leaf_errors: &self.leaf_errors,
            resilver: &self.resilver,
            missed_txgs: &self.missed_txgs,
        })
    }

    /// Puts a directory together from every record of its map, checking each record against
    /// the others: exactly one pool record, dataset names and ids unique and ids handed out
    /// (at most `next_id`), every dataset record valid as `insert` would have made it (its
    /// parent a filesystem, canonical properties, a volume's size), history entries
    /// contiguous and at most `HISTORY_ENTRIES_MAX`.
    pub fn load(
        records: impl IntoIterator<Item = DirectoryRecord>,
    ) -> Result<DatasetDirectory, DatasetError> {
        let mut directory = DatasetDirectory::default();
        let mut pool = None;
        let mut ids = BTreeSet::new();
        let mut history = BTreeMap::new();
        for record in records {
            match record {
                DirectoryRecord::Dataset(record) => {
                    if !ids.insert(record.id) || directory.datasets.contains_key(&record.name) {
                        return Err(DatasetError::Corrupt(format!(
                            "two records for dataset {} or id {}",
                            record.name, record.id
                        )));
                    }
                    directory.datasets.insert(record.name.clone(), record);
                }
                DirectoryRecord::Pool(record) => pool = Some(record),
                DirectoryRecord::Scrub(record) => directory.last_scrub = Some(record),
                DirectoryRecord::History(seq, entry) => {
                    history.insert(seq, entry);
                }
            }
        }
        let pool = pool.ok_or_else(|| DatasetError::Corrupt("no pool record".into()))?;
        pool.missed_txgs.validate()?;
        directory.next_id = pool.next_id;
        directory.leaf_errors = pool.leaf_errors;
        directory.resilver = pool.resilver;
        directory.missed_txgs = pool.missed_txgs;
        directory.set_history(history)?;
        if let Some(last) = ids.last().filter(|&&id| id > directory.next_id) {
            return Err(DatasetError::Corrupt(format!(
                "dataset id {last} was never handed out (next id {})",
                directory.next_id
            )));
        }
        for (name, record) in &directory.datasets {
            directory
                .validate_record(record)
                .map_err(|source| DatasetError::InvalidRecord {
                    dataset: name.clone(),
                    source: Box::new(source),
                })?;
        }
        Ok(directory)
    }

    /// The history from its entries by sequence number, which must follow each other.
    fn set_history(&mut self, entries: BTreeMap<u64, String>) -> Result<(), DatasetError> {
        let first = entries.keys().next().copied().unwrap_or(0);
        let contiguous = entries
            .keys()
            .enumerate()
            .all(|(index, &seq)| first.checked_add(index as u64) == Some(seq));
        if !contiguous || entries.len() > HISTORY_ENTRIES_MAX {
            return Err(DatasetError::Corrupt(format!(
                "{} history entries from {first}, not consecutive or too many (at most \
                 {HISTORY_ENTRIES_MAX})",
                entries.len()
            )));
        }
        self.history_start_seq = first;
        self.history = entries.into_values().collect();
        Ok(())
    }

    /// Every record of the directory, as the engine would write them to an empty map.
    pub fn records(&self) -> Vec<(DirectoryKey, Vec<u8>)> {
        WrittenRecords::default()
            .changes(self)
            .into_iter()
            .filter_map(|(key, value)| value.map(|value| (key, value)))
            .collect()
    }

    /// Every record framed into one byte string (see the module comment): per record, its
    /// 9-byte key, its value's length (u32 little-endian) and the value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, value) in self.records() {
            out.extend_from_slice(&key.encode());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(&value);
        }
        out
    }

    /// Reads what `encode` wrote, every record decoded and the whole loaded (`load`).
    pub fn decode(mut bytes: &[u8]) -> Result<DatasetDirectory, DatasetError> {
        let mut records = Vec::new();
        while !bytes.is_empty() {
            let truncated = || DatasetError::Corrupt("truncated directory image".into());
            let (key, rest) = bytes.split_at_checked(9).ok_or_else(truncated)?;
            let (len, rest) = rest.split_at_checked(4).ok_or_else(truncated)?;
            let len = u32::from_le_bytes(len.try_into().map_err(|_| truncated())?) as usize;
            let (value, rest) = rest.split_at_checked(len).ok_or_else(truncated)?;
            records.push(DatasetDirectory::decode_record(key, value)?);
            bytes = rest;
        }
        DatasetDirectory::load(records)
    }
}

/// What the MOS already holds of the directory, so that a txg writes only what changed.
#[derive(Debug, Default)]
pub struct WrittenRecords {
    /// Each dataset's value by id.
    datasets: BTreeMap<u64, Vec<u8>>,
    pool: Option<Vec<u8>>,
    scrub: Option<Vec<u8>>,
    /// The history entries' sequence numbers (entries never change once written).
    history: std::ops::Range<u64>,
}

impl WrittenRecords {
    /// What a directory just read from the MOS has there.
    pub fn of(directory: &DatasetDirectory) -> WrittenRecords {
        let mut written = WrittenRecords::default();
        written.changes(directory);
        written
    }

    /// The records to write and remove so the MOS holds `directory`, taken as written: the
    /// caller puts every one into the txg it is syncing. Each dataset record is encoded and
    /// compared with what was written; history entries are compared by number only.
    pub fn changes(&mut self, directory: &DatasetDirectory) -> Vec<DirectoryChange> {
        let mut changes = Vec::new();
        let mut live = BTreeSet::new();
        for record in directory.datasets.values() {
            live.insert(record.id);
            let value = encode_value(record);
            if self.datasets.get(&record.id) != Some(&value) {
                changes.push((DirectoryKey::Dataset(record.id), Some(value.clone())));
                self.datasets.insert(record.id, value);
            }
        }
        self.datasets.retain(|id, _| {
            let keep = live.contains(id);
            if !keep {
                changes.push((DirectoryKey::Dataset(*id), None));
            }
            keep
        });
        let pool = directory.pool_value();
        if self.pool.as_ref() != Some(&pool) {
            changes.push((DirectoryKey::Pool, Some(pool.clone())));
            self.pool = Some(pool);
        }
        let scrub = directory.last_scrub.as_ref().map(encode_value);
        if self.scrub != scrub {
            changes.push((DirectoryKey::Scrub, scrub.clone()));
            self.scrub = scrub;
        }
        let start = directory.history_start_seq;
        let now = start..start + directory.history.len() as u64;
        for seq in self.history.clone().filter(|seq| !now.contains(seq)) {
            changes.push((DirectoryKey::History(seq), None));
        }
        for (seq, entry) in now.clone().zip(&directory.history) {
            if !self.history.contains(&seq) {
                changes.push((DirectoryKey::History(seq), Some(encode_value(entry))));
            }
        }
        self.history = now;
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DatasetKind;

    fn directory(datasets: usize) -> DatasetDirectory {
        let mut dir = DatasetDirectory::default();
        dir.insert("tank", DatasetKind::Filesystem, 1, BTreeMap::new())
            .unwrap();
        for index in 0..datasets {
            dir.insert(
                &format!("tank/fs{index}"),
                DatasetKind::Filesystem,
                2,
                BTreeMap::new(),
            )
            .unwrap();
        }
        dir
    }

    fn keys(changes: &[DirectoryChange]) -> Vec<(DirectoryKey, bool)> {
        changes
            .iter()
            .map(|(key, value)| (*key, value.is_some()))
            .collect()
    }

    #[test]
    fn a_txg_writes_only_the_records_that_changed() {
        let mut dir = directory(1000);
        let mut written = WrittenRecords::of(&dir);
        assert!(written.changes(&dir).is_empty(), "nothing changed");

        let id = dir.get("tank/fs500").unwrap().id;
        dir.get_mut("tank/fs500").unwrap().used_bytes = 4096;
        assert_eq!(
            keys(&written.changes(&dir)),
            [(DirectoryKey::Dataset(id), true)]
        );

        dir.record_history("cairn snapshot tank@a".into());
        assert_eq!(
            keys(&written.changes(&dir)),
            [(DirectoryKey::History(0), true)]
        );

        let removed = dir.datasets.remove("tank/fs7").unwrap().id;
        dir.insert("tank/new", DatasetKind::Filesystem, 9, BTreeMap::new())
            .unwrap();
        let new_id = dir.get("tank/new").unwrap().id;
        assert_eq!(
            keys(&written.changes(&dir)),
            [
                (DirectoryKey::Dataset(new_id), true),
                (DirectoryKey::Dataset(removed), false),
                (DirectoryKey::Pool, true),
            ],
            "the new dataset, the destroyed one and the pool record (next id)"
        );
        dir.last_scrub = Some(ScrubRecord {
            start_txg: 5,
            started_ms: 1,
            finished_ms: 2,
            bytes_scanned: 3,
            blocks_scanned: 4,
            bad_copies: 0,
            repaired_copies: 0,
            repaired_bytes: 0,
            unrecoverable_blocks: 0,
            damaged: Vec::new(),
            canceled: false,
        });
        assert_eq!(keys(&written.changes(&dir)), [(DirectoryKey::Scrub, true)]);
        dir.last_scrub = None;
        assert_eq!(keys(&written.changes(&dir)), [(DirectoryKey::Scrub, false)]);
        assert!(written.changes(&dir).is_empty());
    }

    #[test]
    fn the_history_stays_bounded_one_record_in_one_out() {
        let mut dir = directory(1);
        let mut written = WrittenRecords::of(&dir);
        for index in 0..HISTORY_ENTRIES_MAX {
            dir.record_history(format!("command {index}"));
        }
        assert_eq!(written.changes(&dir).len(), HISTORY_ENTRIES_MAX);
        dir.record_history("one more".into());
        let last = HISTORY_ENTRIES_MAX as u64;
        assert_eq!(
            keys(&written.changes(&dir)),
            [
                (DirectoryKey::History(0), false),
                (DirectoryKey::History(last), true)
            ]
        );
        let again = DatasetDirectory::decode(&dir.encode()).unwrap();
        assert_eq!(again, dir);
        assert_eq!(again.history_start_seq, 1);
        assert_eq!(again.history.last().map(String::as_str), Some("one more"));
    }

    /// The records of `dir` with `edit` applied, loaded.
    fn load_edited(
        dir: &DatasetDirectory,
        edit: impl FnOnce(&mut Vec<DirectoryRecord>),
    ) -> Result<DatasetDirectory, DatasetError> {
        let mut records: Vec<DirectoryRecord> = dir
            .records()
            .into_iter()
            .map(|(key, value)| DatasetDirectory::decode_record(&key.encode(), &value).unwrap())
            .collect();
        edit(&mut records);
        DatasetDirectory::load(records)
    }

    #[test]
    fn records_that_disagree_are_refused() {
        let mut dir = directory(2);
        dir.record_history("a".into());
        dir.record_history("b".into());
        assert_eq!(load_edited(&dir, |_| {}).unwrap(), dir);

        let err = load_edited(&dir, |records| {
            records.retain(|record| !matches!(record, DirectoryRecord::Pool(_)));
        })
        .unwrap_err();
        assert!(err.to_string().contains("no pool record"), "{err}");

        let err = load_edited(&dir, |records| {
            records.retain(|record| !matches!(record, DirectoryRecord::History(0, _)));
            records.push(DirectoryRecord::History(5, "c".into()));
        })
        .unwrap_err();
        assert!(err.to_string().contains("history"), "{err}");

        let err = load_edited(&dir, |records| {
            for record in records.iter_mut() {
                if let DirectoryRecord::Dataset(record) = record
                    && record.name == "tank/fs1"
                {
                    record.id = 1_000;
                }
            }
        })
        .unwrap_err();
        assert!(err.to_string().contains("never handed out"), "{err}");

        let err = load_edited(&dir, |records| {
            for record in records.iter_mut() {
                if let DirectoryRecord::Dataset(record) = record
                    && record.name == "tank/fs1"
                {
                    record.name = "tank/fs0".into();
                    record.id = 1;
                }
            }
        })
        .unwrap_err();
        assert!(err.to_string().contains("two records"), "{err}");
    }

    #[test]
    fn damaged_values_give_errors_naming_the_record() {
        let dir = directory(1);
        let (key, value) = dir
            .records()
            .into_iter()
            .find(|(key, _)| matches!(key, DirectoryKey::Dataset(_)))
            .unwrap();
        let mut newer = value.clone();
        newer[0] = DIRECTORY_RECORD_VERSION + 1;
        let err = DatasetDirectory::decode_record(&key.encode(), &newer).unwrap_err();
        assert!(err.to_string().contains("version 2"), "{err}");
        let other = DirectoryKey::Dataset(77).encode();
        let err = DatasetDirectory::decode_record(&other, &value).unwrap_err();
        assert!(err.to_string().contains("Dataset(77)"), "{err}");
        let err = DatasetDirectory::decode_record(&key.encode(), &value[..5]).unwrap_err();
        assert!(err.to_string().contains("record Dataset"), "{err}");
        assert!(DatasetDirectory::decode_record(b"x", &value).is_err());
        assert!(DatasetDirectory::decode_record(&DirectoryKey::Pool.encode(), &[]).is_err());
    }
}
