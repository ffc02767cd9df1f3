//! Hashed name → value maps stored in one object (ZFS's ZAP): a filesystem's directories,
//! extended attributes and delete queue, and the pool's own records in the meta object set
//! (snapshots, next).
//!
//! Extendible hashing. Each name has a 62-bit *key*: 54 bits of a keyed BLAKE3 hash of the
//! name (the key is the map's salt, so names cannot be chosen to collide in every map),
//! then an 8-bit collision number, the smallest one no other entry with the same hash holds.
//! Keys are unique within a map and never change while the entry lives, so they double as
//! `readdir` cookies: a listing resumed from a key sees every entry that stayed in the map,
//! once, whatever was added or removed meanwhile.
//!
//! ```text
//! block 0          header: magic, version, depth D, entries, leaves, salt, and while D ≤ 8
//!                  the table itself (2^D leaf numbers)
//! blocks 1..2^24   leaves: a local depth d ≤ D and entries sorted by key
//!                  (key u64, name length u8, value length u16, name, value)
//! blocks 2^24..    the table once D > 8 (512 leaf numbers per block)
//! ```
//! Leaves come first so that a small map is a few dense blocks, and while a map has a single
//! leaf (up to ~100 short names) that leaf sits in the header block itself, after byte
//! `EMBEDDED_LEAF_OFFSET`: an empty directory, or a file's few extended attributes, is one
//! block. Its first split moves the leaf to block 1 and puts its sibling in block 2 (leaves
//! never merge, so a map does not go back). Version 1 maps had the table from block 1 and
//! leaves from 2^24, so every map, even an empty directory, paid for the chain of indirect
//! blocks down to block 2^24: ~240 KiB each (measured: 1,000 empty directories took 235 MB).
//! Version 2 maps had the dense layout with the first leaf in block 1. Both are still read and
//! changed in their own layout (`Layout`); new maps are version 3.
//!
//! A key's top D bits index the table, which names its leaf; a leaf of local depth d is named
//! by the 2^(D−d) consecutive table slots sharing its top d bits. A full leaf splits in two on
//! its next key bit (doubling the table first when d = D). So a lookup reads the header, at
//! most one table block and one leaf, at any size: O(1) blocks, and an insert dirties at most
//! the header, the leaf, its new sibling and the table slots that change.
//!
//! Invariants: every table slot names an allocated leaf; every entry of a leaf has the leaf's
//! top d key bits; entries within a leaf are sorted by key and keys are unique; `entries` in
//! the header is the number of entries of all leaves. The caller serialises changes of one map
//! (a directory's lock, say) and passes the txg each change joins (`MapTx`, which also counts
//! the dirty bytes a change adds, for the txg engine's throttle). Errors are `MapError`s.
//!
//! An entry's value is at most `VALUE_BYTES_MAX` bytes, so that two entries of the longest
//! name always fit a leaf. A caller with larger values (extended attributes, up to the VFS's
//! 64 KiB) keeps them in objects of their own and stores the object's number as an
//! *indirect* value (`ValueKind::Indirect`: the top bit of the entry's value length); the
//! map only carries the flag, what it means is the caller's.
//!
//! Known gaps: leaves never merge and the table never shrinks (as in ZFS, a directory that
//! once held a million entries keeps its leaves).

mod batch;
mod error;
#[cfg(test)]
mod tests;
mod tx;

pub use error::MapError;
pub use tx::{CountDirty, MapTx};

use crate::ObjectSet;
use bytes::Bytes;

/// Block size of a map object.
pub const MAP_BLOCK_BYTES: u32 = 4096;
/// Longest name.
pub const NAME_BYTES_MAX: usize = 255;
/// Largest value.
pub const VALUE_BYTES_MAX: usize = 1024;
/// The bit of an entry's value length that marks an indirect value (`ValueKind::Indirect`).
pub const VALUE_INDIRECT_BIT: u16 = 1 << 15;

const MAP_MAGIC: u64 = u64::from_le_bytes(*b"CAIRNMAP");
const LEAF_MAGIC: u32 = u32::from_le_bytes(*b"LEAF");
/// The version new maps are written with; `Layout::of_version` knows every one still read.
pub const MAP_VERSION: u32 = 3;
const HEADER_BLKID: u64 = 0;
/// Where a version 2 or 3 map's table blocks start (its leaves fill the blocks before).
pub const TABLE_START_BLKID: u64 = 1 << 24;
/// Bytes of the header's fixed fields (magic to salt); an inline table follows them.
pub const HEADER_FIXED_BYTES: usize = 40;
/// Deepest table kept in the header block itself.
pub const INLINE_DEPTH_MAX: u32 = 8;
/// Deepest table a map may have.
pub const DEPTH_MAX: u32 = 40;
const KEY_BITS: u32 = 62;
const HASH_BITS: u32 = 54;
const COLLISION_BITS: u32 = KEY_BITS - HASH_BITS;
const SLOTS_PER_TABLE_BLOCK: u64 = MAP_BLOCK_BYTES as u64 / 8;
const LEAF_HEADER_BYTES: usize = 8;
const ENTRY_FIXED_BYTES: usize = 11;

