//! A receive's records applied to its object set (`receive.rs` reads and verifies them; this
//! module changes objects): a full stream into an empty object set, an incremental one into a
//! clone of its source snapshot, whose objects it changes in place.
//!
//! What each record does:
//! - OBJECT makes the object (a full stream, or an object new or made anew since the source:
//!   another type or block size replaces it, its old tree freed by the sync), or, for an
//!   object of the same type and block size, replaces its bonus (a file's attributes) and
//!   keeps its blocks;
//! - WRITE replaces a whole block (a `send -c` block as stored: checked to decompress to
//!   exactly its logical size, then written as it came, `ObjectSet::write_stored_block`); FREE turns a range into holes, bounded by what the object
//!   may hold (the highest block written by the stream, or a pre-existing object's highest
//!   block, past which it frees with `free_blocks_from`), so a range to the end costs what
//!   the object holds;
//! - FREEOBJECTS frees objects of the range that exist.
//!
//! Invariant: a record that does not fit what came before (an object sent twice, a WRITE to
//! an object that does not exist or of the wrong size or past what the object can hold) is
//! reported, never applied, so a faulty sender cannot make a tree the pool cannot read.

use crate::EngineError;
use bytes::Bytes;
use cairn_format::send_stream::StreamRecord;
use cairn_format::{Compression, compress};
use cairn_object::ObjectSet;
use std::collections::{BTreeMap, BTreeSet};

/// What is known of one object the stream touched: its block size, the number of blocks it
/// may hold (what its tree reaches at the deepest level; a volume's size), and the highest
/// block it may hold data in (none yet: an object made by the stream that got no WRITE).
#[derive(Debug, Clone, Copy)]
struct Known {
    block_bytes: u64,
    blocks: u64,
    max_blkid: Option<u64>,
    /// Made by the stream (its blocks are all the stream's): FREE past the end frees nothing.
    made: bool,
}

/// A receive's object set and what the stream made in it so far.
pub(crate) struct Apply<'a> {
    objset: &'a ObjectSet,
    /// Incremental: the object set holds the source snapshot's objects.
    incremental: bool,
    objects: BTreeMap<u64, Known>,
    /// Objects an OBJECT record named (each at most once per stream).
    sent: BTreeSet<u64>,
    pub(crate) blocks_written: u64,
    /// A volume stream's size.
    volsize_bytes: Option<u64>,
}

