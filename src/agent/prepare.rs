//! Runs the prepare-data program with a time limit and a bounded number of attempts, then writes
//! `prepare_data_success_<ip>` or `prepare_data_failed_<ip>` for the master.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::output::Tail;
use super::Identity;
use crate::config::Config;
use crate::protocol::markers::{MarkerKind, MarkerName, MAX_REPORT_BYTES};
use crate::protocol::report::{self, FailureReport, SuccessReport};

/// After the program exits, how long its output may still take to drain (a leftover background
/// process can hold the pipe open for ever; its output is not waited for).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub timeout: Duration,
    pub attempts: u32,
    pub retry_delay: Duration,
    pub shared_dir: PathBuf,
    pub cluster: String,
    pub identity: Identity,
}

impl Spec {
    pub fn from_config(cfg: &Config, identity: Identity) -> Spec {
        let a = &cfg.agent;
        Spec {
            program: a.prepare_data.clone(),
            args: a.args.clone(),
            timeout: a.timeout,
            attempts: a.attempts.max(1),
            retry_delay: a.retry_delay,
            shared_dir: cfg.shared_dir.clone(),
            cluster: cfg.cluster.clone(),
            identity,
        }
    }

    fn marker(&self, kind: MarkerKind) -> PathBuf {
        MarkerName::new(kind, self.identity.ip).path_in(&self.shared_dir)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    /// It could not be started (or waited for): the reason, for people.
    NotStarted(String),
}

impl Status {
    fn describe(&self, timeout: Duration) -> String {
        match self {
            Status::Exited(c) => format!("exit code {c}"),
            Status::Signalled(s) => format!("killed by signal {s}"),
            Status::TimedOut => format!(
                "timed out after {}, killed",
                humantime::format_duration(timeout)
            ),
            Status::NotStarted(why) => why.clone(),
        }
    }
}

struct Attempt {
    status: Status,
    tail: Vec<String>,
}

/// Whether this instance already prepared its data (the agent restarted). Markers that name
/// another instance are left over from an earlier owner of this IP, and are removed: its success
/// must not make this instance look ready, nor its failure make it look failed.
pub fn already_prepared(spec: &Spec) -> bool {
    let failed = spec.marker(MarkerKind::Failed);
    if let Ok(Some(_)) = foreign_owner(&failed, &spec.identity.instance_id) {
        super::remove_marker(&failed);
    }
    let path = spec.marker(MarkerKind::Success);
    match foreign_owner(&path, &spec.identity.instance_id) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot read the success marker ({e}): preparing again");
            false
        }
        Ok(Some(other)) => {
            tracing::info!(path = %path.display(), other, "success marker belongs to another instance that had this IP: preparing again");
            super::remove_marker(&path);
            false
        }
        // A marker without an owner was written by something else (a 2018-style script): trusted.
        Ok(None) => true,
    }
}

/// The instance a marker names, when it names one other than `mine`.
fn foreign_owner(path: &Path, mine: &str) -> std::io::Result<Option<String>> {
    let body = match crate::untrusted::read_prefix(path, MAX_REPORT_BYTES) {
        Ok(Some(body)) => body,
        Ok(None) => return Err(std::io::ErrorKind::NotFound.into()),
        Err(e) => return Err(std::io::Error::other(e.to_string())),
    };
    Ok(report::owner(&body).filter(|o| o != mine))
}

/// Runs the attempts and writes the marker. Returns whether the data is ready.
pub async fn prepare(spec: &Spec) -> bool {
    let started = Instant::now();
    let mut last = None;
    for n in 1..=spec.attempts {
        tracing::info!(attempt = n, of = spec.attempts, program = %spec.program.display(), "prepare-data: starting");
        let attempt = run_attempt(spec, n).await;
        if attempt.status == Status::Exited(0) {
            tracing::info!(attempt = n, elapsed = ?started.elapsed(), "prepare-data: succeeded");
            write_success(spec, n, started.elapsed(), attempt.tail).await;
            return true;
        }
        tracing::warn!(
            attempt = n,
            of = spec.attempts,
            last_output = attempt.tail.last().map_or("", String::as_str),
            "prepare-data: failed: {}",
            attempt.status.describe(spec.timeout)
        );
        last = Some(attempt);
        if n < spec.attempts {
            tokio::time::sleep(spec.retry_delay).await;
        }
    }
    if let Some(attempt) = last {
        write_failure(spec, started.elapsed(), attempt).await;
    }
    false
}

