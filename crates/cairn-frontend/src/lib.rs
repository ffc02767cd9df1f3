//! # cairn-frontend: what every front end of a cairn server shares
//!
//! The layers below (engine, datasets, filesystems, NBD protocol) know nothing of processes,
//! sockets or users. A front end — the CLI's one-shot commands, `cairn serve` with its NBD
//! exports, FUSE mounts and analytics (Prometheus metrics, the live page) — needs the same few
//! things around them, and this crate holds them so each front end attaches to one
//! implementation:
//!
//! - `admin`: the administration library — pool create/add with device safety and
//!   all-or-nothing rollback, imports, mirrors, datasets, looks at pools and statistics, the
//!   memory budget — with its typed face (`AdminRequest` in, `AdminReply` out, `handle`) that
//!   every front end calls, in its own process or through a server, so no front end keeps
//!   policy of its own;
//! - `cache`: the pool cache (which pools this machine imported, on which devices), durable
//!   across power cuts;
//! - `pools`: `PoolAccess`, the one way to get hold of a pool by name (opened for one task, or
//!   the server's live one), and `ServedPools`, the registry of a running server's pools that
//!   every front end reads, so a volume created through one is visible to all at once;
//!   pools that cannot be opened are first-class (`PoolUnavailable`), never blocking others;
//! - `exports`: the NBD adapter, every volume of every served pool as an export;
//! - `fuse`: the FUSE adapter, a filesystem dataset mounted through the kernel, and the
//!   server's list of mounts;
//! - `nfs`: the NFSv3 server (with MOUNT and a PORTMAP responder on one port) for the
//!   filesystems whose `sharenfs` is on; `nfs_stats`: its statistics, apart so the registry
//!   can hold them;
//! - `control`: the control socket: typed admin requests to a running server and its typed
//!   replies; `passed`: a client's stdin or stdout passed with a request (SCM_RIGHTS), read or
//!   written by the server for `send` and `receive`;
//! - `analytics`: Prometheus metrics, a bounded history and the live page (`serve --http`);
//! - `serve`: a server's life, in the order that keeps it safe (bind, open, listen, drain,
//!   export).
//!
//! Rules: options come in as parameters (no environment variables are read here), nothing is
//! printed (a server's notes go to the caller's sink, command output is the caller's), and
//! errors are typed (`thiserror`, causes kept as sources) so a front end can both explain and
//! classify them. Dependencies point down only: this crate uses the engine, dataset, filesystem,
//! pool, device, format, metrics and NBD crates; only front ends use it.

pub mod admin;
pub mod analytics;
pub mod cache;
pub mod control;
pub mod control_dir;
pub mod exports;
pub mod fuse;
pub mod nfs;
pub mod nfs_stats;
pub mod passed;
pub mod pools;
pub mod serve;

pub use cache::{CacheError, PoolCache};
pub use control::{ControlError, ControlReply, ControlRequest, Failure};
pub use pools::{PoolAccess, PoolUnavailable, PoolsError, ServedPools, device_specs};
pub use serve::{Note, Ready, ServeError, ServeSettings};
