//! Number, duration and date formatting for output meant for people, with the exact forms
//! (`-p`) beside them.
//!
//! Dates are printed in UTC (`2025-01-31 14:05:09 UTC`): the CLI has no time-zone database and
//! a stated zone beats a guessed one.

use cairn_dataset::properties::format_size;

/// `1.50G` or, with `exact`, the byte count.
pub fn size(bytes: u64, exact: bool) -> String {
    if exact {
        bytes.to_string()
    } else {
        format_size(bytes)
    }
}

/// `part` as a whole percentage of `whole` (rounded down, 0 for an empty whole); `%` unless exact.
pub fn percent(part: u64, whole: u64, exact: bool) -> String {
    let value = if whole == 0 {
        0
    } else {
        (u128::from(part) * 100 / u128::from(whole)) as u64
    };
    percent_value(value, exact)
}

pub fn percent_value(value: u64, exact: bool) -> String {
    if exact {
        value.to_string()
    } else {
        format!("{value}%")
    }
}

/// A duration in microseconds: `850us`, `12.3ms`, `4.20s`; exact is the microsecond count.
pub fn micros(us: u64, exact: bool) -> String {
    if exact {
        us.to_string()
    } else if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// A duration in milliseconds as whole seconds, rounded: `0s`, `12s`, `1h02m05s`.
pub fn seconds(ms: u64) -> String {
    let secs = (ms + 500) / 1000;
    if secs < 3600 {
        format!("{secs}s")
    } else {
        format!("{}h{:02}m{:02}s", secs / 3600, secs / 60 % 60, secs % 60)
    }
}

/// Milliseconds since the Unix epoch as a UTC date and time.
pub fn date(ms: u64) -> String {
    cairn_metrics::time::utc_date(ms)
}

/// `value` over `seconds` as a rate of operations: one decimal, or whole with `exact`.
pub fn per_second_count(value: u64, seconds: f64, exact: bool) -> String {
    let rate = value as f64 / seconds;
    if exact {
        format!("{rate:.0}")
    } else {
        format!("{rate:.1}")
    }
}

/// `value` bytes over `seconds` as a rate: human units, or whole bytes with `exact`.
pub fn per_second_bytes(value: u64, seconds: f64, exact: bool) -> String {
    let rate = value as f64 / seconds;
    if exact {
        format!("{rate:.0}")
    } else {
        size(rate as u64, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(date(0), "1970-01-01 00:00:00 UTC");
        // 2000-02-29 12:34:56 UTC
        assert_eq!(date(951_827_696_000), "2000-02-29 12:34:56 UTC");
        assert_eq!(date(1_735_689_599_000), "2024-12-31 23:59:59 UTC");
    }

    #[test]
    fn numbers_are_human_or_exact() {
        assert_eq!(size(16384, false), "16K");
        assert_eq!(size(16384, true), "16384");
        assert_eq!(percent(1, 3, false), "33%");
        assert_eq!(percent(5, 0, true), "0");
        assert_eq!(micros(1_500, false), "1.5ms");
        assert_eq!(micros(1_500, true), "1500");
        assert_eq!(seconds(1_499), "1s");
        assert_eq!(seconds(3_725_000), "1h02m05s");
    }
}
