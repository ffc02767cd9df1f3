//! cargo-fuzz target `fs_attrs`: the case lives in `cairn_fuzz_cases::fs_attrs` (shared with the stable
//! replay test that CI runs), which says what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cairn_fuzz_cases::fs_attrs::run(data));