const _: () = assert!(HEADER_FIXED_BYTES + (8 << INLINE_DEPTH_MAX) <= MAP_BLOCK_BYTES as usize);
const _: () = assert!(VALUE_BYTES_MAX < VALUE_INDIRECT_BIT as usize);
const _: () = assert!(
    LEAF_HEADER_BYTES + 2 * (ENTRY_FIXED_BYTES + NAME_BYTES_MAX + VALUE_BYTES_MAX)
        <= MAP_BLOCK_BYTES as usize
);

/// Where a map's table blocks and leaves are, by the version in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    version: u32,
    table_start_blkid: u64,
    leaf_start_blkid: u64,
    /// Leaves the layout has room for (from version 2 on they must stay below the table).
    leaves_max: u64,
    /// A map with a single leaf keeps it in the header block (`EMBEDDED_LEAF_OFFSET`).
    first_leaf_embedded: bool,
}

impl Layout {
    /// Version 1: table from block 1, leaves from block 2^24.
    const V1: Layout = Layout {
        version: 1,
        table_start_blkid: 1,
        leaf_start_blkid: 1 << 24,
        leaves_max: 1 << 24,
        first_leaf_embedded: false,
    };
    /// Version 2: leaves from block 1, table from block 2^24.
    const V2: Layout = Layout {
        version: 2,
        table_start_blkid: TABLE_START_BLKID,
        leaf_start_blkid: 1,
        leaves_max: TABLE_START_BLKID - 1,
        first_leaf_embedded: false,
    };
    /// Version 3: as version 2, with a lone first leaf in the header block.
    const V3: Layout = Layout {
        version: 3,
        first_leaf_embedded: true,
        ..Layout::V2
    };

    fn of_version(version: u32) -> Option<Layout> {
        match version {
            1 => Some(Layout::V1),
            2 => Some(Layout::V2),
            3 => Some(Layout::V3),
            _ => None,
        }
    }

    fn leaf_blkid(&self, leaf: u64) -> u64 {
        debug_assert!(leaf < self.leaves_max);
        self.leaf_start_blkid + leaf
    }

    fn table_blkid(&self, slot: u64) -> u64 {
        self.table_start_blkid + slot / SLOTS_PER_TABLE_BLOCK
    }
}

const _: () = assert!(Layout::V3.version == MAP_VERSION);
/// Where a lone first leaf starts in the header block (after the fixed fields and the one
/// slot of a depth-0 table).
pub const EMBEDDED_LEAF_OFFSET: usize = 64;
const _: () = assert!(HEADER_FIXED_BYTES + 8 <= EMBEDDED_LEAF_OFFSET);
const _: () = assert!(
    LEAF_HEADER_BYTES + 2 * (ENTRY_FIXED_BYTES + NAME_BYTES_MAX + VALUE_BYTES_MAX)
        <= MAP_BLOCK_BYTES as usize - EMBEDDED_LEAF_OFFSET
);
// A version 2 or 3 table as deep as `DEPTH_MAX` allows still fits below u64's end.
const _: () = assert!(
    TABLE_START_BLKID
        .checked_add((1u64 << DEPTH_MAX) / SLOTS_PER_TABLE_BLOCK)
        .is_some()
);

/// What an entry's value bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// The value itself.
    Inline,
    /// A reference, in the caller's encoding, to where the value is kept.
    Indirect,
}

/// One entry of a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: u64,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
    pub kind: ValueKind,
}

impl Entry {
    fn bytes(&self) -> usize {
        ENTRY_FIXED_BYTES + self.name.len() + self.value.len()
    }
}

#[derive(Debug, Clone)]
struct Header {
    layout: Layout,
    depth: u32,
    entries: u64,
    leaves: u64,
    salt: u64,
    /// The table while `depth ≤ INLINE_DEPTH_MAX`; empty otherwise.
    inline_table: Vec<u64>,
}

impl Header {
    /// The map's only leaf is in the header block.
    fn leaf_embedded(&self) -> bool {
        self.layout.first_leaf_embedded && self.leaves == 1
    }

    /// Bytes a leaf may take: its block, or what the header block leaves of itself.
    fn leaf_capacity(&self) -> usize {
        if self.leaf_embedded() {
            MAP_BLOCK_BYTES as usize - EMBEDDED_LEAF_OFFSET
        } else {
            MAP_BLOCK_BYTES as usize
        }
    }
}

#[derive(Debug, Clone)]
struct Leaf {
    local_depth: u32,
    entries: Vec<Entry>,
}

impl Leaf {
    fn bytes(&self) -> usize {
        LEAF_HEADER_BYTES + self.entries.iter().map(Entry::bytes).sum::<usize>()
    }
}

