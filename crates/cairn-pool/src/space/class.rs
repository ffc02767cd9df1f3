//! `SpaceClass`, what a top-level vdev's space is for (data and metadata, or intent-log blocks
//! only). It sits below both the allocator and `top_vdev`, which each need it, so neither has to
//! use the other for it (they once used each other in a loop). This file uses no sibling.

/// What a top-level vdev is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpaceClass {
    /// Data and metadata.
    #[default]
    Normal,
    /// A separate intent-log device: only log blocks go there.
    Log,
}
