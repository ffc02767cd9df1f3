//! `cairn receive`: a full send stream (`cairn_format::send_stream`) becomes a new dataset
//! with the sent snapshot.
//!
//! How: the dataset is created empty (an object set with no object: the stream brings every
//! object, a filesystem's master node included), each verified record is applied to it at the
//! object level in the open txg, joined through the write throttle (`TxgEngine::throttle`)
//! like any writer, so a large stream runs as many bounded txgs, never one giant one. At END,
//! whose checksum covers the whole stream, the snapshot the stream names is taken.
//!
//! Failure: a record that fails its checksum, a stream cut short, a record that does not fit
//! what came before, or a write error stops the receive and destroys the dataset: the pool is
//! left as it was. What is not done yet (see docs/send-receive.md): the dataset is visible
//! while it is received (ZFS hides it until END), a receive killed mid-stream leaves it behind
//! for the user to destroy, and incremental streams are refused.

use crate::EngineError;
use crate::pool::Pool;
use bytes::Bytes;
use cairn_dataset::DatasetKind;
use cairn_dataset::directory::{Provisioning, creation_properties, volume_creation_properties};
use cairn_format::send_stream::{StreamKind, StreamReader, StreamRecord};
use cairn_object::ObjectSet;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

/// How a receive may treat its target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// `-F`: roll the target back to the stream's source first (incremental streams).
    pub force: bool,
}

/// What a receive made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveSummary {
    /// `dataset@snapshot`.
    pub snapshot: String,
    pub bytes_read: u64,
    pub objects: u64,
    pub blocks_written: u64,
}

impl Pool {
    /// Receives the stream on `input` into `target` (`pool/name`, which must not exist): see
    /// the module doc.
    pub fn receive(
        &self,
        target: &str,
        input: &mut dyn Read,
        options: ReceiveOptions,
    ) -> Result<ReceiveSummary, EngineError> {
        let _ = options;
        let mut reader = StreamReader::new(input).map_err(refused)?;
        let header = reader.header().clone();
        if header.is_incremental() {
            return Err(EngineError::Receive(format!(
                "the stream is incremental (from snapshot guid {:#018x}): receiving \
                 incremental streams is not done yet",
                header.from_guid
            )));
        }
        let kind = match header.kind {
            StreamKind::Volume => DatasetKind::Volume,
            StreamKind::Filesystem => DatasetKind::Filesystem,
        };
        self.check_new_dataset(target, kind)?;
        let properties = match kind {
            DatasetKind::Volume => volume_creation_properties(
                header.volsize_bytes,
                Provisioning::Sparse,
                &[("volblocksize".into(), header.block_size_bytes.to_string())],
            )?,
            DatasetKind::Filesystem => creation_properties(
                kind,
                &[("recordsize".into(), header.block_size_bytes.to_string())],
            )?,
        };
        let name = target.to_string();
        let objset_slot = Arc::new(parking_lot::Mutex::new(None));
        let slot = objset_slot.clone();
        self.run_sync_task(move |core, txg| {
            let objset = core.insert_dataset(&name, kind, txg, properties)?;
            core.objsets.lock().insert(name, objset.clone());
            *slot.lock() = Some(objset);
            Ok(())
        })?;
        let objset = objset_slot
            .lock()
            .take()
            .ok_or_else(|| EngineError::Receive("the dataset was not created".into()))?;
        match self.apply_stream(&mut reader, &objset) {
            Ok((snapshot, objects, blocks_written)) => {
                let full = format!("{target}@{snapshot}");
                if let Err(err) = self.snapshot(std::slice::from_ref(&full), false) {
                    self.abandon_receive(target);
                    return Err(err);
                }
                Ok(ReceiveSummary {
                    snapshot: full,
                    bytes_read: reader.offset_bytes(),
                    objects,
                    blocks_written,
                })
            }
            Err(err) => {
                self.abandon_receive(target);
                Err(err)
            }
        }
    }

    /// Destroys what a failed receive made. A failure here leaves the dataset for the user to
    /// destroy; the receive's own error is the one reported.
    fn abandon_receive(&self, target: &str) {
        let _ = self.destroy_dataset(target);
    }

