//! Blocks as stored, for replication: the pointer of a synced level-0 block
//! (`synced_block_pointer`: `send -c` reads a block's stored bytes through it, a corrective
//! receive checks a stream's block against its checksum) and a block written in the form it
//! arrived in (`write_stored_block`: a `send -c` block received compressed is kept so, not
//! decompressed and compressed again).
//!
//! Invariant: a block written here is written now (its copies allocated and issued in `txg`,
//! which the caller holds open) and recorded in `txg` at that address with its logical bytes,
//! as `write_blocks_in_place` records its blocks: the txg sync links it into the tree without
//! writing it again, and reads of it until then see the logical bytes. This file uses
//! `change` and `tree` below it.

use crate::tree::tree_block_pointer;
use crate::{BlockChange, ObjectError, ObjectSet};
use bytes::Bytes;
use cairn_device::queue::IoClass;
use cairn_format::{BlockPointer, Compression, ObjectType};

impl ObjectSet {
    /// The pointer to level-0 block `blkid` of `object` in the synced tree (`None`: a hole).
    /// For an object set with nothing pending (a snapshot's): pending changes are not looked
    /// at. Reads only indirect blocks.
    pub fn synced_block_pointer(
        &self,
        object: u64,
        blkid: u64,
    ) -> Result<Option<BlockPointer>, ObjectError> {
        let dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        tree_block_pointer(&self.reader(), &dnode, blkid)
    }

    /// Writes block `blkid` of `object` in `txg` from its stored form: `physical` is `logical`
    /// compressed with `compression` (the caller checked that it decompresses to exactly
    /// `logical`), written as it is. Returns its pointer. `txg` must be held open by the
    /// caller. An all-zero block is recorded as a hole instead (no pointer).
    pub fn write_stored_block(
        &self,
        txg: u64,
        object: u64,
        blkid: u64,
        logical: Bytes,
        physical: Bytes,
        compression: Compression,
    ) -> Result<Option<BlockPointer>, ObjectError> {
        let dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        if logical.len() != dnode.data_block_size as usize {
            return Err(ObjectError::Refused {
                object,
                what: format!(
                    "a stored block of {} logical bytes, its blocks are {}",
                    logical.len(),
                    dnode.data_block_size
                ),
            });
        }
        if crate::is_all_zero(&logical) {
            self.free_block(txg, object, blkid);
            return Ok(None);
        }
        let object_type = match dnode.object_type {
            ObjectType::None => ObjectType::VolumeData,
            other => other,
        };
        let props = cairn_pipeline::WriteProps {
            object_type,
            level: 0,
            checksum: dnode
                .checksum_algorithm
                .unwrap_or_else(|| *self.checksum.lock()),
            copies: if object_type.is_metadata(0) { 2 } else { 1 },
            fill: 1,
            class: IoClass::AsyncWrite,
            compression,
        };
        let mut batch = self.io.io().batch(txg);
        let bp = batch.write_stored(physical, dnode.data_block_size, compression, props)?;
        if let Err(err) = batch.finish() {
            self.io.free_block(&bp, txg);
            return Err(err.into());
        }
        let change = BlockChange {
            data: Some(logical),
            written: Some(bp),
            ..BlockChange::default()
        };
        self.record_block(txg, object, blkid, change);
        Ok(Some(bp))
    }
}
