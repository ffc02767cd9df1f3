//! How far a scrub has come (`ScrubProgress`): what `scrub.rs` reports as it walks and what the
//! `Pool` handle keeps for watchers while one runs. A leaf of the engine's modules (no
//! sibling), so the handle can hold it without using the scrub itself.

#[derive(Debug, Clone, Default)]
pub struct ScrubProgress {
    pub scanned_bytes: u64,
    pub total_bytes: u64,
    pub blocks: u64,
    pub bad_copies: u64,
    pub repaired_copies: u64,
    pub repaired_bytes: u64,
    pub unrecoverable_blocks: u64,
}
