//! cargo-fuzz target `send_stream`: the case lives in `cairn_fuzz_cases::send_stream` (shared with the stable
//! replay test that CI runs), which says what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cairn_fuzz_cases::send_stream::run(data));
