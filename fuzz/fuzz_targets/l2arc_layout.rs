//! cargo-fuzz target `l2arc_layout`: the case lives in `cairn_fuzz_cases::l2arc_layout` (shared with the stable
//! replay test that CI runs), which says what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cairn_fuzz_cases::l2arc_layout::run(data));
