//! Record maps: the pool's tables of small records in the MOS — the dataset directory (its
//! object 1) and the snapshot table (its object 2) — each a hashed map (`cairn_object::map`) whose keys
//! name records and whose values are the records' bytes, so that a txg rewrites the leaves of
//! the records it changed and never a whole table.
//!
//! A value too large for a map entry (`VALUE_BYTES_MAX`: a deadlist with many intervals, a
//! dataset with long property values) goes into a blob object of its own, and the entry holds
//! its number (an indirect value, u64 little-endian). A changed value reuses its blob; a value
//! that shrinks below the limit, or a removed record, frees it.
//!
//! The caller owns what the keys and values mean (`cairn-dataset` decodes them); this module
//! only stores and reads them, in the txg it is given, from the sync thread (which is what
//! makes `next_dynamic_object` safe: nothing else creates MOS objects meanwhile).
//! Uses nothing of the engine but its error type.

use crate::EngineError;
use cairn_dataset::DatasetError;
use cairn_format::ObjectType;
use cairn_object::ObjectSet;
use cairn_object::map::{HashedMap, MAP_BLOCK_BYTES, MapTx, VALUE_BYTES_MAX, ValueKind};

/// Capacity a record map's object is created with, in blocks: the direct pointers only; the
/// tree grows a level as the map does.
const MAP_CAPACITY_BLOCKS: u64 = 1;
/// Lowest MOS object number handed to deadlists and large records (the fixed objects sit
/// below it).
const FIRST_DYNAMIC_OBJECT: u64 = 64;

/// The next free MOS object number for a deadlist part or a large record, in sync context.
pub(crate) fn next_dynamic_object(mos: &ObjectSet) -> u64 {
    // Sync context, one thread: the bound includes every object created so far.
    mos.object_id_bound().max(FIRST_DYNAMIC_OBJECT)
}

/// MOS object numbers freed, given again before any past the bound: a new number past the
/// bound starts a dnode block of its own (the bound is rounded up to whole blocks), and a
/// block whose dnodes are all free still takes its space, so a pool that creates and frees
/// objects for ever (a deadlist part or two per snapshot destroyed, in a rolling window of
/// snapshots) grew its MOS by a dnode block per object. A number is given again only from
/// the txg after the one that freed it, when the free has synced. Kept in memory: an import
/// finds the free numbers below the bound again (`of_mos`), so a pool reopened often does
/// not grow by what it had freed each time.
#[derive(Debug, Default)]
pub(crate) struct MosObjectNumbers {
    /// Object → the txg that freed it.
    freed: std::collections::BTreeMap<u64, u64>,
}

impl MosObjectNumbers {
    /// The free dynamic object numbers below `mos`'s bound, ready to give (at import: one
    /// dnode lookup per object number, as `pool check` does, on dnode blocks the import
    /// reads anyway for the tables).
    pub(crate) fn of_mos(mos: &ObjectSet) -> MosObjectNumbers {
        let freed = (FIRST_DYNAMIC_OBJECT..mos.object_id_bound())
            .filter(|&object| mos.dnode(object).is_ok_and(|dnode| dnode.is_free()))
            .map(|object| (object, 0))
            .collect();
        MosObjectNumbers { freed }
    }

    /// Object `object` of the MOS was freed in `txg`.
    pub(crate) fn freed(&mut self, object: u64, txg: u64) {
        if object >= FIRST_DYNAMIC_OBJECT {
            self.freed.insert(object, txg);
        }
    }

    /// A number for a new object of `mos` in `txg` (sync context): the lowest freed before
    /// `txg` whose dnode is still free, else `next_dynamic_object`.
    pub(crate) fn take(&mut self, mos: &ObjectSet, txg: u64) -> u64 {
        let ready: Vec<u64> = self
            .freed
            .iter()
            .filter(|&(_, &freed_txg)| freed_txg < txg)
            .map(|(&object, _)| object)
            .take(8)
            .collect();
        for object in ready {
            self.freed.remove(&object);
            // Created again since by a number given explicitly: not free any more.
            if mos.dnode(object).is_ok_and(|dnode| dnode.is_free()) {
                return object;
            }
        }
        next_dynamic_object(mos)
    }
}

/// Every (key, value) of a record map.
pub(crate) type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// One record map of the MOS.
pub(crate) struct RecordMap {
    /// Its MOS object.
    pub(crate) object: u64,
    /// The map object's type.
    pub(crate) map_type: ObjectType,
    /// The type of the blob objects of its large values.
    pub(crate) blob_type: ObjectType,
    /// What it is, for errors ("dataset directory").
    pub(crate) what: &'static str,
}

