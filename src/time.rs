//! Times as dtd writes and reads them: the one formatter and the one parser. A time of day is
//! milliseconds since the Unix epoch ([`Millis`]), as the clock (`crate::clock`) gives it;
//! people and files get RFC 3339 in UTC, and what AWS and workers write is read back here.

/// Milliseconds since the Unix epoch. Decide receives "now" as one of these; it never reads a clock.
pub type Millis = u64;

/// A time for people and files, to the second, in UTC: `2026-11-24T08:16:41Z`.
pub fn rfc3339(at: Millis) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(at))
}

/// A time that has passed, for people, to the second: `10m 3s`. Rounded down: a wait is not
/// over before it is.
pub fn span(ms: Millis) -> String {
    seconds(ms / 1000)
}

/// A time left, for people, to the second. Rounded up: `0s left` while some is would be wrong.
pub fn span_left(ms: Millis) -> String {
    seconds(ms.div_ceil(1000))
}

/// A measured duration (between two journaled events), for people, to the nearest second.
pub fn span_measured(ms: Millis) -> String {
    seconds(ms.saturating_add(500) / 1000)
}

fn seconds(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// To the millisecond, as the alerts' bodies carry it: `2026-11-22T10:00:00.123Z`.
pub fn rfc3339_millis(at: Millis) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(at))
}

/// An RFC 3339 time (as AWS events and agent markers write them) in milliseconds since the
/// epoch; an unparseable time is treated as absent.
pub fn parse_rfc3339(text: &str) -> Option<Millis> {
    let t = humantime::parse_rfc3339_weak(text).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as u64)
}

/// A date as AWS Health (`startTime`: `Sat, 05 Jun 2016 15:10:09 GMT`) and the instance metadata's
/// scheduled events (`NotBefore`: `21 Jan 2019 09:00:43 GMT`) write it: an optional weekday, which
/// is not checked (AWS's own samples name the wrong one), then day, month, year and a UTC time.
pub fn parse_gmt_date(text: &str) -> Option<Millis> {
    let text = text.trim();
    let text = match text.split_once(',') {
        Some((_weekday, rest)) => rest.trim_start(),
        None => text,
    };
    let mut parts = text.split_ascii_whitespace();
    let (day, month, year, clock, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some() || !matches!(zone, "GMT" | "UTC") {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let (day, year): (u32, u32) = (day.parse().ok()?, year.parse().ok()?);
    let mut hms = clock.split(':').map(|p| p.parse::<u32>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Built as RFC 3339 so one parser checks the calendar (31 Feb is refused there).
    let rfc = format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z");
    parse_rfc3339(&rfc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gmt_dates_as_aws_health_and_imds_write_them() {
        let imds = parse_gmt_date("21 Jan 2019 09:00:43 GMT");
        assert_eq!(imds, parse_rfc3339("2019-01-21T09:00:43Z"));
        let health = parse_gmt_date("Sat, 05 Jun 2016 15:10:09 GMT");
        assert_eq!(health, parse_rfc3339("2016-06-05T15:10:09Z"));
        for bad in [
            "",
            "31 Feb 2019 09:00:43 GMT",
            "21 Jan 2019 09:00:43 PST",
            "21 Foo 2019 09:00:43 GMT",
            "21 Jan 2019 25:00:43 GMT",
            "21 Jan 2019 09:00 GMT",
            "21 Jan 2019 09:00:43 GMT extra",
        ] {
            assert_eq!(parse_gmt_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_time_written_is_read_back() {
        let at = 1_795_773_022_000;
        assert_eq!(rfc3339(at).to_string(), "2026-11-27T09:50:22Z");
        assert_eq!(parse_rfc3339(&rfc3339(at).to_string()), Some(at));
        assert_eq!(
            rfc3339_millis(at + 123).to_string(),
            "2026-11-27T09:50:22.123Z"
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
