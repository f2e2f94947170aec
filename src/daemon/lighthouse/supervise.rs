//! torchft's `torchft_lighthouse`, run by `dtd run` with the settings of
//! `job.launcher.in_place` on the master's loopback (the nodes reach it through dtd's front), as
//! the job's user (never root: it is the job's program, checked like torchrun before every
//! start), started again after a backoff whenever it exits (the nodes' managers retry their
//! quorum meanwhile, so a short outage pauses training without ending it), and stopped when dtd
//! stops (its process group is killed with the task). A `dtd` killed with SIGKILL leaves it
//! running, so the next one adopts it (found in `/proc` by its user and its `--bind`) rather than
//! pause every node for a new one: its quorum state goes on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{Config, InPlace, Launcher};
use crate::program::user::{self, RunAs, RunAsError};
use crate::program::{self, Program, Status};

/// The first pause before starting it again; doubled per exit, up to [`MAX_BACKOFF`]. A run
/// that lasted [`STEADY`] starts the count again.
const BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const STEADY: Duration = Duration::from_secs(60);

/// Supervises on the current runtime; `state` is its one-line state, for `dtctl status`.
pub fn spawn(cfg: &Config, launcher: &Launcher, settings: &InPlace, state: Arc<Mutex<String>>) {
    let job = Job {
        program: settings.program(&launcher.torchrun[0]),
        args: args(settings),
        settings: settings.clone(),
        run_as: user::resolve(cfg, launcher),
        state,
    };
    tokio::spawn(job.supervise());
}

/// `torchft_lighthouse`'s arguments: a quorum needs `min_nodes`, waits `join_timeout` for nodes
/// that heartbeat but have not asked, and leaves out a node silent for `heartbeat_timeout`.
fn args(s: &InPlace) -> Vec<String> {
    vec![
        format!("--bind={}", s.local()),
        format!("--min_replicas={}", s.min_nodes),
        format!("--join_timeout_ms={}", s.join_timeout.as_millis()),
        "--quorum_tick_ms=100".into(),
        format!("--heartbeat_timeout_ms={}", s.heartbeat_timeout.as_millis()),
    ]
}

struct Job {
    program: std::path::PathBuf,
    args: Vec<String>,
    settings: InPlace,
    run_as: Result<RunAs, RunAsError>,
    state: Arc<Mutex<String>>,
}

impl Job {
    async fn supervise(self) {
        self.end_unfronted();
        let mut exits = 0u32;
        loop {
            let local = self.settings.local();
            let earlier = self
                .run_as
                .as_ref()
                .ok()
                .and_then(|u| self.earlier(u.uid, local));
            if let Some(orphan) = earlier {
                let line = format!(
                    "running (pid {}, started by an earlier dtd, adopted)",
                    orphan.pid
                );
                tracing::info!(address = %self.settings.local(), "torchft's Lighthouse {line}");
                self.set(line);
                orphan.gone().await;
                self.set("exited (the adopted one)".into());
            }
            let started = tokio::time::Instant::now();
            let ended = self.run_once().await;
            exits = if started.elapsed() >= STEADY {
                1
            } else {
                exits.saturating_add(1)
            };
            let pause = BACKOFF
                .saturating_mul(1 << exits.saturating_sub(1).min(8))
                .min(MAX_BACKOFF);
            let line = format!(
                "{ended}; started again in {}",
                humantime::format_duration(pause)
            );
            tracing::warn!(address = %self.settings.local(), "torchft's Lighthouse {line}");
            self.set(line);
            tokio::time::sleep(pause).await;
        }
    }

    /// One run, from its checks to its exit: what ended it, for people.
    async fn run_once(&self) -> String {
        let run_as = match &self.run_as {
            Ok(u) => u,
            Err(why) => return format!("not started: {why}"),
        };
        let mut env = vec![("RUST_LOG".into(), "warn".into())];
        user::add_env(&mut env, run_as);
        let program = Program {
            path: &self.program,
            sha256: self.settings.sha256.as_ref(),
            args: &self.args,
            env,
            timeout: Duration::MAX,
            what: "Lighthouse",
            echo: false,
            user: Some((run_as.uid, run_as.gid)),
            dir: None,
        };
        let mut running = match program::start(&program).await {
            Ok(r) => r,
            Err(status) => return format!("not started: {}", status.describe(Duration::ZERO)),
        };
        let pid = running.pid().unwrap_or_default();
        let since = crate::time::rfc3339(crate::clock::now_millis());
        tracing::info!(pid, address = %self.settings.local(), "torchft's Lighthouse started");
        self.set(format!("running (pid {pid}, since {since})"));
        let status = running.wait().await;
        let tail = running.finish(true).await;
        let last = tail.last().map_or(String::new(), |l| format!(": {l}"));
        match status {
            Status::Exited(_) | Status::Signalled(_) => {
                format!("exited ({}){last}", status.describe(Duration::ZERO))
            }
            other => other.describe(Duration::ZERO),
        }
    }

    /// A Lighthouse that a `dtd` without the front left where the nodes dial (an upgrade): it
    /// would hold the front's address and hear everyone, so it ends (killed as its `Orphan` is
    /// dropped); the nodes' managers retry until the new one answers.
    fn end_unfronted(&self) {
        let dialled = self.settings.lighthouse;
        let old = self
            .run_as
            .as_ref()
            .ok()
            .and_then(|u| self.earlier(u.uid, dialled));
        if let Some(old) = old {
            tracing::warn!(pid = old.pid, address = %dialled, "torchft's Lighthouse left by an earlier dtd without a front: ended");
        }
    }

    /// A Lighthouse an earlier `dtd` started (and did not stop: it was killed) at `address`.
    fn earlier(&self, uid: u32, address: std::net::SocketAddr) -> Option<Orphan> {
        let bind = format!("--bind={address}");
        let procs = std::fs::read_dir("/proc").ok()?;
        procs.flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let meta = std::fs::metadata(e.path()).ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let mut args = cmdline.split(|b| *b == 0);
            let ours = std::os::unix::fs::MetadataExt::uid(&meta) == uid
                && args.clone().any(|a| a == bind.as_bytes())
                && args.any(|a| a.starts_with(b"--heartbeat_timeout_ms="));
            ours.then(|| Orphan::new(pid)).flatten()
        })
    }

    fn set(&self, line: String) {
        if let Ok(mut s) = self.state.lock() {
            *s = line;
        }
    }
}

/// An adopted Lighthouse: watched until it exits, killed if this `dtd` stops first (as its own
/// would be).
struct Orphan {
    pid: i32,
    /// Its start time (`/proc/<pid>/stat`, field 22): a pid reused by another process is not it.
    started: u64,
}

impl Orphan {
    fn new(pid: i32) -> Option<Orphan> {
        Some(Orphan {
            pid,
            started: start_time(pid)?,
        })
    }

    fn alive(&self) -> bool {
        start_time(self.pid) == Some(self.started)
    }

    async fn gone(&self) {
        while self.alive() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        if self.alive() {
            let pid = nix::unistd::Pid::from_raw(self.pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