async fn write_success(spec: &Spec, attempts: u32, took: Duration, tail: Vec<String>) {
    let json = SuccessReport {
        instance_id: spec.identity.instance_id.clone(),
        attempts,
        duration_s: seconds(took),
        output_tail: tail,
    }
    .render();
    super::write_marker(&spec.marker(MarkerKind::Success), &json, spec.retry_delay).await;
    super::remove_marker(&spec.marker(MarkerKind::Failed));
}

async fn write_failure(spec: &Spec, took: Duration, attempt: Attempt) {
    let status = attempt.status;
    let json = FailureReport {
        instance_id: spec.identity.instance_id.clone(),
        exit_code: match status {
            Status::Exited(c) => Some(c),
            _ => None,
        },
        signal: match status {
            Status::Signalled(s) => Some(s),
            _ => None,
        },
        timed_out: status == Status::TimedOut,
        attempts: spec.attempts,
        duration_s: seconds(took),
        output_tail: attempt.tail,
        error: match status {
            Status::NotStarted(why) => Some(why),
            _ => None,
        },
    }
    .render();
    let path = spec.marker(MarkerKind::Failed);
    super::write_marker(&path, &json, spec.retry_delay).await;
    tracing::warn!(path = %path.display(), "prepare-data: failed after {} attempt(s); wrote the failure marker", spec.attempts);
}

fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

async fn run_attempt(spec: &Spec, n: u32) -> Attempt {
    let tail = Arc::new(Mutex::new(Tail::default()));
    let (mut child, drained) = match spawn(spec, n, tail.clone()) {
        Ok(started) => started,
        Err(why) => {
            return Attempt {
                status: Status::NotStarted(why),
                tail: Vec::new(),
            }
        }
    };
    let mut group = GroupKill::new(child.id());
    let status = match tokio::time::timeout(spec.timeout, child.wait()).await {
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
    Attempt {
        status,
        tail: lines,
    }
}

/// Starts the program in its own process group, stdout and stderr into one pipe (so the tail
/// keeps their order), and a thread that reads it. The receiver fires when the output ends.
fn spawn(
    spec: &Spec,
    n: u32,
    tail: Arc<Mutex<Tail>>,
) -> Result<(tokio::process::Child, tokio::sync::oneshot::Receiver<()>), String> {
    let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let writer2 = writer
        .try_clone()
        .map_err(|e| format!("cannot create a pipe: {e}"))?;
    let id = &spec.identity;
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env("DT_AGENT", "1")
        .env("DT_IP", id.ip.to_string())
        .env("DT_INSTANCE_ID", &id.instance_id)
        .env("DT_SHARED_DIR", &spec.shared_dir)
        .env("DT_CLUSTER", &spec.cluster)
        .env("DT_ATTEMPT", n.to_string())
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn();
    // Our copies of the write end must close, or the reader never sees the end of the output.
    drop(cmd);
    let child = child.map_err(|e| spawn_error(&spec.program, &e))?;
    let (done, drained) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        read_output(reader, &tail);
        let _ = done.send(());
    });
    Ok((child, drained))
}

fn read_output(mut reader: std::io::PipeReader, tail: &Mutex<Tail>) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                let Ok(mut t) = tail.lock() else { return };
                for line in t.feed(&buf[..k]) {
                    tracing::debug!(target: "dt::agent::prepare_output", "{line}");
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
/// agent is stopped (its future dropped) in the middle of an attempt.
struct GroupKill {
    pgid: Option<i32>,
}

impl GroupKill {
    fn new(pid: Option<u32>) -> GroupKill {
        GroupKill {
            pgid: pid.and_then(|p| i32::try_from(p).ok()),
        }
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let pg = nix::unistd::Pid::from_raw(pgid);
            if let Err(e) = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL) {
                if e != nix::errno::Errno::ESRCH {
                    tracing::warn!(pgid, "cannot kill the prepare-data process group: {e}");
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
