//! What a pass observes: instances, markers, acknowledgements, the group, notices.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub use aws_sdk_autoscaling::types::LifecycleState;

use super::{Millis, Tags, STATUS_TAG};

/// One EC2 instance as DescribeInstances reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub ip: IpAddr,
    pub instance_type: String,
    pub az: String,
    /// `spot`, `capacity-block` or `on-demand`.
    pub market: String,
    pub launched_at: Millis,
    pub tags: Tags,
    /// The Capacity Reservation (Capacity Block) it runs in, if any.
    #[serde(default)]
    pub capacity_reservation: Option<String>,
    /// Its subnet: an IP a report names is looked up in EC2 only within the workers' subnets.
    #[serde(default)]
    pub subnet: Option<String>,
}

impl Instance {
    pub fn status_tag(&self) -> Option<&str> {
        self.tags.get(STATUS_TAG)
    }
}

/// EC2's form of an instance id: `i-` and 8 (before 2016) or 17 lowercase hex digits ("Resource
/// IDs", Amazon EC2 User Guide). Only ids of this form are handed on to be read from EC2, or
/// looked up in the journal.
pub fn is_ec2_instance_id(v: &str) -> bool {
    v.strip_prefix("i-").is_some_and(|hex| {
        matches!(hex.len(), 8 | 17)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Readiness markers on the shared file system.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markers {
    pub success: BTreeSet<IpAddr>,
    /// IP to a one-line summary of why prepare-data failed (exit code, last output line).
    pub failed: BTreeMap<IpAddr, String>,
    /// Interruption notices written by workers' agents.
    pub notices: Vec<Notice>,
    /// When each success marker was written (its modification time, by the file server's
    /// clock), for the time from ready to the host files; read once per marker.
    pub ready_at: BTreeMap<IpAddr, Millis>,
    /// What each worker's health check last said (`health_<ip>`), for the instance it names.
    pub health: BTreeMap<IpAddr, HealthSeen>,
    /// The instance each success or failure marker names in its body (`instance_id`), when it
    /// names one: believed only for the instance EC2 lists at that IP (a 2018 marker names none).
    pub success_named: BTreeMap<IpAddr, String>,
    pub failed_named: BTreeMap<IpAddr, String>,
    /// What each worker's launcher last did (`launcher_<ip>`, with `job.launcher`).
    pub launchers: BTreeMap<IpAddr, LauncherSeen>,
    /// Reports about listed instances that are not believed, and why (not signed by the
    /// worker's agent, an older one put back, one naming another instance).
    pub refused: Vec<Refused>,
    /// IPs with signed reports that wait for the key of the instance there (EC2 has not listed
    /// the instance its agent proved yet).
    pub pending: BTreeSet<IpAddr>,
    /// Agent keys that an instance identity document proved for a listed instance, where they
    /// differ from the key dtd keeps (or it keeps none yet): decide pins the first.
    pub key_proofs: Vec<(String, crate::protocol::signed::AgentKey)>,
    /// Reports believed that are newer than any of their instance and kind believed before:
    /// `(instance, kind, signed_at)`, kept in the state so that nothing older is believed again.
    pub newest: Vec<(String, crate::protocol::markers::MarkerKind, u64)>,
}

/// A report about a listed instance that dtd does not believe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub ip: IpAddr,
    /// The instance EC2 lists at `ip`.
    pub instance: String,
    /// The file's name.
    pub file: String,
    /// What kind of refusal, for journaling it once: the same lie is not journaled again.
    pub class: String,
    /// The line for `dtctl status` and the journal.
    pub why: String,
}

/// A worker's launcher (torchrun), as its agent last reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherSeen {
    /// The instance that wrote it: a report left by an earlier owner of the IP is not this one's.
    pub instance_id: String,
    pub state: crate::protocol::launcher::LauncherState,
    pub generation: Option<u64>,
    pub restarts: u32,
    /// One line for people.
    pub reason: String,
    /// A process of its launcher a signal stopped: the node holds a stalled job back.
    pub stopped: Option<u32>,
    /// The node's compute time per step as its job measures it: stragglers are found by it.
    pub compute: Option<crate::protocol::launcher::StepCompute>,
    /// When `dtd` last saw the agent replace or touch the report (by its own clock, not the
    /// file's): a member not heard from for `job.launcher.silent_after` stopped answering.
    pub heard_at: Millis,
}

impl LauncherSeen {
    /// Whether it is instance `id`'s own report, of a generation dtd wrote (up to `generation`)
    /// or of none: any worker can write any report.
    pub fn believable(&self, id: &str, generation: u64) -> bool {
        self.instance_id == id && self.generation.is_none_or(|g| g <= generation)
    }
}

impl HealthSeen {
    /// Why the worker is unhealthy, for the journal and `dtctl status`.
    pub fn describe(&self) -> String {
        format!("health check failed ({})", self.reason)
    }
}

/// A worker's last health check, as its agent wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSeen {
    /// The instance that wrote it: a report left by an earlier owner of the IP is not this one's.
    pub instance_id: String,
    pub ok: bool,
    /// The check said the GPUs are gone: the worker leaves the job at once.
    pub gpus_lost: bool,
    /// One line for people.
    pub reason: String,
    /// When the check finished, if the report says so readably.
    pub when: Option<Millis>,
}

