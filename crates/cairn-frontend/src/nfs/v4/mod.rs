//! NFSv4.1 (RFC 8881), the first step of docs/nfs-v4.md: program 100003 version 4 on the
//! same port as v3 (`connection.rs` hands version 4's COMPOUND here), serving the same
//! shared filesystems with the same handles through a pseudo root (`pseudo.rs`), sessions
//! with exactly-once slots, clients with leases and open state without deny modes
//! (`sessions.rs`, beside `context.rs`), and the operations a Linux client needs to mount,
//! list, create, read, write, commit and remove (`ops.rs`), each carried out by v3's code so
//! that stability levels, the verifier, access lists, root squash and STALE handles are the
//! same in both versions. `compound.rs` runs a COMPOUND.
//!
//! Not yet (docs/nfs-v4.md's later steps): CREATE (directories, symlinks, nodes), RENAME,
//! LINK, READLINK, OPEN_DOWNGRADE, deny modes (refused NOTSUPP, never ignored), locks, the
//! grace period (reclaims get NO_GRACE; the client opens again), delegations and the back
//! channel, state protection (AUTH_SYS only), idmapping (owners are numeric strings).

mod compound;
mod ops;
mod pseudo;

pub use compound::compound;
