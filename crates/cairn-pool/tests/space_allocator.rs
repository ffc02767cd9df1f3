//! `SpaceAllocator` behaviour: placement (contiguity, vdev rotation, ditto copies, the 96% rule),
//! deferred frees, errors, accounting and slop, and the space-log round trip (replay of every
//! change taken, and of a checkpoint), with a property test over random workloads that checks
//! every step against a model of live and deferred extents.

use cairn_format::{Dva, SpaceLogEntry, SpaceOp};
use cairn_pool::space::{
    DEFER_TXGS, DeferredFree, ROTOR_CHUNK_BYTES, SpaceAllocator, SpaceClass, SpaceError, VdevSpace,
    metaslab_shift_for,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

fn vdev(vdev: u32, data_size_bytes: u64) -> VdevSpace {
    VdevSpace {
        vdev,
        class: SpaceClass::Normal,
        data_size_bytes,
        ashift: 12,
        metaslab_shift: metaslab_shift_for(data_size_bytes),
        raidz: None,
    }
}

fn pool(sizes: &[u64]) -> SpaceAllocator {
    let vdevs: Vec<VdevSpace> = (0u32..)
        .zip(sizes)
        .map(|(id, &size)| vdev(id, size))
        .collect();
    SpaceAllocator::new(&vdevs).unwrap()
}

/// One vdev of `size` bytes cut into metaslabs of `2^metaslab_shift`.
fn single(size: u64, metaslab_shift: u8) -> SpaceAllocator {
    SpaceAllocator::new(&[VdevSpace {
        vdev: 0,
        class: SpaceClass::Normal,
        data_size_bytes: size,
        ashift: 12,
        metaslab_shift,
        raidz: None,
    }])
    .unwrap()
}

fn metaslab_of(dva: &Dva) -> u64 {
    dva.offset >> 20
}

/// Frees `dvas` in `txg`, then syncs until they are reusable; returns the next open txg.
fn free_and_release(space: &mut SpaceAllocator, dvas: &[Dva], txg: u64) -> u64 {
    for dva in dvas {
        space.free(dva, txg).unwrap();
    }
    for synced in txg..=txg + DEFER_TXGS {
        space.sync_done(synced);
    }
    txg + DEFER_TXGS + 1
}

#[test]
fn new_pool_sizes_and_metaslab_counts() {
    let space = pool(&[64 * MIB]);
    let stats = space.stats();
    assert_eq!(stats.size_bytes, 64 * MIB);
    assert_eq!(stats.free_bytes, 64 * MIB);
    assert_eq!(stats.allocated_bytes, 0);
    assert_eq!(stats.metaslab_count, 64);
    assert_eq!(stats.fragmentation_percent, 0);
    assert_eq!(stats.vdevs.len(), 1);
    // A data region that is not a whole number of metaslabs keeps its tail as a short one.
    let space = single(10 * MIB + 12 * KIB, 20);
    assert_eq!(space.stats().metaslab_count, 11);
    assert_eq!(space.size_bytes(), 10 * MIB + 12 * KIB);
    space.assert_invariants();
}

#[test]
fn invalid_configurations_are_refused() {
    let good = vdev(0, 64 * MIB);
    let cases = [
        vec![good, good],
        vec![VdevSpace { ashift: 30, ..good }],
        vec![VdevSpace {
            metaslab_shift: 11,
            ..good
        }],
        vec![VdevSpace {
            data_size_bytes: 100,
            ..good
        }],
        vec![VdevSpace {
            metaslab_shift: 12,
            data_size_bytes: 1 << 40,
            ..good
        }],
    ];
    for vdevs in cases {
        assert!(
            matches!(
                SpaceAllocator::new(&vdevs),
                Err(SpaceError::InvalidConfig { .. })
            ),
            "{vdevs:?}"
        );
    }
    let empty = SpaceAllocator::new(&[]).unwrap();
    assert!(matches!(
        empty.clone().allocate(4096, 1, &[]),
        Err(SpaceError::NoSpace { .. })
    ));
}

#[test]
fn consecutive_allocations_are_contiguous() {
    let mut space = pool(&[64 * MIB]);
    // 8 KiB blocks fill the 1 MiB metaslabs front to back and the stream runs straight on
    // into the next one.
    let mut expected = 0;
    for _ in 0..512 {
        let dva = space.allocate(8192, 1, &[]).unwrap();
        assert_eq!(dva.offset, expected);
        assert_eq!(dva.asize, 8192);
        expected += 8192;
    }
    // Mixed sizes, rounded up to the 4 KiB sector, stay adjacent too.
    for size in [1u32, 4096, 5000, 65536, 131072, 512] {
        let dva = space.allocate(size, 1, &[]).unwrap();
        assert_eq!(dva.offset, expected);
        assert_eq!(u64::from(dva.asize), u64::from(size).div_ceil(4096) * 4096);
        expected += u64::from(dva.asize);
    }
    space.assert_invariants();
}

#[test]
fn changes_are_coalesced_per_txg_and_other_txgs_stay() {
    let mut space = pool(&[64 * MIB]);
    let first: Vec<Dva> = (0..10)
        .map(|_| space.allocate(8192, 5, &[]).unwrap())
        .collect();
    let later = space.allocate(4096, 6, &[]).unwrap();
    space.free(&first[3], 6).unwrap();
    space.free(&first[4], 6).unwrap();
    assert_eq!(space.pending_change_txgs(), vec![5, 6]);
    assert_eq!(
        space.take_changes(5),
        vec![SpaceLogEntry {
            vdev: 0,
            op: SpaceOp::Alloc,
            offset: 0,
            length: 80 * KIB,
            txg: 5
        }]
    );
    assert!(space.take_changes(5).is_empty());
    assert_eq!(
        space.take_changes(6),
        vec![
            SpaceLogEntry {
                vdev: 0,
                op: SpaceOp::Alloc,
                offset: later.offset,
                length: 4096,
                txg: 6
            },
            SpaceLogEntry {
                vdev: 0,
                op: SpaceOp::Free,
                offset: first[3].offset,
                length: 16 * KIB,
                txg: 6
            },
        ]
    );
}

#[test]
fn primary_copies_rotate_across_vdevs_in_2_mib_chunks() {
    let mut space = pool(&[64 * MIB, 64 * MIB, 64 * MIB]);
    let dvas: Vec<Dva> = (0..96)
        .map(|_| space.allocate(128 * 1024, 1, &[]).unwrap())
        .collect();
    let chunk_blocks = (ROTOR_CHUNK_BYTES / (128 * KIB)) as usize;
    for (chunk, blocks) in dvas.chunks(chunk_blocks).enumerate() {
        let vdev = (chunk % 3) as u32;
        for pair in blocks.windows(2) {
            assert_eq!(pair[1].offset, pair[0].offset + 128 * KIB, "contiguous");
        }
        assert!(blocks.iter().all(|dva| dva.vdev == vdev), "chunk {chunk}");
    }
    let stats = space.stats();
    for vdev in &stats.vdevs {
        assert_eq!(vdev.allocated_bytes, 4 * MIB);
    }
}

#[test]
fn an_emptier_vdev_takes_larger_chunks() {
    // Chunks scale with each vdev's share of the free space: a vdev three times the size of
    // the other takes about three times the data.
    let mut space = pool(&[64 * MIB, 192 * MIB]);
    let mut bytes = [0u64; 2];
    for _ in 0..256 {
        let dva = space.allocate(64 * 1024, 1, &[]).unwrap();
        bytes[dva.vdev as usize] += u64::from(dva.asize);
    }
    assert!(bytes[1] > bytes[0] * 2, "{bytes:?}");
    // Equal vdevs share equally.
    let mut space = pool(&[64 * MIB, 64 * MIB]);
    let mut bytes = [0u64; 2];
    for _ in 0..256 {
        let dva = space.allocate(64 * 1024, 1, &[]).unwrap();
        bytes[dva.vdev as usize] += u64::from(dva.asize);
    }
    assert_eq!(bytes[0], bytes[1]);
}

#[test]
fn ditto_copies_go_to_other_vdevs_when_there_are_some() {
    let mut space = pool(&[64 * MIB, 64 * MIB, 64 * MIB]);
    for _ in 0..200 {
        let a = space.allocate(16384, 1, &[]).unwrap();
        let b = space.allocate(16384, 1, &[a]).unwrap();
        let c = space.allocate(16384, 1, &[a, b]).unwrap();
        assert_ne!(a.vdev, b.vdev);
        assert_ne!(c.vdev, a.vdev);
        assert_ne!(c.vdev, b.vdev);
    }
    // With two vdevs the third copy shares a vdev, but not a metaslab.
    let mut space = pool(&[64 * MIB, 64 * MIB]);
    for _ in 0..200 {
        let a = space.allocate(16384, 1, &[]).unwrap();
        let b = space.allocate(16384, 1, &[a]).unwrap();
        let c = space.allocate(16384, 1, &[a, b]).unwrap();
        assert_ne!(a.vdev, b.vdev);
        let same = if c.vdev == a.vdev { a } else { b };
        assert_eq!(c.vdev, same.vdev);
        assert_ne!(metaslab_of(&c), metaslab_of(&same));
    }
    space.assert_invariants();
}

#[test]
fn ditto_copies_on_one_vdev_use_another_metaslab_and_stay_contiguous() {
    let mut space = pool(&[64 * MIB]);
    let mut previous: Option<(Dva, Dva)> = None;
    for _ in 0..300 {
        let a = space.allocate(8192, 1, &[]).unwrap();
        let b = space.allocate(8192, 1, &[a]).unwrap();
        let c = space.allocate(8192, 1, &[a, b]).unwrap();
        assert_ne!(metaslab_of(&a), metaslab_of(&b));
        assert_ne!(metaslab_of(&c), metaslab_of(&a));
        assert_ne!(metaslab_of(&c), metaslab_of(&b));
        // Each copy stream runs on in its own metaslab while it has room.
        if let Some((pa, pb)) = previous
            && metaslab_of(&pa) == metaslab_of(&a)
            && metaslab_of(&pb) == metaslab_of(&b)
        {
            assert_eq!(a.offset, pa.offset + 8192);
            assert_eq!(b.offset, pb.offset + 8192);
        }
        previous = Some((a, b));
    }
}

#[test]
fn ditto_copy_falls_back_to_the_same_metaslab_when_it_is_the_only_one() {
    let mut space = single(MIB, 20);
    let a = space.allocate(4096, 1, &[]).unwrap();
    let b = space.allocate(4096, 1, &[a]).unwrap();
    assert_eq!(metaslab_of(&a), metaslab_of(&b));
    assert_ne!(a.offset, b.offset);
    assert!(space.is_allocated(&a) && space.is_allocated(&b));
}

#[test]
fn frees_are_not_reused_before_defer_txgs_have_synced() {
    let mut space = single(MIB, 20);
    let dvas: Vec<Dva> = (0..256)
        .map(|_| space.allocate(4096, 1, &[]).unwrap())
        .collect();
    assert!(matches!(
        space.allocate(4096, 1, &[]),
        Err(SpaceError::NoSpace { size_bytes: 4096 })
    ));
    let victim = dvas[100];
    space.free(&victim, 2).unwrap();
    assert!(!space.is_allocated(&victim));
    assert_eq!(space.stats().deferred_bytes, 4096);
    assert_eq!(space.stats().free_bytes, 0);
    assert_eq!(
        space.deferred_extents(),
        vec![DeferredFree {
            txg: 2,
            vdev: 0,
            offset: victim.offset,
            length: 4096
        }]
    );
    for synced in 2..2 + DEFER_TXGS {
        space.sync_done(synced);
        assert!(
            matches!(
                space.allocate(4096, synced + 1, &[]),
                Err(SpaceError::NoSpace { .. })
            ),
            "reused after txg {synced} synced"
        );
    }
    space.sync_done(2 + DEFER_TXGS);
    assert_eq!(space.stats().deferred_bytes, 0);
    let reused = space.allocate(4096, 3 + DEFER_TXGS, &[]).unwrap();
    assert_eq!(reused.offset, victim.offset);
    space.assert_invariants();
}

#[test]
fn best_fit_takes_over_once_a_metaslab_is_96_percent_full() {
    // Nearly full: a 32 KiB hole at the start and a 4 KiB hole at 800 KiB (3.5% free).
    let mut space = single(MIB, 20);
    let dvas: Vec<Dva> = (0..256)
        .map(|_| space.allocate(4096, 1, &[]).unwrap())
        .collect();
    let mut holes: Vec<Dva> = dvas[..8].to_vec();
    holes.push(dvas[200]);
    let txg = free_and_release(&mut space, &holes, 2);
    let dva = space.allocate(4096, txg, &[]).unwrap();
    assert_eq!(dva.offset, 800 * KIB, "the exact-size hole is used");
    let dva = space.allocate(8192, txg, &[]).unwrap();
    assert_eq!(dva.offset, 0, "then the big hole");

    // Same holes plus a 64 KiB one at 900 KiB (9.8% free): still first-fit, which wraps from
    // the cursor at the end of the metaslab to the lowest hole.
    let mut space = single(MIB, 20);
    let dvas: Vec<Dva> = (0..256)
        .map(|_| space.allocate(4096, 1, &[]).unwrap())
        .collect();
    let mut holes: Vec<Dva> = dvas[..8].to_vec();
    holes.push(dvas[200]);
    holes.extend_from_slice(&dvas[225..241]);
    let txg = free_and_release(&mut space, &holes, 2);
    let dva = space.allocate(4096, txg, &[]).unwrap();
    assert_eq!(dva.offset, 0, "first-fit splits the lowest hole");
}

#[test]
fn double_frees_and_bad_extents_are_errors_that_change_nothing() {
    let mut space = pool(&[64 * MIB, 64 * MIB]);
    let a = space.allocate(8192, 1, &[]).unwrap();
    let b = space.allocate(8192, 1, &[]).unwrap();
    space.free(&a, 1).unwrap();
    let before = (space.allocated_extents(), space.deferred_extents());
    assert!(space.fault().is_none(), "accepted frees are no fault");

    let double = space.free(&a, 1).unwrap_err();
    assert!(matches!(double, SpaceError::DoubleFree { vdev: 0, .. }));
    assert!(double.to_string().contains("double free"), "{double}");
    let never = Dva {
        vdev: 0,
        offset: 32 * MIB,
        asize: 4096,
    };
    assert!(matches!(
        space.free(&never, 1),
        Err(SpaceError::DoubleFree { .. })
    ));
    // Partly allocated: b plus the free space after it.
    let partly = Dva { asize: 16384, ..b };
    assert!(matches!(
        space.free(&partly, 1),
        Err(SpaceError::DoubleFree { .. })
    ));
    assert!(matches!(
        space.free(&Dva { vdev: 7, ..b }, 1),
        Err(SpaceError::UnknownVdev { vdev: 7 })
    ));
    assert!(matches!(
        space.free(
            &Dva {
                offset: 64 * MIB - 4096,
                asize: 8192,
                ..b
            },
            1
        ),
        Err(SpaceError::OutOfRange { .. })
    ));
    assert!(matches!(
        space.free(
            &Dva {
                offset: b.offset + 512,
                ..b
            },
            1
        ),
        Err(SpaceError::Misaligned { .. })
    ));
    assert!(matches!(
        space.free(&Dva { asize: 0, ..b }, 1),
        Err(SpaceError::InvalidExtent { .. })
    ));
    assert!(matches!(
        space.allocate(0, 1, &[]),
        Err(SpaceError::InvalidSize { .. })
    ));
    assert_eq!(
        before,
        (space.allocated_extents(), space.deferred_extents())
    );

    // After the defer window the space is free, and freeing it again is still an error.
    space.sync_done(5);
    assert!(matches!(
        space.free(&a, 6),
        Err(SpaceError::DoubleFree { .. })
    ));
    assert!(matches!(
        space.free(&b, 5),
        Err(SpaceError::TxgAlreadySynced {
            txg: 5,
            synced_txg: 5
        })
    ));
    assert!(matches!(
        space.allocate(4096, 4, &[]),
        Err(SpaceError::TxgAlreadySynced { .. })
    ));
    space.free(&b, 6).unwrap();
    space.assert_invariants();
    // The first refusal stays the allocator's fault, whatever came after it.
    match space.fault() {
        Some(SpaceError::FreeRefused { txg: 1, source }) => {
            assert_eq!(**source, double, "the first refused free is kept")
        }
        other => panic!("expected the double free as the fault, got {other:?}"),
    }
}

#[test]
fn unallocate_undoes_an_allocation_of_the_pending_txg() {
    let mut space = pool(&[64 * MIB]);
    let kept = space.allocate(8192, 1, &[]).unwrap();
    let failed = space.allocate(8192, 1, &[]).unwrap();
    space.unallocate(&failed, 1).unwrap();
    assert!(!space.is_allocated(&failed));
    assert_eq!(space.stats().deferred_bytes, 0);
    assert_eq!(space.allocated_extents(), vec![(0, kept.offset, 8192)]);
    assert!(matches!(
        space.unallocate(&failed, 1),
        Err(SpaceError::NotAllocatedInTxg { .. })
    ));
    assert!(matches!(
        space.unallocate(&kept, 2),
        Err(SpaceError::NotAllocatedInTxg { .. })
    ));
    assert_eq!(
        space.take_changes(1),
        vec![SpaceLogEntry {
            vdev: 0,
            op: SpaceOp::Alloc,
            offset: kept.offset,
            length: 8192,
            txg: 1
        }]
    );
    assert!(matches!(
        space.unallocate(&kept, 1),
        Err(SpaceError::NotAllocatedInTxg { .. })
    ));
    space.assert_invariants();
}

#[test]
fn no_space_when_full_and_the_allocator_stays_consistent() {
    let mut space = pool(&[8 * MIB, 4 * MIB]);
    let mut dvas = Vec::new();
    let mut size = 4096u32;
    loop {
        match space.allocate(size, 1, &[]) {
            Ok(dva) => {
                dvas.push(dva);
                // Grow the request now and then, so that holes of many sizes appear.
                if dvas.len() % 7 == 0 && size < 262_144 {
                    size *= 2;
                }
            }
            Err(SpaceError::NoSpace { .. }) if size > 4096 => size /= 2,
            Err(SpaceError::NoSpace { .. }) => break,
            Err(other) => panic!("{other}"),
        }
    }
    let stats = space.stats();
    assert_eq!(stats.free_bytes, 0);
    assert_eq!(stats.allocated_bytes, 12 * MIB);
    let total: u64 = dvas.iter().map(|dva| u64::from(dva.asize)).sum();
    assert_eq!(total, 12 * MIB);
    space.assert_invariants();
    let before = space.allocated_extents();
    assert!(matches!(
        space.allocate(4096, 1, &[dvas[0]]),
        Err(SpaceError::NoSpace { .. })
    ));
    assert_eq!(space.allocated_extents(), before);
    assert!(dvas.iter().all(|dva| space.is_allocated(dva)));
    assert_eq!(
        space.allocated_extents(),
        vec![(0, 0, 8 * MIB), (1, 0, 4 * MIB)]
    );
}

#[test]
fn blocks_larger_than_a_metaslab_span_metaslabs() {
    let mut space = pool(&[64 * MIB]);
    let small = space.allocate(4096, 1, &[]).unwrap();
    let big = space.allocate(16 << 20, 1, &[]).unwrap();
    assert_eq!(u64::from(big.asize), 16 * MIB);
    assert!(big.offset > small.offset);
    assert!(space.is_allocated(&big));
    // Its ditto copy spans other metaslabs.
    let copy = space.allocate(16 << 20, 1, &[big]).unwrap();
    assert!(copy.offset >= big.offset + 16 * MIB || copy.offset + 16 * MIB <= big.offset);
    space.free(&big, 1).unwrap();
    space.assert_invariants();
    let mut rebuilt = pool(&[64 * MIB]);
    rebuilt.replay(space.take_changes(1), 1).unwrap();
    assert_eq!(rebuilt.allocated_extents(), space.allocated_extents());
    assert_eq!(rebuilt.deferred_extents(), space.deferred_extents());
}

#[test]
fn free_space_on_both_sides_of_a_metaslab_boundary_is_still_usable() {
    let mut space = single(2 * MIB, 20);
    let dvas: Vec<Dva> = (0..32)
        .map(|_| space.allocate(65536, 1, &[]).unwrap())
        .collect();
    // The last 64 KiB of metaslab 0 and the first 64 KiB of metaslab 1.
    let txg = free_and_release(&mut space, &dvas[15..17], 2);
    let dva = space.allocate(131072, txg, &[]).unwrap();
    assert_eq!(dva.offset, MIB - 64 * KIB);
    assert_eq!(space.free_bytes(), 0);
    space.assert_invariants();
}

#[test]
fn a_checkpoint_lists_unfree_runs_then_deferred_frees() {
    let mut space = pool(&[64 * MIB, 64 * MIB]);
    let dvas: Vec<Dva> = (0..3)
        .map(|_| space.allocate(8192, 1, &[]).unwrap())
        .collect();
    space.take_changes(1);
    space.sync_done(1);
    space.free(&dvas[1], 2).unwrap();
    space.take_changes(2);
    space.sync_done(2);
    let entries = space.checkpoint_entries(2);
    assert_eq!(
        entries,
        vec![
            SpaceLogEntry {
                vdev: 0,
                op: SpaceOp::Alloc,
                offset: 0,
                length: 24 * KIB,
                txg: 2
            },
            SpaceLogEntry {
                vdev: 0,
                op: SpaceOp::Free,
                offset: 8 * KIB,
                length: 8 * KIB,
                txg: 2
            },
        ]
    );
    let mut rebuilt = pool(&[64 * MIB, 64 * MIB]);
    rebuilt.replay(entries, 2).unwrap();
    assert_eq!(rebuilt.allocated_extents(), space.allocated_extents());
    assert_eq!(rebuilt.deferred_extents(), space.deferred_extents());
    assert_eq!(rebuilt.stats(), space.stats());
}

#[test]
fn a_large_pool_under_churn_stays_fast_and_consistent() {
    // 1 TiB vdev: 256 metaslabs of 4 GiB. Tens of thousands of allocations and frees, with
    // syncs, in well under a second even unoptimised.
    let mut space = pool(&[1 << 40, 1 << 40]);
    assert_eq!(space.stats().metaslab_count, 512);
    let mut live: Vec<Dva> = Vec::new();
    let mut txg = 1;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..40_000u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if seed.is_multiple_of(3) && !live.is_empty() {
            let dva = live.swap_remove((seed >> 8) as usize % live.len());
            space.free(&dva, txg).unwrap();
        } else {
            let size = 4096u32 << ((seed >> 20) % 6);
            live.push(space.allocate(size, txg, &[]).unwrap());
        }
        if step % 1000 == 999 {
            space.take_changes(txg);
            space.sync_done(txg);
            txg += 1;
        }
    }
    space.assert_invariants();
    let mut rebuilt = pool(&[1 << 40, 1 << 40]);
    rebuilt
        .replay(space.checkpoint_entries(txg), txg - 1)
        .unwrap();
    assert_eq!(rebuilt.allocated_extents(), space.allocated_extents());
    // The bound that sizes a checkpoint's blocks: never short, and over by at most the runs
    // split at metaslab boundaries (512), one per vdev, and one per allocation of the txg
    // still open (up to 1,000) when the checkpoint is of the txg before it.
    for checkpoint_txg in [txg - 1, txg] {
        let entries = space.checkpoint_entries(checkpoint_txg).len();
        let bound = space.checkpoint_entry_bound(checkpoint_txg);
        assert!(
            bound >= entries && bound <= entries + 512 + 2 + 1000,
            "txg {checkpoint_txg}: bound {bound} for {entries} entries"
        );
    }
}

