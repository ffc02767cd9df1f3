//! The `digest` of a snapshot (`cairn get digest POOL/DS@SNAP`, `list -o digest`): one value
//! that is equal on a sender and on every replica received from it, full or through a chain
//! of incrementals, so two copies can be compared without reading both through a pipe.
//!
//! What it covers: every allocated object's type, data block size and bonus (a file's
//! attributes), and every block of its data that is not all zeros, with the object and byte
//! offset it sits at. Nothing physical: not compression, checksums, devices, block placement,
//! birth txgs, indirect block shape or how a run of zeros is stored (a hole and a block of
//! zeros read the same, so they count the same). Two snapshots whose every object reads back
//! the same have the same digest; a byte of any object's data or attributes changed changes
//! it.
//!
//! How it combines (so it can later be kept up to date by a receive instead of a walk): each
//! item (an object's description, a block) is hashed on its own with BLAKE3 under a context
//! string, and the digest is the sum of the item hashes taken as four 64-bit lanes, each lane
//! added modulo 2^64. A sum does not depend on the order items are met in, and an item's
//! contribution can be subtracted again, so an incremental receive could update its source's
//! digest by removing the replaced blocks and adding the new ones (not done yet: today it is
//! computed by a walk). It is a check against damage and mistakes, not a proof against an
//! adversary: additive multiset hashes of 256 bits admit crafted collisions (generalised
//! birthday attacks), which random damage never finds.
//!
//! Cost: one read of the snapshot (the blocks that hold data, read ahead through the cache),
//! done the first time a snapshot's digest is asked of a pool and remembered in memory for the
//! pool's life (a snapshot never changes; its id is never reused), so a server answers
//! `list -o digest` again from memory. Storing it with the snapshot record is left.

use crate::EngineError;
use crate::core::SyncedTree;
use crate::pool::Pool;
use cairn_dataset::{DatasetError, SnapshotName};
use cairn_format::ObjectType;
use cairn_object::ObjectSet;

/// Blocks whose holes are looked up (and read ahead) at once.
const DIGEST_CHUNK_BLOCKS: u64 = 256;

/// Context strings of the two kinds of items (BLAKE3's key derivation: no item of one kind can
/// hash like one of the other).
const OBJECT_CONTEXT: &str = "cairn 2026-12 snapshot digest: object";
const BLOCK_CONTEXT: &str = "cairn 2026-12 snapshot digest: block";

/// An order-independent sum of item hashes (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentDigest {
    lanes: [u64; 4],
}

impl ContentDigest {
    /// Adds object `object`'s description.
    pub fn add_object(
        &mut self,
        object: u64,
        object_type: ObjectType,
        block_size_bytes: u32,
        bonus: &[u8],
    ) {
        let mut hasher = blake3::Hasher::new_derive_key(OBJECT_CONTEXT);
        hasher.update(&object.to_le_bytes());
        hasher.update(&[object_type as u8]);
        hasher.update(&block_size_bytes.to_le_bytes());
        hasher.update(&(bonus.len() as u64).to_le_bytes());
        hasher.update(bonus);
        self.add(hasher.finalize());
    }

    /// Adds the block of `object` at `offset_bytes` holding `data` (nothing for zeros).
    pub fn add_block(&mut self, object: u64, offset_bytes: u64, data: &[u8]) {
        if data.iter().all(|&byte| byte == 0) {
            return;
        }
        let mut hasher = blake3::Hasher::new_derive_key(BLOCK_CONTEXT);
        hasher.update(&object.to_le_bytes());
        hasher.update(&offset_bytes.to_le_bytes());
        hasher.update(&(data.len() as u64).to_le_bytes());
        hasher.update(data);
        self.add(hasher.finalize());
    }

    fn add(&mut self, item: blake3::Hash) {
        for (lane, word) in self.lanes.iter_mut().zip(item.as_bytes().chunks_exact(8)) {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(word);
            *lane = lane.wrapping_add(u64::from_le_bytes(bytes));
        }
    }

