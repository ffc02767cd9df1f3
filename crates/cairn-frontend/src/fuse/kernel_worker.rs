//! The kernel worker: a thread per mount that runs, one after another, the jobs that tell
//! the kernel something through `fuser::Notifier` (drop a file's cached attributes or
//! pages, write its dirty pages back before an `lseek` is answered).
//!
//! Invariant: such a job never runs inside a FUSE call (the kernel waits for the call's
//! answer before it acts, and the pages it writes back need a free event loop). Uses no
//! sibling: `mount.rs` starts the thread once the session runs (it ends with the session),
//! and the adapter sends it jobs (`FuseAdapter::kernel_job`, in `adapter.rs`).

use fuser::Notifier;

/// Work that tells the kernel something (`Notifier`), done on a thread of its own
/// (`spawn_kernel_worker`).
pub(super) type KernelJob = Box<dyn FnOnce(&Notifier) + Send>;
pub(super) type KernelJobs = std::sync::mpsc::Sender<KernelJob>;

/// A thread that runs the jobs sent to it one after another, until the session's adapter
/// goes: having the kernel drop a file's refused pages (FUSE_NOTIFY_INVAL_INODE), or write
/// its dirty pages back before an `lseek` is answered. Never done in a FUSE call itself:
/// the kernel waits for that call's answer before it can drop those pages, and the pages it
/// writes back come as WRITE calls that need a free event loop.
pub(super) fn spawn_kernel_worker(notifier: Notifier) -> KernelJobs {
    let (sender, receiver) = std::sync::mpsc::channel::<KernelJob>();
    std::thread::spawn(move || {
        for job in receiver {
            job(&notifier);
        }
    });
    sender
}
