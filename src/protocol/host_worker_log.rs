//! `host_worker_log`, the 2018 acknowledgement: the job appends a line for each change it has
//! applied, `SEQ ADDED|REMOVED IP TIME`, e.g. `3 REMOVED 10.0.1.6 2026-11-22 23:50:01`. The
//! master only reads it (`examples/elastic_job.py` shows a job writing it).

use std::fmt;
use std::net::IpAddr;

/// A line is well under this; a longer one is not the log's.
pub const MAX_LINE_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Removed,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "ADDED",
            Change::Removed => "REMOVED",
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The job's own count; the master orders lines by their position in the file instead.
    pub seq: u64,
    pub change: Change,
    pub ip: IpAddr,
    /// Free text as the job wrote it (2018's launcher documents `TIME_SINCE_EPOCH`; the example job
    /// writes a date and time); not interpreted.
    pub time: String,
}

impl LogLine {
    /// A line without its newline; `None` when it is not `SEQ ADDED|REMOVED IP TIME`.
    pub fn parse(line: &[u8]) -> Option<LogLine> {
        let text = std::str::from_utf8(line).ok()?;
        let (seq, rest) = word(text)?;
        let (change, rest) = word(rest)?;
        let (ip, rest) = word(rest)?;
        let change = match change {
            "ADDED" => Change::Added,
            "REMOVED" => Change::Removed,
            _ => return None,
        };
        let time = rest.trim();
        if time.is_empty() {
            return None;
        }
        Some(LogLine {
            seq: seq.parse().ok()?,
            change,
            ip: ip.parse().ok()?,
            time: time.to_string(),
        })
    }
}

/// The line with its newline, as the job appends it.
impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let change = self.change.as_str();
        writeln!(f, "{} {change} {} {}", self.seq, self.ip, self.time)
    }
}

/// The first whitespace-separated word and what follows it.
fn word(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    if text.is_empty() {
        return None;
    }
    Some(text.split_once(char::is_whitespace).unwrap_or((text, "")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let line = LogLine {
            seq: 3,
            change: Change::Removed,
            ip: "10.0.1.6".parse().unwrap(),
            time: "2026-11-22 23:50:01".into(),
        };
        let text = line.to_string();
        assert_eq!(text, "3 REMOVED 10.0.1.6 2026-11-22 23:50:01\n");
        assert_eq!(LogLine::parse(text.trim_end().as_bytes()), Some(line));
        let v6 = LogLine::parse(b"  12\tADDED  fe80::1   now ").unwrap();
        assert_eq!(
            (v6.seq, v6.change, v6.time.as_str()),
            (12, Change::Added, "now")
        );
        assert_eq!(
            LogLine::parse(v6.to_string().trim_end().as_bytes()),
            Some(v6)
        );
    }

    /// The golden log under tests/fixtures/protocol/, which the example job's tests write too.
    #[test]
    fn the_golden_log_reads_line_by_line() {
        let golden = include_str!("../../tests/fixtures/protocol/host_worker_log");
        let lines: Vec<LogLine> = golden
            .lines()
            .map(|l| LogLine::parse(l.as_bytes()).unwrap())
            .collect();
        let changes: Vec<_> = lines
            .iter()
            .map(|l| (l.seq, l.change, l.ip.to_string()))
            .collect();
        assert_eq!(
            changes,
            [
                (1, Change::Added, "10.0.1.5".to_string()),
                (2, Change::Added, "10.0.1.6".to_string()),
                (3, Change::Removed, "10.0.1.5".to_string()),
            ]
        );
        assert_eq!(
            lines.iter().map(|l| l.to_string()).collect::<String>(),
            golden
        );
    }

    #[test]
    fn malformed_lines_are_rejected() {
        for bad in [
            &b""[..],
            b"garbage line",
            b"1 ADDED 10.0.0.5",
            b"1 ADDED 10.0.0.5   ",
            b"x ADDED 10.0.0.5 now",
            b"-1 ADDED 10.0.0.5 now",
            b"1 added 10.0.0.5 now",
            b"1 JOINED 10.0.0.5 now",
            b"1 ADDED 10.0.0.300 now",
            b"1 ADDED 10.0.0.5\xff now",
            b"1 ADDED 10.0.0.5 \xff",
        ] {
            assert_eq!(
                LogLine::parse(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