impl<'a> Apply<'a> {
    pub(crate) fn new(
        objset: &'a ObjectSet,
        incremental: bool,
        volsize_bytes: Option<u64>,
    ) -> Apply<'a> {
        Apply {
            objset,
            incremental,
            objects: BTreeMap::new(),
            sent: BTreeSet::new(),
            blocks_written: 0,
            volsize_bytes,
        }
    }

    /// Objects OBJECT records named.
    pub(crate) fn objects_sent(&self) -> u64 {
        self.sent.len() as u64
    }

    /// The blocks an object of `block_bytes` blocks can hold (bounded by a volume's size).
    fn capacity(&self, object: u64, block_bytes: u32) -> Result<u64, EngineError> {
        let reach = self
            .objset
            .dnode(object)?
            .capacity_blocks(cairn_format::blkptr::LEVEL_MAX + 1);
        Ok(self.volsize_bytes.map_or(reach, |size| {
            size.div_ceil(u64::from(block_bytes)).min(reach)
        }))
    }

    /// What is known of `object`: from the stream, or (incremental) from the object set.
    fn known(&mut self, object: u64) -> Result<Option<Known>, EngineError> {
        if let Some(known) = self.objects.get(&object) {
            return Ok(Some(*known));
        }
        if !self.incremental || object == 0 {
            return Ok(None);
        }
        let dnode = self.objset.dnode(object)?;
        if dnode.is_free() {
            return Ok(None);
        }
        let known = Known {
            block_bytes: u64::from(dnode.data_block_size),
            blocks: self.capacity(object, dnode.data_block_size)?,
            max_blkid: Some(dnode.max_block_id),
            made: false,
        };
        self.objects.insert(object, known);
        Ok(Some(known))
    }

    /// Applies one record other than END in `txg`: `Ok(Some(why))` when it does not fit what
    /// came before.
    pub(crate) fn record(
        &mut self,
        txg: u64,
        record: StreamRecord,
    ) -> Result<Option<String>, EngineError> {
        match record {
            StreamRecord::Object {
                object,
                object_type,
                block_size_bytes,
                bonus,
                ..
            } => self.object(txg, object, object_type, block_size_bytes, bonus),
            StreamRecord::Write {
                object,
                offset_bytes,
                data,
            } => self.write(txg, object, offset_bytes, data),
            StreamRecord::WriteCompressed {
                object,
                offset_bytes,
                logical_bytes,
                compression,
                data,
            } => self.write_compressed(
                txg,
                object,
                offset_bytes,
                (logical_bytes, compression),
                data,
            ),
            StreamRecord::Free {
                object,
                offset_bytes,
                length_bytes,
            } => self.free(txg, object, offset_bytes, length_bytes),
            StreamRecord::FreeObjects { first, count } => {
                let bound = self
                    .objset
                    .object_id_bound()
                    .max(self.objects.keys().next_back().map_or(0, |&last| last + 1));
                for object in first.max(1)..first.saturating_add(count).min(bound) {
                    if self.known(object)?.is_some() {
                        self.objset.free_object(txg, object);
                        self.objects.remove(&object);
                    }
                }
                Ok(None)
            }
            StreamRecord::End { .. } => Ok(None),
        }
    }

    fn object(
        &mut self,
        txg: u64,
        object: u64,
        object_type: cairn_format::ObjectType,
        block_size_bytes: u32,
        bonus: Vec<u8>,
    ) -> Result<Option<String>, EngineError> {
        if object == 0 || !self.sent.insert(object) {
            return Ok(Some(format!("object {object} sent twice (or object 0)")));
        }
        let existing = if self.incremental {
            Some(self.objset.dnode(object)?).filter(|dnode| !dnode.is_free())
        } else {
            None
        };
        let kept = existing.as_ref().filter(|dnode| {
            dnode.object_type == object_type
                && dnode.data_block_size == block_size_bytes
                && bonus.len() <= dnode.bonus_capacity()
        });
        let known = match kept {
            Some(dnode) => {
                let max_blkid = Some(dnode.max_block_id);
                self.objset.set_bonus(txg, object, bonus)?;
                Known {
                    block_bytes: u64::from(block_size_bytes),
                    blocks: 0,
                    max_blkid,
                    made: false,
                }
            }
            None => {
                // New, or replaced: born in this txg, its old tree freed by the sync.
                self.objset.create_object_with_bonus(
                    txg,
                    object,
                    object_type,
                    block_size_bytes,
                    bonus,
                )?;
                Known {
                    block_bytes: u64::from(block_size_bytes),
                    blocks: 0,
                    max_blkid: None,
                    made: true,
                }
            }
        };
        let blocks = self.capacity(object, block_size_bytes)?;
        self.objects.insert(object, Known { blocks, ..known });
        Ok(None)
    }

    /// Where a WRITE of `len_bytes` logical bytes at `offset_bytes` of `object` goes: the
    /// object as known and the block, or why it does not fit.
    fn place(
        &mut self,
        object: u64,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<Result<(Known, u64), String>, EngineError> {
        let Some(known) = self.known(object)? else {
            return Ok(Err(format!("a WRITE to unknown object {object}")));
        };
        let blkid = offset_bytes / known.block_bytes;
        if !offset_bytes.is_multiple_of(known.block_bytes)
            || len_bytes != known.block_bytes
            || blkid >= known.blocks
        {
            return Ok(Err(format!(
                "a WRITE of {len_bytes} bytes at {offset_bytes} into object {object} of {} \
                 blocks of {} bytes",
                known.blocks, known.block_bytes
            )));
        }
        Ok(Ok((known, blkid)))
    }

    /// Notes block `blkid` of `object` written.
    fn written(&mut self, object: u64, known: Known, blkid: u64) {
        let max_blkid = Some(known.max_blkid.map_or(blkid, |max| max.max(blkid)));
        self.objects.insert(object, Known { max_blkid, ..known });
        self.blocks_written += 1;
    }

    fn write(
        &mut self,
        txg: u64,
        object: u64,
        offset_bytes: u64,
        data: Vec<u8>,
    ) -> Result<Option<String>, EngineError> {
        let (known, blkid) = match self.place(object, offset_bytes, data.len() as u64)? {
            Ok(place) => place,
            Err(why) => return Ok(Some(why)),
        };
        self.objset
            .write_block(txg, object, blkid, Bytes::from(data));
        self.written(object, known, blkid);
        Ok(None)
    }

    /// A `send -c` block: it must decompress to exactly its logical size (else the stream is
    /// refused) and is then written as it came.
    fn write_compressed(
        &mut self,
        txg: u64,
        object: u64,
        offset_bytes: u64,
        (logical_bytes, compression): (u32, Compression),
        data: Vec<u8>,
    ) -> Result<Option<String>, EngineError> {
        let (known, blkid) = match self.place(object, offset_bytes, u64::from(logical_bytes))? {
            Ok(place) => place,
            Err(why) => return Ok(Some(why)),
        };
        let logical = match compress::decompress(&data, compression, logical_bytes as usize) {
            Ok(logical) => logical,
            Err(err) => {
                return Ok(Some(format!(
                    "the compressed WRITE at {offset_bytes} of object {object} does not \
                     decompress to its {logical_bytes} bytes: {err}"
                )));
            }
        };
        self.objset.write_stored_block(
            txg,
            object,
            blkid,
            Bytes::from(logical),
            Bytes::from(data),
            compression,
        )?;
        self.written(object, known, blkid);
        Ok(None)
    }

    fn free(
        &mut self,
        txg: u64,
        object: u64,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Option<String>, EngineError> {
        let Some(known) = self.known(object)? else {
            return Ok(Some(format!("a FREE of unknown object {object}")));
        };
        let first = offset_bytes / known.block_bytes;
        let end = offset_bytes
            .saturating_add(length_bytes)
            .div_ceil(known.block_bytes);
        let Some(max) = known.max_blkid else {
            // Made by the stream and never written: nothing to free.
            return Ok(None);
        };
        if end > max && !known.made {
            // To the end of a pre-existing object: whatever it holds from `first` on.
            self.objset.free_blocks_from(txg, object, first)?;
        } else {
            for blkid in first..end.min(max + 1) {
                self.objset.free_block(txg, object, blkid);
            }
        }
        Ok(None)
    }
}
