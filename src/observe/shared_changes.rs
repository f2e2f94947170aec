//! The shared directory's markers and acknowledgements, checked cheaply and often (one directory
//! read and a `stat` of each acknowledgement file) on a thread of its own, so that a new marker
//! or an acknowledgement starts a pass within `shared_poll` instead of at the next interval.
//!
//! Only names and file metadata are looked at: nothing is opened, so a FIFO or a link to
//! `/dev/zero` cannot block it. A hung file system blocks only this thread; the pass's own reads
//! have their deadline.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use super::file_version::FileVersion;
use crate::protocol::markers::MarkerName;

/// Names looked at per check: a directory a worker filled with millions of files costs a bounded
/// read; the passes still read all of it.
const MAX_ENTRIES: usize = 100_000;

pub struct Watched {
    pub dir: PathBuf,
    /// Files whose size, modification time or inode changing is worth a pass.
    pub files: Vec<PathBuf>,
}

/// Starts the checks; each change sends one wake-up (several changes before a pass heeds them
/// make one). The thread ends when the receiver is dropped.
pub fn spawn(watched: Watched, every: Duration) -> std::io::Result<mpsc::Receiver<()>> {
    let (tx, rx) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("shared-changes".into())
        .spawn(move || watch(watched, every, tx))?;
    Ok(rx)
}

fn watch(watched: Watched, every: Duration, tx: mpsc::Sender<()>) {
    let mut last = signature(&watched);
    loop {
        std::thread::sleep(every);
        if tx.is_closed() {
            return;
        }
        let now = signature(&watched);
        if now != last {
            last = now;
            // Full: a wake-up is already waiting, and it covers this change too.
            let _ = tx.try_send(());
        }
    }
}

/// A hash of the marker names in the directory and of the watched files' metadata.
pub fn signature(w: &Watched) -> u64 {
    let mut h = DefaultHasher::new();
    if let Ok(entries) = fs::read_dir(&w.dir) {
        let mut names: Vec<_> = (entries.take(MAX_ENTRIES).flatten())
            .map(|e| e.file_name())
            .filter(|n| n.to_str().is_some_and(|t| MarkerName::parse(t).is_ok()))
            .collect();
        // Directory order may change when nothing else does.
        names.sort_unstable();
        names.hash(&mut h);
    }
    for f in &w.files {
        match fs::symlink_metadata(f) {
            Ok(m) => FileVersion::of(&m).hash(&mut h),
            Err(e) => e.kind().hash(&mut h),
        }
    }
    h.finish()
}

/// The next change in the shared directory; never, when it is not watched (the receiver
/// `spawn` gave, when it could watch).
pub async fn next(changes: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match changes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_or_an_acknowledgement_changes_the_signature_and_other_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let ack = dir.path().join("ack");
        let w = Watched {
            dir: dir.path().to_path_buf(),
            files: vec![ack.clone()],
        };
        let before = signature(&w);
        fs::write(dir.path().join("host_worker.tmp"), "x").unwrap();
        assert_eq!(signature(&w), before, "a file that is not a marker");
        fs::write(dir.path().join("prepare_data_success_10.0.0.7"), "").unwrap();
        let marker = signature(&w);
        assert_ne!(marker, before);
        fs::write(&ack, "3\n").unwrap();
        assert_ne!(signature(&w), marker);
    }

    /// What a worker may put there: a FIFO under a marker's name and as the ack file, a link to
    /// `/dev/zero` as the log. Nothing is opened, so the check returns, and notices them.
    #[test]
    fn fifos_and_links_are_looked_at_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let (ack, log) = (dir.path().join("ack"), dir.path().join("host_worker_log"));
        let w = Watched {
            dir: dir.path().to_path_buf(),
            files: vec![ack.clone(), log.clone()],
        };
        let before = signature(&w);
        let fifo =
            |p: &std::path::Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        fifo(&ack);
        fifo(&dir.path().join("prepare_data_success_10.0.0.8"));
        std::os::unix::fs::symlink("/dev/zero", &log).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(signature(&w)));
        let after = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert!(
            after.is_ok_and(|a| a != before),
            "blocked, or saw no change"
        );
    }
}