    /// Applies every record up to END; returns the snapshot name END carries, the objects
    /// and the blocks written.
    fn apply_stream(
        &self,
        reader: &mut StreamReader<'_>,
        objset: &ObjectSet,
    ) -> Result<(String, u64, u64), EngineError> {
        let engine = self.txg_engine()?.clone();
        let mut apply = Apply {
            objset,
            objects: BTreeMap::new(),
            blocks_written: 0,
            volsize_bytes: (reader.header().kind == StreamKind::Volume)
                .then_some(reader.header().volsize_bytes),
        };
        loop {
            let Some(record) = reader.next_record().map_err(refused)? else {
                return Err(inconsistent(reader, "records after END".into()));
            };
            if let StreamRecord::End { snapshot, .. } = record {
                return Ok((snapshot, apply.objects.len() as u64, apply.blocks_written));
            }
            let dirty_bytes = match &record {
                StreamRecord::Write { data, .. } => data.len() as u64,
                _ => 512,
            };
            engine.throttle(dirty_bytes);
            let hold = engine.try_hold().map_err(EngineError::Txg)?;
            apply
                .record(hold.txg(), record)?
                .map_or(Ok(()), |what| Err(inconsistent(reader, what)))?;
        }
    }
}

fn inconsistent(reader: &StreamReader<'_>, what: String) -> EngineError {
    EngineError::Receive(format!(
        "the stream is inconsistent near byte {}: {what}",
        reader.offset_bytes()
    ))
}

/// A receive's object set and what the stream made in it so far.
struct Apply<'a> {
    objset: &'a ObjectSet,
    /// Every object the stream made: its block size, the number of blocks it may hold (what
    /// its tree reaches at the deepest level; a volume's size), the highest block written.
    objects: BTreeMap<u64, (u32, u64, Option<u64>)>,
    blocks_written: u64,
    /// A volume stream's size.
    volsize_bytes: Option<u64>,
}

impl Apply<'_> {
    /// Applies one record other than END in `txg`: `Ok(Some(why))` when it does not fit what
    /// came before.
    fn record(&mut self, txg: u64, record: StreamRecord) -> Result<Option<String>, EngineError> {
        let objset = self.objset;
        match record {
            StreamRecord::Object {
                object,
                object_type,
                block_size_bytes,
                bonus,
                ..
            } => {
                if self.objects.contains_key(&object) {
                    return Ok(Some(format!("object {object} sent twice")));
                }
                objset.create_object_with_bonus(
                    txg,
                    object,
                    object_type,
                    block_size_bytes,
                    bonus,
                )?;
                let reach = objset
                    .dnode(object)?
                    .capacity_blocks(cairn_format::blkptr::LEVEL_MAX + 1);
                let blocks = self.volsize_bytes.map_or(reach, |size| {
                    size.div_ceil(u64::from(block_size_bytes)).min(reach)
                });
                self.objects
                    .insert(object, (block_size_bytes, blocks, None));
            }
            StreamRecord::Write {
                object,
                offset_bytes,
                data,
            } => {
                let Some((block_bytes, blocks, max)) = self.objects.get_mut(&object) else {
                    return Ok(Some(format!("a WRITE to unknown object {object}")));
                };
                let block_bytes = u64::from(*block_bytes);
                let blkid = offset_bytes / block_bytes;
                if offset_bytes % block_bytes != 0
                    || data.len() as u64 != block_bytes
                    || blkid >= *blocks
                {
                    return Ok(Some(format!(
                        "a WRITE of {} bytes at {offset_bytes} into object {object} of {blocks} \
                         blocks of {block_bytes} bytes",
                        data.len()
                    )));
                }
                objset.write_block(txg, object, blkid, Bytes::from(data));
                *max = Some(max.map_or(blkid, |max| max.max(blkid)));
                self.blocks_written += 1;
            }
            StreamRecord::Free {
                object,
                offset_bytes,
                length_bytes,
            } => {
                let Some(&(block_bytes, _, max)) = self.objects.get(&object) else {
                    return Ok(Some(format!("a FREE of unknown object {object}")));
                };
                // A full stream frees only what it wrote itself (never, from `send`): bounded
                // by the highest block written, so a huge range costs nothing.
                let block_bytes = u64::from(block_bytes);
                let first = offset_bytes / block_bytes;
                let end = offset_bytes
                    .saturating_add(length_bytes)
                    .div_ceil(block_bytes);
                if let Some(max) = max {
                    for blkid in first..end.min(max + 1) {
                        objset.free_block(txg, object, blkid);
                    }
                }
            }
            StreamRecord::FreeObjects { first, count } => {
                let gone: Vec<u64> = self
                    .objects
                    .range(first..first.saturating_add(count))
                    .map(|(&object, _)| object)
                    .collect();
                for object in gone {
                    objset.free_object(txg, object);
                    self.objects.remove(&object);
                }
            }
            StreamRecord::End { .. } => {}
        }
        Ok(None)
    }
}

fn refused(err: cairn_format::send_stream::StreamError) -> EngineError {
    EngineError::Receive(err.to_string())
}
