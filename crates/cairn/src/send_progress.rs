//! `cairn send -v` progress: once a second, on stderr, the bytes sent, the share of the whole,
//! the rate and the time left, as `zfs send -v` prints while it runs.
//!
//! Why the whole is known: `send -n`'s count (`SendOptions::count_only`) gives the stream's
//! exact size from the block pointers before the send starts, so "time left" is the bytes
//! still to come over the rate so far, not a guess from space figures.
//!
//! Where the bytes are counted: in this process when it sends (the engine's progress
//! callback); through a server, which writes the stream itself, the command passes the server
//! a pipe instead of its stdout and copies the pipe to stdout (`relay`), counting as it goes.
//! That copy costs a pass over the bytes, so it is made only with `-v`.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// How often a progress line is printed.
const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// Counts a stream's bytes against its size and says when a line is due.
pub struct Meter {
    total_bytes: u64,
    started: Instant,
    last_line: Instant,
}

impl Meter {
    pub fn new(total_bytes: u64) -> Meter {
        let now = Instant::now();
        Meter {
            total_bytes,
            started: now,
            last_line: now,
        }
    }

    /// The progress line for `bytes` sent so far, if one is due.
    pub fn update(&mut self, bytes: u64) -> Option<String> {
        let now = Instant::now();
        if now.duration_since(self.last_line) < LINE_INTERVAL {
            return None;
        }
        self.last_line = now;
        Some(self.line(bytes, now))
    }

    fn line(&self, bytes: u64, now: Instant) -> String {
        let elapsed_s = now.duration_since(self.started).as_secs_f64().max(1e-3);
        let rate_bytes_per_s = bytes as f64 / elapsed_s;
        // An empty stream is all sent.
        let percent = bytes
            .saturating_mul(100)
            .checked_div(self.total_bytes)
            .unwrap_or(100);
        let left_bytes = self.total_bytes.saturating_sub(bytes);
        let left = if rate_bytes_per_s > 0.0 {
            format!("{:.0} s left", left_bytes as f64 / rate_bytes_per_s)
        } else {
            "time left unknown".to_string()
        };
        format!(
            "{:>6.0} s  {} of {} ({percent}%)  {}/s  {left}",
            elapsed_s,
            crate::human::size(bytes, false),
            crate::human::size(self.total_bytes, false),
            crate::human::size(rate_bytes_per_s as u64, false),
        )
    }
}

/// Copies `input` to `out` until its end, printing a progress line on stderr when one is
/// due; returns the bytes copied.
pub fn relay(mut input: impl Read, mut out: impl Write, mut meter: Meter) -> std::io::Result<u64> {
    let mut buffer = vec![0u8; 1 << 20];
    let mut copied_bytes = 0u64;
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        out.write_all(&buffer[..read])?;
        copied_bytes += read as u64;
        if let Some(line) = meter.update(copied_bytes) {
            eprintln!("{line}");
        }
    }
    out.flush()?;
    Ok(copied_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gives_share_rate_and_time_left() {
        let meter = Meter::new(1000);
        let line = meter.line(250, meter.started + Duration::from_secs(5));
        assert!(line.contains("(25%)"), "{line}");
        // 250 bytes in 5 s: 50 B/s, 750 bytes left: 15 s.
        assert!(line.contains("15 s left"), "{line}");
    }

    #[test]
    fn relay_copies_every_byte() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        let copied = relay(&data[..], &mut out, Meter::new(data.len() as u64)).unwrap();
        assert_eq!(copied, data.len() as u64);
        assert!(out == data);
    }
}
