//! The status report `dtd` writes after every pass and `dtctl status` prints: the report's type
//! (here, as `status.json` holds it), how a pass builds it (build.rs), how it is printed
//! (render.rs), and the totals a restarted `dtd` carries on from (totals.rs).

mod build;
mod render;
mod totals;

use serde::{Deserialize, Serialize};

use crate::alerts::AlertStatus;
use crate::model::*;
use crate::protocol::host_files::Host;

pub use build::{LighthouseFacts, PassFacts};
pub use render::ago;
pub use totals::read_totals;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceStatus {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub cluster: String,
    pub updated_at: Millis,
    pub pid: u32,
    pub interval_ms: u64,
    pub min: usize,
    pub max: usize,
    /// Workers in the host files now (base hosts included).
    pub current: usize,
    /// Workers that will be in the job once everything on its way in has joined, within max.
    pub desired: usize,
    pub generation: u64,
    pub acked_generation: Option<u64>,
    /// The generation the job has not been told about yet, if any.
    pub pending_notification: Option<u64>,
    /// The worker Auto Scaling group min/desired/max come from, if any.
    #[serde(default)]
    pub group: Option<String>,
    /// Why failed group workers are no longer replaced, if they are not.
    #[serde(default)]
    pub replacing_stopped: Option<String>,
    /// Workers the job lost to interruptions and kept training without.
    #[serde(default)]
    pub interruptions: u64,
    pub ec2_calls_last_pass: u32,
    /// When the complete listing the instances rest on began; between listings only what
    /// events and markers name is read again.
    #[serde(default)]
    pub instances_listed_at: Option<Millis>,
    #[serde(default)]
    pub resync_ms: u64,
    pub pass_ms: u64,
    /// What dtd counted since it first managed the cluster (GPU time), carried over restarts.
    #[serde(default)]
    pub totals: Totals,
    pub sources: Vec<SourceStatus>,
    pub holds: Vec<String>,
    /// What workers wrote that dtd did not believe (docs/shared-directory.md, "What a worker can put there").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    pub errors: Vec<String>,
    pub hosts: Vec<Host>,
    pub workers: Vec<WorkerView>,
    /// Each alert webhook's counts and failure, URL redacted.
    #[serde(default)]
    pub alerts: Vec<AlertStatus>,
    /// The job's progress and whether it stalled, with `job.stall` configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressStatus>,
    /// The in-place strategy's Lighthouse and quorum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumStatus>,
    /// Each `workers.capacity` choice in order, and why launches skip it now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<CapacityStatus>,
}

/// What stall detection knows of the job's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressStatus {
    /// The progress file.
    pub file: String,
    /// The last step read, and when dtd first read it; `None` before the job wrote one.
    pub step: Option<u64>,
    pub advanced_at: Option<Millis>,
    /// The step has not advanced for `stall_after_ms`: journaled as `stalled`.
    pub stalled: bool,
    pub stall_after_ms: u64,
    /// While stalled: which nodes hold the job back and what `job.stall.action` did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub held_back: String,
    /// Why the file cannot be read now (no stall is concluded from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The in-place strategy: torchft's Lighthouse as `dtd` runs it, and the quorum as the job
/// reports it in its progress file (the job's word, shown only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuorumStatus {
    pub lighthouse: String,
    pub lighthouse_state: String,
    pub step: Option<u64>,
    pub quorum: Option<u64>,
    pub nodes: Option<u64>,
    pub last_change: Option<crate::protocol::progress::QuorumChangeLine>,
}

/// A status report lists every worker: about 300 bytes each; more than this is not dtd's.
pub const STATUS_LIMIT: u64 = 64 << 20;

#[cfg(test)]
mod tests;