/// One pass of `HashedMap::scan_hash` over a leaf.
struct HashScan {
    /// The entry with the name looked for, and its bytes in the block.
    found: Option<(Entry, std::ops::Range<usize>)>,
    /// Keys and starts of the entries with the name's hash, in key order.
    same_hash: Vec<(u64, usize)>,
    /// The bytes of those entries; empty at their place when there are none.
    hash_run: std::ops::Range<usize>,
    /// Where the leaf's last entry ends.
    used_end: usize,
}

/// Appends one leaf entry in its on-disk form (docs/format.md: key, name length, value
/// length, name, value).
fn encode_entry(out: &mut Vec<u8>, key: u64, name: &[u8], value: &[u8], kind: ValueKind) {
    debug_assert!(value.len() <= VALUE_BYTES_MAX && name.len() <= NAME_BYTES_MAX);
    let flag = match kind {
        ValueKind::Inline => 0,
        ValueKind::Indirect => VALUE_INDIRECT_BIT,
    };
    out.extend_from_slice(&key.to_le_bytes());
    out.push(name.len() as u8);
    out.extend_from_slice(&(value.len() as u16 | flag).to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// A leaf in its on-disk form, unpadded (docs/format.md: magic, local depth, count, entries).
fn encode_leaf(leaf: &Leaf) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAP_BLOCK_BYTES as usize);
    out.extend_from_slice(&LEAF_MAGIC.to_le_bytes());
    out.push(leaf.local_depth as u8);
    out.push(0);
    out.extend_from_slice(&(leaf.entries.len() as u16).to_le_bytes());
    for entry in &leaf.entries {
        encode_entry(&mut out, entry.key, &entry.name, &entry.value, entry.kind);
    }
    debug_assert_eq!(out.len(), leaf.bytes());
    out
}

/// A map stored in `object` of `objset`.
pub struct HashedMap<'a> {
    objset: &'a ObjectSet,
    object: u64,
}

