//! Every kernel this CPU runs against the scalar reference of `gf.rs`, byte for byte, on
//! random inputs of odd lengths (tails, short and missing columns), every parity row set and
//! every multiplier; and the kernel the stripe code runs is the one `kernel_name` reports.

use super::kernel::{self, LAST_USED, RaidzKernel};
use super::tests::{Rng, subsets};
use super::{RaidzGeometry, RaidzMap, gf, kernel_name};

/// What the reference encodes: data columns copied, parity by the scalar Horner.
fn reference_encode(map: &RaidzMap, data: &[u8]) -> Vec<Vec<u8>> {
    let length = map.column_buffer_bytes();
    let parity = map.parity();
    let mut buffers = vec![vec![0u8; length]; map.columns().len()];
    for index in 0..map.columns().len() - parity {
        let range = map.data_range(index);
        buffers[parity + index][..range.len()].copy_from_slice(&data[range]);
    }
    let (parity_buffers, data_buffers) = buffers.split_at_mut(parity);
    let data_refs: Vec<&[u8]> = data_buffers.iter().map(|column| &column[..]).collect();
    let mut parity_refs: Vec<&mut [u8]> = parity_buffers.iter_mut().map(|p| &mut p[..]).collect();
    gf::generate(&data_refs, &mut parity_refs);
    buffers
}

/// The reference rebuild of missing data columns (indexes into `columns()`, all past the
/// parity) from the first parity rows.
fn reference_rebuild(map: &RaidzMap, buffers: &mut [Vec<u8>], missing: &[usize]) {
    let parity = map.parity();
    let missing_data: Vec<usize> = missing.iter().map(|index| index - parity).collect();
    let rows: Vec<usize> = (0..missing.len()).collect();
    let (parity_buffers, data_buffers) = buffers.split_at_mut(parity);
    let parity_refs: Vec<&[u8]> = rows.iter().map(|&row| &parity_buffers[row][..]).collect();
    gf::rebuild_data(data_buffers, &missing_data, &rows, &parity_refs);
}

/// A length that lands on and around the kernels' step sizes and tails.
fn odd_length(rng: &mut Rng) -> usize {
    match rng.below(4) {
        0 => 1 + rng.below(40) as usize,
        1 => 64 * (1 + rng.below(8) as usize) + rng.below(3) as usize,
        _ => 1 + rng.below(1500) as usize,
    }
}

#[test]
fn horner_agrees_with_the_reference_for_every_row_set() {
    let mut rng = Rng(37);
    for kernel in RaidzKernel::available() {
        for round in 0..600 {
            let rows = 1 + (round % 7) as u8;
            let length = odd_length(&mut rng);
            let count = rng.below(21) as usize;
            // Full, short, empty (missing) and longer columns.
            let columns: Vec<Vec<u8>> = (0..count)
                .map(|_| match rng.below(5) {
                    0 => Vec::new(),
                    1 => {
                        let short = rng.below(length as u64 + 1) as usize;
                        rng.bytes(short)
                    }
                    2 => {
                        let long = length + 1 + rng.below(9) as usize;
                        rng.bytes(long)
                    }
                    _ => rng.bytes(length),
                })
                .collect();
            let padded: Vec<Vec<u8>> = columns
                .iter()
                .map(|column| {
                    let mut padded = column.clone();
                    padded.resize(length, 0);
                    padded
                })
                .collect();
            let padded_refs: Vec<&[u8]> = padded.iter().map(|c| &c[..]).collect();
            let mut expected = vec![vec![0u8; length]; 3];
            let mut expected_refs: Vec<&mut [u8]> =
                expected.iter_mut().map(|e| &mut e[..]).collect();
            gf::generate(&padded_refs, &mut expected_refs);

            let column_refs: Vec<&[u8]> = columns.iter().map(|c| &c[..]).collect();
            let mut got = vec![vec![0xa5u8; length]; 3];
            {
                let [p, q, r] = &mut got[..] else {
                    unreachable!()
                };
                let mut out: [&mut [u8]; 3] = [p, q, r];
                kernel::horner(kernel, &column_refs, &mut out, rows);
            }
            for row in 0..3 {
                let want = if rows & (1 << row) != 0 {
                    expected[row].clone()
                } else {
                    vec![0xa5u8; length]
                };
                assert_eq!(
                    got[row],
                    want,
                    "{} rows {rows} row {row} length {length} columns {:?}",
                    kernel.name(),
                    columns.iter().map(Vec::len).collect::<Vec<_>>()
                );
            }
        }
    }
}

#[test]
fn mul_xor_agrees_with_the_reference_for_every_constant() {
    let mut rng = Rng(41);
    for kernel in RaidzKernel::available() {
        for c in 0..=255u8 {
            let length = odd_length(&mut rng);
            let src = rng.bytes(length);
            let dst = rng.bytes(length);
            let mut expected = dst.clone();
            gf::mul_xor(&mut expected, &src, c);
            let mut got = dst.clone();
            kernel::mul_xor(kernel, &mut got, &src, c);
            assert_eq!(got, expected, "{} c {c} length {length}", kernel.name());
        }
    }
}

/// A random map with its block.
fn random_block(rng: &mut Rng, widths: u64) -> (RaidzMap, Vec<u8>) {
    let parity = 1 + rng.below(3) as u8;
    let width = u32::from(parity) + 1 + rng.below(widths) as u32;
    let ashift = if rng.below(2) == 0 { 9 } else { 12 };
    let geometry = RaidzGeometry::new(width, parity, ashift).unwrap();
    // Any byte count, not only whole sectors: the last column ends inside a sector.
    let psize = 1 + rng.below(40 << 10);
    let map = geometry.map(rng.below(1 << 16) << ashift, psize);
    let data = rng.bytes(psize as usize);
    (map, data)
}

