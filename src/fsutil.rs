//! Crash-safe file writes: a reader sees the old content or the new, never a torn file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Writes to a temp file in the same directory, fsyncs it, renames it over `path`, fsyncs the dir.
pub fn write_atomic(path: &Path, content: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(content)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Writes only when the content differs; returns whether it wrote.
pub fn write_if_changed(path: &Path, content: &[u8]) -> io::Result<bool> {
    match fs::read(path) {
        Ok(old) if old == content => Ok(false),
        Ok(_) => write_atomic(path, content).map(|_| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => write_atomic(path, content).map(|_| true),
        Err(e) => Err(e),
    }
}

/// Appends lines and fsyncs, for the journal: one `write` per batch so lines are never interleaved.
pub fn append_synced(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(content)?;
    f.sync_data()
}

/// An RFC 3339 time (as AWS events and agent markers write them) in milliseconds since the
/// epoch; an unparseable time is treated as absent.
pub fn millis_from_rfc3339(text: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(text).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as u64)
}

/// A date as AWS Health (`startTime`: `Sat, 05 Jun 2016 15:10:09 GMT`) and the instance metadata's
/// scheduled events (`NotBefore`: `21 Jan 2019 09:00:43 GMT`) write it: an optional weekday, which
/// is not checked (AWS's own samples name the wrong one), then day, month, year and a UTC time.
pub fn millis_from_gmt_date(text: &str) -> Option<u64> {
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
    millis_from_rfc3339(&rfc)
}

/// Milliseconds since the Unix epoch, read once per pass and handed to decide.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_on_change_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("host_worker");
        assert!(write_if_changed(&p, b"a\n").unwrap());
        assert!(!write_if_changed(&p, b"a\n").unwrap());
        assert!(write_if_changed(&p, b"b\n").unwrap());
        assert_eq!(fs::read_to_string(&p).unwrap(), "b\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn gmt_dates_as_aws_health_and_imds_write_them() {
        let imds = millis_from_gmt_date("21 Jan 2019 09:00:43 GMT");
        assert_eq!(imds, millis_from_rfc3339("2019-01-21T09:00:43Z"));
        let health = millis_from_gmt_date("Sat, 05 Jun 2016 15:10:09 GMT");
        assert_eq!(health, millis_from_rfc3339("2016-06-05T15:10:09Z"));
        for bad in [
            "",
            "31 Feb 2019 09:00:43 GMT",
            "21 Jan 2019 09:00:43 PST",
            "21 Foo 2019 09:00:43 GMT",
            "21 Jan 2019 25:00:43 GMT",
            "21 Jan 2019 09:00 GMT",
            "21 Jan 2019 09:00:43 GMT extra",
        ] {
            assert_eq!(millis_from_gmt_date(bad), None, "{bad}");
        }
    }
}
