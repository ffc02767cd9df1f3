//! Patching a pool's device the way a crafted image would: blocks are rewritten with the
//! checksum in every parent up to the uberblocks recomputed (block, parent pointer, dnode,
//! object-set root, directory record, MOS, uberblock), using `cairn-format`'s own decoders and
//! encoders, so the damage passes verification and reaches the validators.
//!
//! Shared by the engine's `tests/crafted.rs` and the CLI's `tests/crafted_cli.rs` (included
//! by path). Works on single-device pools whose trees are shallow (the helpers assert it).

#![allow(dead_code)]

use cairn_dataset::{DatasetDirectory, DatasetRecord, DirectoryRecord};
use cairn_format::dnode::{DNODE_SIZE, DNODES_PER_BLOCK, Dnode, ObjsetPhys};
use cairn_format::label::{
    LABEL_CONFIG_OFFSET, LABEL_CONFIG_SIZE, LABEL_COUNT, UBERBLOCK_RING_SLOTS, UBERBLOCK_SLOT_SIZE,
    VDEV_DATA_START, label_offset, uberblock_offset,
};
use cairn_format::{BlockPointer, LabelConfig, Uberblock};
use cairn_object::map::raw;
use cairn_object::map::{EMBEDDED_LEAF_OFFSET, Entry};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Object of the dataset directory (a hashed map) in the MOS, and of a volume's data in its object set.
pub const DIRECTORY_OBJECT: u64 = 1;
pub const VOLUME_OBJECT: u64 = cairn_dataset::VOLUME_OBJECT;

/// The one device of a single-device pool, opened for patching.
pub struct Image {
    pub file: std::fs::File,
    pub size_bytes: u64,
}

impl Image {
    pub fn open(path: &Path) -> Image {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open device file");
        let size_bytes = file.metadata().expect("stat device").len();
        Image { file, size_bytes }
    }

    pub fn read(&self, bp: &BlockPointer) -> Vec<u8> {
        let mut data = vec![0u8; bp.psize as usize];
        self.file
            .read_exact_at(&mut data, VDEV_DATA_START + bp.dvas[0].offset)
            .expect("read block");
        assert_eq!(bp.checksum_algorithm.compute(&data), bp.checksum);
        data
    }

    /// Writes `data` over every copy of `bp` and returns the pointer with its new checksum.
    pub fn rewrite(&self, bp: &BlockPointer, data: &[u8]) -> BlockPointer {
        assert_eq!(
            data.len(),
            bp.psize as usize,
            "a patch keeps the block's size"
        );
        for dva in bp.copies() {
            self.file
                .write_all_at(data, VDEV_DATA_START + dva.offset)
                .expect("write block");
        }
        BlockPointer {
            checksum: bp.checksum_algorithm.compute(data),
            ..*bp
        }
    }

    /// Every uberblock slot that decodes: (byte offset, uberblock).
    pub fn uberblocks(&self) -> Vec<(u64, Uberblock)> {
        let mut found = Vec::new();
        for label in 0..LABEL_COUNT {
            for slot in 0..UBERBLOCK_RING_SLOTS {
                let offset = uberblock_offset(label, self.size_bytes, slot);
                let mut bytes = vec![0u8; UBERBLOCK_SLOT_SIZE as usize];
                self.file
                    .read_exact_at(&mut bytes, offset)
                    .expect("read slot");
                if let Ok(ub) = Uberblock::decode(&bytes) {
                    found.push((offset, ub));
                }
            }
        }
        found
    }

    pub fn newest(&self) -> Uberblock {
        self.uberblocks()
            .into_iter()
            .map(|(_, ub)| ub)
            .max_by_key(|ub| ub.txg)
            .expect("an uberblock")
    }

    /// Erases every uberblock but the newest, so import cannot fall back to an older,
    /// undamaged tree.
    pub fn erase_older_uberblocks(&self) {
        let newest = self.newest().txg;
        for (offset, ub) in self.uberblocks() {
            if ub.txg != newest {
                let blank = vec![0u8; UBERBLOCK_SLOT_SIZE as usize];
                self.file.write_all_at(&blank, offset).expect("erase slot");
            }
        }
    }

    /// Rewrites every uberblock through `change` (which returns false to leave one alone);
    /// returns how many were rewritten.
    pub fn patch_uberblocks(&self, change: impl Fn(&mut Uberblock) -> bool) -> usize {
        let mut patched = 0;
        for (offset, mut ub) in self.uberblocks() {
            if change(&mut ub) {
                self.file
                    .write_all_at(&ub.encode_slot(), offset)
                    .expect("write uberblock");
                patched += 1;
            }
        }
        patched
    }

    /// Rewrites the pool config in all four labels through `change`.
    pub fn edit_label_config(&self, change: impl Fn(&mut LabelConfig)) {
        for label in 0..LABEL_COUNT {
            let offset = label_offset(label, self.size_bytes) + LABEL_CONFIG_OFFSET;
            let mut bytes = vec![0u8; LABEL_CONFIG_SIZE as usize];
            self.file
                .read_exact_at(&mut bytes, offset)
                .expect("read label");
            let mut config = LabelConfig::decode(&bytes).expect("label config");
            change(&mut config);
            let encoded = config.encode().expect("encode label config");
            self.file
                .write_all_at(&encoded, offset)
                .expect("write label");
        }
    }

