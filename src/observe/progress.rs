//! The job's progress file (`job.progress`), read on every pass when `job.stall` is configured.
//!
//! The job replaces it after its steps, so it is `stat`ed first and read only when its inode,
//! size or modification time changed: a stopped job's file is not read again at every pass.
//! It is written by the job on the shared file system: opened without blocking, a regular file
//! only, at most [`MAX_BYTES`]; anything else is warned about once and reported as unreadable.

use std::path::{Path, PathBuf};

use super::file_version::FileVersion;
use crate::model::Progress;
use crate::protocol::progress::{ProgressLine, MAX_BYTES};
use crate::time::parse_rfc3339;
use crate::untrusted::{self, WarnOnce};

/// Why the progress file says nothing: nothing is concluded from it. The causes are kept as
/// words: the answer is kept for as long as the file does not change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgressError {
    #[error("{}: {why}", path.display())]
    Stat { path: PathBuf, why: String },
    /// Refused (not a regular file, too large, not the job's), unreadable, or not progress.
    #[error("{} {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
}

pub struct ProgressReader {
    path: PathBuf,
    /// The job's uid (`job.owner`): a file someone else owns is not the job's word.
    owner: Option<u32>,
    /// Set while the file is refused for its owner, for the journal and status.
    not_owned: Option<String>,
    /// The version last read and what it held.
    last: Option<(FileVersion, Result<Progress, ProgressError>)>,
    refused: WarnOnce,
    /// Versions opened and read so far: what the `stat` first saves.
    opened: u64,
}

impl ProgressReader {
    pub fn new(path: &Path, owner: Option<u32>) -> Self {
        ProgressReader {
            path: path.to_path_buf(),
            owner,
            not_owned: None,
            last: None,
            refused: WarnOnce::default(),
            opened: 0,
        }
    }

    /// `None` while the job has written no progress file; `Err(why)` when it cannot be read.
    pub fn read(&mut self) -> Option<Result<Progress, ProgressError>> {
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.last = None;
                self.not_owned = None;
                return None;
            }
            Err(e) => {
                let (path, why) = (self.path.clone(), e.to_string());
                return Some(Err(ProgressError::Stat { path, why }));
            }
        };
        let version = FileVersion::of(&meta);
        if let Some((known, read)) = &self.last {
            if *known == version {
                return Some(read.clone());
            }
        }
        let read = self.read_file()?;
        self.last = Some((version, read.clone()));
        Some(read)
    }

    /// The file's content; `None` when it vanished between the `stat` and the open.
    fn read_file(&mut self) -> Option<Result<Progress, ProgressError>> {
        self.opened += 1;
        let read = untrusted::read_owned(&self.path, MAX_BYTES, self.owner);
        self.not_owned =
            (read.as_ref().err()).and_then(|e| untrusted::not_owned_line(&self.path, e));
        let parsed = match read {
            Ok(None) => return None,
            Ok(Some(body)) => ProgressLine::parse(&body)
                .map(progress)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match &parsed {
            Ok(_) => self.refused.clear(&self.path),
            Err(why) => {
                self.refused.warn(&self.path, why, "no stall is concluded");
            }
        }
        let path = self.path.clone();
        Some(parsed.map_err(|why| ProgressError::Unreadable { path, why }))
    }

    /// Why the file is not read, when it is refused for its owner.
    pub fn not_owned(&self) -> Option<&str> {
        self.not_owned.as_deref()
    }
}

fn progress(line: ProgressLine) -> Progress {
    Progress {
        step: line.step,
        time: line.time.as_deref().and_then(parse_rfc3339),
        checkpoint_step: line.checkpoint_step,
        quorum: line.in_place,
        run: line.run,
        generation: line.generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        // As the job does: a new file renamed over the old one.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn no_file_then_each_new_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress");
        let mut r = ProgressReader::new(&path, None);
        assert_eq!(r.read(), None);
        write(&path, "{\"step\": 3, \"time\": \"2026-11-24T08:16:41Z\"}\n");
        let p = r.read().unwrap().unwrap();
        assert_eq!((p.step, p.time), (3, Some(1_795_508_201_000)));
        write(&path, "{\"step\": 4}\n");
        assert_eq!(r.read().unwrap().unwrap().step, 4);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(r.read(), None);
    }

    #[test]
    fn an_unchanged_file_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress");
        write(&path, "{\"step\": 9}\n");
        let mut r = ProgressReader::new(&path, None);
        for _ in 0..3 {
            assert_eq!(r.read().unwrap().unwrap().step, 9);
        }
        assert_eq!(r.opened, 1, "a stopped job's file is read once");
        write(&path, "{\"step\": 9}\n");
        assert_eq!(r.read().unwrap().unwrap().step, 9);
        assert_eq!(r.opened, 2, "a new version is read");
    }

    #[test]
    fn garbage_a_fifo_and_a_huge_file_are_unreadable_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress");
        let mut r = ProgressReader::new(&path, None);
        write(&path, "step 5\n");
        let e = r.read().unwrap().unwrap_err().to_string();
        assert!(e.contains("does not hold the job's progress"), "{e}");
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let e = r.read().unwrap().unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        std::fs::remove_file(&path).unwrap();
        std::fs::File::create(&path)
            .unwrap()
            .set_len(3 << 30)
            .unwrap();
        let e = r.read().unwrap().unwrap_err().to_string();
        assert!(e.contains("more than the 16384"), "{e}");
    }
}