#[test]
fn slop_is_kept_from_user_writes_but_not_from_metadata() {
    assert_eq!(pool(&[64 * MIB]).slop_bytes(), 4 * MIB);
    assert_eq!(pool(&[1024 * MIB]).slop_bytes(), 32 * MIB);
    assert_eq!(single(4 * MIB, 20).slop_bytes(), 2 * MIB, "at most half");
    assert_eq!(pool(&[1 << 47]).slop_bytes(), 128 << 30, "at most 128 GiB");

    let mut space = pool(&[64 * MIB]);
    assert_eq!(space.available_bytes(), 60 * MIB);
    assert!(space.can_allocate_user(60 * MIB));
    assert!(!space.can_allocate_user(60 * MIB + 1));
    for _ in 0..(60 * MIB / (128 * KIB)) {
        space.allocate(128 * 1024, 1, &[]).unwrap();
    }
    assert_eq!(space.available_bytes(), 0);
    assert!(!space.can_allocate_user(4096));
    // Metadata may still use the slop.
    space.allocate(128 * 1024, 1, &[]).unwrap();
    assert_eq!(space.free_bytes(), 4 * MIB - 128 * KIB);
}

#[test]
fn fragmentation_shows_in_stats() {
    let mut space = single(16 * MIB, 24);
    let dvas: Vec<Dva> = (0..4096)
        .map(|_| space.allocate(4096, 1, &[]).unwrap())
        .collect();
    let every_other: Vec<Dva> = dvas.iter().step_by(2).copied().collect();
    free_and_release(&mut space, &every_other, 2);
    let stats = space.stats();
    assert_eq!(stats.fragmentation_percent, 100);
    assert_eq!(stats.free_bytes, 8 * MIB);
}

