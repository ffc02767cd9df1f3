//! The server's memory of the recent past, for the page: a point per second for the last
//! `SECONDS_KEPT` seconds and a point per minute for the last `MINUTES_KEPT` minutes, so a page
//! opened (or reloaded) shows what happened before it was there.
//!
//! A point holds *series* (rates per second of counters, or levels) and *heat* (latency
//! histograms of the interval on the shared power-of-two buckets: one column of a heatmap).
//! Series and heat are named by string keys (`ds:tank/vol:write.ops`, `lat:tank/vol:write`,
//! ...; see `observe`) interned into a key table that only grows, so a point stores small
//! numbers: (key index, value) pairs, and heat only where something happened.
//!
//! Bounds: the rings hold at most `SECONDS_KEPT + MINUTES_KEPT` points and the key table at
//! most `KEYS_MAX` keys (a key beyond it is not recorded, and counted in `keys_dropped`), so
//! memory is bounded whatever the workload; a point costs ~8 bytes per series and ~110 bytes
//! per latency histogram that saw operations.
//!
//! A minute point is the mean of the second points of that minute for series and the sum of
//! their heat; the minute in progress is not shown until it ends.

use super::sample::{DeviceSample, LATENCY_BUCKETS, LatencyBuckets, PoolSample, Sample};
use std::collections::{HashMap, VecDeque};

pub const SECONDS_KEPT: usize = 600;
pub const MINUTES_KEPT: usize = 1440;
const KEYS_MAX: usize = 4096;

/// What one sample shows, flattened: counters (to turn into rates), levels, and cumulative
/// latency histograms (to turn into the interval's).
#[derive(Debug, Default)]
pub struct Observed {
    pub unix_ms: u64,
    pub counters: Vec<(String, u64)>,
    pub levels: Vec<(String, f64)>,
    pub heat: Vec<(String, LatencyBuckets)>,
}

/// Flattens a sample into named values. Key scheme:
/// - `ds:DATASET:OP.ops|bytes|errors` (front-end operations), `lat:DATASET:OP` (their latency);
/// - `zil:DATASET:commits|batches|blocks|bytes`, `zlat:DATASET` (commit latency);
/// - `dev:POOL:DEVICE:read|write.ops|calls|bytes`, `dev:POOL:DEVICE:flushes`,
///   `dev:POOL:DEVICE:queued|active`, `dlat:POOL:DEVICE:read|write`;
/// - `dsz:POOL:DEVICE:read|write.ind|agg`: sizes of requests as submitted (ind) and of device
///   calls that merged several (agg), heat on the device queue's size buckets (512 B << i)
///   rather than latency buckets;
/// - `pool:POOL:alloc|size|dirty|txgs|synced_bytes|delays|delay_ms`;
/// - `arc:FIELD` (every ARC field: levels for sizes, counters otherwise),
///   `l2:POOL:FIELD` (the same for the cache tier);
/// - `nfs:PROGRAM.PROCEDURE.ops` (NFS and MOUNT calls), `nfs:read.bytes`, `nfs:write.bytes`,
///   `nfs:clients` and `nfs:connections` (levels), `nlat:all|read|write|commit` (NFS call
///   latency: every procedure's, and the three that move data).
pub fn observe(sample: &Sample) -> Observed {
    let mut o = Observed {
        unix_ms: sample.unix_ms,
        ..Observed::default()
    };
    for (field, value) in &sample.arc {
        if super::prometheus::is_arc_level(field) {
            o.levels.push((format!("arc:{field}"), *value as f64));
        } else {
            o.counters.push((format!("arc:{field}"), *value));
        }
    }
    if let Some(bytes) = sample.resident_bytes {
        o.levels.push(("proc:resident".into(), bytes as f64));
    }
    for pool in &sample.pools {
        observe_datasets(&mut o, pool);
        for device in &pool.devices {
            observe_device(&mut o, &pool.name, device);
        }
        observe_pool(&mut o, pool);
    }
    if let Some(nfs) = &sample.nfs {
        observe_nfs(&mut o, nfs);
    }
    o
}

