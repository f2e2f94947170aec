//! Runs one of the user's programs (prepare-data, the health check) as an argv, never a shell:
//! only once [`trust`](super::trust) has opened it and found that no one else can have put it
//! there, from that very descriptor; in its own process group, with a time limit past which the
//! whole group is killed, and with stdout and stderr kept as one bounded tail for the marker the
//! agent writes about it.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::output::Tail;
use super::trust::{self, OpenError, Vetted};
use super::Identity;
use crate::digest::Sha256;

/// After the program exits, how long its output may still take to drain (a leftover background
/// process can hold the pipe open for ever; its output is not waited for).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// What to run: the program, its arguments and the environment it is given on top of the agent's.
pub struct Program<'a> {
    /// A path, or a name looked up on `PATH`.
    pub path: &'a Path,
    /// The program's bytes must have this digest (`agent.prepare_data_sha256`,
    /// `agent.health.sha256`).
    pub sha256: Option<&'a Sha256>,
    pub args: &'a [String],
    pub env: Vec<(&'static str, OsString)>,
    pub timeout: Duration,
    /// Names it in the agent's log ("prepare-data", "health check").
    pub what: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    /// It could not be started (or waited for): the reason, for people.
    NotStarted(String),
    /// It was not run because someone other than root (or the agent's user) could have put it
    /// there or changed it, or its digest is not the pinned one: the reason, for people.
    Refused(String),
}

impl Status {
    pub fn describe(&self, timeout: Duration) -> String {
        match self {
            Status::Exited(c) => format!("exit code {c}"),
            Status::Signalled(s) => format!("killed by signal {s}"),
            Status::TimedOut => format!(
                "timed out after {}, killed",
                humantime::format_duration(timeout)
            ),
            Status::NotStarted(why) | Status::Refused(why) => why.clone(),
        }
    }
}

/// What every program the agent runs learns about where it runs (README, "dtd agent").
pub fn agent_env(id: &Identity, shared_dir: &Path, cluster: &str) -> Vec<(&'static str, OsString)> {
    vec![
        ("DT_AGENT", "1".into()),
        ("DT_IP", id.ip.to_string().into()),
        ("DT_INSTANCE_ID", id.instance_id.clone().into()),
        ("DT_SHARED_DIR", shared_dir.into()),
        ("DT_CLUSTER", cluster.into()),
    ]
}

/// How one run ended and the last lines it printed.
pub struct Outcome {
    pub status: Status,
    pub tail: Vec<String>,
}

/// Runs the program to its end or its timeout. Stopping the agent mid-run (dropping this future)
/// kills the program's process group.
pub async fn run(program: &Program<'_>) -> Outcome {
    let not_run = |status| Outcome {
        status,
        tail: Vec::new(),
    };
    let vetted = match vet(program).await {
        Ok(v) => v,
        Err(status) => return not_run(status),
    };
    let tail = Arc::new(Mutex::new(Tail::default()));
    let (mut child, drained) = match spawn(program, vetted, tail.clone()) {
        Ok(started) => started,
        Err(why) => {
            return Outcome {
                status: Status::NotStarted(why),
                tail: Vec::new(),
            }
        }
    };
    let mut group = GroupKill::new(child.id(), program.what);
    let status = match tokio::time::timeout(program.timeout, child.wait()).await {
        Ok(Ok(st)) => from_exit(st),
        Ok(Err(e)) => Status::NotStarted(format!("waiting for the program failed: {e}")),
        Err(_) => {
            group.kill();
            let _ = child.wait().await;
            Status::TimedOut
        }
    };
    // Background processes it left behind are its business; only a timeout kills the group.
    group.disarm();
    let _ = tokio::time::timeout(OUTPUT_GRACE, drained).await;
    let lines = tail.lock().map(|mut t| t.lines()).unwrap_or_default();
    Outcome {
        status,
        tail: lines,
    }
}

