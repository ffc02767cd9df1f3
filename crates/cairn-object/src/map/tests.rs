//! The map alone, over an object set on a memory device (`crate::tests::volume_objset`): what
//! its users rely on, with no filesystem. Maps of earlier versions are grown in cairn-engine's
//! `tests/filesystem.rs`.

use super::*;
use crate::tests::{sync, volume_objset};
use cairn_format::ObjectType;
use std::cell::Cell;

const MAP: u64 = 5;
const SALT: u64 = 0x5eed;

/// An empty map in object `MAP`, made in `txg`.
fn new_map(objset: &ObjectSet, txg: u64) -> HashedMap<'_> {
    objset.create_object(txg, MAP, ObjectType::Directory, MAP_BLOCK_BYTES, 1);
    let map = HashedMap::new(objset, MAP);
    map.create(MapTx::syncing(txg), SALT).unwrap();
    map
}

fn header_of(objset: &ObjectSet) -> raw::MapHeader {
    raw::decode_header(&objset.read_block(MAP, HEADER_BLKID).unwrap().unwrap()).unwrap()
}

#[test]
fn names_are_added_found_changed_and_removed_across_syncs() {
    let (objset, io) = volume_objset();
    let map = new_map(&objset, 1);
    let tx = MapTx::syncing(1);
    let key = map.insert(tx, b"snap1", b"one").unwrap();
    assert!(matches!(
        map.insert(tx, b"snap1", b"again"),
        Err(MapError::Exists)
    ));
    map.insert_as(tx, b"big", &7u64.to_le_bytes(), ValueKind::Indirect)
        .unwrap();
    sync(&objset, &io, 1);

    let entry = map.get(b"snap1").unwrap().unwrap();
    assert_eq!(
        (entry.key, &entry.value[..], entry.kind),
        (key, &b"one"[..], ValueKind::Inline)
    );
    assert_eq!(map.get(b"big").unwrap().unwrap().kind, ValueKind::Indirect);
    assert!(map.get(b"none").unwrap().is_none());

    let tx = MapTx::syncing(2);
    map.set_value(tx, b"snap1", b"uno").unwrap();
    assert_eq!(
        map.get(b"snap1").unwrap().unwrap().key,
        key,
        "a new value keeps the key"
    );
    assert!(matches!(
        map.set_value(tx, b"none", b"x"),
        Err(MapError::NotFound)
    ));
    assert_eq!(map.remove(tx, b"snap1").unwrap().unwrap().value, b"uno");
    assert!(map.remove(tx, b"snap1").unwrap().is_none());
    sync(&objset, &io, 2);
    assert_eq!(map.len().unwrap(), 1);
    assert!(map.get(b"snap1").unwrap().is_none());
}

#[test]
fn bad_names_and_values_are_refused_and_change_nothing() {
    let (objset, _io) = volume_objset();
    let map = new_map(&objset, 1);
    let tx = MapTx::syncing(1);
    let too_long = [b'n'; NAME_BYTES_MAX + 1];
    assert!(matches!(
        map.insert(tx, b"", b""),
        Err(MapError::NameTooLong)
    ));
    assert!(matches!(
        map.insert(tx, &too_long, b""),
        Err(MapError::NameTooLong)
    ));
    let too_large = [0u8; VALUE_BYTES_MAX + 1];
    assert!(matches!(
        map.insert(tx, b"n", &too_large),
        Err(MapError::Invalid(_))
    ));
    assert!(map.is_empty().unwrap());
}

/// Enough long names to split leaves past the header's inline table (depth > 8): every
/// name is found, and a listing is in strictly increasing key order and resumes from any key.
#[test]
fn a_map_grows_past_its_inline_table_and_lists_in_key_order() {
    let (objset, io) = volume_objset();
    let map = new_map(&objset, 1);
    let tx = MapTx::syncing(1);
    let name = |i: u32| format!("{i:0>250}").into_bytes();
    let count = 5_000u32;
    for i in 0..count {
        map.insert(tx, &name(i), &i.to_le_bytes()).unwrap();
    }
    sync(&objset, &io, 1);
    let header = header_of(&objset);
    assert!(header.depth > INLINE_DEPTH_MAX, "depth {}", header.depth);
    assert!(objset.read_block(MAP, TABLE_START_BLKID).unwrap().is_some());
    assert_eq!(map.len().unwrap(), u64::from(count));
    for i in (0..count).step_by(97) {
        assert_eq!(map.get(&name(i)).unwrap().unwrap().value, i.to_le_bytes());
    }

    let mut keys = Vec::new();
    let mut values = Vec::new();
    map.for_each_from(0, |entry| {
        keys.push(entry.key);
        values.push(u32::from_le_bytes(entry.value[..4].try_into().unwrap()));
        true
    })
    .unwrap();
    assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
    values.sort_unstable();
    assert_eq!(values, (0..count).collect::<Vec<_>>());
    let middle = keys.len() / 2;
    let mut resumed = Vec::new();
    map.for_each_from(keys[middle], |entry| {
        resumed.push(entry.key);
        true
    })
    .unwrap();
    assert_eq!(resumed, keys[middle..]);
}

