//! What the daemon remembers across restarts: only what AWS and EFS cannot tell it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{Millis, Removal, WorkerStatus};

/// A worker in the host files (base hosts are not stored: they come from the config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: String,
    pub ip: IpAddr,
    pub instance_type: String,
    pub joined_generation: u64,
    pub joined_at: Millis,
    /// `host_worker_log` position when it joined: an `ADDED` line after it acknowledges the join.
    pub log_mark: u64,
    pub acked: bool,
}

/// A change of membership the job has not been told about yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    pub generation: u64,
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
    /// Why removed workers left when AWS said so, and by when they go: the job's time to
    /// checkpoint (`DT_REASON`/`DT_DEADLINE` for a hook, the `notices` file with a signal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<JobNotice>,
}

/// A notice that took a worker out of the job, as the job is told of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNotice {
    pub ip: IpAddr,
    pub kind: crate::protocol::notices::Reason,
    /// When AWS acts (the Spot action time, the Capacity Block's end, the change's start), if
    /// the notice says.
    pub deadline: Option<Millis>,
}

impl Notification {
    /// The notices as the job reads them (the `notices` file, `DT_NOTICES`).
    pub fn job_notices(&self) -> crate::protocol::notices::Notices {
        use crate::protocol::notices::{Notice, Notices};
        let one = |j: &JobNotice| Notice {
            ip: j.ip,
            kind: j.kind,
            deadline: j.deadline.map(|d| super::rfc3339(d).to_string()),
        };
        Notices {
            generation: self.generation,
            notices: self.notices.iter().map(one).collect(),
        }
    }

    /// The notice whose deadline comes first (one without a deadline counts as last).
    pub fn most_urgent(&self) -> Option<&JobNotice> {
        self.notices
            .iter()
            .min_by_key(|n| n.deadline.unwrap_or(Millis::MAX))
    }
}

