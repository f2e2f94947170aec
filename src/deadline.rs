//! File-system work with a deadline.
//!
//! A shared file system that stops answering (an EFS mount target lost, an NFS server hung)
//! leaves every system call on it waiting, and no timeout in the call can end that wait. So the
//! work runs on a thread of its own and the pass waits for it only until the deadline: past it,
//! the pass reports the file system as stalled and goes on. The stuck thread is left to finish
//! when the file system comes back; until it has, nothing more is sent its way, so a long stall
//! costs one thread, not one per pass.

use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

pub struct Deadline {
    /// Which file system, for messages: `shared directory /efs`.
    name: String,
    limit: Duration,
    stuck: Option<Stuck>,
}

struct Stuck {
    thread: JoinHandle<()>,
    what: &'static str,
}

impl Deadline {
    pub fn new(name: String, limit: Duration) -> Deadline {
        Deadline {
            name,
            limit,
            stuck: None,
        }
    }

    /// Whether work sent earlier is still waiting on the file system.
    pub fn is_stuck(&mut self) -> bool {
        if self.stuck.as_ref().is_some_and(|s| s.thread.is_finished()) {
            tracing::info!("{}: answering again", self.name);
            self.stuck = None;
        }
        self.stuck.is_some()
    }

    /// Runs `work` on its own thread; `Err` says why its result is not there in time.
    pub async fn run<T: Send + 'static>(
        &mut self,
        what: &'static str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, DeadlineError> {
        if self.is_stuck() {
            return Err(self.still_stuck());
        }
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("dtd-fs".into())
            .spawn(move || {
                let _ = tx.send(work());
            })
            .map_err(|error| DeadlineError::NoThread { what, error })?;
        match tokio::time::timeout(self.limit, rx).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(DeadlineError::ThreadDied { what }),
            Err(_) => {
                self.stuck = Some(Stuck { thread, what });
                Err(self.stalled(what))
            }
        }
    }

    /// [`run`](Self::run) for work that can fail itself: its error and a stall read alike.
    pub async fn try_run<T: Send + 'static, E: From<DeadlineError> + Send + 'static>(
        &mut self,
        what: &'static str,
        work: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<T, E> {
        self.run(what, work).await.map_err(E::from).and_then(|r| r)
    }

    /// The same words at every pass of one stall, so it is logged and journaled once.
    fn still_stuck(&self) -> DeadlineError {
        let what = self.stuck.as_ref().map_or("work", |s| s.what);
        self.stalled(what)
    }

    fn stalled(&self, what: &'static str) -> DeadlineError {
        DeadlineError::Stalled {
            name: self.name.clone(),
            what,
            limit: self.limit,
        }
    }
}

/// Why work on the file system has no result.
#[derive(Debug, thiserror::Error)]
pub enum DeadlineError {
    #[error(
        "{name}: {what} did not finish within {}: the file system is not answering",
        humantime::format_duration(*.limit)
    )]
    Stalled {
        /// The file system, as [`Deadline::new`] was given it.
        name: String,
        what: &'static str,
        limit: Duration,
    },
    #[error("{what}: cannot start a thread: {error}")]
    NoThread {
        what: &'static str,
        error: std::io::Error,
    },
    #[error("{what}: the file-system thread died")]
    ThreadDied { what: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test(flavor = "current_thread")]
    async fn work_past_its_deadline_is_reported_and_nothing_more_is_sent() {
        // Long enough that a quick read on a loaded machine is never past it; the stuck read
        // takes it whole.
        let mut d = Deadline::new("shared directory /efs".into(), Duration::from_secs(2));
        assert_eq!(d.run("a read", || 7).await.ok(), Some(7));
        let (release, wait) = mpsc::channel::<()>();
        let e = d
            .run("scanning markers", move || wait.recv())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("scanning markers did not finish"), "{e}");
        let again = d.run("another", || 1).await.unwrap_err().to_string();
        assert_eq!(again, e, "one stall, one message");
        release.send(()).unwrap();
        while d.is_stuck() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(d.run("a read", || 8).await.ok(), Some(8));
    }
}
