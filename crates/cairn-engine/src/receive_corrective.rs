//! Corrective receive (`cairn receive -c POOL/DS@SNAP < stream`, as `zfs receive -c`): a
//! stream of a snapshot the pool already holds heals that snapshot's data blocks that no copy
//! can give back any more (damaged on every side of a mirror), from the stream's copy.
//!
//! What it does with each WRITE record (every other record is only verified, as a receive
//! verifies it): it finds the block the snapshot holds at that object and offset, puts the
//! record's bytes into the form that block is stored in (compressed with the block's codec
//! when it is compressed; a `send -c` record's bytes as they are when the codecs agree) and
//! compares them with the block pointer: same size and the very checksum, or the record is
//! counted as not matching and nothing is done with it. A matching block is then read from the
//! pool, every copy verified: if one copy is good the read itself rewrites the bad ones (a
//! mirror heals itself) and the record is skipped; only if no copy reads correctly are the
//! record's bytes written over every copy, and read back verified.
//!
//! Why in place, not at a new place: the block pointer (its addresses, its checksum) sits in
//! indirect blocks that are part of a snapshot, and often of later snapshots, clones and the
//! head too, all of them checksummed up to the uberblock; a new place would mean new
//! pointers all the way up through trees that are frozen. The bytes written are exactly the
//! ones the pointer says are there (checked against its checksum first), at addresses that
//! block holds allocated for as long as the snapshot exists (a synced tree is held while the
//! receive runs, so a destroy meanwhile cannot hand them to another block): this is what scrub
//! and self-heal already do for one bad copy, done for all of them.
//!
//! Atomicity: none is needed. A record is used only once its stream checksum verified, and a
//! block is written only with bytes that match its own checksum, so a stream cut or damaged
//! part way has healed what came before and changed nothing else.

use crate::EngineError;
use crate::core::SyncedTree;
use crate::pool::Pool;
use bytes::Bytes;
use cairn_dataset::{DatasetError, SnapshotName};
use cairn_device::queue::IoClass;
use cairn_format::send_stream::{StreamReader, StreamRecord};
use cairn_format::{BlockPointer, Compression, compress};
use cairn_object::ObjectSet;
use cairn_pipeline::RawWrites;
use std::io::Read;

/// What a corrective receive did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorrectiveSummary {
    /// `dataset@snapshot`.
    pub snapshot: String,
    pub bytes_read: u64,
    /// WRITE records whose bytes are the snapshot's block at their place.
    pub blocks_checked: u64,
    /// Of those, blocks no copy could give back, rewritten from the stream.
    pub blocks_healed: u64,
    /// WRITE records whose bytes are not the snapshot's block there (or name a hole or no
    /// object): not used.
    pub blocks_mismatched: u64,
}

/// A WRITE record's bytes.
enum Payload {
    Logical(Vec<u8>),
    Stored {
        logical_bytes: u32,
        compression: Compression,
        data: Vec<u8>,
    },
}

