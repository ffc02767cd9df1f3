//! Cached-writer tracking: the opens for writing served through the kernel's writeback
//! cache, counted per file. While a file has any, the kernel may hold written pages of it
//! that the filesystem has not seen (`lseek` has them written back first), and the last
//! one's `release` lifts a stop of its writers (`policy.rs`).
//!
//! Invariants: such an open's file handle is the object number with
//! `CACHED_WRITER_FH_BIT` set (`FuseAdapter::open_flags`), and each `opened` is matched by
//! one `released` (a count below zero is a bug, and asserts). Uses no sibling.

/// Bit of a file handle that marks an open for writing served through the kernel's
/// writeback cache (`FuseAdapter::open_flags`); the rest is the object number.
pub(super) const CACHED_WRITER_FH_BIT: u64 = 1 << 63;

/// Opens for writing through the writeback cache, per object: while a file has any, the
/// kernel may hold data of it the filesystem has not seen (`lseek`).
#[derive(Default)]
pub(super) struct CachedWriters {
    opens: parking_lot::Mutex<std::collections::HashMap<u64, u32>>,
}

impl CachedWriters {
    pub(super) fn opened(&self, object: u64) {
        *self.opens.lock().entry(object).or_insert(0) += 1;
    }

    /// Returns whether that was the object's last.
    pub(super) fn released(&self, object: u64) -> bool {
        let mut opens = self.opens.lock();
        let Some(count) = opens.get_mut(&object) else {
            // Every release of a cached writer's handle follows its `opened`.
            debug_assert!(
                false,
                "cached writer of object {object} released but never opened"
            );
            return false;
        };
        assert!(*count > 0, "cached writers of object {object} underflow");
        *count -= 1;
        if *count > 0 {
            return false;
        }
        opens.remove(&object);
        true
    }

    pub(super) fn any(&self, object: u64) -> bool {
        self.opens.lock().contains_key(&object)
    }
}
