use super::*;

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    pub(super) fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.next() as u8).collect()
    }
}

/// Every subset of `0..count` with at most `most` members.
pub(super) fn subsets(count: usize, most: usize) -> Vec<Vec<usize>> {
    (0u32..1 << count)
        .filter(|mask| mask.count_ones() as usize <= most)
        .map(|mask| (0..count).filter(|bit| mask & (1 << bit) != 0).collect())
        .collect()
}

#[test]
fn field_tables_are_a_field() {
    assert_eq!(gf_pow2(0), 1);
    assert_eq!(gf_pow2(255), 1);
    assert_eq!(gf_pow2(8), 0x1d, "x^8 reduces by the polynomial 0x11d");
    for a in 1..=255u8 {
        let inverse = (1..=255u8).find(|&b| gf_mul(a, b) == 1);
        assert!(inverse.is_some(), "{a} has an inverse");
        assert_eq!(gf_mul(a, 1), a);
        assert_eq!(gf_mul(a, 0), 0);
    }
    // Multiplication by 2 is a shift with the polynomial folded in.
    for a in 0..=255u8 {
        let shifted = (u16::from(a) << 1) ^ if a & 0x80 != 0 { 0x11d } else { 0 };
        assert_eq!(u16::from(gf_mul(a, 2)), shifted);
    }
}

#[test]
fn geometry_refuses_what_the_layout_cannot_hold() {
    assert!(RaidzGeometry::new(3, 0, 12).is_err());
    assert!(RaidzGeometry::new(5, 4, 12).is_err());
    assert!(
        RaidzGeometry::new(2, 2, 12).is_err(),
        "raidz2 needs 3 children"
    );
    assert!(RaidzGeometry::new(3, 2, 12).is_ok());
    assert!(RaidzGeometry::new(256, 1, 12).is_err());
    assert!(RaidzGeometry::new(4, 1, 8).is_err());
    assert!(RaidzGeometry::new(4, 1, 17).is_err());
}

#[test]
fn asize_counts_data_parity_and_skip_sectors() {
    let g = |width, parity, ashift| RaidzGeometry::new(width, parity, ashift).unwrap();
    // 8 KiB on a 6-wide raidz2 with 4 KiB sectors: 2 data + 2 parity, rounded to 3 → 6 sectors.
    assert_eq!(g(6, 2, 12).asize(8192), 6 * 4096);
    // 128 KiB on a 5-wide raidz1: 32 data sectors in 8 rows, 8 parity → 40 sectors.
    assert_eq!(g(5, 1, 12).asize(128 << 10), 40 * 4096);
    // One sector of data always costs parity + 1 sectors.
    for parity in 1..=3u8 {
        for width in u32::from(parity) + 1..=12 {
            assert_eq!(
                g(width, parity, 9).asize(512),
                (u64::from(parity) + 1) * 512
            );
        }
    }
    // Against the formula written out differently: data sectors plus parity per row.
    for width in 3..=12u32 {
        for parity in 1..=3u8.min(width as u8 - 1) {
            for ashift in [9u8, 12] {
                let geometry = g(width, parity, ashift);
                for psize in (512..=1 << 20).step_by(512 * 37) {
                    let sector = 1u64 << ashift;
                    let data = (psize as u64).div_ceil(sector);
                    let per_row = u64::from(width) - u64::from(parity);
                    let parity_sectors = u64::from(parity) * data.div_ceil(per_row);
                    let skip = (u64::from(parity) + 1
                        - (data + parity_sectors) % (u64::from(parity) + 1))
                        % (u64::from(parity) + 1);
                    assert_eq!(
                        geometry.asize(psize as u64),
                        (data + parity_sectors + skip) * sector,
                        "width {width} parity {parity} ashift {ashift} psize {psize}"
                    );
                    let asize = geometry.asize(psize as u64);
                    assert!(geometry.max_psize(asize) >= psize as u64);
                    assert!(geometry.asize(geometry.max_psize(asize)) <= asize);
                }
            }
        }
    }
}

#[test]
fn a_block_covers_one_contiguous_range_one_column_per_child() {
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let parity = 1 + rng.below(3) as u8;
        let width = u32::from(parity) + 1 + rng.below(11) as u32;
        let ashift = if rng.below(2) == 0 { 9 } else { 12 };
        let geometry = RaidzGeometry::new(width, parity, ashift).unwrap();
        let sector = 1u64 << ashift;
        let psize = (1 + rng.below(2048)) * 512;
        let offset = rng.below(1 << 20) * sector;
        let map = geometry.map(offset, psize);
        let mut sectors: Vec<u64> = Vec::new();
        let mut children = std::collections::BTreeSet::new();
        for column in map.columns() {
            assert!(children.insert(column.child), "two columns on one child");
            assert!(column.size > 0 && column.size.is_multiple_of(sector));
            for k in 0..column.size / sector {
                let child_sector = column.child_offset / sector + k;
                sectors.push(child_sector * u64::from(width) + u64::from(column.child));
            }
        }
        sectors.sort_unstable();
        let first = offset / sector;
        let expected: Vec<u64> = (first..first + sectors.len() as u64).collect();
        assert_eq!(
            sectors, expected,
            "width {width} parity {parity} psize {psize}"
        );
        assert!(sectors.len() as u64 * sector <= geometry.asize(psize));
        let data: u64 = (0..map.columns().len() - map.parity())
            .map(|index| map.data_range(index).len() as u64)
            .sum();
        assert_eq!(data, psize, "the data columns hold the block exactly");
    }
}

#[test]
fn any_parity_columns_rebuild_from_the_rest() {
    let mut rng = Rng(11);
    for round in 0..300 {
        let parity = 1 + (round % 3) as u8;
        let width = u32::from(parity) + 1 + rng.below(7) as u32;
        let ashift = 9;
        let geometry = RaidzGeometry::new(width, parity, ashift).unwrap();
        let psize = (1 + rng.below(64)) * 512;
        let map = geometry.map(rng.below(4096) * 512, psize);
        let data = rng.bytes(psize as usize);
        let encoded = map.encode(&data);
        let mut out = vec![0u8; psize as usize];
        map.gather(&encoded, &mut out).unwrap();
        assert_eq!(out, data);
        for missing in subsets(map.columns().len(), usize::from(parity)) {
            let mut damaged = encoded.clone();
            for &index in &missing {
                damaged[index] = rng.bytes(map.column_buffer_bytes());
            }
            map.reconstruct(&mut damaged, &missing).unwrap();
            assert_eq!(
                damaged, encoded,
                "width {width} parity {parity} missing {missing:?}"
            );
        }
    }
}

#[test]
fn more_missing_than_parity_is_refused() {
    let geometry = RaidzGeometry::new(6, 2, 9).unwrap();
    let map = geometry.map(0, 8192);
    let mut buffers = map.encode(&[7u8; 8192]);
    assert_eq!(
        map.reconstruct(&mut buffers, &[0, 3, 4]),
        Err(RaidzError::TooManyMissing {
            missing: 3,
            parity: 2
        })
    );
    assert!(matches!(
        map.reconstruct(&mut buffers, &[9]),
        Err(RaidzError::NoSuchColumn { .. })
    ));
}
