//! The daemon's files in its state directory: remembered state, status report, events journal.

use std::path::{Path, PathBuf};

use crate::fsutil::write_atomic;
use crate::model::State;

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
    pub fn journal(&self) -> PathBuf {
        self.dir.join("events.jsonl")
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join("dtd.lock")
    }
    /// Written by `dtctl resume`: the time a person re-armed replacing failed workers.
    pub fn resume(&self) -> PathBuf {
        self.dir.join("resume")
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
}

/// A missing file is a first start; a file that does not parse stops the daemon, because
/// starting from scratch would forget pending removals.
pub fn load_state(path: &Path) -> Result<State, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(source) => Err(StoreError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
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