impl<'a> HashedMap<'a> {
    pub fn new(objset: &'a ObjectSet, object: u64) -> HashedMap<'a> {
        HashedMap { objset, object }
    }

    /// Writes an empty map into `object` (created by the caller with `MAP_BLOCK_BYTES`
    /// blocks).
    pub fn create(&self, tx: MapTx<'_>, salt: u64) -> Result<(), MapError> {
        let header = Header {
            layout: Layout::V3,
            depth: 0,
            entries: 0,
            leaves: 1,
            salt,
            inline_table: vec![0],
        };
        let empty = Leaf {
            local_depth: 0,
            entries: Vec::new(),
        };
        self.write_leaf_bytes(tx, &header, 0, encode_leaf(&empty), true);
        Ok(())
    }

    /// Entries in the map.
    pub fn len(&self) -> Result<u64, MapError> {
        Ok(self.header()?.entries)
    }

    pub fn is_empty(&self) -> Result<bool, MapError> {
        Ok(self.len()? == 0)
    }

    /// The entry named `name`.
    pub fn get(&self, name: &[u8]) -> Result<Option<Entry>, MapError> {
        let header = self.header()?;
        let hash = self.hash(&header, name);
        let leaf_number = self.table_get(&header, bucket(&header, hash << COLLISION_BITS))?;
        let block = self.leaf_block(&header, leaf_number)?;
        let mut found = None;
        // Entries are sorted by key: the scan stops at the first key past the name's hash.
        self.scan_leaf(leaf_number, &block, |key, entry_name, value, kind| {
            if key >> COLLISION_BITS == hash && entry_name == name {
                found = Some(Entry {
                    key,
                    name: entry_name.to_vec(),
                    value: value.to_vec(),
                    kind,
                });
            }
            found.is_none() && key >> COLLISION_BITS <= hash
        })?;
        Ok(found)
    }

    /// Adds `name` → `value`; `Exists` if the name is there. Returns the new entry's key.
    pub fn insert(&self, tx: MapTx<'_>, name: &[u8], value: &[u8]) -> Result<u64, MapError> {
        self.insert_as(tx, name, value, ValueKind::Inline)
    }

    /// `insert` of a value of kind `kind`.
    pub fn insert_as(
        &self,
        tx: MapTx<'_>,
        name: &[u8],
        value: &[u8],
        kind: ValueKind,
    ) -> Result<u64, MapError> {
        check_sizes(name, value)?;
        let mut header = self.header()?;
        let hash = self.hash(&header, name);
        loop {
            let slot = bucket(&header, hash << COLLISION_BITS);
            let leaf_number = self.table_get(&header, slot)?;
            let block = self.leaf_block(&header, leaf_number)?;
            let scan = self.scan_hash(leaf_number, &block, hash, name)?;
            if scan.found.is_some() {
                return Err(MapError::Exists);
            }
            let collision = (0..1u64 << COLLISION_BITS)
                .find(|cd| {
                    !scan
                        .same_hash
                        .iter()
                        .any(|&(key, _)| key & ((1 << COLLISION_BITS) - 1) == *cd)
                })
                .ok_or_else(|| MapError::NoSpace("too many names with one hash".into()))?;
            let key = hash << COLLISION_BITS | collision;
            let entry_bytes = ENTRY_FIXED_BYTES + name.len() + value.len();
            if scan.used_end + entry_bytes <= header.leaf_capacity() {
                // The common case, without decoding the leaf: the entry is spliced into the
                // encoded block at its key's place (decoding every entry of the leaf into
                // owned names and values cost two allocations per name for each create).
                let at = scan
                    .same_hash
                    .iter()
                    .find(|&&(other, _)| other > key)
                    .map_or(scan.hash_run.end, |&(_, start)| start);
                let mut spliced = Vec::with_capacity(MAP_BLOCK_BYTES as usize);
                spliced.extend_from_slice(&block[..at]);
                encode_entry(&mut spliced, key, name, value, kind);
                spliced.extend_from_slice(&block[at..scan.used_end]);
                let count = u16::from_le_bytes([block[6], block[7]]) + 1;
                spliced[6..8].copy_from_slice(&count.to_le_bytes());
                header.entries += 1;
                self.write_leaf_bytes(tx, &header, leaf_number, spliced, true);
                return Ok(key);
            }
            let leaf = self.decode_leaf(leaf_number, &block)?;
            self.split(tx, &mut header, hash << COLLISION_BITS, leaf_number, leaf)?;
        }
    }

    /// Removes `name`; its entry, or `None` if it was not there.
    pub fn remove(&self, tx: MapTx<'_>, name: &[u8]) -> Result<Option<Entry>, MapError> {
        let mut header = self.header()?;
        let hash = self.hash(&header, name);
        let leaf_number = self.table_get(&header, bucket(&header, hash << COLLISION_BITS))?;
        let block = self.leaf_block(&header, leaf_number)?;
        let scan = self.scan_hash(leaf_number, &block, hash, name)?;
        let Some((entry, place)) = scan.found else {
            return Ok(None);
        };
        // Cut out of the encoded block, as `insert` splices in.
        let mut cut = Vec::with_capacity(MAP_BLOCK_BYTES as usize);
        cut.extend_from_slice(&block[..place.start]);
        cut.extend_from_slice(&block[place.end..scan.used_end]);
        let count = u16::from_le_bytes([block[6], block[7]]).saturating_sub(1);
        cut[6..8].copy_from_slice(&count.to_le_bytes());
        header.entries = header.entries.saturating_sub(1);
        self.write_leaf_bytes(tx, &header, leaf_number, cut, true);
        Ok(Some(entry))
    }

    /// Replaces the value of an existing entry (its key stays).
    pub fn set_value(&self, tx: MapTx<'_>, name: &[u8], value: &[u8]) -> Result<(), MapError> {
        self.set_value_as(tx, name, value, ValueKind::Inline)
    }

    /// `set_value` with a value of kind `kind`.
    pub fn set_value_as(
        &self,
        tx: MapTx<'_>,
        name: &[u8],
        value: &[u8],
        kind: ValueKind,
    ) -> Result<(), MapError> {
        check_sizes(name, value)?;
        let header = self.header()?;
        let hash = self.hash(&header, name);
        let slot = bucket(&header, hash << COLLISION_BITS);
        let leaf_number = self.table_get(&header, slot)?;
        let mut leaf = self.leaf(&header, leaf_number)?;
        let entry = leaf
            .entries
            .iter_mut()
            .find(|entry| entry.key >> COLLISION_BITS == hash && entry.name == name)
            .ok_or(MapError::NotFound)?;
        let grows = value.len().saturating_sub(entry.value.len());
        entry.value = value.to_vec();
        entry.kind = kind;
        if leaf.bytes() > header.leaf_capacity() {
            // Rare (values of one size in directories): remove and insert again.
            debug_assert!(grows > 0);
            self.remove(tx, name)?;
            self.insert_as(tx, name, value, kind)?;
            return Ok(());
        }
        self.write_leaf_bytes(tx, &header, leaf_number, encode_leaf(&leaf), false);
        Ok(())
    }

    /// Calls `visit` with each entry whose key is at least `start`, in key order, until it
    /// returns false.
    pub fn for_each_from(
        &self,
        start: u64,
        mut visit: impl FnMut(&Entry) -> bool,
    ) -> Result<(), MapError> {
        let header = self.header()?;
        let slots = 1u64 << header.depth;
        let mut slot = bucket(&header, start.min((1 << KEY_BITS) - 1));
        while slot < slots {
            let leaf = self.leaf(&header, self.table_get(&header, slot)?)?;
            for entry in leaf.entries.iter().filter(|entry| entry.key >= start) {
                if !visit(entry) {
                    return Ok(());
                }
            }
            // The leaf covers the aligned run of 2^(D - d) slots around `slot`.
            let run = 1u64 << (header.depth - leaf.local_depth.min(header.depth));
            slot = (slot / run + 1) * run;
        }
        Ok(())
    }

    /// The entries kept in blocks `blkids` of the map (ascending or not; blocks that hold no
    /// leaf, such as table blocks, holes and blocks past the last leaf, give none). With the
    /// blocks that differ between two versions of one map (`changed_blocks`), the entries
    /// each version has there are exactly what differs between them: every other block is the
    /// same in both, and an entry sits in one block of a version.
    pub fn entries_in_blocks(&self, blkids: &[u64]) -> Result<Vec<Entry>, MapError> {
        let header = self.header()?;
        let mut entries = Vec::new();
        for &blkid in blkids {
            let number = if header.leaf_embedded() {
                if blkid != HEADER_BLKID {
                    continue;
                }
                0
            } else {
                match blkid.checked_sub(header.layout.leaf_start_blkid) {
                    Some(number) if number < header.leaves => number,
                    _ => continue,
                }
            };
            entries.extend(self.leaf(&header, number)?.entries);
        }
        Ok(entries)
    }

    /// Splits the full leaf that `key` falls in on its next key bit, doubling the table first
    /// if needed.
    fn split(
        &self,
        tx: MapTx<'_>,
        header: &mut Header,
        key: u64,
        leaf_number: u64,
        leaf: Leaf,
    ) -> Result<(), MapError> {
        if leaf.local_depth >= DEPTH_MAX {
            return Err(MapError::NoSpace(format!(
                "map object {}: a hash bucket is full at depth {DEPTH_MAX}",
                self.object
            )));
        }
        // Checked before anything is written: the table's doubling rewrites its blocks.
        if header.leaves >= header.layout.leaves_max {
            return Err(MapError::NoSpace(format!(
                "map object {}: all {} leaves are in use",
                self.object, header.leaves
            )));
        }
        if leaf.local_depth == header.depth {
            self.double_table(tx, header)?;
        }
        let new_depth = leaf.local_depth + 1;
        let bit = KEY_BITS - new_depth;
        let (high, low): (Vec<Entry>, Vec<Entry>) = leaf
            .entries
            .into_iter()
            .partition(|entry| entry.key >> bit & 1 == 1);
        let sibling = header.leaves;
        header.leaves += 1;
        // With two leaves the first one leaves the header block (if it was there) for block 1.
        debug_assert!(!header.leaf_embedded());
        for (number, entries) in [(leaf_number, low), (sibling, high)] {
            let leaf = Leaf {
                local_depth: new_depth,
                entries,
            };
            self.write_leaf_bytes(tx, header, number, encode_leaf(&leaf), false);
        }
        // The old leaf's slots: the aligned run of 2^(D - d) around the key's slot; its upper
        // half now names the sibling.
        let slot = bucket(header, key);
        let run = 1u64 << (header.depth - leaf.local_depth);
        let first = slot / run * run;
        self.table_set_range(tx, header, first + run / 2, run / 2, sibling)?;
        self.write_header(tx, header);
        Ok(())
    }

    /// Doubles the table: slot i of depth D + 1 names what slot i / 2 named.
    fn double_table(&self, tx: MapTx<'_>, header: &mut Header) -> Result<(), MapError> {
        let old_slots = 1u64 << header.depth;
        let mut table = Vec::with_capacity(old_slots as usize * 2);
        for slot in 0..old_slots {
            let leaf = self.table_get(header, slot)?;
            table.push(leaf);
            table.push(leaf);
        }
        header.depth += 1;
        if header.depth <= INLINE_DEPTH_MAX {
            header.inline_table = table;
        } else {
            header.inline_table = Vec::new();
            for (index, chunk) in table.chunks(SLOTS_PER_TABLE_BLOCK as usize).enumerate() {
                let mut block = vec![0u8; MAP_BLOCK_BYTES as usize];
                for (raw, leaf) in block.chunks_exact_mut(8).zip(chunk) {
                    raw.copy_from_slice(&leaf.to_le_bytes());
                }
                let first_slot = index as u64 * SLOTS_PER_TABLE_BLOCK;
                self.write(tx, header.layout.table_blkid(first_slot), block);
            }
        }
        Ok(())
    }

    fn table_get(&self, header: &Header, slot: u64) -> Result<u64, MapError> {
        let leaf = if header.depth <= INLINE_DEPTH_MAX {
            *header
                .inline_table
                .get(slot as usize)
                .ok_or_else(|| self.corrupt("table slot past the table"))?
        } else {
            let block = self.read(header.layout.table_blkid(slot))?;
            let at = (slot % SLOTS_PER_TABLE_BLOCK) as usize * 8;
            u64::from_le_bytes(
                block[at..at + 8]
                    .try_into()
                    .map_err(|_| self.corrupt("short table block"))?,
            )
        };
        if leaf >= header.leaves {
            return Err(self.corrupt(&format!("table names leaf {leaf} of {}", header.leaves)));
        }
        Ok(leaf)
    }

    fn table_set_range(
        &self,
        tx: MapTx<'_>,
        header: &mut Header,
        first: u64,
        count: u64,
        leaf: u64,
    ) -> Result<(), MapError> {
        if header.depth <= INLINE_DEPTH_MAX {
            for slot in first..first + count {
                header.inline_table[slot as usize] = leaf;
            }
            return Ok(());
        }
        let mut slot = first;
        while slot < first + count {
            let blkid = header.layout.table_blkid(slot);
            let mut block = self.read(blkid)?.to_vec();
            while slot < first + count && header.layout.table_blkid(slot) == blkid {
                let at = (slot % SLOTS_PER_TABLE_BLOCK) as usize * 8;
                block[at..at + 8].copy_from_slice(&leaf.to_le_bytes());
                slot += 1;
            }
            self.write(tx, blkid, block);
        }
        Ok(())
    }

    fn hash(&self, header: &Header, name: &[u8]) -> u64 {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&header.salt.to_le_bytes());
        key[8..16].copy_from_slice(&self.object.to_le_bytes());
        let digest = blake3::keyed_hash(&key, name);
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest.as_bytes()[..8]);
        u64::from_le_bytes(first) >> (64 - HASH_BITS)
    }

    fn header(&self) -> Result<Header, MapError> {
        let block = self.read(HEADER_BLKID)?;
        decode_header(&block).map_err(|what| self.corrupt(&what))
    }

    /// Writes the header block; a lone first leaf in it is written with it
    /// (`write_leaf_bytes`), never by this alone.
    fn write_header(&self, tx: MapTx<'_>, header: &Header) {
        debug_assert!(!header.leaf_embedded());
        self.write(tx, HEADER_BLKID, encode_header(header));
    }

    /// Leaf `number`'s encoded bytes: its block, or the tail of the header block.
    fn leaf_block(&self, header: &Header, number: u64) -> Result<Bytes, MapError> {
        if header.leaf_embedded() {
            if number != 0 {
                return Err(self.corrupt(&format!("leaf {number} of a one-leaf map")));
            }
            return Ok(self.read(HEADER_BLKID)?.slice(EMBEDDED_LEAF_OFFSET..));
        }
        self.read(header.layout.leaf_blkid(number))
    }

    fn leaf(&self, header: &Header, number: u64) -> Result<Leaf, MapError> {
        let block = self.leaf_block(header, number)?;
        self.decode_leaf(number, &block)
    }

    /// Leaf `number`'s entries in `block`, owned (for a split, or a change of value).
    fn decode_leaf(&self, number: u64, block: &[u8]) -> Result<Leaf, MapError> {
        let mut entries = Vec::new();
        let local_depth = self.scan_leaf(number, block, |key, name, value, kind| {
            entries.push(Entry {
                key,
                name: name.to_vec(),
                value: value.to_vec(),
                kind,
            });
            true
        })?;
        Ok(Leaf {
            local_depth,
            entries,
        })
    }

    /// What `insert` and `remove` need of leaf `number` for a name of hash `hash`, in one
    /// pass over the encoded block: the entry of that name with its byte range, the keys and
    /// starts of the entries sharing the hash, the byte range of their run (empty, where such
    /// entries would go, when there are none), and where the leaf's entries end.
    fn scan_hash(
        &self,
        number: u64,
        block: &[u8],
        hash: u64,
        name: &[u8],
    ) -> Result<HashScan, MapError> {
        let mut scan = HashScan {
            found: None,
            same_hash: Vec::new(),
            hash_run: LEAF_HEADER_BYTES..LEAF_HEADER_BYTES,
            used_end: LEAF_HEADER_BYTES,
        };
        let mut run_started = false;
        self.scan_leaf(number, block, |key, entry_name, value, kind| {
            let start = scan.used_end;
            let end = start + ENTRY_FIXED_BYTES + entry_name.len() + value.len();
            let entry_hash = key >> COLLISION_BITS;
            if entry_hash < hash {
                scan.hash_run = end..end;
            } else if entry_hash == hash {
                if !run_started {
                    scan.hash_run = start..start;
                    run_started = true;
                }
                scan.hash_run.end = end;
                scan.same_hash.push((key, start));
                if entry_name == name {
                    let entry = Entry {
                        key,
                        name: entry_name.to_vec(),
                        value: value.to_vec(),
                        kind,
                    };
                    scan.found = Some((entry, start..end));
                }
            }
            scan.used_end = end;
            true
        })?;
        Ok(scan)
    }

    /// `scan_leaf_bytes` of leaf `number`, its errors naming the map and the leaf.
    fn scan_leaf(
        &self,
        number: u64,
        block: &[u8],
        each: impl FnMut(u64, &[u8], &[u8], ValueKind) -> bool,
    ) -> Result<u32, MapError> {
        scan_leaf_bytes(block, each).map_err(|what| self.corrupt(&format!("leaf {number}: {what}")))
    }

    /// Writes leaf `number` (its encoded bytes, at most `leaf_capacity`), and the header
    /// too when `header_changed`. A lone first leaf and the header are one block, always
    /// written together.
    fn write_leaf_bytes(
        &self,
        tx: MapTx<'_>,
        header: &Header,
        number: u64,
        mut leaf: Vec<u8>,
        header_changed: bool,
    ) {
        assert!(leaf.len() <= header.leaf_capacity(), "leaf overflow");
        if header.leaf_embedded() {
            debug_assert_eq!(number, 0);
            let mut block = encode_header(header);
            block[EMBEDDED_LEAF_OFFSET..EMBEDDED_LEAF_OFFSET + leaf.len()].copy_from_slice(&leaf);
            self.write(tx, HEADER_BLKID, block);
            return;
        }
        leaf.resize(MAP_BLOCK_BYTES as usize, 0);
        self.write(tx, header.layout.leaf_blkid(number), leaf);
        if header_changed {
            self.write_header(tx, header);
        }
    }

    fn read(&self, blkid: u64) -> Result<Bytes, MapError> {
        match self.objset.read_block(self.object, blkid)? {
            Some(block) if block.len() == MAP_BLOCK_BYTES as usize => Ok(block),
            Some(block) => Err(self.corrupt(&format!("block {blkid} of {} bytes", block.len()))),
            None => Err(self.corrupt(&format!("block {blkid} is a hole"))),
        }
    }

    fn write(&self, tx: MapTx<'_>, blkid: u64, block: Vec<u8>) {
        if self
            .objset
            .write_block(tx.txg, self.object, blkid, Bytes::from(block))
        {
            tx.add_dirty(u64::from(MAP_BLOCK_BYTES));
        }
    }

    fn corrupt(&self, what: &str) -> MapError {
        MapError::Corrupt(format!("map object {}: {what}", self.object))
    }
}