#[test]
fn a_counted_change_counts_each_block_it_newly_dirties_once() {
    let (objset, io) = volume_objset();
    let map = new_map(&objset, 1);
    sync(&objset, &io, 1);
    let dirty = Cell::new(0u64);
    let count = |bytes| dirty.set(dirty.get() + bytes);
    let tx = MapTx::counted(2, &count);
    map.insert(tx, b"a", b"1").unwrap();
    // A one-leaf map is the header block alone.
    assert_eq!(dirty.get(), u64::from(MAP_BLOCK_BYTES));
    map.insert(tx, b"b", b"2").unwrap();
    assert_eq!(dirty.get(), u64::from(MAP_BLOCK_BYTES), "counted twice");
    map.insert(MapTx::syncing(2), b"c", b"3").unwrap();
    assert_eq!(dirty.get(), u64::from(MAP_BLOCK_BYTES));
}

#[test]
fn a_damaged_block_is_an_error_naming_the_map_object() {
    let (objset, _io) = volume_objset();
    let map = new_map(&objset, 1);
    let mut header = objset
        .read_block(MAP, HEADER_BLKID)
        .unwrap()
        .unwrap()
        .to_vec();
    header[0] ^= 1;
    objset.write_block(1, MAP, HEADER_BLKID, Bytes::from(header));
    match map.get(b"a") {
        Err(MapError::Corrupt(what)) => {
            assert_eq!(what, format!("map object {MAP}: bad header magic"));
        }
        other => panic!("{other:?}"),
    }
}

/// The bytes the map writes, pinned: an empty map's header block, and a name's key (the
/// keyed BLAKE3 hash of salt and object). A change here is a change of the on-disk format.
#[test]
fn the_on_disk_form_is_pinned() {
    let (objset, _io) = volume_objset();
    let map = new_map(&objset, 1);
    let block = objset.read_block(MAP, HEADER_BLKID).unwrap().unwrap();
    let mut expected = vec![0u8; MAP_BLOCK_BYTES as usize];
    expected[..8].copy_from_slice(b"CAIRNMAP");
    expected[8..12].copy_from_slice(&3u32.to_le_bytes());
    expected[24..32].copy_from_slice(&1u64.to_le_bytes());
    expected[32..40].copy_from_slice(&SALT.to_le_bytes());
    expected[EMBEDDED_LEAF_OFFSET..EMBEDDED_LEAF_OFFSET + 4].copy_from_slice(b"LEAF");
    assert_eq!(&block[..], &expected[..]);
    // The top 54 bits of the hash, then collision number 0.
    let key = map.insert(MapTx::syncing(1), b"snap1", b"").unwrap();
    assert_eq!(key, 0x0951_2c5c_7d54_1400);
}

#[test]
fn removing_many_names_at_once_leaves_what_removing_them_one_by_one_does() {
    // The same map in two object sets: one loses a third of its names (and two names it
    // never had) name by name, the other in one call. Every block of the two maps is the
    // same, and the call reports what it removed.
    let sets = [volume_objset(), volume_objset()];
    let maps: Vec<HashedMap<'_>> = sets.iter().map(|(objset, _)| new_map(objset, 1)).collect();
    let name = |i: u32| format!("snapshot-record-{i}").into_bytes();
    let count = 3_000u32;
    let tx = MapTx::syncing(1);
    for map in &maps {
        for i in 0..count {
            map.insert(tx, &name(i), &[i as u8; 40]).unwrap();
        }
    }
    for (objset, io) in &sets {
        sync(objset, io, 1);
    }
    let tx = MapTx::syncing(2);
    let gone: Vec<Vec<u8>> = (0..count)
        .filter(|i| i % 3 == 1)
        .map(name)
        .chain([b"never-there".to_vec(), name(count + 7)])
        .collect();
    for one in &gone {
        maps[0].remove(tx, one).unwrap();
    }
    let names: Vec<&[u8]> = gone.iter().map(Vec::as_slice).collect();
    let removed = maps[1].remove_many(tx, &names).unwrap();
    assert_eq!(removed.len(), gone.len());
    for (index, entry) in removed.iter().enumerate() {
        match entry {
            Some(entry) => assert_eq!(entry.name, gone[index]),
            None => assert!(index >= gone.len() - 2, "{index} not removed"),
        }
    }
    assert_eq!(
        maps[1].len().unwrap(),
        u64::from(count) - (gone.len() as u64 - 2)
    );
    for (objset, io) in &sets {
        sync(objset, io, 2);
    }
    let leaves = header_of(&sets[0].0).leaves;
    assert!(leaves > 8, "{leaves} leaves: too few to group by");
    let blocks = |objset: &ObjectSet| -> Vec<Option<Bytes>> {
        (0..leaves + 2)
            .chain(TABLE_START_BLKID..TABLE_START_BLKID + 2)
            .map(|blkid| objset.read_block(MAP, blkid).unwrap())
            .collect()
    };
    assert!(blocks(&sets[0].0) == blocks(&sets[1].0), "the maps differ");
    assert!(maps[1].get(&name(1)).unwrap().is_none());
    assert!(maps[1].get(&name(2)).unwrap().is_some());
    // Nothing left to remove writes nothing.
    let again = maps[1].remove_many(MapTx::syncing(3), &names).unwrap();
    assert!(again.iter().all(Option::is_none));
    assert!(!sets[1].0.is_dirty(3));
}
