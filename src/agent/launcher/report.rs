//! `launcher_<ip>`: the launcher's state, replaced at every change (a new file: the master reads
//! it), and touched at every heartbeat (a new modification time: the master sees the node
//! answer without reading anything, and the directory does not change, so no pass is woken).

use std::path::{Path, PathBuf};

use tokio::time::Instant;

use super::command::Placement;
use crate::agent::program::Status;
use crate::agent::Identity;
use crate::protocol::launcher::{LauncherReport, LauncherState, HEARTBEAT};
use crate::protocol::markers::{MarkerKind, MarkerName};

pub struct Reporter {
    path: PathBuf,
    report: LauncherReport,
    written: Option<Instant>,
    /// The last write error, logged once until it changes.
    failing: Option<std::io::ErrorKind>,
}

impl Reporter {
    pub fn new(shared_dir: &Path, identity: &Identity) -> Reporter {
        let name = MarkerName::new(MarkerKind::Launcher, identity.ip);
        Reporter {
            path: name.path_in(shared_dir),
            report: LauncherReport {
                instance_id: identity.instance_id.clone(),
                state: LauncherState::Idle,
                generation: None,
                rdzv_id: None,
                pid: None,
                exit_code: None,
                signal: None,
                restarts: 0,
                reason: String::new(),
                since: now(),
                output_tail: Vec::new(),
            },
            written: None,
            failing: None,
        }
    }

    pub fn set(&mut self, state: LauncherState, generation: Option<u64>, reason: &str) {
        let r = &mut self.report;
        r.state = state;
        r.generation = generation.or(r.generation);
        r.reason = reason.to_string();
        r.since = now();
        self.write();
    }

    pub fn started(&mut self, at: &Placement, rdzv_id: String, pid: Option<u32>, restarts: u32) {
        let r = &mut self.report;
        r.rdzv_id = Some(rdzv_id);
        r.pid = pid;
        r.exit_code = None;
        r.signal = None;
        r.restarts = restarts;
        r.output_tail.clear();
        let why = format!("node {} of {}", at.rank, at.nnodes());
        self.set(LauncherState::Running, Some(at.generation), &why);
    }

    /// The run goes on into a newer generation (the elastic strategy).
    pub fn following(&mut self, at: &Placement, why: &str) {
        self.set(LauncherState::Running, Some(at.generation), why);
    }

    pub fn stopping(&mut self, why: &str) {
        self.set(LauncherState::Stopping, None, why);
    }

    pub fn stopped(&mut self, status: &Status, why: &str, tail: Vec<String>) {
        self.ended(status, tail);
        self.set(LauncherState::Stopped, None, why);
    }

    pub fn finished(&mut self, tail: Vec<String>) {
        self.ended(&Status::Exited(0), tail);
        self.set(LauncherState::Finished, None, "exit code 0");
    }

    pub fn failed(&mut self, status: &Status, why: String, tail: Vec<String>) {
        self.ended(status, tail);
        self.set(LauncherState::Failed, None, &why);
    }

    fn ended(&mut self, status: &Status, tail: Vec<String>) {
        let r = &mut self.report;
        (r.exit_code, r.signal) = match status {
            Status::Exited(c) => (Some(*c), None),
            Status::Signalled(s) => (None, Some(*s)),
            _ => (None, None),
        };
        r.pid = None;
        r.output_tail = tail;
    }

    /// Touches the report when the last write is a heartbeat old (writes it when it cannot be
    /// touched: gone, or something else put in its place). Returns whether it was due.
    pub fn heartbeat(&mut self) -> bool {
        if self.written.is_some_and(|w| w.elapsed() < HEARTBEAT) {
            return false;
        }
        self.written = Some(Instant::now());
        if touch(&self.path).is_err() {
            self.write();
        }
        true
    }

    fn write(&mut self) {
        self.written = Some(Instant::now());
        let body = self.report.clone().render();
        match crate::fsutil::write_atomic(&self.path, &body) {
            Ok(()) => self.failing = None,
            Err(e) => {
                if self.failing != Some(e.kind()) {
                    tracing::error!(path = %self.path.display(), "cannot write the launcher report: {e}");
                    self.failing = Some(e.kind());
                }
            }
        }
    }
}

/// A new modification time on the report itself (opened without following a link, and only if
/// it is a regular file).
fn touch(path: &Path) -> Result<(), crate::untrusted::ReadError> {
    let (file, _) = crate::untrusted::open(path)?
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    file.set_modified(std::time::SystemTime::now())?;
    Ok(())
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