    /// Object set root at `root`: the dnode of `object` (its dnode block must be a direct
    /// pointer of the meta-dnode).
    pub fn dnode(&self, root: &BlockPointer, object: u64) -> Dnode {
        let objset = ObjsetPhys::decode(&self.read(root)).expect("object set root");
        let (block, slot) = dnode_place(&objset, object);
        let data = self.read(&objset.meta_dnode.block_pointers[block]);
        Dnode::decode(&data[slot..slot + DNODE_SIZE]).expect("dnode")
    }

    /// Replaces the dnode of `object` in the object set at `root`; returns the new root pointer.
    pub fn replace_dnode(&self, root: &BlockPointer, object: u64, dnode: &Dnode) -> BlockPointer {
        let mut objset = ObjsetPhys::decode(&self.read(root)).expect("object set root");
        let (block, slot) = dnode_place(&objset, object);
        let bp = objset.meta_dnode.block_pointers[block];
        let mut data = self.read(&bp);
        dnode.encode(&mut data[slot..slot + DNODE_SIZE]);
        objset.meta_dnode.block_pointers[block] = self.rewrite(&bp, &data);
        self.rewrite(root, &objset.encode_block())
    }

    /// The MOS root of the newest uberblock.
    pub fn mos_root(&self) -> BlockPointer {
        self.newest().root_bp
    }

    /// The directory map's dnode and first block, which holds its header and, in a small
    /// pool, its one leaf (embedded) with every record.
    pub fn directory(&self) -> (Dnode, Vec<u8>) {
        let dnode = self.dnode(&self.mos_root(), DIRECTORY_OBJECT);
        assert_eq!(dnode.levels, 1, "the directory map fits in direct blocks");
        let data = self.read(&dnode.block_pointers[0]);
        let header = raw::decode_header(&data).expect("directory map header");
        assert_eq!(
            header.leaves, 1,
            "a small pool's directory is one embedded leaf"
        );
        (dnode, data)
    }

    /// Every record (name, value) of the directory's embedded leaf.
    fn directory_entries(data: &[u8]) -> Vec<Entry> {
        raw::decode_leaf(&data[EMBEDDED_LEAF_OFFSET..])
            .expect("directory leaf")
            .1
    }

    /// Replaces the first block of the directory map (same length) in the newest MOS and in
    /// every uberblock that shares it.
    pub fn replace_directory_block(&self, dnode: &Dnode, data: &[u8]) {
        let old_root = self.mos_root();
        let mut dnode = dnode.clone();
        dnode.block_pointers[0] = self.rewrite(&dnode.block_pointers[0], data);
        let new_root = self.replace_dnode(&old_root, DIRECTORY_OBJECT, &dnode);
        let patched = self.patch_uberblocks(|ub| {
            let same = ub.root_bp == old_root;
            if same {
                ub.root_bp = new_root;
            }
            same
        });
        assert!(patched > 0);
    }

    /// `dataset`'s record in the directory and its map entry.
    fn find_record(data: &[u8], dataset: &str) -> (Entry, DatasetRecord) {
        Self::directory_entries(data)
            .into_iter()
            .find_map(
                |entry| match DatasetDirectory::decode_record(&entry.name, &entry.value) {
                    Ok(DirectoryRecord::Dataset(record)) if record.name == dataset => {
                        Some((entry, record))
                    }
                    _ => None,
                },
            )
            .expect("the dataset's record")
    }

    /// Changes one dataset's record in the directory, keeping the value's length.
    pub fn edit_record(&self, dataset: &str, edit: impl FnOnce(&mut DatasetRecord)) {
        let (dnode, mut data) = self.directory();
        let (entry, mut record) = Self::find_record(&data, dataset);
        edit(&mut record);
        let (_, value) = DatasetDirectory::encode_record(&DirectoryRecord::Dataset(record));
        assert_eq!(
            value.len(),
            entry.value.len(),
            "the edit keeps the record's length"
        );
        // The entry is its key, name and value; the name (9 bytes) is unique in the leaf.
        let at = data
            .windows(entry.name.len())
            .position(|window| window == entry.name.as_slice())
            .expect("the entry's name in the leaf")
            + entry.name.len();
        assert_eq!(&data[at..at + value.len()], entry.value.as_slice());
        data[at..at + value.len()].copy_from_slice(&value);
        self.replace_directory_block(&dnode, &data);
    }

    /// The root of `dataset`'s object set, as the directory records it.
    pub fn dataset_root(&self, dataset: &str) -> BlockPointer {
        let (_, data) = self.directory();
        Self::find_record(&data, dataset).1.objset_bp().unwrap()
    }

    /// Applies `edit` to the volume's data dnode and links the result up to the uberblocks.
    pub fn edit_volume_dnode(&self, dataset: &str, edit: impl FnOnce(&mut Dnode)) {
        let root = self.dataset_root(dataset);
        let mut dnode = self.dnode(&root, VOLUME_OBJECT);
        assert_eq!(
            dnode.levels, 1,
            "the test volume's blocks are direct pointers"
        );
        edit(&mut dnode);
        let new_root = self.replace_dnode(&root, VOLUME_OBJECT, &dnode);
        self.edit_record(dataset, |record| record.set_objset_bp(&new_root));
    }
}

pub fn dnode_place(objset: &ObjsetPhys, object: u64) -> (usize, usize) {
    assert_eq!(
        objset.meta_dnode.levels, 1,
        "dnode blocks are direct pointers"
    );
    let per_block = DNODES_PER_BLOCK;
    (
        (object / per_block) as usize,
        (object % per_block) as usize * DNODE_SIZE,
    )
}