/// A map's header block (`MAP_BLOCK_BYTES` bytes), checked; the error says what is wrong.
fn decode_header(block: &[u8]) -> Result<Header, String> {
    if block.len() != MAP_BLOCK_BYTES as usize {
        return Err(format!("header block of {} bytes", block.len()));
    }
    let u64_at = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().unwrap_or([0; 4]));
    if u64_at(0) != MAP_MAGIC {
        return Err(String::from("bad header magic"));
    }
    let layout =
        Layout::of_version(u32_at(8)).ok_or_else(|| format!("unknown version {}", u32_at(8)))?;
    let depth = u32_at(12);
    if depth > DEPTH_MAX {
        return Err(format!("depth {depth}"));
    }
    let mut header = Header {
        layout,
        depth,
        entries: u64_at(16),
        leaves: u64_at(24),
        salt: u64_at(32),
        inline_table: Vec::new(),
    };
    if header.leaves == 0 || header.leaves > layout.leaves_max {
        return Err(format!("{} leaves", header.leaves));
    }
    if header.leaf_embedded() && depth != 0 {
        return Err(format!("one leaf at depth {depth}"));
    }
    if depth <= INLINE_DEPTH_MAX {
        header.inline_table = (0..1usize << depth)
            .map(|slot| u64_at(HEADER_FIXED_BYTES + slot * 8))
            .collect();
    }
    Ok(header)
}

