//! Events: what a layer has to tell a person that is neither an error returned to its caller
//! nor a counter — a leaf faulted after a failed flush, an intent log falling back to a txg
//! sync, labels that could not be erased from a removed device. Libraries never print; they
//! record an event here, and the front end decides where it goes: `cairn serve` writes each
//! new one to its stderr as it comes, a one-shot command prints those its work caused, and the
//! analytics show the recent ones (the page's health panel, `cairn_events_total`).
//!
//! One log per process (like the counters `cairn stat` reads, it belongs to the process, not
//! to a pool), bounded: the newest `EVENTS_KEPT` events are kept; every event has a sequence
//! number that only grows, so a reader asks for what came after the last one it saw and
//! notices how many it missed. Recording takes a short lock; events are rare (faults and
//! fallbacks), never per I/O.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Events kept; older ones are dropped (readers see the gap in sequence numbers).
pub const EVENTS_KEPT: usize = 1024;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// 1 for the process's first event, then one more for each.
    pub seq: u64,
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// The layer that recorded it (`pool`, `zil`, `engine`...).
    pub source: &'static str,
    pub message: String,
}

struct Log {
    next_seq: u64,
    kept: VecDeque<Event>,
    by_source: Vec<(&'static str, u64)>,
}

static LOG: Mutex<Log> = Mutex::new(Log {
    next_seq: 1,
    kept: VecDeque::new(),
    by_source: Vec::new(),
});

fn log() -> std::sync::MutexGuard<'static, Log> {
    // A panic while holding this lock leaves the log consistent (each push is whole).
    LOG.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records an event from `source`.
pub fn record(source: &'static str, message: String) {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        });
    let mut log = log();
    let seq = log.next_seq;
    log.next_seq += 1;
    match log.by_source.iter_mut().find(|(name, _)| *name == source) {
        Some((_, count)) => *count += 1,
        None => log.by_source.push((source, 1)),
    }
    log.kept.push_back(Event {
        seq,
        unix_ms,
        source,
        message,
    });
    while log.kept.len() > EVENTS_KEPT {
        log.kept.pop_front();
    }
}

/// The kept events with a sequence number above `seq` (0: all kept), oldest first.
pub fn since(seq: u64) -> Vec<Event> {
    log().kept.iter().filter(|e| e.seq > seq).cloned().collect()
}

/// The sequence number of the newest event (0: none yet).
pub fn latest_seq() -> u64 {
    log().next_seq - 1
}

/// Events recorded so far, by source (dropped ones included).
pub fn counts_by_source() -> Vec<(&'static str, u64)> {
    log().by_source.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_get_what_came_after_them_and_the_log_stays_bounded() {
        let before = latest_seq();
        record("test", "first".into());
        record("test", "second".into());
        let seen = since(before);
        let mine: Vec<&str> = seen
            .iter()
            .filter(|e| e.source == "test")
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(mine, ["first", "second"]);
        assert!(seen.windows(2).all(|w| w[0].seq < w[1].seq));
        for i in 0..(EVENTS_KEPT + 10) {
            record("test-flood", format!("{i}"));
        }
        assert!(since(0).len() <= EVENTS_KEPT);
        let counted = counts_by_source()
            .into_iter()
            .find(|(source, _)| *source == "test-flood")
            .map_or(0, |(_, count)| count);
        assert_eq!(
            counted,
            (EVENTS_KEPT + 10) as u64,
            "dropped events still counted"
        );
        assert_eq!(since(latest_seq()), Vec::new());
    }
}
