//! cargo-fuzz target `snapshot_record`: the case lives in `cairn_fuzz_cases::snapshot_record` (shared with the stable
//! replay test that CI runs), which says what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cairn_fuzz_cases::snapshot_record::run(data));
