//! # Analytics: Prometheus metrics and the live page
//!
//! What the appliance's Analytics did for ZFS (seed 002), for a cairn server: make latency
//! distributions, aggregation, the intent log, txgs and the caches visible as they change.
//! Two consumers, one source:
//! - `sample`: one look at every counter and histogram the layers keep (the ones `cairn stat`
//!   and `pool iostat` print), with latencies folded onto one power-of-two scale;
//! - `prometheus`: a sample as OpenMetrics text (`/metrics`) for monitoring systems, built of
//!   `families` (the encoder's input) with the NFS server's in `nfs_metrics`;
//! - `history`: a bounded memory of per-second and per-minute points (rates, levels, latency
//!   heat) so the page shows the past on first load;
//! - `status`: the state panels' data (vdev tree, health, txgs, recent events);
//! - `http`: the endpoint (`cairn serve --http ADDR`) serving all of it and the page.
//!
//! Cost: nothing is added to any I/O path. Everything is read from counters the layers already
//! keep, when a scrape or the once-a-second sampler asks (the sampler runs only while the
//! endpoint is on), under the same short locks `cairn stat` takes.
//!
//! Known gaps: the history is not persisted (a restarted server starts with an empty past).

mod families;
pub mod history;
pub mod http;
mod nfs_metrics;
pub mod prometheus;
pub mod sample;
pub mod status;

pub use http::{AnalyticsError, AnalyticsServer, start};
pub use sample::Sample;