/// A notification's added or removed IPs as the job (`DT_ADDED`, `DT_REMOVED`) and the journal
/// read them: `10.0.0.5,10.0.0.6`.
pub fn join_ips(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(|ip| ip.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// What the daemon remembers across restarts: only what AWS and EFS cannot tell it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub generation: u64,
    pub members: Vec<Member>,
    pub removals: Vec<Removal>,
    #[serde(default)]
    pub pending_notification: Option<Notification>,
    /// When each worker's status last changed, for `dtctl status`. Keyed by IP, which compares
    /// far cheaper than an instance id in a pass over 10,000 workers; the id guards IP reuse.
    #[serde(default)]
    pub since: BTreeMap<IpAddr, Since>,
    /// Instances whose requested removal is held (base host, `min`), so the event is journaled once.
    #[serde(default)]
    pub held: BTreeMap<String, String>,
    /// Notice ids already heeded, with when: the queue delivers at least once, agents' markers
    /// stay on disk, and a restart must not act on either twice.
    #[serde(default)]
    pub noticed: BTreeMap<String, Millis>,
    /// Workers the job lost to interruptions and kept training without.
    #[serde(default)]
    pub interruptions: u64,
    /// Group workers whose prepare-data failed in a row; replacing stops at the limit.
    #[serde(default)]
    pub prepare_failures: u32,
    /// The last of those failures, for `dtctl status`.
    #[serde(default)]
    pub last_prepare_failure: Option<String>,
    /// When the launching hook of each instance held in `Pending:Wait` last got a heartbeat.
    #[serde(default)]
    pub launch_heartbeats: BTreeMap<String, Millis>,
    /// Each instance held in `Pending:Wait` by the launching hook: since when, and how its wait
    /// ended. Remembered so that a restarted dtd neither resets the prepare timeout nor counts
    /// or journals an abandoned worker twice.
    #[serde(default)]
    pub launch_waits: BTreeMap<String, LaunchWait>,
    /// Ready workers waiting for `join.batch` to end, since when each was first ready: kept so
    /// that a restarted dtd neither restarts the window nor lets them join one by one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ready_since: BTreeMap<String, Millis>,
    /// With `join.at_checkpoint`, since when ready workers wait for the job's next checkpoint,
    /// the checkpoint step then, and whether it has passed (they join at the next chance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_wait: Option<CheckpointWait>,
    /// The `dtctl resume` request already honoured.
    #[serde(default)]
    pub resumed_at: Option<Millis>,
    /// The newest capacity refusal of `dtctl add` already heeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_refusals_seen: Option<Millis>,
    /// Instances already journaled as waiting in a zone without a mount target, so a pass (or
    /// a restarted dtd) does not journal them again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub no_mount_target: BTreeSet<String>,
    /// Instances already journaled as `prepare_failed`, so a pass (or a restarted dtd) reading
    /// their failure marker again does not journal them again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub prepare_failed: BTreeSet<String>,
    /// Instances journaled `unhealthy`, with the reason: journaled once, and `healthy` when
    /// one that was kept (removing stopped) reports healthy again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unhealthy: BTreeMap<String, String>,
    /// Since when removing and replacing unhealthy workers is stopped (`health.max_unhealthy`).
    #[serde(default)]
    pub health_stopped: Option<Millis>,
    /// Launches owed for unhealthy launch-template workers, resent until RunInstances succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<Replacement>,
    /// Capacity choices EC2 refused, by [`Choice::name`]: skipped until their cool-down ends.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub no_capacity: BTreeMap<String, super::Unavailable>,
    /// What a worker wrote that dtd refused to believe, already journaled (`notice_refused`,
    /// `ack_refused`, ...), each under a key naming the file and the lie; forgotten once the
    /// file no longer says it, so it is journaled again if it comes back.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub refused: BTreeSet<super::RefusalKey>,
    /// When each worker IP's agent last took a worker out with an interruption notice: agent
    /// notices are heeded at most once an hour per IP (see `decide::trust`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_notices: BTreeMap<IpAddr, Millis>,
    /// The job's step as last read from its progress file, with `job.stall` configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<JobProgress>,
    /// Each worker's launcher state and generation as last journaled (`job.launcher`), by
    /// instance id: a change is journaled once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub launchers: BTreeMap<String, (crate::protocol::launcher::LauncherState, Option<u64>)>,
    /// The generation whose every launcher finished (exit code 0): `job_finished` journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<u64>,
    /// The newest quorum change journaled (in-place strategy), as (its step, when the job saw
    /// it): the progress file repeats the last changes, each is journaled once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_seen: Option<(u64, String)>,
    /// The newest generation every member's launcher reported running (`job.ack.by: launcher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_acked: Option<u64>,
    /// Each worker's agent key, by instance id, as its `dt:agent-key` tag first said: a report
    /// is believed only when signed with it, and a tag changed later does not change it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_keys: BTreeMap<String, crate::protocol::signed::AgentKey>,
}

/// Ready workers waiting for the job's next checkpoint (`join.at_checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointWait {
    pub since: Millis,
    /// `checkpoint_step` when the wait began (`None`: the job had said none).
    pub checkpoint: Option<u64>,
    /// The checkpoint came, or `join.max_wait` ran out: they join once they can.
    pub passed: bool,
}

/// A launch from the template owed for an unhealthy worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replacement {
    /// The unhealthy instance it replaces.
    pub replaces: String,
    /// RunInstances' ClientToken: the same launch however often it is sent.
    pub token: String,
    pub queued_at: Millis,
    /// Not sent again before this: a launch AWS refused (no capacity, a limit) is retried once a
    /// minute, not at every pass.
    #[serde(default)]
    pub retry_at: Millis,
    /// Why AWS refused it last, for `dtctl status` until it is launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What stall detection remembers: a restarted dtd goes on timing the same step, and does not
/// journal a stall twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    pub step: u64,
    /// When dtd first read this step (its own clock): the stall is timed from here.
    pub advanced_at: Millis,
    /// `stalled` was journaled for this step, and `stall_cleared` not yet.
    #[serde(default)]
    pub stalled: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchWait {
    /// The first pass that saw it in `Pending:Wait`.
    pub since: Millis,
    /// No marker within the prepare timeout: `prepare_never_reported` is journaled.
    #[serde(default)]
    pub timed_out: bool,
    /// ABANDON decided: counted as one prepare-data failure, and resent until the group acts.
    #[serde(default)]
    pub abandoned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Since {
    pub id: String,
    pub status: WorkerStatus,
    pub at: Millis,
}
