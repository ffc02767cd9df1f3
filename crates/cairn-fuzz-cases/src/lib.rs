//! # cairn-fuzz-cases: one fuzz case per on-disk decoder, shared by every fuzzer
//!
//! Each module's `run(data)` decodes arbitrary bytes with one `cairn-format` (or
//! `cairn-object`, `cairn-dataset`, `cairn-fs`, `cairn-l2arc`) decoder, plus copies with the magic and checksums patched in so that the
//! deeper field checks are reached, and asserts that whatever decodes survives encode → decode
//! unchanged. A panic in `run` is a bug in a decoder (or a validator behind it), never in the
//! input: decoders must return an error for any bytes.
//!
//! Two drivers call these same functions, so what CI checks is exactly what the fuzzer checks:
//! - the cargo-fuzz targets in `fuzz/fuzz_targets` (libFuzzer, nightly, sanitizers; a separate
//!   workspace), one line each;
//! - `tests/replay.rs` here (stable, part of `cargo test --workspace`): it replays the committed
//!   seed corpus `fuzz/seeds/TARGET/` and any local libFuzzer corpus `fuzz/corpus/TARGET/`, and
//!   a bounded number of seeded random and mutated inputs.
//!
//! `TARGETS` lists every case by its cargo-fuzz target name; a fuzz target added in `fuzz/`
//! belongs here first.

pub mod blkptr;
pub mod dataset_directory;
pub mod dnode;
pub mod fs_attrs;
pub mod fs_log;
pub mod fs_map;
pub mod intent_log;
pub mod l2arc_layout;
pub mod label_config;
pub mod objset;
pub mod send_stream;
pub mod snapshot_record;
pub mod space_log;
pub mod uberblock;

/// A fuzz case: decode one input, assert the round trip; panics only on a decoder bug.
pub type FuzzCase = fn(&[u8]);

/// Every fuzz case, by the name of its cargo-fuzz target (and of its corpus directory).
pub const TARGETS: &[(&str, FuzzCase)] = &[
    ("blkptr", blkptr::run),
    ("dataset_directory", dataset_directory::run),
    ("dnode", dnode::run),
    ("fs_attrs", fs_attrs::run),
    ("fs_log", fs_log::run),
    ("fs_map", fs_map::run),
    ("intent_log", intent_log::run),
    ("l2arc_layout", l2arc_layout::run),
    ("label_config", label_config::run),
    ("objset", objset::run),
    ("send_stream", send_stream::run),
    ("snapshot_record", snapshot_record::run),
    ("space_log", space_log::run),
    ("uberblock", uberblock::run),
];
