//! Telling the job about a new membership: a signal to the PID in a pidfile, or a hook command
//! run as an argv (never through a shell) with the change in its environment.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::job_pid::job_pid;
use crate::config::Notify;
use crate::decide::join_ips;
use crate::model::Notification;

/// A hook that runs longer than this is killed and the notification retried next pass.
const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyError {
    /// The pidfile does not name the job: nothing was signalled.
    #[error("refused to signal: {0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

pub async fn send(how: &Notify, n: &Notification, hostfile: &Path) -> Result<String, NotifyError> {
    match how {
        Notify::None => Ok("no notification configured".into()),
        Notify::Signal {
            signal,
            pidfile,
            expect,
        } => signal_job(*signal, pidfile, expect.as_deref()),
        Notify::Command(argv) => run_hook(argv, n, hostfile)
            .await
            .map_err(NotifyError::Failed),
    }
}

/// Sends `signal` to the process the pidfile names, once it is known to be the job.
pub fn signal_job(
    signal: Signal,
    pidfile: &Path,
    expect: Option<&str>,
) -> Result<String, NotifyError> {
    let pid = job_pid(pidfile, expect).map_err(NotifyError::Refused)?;
    kill(Pid::from_raw(pid), signal)
        .map_err(|e| NotifyError::Failed(format!("sending {signal} to PID {pid}: {e}")))?;
    Ok(format!("sent {signal} to PID {pid}"))
}

async fn run_hook(argv: &[String], n: &Notification, hostfile: &Path) -> Result<String, String> {
    let (program, args) = argv.split_first().ok_or("empty hook command")?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("DT_GENERATION", n.generation.to_string())
        .env("DT_ADDED", join_ips(&n.added))
        .env("DT_REMOVED", join_ips(&n.removed))
        .env("DT_HOSTFILE", hostfile)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting hook {program}: {e}"))?;
    match tokio::time::timeout(HOOK_TIMEOUT, child.wait()).await {
        Err(_) => Err(format!(
            "hook {program} did not finish within {HOOK_TIMEOUT:?}"
        )),
        Ok(Err(e)) => Err(format!("waiting for hook {program}: {e}")),
        Ok(Ok(status)) if status.success() => Ok(format!("hook {program} ran")),
        Ok(Ok(status)) => Err(format!("hook {program} failed: {status}")),
    }
}
