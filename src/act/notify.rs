//! Telling the job about a new membership: a signal to the PID in a pidfile, or a hook command
//! run as an argv (never through a shell) with the change in its environment.

use std::path::{Path, PathBuf};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::hook::{self, HookError};
use super::job_pid::{job_pid, PidError};
use crate::config::Notify;
use crate::fsutil::write_atomic;
use crate::model::{join_ips, rfc3339, Notification};

/// `DT_EVENT` of a membership notification, so a hook that also gets stalls tells them apart.
pub const MEMBERSHIP_EVENT: &str = "membership";

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The pidfile does not name the job: nothing was signalled.
    #[error("refused to signal: {0}")]
    Refused(PidError),
    #[error("sending {signal} to PID {pid}: {why}")]
    Signal {
        signal: Signal,
        pid: i32,
        why: nix::errno::Errno,
    },
    #[error("writing {}: {why}", path.display())]
    Notices { path: PathBuf, why: std::io::Error },
    #[error(transparent)]
    Hook(#[from] HookError),
    /// The shared directory did not answer in time.
    #[error(transparent)]
    Stalled(crate::deadline::DeadlineError),
}

impl NotifyError {
    /// Nothing was signalled or run because what was to be trusted is not the job's (the
    /// pidfile) or could have been put in place by someone else (the hook): a refusal, journaled
    /// once as `notify_refused`, not a mere failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            NotifyError::Refused(_) | NotifyError::Hook(HookError::Refused(_))
        )
    }
}

pub async fn send(how: &Notify, n: &Notification, hostfile: &Path) -> Result<String, NotifyError> {
    match how {
        Notify::None => Ok("no notification configured".into()),
        Notify::Signal {
            signal,
            pidfile,
            expect,
        } => signal_job(*signal, pidfile, expect.as_deref(), None),
        Notify::Command(argv) => Ok(run_hook(argv, n, hostfile).await?),
    }
}

/// Sends `signal` to the process the pidfile names, once it is known to be the job.
pub fn signal_job(
    signal: Signal,
    pidfile: &Path,
    expect: Option<&str>,
    owner: Option<u32>,
) -> Result<String, NotifyError> {
    let pid = job_pid(pidfile, expect, owner).map_err(NotifyError::Refused)?;
    kill(Pid::from_raw(pid), signal).map_err(|why| NotifyError::Signal { signal, pid, why })?;
    Ok(format!("sent {signal} to PID {pid}"))
}

/// The `notices` file: this generation's notices, replaced at every signal so that the job
/// never reads an earlier generation's as its own.
pub fn write_notices(path: &Path, n: &Notification) -> Result<(), NotifyError> {
    let body = n.job_notices().render();
    write_atomic(path, &body).map_err(|why| NotifyError::Notices {
        path: path.to_path_buf(),
        why,
    })
}

/// `DT_REASON` (the most urgent notice's kind), `DT_DEADLINE` (its deadline, RFC 3339, when it
/// has one) and `DT_NOTICES` (all of them, JSON), when AWS gave a reason for a removal.
fn notice_env(n: &Notification) -> Vec<(&'static str, String)> {
    let Some(urgent) = n.most_urgent() else {
        return Vec::new();
    };
    let mut env = vec![
        ("DT_REASON", urgent.kind.as_str().to_string()),
        // A list of IPs, fixed words and times: serializing cannot fail.
        (
            "DT_NOTICES",
            serde_json::to_string(&n.job_notices().notices).unwrap_or_default(),
        ),
    ];
    env.extend(
        urgent
            .deadline
            .map(|d| ("DT_DEADLINE", rfc3339(d).to_string())),
    );
    env
}

/// The membership hook: `DT_EVENT=membership` (the stall command may be the same program, see
/// `act::stall`), the change, the host file and any notices.
async fn run_hook(argv: &[String], n: &Notification, hostfile: &Path) -> Result<String, HookError> {
    let mut env = vec![
        ("DT_EVENT", MEMBERSHIP_EVENT.to_string()),
        ("DT_GENERATION", n.generation.to_string()),
        ("DT_ADDED", join_ips(&n.added)),
        ("DT_REMOVED", join_ips(&n.removed)),
        ("DT_HOSTFILE", hostfile.display().to_string()),
    ];
    env.extend(notice_env(n));
    hook::run(argv, &env).await
}
