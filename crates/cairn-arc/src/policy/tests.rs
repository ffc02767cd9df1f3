//! Unit tests of `policy`: what an eviction tells the tier below (the model-based tests of the
//! whole policy are in `tests/model.rs`).

use super::*;

const BLOCK: u32 = 4096;

#[test]
fn evictions_tell_what_the_tier_below_needs() {
    // A window of 2 blocks (1% of 200).
    let mut policy: ArcPolicy<u64> = ArcPolicy::new(200 * u64::from(BLOCK));
    policy.record_evictions();
    for n in 0..4u64 {
        // Block 3's dataset keeps it off the tier below (`secondarycache`).
        policy.insert_for_tier([n, 1], BLOCK, n, Access::Demand, n != 3);
    }
    // A hit in the window resets the block's other flags: the mark stays. Then more
    // blocks push it through the contest to the frequency list, and it is hit there.
    for round in 0..5u64 {
        assert_eq!(policy.get(&[3, 1], Access::Demand), Some(&3));
        assert_eq!(policy.get(&[1, 1], Access::Demand), Some(&1));
        policy.insert([100 + round, 1], BLOCK, round, Access::Demand);
    }
    policy.insert([10, 1], BLOCK, 10, Access::Prefetch);
    policy.assert_invariants();
    // A capacity drop lets every block go.
    policy.set_capacity(0);
    policy.assert_invariants();
    let evictions = policy.take_evictions();
    let find = |n: u64| {
        evictions
            .iter()
            .find(|eviction| eviction.key == [n, 1])
            .unwrap_or_else(|| panic!("block {n} was not evicted"))
    };
    assert!(!find(3).tier_eligible, "secondarycache's mark was lost");
    assert!(find(1).tier_eligible && find(0).tier_eligible);
    assert!(
        !find(10).demand_used,
        "read-ahead never used counts as used"
    );
    assert!(find(0).demand_used);
    assert_eq!(find(1).value, Some(1), "the evicted value is handed over");
    assert!(
        find(1).frequency >= 4 && find(0).frequency <= 2,
        "frequencies {} and {}",
        find(1).frequency,
        find(0).frequency
    );
    assert_eq!(find(1).epoch, policy.frequency_epoch());
    // A new sketch goes on from the old one's epoch.
    policy.resize_sketch(1 << 20);
    assert_eq!(policy.frequency_epoch(), find(1).epoch + 1);
    assert!(
        policy.take_dropped().is_empty(),
        "values both handed over and dropped"
    );
}
