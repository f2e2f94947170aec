//! Why `dtd run` cannot start or go on.

use crate::metrics::server::ServeError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("creating state directory {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("another dtd holds {0}; only one daemon may manage a cluster")]
    Locked(String),
    #[error("{0} is not a regular file; move it aside (a worker may have put it there)")]
    LockNotAFile(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("installing signal handler: {0}")]
    Signal(std::io::Error),
    #[error(transparent)]
    Metrics(#[from] ServeError),
    #[error("{0}")]
    JobOwner(String),
    #[error("alerts: {0}")]
    Alerts(String),
}
