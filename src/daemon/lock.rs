//! One `dtd` per cluster: the state directory is on the shared file system, and locked.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::DaemonError;
use crate::config::Config;
use crate::store::{require_mounted, Paths};
use crate::untrusted::libc_flags;

/// Held for the daemon's lifetime: a second `dtd` on the same state directory refuses to start.
pub type Lock = nix::fcntl::Flock<std::fs::File>;

/// Checks the state directory is on the shared file system, creates it, checks it is dtd's
/// own, and locks it.
pub fn lock_state_dir(cfg: &Config) -> Result<Lock, DaemonError> {
    let paths = Paths::new(&cfg.state_dir);
    require_mounted(&paths.dir, &cfg.shared_dir, cfg.allow_local_state_dir)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.dir)
        .map_err(|source| DaemonError::StateDir {
            path: paths.dir.display().to_string(),
            source,
        })?;
    require_own(&paths.dir)?;
    let lock_path = paths.lock();
    let state_dir_error = |source| DaemonError::StateDir {
        path: lock_path.display().to_string(),
        source,
    };
    // Neither a FIFO (an open that blocks) nor a link planted where the lock goes.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc_flags::NONBLOCK | libc_flags::NOFOLLOW)
        .open(&lock_path)
        .map_err(state_dir_error)?;
    if !file.metadata().map_err(state_dir_error)?.is_file() {
        return Err(DaemonError::LockNotAFile(lock_path.display().to_string()));
    }
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| DaemonError::Locked(lock_path.display().to_string()))
}

/// The state directory holds what decides terminations (state.json, the resume request): one
/// another user owns, or that others may enter, could hold their files, or let them replace
/// dtd's.
fn require_own(dir: &Path) -> Result<(), DaemonError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| DaemonError::StateDir {
        path: dir.display().to_string(),
        source,
    })?;
    let uid = crate::fsutil::own_uid();
    let why = if !meta.is_dir() {
        Some("not a directory (a symbolic link is not followed)".to_string())
    } else if meta.uid() != uid {
        Some(format!("owned by uid {}", meta.uid()))
    } else if meta.mode() & 0o777 != 0o700 {
        Some(format!("mode {:04o}", meta.mode() & 0o7777))
    } else {
        None
    };
    match why {
        Some(why) => Err(DaemonError::StateDirNotOwn {
            path: dir.display().to_string(),
            why,
            uid,
        }),
        None => Ok(()),
    }
}