impl RecordMap {
    /// Writes (`Some` value) or removes (`None`) each record in `txg`, creating the map
    /// (salted with `salt`) if the pool has none yet. `new_object` numbers new blob objects.
    pub(crate) fn write(
        &self,
        mos: &ObjectSet,
        salt: u64,
        txg: u64,
        changes: impl IntoIterator<Item = ([u8; 9], Option<Vec<u8>>)>,
        new_object: &mut dyn FnMut() -> u64,
    ) -> Result<(), EngineError> {
        let map = self.open_or_create(mos, salt, txg)?;
        let tx = MapTx::syncing(txg);
        let map_error = |err| self.map_error(err);
        let (removals, writes): (Vec<_>, Vec<_>) =
            changes.into_iter().partition(|(_, value)| value.is_none());
        // Removals all at once, each leaf rewritten once (a range destroy removes 10,000
        // snapshot records in one txg); each removed entry tells whether it had a blob.
        let names: Vec<&[u8]> = removals.iter().map(|(key, _)| key.as_slice()).collect();
        for entry in map
            .remove_many(tx, &names)
            .map_err(map_error)?
            .into_iter()
            .flatten()
        {
            if entry.kind == ValueKind::Indirect {
                mos.free_object(txg, self.blob_object(&entry.value)?);
            }
        }
        for (key, value) in writes {
            let Some(value) = value else {
                continue;
            };
            let old = map.get(&key).map_err(map_error)?;
            let old_blob = old
                .as_ref()
                .filter(|entry| entry.kind == ValueKind::Indirect)
                .map(|entry| self.blob_object(&entry.value))
                .transpose()?;
            let (stored, kind) = if value.len() > VALUE_BYTES_MAX {
                let object = old_blob.unwrap_or_else(&mut *new_object);
                mos.write_blob(txg, object, self.blob_type, &value)?;
                (object.to_le_bytes().to_vec(), ValueKind::Indirect)
            } else {
                if let Some(object) = old_blob {
                    mos.free_object(txg, object);
                }
                (value, ValueKind::Inline)
            };
            if old.is_some() {
                map.set_value_as(tx, &key, &stored, kind)
            } else {
                map.insert_as(tx, &key, &stored, kind).map(|_| ())
            }
            .map_err(map_error)?;
        }
        Ok(())
    }

    /// The map, created in `txg` if the pool has none yet.
    fn open_or_create<'a>(
        &self,
        mos: &'a ObjectSet,
        salt: u64,
        txg: u64,
    ) -> Result<HashedMap<'a>, EngineError> {
        let map = HashedMap::new(mos, self.object);
        if mos.dnode(self.object)?.is_free() {
            mos.create_object(
                txg,
                self.object,
                self.map_type,
                MAP_BLOCK_BYTES,
                MAP_CAPACITY_BLOCKS,
            );
            map.create(MapTx::syncing(txg), salt)
                .map_err(|err| self.map_error(err))?;
        }
        Ok(map)
    }

    /// Every record (key, value) of the map, large values read from their blobs; `None` if
    /// the pool has no such map.
    pub(crate) fn read_all(&self, mos: &ObjectSet) -> Result<Option<Records>, EngineError> {
        if mos.dnode(self.object)?.is_free() {
            return Ok(None);
        }
        let map = HashedMap::new(mos, self.object);
        let mut entries = Vec::new();
        map.for_each_from(0, |entry| {
            entries.push(entry.clone());
            true
        })
        .map_err(|err| self.map_error(err))?;
        let mut records = Vec::with_capacity(entries.len());
        for entry in entries {
            let value = match entry.kind {
                ValueKind::Inline => entry.value,
                ValueKind::Indirect => {
                    let object = self.blob_object(&entry.value)?;
                    mos.read_blob(object)?.ok_or_else(|| {
                        EngineError::from(DatasetError::Corrupt(format!(
                            "{}: record object {object} does not exist",
                            self.what
                        )))
                    })?
                }
            };
            records.push((entry.name, value));
        }
        Ok(Some(records))
    }

    /// The object number an indirect value holds.
    fn blob_object(&self, value: &[u8]) -> Result<u64, EngineError> {
        <[u8; 8]>::try_from(value)
            .map(u64::from_le_bytes)
            .map_err(|_| {
                DatasetError::Corrupt(format!(
                    "{}: an indirect value of {} bytes",
                    self.what,
                    value.len()
                ))
                .into()
            })
    }

    /// A read that failed stays an I/O error; anything else the map refuses means the table
    /// is damaged.
    fn map_error(&self, err: cairn_object::map::MapError) -> EngineError {
        match err {
            cairn_object::map::MapError::Object(source) => source.into(),
            other => DatasetError::Corrupt(format!("{}: {other}", self.what)).into(),
        }
    }
}