    /// The digest as 64 lowercase hex digits (the lanes little-endian, in order).
    pub fn hex(&self) -> String {
        self.lanes
            .iter()
            .flat_map(|lane| lane.to_le_bytes())
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

impl Pool {
    /// The digest of snapshot `snapshot` (`dataset@snap`), as 64 hex digits (see the module
    /// doc): computed by a walk the first time, then remembered.
    pub fn snapshot_digest(&self, snapshot: &str) -> Result<String, EngineError> {
        let name = SnapshotName::parse(snapshot)?;
        let id = {
            let directory = self.core.directory.lock();
            let record = directory.get(&name.dataset)?;
            let table = self.core.snapshots.lock();
            table
                .find(record.id, &name.snapshot)
                .ok_or_else(|| DatasetError::NoSuchDataset(snapshot.to_string()))?
                .info
                .id
        };
        if let Some(digest) = self.digests.lock().get(&id) {
            return Ok(digest.clone());
        }
        let (root, _) = self.snapshot_root(snapshot)?;
        let digest = if root.is_hole() {
            ContentDigest::default()
        } else {
            // Keeps the snapshot's blocks from reuse while they are read, should it be
            // destroyed meanwhile.
            let _synced = SyncedTree::take(&self.core, self.txg_engine().ok().map(|e| &**e))?;
            digest_objset(&*self.snapshot_objset(snapshot)?)?
        };
        let hex = digest.hex();
        self.digests.lock().insert(id, hex.clone());
        Ok(hex)
    }
}

/// The digest of every object of `objset` (a snapshot's: nothing pending).
pub(crate) fn digest_objset(objset: &ObjectSet) -> Result<ContentDigest, EngineError> {
    let mut digest = ContentDigest::default();
    for object in 1..objset.object_id_bound() {
        let dnode = objset.dnode(object)?;
        if dnode.is_free() {
            continue;
        }
        digest.add_object(
            object,
            dnode.object_type,
            dnode.data_block_size,
            &dnode.bonus,
        );
        let block_bytes = u64::from(dnode.data_block_size);
        let blocks = dnode.max_block_id + 1;
        let mut first = 0;
        while first < blocks {
            let count = DIGEST_CHUNK_BLOCKS.min(blocks - first);
            let map = objset.block_map(object, first, count)?;
            let present: Vec<u64> = map
                .iter()
                .enumerate()
                .filter(|&(_, &holds_data)| holds_data)
                .map(|(index, _)| first + index as u64)
                .collect();
            if let (Some(&low), Some(&high)) = (present.first(), present.last()) {
                objset.prefetch_blocks(object, low..high + 1);
            }
            for blkid in present {
                if let Some(data) = objset.read_block(object, blkid)? {
                    digest.add_block(object, blkid * block_bytes, &data);
                }
            }
            first += count;
        }
    }
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_ignores_order_and_zero_blocks_and_sees_every_byte() {
        let mut one = ContentDigest::default();
        one.add_object(1, ObjectType::VolumeData, 4096, b"bonus");
        one.add_block(1, 0, &[1u8; 4096]);
        one.add_block(1, 4096, &[2u8; 4096]);
        let mut other = ContentDigest::default();
        other.add_block(1, 4096, &[2u8; 4096]);
        other.add_block(1, 8192, &[0u8; 4096]);
        other.add_object(1, ObjectType::VolumeData, 4096, b"bonus");
        other.add_block(1, 0, &[1u8; 4096]);
        assert_eq!(one, other);
        assert_eq!(one.hex().len(), 64);
        let mut changed = ContentDigest::default();
        changed.add_object(1, ObjectType::VolumeData, 4096, b"bonus");
        let mut data = vec![1u8; 4096];
        data[4095] = 3;
        changed.add_block(1, 0, &data);
        changed.add_block(1, 4096, &[2u8; 4096]);
        assert_ne!(one, changed);
        let mut moved = ContentDigest::default();
        moved.add_object(1, ObjectType::VolumeData, 4096, b"bonus");
        moved.add_block(1, 4096, &[1u8; 4096]);
        moved.add_block(1, 0, &[2u8; 4096]);
        assert_ne!(one, moved);
        let mut attrs = ContentDigest::default();
        attrs.add_object(1, ObjectType::VolumeData, 4096, b"bonuS");
        attrs.add_block(1, 0, &[1u8; 4096]);
        attrs.add_block(1, 4096, &[2u8; 4096]);
        assert_ne!(one, attrs);
    }
}
