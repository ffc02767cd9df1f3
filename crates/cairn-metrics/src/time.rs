//! Wall-clock times as people read them: the engine names when a txg was committed (import's
//! rewind warnings) and the CLI prints scrub and history times, in the same UTC format.

/// Milliseconds since the Unix epoch as a UTC date and time (`2026-12-02 05:40:17 UTC`).
pub fn utc_date(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// A span of milliseconds, roughly, for a person: `850 ms`, `42 s`, `5 min 3 s`, `2 h 10 min`,
/// `3 days 4 h`.
pub fn rough_duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0 => format!("{ms} ms"),
        1..60 => format!("{secs} s"),
        60..3600 => format!("{} min {} s", secs / 60, secs % 60),
        3600..86_400 => format!("{} h {} min", secs / 3600, secs / 60 % 60),
        _ => format!("{} days {} h", secs / 86_400, secs / 3600 % 24),
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_rough() {
        assert_eq!(rough_duration(850), "850 ms");
        assert_eq!(rough_duration(42_400), "42 s");
        assert_eq!(rough_duration(303_000), "5 min 3 s");
        assert_eq!(rough_duration(7_800_000), "2 h 10 min");
        assert_eq!(rough_duration(273_600_000), "3 days 4 h");
    }
}