/// The job's last finished step, from its progress file (`crate::protocol::progress`).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub step: u64,
    /// When the job wrote it, if it said so readably (shown only: stalls are timed by dtd).
    pub time: Option<Millis>,
    /// The step of the job's last checkpoint, if it says (`join.at_checkpoint`).
    pub checkpoint_step: Option<u64>,
    /// torchft's quorum and its last changes, under the in-place strategy.
    pub quorum: Option<crate::protocol::progress::QuorumLine>,
    /// This run of the job's processes, if it says (`run.id`, `run.from`).
    pub run: Option<crate::protocol::progress::RunLine>,
    /// The generation of the processes that wrote it, if it says.
    pub generation: Option<u64>,
}

/// What the job has said it applied, in either acknowledgement form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acks {
    /// The generation in the `ack` file, if any.
    pub generation: Option<u64>,
    /// Complete lines read so far from `host_worker_log`; a position in that log.
    pub log_lines: u64,
    /// For each IP, the line number (1-based) of its latest `ADDED` / `REMOVED` line.
    pub log_added: BTreeMap<IpAddr, u64>,
    pub log_removed: BTreeMap<IpAddr, u64>,
    /// The job's files not read because someone other than the job's user owns them (a worker
    /// created them first), one line each: journaled once and shown.
    pub refused: Vec<String>,
}

/// Why a source could not be read completely, in the words observe made once from its own
/// error: decide only asks whether a source was read; the status and the journal show the words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unread(pub String);

impl Unread {
    pub fn from_error(e: impl std::fmt::Display) -> Unread {
        Unread(e.to_string())
    }
}

impl From<&str> for Unread {
    fn from(words: &str) -> Unread {
        Unread(words.to_string())
    }
}

/// A source as a pass read it: whole, or why not.
pub type Read<T> = Result<T, Unread>;

/// One pass's view of the world. A source that could not be read completely is `Err(why)`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub instances: Read<Vec<Instance>>,
    pub markers: Read<Markers>,
    pub acks: Read<Acks>,
    /// Interruption and rebalance notices received since the last pass (queue and agents).
    pub notices: Vec<Notice>,
    /// The worker Auto Scaling group, when the config names one.
    pub group: Option<Read<Group>>,
    /// When `dtctl resume` last asked to re-arm replacing failed workers.
    pub resume_requested: Option<Millis>,
    /// The zones where the shared file system has a mount target; `None` when `shared_fs_id` is
    /// not configured or the last read failed (unknown: nothing is concluded from it).
    pub mount_targets: Option<MountTargets>,
    /// The zone of each subnet a `workers.capacity` choice names, as far as EC2 said.
    pub subnet_zones: BTreeMap<String, String>,
    /// The capacity choices EC2 refused to `dtctl add` (its file in the state directory).
    pub capacity_refusals: Vec<crate::protocol::capacity_refusals::CapacityRefusal>,
    /// The job's progress file, read only with `job.stall` configured: `None` when it is not,
    /// or the job has written none; `Err(why)` when it cannot be read (nothing is concluded).
    pub progress: Option<Read<Progress>>,
    /// The Capacity Reservations and Capacity Blocks `workers.capacity` names by id; `None` when
    /// it names none, `Err(why)` when they could not be read (nothing is concluded).
    pub reservations: Option<Read<BTreeMap<String, super::Reservation>>>,
}