/// The NFS server: calls by procedure, bytes, levels and latency heat.
fn observe_nfs(o: &mut Observed, nfs: &crate::nfs_stats::NfsSnapshot) {
    use crate::nfs_stats::{MOUNT_PROCEDURES, NFS_PROCEDURES};
    let mut all = LatencyBuckets::empty();
    let named = NFS_PROCEDURES
        .iter()
        .map(|(_, name)| ("nfs", *name))
        .zip(&nfs.nfs)
        .chain(
            MOUNT_PROCEDURES
                .iter()
                .map(|(_, name)| ("mount", *name))
                .zip(&nfs.mount),
        );
    for ((program, procedure), op) in named {
        o.counters
            .push((format!("nfs:{program}.{procedure}.ops"), op.ops));
        if op.ops == 0 {
            continue;
        }
        let buckets = LatencyBuckets::from_histogram(&op.latency_us);
        for (sum, count) in all.counts.iter_mut().zip(&buckets.counts) {
            *sum += count;
        }
        all.overflow += buckets.overflow;
        all.sum_us += buckets.sum_us;
        if program == "nfs" && matches!(procedure, "read" | "write" | "commit") {
            o.heat.push((format!("nlat:{procedure}"), buckets));
        }
    }
    o.heat.push(("nlat:all".into(), all));
    for (name, procedure) in [
        ("read", cairn_nfs::nfs3::Nfs3Proc::Read),
        ("write", cairn_nfs::nfs3::Nfs3Proc::Write),
    ] {
        let bytes = nfs.nfs_op(procedure).map_or(0, |op| op.bytes);
        o.counters.push((format!("nfs:{name}.bytes"), bytes));
    }
    o.levels
        .push(("nfs:clients".into(), nfs.clients.len() as f64));
    o.levels
        .push(("nfs:connections".into(), nfs.server.connections_open as f64));
}

/// A pool's datasets: front-end operations (`ds:`, `lat:`) and intent logs (`zil:`, `zlat:`).
fn observe_datasets(o: &mut Observed, pool: &PoolSample) {
    for dataset in &pool.datasets {
        let d = &dataset.dataset;
        for op in &dataset.ops {
            let kind = op.op;
            o.counters.push((format!("ds:{d}:{kind}.ops"), op.ops));
            o.counters.push((format!("ds:{d}:{kind}.bytes"), op.bytes));
            o.counters
                .push((format!("ds:{d}:{kind}.errors"), op.errors));
            o.heat.push((format!("lat:{d}:{kind}"), op.latency.clone()));
        }
    }
    for log in &pool.intent_logs {
        let d = &log.dataset;
        let s = &log.stats;
        for (field, value) in [
            ("commits", s.commits),
            ("batches", s.batches),
            ("blocks", s.blocks_written),
            ("bytes", s.bytes_written),
        ] {
            o.counters.push((format!("zil:{d}:{field}"), value));
        }
        o.heat
            .push((format!("zlat:{d}"), log.commit_latency.clone()));
    }
}

/// One device of pool `name`: its queue (`dev:`, `dsz:`) and latencies (`dlat:`).
fn observe_device(o: &mut Observed, name: &str, device: &DeviceSample) {
    let dev = &device.device.name;
    let prefix = format!("dev:{name}:{dev}");
    if let Some(q) = &device.device.queue {
        for (field, value) in [
            ("read.ops", q.read_requests),
            ("read.calls", q.read_calls),
            ("read.bytes", q.read_bytes),
            ("write.ops", q.write_requests),
            ("write.calls", q.write_calls),
            ("write.bytes", q.write_bytes),
            ("flushes", q.flushes),
        ] {
            o.counters.push((format!("{prefix}:{field}"), value));
        }
        o.levels.push((format!("{prefix}:queued"), q.queued as f64));
        o.levels.push((format!("{prefix}:active"), q.active as f64));
        let mut read = cairn_device::iostats::DirectionStats::default();
        let mut write = cairn_device::iostats::DirectionStats::default();
        for class in &q.classes {
            read.add(&class.read);
            write.add(&class.write);
        }
        for (op, direction) in [("read", &read), ("write", &write)] {
            for (kind, histogram) in [
                ("ind", &direction.request_size_bytes),
                ("agg", &direction.aggregate_size_bytes),
            ] {
                o.heat.push((
                    format!("dsz:{name}:{dev}:{op}.{kind}"),
                    LatencyBuckets::from_counts(&histogram.counts),
                ));
            }
        }
    }
    o.heat.push((
        format!("dlat:{name}:{dev}:read"),
        device.read_latency.clone(),
    ));
    o.heat.push((
        format!("dlat:{name}:{dev}:write"),
        device.write_latency.clone(),
    ));
}

