//! `launcher_<ip>`: the launcher's state, replaced at every change and signed again every beat
//! (`job.launcher.silent_after` / 4): a report signed later than the last one the master read is
//! its evidence that the node still answers. A modification time would be no evidence: any
//! worker can set it on any file.

use std::time::Duration;

use tokio::time::Instant;

use super::command::Placement;
use crate::agent::reports::Reports;
use crate::agent::Identity;
use crate::program::Status;
use crate::protocol::launcher::{LauncherReport, LauncherState, HEARTBEAT};
use crate::protocol::markers::MarkerKind;

pub struct Reporter {
    reports: Reports,
    report: LauncherReport,
    /// How often the report is signed again when nothing changed.
    beat: Duration,
    written: Option<Instant>,
    /// The last heartbeat tick (every [`HEARTBEAT`]), when the launcher's processes are looked at.
    ticked: Option<Instant>,
    /// The last write error, logged once until it changes.
    failing: Option<std::io::ErrorKind>,
}

impl Reporter {
    pub fn new(reports: Reports, identity: &Identity, silent_after: Duration) -> Reporter {
        Reporter {
            reports,
            beat: silent_after / 4,
            ticked: None,
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
                stopped: None,
                compute: None,
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

    /// A process of the launcher a signal stopped, or none: written at once when it changes, so
    /// that a stall names the node within a heartbeat.
    pub fn stopped_process(&mut self, pid: Option<i32>) {
        let pid = pid.and_then(|p| u32::try_from(p).ok());
        if self.report.stopped != pid {
            self.report.stopped = pid;
            self.write();
        }
    }

    /// The node's compute time per step as the job measures it: written when it changes (at
    /// most every heartbeat, when the job measures at all).
    pub fn compute(&mut self, c: Option<crate::protocol::launcher::StepCompute>) {
        if self.report.compute != c {
            self.report.compute = c;
            self.write();
        }
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
        r.stopped = None;
        r.compute = None;
        r.output_tail = tail;
    }

    /// Every [`HEARTBEAT`]: signs the report again when the last write is a beat old. Returns
    /// whether a heartbeat was due (the caller looks at the launcher's processes then).
    pub fn heartbeat(&mut self) -> bool {
        if self.ticked.is_some_and(|t| t.elapsed() < HEARTBEAT) {
            return false;
        }
        self.ticked = Some(Instant::now());
        if self.written.is_none_or(|w| w.elapsed() >= self.beat) {
            self.write();
        }
        true
    }

    fn write(&mut self) {
        self.written = Some(Instant::now());
        let body = self.report.clone().render();
        match self.reports.write(MarkerKind::Launcher, &body) {
            Ok(()) => self.failing = None,
            Err(e) => {
                if self.failing != Some(e.kind()) {
                    let path = self.reports.path(MarkerKind::Launcher);
                    tracing::error!(path = %path.display(), "cannot write the launcher report: {e}");
                    self.failing = Some(e.kind());
                }
            }
        }
    }
}

fn now() -> String {
    crate::time::rfc3339(crate::clock::now_millis()).to_string()
}
