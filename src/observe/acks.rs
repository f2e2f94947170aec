//! The job's acknowledgements: the `ack` generation file and the 2018 `host_worker_log`.
//!
//! The log only grows, so it is read incrementally: each pass reads the bytes appended since the
//! last one, and a line without its newline yet waits for the next pass.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::model::Acks;

pub struct AckReader {
    ack_file: PathBuf,
    log: Option<LogReader>,
    acks: Acks,
    warned_ack: Option<String>,
}

struct LogReader {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl AckReader {
    pub fn new(ack_file: &Path, host_worker_log: Option<&Path>) -> Self {
        AckReader {
            ack_file: ack_file.to_path_buf(),
            log: host_worker_log.map(|p| LogReader {
                path: p.to_path_buf(),
                offset: 0,
                partial: Vec::new(),
            }),
            acks: Acks::default(),
            warned_ack: None,
        }
    }

    pub fn read(&mut self) -> Result<Acks, String> {
        self.acks.generation = self.read_ack_file()?;
        if let Some(log) = self.log.as_mut() {
            log.read_new(&mut self.acks)
                .map_err(|e| format!("reading {}: {e}", log.path.display()))?;
        }
        Ok(self.acks.clone())
    }

    fn read_ack_file(&mut self) -> Result<Option<u64>, String> {
        let bytes = match std::fs::read(&self.ack_file) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", self.ack_file.display())),
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match text.trim().parse::<u64>() {
            Ok(g) => Ok(Some(g)),
            Err(_) => {
                // A garbled ack only delays terminations until the timeout; warn once per content.
                if self.warned_ack.as_deref() != Some(text.as_str()) {
                    tracing::warn!(file = %self.ack_file.display(), "ack file does not hold a generation number; ignored");
                    self.warned_ack = Some(text);
                }
                Ok(None)
            }
        }
    }
}

impl LogReader {
    fn read_new(&mut self, acks: &mut Acks) -> io::Result<()> {
        let mut f = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if f.metadata()?.len() < self.offset {
            tracing::warn!(file = %self.path.display(), "host_worker_log shrank; reading it again from the start");
            self.offset = 0;
            self.partial.clear();
            *acks = Acks {
                generation: acks.generation,
                ..Acks::default()
            };
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut fresh = Vec::new();
        f.read_to_end(&mut fresh)?;
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        for line in complete[..end].split(|b| *b == b'\n') {
            acks.log_lines += 1;
            self.apply(line, acks);
        }
        Ok(())
    }

    fn apply(&self, line: &[u8], acks: &mut Acks) {
        match parse_line(line) {
            Some((true, ip)) => {
                acks.log_added.insert(ip, acks.log_lines);
            }
            Some((false, ip)) => {
                acks.log_removed.insert(ip, acks.log_lines);
            }
            None => tracing::warn!(
                file = %self.path.display(),
                line = acks.log_lines,
                "ignoring malformed host_worker_log line (expected `SEQ ADDED|REMOVED IP TIME`)"
            ),
        }
    }
}

/// `SEQ ADDED|REMOVED IP TIME` -> (added?, ip).
fn parse_line(line: &[u8]) -> Option<(bool, IpAddr)> {
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split_whitespace();
    words.next()?.parse::<u64>().ok()?;
    let added = match words.next()? {
        "ADDED" => true,
        "REMOVED" => false,
        _ => return None,
    };
    let ip = words.next()?.parse().ok()?;
    words.next()?;
    Some((added, ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn log_is_read_incrementally_and_partial_lines_wait() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("host_worker_log");
        let mut r = AckReader::new(&dir.path().join("ack"), Some(&log));
        assert_eq!(r.read().unwrap(), Acks::default());
        let mut f = File::create(&log).unwrap();
        write!(f, "1 ADDED 10.0.0.5 2018-11-16 22:46:47\n2 REMOVED 10.0").unwrap();
        let a = r.read().unwrap();
        assert_eq!(a.log_lines, 1);
        assert_eq!(a.log_added[&ip("10.0.0.5")], 1);
        assert!(a.log_removed.is_empty());
        write!(
            f,
            ".0.5 2018-11-16 22:50:00\ngarbage line\n3 ADDED 10.0.0.6 now\n"
        )
        .unwrap();
        let a = r.read().unwrap();
        assert_eq!(a.log_lines, 4);
        assert_eq!(a.log_removed[&ip("10.0.0.5")], 2);
        assert_eq!(a.log_added[&ip("10.0.0.6")], 4);
    }

    #[test]
    fn ack_file_generation_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let ack = dir.path().join("ack");
        let mut r = AckReader::new(&ack, None);
        std::fs::write(&ack, "7\n").unwrap();
        assert_eq!(r.read().unwrap().generation, Some(7));
        std::fs::write(&ack, "seven").unwrap();
        assert_eq!(r.read().unwrap().generation, None);
        std::fs::write(&ack, b"\xff\xfe").unwrap();
        assert_eq!(r.read().unwrap().generation, None);
    }
}