/// A pool's space and txgs (`pool:`) and its cache tier (`l2:`).
fn observe_pool(o: &mut Observed, pool: &PoolSample) {
    let name = &pool.name;
    let status = &pool.status;
    o.levels
        .push((format!("pool:{name}:alloc"), status.allocated_bytes as f64));
    o.levels
        .push((format!("pool:{name}:size"), status.size_bytes as f64));
    o.levels
        .push((format!("pool:{name}:dirty"), pool.dirty_bytes as f64));
    if let Some(txg) = &pool.txg_stats {
        o.counters
            .push((format!("pool:{name}:txgs"), txg.txgs_synced));
        o.counters
            .push((format!("pool:{name}:synced_bytes"), txg.bytes_synced_total));
        o.counters
            .push((format!("pool:{name}:delays"), txg.writer_delays_count));
        o.counters.push((
            format!("pool:{name}:delay_ms"),
            txg.writer_delay_ns_total / 1_000_000,
        ));
    }
    if let Some(fields) = &pool.l2arc {
        for (field, value) in fields {
            if super::prometheus::is_l2arc_level(field) {
                o.levels.push((format!("l2:{name}:{field}"), *value as f64));
            } else {
                o.counters.push((format!("l2:{name}:{field}"), *value));
            }
        }
    }
}

/// One interval: when it ended, how long it was, its series and its heat.
#[derive(Debug, Clone, Default)]
struct Point {
    unix_ms: u64,
    seconds: f64,
    series: Vec<(u16, f32)>,
    heat: Vec<(u16, [u32; LATENCY_BUCKETS])>,
}

/// Heat in progress for a minute point: sums of the second points.
#[derive(Debug, Default)]
struct MinuteInProgress {
    minute: u64,
    points: u32,
    seconds: f64,
    series: HashMap<u16, f64>,
    heat: HashMap<u16, [u32; LATENCY_BUCKETS]>,
}

/// The bounded history (see the module doc).
#[derive(Debug, Default)]
pub struct History {
    keys: Vec<String>,
    key_index: HashMap<String, u16>,
    keys_dropped: u64,
    previous: Option<Observed>,
    seconds: VecDeque<Point>,
    minutes: VecDeque<Point>,
    minute: Option<MinuteInProgress>,
}

/// Which ring a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Second,
    Minute,
}

fn bucket_counts(buckets: &LatencyBuckets) -> [u32; LATENCY_BUCKETS] {
    let mut out = [0u32; LATENCY_BUCKETS];
    for (slot, count) in out.iter_mut().zip(&buckets.counts) {
        *slot = u32::try_from(*count).unwrap_or(u32::MAX);
    }
    // Slower than the last bound: shown in the last row.
    let last = &mut out[LATENCY_BUCKETS - 1];
    *last = last.saturating_add(u32::try_from(buckets.overflow).unwrap_or(u32::MAX));
    out
}

impl History {
    fn key(&mut self, name: &str) -> Option<u16> {
        if let Some(index) = self.key_index.get(name) {
            return Some(*index);
        }
        if self.keys.len() >= KEYS_MAX {
            self.keys_dropped += 1;
            return None;
        }
        // KEYS_MAX < u16::MAX, so the index fits.
        let index = self.keys.len() as u16;
        self.keys.push(name.to_string());
        self.key_index.insert(name.to_string(), index);
        Some(index)
    }