/// A header block, zero past the fixed fields and the inline table (a lone first leaf is
/// added by `write_leaf_bytes`).
fn encode_header(header: &Header) -> Vec<u8> {
    let mut block = vec![0u8; MAP_BLOCK_BYTES as usize];
    block[0..8].copy_from_slice(&MAP_MAGIC.to_le_bytes());
    block[8..12].copy_from_slice(&header.layout.version.to_le_bytes());
    block[12..16].copy_from_slice(&header.depth.to_le_bytes());
    block[16..24].copy_from_slice(&header.entries.to_le_bytes());
    block[24..32].copy_from_slice(&header.leaves.to_le_bytes());
    block[32..40].copy_from_slice(&header.salt.to_le_bytes());
    for (slot, leaf) in header.inline_table.iter().enumerate() {
        let at = HEADER_FIXED_BYTES + slot * 8;
        block[at..at + 8].copy_from_slice(&leaf.to_le_bytes());
    }
    block
}

/// Walks a leaf's entries in `block` in place, checking each against the block's
/// bounds and the keys' order (a damaged leaf is an error, never a guess), and hands each
/// to `each` without copying it, until `each` returns false; returns the leaf's local
/// depth. Lookups use it directly: decoding a whole leaf into owned entries cost an
/// allocation per name for every lookup.
fn scan_leaf_bytes(
    block: &[u8],
    mut each: impl FnMut(u64, &[u8], &[u8], ValueKind) -> bool,
) -> Result<u32, String> {
    // Real leaves are a block or the header block's tail; a shorter slice is damage (or a
    // fuzzer's input), never an index past its end.
    if block.len() < LEAF_HEADER_BYTES {
        return Err(format!("{} bytes", block.len()));
    }
    let magic = u32::from_le_bytes(block[0..4].try_into().unwrap_or([0; 4]));
    if magic != LEAF_MAGIC {
        return Err("bad magic".into());
    }
    let local_depth = u32::from(block[4]);
    let count = u16::from_le_bytes([block[6], block[7]]) as usize;
    let mut at = LEAF_HEADER_BYTES;
    let mut previous_key = None;
    for _ in 0..count {
        let fixed = block
            .get(at..at + ENTRY_FIXED_BYTES)
            .ok_or("entry past its end")?;
        let key = u64::from_le_bytes(fixed[0..8].try_into().unwrap_or([0; 8]));
        let name_len = fixed[8] as usize;
        let value_field = u16::from_le_bytes([fixed[9], fixed[10]]);
        let kind = if value_field & VALUE_INDIRECT_BIT == 0 {
            ValueKind::Inline
        } else {
            ValueKind::Indirect
        };
        let value_len = usize::from(value_field & !VALUE_INDIRECT_BIT);
        let name_at = at + ENTRY_FIXED_BYTES;
        let value_at = name_at + name_len;
        let end = value_at + value_len;
        if end > block.len() || value_len > VALUE_BYTES_MAX || key >> KEY_BITS != 0 {
            return Err("entry out of bounds".into());
        }
        if previous_key.is_some_and(|previous| previous >= key) {
            return Err("keys out of order".into());
        }
        previous_key = Some(key);
        if !each(key, &block[name_at..value_at], &block[value_at..end], kind) {
            break;
        }
        at = end;
    }
    Ok(local_depth)
}

