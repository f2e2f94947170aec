//! The job's acknowledgements: the `ack` generation file and the 2018 `host_worker_log`.
//!
//! The log only grows, so it is read incrementally: each pass reads at most `LOG_CHUNK` bytes
//! appended since the last one (the rest waits for the next pass), and a line without its newline
//! yet waits too. Both files are written by the job on the shared file system: a FIFO, a link, a
//! directory or a huge file there is refused with a warning, never read through.

use std::collections::HashSet;
use std::io::{Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::model::Acks;
use crate::protocol::generation;
use crate::protocol::host_worker_log::{Change, LogLine, MAX_LINE_BYTES};
use crate::untrusted::{self, ReadError, WarnOnce};

/// How much of the log one pass reads: a few thousand lines, never the whole of a runaway file.
const LOG_CHUNK: u64 = 256 * 1024;

/// The workers the log may speak of: members and leaving workers, as the daemon last decided.
/// A line about any other IP acknowledges nothing dtd did (as an `ack` above the last generation
/// dtd wrote does not), so it is not kept: a worker appending lines for made-up IPs cannot make
/// the reader's memory grow. Locked only to copy or replace it, never across a read.
pub type KnownIps = Arc<Mutex<HashSet<IpAddr>>>;

/// Why the acknowledgements could not be read: a file the job owns failed to read (one a
/// worker put in the way is refused and shown instead).
#[derive(Debug, thiserror::Error)]
#[error("reading {}: {why}", path.display())]
pub struct AckError {
    path: PathBuf,
    why: std::io::Error,
}

pub struct AckReader {
    ack_file: PathBuf,
    /// The job's uid (`job.owner`): a file someone else owns is not the job's word.
    owner: Option<u32>,
    log: Option<LogReader>,
    acks: Acks,
    warned_ack: Option<String>,
    refused: WarnOnce,
    known: KnownIps,
}

struct LogReader {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    /// Inside an over-long line: bytes up to its newline are dropped.
    skipping: bool,
}

impl AckReader {
    pub fn new(
        ack_file: &Path,
        host_worker_log: Option<&Path>,
        owner: Option<u32>,
        known: KnownIps,
    ) -> Self {
        AckReader {
            ack_file: ack_file.to_path_buf(),
            owner,
            log: host_worker_log.map(|p| LogReader {
                path: p.to_path_buf(),
                offset: 0,
                partial: Vec::new(),
                skipping: false,
            }),
            acks: Acks::default(),
            warned_ack: None,
            refused: WarnOnce::default(),
            known,
        }
    }

    pub fn read(&mut self) -> Result<Acks, AckError> {
        self.acks.refused.clear();
        self.acks.generation = self.read_ack_file()?;
        let known = (self.known.lock()).map_or_else(|p| p.into_inner().clone(), |k| k.clone());
        self.acks.log_added.retain(|ip, _| known.contains(ip));
        self.acks.log_removed.retain(|ip, _| known.contains(ip));
        if let Some(log) = self.log.as_mut() {
            match log.read_new(&mut self.acks, self.owner, &known) {
                Ok(()) => self.refused.clear(&log.path),
                Err(ReadError::Io(why)) => {
                    let path = log.path.clone();
                    return Err(AckError { path, why });
                }
                Err(e) => {
                    self.refused.warn(
                        &log.path,
                        &e.to_string(),
                        "ignored until it is a plain file of the job's again",
                    );
                    let line = untrusted::not_owned_line(&log.path, &e);
                    self.acks.refused.extend(line);
                }
            }
        }
        Ok(self.acks.clone())
    }

    fn read_ack_file(&mut self) -> Result<Option<u64>, AckError> {
        let bytes = match untrusted::read_owned(&self.ack_file, generation::MAX_BYTES, self.owner) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(ReadError::Io(why)) => {
                let path = self.ack_file.clone();
                return Err(AckError { path, why });
            }
            Err(refused) => {
                // Only delays terminations until the ack timeout, as a missing ack would.
                let why = refused.to_string();
                self.refused
                    .warn(&self.ack_file, &why, "acknowledgement ignored");
                let line = untrusted::not_owned_line(&self.ack_file, &refused);
                self.acks.refused.extend(line);
                return Ok(None);
            }
        };
        self.refused.clear(&self.ack_file);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match generation::parse(&text) {
            Some(g) => Ok(Some(g)),
            None => {
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
    fn read_new(
        &mut self,
        acks: &mut Acks,
        owner: Option<u32>,
        known: &HashSet<IpAddr>,
    ) -> Result<(), ReadError> {
        let Some((mut f, meta)) = untrusted::open_owned(&self.path, owner)? else {
            return Ok(());
        };
        if meta.len() < self.offset {
            tracing::warn!(file = %self.path.display(), "host_worker_log shrank; reading it again from the start");
            self.offset = 0;
            self.partial.clear();
            self.skipping = false;
            *acks = Acks {
                generation: acks.generation,
                refused: std::mem::take(&mut acks.refused),
                ..Acks::default()
            };
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let fresh = untrusted::read_at_most(&mut f, LOG_CHUNK)?;
        self.offset += fresh.len() as u64;
        for line in self.complete_lines(&fresh) {
            acks.log_lines += 1;
            self.apply(&line, acks, known);
        }
        Ok(())
    }

    /// The lines `fresh` completes; keeps the unfinished one, and drops lines too long to be
    /// the log's (each counts as one malformed line).
    fn complete_lines(&mut self, fresh: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        for piece in fresh.split_inclusive(|b| *b == b'\n') {
            let ends = piece.last() == Some(&b'\n');
            let body = &piece[..piece.len() - usize::from(ends)];
            if !self.skipping {
                self.partial.extend_from_slice(body);
            }
            // A longer line is not the log's: it is skipped to its newline.
            if self.partial.len() > MAX_LINE_BYTES {
                self.partial.clear();
                self.skipping = true;
            }
            if ends {
                let line = std::mem::take(&mut self.partial);
                // An over-long line is passed on empty: malformed, and counted as a line.
                lines.push(if self.skipping { Vec::new() } else { line });
                self.skipping = false;
            }
        }
        lines
    }

    fn apply(&self, line: &[u8], acks: &mut Acks, known: &HashSet<IpAddr>) {
        let Some(entry) = LogLine::parse(line) else {
            tracing::warn!(
                file = %self.path.display(),
                line = acks.log_lines,
                "ignoring malformed host_worker_log line (expected `SEQ ADDED|REMOVED IP TIME`)"
            );
            return;
        };
        if !known.contains(&entry.ip) {
            return;
        }
        let latest = match entry.change {
            Change::Added => &mut acks.log_added,
            Change::Removed => &mut acks.log_removed,
        };
        latest.insert(entry.ip, acks.log_lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The workers 10.0.0.5 and 10.0.0.6, members or leaving.
    fn known() -> KnownIps {
        Arc::new(Mutex::new([ip("10.0.0.5"), ip("10.0.0.6")].into()))
    }

    #[test]
    fn log_is_read_incrementally_and_partial_lines_wait() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("host_worker_log");
        let mut r = AckReader::new(&dir.path().join("ack"), Some(&log), None, known());
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
        let mut r = AckReader::new(&ack, None, None, known());
        std::fs::write(&ack, "7\n").unwrap();
        assert_eq!(r.read().unwrap().generation, Some(7));
        std::fs::write(&ack, "seven").unwrap();
        assert_eq!(r.read().unwrap().generation, None);
        std::fs::write(&ack, b"\xff\xfe").unwrap();
        assert_eq!(r.read().unwrap().generation, None);
    }

    #[test]
    fn a_long_log_is_read_a_chunk_per_pass_and_long_lines_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("host_worker_log");
        let mut f = File::create(&log).unwrap();
        f.write_all(&vec![b'x'; 5000]).unwrap();
        f.write_all(b"\n1 ADDED 10.0.0.5 now\n").unwrap();
        let line = b"2 ADDED 10.0.0.6 2026-11-23T10:00:00Z\n";
        let lines = (LOG_CHUNK as usize) / line.len() + 10;
        for _ in 0..lines {
            f.write_all(line).unwrap();
        }
        let mut r = AckReader::new(&dir.path().join("ack"), Some(&log), None, known());
        let first = r.read().unwrap();
        assert_eq!(first.log_added[&ip("10.0.0.5")], 2);
        assert!(
            first.log_lines < 2 + lines as u64,
            "read it all in one pass"
        );
        let mut passes = 1;
        while r.read().unwrap().log_lines < 2 + lines as u64 {
            passes += 1;
            assert!(passes < 10);
        }
        assert_eq!(r.acks.log_added[&ip("10.0.0.6")], 2 + lines as u64);
    }

    #[test]
    fn a_fifo_or_huge_ack_is_ignored_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let ack = dir.path().join("ack");
        let log = dir.path().join("host_worker_log");
        nix::unistd::mkfifo(&ack, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &log).unwrap();
        let mut r = AckReader::new(&ack, Some(&log), None, known());
        assert_eq!(r.read().unwrap(), Acks::default());
        std::fs::remove_file(&ack).unwrap();
        File::create(&ack).unwrap().set_len(3 << 30).unwrap();
        assert_eq!(r.read().unwrap().generation, None);
    }

    #[test]
    fn lines_about_workers_dtd_does_not_know_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("host_worker_log");
        let known = known();
        let mut r = AckReader::new(&dir.path().join("ack"), Some(&log), None, known.clone());
        let mut f = File::create(&log).unwrap();
        for n in 0..1000 {
            writeln!(f, "{n} REMOVED 10.9.{}.{} now", n / 250, n % 250).unwrap();
        }
        writeln!(f, "1000 REMOVED 10.0.0.6 now").unwrap();
        let a = r.read().unwrap();
        assert_eq!(a.log_lines, 1001);
        assert_eq!(
            a.log_removed.len(),
            1,
            "only the known worker's line is kept"
        );
        assert_eq!(a.log_removed[&ip("10.0.0.6")], 1001);
        // Once dtd no longer knows it (gone), its line is forgotten too.
        known.lock().unwrap().remove(&ip("10.0.0.6"));
        assert!(r.read().unwrap().log_removed.is_empty());
    }
}
