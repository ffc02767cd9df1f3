//! Shared helpers for cairn benchmarks (see the binaries in src/bin).