    /// Records a new observation: a second point from the difference with the previous one.
    pub fn record(&mut self, now: Observed) {
        let Some(before) = self.previous.take() else {
            self.previous = Some(now);
            return;
        };
        let seconds = (now.unix_ms.saturating_sub(before.unix_ms) as f64 / 1000.0).max(0.001);
        let earlier: HashMap<&str, u64> = before
            .counters
            .iter()
            .map(|(key, value)| (key.as_str(), *value))
            .collect();
        let earlier_heat: HashMap<&str, &LatencyBuckets> = before
            .heat
            .iter()
            .map(|(key, value)| (key.as_str(), value))
            .collect();
        let mut point = Point {
            unix_ms: now.unix_ms,
            seconds,
            ..Point::default()
        };
        let mut rates = Vec::new();
        for (name, value) in &now.counters {
            // A counter seen for the first time counts from zero (a new dataset's first
            // operations are real); one that went backwards restarted (an export reopened).
            let was = earlier.get(name.as_str()).copied().unwrap_or(0);
            let delta = value.checked_sub(was).unwrap_or(*value);
            rates.push((name.clone(), delta as f64 / seconds));
        }
        for (name, rate) in rates {
            if let Some(key) = self.key(&name) {
                point.series.push((key, rate as f32));
            }
        }
        for (name, level) in &now.levels {
            if let Some(key) = self.key(name) {
                point.series.push((key, *level as f32));
            }
        }
        let mut heats = Vec::new();
        for (name, buckets) in &now.heat {
            let delta = match earlier_heat.get(name.as_str()) {
                Some(was) => buckets.since(was),
                None => buckets.clone(),
            };
            if delta.count() > 0 {
                heats.push((name.clone(), bucket_counts(&delta)));
            }
        }
        for (name, counts) in heats {
            if let Some(key) = self.key(&name) {
                point.heat.push((key, counts));
            }
        }
        self.previous = Some(now);
        self.add_to_minute(&point);
        self.seconds.push_back(point);
        while self.seconds.len() > SECONDS_KEPT {
            self.seconds.pop_front();
        }
    }

    fn add_to_minute(&mut self, point: &Point) {
        let minute = point.unix_ms / 60_000;
        if self.minute.as_ref().is_some_and(|m| m.minute != minute)
            && let Some(done) = self.minute.take()
        {
            self.close_minute(done);
        }
        let acc = self.minute.get_or_insert_with(|| MinuteInProgress {
            minute,
            ..MinuteInProgress::default()
        });
        acc.points += 1;
        acc.seconds += point.seconds;
        for (key, value) in &point.series {
            *acc.series.entry(*key).or_insert(0.0) += f64::from(*value);
        }
        for (key, counts) in &point.heat {
            let sums = acc.heat.entry(*key).or_insert([0; LATENCY_BUCKETS]);
            for (sum, count) in sums.iter_mut().zip(counts) {
                *sum = sum.saturating_add(*count);
            }
        }
    }

    fn close_minute(&mut self, done: MinuteInProgress) {
        let points = f64::from(done.points.max(1));
        let mut series: Vec<(u16, f32)> = done
            .series
            .into_iter()
            .map(|(key, sum)| (key, (sum / points) as f32))
            .collect();
        series.sort_by_key(|(key, _)| *key);
        let mut heat: Vec<(u16, [u32; LATENCY_BUCKETS])> = done.heat.into_iter().collect();
        heat.sort_by_key(|(key, _)| *key);
        self.minutes.push_back(Point {
            unix_ms: (done.minute + 1) * 60_000,
            seconds: done.seconds,
            series,
            heat,
        });
        while self.minutes.len() > MINUTES_KEPT {
            self.minutes.pop_front();
        }
    }