impl Pool {
    /// Heals snapshot `snapshot` (`dataset@snap`) from the stream on `input`, a stream (full
    /// or incremental) of that very snapshot: see the module doc.
    pub fn receive_corrective(
        &self,
        snapshot: &str,
        input: &mut dyn Read,
    ) -> Result<CorrectiveSummary, EngineError> {
        let name = SnapshotName::parse(snapshot)?;
        self.txg_engine()?;
        let refused =
            |err: cairn_format::send_stream::StreamError| EngineError::Receive(err.to_string());
        let mut reader = StreamReader::new(input).map_err(refused)?;
        let guid = {
            let directory = self.core.directory.lock();
            let record = directory.get(&name.dataset)?;
            let table = self.core.snapshots.lock();
            let found = table
                .find(record.id, &name.snapshot)
                .ok_or_else(|| DatasetError::NoSuchDataset(snapshot.to_string()))?;
            crate::send::stored_or_derived_guid(
                found.info.guid,
                self.core.guid,
                found.info.id,
                found.info.created_txg,
            )
        };
        let to_guid = reader.header().to_guid;
        if to_guid != guid {
            return Err(EngineError::Receive(format!(
                "cannot heal '{snapshot}' (guid {guid}) from a stream of snapshot guid \
                 {to_guid}: a corrective receive takes a stream of that very snapshot"
            )));
        }
        // Keeps the snapshot's blocks from reuse while they are checked and rewritten.
        let _synced = SyncedTree::take(&self.core, self.txg_engine().ok().map(|e| &**e))?;
        let objset = self.snapshot_objset(snapshot)?;
        let mut summary = CorrectiveSummary {
            snapshot: snapshot.to_string(),
            ..CorrectiveSummary::default()
        };
        while let Some(record) = reader.next_record().map_err(refused)? {
            let (object, offset_bytes, payload) = match record {
                StreamRecord::Write {
                    object,
                    offset_bytes,
                    data,
                } => (object, offset_bytes, Payload::Logical(data)),
                StreamRecord::WriteCompressed {
                    object,
                    offset_bytes,
                    logical_bytes,
                    compression,
                    data,
                } => (
                    object,
                    offset_bytes,
                    Payload::Stored {
                        logical_bytes,
                        compression,
                        data,
                    },
                ),
                _ => continue,
            };
            match matching_block(&objset, object, offset_bytes, payload)? {
                None => summary.blocks_mismatched += 1,
                Some((bp, stored)) => {
                    summary.blocks_checked += 1;
                    if heal_block(&objset, &bp, stored)? {
                        summary.blocks_healed += 1;
                    }
                }
            }
        }
        summary.bytes_read = reader.offset_bytes();
        Ok(summary)
    }
}

/// The snapshot's block at `offset_bytes` of `object` and `payload` in its stored form, if
/// they are the same block (size and checksum); `None` if not.
fn matching_block(
    objset: &ObjectSet,
    object: u64,
    offset_bytes: u64,
    payload: Payload,
) -> Result<Option<(BlockPointer, Vec<u8>)>, EngineError> {
    let Ok(dnode) = objset.dnode(object) else {
        return Ok(None);
    };
    let block_bytes = u64::from(dnode.data_block_size);
    if dnode.is_free() || block_bytes == 0 || !offset_bytes.is_multiple_of(block_bytes) {
        return Ok(None);
    }
    let Some(bp) = objset.synced_block_pointer(object, offset_bytes / block_bytes)? else {
        return Ok(None);
    };
    let logical = match payload {
        Payload::Stored {
            compression, data, ..
        } if compression == bp.compression => {
            return Ok(Some((bp, data)).filter(|(bp, data)| same_block(bp, data)));
        }
        Payload::Stored {
            logical_bytes,
            compression,
            data,
        } => match compress::decompress(&data, compression, logical_bytes as usize) {
            Ok(logical) => logical,
            Err(_) => return Ok(None),
        },
        Payload::Logical(data) => data,
    };
    if logical.len() != bp.lsize as usize {
        return Ok(None);
    }
    let stored = if bp.compression == Compression::Off {
        logical
    } else {
        match compress::encode(&logical, bp.compression) {
            Some(stored) => stored,
            None => return Ok(None),
        }
    };
    Ok(Some((bp, stored)).filter(|(bp, stored)| same_block(bp, stored)))
}

/// Whether `stored` is exactly what `bp` points to.
fn same_block(bp: &BlockPointer, stored: &[u8]) -> bool {
    stored.len() == bp.psize as usize && bp.checksum_algorithm.compute(stored) == bp.checksum
}

/// Reads `bp` (every copy tried; a good one rewrites the bad ones); if none reads correctly,
/// writes `stored` (checked to be the block) over every copy and reads it back. Returns
/// whether it rewrote the block.
fn heal_block(objset: &ObjectSet, bp: &BlockPointer, stored: Vec<u8>) -> Result<bool, EngineError> {
    let io = objset.io();
    if io.read_block_stored(bp, IoClass::Scrub).is_ok() {
        return Ok(false);
    }
    let stored = Bytes::from(stored);
    let mut writes = RawWrites::new();
    for dva in bp.copies() {
        io.write_raw_queued_durable(dva, stored.clone(), IoClass::SyncWrite, &mut writes)?;
    }
    writes.wait()?;
    io.read_block_stored(bp, IoClass::Scrub)?;
    Ok(true)
}
