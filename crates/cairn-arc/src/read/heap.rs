//! The allocator's free heap: handing it back to the kernel (`malloc_trim`), measuring it, and
//! whether heap freed by a burst of writes is kept for the cache to fill.
//!
//! Invariant: kept only while the cache has room for all of it under its target, so resident
//! memory stays within the target. How it fits: a leaf of `read` — the maintenance thread in
//! `read_cache` calls these after a shrink and once writing pauses.

/// Returns freed heap to the kernel: after a shrink (or a large txg's dirty buffers freed), the
/// memory given up should be free at once, not kept by the allocator for later.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of, or inside, glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes the allocator holds free in its heaps (`None`: not known on this platform).
pub fn free_heap_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads glibc's malloc statistics.
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Whether heap freed by a burst of writes (`free_heap_bytes` of it in all) is kept rather
/// than handed back: only while the cache, holding `cached_bytes`, has room for all of it
/// under its `target_bytes`, so resident memory stays within the target.
pub fn keeps_freed_heap(cached_bytes: u64, free_heap_bytes: u64, target_bytes: u64) -> bool {
    cached_bytes.saturating_add(free_heap_bytes) <= target_bytes
}