#[test]
fn replay_rejects_inconsistent_logs_naming_the_entry() {
    let entry = |op, offset, length, txg| SpaceLogEntry {
        vdev: 0,
        op,
        offset,
        length,
        txg,
    };
    let cases = [
        (
            vec![
                entry(SpaceOp::Alloc, 0, 8192, 1),
                entry(SpaceOp::Alloc, 4096, 8192, 2),
            ],
            1,
            "already allocated",
        ),
        (
            vec![
                entry(SpaceOp::Alloc, 0, 8192, 1),
                entry(SpaceOp::Free, 0, 8192, 2),
                entry(SpaceOp::Free, 0, 4096, 3),
            ],
            2,
            "double free",
        ),
        (vec![entry(SpaceOp::Free, 0, 4096, 1)], 0, "double free"),
        (
            vec![
                entry(SpaceOp::Alloc, 0, 4096, 1),
                entry(SpaceOp::Alloc, 64 * MIB, 4096, 1),
            ],
            1,
            "outside",
        ),
        (vec![entry(SpaceOp::Alloc, 100, 4096, 1)], 0, "aligned"),
        (
            vec![SpaceLogEntry {
                vdev: 3,
                ..entry(SpaceOp::Alloc, 0, 4096, 1)
            }],
            0,
            "vdev 3",
        ),
        (
            vec![entry(SpaceOp::Alloc, u64::MAX - 4095, 8192, 1)],
            0,
            "invalid extent",
        ),
        (
            vec![
                entry(SpaceOp::Alloc, 0, 4096, 1),
                entry(SpaceOp::Free, 0, 4096, 11),
            ],
            1,
            "newer than the imported txg 10",
        ),
    ];
    for (entries, bad_index, words) in cases {
        let mut space = pool(&[64 * MIB]);
        let error = space.replay(entries.clone(), 10).unwrap_err();
        let SpaceError::Replay {
            index,
            entry,
            source,
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(*index, bad_index);
        assert_eq!(*entry, entries[bad_index]);
        // The entry in the error's own message, why in its cause (said once).
        let message = error.to_string();
        assert!(message.contains(&format!("#{bad_index}")), "{message}");
        let why = source.to_string();
        assert!(why.contains(words), "{message}: {why}");
        assert!(!message.contains(words), "the cause said twice: {message}");
        space.assert_invariants();
    }
}

#[test]
fn replay_keeps_recent_frees_deferred() {
    let entries = vec![
        SpaceLogEntry {
            vdev: 0,
            op: SpaceOp::Alloc,
            offset: 0,
            length: 64 * KIB,
            txg: 5,
        },
        SpaceLogEntry {
            vdev: 0,
            op: SpaceOp::Free,
            offset: 0,
            length: 8 * KIB,
            txg: 6,
        },
        SpaceLogEntry {
            vdev: 0,
            op: SpaceOp::Free,
            offset: 8 * KIB,
            length: 8 * KIB,
            txg: 9,
        },
    ];
    let mut space = pool(&[64 * MIB]);
    space.replay(entries, 9).unwrap();
    assert_eq!(space.allocated_extents(), vec![(0, 16 * KIB, 48 * KIB)]);
    assert_eq!(
        space.deferred_extents(),
        vec![DeferredFree {
            txg: 9,
            vdev: 0,
            offset: 8 * KIB,
            length: 8 * KIB
        }]
    );
    assert_eq!(space.synced_txg(), Some(9));
    // The deferred free comes back after txg 12 syncs.
    space.sync_done(12);
    assert!(space.deferred_extents().is_empty());
    assert_eq!(space.stats().free_bytes, 64 * MIB - 48 * KIB);
    space.assert_invariants();
}

// ---------------------------------------------------------------------------------------------
// Random workloads against a model.

#[derive(Debug, Clone)]
enum Op {
    /// Allocate a block of `sectors` 4 KiB sectors with `copies` DVAs.
    Alloc { sectors: u32, copies: usize },
    /// Free the live block at this index (modulo the count).
    Free { pick: usize },
    /// Undo the newest live block if it was allocated in the open txg.
    Undo,
    /// Finish the open txg.
    Sync,
    /// Remember a checkpoint at the next sync.
    Checkpoint,
    /// Allocate an intent-log block of `sectors` 4 KiB sectors.
    AllocLog { sectors: u32 },
    /// Claim `sectors` sectors at sector `pick_sector` (modulo a little more than the size, so
    /// some claims reach past the end) of the vdev at `pick_vdev` (modulo the count).
    Claim {
        pick_vdev: usize,
        pick_sector: u64,
        sectors: u64,
    },
    /// Try to remove the vdev at this index (modulo the count), and add it back if it went.
    RemoveAndAdd { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![4 => 1..=4u32, 1 => 1..=64u32], prop_oneof![3 => Just(1usize), 1 => 2..=3usize])
            .prop_map(|(sectors, copies)| Op::Alloc { sectors, copies }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => Just(Op::Undo),
        2 => Just(Op::Sync),
        1 => Just(Op::Checkpoint),
        2 => prop_oneof![4 => 1..=4u32, 1 => 1..=64u32].prop_map(|sectors| Op::AllocLog { sectors }),
        1 => (any::<usize>(), any::<u64>(), 1..=8u64)
            .prop_map(|(pick_vdev, pick_sector, sectors)| Op::Claim { pick_vdev, pick_sector, sectors }),
        1 => any::<usize>().prop_map(|pick| Op::RemoveAndAdd { pick }),
    ]
}

fn config() -> impl Strategy<Value = Vec<VdevSpace>> {
    proptest::collection::vec(
        (
            1..=6u64,
            prop_oneof![Just(9u8), Just(12u8)],
            17..=20u8,
            prop_oneof![3 => Just(SpaceClass::Normal), 1 => Just(SpaceClass::Log)],
        ),
        1..=4,
    )
    .prop_map(|specs| {
        (0u32..)
            .zip(specs)
            .map(|(id, (mib, ashift, metaslab_shift, class))| VdevSpace {
                vdev: id * 2 + 1,
                class,
                data_size_bytes: mib * MIB + 3 * 4096,
                ashift,
                metaslab_shift,
                raidz: None,
            })
            .collect()
    })
}

/// Model of the pool: live blocks and deferred frees, as extents.
#[derive(Default)]
struct Model {
    /// Copies of each live block, with the txg it was allocated in.
    live: Vec<(Vec<Dva>, u64)>,
    /// (vdev, offset) -> (length, free txg)
    deferred: BTreeMap<(u32, u64), (u64, u64)>,
}

impl Model {
    fn overlaps_any(&self, dva: &Dva) -> bool {
        let end = dva.offset + u64::from(dva.asize);
        let hits = |vdev: u32, offset: u64, length: u64| {
            vdev == dva.vdev && offset < end && dva.offset < offset + length
        };
        self.live
            .iter()
            .flat_map(|(dvas, _)| dvas)
            .any(|other| hits(other.vdev, other.offset, u64::from(other.asize)))
            || self
                .deferred
                .iter()
                .any(|(&(vdev, offset), &(length, _))| hits(vdev, offset, length))
    }

    /// Live extents, coalesced, as `allocated_extents` reports them.
    fn allocated_extents(&self) -> Vec<(u32, u64, u64)> {
        let mut extents: Vec<(u32, u64, u64)> = self
            .live
            .iter()
            .flat_map(|(dvas, _)| dvas)
            .map(|dva| (dva.vdev, dva.offset, u64::from(dva.asize)))
            .collect();
        extents.sort_unstable();
        coalesce(extents)
    }

    fn deferred_extents(&self) -> Vec<DeferredFree> {
        let mut per_txg: Vec<(u64, u32, u64, u64)> = self
            .deferred
            .iter()
            .map(|(&(vdev, offset), &(length, txg))| (txg, vdev, offset, length))
            .collect();
        per_txg.sort_unstable();
        let mut frees: Vec<DeferredFree> = Vec::new();
        for (txg, vdev, offset, length) in per_txg {
            match frees.last_mut() {
                Some(last)
                    if last.txg == txg
                        && last.vdev == vdev
                        && last.offset + last.length == offset =>
                {
                    last.length += length;
                }
                _ => frees.push(DeferredFree {
                    txg,
                    vdev,
                    offset,
                    length,
                }),
            }
        }
        frees
    }
}

fn dvas_overlap(a: &Dva, b: &Dva) -> bool {
    a.vdev == b.vdev
        && a.offset < b.offset + u64::from(b.asize)
        && b.offset < a.offset + u64::from(a.asize)
}

/// Longest run of free space on `vdev` (free segments of adjacent metaslabs joined).
fn longest_free_run(space: &SpaceAllocator, vdev: u32) -> u64 {
    let mut longest = 0;
    let mut run_start = 0;
    let mut run_end = None;
    let metaslabs = space.metaslabs(vdev).unwrap_or(&[]);
    for (start, end) in metaslabs.iter().flat_map(|m| m.free_tree().iter()) {
        if run_end != Some(start) {
            run_start = start;
        }
        run_end = Some(end);
        longest = longest.max(end - run_start);
    }
    longest
}

fn coalesce(extents: Vec<(u32, u64, u64)>) -> Vec<(u32, u64, u64)> {
    let mut merged: Vec<(u32, u64, u64)> = Vec::new();
    for (vdev, offset, length) in extents {
        match merged.last_mut() {
            Some(last) if last.0 == vdev && last.1 + last.2 == offset => last.2 += length,
            _ => merged.push((vdev, offset, length)),
        }
    }
    merged
}

fn same_state(a: &SpaceAllocator, b: &SpaceAllocator) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.allocated_extents(), b.allocated_extents());
    prop_assert_eq!(a.deferred_extents(), b.deferred_extents());
    let (sa, sb) = (a.stats(), b.stats());
    prop_assert_eq!(sa.free_bytes, sb.free_bytes);
    prop_assert_eq!(sa.allocated_bytes, sb.allocated_bytes);
    prop_assert_eq!(sa.deferred_bytes, sb.deferred_bytes);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn random_workloads_keep_every_invariant_and_replay_exactly(
        vdevs in config(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let mut space = SpaceAllocator::new(&vdevs).unwrap();
        let class_of = |id: u32| {
            vdevs.iter().find(|config| config.vdev == id).map_or(SpaceClass::Normal, |c| c.class)
        };
        let mut model = Model::default();
        let mut log: Vec<SpaceLogEntry> = Vec::new();
        // (checkpoint entries, index into `log` where later deltas start)
        let mut checkpoint: Option<(Vec<SpaceLogEntry>, usize)> = None;
        let mut checkpoint_wanted = false;
        let mut txg = 1u64;
        for op in ops {
            match op {
                Op::Alloc { sectors, copies } => {
                    let mut dvas: Vec<Dva> = Vec::new();
                    let before = space.allocated_extents();
                    for _ in 0..copies {
                        match space.allocate(sectors * 4096, txg, &dvas) {
                            Ok(dva) => {
                                prop_assert_eq!(class_of(dva.vdev), SpaceClass::Normal);
                                prop_assert!(!model.overlaps_any(&dva), "{:?} overlaps", dva);
                                prop_assert!(!dvas.iter().any(|other| dvas_overlap(other, &dva)));
                                prop_assert!(space.is_allocated(&dva));
                                dvas.push(dva);
                            }
                            Err(SpaceError::NoSpace { .. }) => break,
                            Err(other) => return Err(TestCaseError::fail(other.to_string())),
                        }
                    }
                    if dvas.is_empty() {
                        prop_assert_eq!(space.allocated_extents(), before);
                    } else {
                        model.live.push((dvas, txg));
                    }
                }
                Op::Free { pick } => {
                    if model.live.is_empty() {
                        continue;
                    }
                    let (dvas, _) = model.live.remove(pick % model.live.len());
                    for dva in &dvas {
                        space.free(dva, txg).unwrap();
                        let again = space.free(dva, txg);
                        prop_assert!(
                            matches!(again, Err(SpaceError::DoubleFree { .. })),
                            "second free: {:?}",
                            again
                        );
                        model.deferred.insert((dva.vdev, dva.offset), (u64::from(dva.asize), txg));
                    }
                }
                Op::Undo => {
                    if model.live.last().is_some_and(|&(_, born)| born == txg) {
                        let (dvas, _) = model.live.pop().unwrap();
                        for dva in &dvas {
                            space.unallocate(dva, txg).unwrap();
                            prop_assert!(!space.is_allocated(dva));
                        }
                    }
                }
                Op::Checkpoint => checkpoint_wanted = true,
                Op::AllocLog { sectors } => {
                    let size_bytes = u64::from(sectors) * 4096;
                    let logs_with_room: Vec<u32> = vdevs
                        .iter()
                        .filter(|config| config.class == SpaceClass::Log)
                        .filter(|config| longest_free_run(&space, config.vdev) >= size_bytes)
                        .map(|config| config.vdev)
                        .collect();
                    let before = space.allocated_extents();
                    match space.allocate_log(sectors * 4096, txg) {
                        Ok(dva) => {
                            prop_assert!(!model.overlaps_any(&dva), "{:?} overlaps", dva);
                            prop_assert!(space.is_allocated(&dva));
                            if logs_with_room.is_empty() {
                                prop_assert_eq!(class_of(dva.vdev), SpaceClass::Normal);
                            } else {
                                prop_assert!(logs_with_room.contains(&dva.vdev), "{:?}", dva);
                            }
                            model.live.push((vec![dva], txg));
                        }
                        Err(SpaceError::NoSpace { .. }) => {
                            prop_assert!(logs_with_room.is_empty());
                            prop_assert_eq!(space.allocated_extents(), before);
                        }
                        Err(other) => return Err(TestCaseError::fail(other.to_string())),
                    }
                }
                Op::Claim { pick_vdev, pick_sector, sectors } => {
                    let config = vdevs[pick_vdev % vdevs.len()];
                    let sector_bytes = 1u64 << config.ashift;
                    let size_bytes = config.data_size_bytes / sector_bytes * sector_bytes;
                    let offset = pick_sector % (size_bytes / sector_bytes + 4) * sector_bytes;
                    let dva = Dva {
                        vdev: config.vdev,
                        offset,
                        asize: (sectors * sector_bytes) as u32,
                    };
                    let end = offset + u64::from(dva.asize);
                    let before = (
                        space.allocated_extents(),
                        space.deferred_extents(),
                        space.pending_change_count(txg),
                    );
                    let result = space.claim(&dva, txg);
                    let wholly_live = model
                        .allocated_extents()
                        .iter()
                        .any(|&(vdev, start, length)| {
                            vdev == dva.vdev && start <= offset && end <= start + length
                        });
                    if end <= size_bytes && !model.overlaps_any(&dva) {
                        prop_assert_eq!(result, Ok(true));
                        model.live.push((vec![dva], txg));
                    } else {
                        if end <= size_bytes && wholly_live {
                            prop_assert_eq!(result, Ok(false));
                        } else {
                            prop_assert!(result.is_err(), "{:?}: {:?}", dva, result);
                        }
                        let after = (
                            space.allocated_extents(),
                            space.deferred_extents(),
                            space.pending_change_count(txg),
                        );
                        prop_assert_eq!(after, before);
                    }
                }
                Op::RemoveAndAdd { pick } => {
                    let config = vdevs[pick % vdevs.len()];
                    let used_in_model = model.overlaps_any(&Dva {
                        vdev: config.vdev,
                        offset: 0,
                        asize: u32::MAX,
                    });
                    match space.remove_vdev(config.vdev) {
                        Ok(()) => {
                            prop_assert!(!used_in_model);
                            prop_assert!(space.metaslabs(config.vdev).is_none());
                            space.assert_invariants();
                            space.add_vdev(config).unwrap();
                        }
                        Err(SpaceError::VdevInUse { allocated_bytes, deferred_bytes, .. }) => {
                            // Not in use by the model: only changes waiting for the log.
                            prop_assert_eq!(allocated_bytes + deferred_bytes > 0, used_in_model);
                        }
                        Err(other) => return Err(TestCaseError::fail(other.to_string())),
                    }
                }
                Op::Sync => {
                    log.extend(space.take_changes(txg));
                    space.sync_done(txg);
                    model.deferred.retain(|_, &mut (_, free_txg)| free_txg + DEFER_TXGS > txg);
                    if checkpoint_wanted {
                        let entries = space.checkpoint_entries(txg);
                        prop_assert!(space.checkpoint_entry_bound(txg) >= entries.len());
                        checkpoint = Some((entries, log.len()));
                        checkpoint_wanted = false;
                    }
                    txg += 1;
                }
            }
            space.assert_invariants();
            prop_assert_eq!(space.allocated_extents(), model.allocated_extents());
            prop_assert_eq!(space.deferred_extents(), model.deferred_extents());
            let stats = space.stats();
            prop_assert_eq!(
                stats.allocated_bytes + stats.deferred_bytes + stats.free_bytes,
                stats.size_bytes
            );
        }
        // Finish the open txg, then rebuild the allocator three ways.
        log.extend(space.take_changes(txg));
        space.sync_done(txg);
        model.deferred.retain(|_, &mut (_, free_txg)| free_txg + DEFER_TXGS > txg);
        prop_assert!(space.pending_change_txgs().is_empty());

        let mut from_log = SpaceAllocator::new(&vdevs).unwrap();
        from_log.replay(log.iter().copied(), txg).unwrap();
        from_log.assert_invariants();
        same_state(&space, &from_log)?;

        let mut from_checkpoint = SpaceAllocator::new(&vdevs).unwrap();
        from_checkpoint.replay(space.checkpoint_entries(txg), txg).unwrap();
        from_checkpoint.assert_invariants();
        same_state(&space, &from_checkpoint)?;

        if let Some((entries, deltas_from)) = checkpoint {
            let mut from_both = SpaceAllocator::new(&vdevs).unwrap();
            from_both
                .replay(entries.into_iter().chain(log[deltas_from..].iter().copied()), txg)
                .unwrap();
            from_both.assert_invariants();
            same_state(&space, &from_both)?;
        }

        // The rebuilt allocator carries on like the original: same free space, no overlap.
        let next = txg + 1;
        if let Ok(dva) = from_log.allocate(4096, next, &[]) {
            prop_assert!(!model.overlaps_any(&dva));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Classes: separate intent-log devices, and claims at import
// ---------------------------------------------------------------------------------------------

/// Vdev 0 normal (`normal_bytes`), then log vdevs of `log_bytes` each.
fn with_logs(normal_bytes: u64, log_bytes: &[u64]) -> SpaceAllocator {
    let mut vdevs = vec![vdev(0, normal_bytes)];
    for (i, &size) in log_bytes.iter().enumerate() {
        vdevs.push(VdevSpace {
            class: SpaceClass::Log,
            ..vdev(i as u32 + 1, size)
        });
    }
    SpaceAllocator::new(&vdevs).unwrap()
}

#[test]
fn normal_allocations_never_land_on_a_log_device() {
    let mut space = with_logs(8 * MIB, &[64 * MIB]);
    let mut placed = 0u64;
    loop {
        // 120 KiB: eight per 1 MiB metaslab, leaving 64 KiB holes that no 128 KiB block fits.
        match space.allocate(120 * KIB as u32, 1, &[]) {
            Ok(dva) => {
                assert_eq!(dva.vdev, 0, "data went to the log device");
                placed += u64::from(dva.asize);
            }
            Err(SpaceError::NoSpace { .. }) => break,
            Err(other) => panic!("{other}"),
        }
    }
    assert!(placed > 7 * MIB, "the normal vdev filled up: {placed}");
    // Nearly full: a 4 KiB block still fits the normal vdev, a 128 KiB one does not, and the
    // empty log device is no way out.
    let last = space.allocate(4096, 1, &[]).unwrap();
    assert_eq!(last.vdev, 0);
    assert!(matches!(
        space.allocate(128 * KIB as u32, 1, &[]),
        Err(SpaceError::NoSpace { .. })
    ));
    let stats = space.stats();
    assert_eq!(
        stats.vdevs[1].allocated_bytes, 0,
        "the log device is untouched"
    );
    assert_eq!(stats.vdevs[1].free_bytes, 64 * MIB);
    space.assert_invariants();
}

#[test]
fn ditto_copies_never_land_on_a_log_device() {
    // The first tier of a ditto copy is "a vdev holding no other copy": the log device must
    // not count as one.
    let mut space = with_logs(64 * MIB, &[64 * MIB]);
    let first = space.allocate(8 * KIB as u32, 1, &[]).unwrap();
    let second = space.allocate(8 * KIB as u32, 1, &[first]).unwrap();
    let third = space.allocate(8 * KIB as u32, 1, &[first, second]).unwrap();
    assert_eq!([first.vdev, second.vdev, third.vdev], [0, 0, 0]);
    assert_ne!(metaslab_of(&first), metaslab_of(&second));
    // Two normal vdevs and two log vdevs: the rotor visits only the normal ones.
    let mut space = SpaceAllocator::new(&[
        vdev(0, 64 * MIB),
        VdevSpace {
            class: SpaceClass::Log,
            ..vdev(1, 64 * MIB)
        },
        vdev(2, 64 * MIB),
        VdevSpace {
            class: SpaceClass::Log,
            ..vdev(3, 64 * MIB)
        },
    ])
    .unwrap();
    let mut per_vdev = BTreeMap::<u32, u64>::new();
    for _ in 0..1024 {
        let dva = space.allocate(64 * KIB as u32, 1, &[]).unwrap();
        *per_vdev.entry(dva.vdev).or_default() += u64::from(dva.asize);
    }
    assert_eq!(per_vdev.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
    assert!(
        (24 * MIB..=40 * MIB).contains(&per_vdev[&0]),
        "the two normal vdevs share: {per_vdev:?}"
    );
    space.assert_invariants();
}

#[test]
fn log_blocks_prefer_log_devices_alternate_and_fall_back() {
    let mut space = with_logs(64 * MIB, &[8 * MIB, 8 * MIB]);
    let vdevs: Vec<u32> = (0..6)
        .map(|_| space.allocate_log(8 * KIB as u32, 1).unwrap().vdev)
        .collect();
    assert_eq!(
        vdevs,
        vec![1, 2, 1, 2, 1, 2],
        "two log devices share the blocks"
    );
    // Fill both log devices: log blocks then go to the normal vdev.
    while space
        .allocate_log(128 * KIB as u32, 1)
        .map(|dva| dva.vdev != 0)
        .unwrap()
    {}
    assert_eq!(space.allocate_log(128 * KIB as u32, 1).unwrap().vdev, 0);
    space.assert_invariants();
}

#[test]
fn pool_capacity_counts_normal_vdevs_only() {
    let space = with_logs(64 * MIB, &[32 * MIB]);
    let alone = with_logs(64 * MIB, &[]);
    assert_eq!(space.size_bytes(), alone.size_bytes());
    assert_eq!(space.free_bytes(), alone.free_bytes());
    assert_eq!(space.slop_bytes(), alone.slop_bytes());
    let stats = space.stats();
    assert_eq!(stats.size_bytes, alone.stats().size_bytes);
    assert_eq!(stats.vdevs.len(), 2, "the log device is still listed");
    assert_eq!(stats.vdevs[1].class, SpaceClass::Log);
    assert_eq!(stats.vdevs[1].size_bytes, 32 * MIB);
    assert_eq!(stats.metaslab_count, alone.stats().metaslab_count);
    assert_eq!(space.available_bytes(), alone.available_bytes());
    // Log blocks on the log device change nothing in the pool's numbers, only in its row.
    let mut space = space;
    for _ in 0..16 {
        assert_eq!(space.allocate_log(64 * KIB as u32, 1).unwrap().vdev, 1);
    }
    let stats = space.stats();
    assert_eq!(stats.allocated_bytes, 0);
    assert_eq!(stats.free_bytes, 64 * MIB);
    assert_eq!(stats.vdevs[1].allocated_bytes, MIB);
    assert_eq!(space.available_bytes(), alone.available_bytes());
    let user_max = alone.available_bytes();
    assert!(space.can_allocate_user(user_max));
    assert!(!space.can_allocate_user(user_max + 1));
    space.assert_invariants();
}

#[test]
fn claim_allocates_free_extents_and_refuses_mixed_ones() {
    let mut space = single(16 * MIB, 20);
    let free = Dva {
        vdev: 0,
        offset: 4 * MIB,
        asize: 16 * KIB as u32,
    };
    assert!(space.claim(&free, 1).unwrap(), "claimed a free extent");
    assert!(space.is_allocated(&free));
    assert!(
        !space.claim(&free, 1).unwrap(),
        "already allocated: no change"
    );
    let changes = space.take_changes(1);
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (changes[0].op, changes[0].offset, changes[0].length),
        (SpaceOp::Alloc, 4 * MIB, 16 * KIB)
    );
    // Half allocated, half free: refused, nothing changes.
    let straddling = Dva {
        offset: 4 * MIB + 8 * KIB,
        ..free
    };
    let before = space.stats();
    assert!(space.claim(&straddling, 2).is_err());
    assert_eq!(space.stats(), before);
    space.assert_invariants();
    // Deferred space is not claimable either, wholly or in part.
    space.free(&free, 2).unwrap();
    let before = (
        space.stats(),
        space.allocated_extents(),
        space.deferred_extents(),
    );
    let pending = space.pending_change_count(2);
    assert!(matches!(
        space.claim(&free, 2),
        Err(SpaceError::AlreadyAllocated { .. })
    ));
    let half_deferred = Dva {
        offset: 4 * MIB + 8 * KIB,
        ..free
    };
    assert!(space.claim(&half_deferred, 2).is_err());
    // Bad input of every other kind: an error, never a panic, and no change.
    let bad = [
        Dva { vdev: 7, ..free },
        Dva {
            offset: 16 * MIB,
            ..free
        },
        Dva {
            offset: 16 * MIB - 8 * KIB,
            ..free
        },
        Dva {
            offset: u64::MAX - 4095,
            ..free
        },
        Dva {
            offset: 4 * MIB + 512,
            ..free
        },
        Dva { asize: 0, ..free },
    ];
    for dva in bad {
        assert!(space.claim(&dva, 2).is_err(), "{dva:?}");
    }
    assert_eq!(
        (
            space.stats(),
            space.allocated_extents(),
            space.deferred_extents()
        ),
        before
    );
    assert_eq!(space.pending_change_count(2), pending);
    space.assert_invariants();
    // Same txg rule as allocate.
    space.sync_done(2);
    let elsewhere = Dva {
        offset: 8 * MIB,
        ..free
    };
    assert!(matches!(
        space.claim(&elsewhere, 2),
        Err(SpaceError::TxgAlreadySynced { .. })
    ));
    assert!(!space.is_allocated(&elsewhere));
}

#[test]
fn claimed_extents_replay_and_are_never_handed_out_again() {
    // Claims as an import does them: on a log device and on a normal vdev, before any
    // allocation of the new txg; what follows must not overlap them.
    let mut space = with_logs(8 * MIB, &[4 * MIB]);
    let on_log = Dva {
        vdev: 1,
        offset: 0,
        asize: 64 * KIB as u32,
    };
    let on_normal = Dva {
        vdev: 0,
        offset: 0,
        asize: 16 * KIB as u32,
    };
    assert!(space.claim(&on_log, 5).unwrap());
    assert!(space.claim(&on_normal, 5).unwrap());
    let stats = space.stats();
    assert_eq!(stats.allocated_bytes, 16 * KIB);
    assert_eq!(stats.vdevs[1].allocated_bytes, 64 * KIB);
    let mut dvas = Vec::new();
    while let Ok(dva) = space.allocate_log(8 * KIB as u32, 5) {
        assert!(!dvas_overlap(&dva, &on_log) && !dvas_overlap(&dva, &on_normal));
        dvas.push(dva);
    }
    space.assert_invariants();
    let log = space.take_changes(5);
    space.sync_done(5);
    let mut vdevs = vec![vdev(0, 8 * MIB)];
    vdevs.push(VdevSpace {
        class: SpaceClass::Log,
        ..vdev(1, 4 * MIB)
    });
    let mut rebuilt = SpaceAllocator::new(&vdevs).unwrap();
    rebuilt.replay(log, 5).unwrap();
    rebuilt.assert_invariants();
    assert_eq!(rebuilt.allocated_extents(), space.allocated_extents());
    assert!(
        !rebuilt.claim(&on_log, 6).unwrap(),
        "allocated after replay"
    );
}

#[test]
fn remove_vdev_waits_until_the_vdev_is_drained() {
    let mut space = with_logs(64 * MIB, &[8 * MIB]);
    let block = space.allocate_log(8 * KIB as u32, 1).unwrap();
    assert_eq!(block.vdev, 1);
    assert_eq!(space.vdev_in_use(1).unwrap(), (8 * KIB, 0));
    assert_eq!(
        space.remove_vdev(1),
        Err(SpaceError::VdevInUse {
            vdev: 1,
            allocated_bytes: 8 * KIB,
            deferred_bytes: 0,
            pending_changes: 1,
        })
    );
    assert!(matches!(
        space.remove_vdev(9),
        Err(SpaceError::UnknownVdev { vdev: 9 })
    ));
    assert!(matches!(
        space.vdev_in_use(9),
        Err(SpaceError::UnknownVdev { vdev: 9 })
    ));
    space.take_changes(1);
    space.sync_done(1);
    // Freed: deferred for DEFER_TXGS txgs, still in use.
    space.free(&block, 2).unwrap();
    assert_eq!(space.vdev_in_use(1).unwrap(), (0, 8 * KIB));
    let refused = space.remove_vdev(1).unwrap_err();
    assert!(
        refused.to_string().contains("still in use"),
        "clear message: {refused}"
    );
    for txg in 2..2 + DEFER_TXGS {
        space.sync_done(txg);
        assert!(space.remove_vdev(1).is_err(), "txg {txg}");
    }
    space.sync_done(2 + DEFER_TXGS);
    assert_eq!(space.vdev_in_use(1).unwrap(), (0, 0));
    // Drained, but the Free of txg 2 is not in the space log yet.
    assert!(matches!(
        space.remove_vdev(1),
        Err(SpaceError::VdevInUse {
            pending_changes: 1,
            ..
        })
    ));
    space.assert_invariants();
    assert_eq!(space.take_changes(2).len(), 1);
    space.remove_vdev(1).unwrap();
    assert!(space.metaslabs(1).is_none());
    assert_eq!(space.stats().vdevs.len(), 1);
    space.assert_invariants();
    // No log device left: log blocks go to the normal vdev.
    let txg = 3 + DEFER_TXGS;
    assert_eq!(space.allocate_log(8 * KIB as u32, txg).unwrap().vdev, 0);
    assert!(!space.is_allocated(&block));
}

#[test]
fn removing_vdevs_keeps_both_rotors_valid() {
    // Normal 0, log 1, normal 2, log 3, log 4.
    let class = |id| {
        if id == 0 || id == 2 {
            SpaceClass::Normal
        } else {
            SpaceClass::Log
        }
    };
    let vdevs: Vec<VdevSpace> = (0..5)
        .map(|id| VdevSpace {
            class: class(id),
            ..vdev(id, 16 * MIB)
        })
        .collect();
    let mut space = SpaceAllocator::new(&vdevs).unwrap();
    // The log rotor now points past vdev 3: removing 3 leaves it on 4.
    assert_eq!(space.allocate_log(4096, 1).unwrap().vdev, 1);
    let on_three = space.allocate_log(4096, 1).unwrap();
    assert_eq!(on_three.vdev, 3);
    space.unallocate(&on_three, 1).unwrap();
    space.remove_vdev(3).unwrap();
    assert_eq!(space.allocate_log(4096, 1).unwrap().vdev, 4);
    assert_eq!(space.allocate_log(4096, 1).unwrap().vdev, 1);
    assert_eq!(space.allocate_log(4096, 1).unwrap().vdev, 4);
    // The data rotor sits on vdev 0; remove it (empty): data goes to vdev 2 only.
    space.remove_vdev(0).unwrap();
    space.assert_invariants();
    for _ in 0..64 {
        assert_eq!(space.allocate(64 * KIB as u32, 1, &[]).unwrap().vdev, 2);
    }
    assert!(space.remove_vdev(2).is_err());
    space.assert_invariants();
}

#[test]
fn add_vdev_extends_the_pool_and_validates_like_new() {
    let mut space = with_logs(64 * MIB, &[]);
    assert_eq!(space.allocate_log(8 * KIB as u32, 1).unwrap().vdev, 0);
    let log = VdevSpace {
        class: SpaceClass::Log,
        ..vdev(5, 8 * MIB)
    };
    space.add_vdev(log).unwrap();
    space.assert_invariants();
    assert_eq!(space.allocate_log(8 * KIB as u32, 1).unwrap().vdev, 5);
    assert_eq!(
        space.size_bytes(),
        64 * MIB,
        "a log device adds no capacity"
    );
    // A second log device, with an id between the others: listed in order, shares the blocks.
    space
        .add_vdev(VdevSpace {
            class: SpaceClass::Log,
            ..vdev(3, 8 * MIB)
        })
        .unwrap();
    let ids: Vec<u32> = space.stats().vdevs.iter().map(|v| v.vdev).collect();
    assert_eq!(ids, vec![0, 3, 5]);
    let logs: Vec<u32> = (0..4)
        .map(|_| space.allocate_log(8 * KIB as u32, 1).unwrap().vdev)
        .collect();
    assert_eq!(logs, vec![3, 5, 3, 5]);
    // Refused, changing nothing: a used id, and whatever `new` refuses.
    let before = space.stats();
    let refused = [
        vdev(5, 8 * MIB),
        vdev(0, 8 * MIB),
        VdevSpace {
            ashift: 30,
            ..vdev(6, 8 * MIB)
        },
        VdevSpace {
            metaslab_shift: 11,
            ..vdev(6, 8 * MIB)
        },
        VdevSpace {
            data_size_bytes: 100,
            ..vdev(6, 8 * MIB)
        },
        VdevSpace {
            metaslab_shift: 12,
            data_size_bytes: 1 << 40,
            ..vdev(6, 8 * MIB)
        },
    ];
    for config in refused {
        assert!(
            matches!(
                space.add_vdev(config),
                Err(SpaceError::InvalidConfig { .. })
            ),
            "{config:?}"
        );
    }
    assert_eq!(space.stats(), before);
    // A normal vdev added to a pool of only log devices takes the data.
    let mut logs_only = SpaceAllocator::new(&[log]).unwrap();
    assert!(matches!(
        logs_only.allocate(4096, 1, &[]),
        Err(SpaceError::NoSpace { .. })
    ));
    logs_only.add_vdev(vdev(9, 16 * MIB)).unwrap();
    logs_only.assert_invariants();
    assert_eq!(logs_only.allocate(4096, 1, &[]).unwrap().vdev, 9);
    assert_eq!(logs_only.size_bytes(), 16 * MIB);
    // And to an empty allocator.
    let mut empty = SpaceAllocator::new(&[]).unwrap();
    empty.add_vdev(vdev(2, 16 * MIB)).unwrap();
    assert_eq!(empty.allocate(4096, 1, &[]).unwrap().vdev, 2);
    empty.assert_invariants();
}

/// A read in flight on an older tree (the read floor) keeps space freed since from being
/// reused, however many txgs pass, and the lower of the scan and read floors holds.
#[test]
fn a_read_floor_holds_back_frees_until_lifted() {
    let mut space = pool(&[64 << 20]);
    let victim = space.allocate(4096, 1, &[]).unwrap();
    space.sync_done(1);
    // A read started when txg 1 was the last synced one; the block is freed in txg 2.
    space.set_read_floor(Some(1));
    space.free(&victim, 2).unwrap();
    for synced in 2..2 + 4 * DEFER_TXGS {
        space.sync_done(synced);
    }
    assert_eq!(
        space.stats().deferred_bytes,
        4096,
        "held while the read runs"
    );
    // A scan floor above the read floor does not lift it.
    space.set_release_floor(Some(5));
    space.sync_done(2 + 4 * DEFER_TXGS);
    assert_eq!(space.stats().deferred_bytes, 4096);
    space.set_release_floor(None);
    // The read ends: the free is released at the next sync.
    space.set_read_floor(None);
    space.sync_done(3 + 4 * DEFER_TXGS);
    assert_eq!(space.stats().deferred_bytes, 0);
    space.assert_invariants();
}

#[test]
fn the_checkpoint_bound_counts_runs_split_by_a_later_txgs_allocations() {
    // A full metaslab with every other block of its first 80 freed, then refilled by the
    // next txg: as of the txg before, those 40 blocks are free, splitting the one allocated
    // run into 40 — more than the free space's own runs suggest.
    let mut space = single(MIB, 20);
    let mut live = Vec::new();
    while let Ok(dva) = space.allocate(4096, 1, &[]) {
        live.push(dva);
    }
    for synced in 1..=1 + DEFER_TXGS {
        space.sync_done(synced);
    }
    live.sort_by_key(|dva| dva.offset);
    let holes: Vec<Dva> = live.iter().take(80).step_by(2).copied().collect();
    let txg = free_and_release(&mut space, &holes, 2 + DEFER_TXGS);
    let mut refilled = 0;
    while refilled < holes.len() && space.allocate(4096, txg, &[]).is_ok() {
        refilled += 1;
    }
    let entries = space.checkpoint_entries(txg - 1).len();
    assert!(
        entries >= holes.len(),
        "the refill split the run: {entries} entries"
    );
    let bound = space.checkpoint_entry_bound(txg - 1);
    assert!(bound >= entries, "bound {bound} for {entries} entries");
}