    /// Points of `resolution` that ended after `since_ms`, as JSON in columns: `t` (end of
    /// each point, ms since the epoch), `seconds`, `series` {key: [value or null per point]},
    /// `heat` {key: [[count per bucket] or null per point]}, and `bucket_bounds_us`.
    pub fn to_json(&self, resolution: Resolution, since_ms: u64) -> serde_json::Value {
        let ring = match resolution {
            Resolution::Second => &self.seconds,
            Resolution::Minute => &self.minutes,
        };
        let points: Vec<&Point> = ring.iter().filter(|p| p.unix_ms > since_ms).collect();
        let mut series: HashMap<u16, Vec<serde_json::Value>> = HashMap::new();
        let mut heat: HashMap<u16, Vec<serde_json::Value>> = HashMap::new();
        for (i, point) in points.iter().enumerate() {
            for (key, value) in &point.series {
                let column = series
                    .entry(*key)
                    .or_insert_with(|| vec![serde_json::Value::Null; points.len()]);
                column[i] = serde_json::json!(value);
            }
            for (key, counts) in &point.heat {
                let column = heat
                    .entry(*key)
                    .or_insert_with(|| vec![serde_json::Value::Null; points.len()]);
                column[i] = serde_json::json!(counts.as_slice());
            }
        }
        let named = |columns: HashMap<u16, Vec<serde_json::Value>>| {
            columns
                .into_iter()
                .map(|(key, column)| (self.keys[usize::from(key)].clone(), column.into()))
                .collect::<serde_json::Map<String, serde_json::Value>>()
        };
        serde_json::json!({
            "resolution": match resolution { Resolution::Second => "second", Resolution::Minute => "minute" },
            "t": points.iter().map(|p| p.unix_ms).collect::<Vec<_>>(),
            "seconds": points.iter().map(|p| p.seconds).collect::<Vec<_>>(),
            "series": named(series),
            "heat": named(heat),
            "bucket_bounds_us": (0..LATENCY_BUCKETS).map(|k| 1u64 << k).collect::<Vec<_>>(),
            "keys_dropped": self.keys_dropped,
        })
    }

    pub fn second_points(&self) -> usize {
        self.seconds.len()
    }

    pub fn minute_points(&self) -> usize {
        self.minutes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(unix_ms: u64, ops: u64, latency_us: &[u64]) -> Observed {
        let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 30, 2).unwrap();
        for us in latency_us {
            histogram.record(*us).unwrap();
        }
        Observed {
            unix_ms,
            counters: vec![("ds:tank/vol:write.ops".into(), ops)],
            levels: vec![("pool:tank:alloc".into(), 42.0)],
            heat: vec![(
                "lat:tank/vol:write".into(),
                LatencyBuckets::from_histogram(&histogram),
            )],
        }
    }

    #[test]
    fn second_points_carry_rates_levels_and_the_interval_heat() {
        let mut history = History::default();
        history.record(observed(1_000, 10, &[100]));
        history.record(observed(3_000, 30, &[100, 100, 5000]));
        let json = history.to_json(Resolution::Second, 0);
        assert_eq!(json["t"], serde_json::json!([3000]));
        assert_eq!(
            json["series"]["ds:tank/vol:write.ops"],
            serde_json::json!([10.0])
        );
        assert_eq!(json["series"]["pool:tank:alloc"], serde_json::json!([42.0]));
        let heat = &json["heat"]["lat:tank/vol:write"][0];
        assert_eq!(heat[7], 1, "one more 100 µs write (bucket 2^7)");
        assert_eq!(heat[13], 1, "one 5 ms write (bucket 2^13)");
        let total: u64 = heat
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(total, 2, "only the interval's operations");
        assert_eq!(
            history.to_json(Resolution::Second, 3000)["t"],
            serde_json::json!([])
        );
    }

    #[test]
    fn rings_stay_bounded_and_minutes_average_their_seconds() {
        let mut history = History::default();
        let start = 60_000 * 1000;
        for second in 0..(SECONDS_KEPT as u64 + 130) {
            history.record(observed(start + second * 1000, second * 5, &[]));
        }
        assert_eq!(history.second_points(), SECONDS_KEPT);
        let minutes = history.minute_points();
        assert!(
            (10..=12).contains(&minutes),
            "{minutes} minute points for ~12 minutes"
        );
        let json = history.to_json(Resolution::Minute, 0);
        let rates = json["series"]["ds:tank/vol:write.ops"].as_array().unwrap();
        assert!(
            rates
                .iter()
                .all(|r| (r.as_f64().unwrap() - 5.0).abs() < 1e-3),
            "{rates:?}"
        );
    }

    #[test]
    fn the_key_table_is_bounded() {
        let mut history = History::default();
        for i in 0..(KEYS_MAX + 10) {
            let _ = history.key(&format!("k{i}"));
        }
        assert_eq!(history.keys.len(), KEYS_MAX);
        assert_eq!(history.keys_dropped, 10);
    }
}
