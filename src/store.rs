//! The daemon's files in its state directory: remembered state, status report, events journal.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::fsutil::write_atomic;
use crate::model::State;
use crate::untrusted;

#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
}

impl Paths {
    pub fn new(dir: &Path) -> Self {
        Paths {
            dir: dir.to_path_buf(),
        }
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    pub fn status(&self) -> PathBuf {
        self.dir.join("status.json")
    }
    /// The goodput ledger (`daemon::goodput`).
    pub fn goodput(&self) -> PathBuf {
        self.dir.join("goodput.json")
    }
    pub fn journal(&self) -> PathBuf {
        self.dir.join("events.jsonl")
    }
    pub fn alerts_outbox(&self) -> PathBuf {
        self.dir.join(crate::alerts::saved::FILE)
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join("dtd.lock")
    }
    /// Written by `dtctl resume`: the time a person re-armed replacing failed workers.
    pub fn resume(&self) -> PathBuf {
        self.dir.join("resume")
    }
    /// Written by `dtctl add`: the capacity choices EC2 refused it.
    pub fn capacity_refusals(&self) -> PathBuf {
        self.dir.join(crate::protocol::capacity_refusals::FILE)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid state file ({source}); move it aside to start from scratch")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "state directory {dir} is on the root file system, not on a mounted shared file system: \
         expected {expected} to be a mount (the shared file system, EFS on AWS) and it is not; \
         mount it before starting dtd (systemd: RequiresMountsFor={expected}), or set \
         `allow_local_state_dir: true` in the config to keep the state on this machine's disk \
         (a one-machine demo or test)"
    )]
    NotMounted { dir: PathBuf, expected: PathBuf },
}

/// A state that is as large as this is not ours (10,000 workers take about 2 MiB).
const STATE_LIMIT: u64 = 64 << 20;

/// Refuses a state directory on the root file system: `dtd run` started before the shared file
/// system was mounted would otherwise start a fresh state under the mount point, a second brain
/// beside the real one. `expected` is the mount it should be on (the shared directory).
pub fn require_mounted(dir: &Path, expected: &Path, allow_local: bool) -> Result<(), StoreError> {
    if allow_local {
        return Ok(());
    }
    let read = |path: &Path| {
        std::fs::metadata(path).map_err(|source| StoreError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    // The directory may not exist yet: its nearest existing ancestor is where it would be made.
    let existing = dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    if read(existing)?.dev() == read(Path::new("/"))?.dev() {
        let expected = if dir.starts_with(expected) {
            expected
        } else {
            dir
        };
        return Err(StoreError::NotMounted {
            dir: dir.to_path_buf(),
            expected: expected.to_path_buf(),
        });
    }
    Ok(())
}

/// A missing file is a first start; a file that does not parse stops the daemon, because
/// starting from scratch would forget pending removals.
pub fn load_state(path: &Path) -> Result<State, StoreError> {
    match untrusted::read(path, STATE_LIMIT) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
            path: path.to_path_buf(),
            source,
        }),
        Ok(None) => Ok(State::default()),
        Err(e) => Err(StoreError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        }),
    }
}

/// The state; with none yet (a first start, or a state moved aside), a fresh one that numbers on
/// from the `generation` file dtd last wrote, if dtd's own user still owns it: a job that applied
/// generation 57 is never handed a second generation 1, and a number a worker wrote is not taken.
pub fn load_state_resuming(path: &Path, generation_file: &Path) -> Result<State, StoreError> {
    if std::fs::symlink_metadata(path).is_ok() {
        return load_state(path);
    }
    Ok(State {
        generation: generation_written(generation_file, crate::fsutil::own_uid()).unwrap_or(0),
        ..State::default()
    })
}

/// The number in the `generation` file, if `owner` (dtd's user) owns the file: dtd wrote it, not
/// a worker. `None` when it is missing, refused or garbled.
fn generation_written(generation_file: &Path, owner: u32) -> Option<u64> {
    let max = crate::protocol::generation::MAX_BYTES;
    let bytes = untrusted::read_owned(generation_file, max, Some(owner)).ok()??;
    crate::protocol::generation::parse(&String::from_utf8_lossy(&bytes))
}

pub fn save_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    write_atomic(path, &bytes).map_err(|source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    })
}
