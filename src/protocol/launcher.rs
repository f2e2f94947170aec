//! The body of `launcher_<ip>`: what the node's launcher (torchrun, `job.launcher`) is doing,
//! written by `dtd agent` at every change and every [`HEARTBEAT`], read by `dtd run`.
//!
//! The master reads it as it reads every report: bounded, from a file any worker could have
//! written, believed only for the instance EC2 lists at that IP and for a generation `dtd` wrote.
//! A report that stops being replaced says the node stopped answering (`job.launcher.silent_after`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ParseError;

/// How often the agent replaces its report even when nothing changed: the master's evidence that
/// the node still answers.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// What the launcher is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LauncherState {
    /// No plan lists this node (not joined yet, or left): nothing runs.
    Idle,
    /// Started for the plan's generation and not exited.
    Running,
    /// Asked to stop (a new generation, or the node left); waiting out the grace.
    Stopping,
    /// Stopped by the agent; it starts again when a plan lists the node.
    Stopped,
    /// Exited 0 on its own: the job finished on this node. Not started again for this generation.
    Finished,
    /// Exited non-zero (or was killed, or could not start) while listed: started again after a
    /// backoff.
    Failed,
}

impl LauncherState {
    pub fn as_str(self) -> &'static str {
        match self {
            LauncherState::Idle => "idle",
            LauncherState::Running => "running",
            LauncherState::Stopping => "stopping",
            LauncherState::Stopped => "stopped",
            LauncherState::Finished => "finished",
            LauncherState::Failed => "failed",
        }
    }

    /// Processes of the launcher may still be alive.
    pub fn is_active(self) -> bool {
        matches!(self, LauncherState::Running | LauncherState::Stopping)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LauncherReport {
    /// Which instance reports: an IP can be reused by a new instance while the file is there.
    pub instance_id: String,
    pub state: LauncherState,
    /// The plan's generation it was started for (or stopped in).
    #[serde(default)]
    pub generation: Option<u64>,
    /// torchrun's `--rdzv-id` (`<cluster>-g<generation>`).
    #[serde(default)]
    pub rdzv_id: Option<String>,
    #[serde(default)]
    pub pid: Option<u32>,
    /// How the last run ended: its exit code, or the signal that killed it.
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    /// Runs started again after a failure in this generation.
    #[serde(default)]
    pub restarts: u32,
    /// One line for people: why it is in this state (`exit code 1; again in 10s`).
    #[serde(default)]
    pub reason: String,
    /// When it entered this state, RFC 3339 to the second.
    pub since: String,
    #[serde(default)]
    pub output_tail: Vec<String>,
    /// A process of the launcher stopped by a signal (`T` in `/proc/<pid>/stat`) while it runs:
    /// the node cannot take part in a step. Named when the job stalls (`job.stall.action`).
    /// Not one stopped by a debugger (`t`): a person looking at a process is not a hang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<u32>,
    /// How long the node's own share of a step takes, as its job measures it (`dt_torch`'s
    /// `session.compute()`): the slowest of its processes. `dtd` compares the members' to find a
    /// straggler (`job.stragglers`). Absent when the job does not measure it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<StepCompute>,
}

/// A node's compute time per step: the median of its last steps, in microseconds, and the step
/// it was measured at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepCompute {
    pub step: u64,
    pub micros: u64,
}

impl LauncherReport {
    /// One line of JSON that fits the master's reader, dropping the oldest output lines first.
    pub fn render(mut self) -> Vec<u8> {
        self.reason = super::health::one_line(&self.reason);
        super::report::bounded(self, |r| &mut r.output_tail)
    }

    /// Parses a body read from the shared directory (untrusted); the reason and the rendezvous id
    /// are cut to one printable line.
    pub fn parse(body: &[u8]) -> Result<LauncherReport, ParseError> {
        let mut r: LauncherReport = serde_json::from_slice(body).map_err(ParseError::Launcher)?;
        r.reason = super::health::one_line(&r.reason);
        r.rdzv_id = r.rdzv_id.map(|id| super::health::one_line(&id));
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_on_one_line_and_fits_the_reader() {
        let report = LauncherReport {
            instance_id: "i-0123456789abcdef0".into(),
            state: LauncherState::Failed,
            generation: Some(4),
            rdzv_id: Some("demo-g4".into()),
            pid: Some(4242),
            exit_code: Some(1),
            signal: None,
            restarts: 2,
            reason: "exit code 1;\nagain in 20s".into(),
            since: "2026-11-25T09:00:00Z".into(),
            output_tail: (0..40)
                .map(|i| format!("{i}{}", "\"".repeat(499)))
                .collect(),
            stopped: Some(4243),
            compute: Some(StepCompute {
                step: 77,
                micros: 125_000,
            }),
        };
        let body = report.clone().render();
        assert!(body.len() as u64 <= super::super::markers::MAX_REPORT_BYTES);
        assert_eq!(body.iter().filter(|b| **b == b'\n').count(), 1);
        let back = LauncherReport::parse(&body).unwrap();
        assert_eq!(back.state, LauncherState::Failed);
        assert_eq!(back.reason, "exit code 1;again in 20s");
        assert_eq!(back.stopped, Some(4243));
        assert_eq!(
            back.compute.map(|c| (c.step, c.micros)),
            Some((77, 125_000))
        );
        assert!(back.output_tail.last().unwrap().starts_with("39"));
        assert!(!LauncherState::Failed.is_active() && LauncherState::Stopping.is_active());
    }

    #[test]
    fn an_unknown_state_is_no_report() {
        let body = br#"{"instance_id":"i-1","state":"hacked","since":"x"}"#;
        assert!(LauncherReport::parse(body).is_err());
    }
}