/// Finds and opens the program and checks it, off the runtime's thread: a digest reads the whole
/// program, and the watch of the instance metadata must not wait for it.
async fn vet(program: &Program<'_>) -> Result<Vetted, Status> {
    let path = program.path.to_path_buf();
    let pin = program.sha256.copied();
    let opened = tokio::task::spawn_blocking(move || trust::open(&path, pin.as_ref())).await;
    match opened {
        Ok(Ok(vetted)) => Ok(vetted),
        Ok(Err(e @ OpenError::Refused { .. })) => Err(Status::Refused(e.to_string())),
        Ok(Err(e)) => Err(Status::NotStarted(e.to_string())),
        Err(e) => Err(Status::NotStarted(format!(
            "checking the program failed: {e}"
        ))),
    }
}

/// Starts the program in its own process group, stdout and stderr into one pipe (so the tail
/// keeps their order), and a thread that reads it. The receiver fires when the output ends.
fn spawn(
    program: &Program<'_>,
    vetted: Vetted,
    tail: Arc<Mutex<Tail>>,
) -> Result<(tokio::process::Child, tokio::sync::oneshot::Receiver<()>), String> {
    let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let writer2 = writer
        .try_clone()
        .map_err(|e| format!("cannot create a pipe: {e}"))?;
    let exec = exec_path(&vetted)?;
    let mut cmd = tokio::process::Command::new(&exec);
    cmd.arg0(&vetted.path)
        .args(program.args)
        .envs(program.env.iter().map(|(k, v)| (k, v)))
        .env("DT_PROGRAM", &vetted.path)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn();
    // Our copies of the write end must close, or the reader never sees the end of the output;
    // and the program's descriptor is ours to close once the child has its own.
    drop(cmd);
    drop(vetted.file);
    let child = child.map_err(|e| spawn_error(&vetted.path, &e))?;
    let (done, drained) = tokio::sync::oneshot::channel();
    let what = program.what;
    std::thread::spawn(move || {
        read_output(reader, &tail, what);
        let _ = done.send(());
    });
    Ok((child, drained))
}

/// What to execute: the checked descriptor by its `/proc/self/fd` name, which the kernel opens
/// as that same file (not by a path anyone could change meanwhile). The descriptor must survive
/// the exec: a `#!` script is read again by its interpreter through that name (execve(2)). So it
/// loses close-on-exec just before the spawn; nothing else in the agent starts a process
/// meanwhile, and the parent closes it right after.
fn exec_path(vetted: &Vetted) -> Result<PathBuf, String> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(&vetted.file, FcntlArg::F_SETFD(FdFlag::empty()))
        .map_err(|e| format!("cannot pass {} to the program: {e}", vetted.path.display()))?;
    Ok(PathBuf::from(format!(
        "/proc/self/fd/{}",
        vetted.file.as_raw_fd()
    )))
}

fn read_output(mut reader: std::io::PipeReader, tail: &Mutex<Tail>, what: &str) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                let Ok(mut t) = tail.lock() else { return };
                for line in t.feed(&buf[..k]) {
                    tracing::debug!(target: "dt::agent::program_output", program = what, "{line}");
                }
            }
        }
    }
}

fn spawn_error(program: &Path, e: &std::io::Error) -> String {
    let what = match e.kind() {
        std::io::ErrorKind::NotFound => "program not found".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied (is it executable?)".to_string(),
        _ => format!("cannot start it: {e}"),
    };
    format!("{what}: {}", program.display())
}

fn from_exit(st: ExitStatus) -> Status {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => Status::Exited(c),
        (None, Some(s)) => Status::Signalled(s),
        (None, None) => Status::NotStarted(format!("unknown exit status {st}")),
    }
}

/// Kills the program's whole process group when dropped while armed: on a timeout, and when the
/// agent is stopped (its future dropped) in the middle of a run.
struct GroupKill {
    pgid: Option<i32>,
    what: &'static str,
}

impl GroupKill {
    fn new(pid: Option<u32>, what: &'static str) -> GroupKill {
        GroupKill {
            pgid: pid.and_then(|p| i32::try_from(p).ok()),
            what,
        }
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let pg = nix::unistd::Pid::from_raw(pgid);
            if let Err(e) = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL) {
                if e != nix::errno::Errno::ESRCH {
                    tracing::warn!(pgid, "cannot kill the {} process group: {e}", self.what);
                }
            }
        }
    }

    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}
