//! The `progress` file: the job's last finished step, one JSON line it replaces atomically
//! (temp file and rename) as it trains: `{"step": 1234, "time": "2026-11-24T08:16:41Z"}`.
//!
//! Optional for the job; `dtd run` reads it every pass: the goodput ledger follows its step and
//! `run` (a new run is a restart), `job.stall` journals `stalled` when the step stops
//! advancing, and `join.at_checkpoint` lets ready workers join once `checkpoint_step`, the step
//! of the job's last checkpoint, moves on. `time` (when the job wrote it) is optional and only
//! shown: how long a step has not advanced is measured by `dtd`'s own clock, never the job's.

use serde::{Deserialize, Serialize};

use super::ParseError;

/// The progress file's default name in the shared directory.
pub const PROGRESS_FILE: &str = "progress";

/// A step number and a time take under a hundred bytes; the in-place strategy's view adds its
/// last quorum changes (`dt_torch` keeps 16, naming at most 16 nodes each).
pub const MAX_BYTES: u64 = 16 * 1024;

/// The line as written. Unknown keys are allowed, so a job may add its own (loss, epoch).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ProgressLine {
    pub step: u64,
    /// When the job wrote it (RFC 3339), if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The generation of the job's processes that wrote it (their `host_worker_plan`'s), if it
    /// says (`dt_torch` does): where a change restarts the job, a step an older generation
    /// wrote after the change is not the job training again (the goodput ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The step of the job's last checkpoint, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_step: Option<u64>,
    /// Under the in-place strategy, torchft's quorum as the job sees it (`dt_torch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place: Option<QuorumLine>,
    /// This run of the job's processes, if it says: a new run is a restart, and the steps the
    /// last one had finished past `from` are trained again, even when the new run passes them
    /// before `dtd` reads a lower step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunLine>,
}

/// One start of the job's processes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct RunLine {
    /// Any text that differs from one start to the next (`dt_torch`: the generation, the
    /// process id and its start time).
    pub id: String,
    /// The step it started from (its checkpoint's): its first step is the one after.
    pub from: u64,
}

/// The quorum the job trains in, and how it changed.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct QuorumLine {
    /// torchft's quorum id (it starts again at 1 with a new Lighthouse).
    pub quorum: Option<u64>,
    /// How many nodes train in it.
    pub nodes: u64,
    /// The last changes, oldest first.
    #[serde(default)]
    pub changes: Vec<QuorumChangeLine>,
}

/// One change of the quorum, written once the new quorum committed its first step.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct QuorumChangeLine {
    pub quorum: u64,
    /// The first step the new quorum committed.
    pub step: u64,
    pub nodes: u64,
    #[serde(default)]
    pub joined: Vec<std::net::IpAddr>,
    #[serde(default)]
    pub left: Vec<std::net::IpAddr>,
    /// Steps discarded because a peer was lost mid-step (each ran again).
    pub lost_steps: u64,
    /// From the last step committed before the change to the first after it.
    pub paused_s: f64,
    /// When the job saw the new quorum (RFC 3339).
    pub at: String,
}

impl ProgressLine {
    /// The line a job writes (for tests and tools; the example job writes the same).
    pub fn render(&self) -> String {
        // A struct of a number and a string always serializes.
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{json}\n")
    }

    /// Parses what was read from the shared directory (untrusted: any worker can write it).
    pub fn parse(body: &[u8]) -> Result<ProgressLine, ParseError> {
        serde_json::from_slice(body).map_err(ParseError::Progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips() {
        let line = ProgressLine {
            step: 1234,
            time: Some("2026-11-24T08:16:41Z".into()),
            checkpoint_step: None,
            in_place: None,
            run: None,
            generation: None,
        };
        let text = line.render();
        assert_eq!(text, "{\"step\":1234,\"time\":\"2026-11-24T08:16:41Z\"}\n");
        assert!(text.len() as u64 <= MAX_BYTES);
        assert_eq!(ProgressLine::parse(text.as_bytes()).unwrap(), line);
    }

    /// A run of the job's processes and its generation, as dt_torch names them (its tests
    /// check the keys).
    #[test]
    fn a_run_is_read_when_the_job_names_it() {
        let golden = include_str!("../../tests/fixtures/protocol/progress_run.json");
        let line = ProgressLine::parse(golden.as_bytes()).unwrap();
        assert_eq!(line.generation, Some(8));
        let run = line.run.as_ref().unwrap();
        assert_eq!(
            (run.id.as_str(), run.from),
            ("8.4242.1764400000000000000", 20)
        );
        assert_eq!(line.render(), golden);
    }

    /// The golden line under tests/fixtures/protocol/: the example job's tests write the same.
    #[test]
    fn the_golden_line_is_a_progress_line() {
        let golden = include_str!("../../tests/fixtures/protocol/progress.json");
        let line = ProgressLine::parse(golden.as_bytes()).unwrap();
        assert_eq!(line.step, 1234);
        assert_eq!(line.render(), golden);
        let golden = include_str!("../../tests/fixtures/protocol/progress_checkpoint.json");
        let line = ProgressLine::parse(golden.as_bytes()).unwrap();
        assert_eq!((line.step, line.checkpoint_step), (1234, Some(1200)));
        assert_eq!(line.render(), golden);
        // The in-place strategy's quorum, as dt_torch writes it (its tests check the keys).
        let golden = include_str!("../../tests/fixtures/protocol/progress_in_place.json");
        let line = ProgressLine::parse(golden.as_bytes()).unwrap();
        let q = line.in_place.as_ref().unwrap();
        assert_eq!((q.quorum, q.nodes, q.changes.len()), (Some(7), 2, 1));
        assert_eq!(
            q.changes[0].left,
            ["10.0.1.7".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(line.render(), golden);
    }

    #[test]
    fn time_is_optional_and_extra_keys_are_allowed() {
        let p = ProgressLine::parse(b"{\"step\": 7, \"loss\": 0.5}").unwrap();
        assert_eq!((p.step, p.time), (7, None));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            &b""[..],
            b"7",
            b"{\"step\": -1}",
            b"{\"step\": \"7\"}",
            b"{\"time\": \"2026-11-24T08:16:41Z\"}",
            b"{\"step\": 1.5}",
            b"{\"step\": 7, \"time\": 3}",
            b"\xff",
        ] {
            let shown = String::from_utf8_lossy(bad);
            assert!(ProgressLine::parse(bad).is_err(), "{shown:?}");
        }
    }
}