/// The Availability Zones (names, as this account sees them) where an EFS file system has a
/// mount target a worker can mount through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountTargets {
    pub fs_id: String,
    pub zones: BTreeSet<String>,
}

/// The worker Auto Scaling group as DescribeAutoScalingGroups and DescribeLifecycleHooks see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub min: usize,
    pub desired: usize,
    pub max: usize,
    /// Instance id to its lifecycle state (`InService`, `Pending:Wait`, `Standby`, ...) and
    /// whether it is protected from scale-in.
    pub instances: BTreeMap<String, GroupMember>,
    pub launching_hook: Option<Hook>,
    pub terminating_hook: Option<Hook>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    #[serde(with = "lifecycle_state")]
    pub lifecycle_state: LifecycleState,
    pub protected: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    pub name: String,
    pub heartbeat_timeout_ms: Millis,
}

/// Something AWS said about an instance's future, from the event queue or a worker's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The EventBridge event id, or the agent marker's notice id: a notice is heeded once.
    pub id: String,
    pub kind: NoticeKind,
    pub target: NoticeTarget,
    /// When AWS acts (Spot action time, when a Capacity Block's instances start terminating).
    pub deadline: Option<Millis>,
    /// `queue` or `agent`, for the journal.
    pub source: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoticeKind {
    /// The instance will be taken away (Spot warning, interruptible reservation, or its group
    /// terminating it without a hook): leave the job now, nothing to wait for.
    Interruption,
    /// Elevated risk of interruption: drain gracefully, or only report (config).
    Rebalance,
    /// The Capacity Block ends soon: drain its workers gracefully before it does.
    CapacityBlockExpiring,
    /// EC2 scheduled a reboot, stop, retirement or maintenance for it (AWS Health, or the instance
    /// metadata's `events/maintenance/scheduled`): drain gracefully before the change starts.
    ScheduledChange,
    /// Its Auto Scaling group is terminating it (seen by its agent): with a terminating hook the
    /// group waits and dtd drains it through the hook; without one it is an interruption.
    GroupTerminating,
}

impl NoticeKind {
    /// Why the job is told its worker left.
    pub fn reason(self) -> crate::protocol::notices::Reason {
        use crate::protocol::notices::Reason;
        match self {
            NoticeKind::Interruption => Reason::Interruption,
            NoticeKind::Rebalance => Reason::Rebalance,
            NoticeKind::CapacityBlockExpiring => Reason::CapacityBlockExpiring,
            NoticeKind::ScheduledChange => Reason::ScheduledChange,
            NoticeKind::GroupTerminating => Reason::GroupTerminating,
        }
    }

    /// The name metrics, the job's `notices` file and `DT_REASON` use.
    pub fn as_str(self) -> &'static str {
        self.reason().as_str()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoticeTarget {
    Instance(String),
    Ip(IpAddr),
    CapacityReservation(String),
    /// What a worker's agent wrote in `interruption_<ip>`: the instance it names and the IP of
    /// the marker. Any worker can write any marker, so this is believed only for the instance
    /// EC2 lists at that IP (see `decide::trust`).
    Agent {
        instance: String,
        ip: IpAddr,
    },
}

/// A lifecycle state as AWS names it (`InService`, `Pending:Wait`, ...).
mod lifecycle_state {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::LifecycleState;

    pub fn serialize<S: Serializer>(state: &LifecycleState, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(state.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LifecycleState, D::Error> {
        String::deserialize(d).map(|s| LifecycleState::from(s.as_str()))
    }
}