#[test]
fn encoding_and_parity_are_the_references_bytes() {
    let mut rng = Rng(43);
    for _ in 0..300 {
        let (map, data) = random_block(&mut rng, 14);
        let ranges: Vec<_> = (0..map.columns().len() - map.parity())
            .map(|index| map.data_range(index))
            .collect();
        assert_eq!(map.data_ranges().collect::<Vec<_>>(), ranges);
        let expected = reference_encode(&map, &data);
        for kernel in RaidzKernel::available() {
            let mut buffers = vec![vec![0x5au8; map.column_buffer_bytes()]; map.columns().len()];
            map.encode_into_with(kernel, &data, &mut buffers).unwrap();
            assert_eq!(buffers, expected, "{} encode", kernel.name());
            let mut parity = vec![vec![0x5au8; map.column_buffer_bytes()]; map.parity()];
            let mut parity_slices: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
            map.parity_into_with(kernel, &data, &mut parity_slices)
                .unwrap();
            assert_eq!(
                parity[..],
                expected[..map.parity()],
                "{} parity",
                kernel.name()
            );
        }
        assert_eq!(map.encode(&data), expected);
    }
}

#[test]
fn every_kernel_rebuilds_any_parity_columns() {
    let mut rng = Rng(47);
    for _ in 0..120 {
        let (map, data) = random_block(&mut rng, 8);
        let encoded = map.encode(&data);
        for kernel in RaidzKernel::available() {
            for missing in subsets(map.columns().len(), map.parity()) {
                let mut damaged = encoded.clone();
                for &index in &missing {
                    damaged[index] = rng.bytes(map.column_buffer_bytes());
                }
                let mut slices: Vec<&mut [u8]> = damaged.iter_mut().map(|b| &mut b[..]).collect();
                map.reconstruct_with(kernel, &mut slices, &missing).unwrap();
                assert_eq!(damaged, encoded, "{} missing {missing:?}", kernel.name());
            }
        }
        // The reference agrees where it applies (data columns only).
        for missing in subsets(map.columns().len(), map.parity()) {
            if missing.is_empty() || missing[0] < map.parity() {
                continue;
            }
            let mut damaged = encoded.clone();
            for &index in &missing {
                damaged[index].fill(0x33);
            }
            reference_rebuild(&map, &mut damaged, &missing);
            assert_eq!(damaged, encoded, "reference missing {missing:?}");
        }
    }
}

#[test]
fn the_widest_raidz3_rebuilds_three_data_columns() {
    let mut rng = Rng(53);
    let geometry = RaidzGeometry::new(255, 3, 9).unwrap();
    let map = geometry.map(0, 252 * 512 * 2 - 100);
    let data = rng.bytes(252 * 512 * 2 - 100);
    let encoded = map.encode(&data);
    assert_eq!(encoded, reference_encode(&map, &data));
    for kernel in RaidzKernel::available() {
        for _ in 0..20 {
            let mut missing: Vec<usize> = (0..3).map(|_| 3 + rng.below(252) as usize).collect();
            missing.dedup();
            let mut damaged = encoded.clone();
            for &index in &missing {
                damaged[index].fill(0xff);
            }
            map.reconstruct_with(kernel, &mut damaged, &missing)
                .unwrap();
            assert_eq!(damaged, encoded, "{} missing {missing:?}", kernel.name());
        }
    }
}

#[test]
fn the_kernel_in_use_is_the_one_named() {
    #[cfg(target_arch = "x86_64")]
    let expected = if std::arch::is_x86_feature_detected!("avx2") {
        "avx2"
    } else {
        "portable"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let expected = "portable";
    assert_eq!(kernel_name(), expected);
    assert_eq!(RaidzKernel::fastest().name(), expected);
    assert_eq!(RaidzKernel::available()[0], RaidzKernel::fastest());
    assert!(RaidzKernel::available().contains(&RaidzKernel::portable()));

    let map = RaidzGeometry::new(6, 2, 12).unwrap().map(0, 20 << 10);
    let data = Rng(59).bytes(20 << 10);
    let last_used = || LAST_USED.with(|last| last.take());
    let mut buffers = map.encode(&data);
    assert_eq!(last_used(), Some(expected), "encode");
    let mut parity = vec![vec![0u8; map.column_buffer_bytes()]; 2];
    map.parity_into(&data, &mut parity).unwrap();
    assert_eq!(last_used(), Some(expected), "parity_into");
    map.reconstruct(&mut buffers, &[3, 4]).unwrap();
    assert_eq!(last_used(), Some(expected), "reconstruct");
    map.reconstruct_with(RaidzKernel::portable(), &mut buffers, &[0, 5])
        .unwrap();
    assert_eq!(last_used(), Some("portable"), "reconstruct_with");
}

#[test]
fn wrong_buffers_are_refused() {
    let map = RaidzGeometry::new(5, 1, 9).unwrap().map(0, 4096);
    let length = map.column_buffer_bytes();
    let mut short = vec![vec![0u8; length - 1]; map.columns().len()];
    assert!(map.encode_into(&[0u8; 4096], &mut short).is_err());
    let mut few = vec![vec![0u8; length]; map.columns().len() - 1];
    assert!(map.encode_into(&[0u8; 4096], &mut few).is_err());
    let mut right = vec![vec![0u8; length]; map.columns().len()];
    assert!(map.encode_into(&[0u8; 4095], &mut right).is_err());
    assert!(map.encode_into(&[0u8; 4096], &mut right).is_ok());
    let mut two = vec![vec![0u8; length]; 2];
    assert!(map.parity_into(&[0u8; 4096], &mut two).is_err());
}
