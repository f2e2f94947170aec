//! Runs a program of the user's (prepare-data, the health check, torchrun, the Lighthouse, the
//! notify and stall commands) as an argv, never a shell: only once [`trust`] has opened it and
//! found that no one else can have put it there, from that very descriptor; in its own process
//! group, as the [`user`] it is given, with a time limit past which the whole group is killed,
//! and with stdout and stderr kept as one bounded tail for the report written about it. Below
//! both `dtd agent` and `dtd run`, which each run programs.

mod output;
pub mod trust;
pub mod user;

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::digest::Sha256;
use output::Tail;
use trust::{OpenError, Vetted};

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
    pub env: Vec<EnvVar>,
    pub timeout: Duration,
    /// Names it in the agent's log ("prepare-data", "health check").
    pub what: &'static str,
    /// Its output goes to the agent's log at INFO (the job's launcher), not only DEBUG.
    pub echo: bool,
    /// The uid and gid it runs as (the job's launcher); `None`: the agent's own.
    pub user: Option<(u32, u32)>,
    /// Its working directory (the job's launcher); `None`: the agent's own.
    pub dir: Option<&'a Path>,
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

/// A variable of a program's environment: the agent's own names are `'static`, the config's not.
pub type EnvVar = (std::borrow::Cow<'static, str>, OsString);

/// How one run ended and the last lines it printed.
pub struct Outcome {
    pub status: Status,
    pub tail: Vec<String>,
}

/// Runs the program to its end or its timeout. Stopping the agent mid-run (dropping this future)
/// kills the program's process group.
pub async fn run(program: &Program<'_>) -> Outcome {
    let mut running = match start(program).await {
        Ok(r) => r,
        Err(status) => {
            return Outcome {
                status,
                tail: Vec::new(),
            }
        }
    };
    let status = match tokio::time::timeout(program.timeout, running.wait()).await {
        Ok(status) => status,
        Err(_) => {
            running.group.kill();
            let _ = running.child.wait().await;
            Status::TimedOut
        }
    };
    // Background processes it left behind are its business; only a timeout kills the group.
    let tail = running.finish(false).await;
    Outcome { status, tail }
}

/// A program started in its own process group: its whole group is killed if this is dropped
/// before [`Running::finish`].
pub struct Running {
    child: tokio::process::Child,
    tail: Arc<Mutex<Tail>>,
    drained: tokio::sync::oneshot::Receiver<()>,
    group: GroupKill,
}

/// Checks and starts the program; the status says why it did not start.
pub async fn start(program: &Program<'_>) -> Result<Running, Status> {
    let vetted = vet(program).await?;
    let tail = Arc::new(Mutex::new(Tail::default()));
    let (child, drained) =
        (spawn(program, vetted, tail.clone())).map_err(|e| Status::NotStarted(e.to_string()))?;
    let group = GroupKill::new(child.id(), program.what);
    Ok(Running {
        child,
        tail,
        drained,
        group,
    })
}

impl Running {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the program (its group leader) to exit.
    pub async fn wait(&mut self) -> Status {
        match self.child.wait().await {
            Ok(st) => from_exit(st),
            Err(e) => Status::NotStarted(format!("waiting for the program failed: {e}")),
        }
    }

    /// Sends `signal` to the program itself (not its group: torchrun passes it on to its own
    /// workers in its own way).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(pid);
        if let Err(e) = nix::sys::signal::kill(pid, signal) {
            if e != nix::errno::Errno::ESRCH {
                tracing::warn!(%pid, "cannot send {signal} to the {}: {e}", self.group.what);
            }
        }
    }

    /// SIGKILL to the whole process group.
    pub fn kill_group(&mut self) {
        self.group.kill();
    }

    /// The last lines it printed, once its output ended (or a second after). With `kill_leftovers`
    /// what is left of its process group is killed first; otherwise it is left running.
    pub async fn finish(mut self, kill_leftovers: bool) -> Vec<String> {
        if kill_leftovers {
            self.group.kill();
        }
        self.group.disarm();
        let _ = tokio::time::timeout(OUTPUT_GRACE, &mut self.drained).await;
        self.lines()
    }

    /// The last lines so far.
    fn lines(&self) -> Vec<String> {
        self.tail.lock().map(|mut t| t.lines()).unwrap_or_default()
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

/// Why a vetted program did not start.
#[derive(Debug, thiserror::Error)]
enum SpawnError {
    #[error("cannot create a pipe: {0}")]
    Pipe(std::io::Error),
    #[error("cannot pass {path} to the program: {error}")]
    Pass {
        path: PathBuf,
        error: nix::errno::Errno,
    },
    /// The likelier culprit when the program, just opened, does not start.
    #[error("its working directory {0} is not a directory")]
    WorkingDirectory(PathBuf),
    #[error("program not found: {0}")]
    NotFound(PathBuf),
    #[error("permission denied (is it executable?): {0}")]
    Denied(PathBuf),
    #[error("cannot start it: {error}: {path}")]
    Failed {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Starts the program in its own process group, stdout and stderr into one pipe (so the tail
/// keeps their order), and a thread that reads it. The receiver fires when the output ends.
fn spawn(
    program: &Program<'_>,
    vetted: Vetted,
    tail: Arc<Mutex<Tail>>,
) -> Result<(tokio::process::Child, tokio::sync::oneshot::Receiver<()>), SpawnError> {
    let (reader, writer) = std::io::pipe().map_err(SpawnError::Pipe)?;
    let writer2 = writer.try_clone().map_err(SpawnError::Pipe)?;
    let exec = exec_path(&vetted)?;
    let mut cmd = tokio::process::Command::new(&exec);
    cmd.arg0(&vetted.path)
        .args(program.args)
        .envs(program.env.iter().map(|(k, v)| (k.as_ref(), v)))
        .env("DT_PROGRAM", &vetted.path)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = program.dir {
        cmd.current_dir(dir);
    }
    if let Some((uid, gid)) = program.user {
        // Set in the child before exec; as root, the standard library drops the supplementary
        // groups with them.
        cmd.uid(uid).gid(gid);
    }
    let child = cmd.spawn();
    // Our copies of the write end must close, or the reader never sees the end of the output;
    // and the program's descriptor is ours to close once the child has its own.
    drop(cmd);
    drop(vetted.file);
    let child = child.map_err(|e| match program.dir {
        Some(dir) if e.kind() != std::io::ErrorKind::PermissionDenied && !dir.is_dir() => {
            SpawnError::WorkingDirectory(dir.to_path_buf())
        }
        _ => spawn_error(&vetted.path, e),
    })?;
    let (done, drained) = tokio::sync::oneshot::channel();
    let (what, echo) = (program.what, program.echo);
    std::thread::spawn(move || {
        read_output(reader, &tail, what, echo);
        let _ = done.send(());
    });
    Ok((child, drained))
}

/// What to execute: the checked descriptor by its `/proc/self/fd` name, which the kernel opens
/// as that same file (not by a path anyone could change meanwhile). The descriptor must survive
/// the exec: a `#!` script is read again by its interpreter through that name (execve(2)). So it
/// loses close-on-exec just before the spawn; nothing else in the agent starts a process
/// meanwhile, and the parent closes it right after.
fn exec_path(vetted: &Vetted) -> Result<PathBuf, SpawnError> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    (fcntl(&vetted.file, FcntlArg::F_SETFD(FdFlag::empty()))).map_err(|error| {
        SpawnError::Pass {
            path: vetted.path.clone(),
            error,
        }
    })?;
    Ok(PathBuf::from(format!(
        "/proc/self/fd/{}",
        vetted.file.as_raw_fd()
    )))
}

fn read_output(mut reader: std::io::PipeReader, tail: &Mutex<Tail>, what: &str, echo: bool) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                let Ok(mut t) = tail.lock() else { return };
                for line in t.feed(&buf[..k]) {
                    if echo {
                        tracing::info!(target: "dt::agent::program_output", program = what, "{line}");
                    } else {
                        tracing::debug!(target: "dt::agent::program_output", program = what, "{line}");
                    }
                }
            }
        }
    }
}

fn spawn_error(program: &Path, error: std::io::Error) -> SpawnError {
    let path = program.to_path_buf();
    match error.kind() {
        std::io::ErrorKind::NotFound => SpawnError::NotFound(path),
        std::io::ErrorKind::PermissionDenied => SpawnError::Denied(path),
        _ => SpawnError::Failed { path, error },
    }
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
