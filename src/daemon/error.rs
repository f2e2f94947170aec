//! Why `dtd run` cannot start or go on.

use crate::act::journal::JournalError;
use crate::deadline::DeadlineError;
use crate::metrics::server::ServeError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("creating state directory {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "state directory {path} is {why}: it must be a directory of dtd's own user (uid {uid}), \
         mode 0700; move it aside rather than chown it (what others put in it would become dtd's)"
    )]
    StateDirNotOwn { path: String, why: String, uid: u32 },
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
    JobOwner(crate::config::JobOwnerError),
    #[error("alerts: {0}")]
    Alerts(crate::config::WebhookFileError),
    #[error(transparent)]
    Listen(#[from] crate::observe::agents::ListenError),
    #[error(transparent)]
    Publish(#[from] super::address::PublishError),
}

/// Why a write of the state directory left nothing written: its own failure, or the directory's
/// deadline. Each reads as its cause does (the ledger and the journal show these words).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Deadline(#[from] DeadlineError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    File(#[from] std::io::Error),
}