/// The table slot of `key` at the map's depth.
fn bucket(header: &Header, key: u64) -> u64 {
    if header.depth == 0 {
        0
    } else {
        key >> (KEY_BITS - header.depth)
    }
}

fn check_sizes(name: &[u8], value: &[u8]) -> Result<(), MapError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(MapError::NameTooLong);
    }
    if value.len() > VALUE_BYTES_MAX {
        return Err(MapError::Invalid(format!(
            "a value of {} bytes (at most {VALUE_BYTES_MAX})",
            value.len()
        )));
    }
    Ok(())
}

/// A map's blocks as bytes, without an object set: the decoders and encoders `HashedMap` itself
/// uses, reachable for cairn-fs's `tests/format_doc.rs` (sizes of the documented layouts;
/// `cairn_fs::raw` re-exports them) and the fuzz cases in `cairn-fuzz-cases`. The map's users
/// do not call this module.
#[doc(hidden)]
pub mod raw {
    use super::{Entry, Header, Layout, Leaf};

    /// The fields of a map's header block (block 0).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct MapHeader {
        pub version: u32,
        pub depth: u32,
        pub entries: u64,
        pub leaves: u64,
        pub salt: u64,
        /// The table while the depth is at most `INLINE_DEPTH_MAX`; empty otherwise.
        pub inline_table: Vec<u64>,
    }

    /// Decodes and checks a header block, as `HashedMap` does on every access.
    pub fn decode_header(block: &[u8]) -> Result<MapHeader, String> {
        let header = super::decode_header(block)?;
        Ok(MapHeader {
            version: header.layout.version,
            depth: header.depth,
            entries: header.entries,
            leaves: header.leaves,
            salt: header.salt,
            inline_table: header.inline_table,
        })
    }

    /// A header block as `HashedMap` writes it (zero past the table).
    pub fn encode_header(header: &MapHeader) -> Result<Vec<u8>, String> {
        let layout = Layout::of_version(header.version)
            .ok_or_else(|| format!("unknown version {}", header.version))?;
        if header.inline_table.len() > 1 << super::INLINE_DEPTH_MAX {
            return Err(format!("{} inline table slots", header.inline_table.len()));
        }
        Ok(super::encode_header(&Header {
            layout,
            depth: header.depth,
            entries: header.entries,
            leaves: header.leaves,
            salt: header.salt,
            inline_table: header.inline_table.clone(),
        }))
    }

    /// A leaf's local depth and entries, checked as `HashedMap` checks them.
    pub fn decode_leaf(bytes: &[u8]) -> Result<(u8, Vec<Entry>), String> {
        let mut entries = Vec::new();
        let local_depth = super::scan_leaf_bytes(bytes, |key, name, value, kind| {
            entries.push(Entry {
                key,
                name: name.to_vec(),
                value: value.to_vec(),
                kind,
            });
            true
        })?;
        // The depth is one byte on disk.
        Ok((local_depth as u8, entries))
    }

    /// A leaf's bytes as `HashedMap` writes them, unpadded.
    pub fn encode_leaf(local_depth: u8, entries: &[Entry]) -> Vec<u8> {
        super::encode_leaf(&Leaf {
            local_depth: u32::from(local_depth),
            entries: entries.to_vec(),
        })
    }
}
