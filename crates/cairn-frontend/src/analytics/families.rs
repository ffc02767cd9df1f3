//! The OpenMetrics families a scrape is made of, and their encoding through
//! `prometheus-client` (names, escaping, `_total` and histogram series are the crate's, not
//! hand-formatted). `prometheus.rs` and `nfs_metrics.rs` fill one `Families` per scrape.
//!
//! Families are gathered first and encoded afterwards: the format wants all series of one
//! metric together, and one metric's series come from many pools.

use super::sample::LatencyBuckets;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::collections::BTreeMap;

pub(super) type Labels = Vec<(&'static str, String)>;

/// A histogram as the format wants it: finite upper bounds, a count per bucket (one more than
/// bounds: the last is `+Inf`), and the sum of the observed values.
#[derive(Debug, Clone)]
pub(super) struct HistogramValue {
    upper_bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
}

impl HistogramValue {
    /// The shared latency buckets (µs, bucket k = (2^(k-1), 2^k]), in seconds.
    pub(super) fn latency(buckets: &LatencyBuckets) -> HistogramValue {
        let mut counts = buckets.counts.clone();
        counts.push(buckets.overflow);
        HistogramValue {
            upper_bounds: (0..buckets.counts.len())
                .map(LatencyBuckets::bound_seconds)
                .collect(),
            counts,
            sum: buckets.sum_us / 1e6,
        }
    }

    /// A device queue's power-of-two histogram (bucket i = [floor(i), floor(i+1)), the first
    /// also holding smaller values, the last larger ones), scaled by `unit` (1e-6 for µs to
    /// seconds, 1 for bytes). Bucket i's values are all below floor(i+1): that is its `le`
    /// bound, less one for whole numbers (sizes: an 8 KiB request is counted at le=16383, not
    /// at le=16384 with the 16 KiB ones).
    pub(super) fn pow2<const N: usize, const BASE_LOG2: u32>(
        histogram: &cairn_device::iostats::Pow2Histogram<N, BASE_LOG2>,
        unit: f64,
        sum: f64,
        whole_numbers: bool,
    ) -> HistogramValue {
        type H<const N: usize, const B: u32> = cairn_device::iostats::Pow2Histogram<N, B>;
        let below = if whole_numbers { 1.0 } else { 0.0 };
        HistogramValue {
            upper_bounds: (1..N)
                .map(|i| (H::<N, BASE_LOG2>::bucket_floor(i) as f64 - below) * unit)
                .collect(),
            counts: histogram.counts.to_vec(),
            sum,
        }
    }

    fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

enum Values {
    Counter(Vec<(Labels, u64)>),
    /// Counters of seconds (sums of durations).
    SecondsCounter(Vec<(Labels, f64)>),
    Gauge(Vec<(Labels, f64)>),
    Histogram(Vec<(Labels, HistogramValue)>),
}

struct Family {
    help: &'static str,
    values: Values,
}

/// Metric families by name (sorted, so scrapes are stable).
#[derive(Default)]
pub(super) struct Families(BTreeMap<String, Family>);

impl Families {
    pub(super) fn counter(
        &mut self,
        name: impl Into<String>,
        help: &'static str,
        labels: Labels,
        v: u64,
    ) {
        let family = self.0.entry(name.into()).or_insert_with(|| Family {
            help,
            values: Values::Counter(Vec::new()),
        });
        if let Values::Counter(rows) = &mut family.values {
            rows.push((labels, v));
        }
    }

    /// A counter of seconds; `name` without `_total` (the encoder adds it).
    pub(super) fn seconds_counter(
        &mut self,
        name: impl Into<String>,
        help: &'static str,
        labels: Labels,
        seconds: f64,
    ) {
        let family = self.0.entry(name.into()).or_insert_with(|| Family {
            help,
            values: Values::SecondsCounter(Vec::new()),
        });
        if let Values::SecondsCounter(rows) = &mut family.values {
            rows.push((labels, seconds));
        }
    }

    pub(super) fn gauge(
        &mut self,
        name: impl Into<String>,
        help: &'static str,
        labels: Labels,
        v: f64,
    ) {
        let family = self.0.entry(name.into()).or_insert_with(|| Family {
            help,
            values: Values::Gauge(Vec::new()),
        });
        if let Values::Gauge(rows) = &mut family.values {
            rows.push((labels, v));
        }
    }

    pub(super) fn histogram(
        &mut self,
        name: impl Into<String>,
        help: &'static str,
        labels: Labels,
        v: &LatencyBuckets,
    ) {
        self.histogram_value(name, help, labels, HistogramValue::latency(v));
    }

    pub(super) fn histogram_value(
        &mut self,
        name: impl Into<String>,
        help: &'static str,
        labels: Labels,
        v: HistogramValue,
    ) {
        let family = self.0.entry(name.into()).or_insert_with(|| Family {
            help,
            values: Values::Histogram(Vec::new()),
        });
        if let Values::Histogram(rows) = &mut family.values {
            rows.push((labels, v));
        }
    }

    /// A state set: 1 for `current`, 0 for the other `states`.
    pub(super) fn state_set(
        &mut self,
        name: &str,
        help: &'static str,
        labels: &Labels,
        states: &[&str],
        current: &str,
    ) {
        for state in states {
            let mut labels = labels.clone();
            labels.push(("state", (*state).to_string()));
            self.gauge(name, help, labels, f64::from(u8::from(*state == current)));
        }
    }
}

struct Histogram<'a>(&'a HistogramValue);

impl std::fmt::Debug for Histogram<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.0.count())
            .finish()
    }
}

impl EncodeMetric for Histogram<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .0
            .upper_bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.0.counts.iter().copied())
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.0.sum, self.0.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn encode_families(
    families: &Families,
    mut encoder: DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    for (name, family) in &families.0 {
        let kind = match family.values {
            Values::Counter(_) | Values::SecondsCounter(_) => MetricType::Counter,
            Values::Gauge(_) => MetricType::Gauge,
            Values::Histogram(_) => MetricType::Histogram,
        };
        let mut metric = encoder.encode_descriptor(name, family.help, None, kind)?;
        match &family.values {
            Values::Counter(rows) => {
                for (labels, v) in rows {
                    ConstCounter::new(*v).encode(metric.encode_family(labels)?)?;
                }
            }
            Values::SecondsCounter(rows) => {
                for (labels, v) in rows {
                    ConstCounter::new(*v).encode(metric.encode_family(labels)?)?;
                }
            }
            Values::Gauge(rows) => {
                for (labels, v) in rows {
                    ConstGauge::new(*v).encode(metric.encode_family(labels)?)?;
                }
            }
            Values::Histogram(rows) => {
                for (labels, v) in rows {
                    Histogram(v).encode(metric.encode_family(labels)?)?;
                }
            }
        }
    }
    Ok(())
}

/// The registry wants a collector that owns what it encodes: the families are built before
/// the scrape's `encode` and handed over once.
struct OneScrape(std::sync::Mutex<Option<Families>>);

impl std::fmt::Debug for OneScrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OneScrape")
    }
}

impl prometheus_client::collector::Collector for OneScrape {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let families = self
            .0
            .lock()
            .map_err(|_| std::fmt::Error)?
            .take()
            .unwrap_or_default();
        encode_families(&families, encoder)
    }
}

pub(super) fn encode_text(families: Families) -> Result<String, std::fmt::Error> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(OneScrape(std::sync::Mutex::new(Some(families)))));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}
