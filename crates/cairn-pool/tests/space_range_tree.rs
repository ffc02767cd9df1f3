//! `RangeTree` against a model: a `BTreeSet` of present 4 KiB units.
//!
//! Random add/remove sequences over a small universe (so that overlaps, exact fits, merges and
//! splits are all frequent) must succeed exactly when the model says the operation is legal,
//! leave the tree equal to the model's maximal runs, and keep the size index and histogram in
//! step. `first_fit` and `best_fit` are compared with brute-force searches over the model.

use cairn_pool::space::{HISTOGRAM_BUCKETS, RangeTree};
use proptest::prelude::*;
use std::collections::BTreeSet;

const UNIT: u64 = 4096;
const UNIVERSE_UNITS: u64 = 96;

#[derive(Debug, Clone)]
enum Op {
    Add {
        start: u64,
        length: u64,
    },
    Remove {
        start: u64,
        length: u64,
    },
    FirstFit {
        cursor_bytes: u64,
        length: u64,
        align_shift: u32,
    },
    BestFit {
        length: u64,
        align_shift: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let extent = (0..UNIVERSE_UNITS, 1..=8u64);
    prop_oneof![
        4 => extent.clone().prop_map(|(start, length)| Op::Add { start, length }),
        3 => extent.prop_map(|(start, length)| Op::Remove { start, length }),
        1 => (0..UNIVERSE_UNITS * UNIT + UNIT, 1..=6u64, 12..=15u32).prop_map(
            |(cursor_bytes, length, align_shift)| Op::FirstFit { cursor_bytes, length, align_shift }
        ),
        1 => (1..=6u64, 12..=15u32).prop_map(|(length, align_shift)| Op::BestFit {
            length,
            align_shift
        }),
    ]
}

/// Maximal runs of the model as `(start, end)` bytes.
fn runs(model: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &unit in model {
        match runs.last_mut() {
            Some((_, end)) if *end == unit * UNIT => *end += UNIT,
            _ => runs.push((unit * UNIT, (unit + 1) * UNIT)),
        }
    }
    runs
}

/// Whether every unit of the unit-aligned byte extent is in the model.
fn model_contains(model: &BTreeSet<u64>, start: u64, length: u64) -> bool {
    (start / UNIT..(start + length) / UNIT).all(|unit| model.contains(&unit))
}

fn brute_first_fit(model: &BTreeSet<u64>, cursor: u64, length: u64, align: u64) -> Option<u64> {
    let limit = UNIVERSE_UNITS * UNIT + 16 * UNIT;
    let fits = |p: &u64| model_contains(model, *p, length);
    let from = cursor.div_ceil(align) * align;
    (from..limit)
        .step_by(align as usize)
        .find(fits)
        .or_else(|| (0..limit).step_by(align as usize).find(fits))
}

fn brute_best_fit(model: &BTreeSet<u64>, length: u64, align: u64) -> Option<u64> {
    runs(model)
        .into_iter()
        .filter_map(|(start, end)| {
            let aligned = start.div_ceil(align) * align;
            (aligned + length <= end).then_some((end - start, start, aligned))
        })
        .min()
        .map(|(_, _, aligned)| aligned)
}

fn check_against_model(tree: &RangeTree, model: &BTreeSet<u64>) {
    tree.assert_invariants();
    let expected = runs(model);
    assert_eq!(tree.iter().collect::<Vec<_>>(), expected);
    assert_eq!(tree.space_bytes(), model.len() as u64 * UNIT);
    assert_eq!(tree.segment_count(), expected.len());
    let mut histogram = [0u64; HISTOGRAM_BUCKETS];
    for &(start, end) in &expected {
        histogram[(63 - (end - start).leading_zeros()) as usize] += 1;
    }
    assert_eq!(tree.histogram(), &histogram);
    let largest = expected.iter().map(|(s, e)| e - s).max().unwrap_or(0);
    assert_eq!(tree.largest_segment_bytes(), largest);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn range_tree_matches_a_unit_set_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut tree = RangeTree::new();
        let mut model = BTreeSet::new();
        for op in ops {
            match op {
                Op::Add { start, length } => {
                    let units = start..start + length;
                    let legal = units.clone().all(|unit| !model.contains(&unit));
                    let before = tree.clone();
                    let result = tree.add(start * UNIT, length * UNIT);
                    prop_assert_eq!(result.is_ok(), legal, "add {:?}", units);
                    prop_assert!(tree.overlaps(start * UNIT, length * UNIT));
                    if legal {
                        model.extend(units);
                    } else {
                        prop_assert_eq!(&tree, &before);
                    }
                }
                Op::Remove { start, length } => {
                    let units = start..start + length;
                    let legal = units.clone().all(|unit| model.contains(&unit));
                    prop_assert_eq!(tree.contains(start * UNIT, length * UNIT), legal);
                    let before = tree.clone();
                    let result = tree.remove(start * UNIT, length * UNIT);
                    prop_assert_eq!(result.is_ok(), legal, "remove {:?}", units);
                    if legal {
                        for unit in units {
                            model.remove(&unit);
                        }
                        prop_assert!(!tree.overlaps(start * UNIT, length * UNIT));
                    } else {
                        prop_assert_eq!(&tree, &before);
                    }
                }
                Op::FirstFit { cursor_bytes, length, align_shift } => {
                    let align = 1u64 << align_shift;
                    prop_assert_eq!(
                        tree.first_fit(cursor_bytes, length * UNIT, align),
                        brute_first_fit(&model, cursor_bytes, length * UNIT, align),
                        "first_fit({}, {}, {})", cursor_bytes, length * UNIT, align
                    );
                }
                Op::BestFit { length, align_shift } => {
                    let align = 1u64 << align_shift;
                    prop_assert_eq!(
                        tree.best_fit(length * UNIT, align),
                        brute_best_fit(&model, length * UNIT, align)
                    );
                }
            }
            check_against_model(&tree, &model);
        }
    }
}

#[test]
fn extents_at_the_top_of_the_u64_range() {
    let mut tree = RangeTree::new();
    tree.add(u64::MAX - 10, 10).unwrap();
    assert!(tree.add(u64::MAX - 1, 2).is_err(), "end past 2^64");
    assert!(tree.contains(u64::MAX - 10, 10));
    assert!(!tree.contains(u64::MAX - 10, 11));
    assert_eq!(tree.first_fit(u64::MAX - 5, 4, 1), Some(u64::MAX - 5));
    assert_eq!(tree.first_fit(u64::MAX - 5, 4, 8), Some(u64::MAX - 7));
    assert_eq!(tree.best_fit(10, 1), Some(u64::MAX - 10));
    tree.remove(u64::MAX - 10, 10).unwrap();
    assert!(tree.is_empty());
}
