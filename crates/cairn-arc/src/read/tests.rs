//! Tests of `read`'s pure rules (the read path end to end is tested through `CachedIo` by the
//! crates above and `tests/stress.rs`).

use super::*;

#[test]
fn freed_heap_is_kept_only_while_the_cache_has_room_for_all_of_it() {
    let target = 1 << 30;
    assert!(keeps_freed_heap(0, target, target));
    assert!(keeps_freed_heap(target / 2, target / 2, target));
    assert!(!keeps_freed_heap(target / 2, target / 2 + 1, target));
    assert!(!keeps_freed_heap(target, 1, target));
    // A cache over its target (readers' slack) keeps nothing, and sizes never wrap.
    assert!(!keeps_freed_heap(target + 1, 0, target));
    assert!(!keeps_freed_heap(1, u64::MAX, u64::MAX - 1));
}
