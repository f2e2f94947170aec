//! Plain data shared by observe, decide and act: what was seen, what is remembered, what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::hostfile::Host;
pub use crate::tags::Tags;

/// Milliseconds since the Unix epoch. Decide receives "now" as one of these; it never reads a clock.
pub type Millis = u64;

/// The status tag key, kept from the 2018 protocol.
pub const STATUS_TAG: &str = "elastic_worker_status";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkerStatus {
    Preparing,
    AddQueued,
    Added,
    RemovalQueued,
    Removed,
    PrepareFailed,
    Interrupted,
}

impl WorkerStatus {
    pub const ALL: [WorkerStatus; 7] = [
        WorkerStatus::Preparing,
        WorkerStatus::AddQueued,
        WorkerStatus::Added,
        WorkerStatus::RemovalQueued,
        WorkerStatus::Removed,
        WorkerStatus::PrepareFailed,
        WorkerStatus::Interrupted,
    ];

    pub fn as_tag(self) -> &'static str {
        match self {
            WorkerStatus::Preparing => "PREPARING",
            WorkerStatus::AddQueued => "ADD_QUEUED",
            WorkerStatus::Added => "ADDED",
            WorkerStatus::RemovalQueued => "REMOVAL_QUEUED",
            WorkerStatus::Removed => "REMOVED",
            WorkerStatus::PrepareFailed => "PREPARE_FAILED",
            WorkerStatus::Interrupted => "INTERRUPTED",
        }
    }

    pub fn from_tag(value: &str) -> Option<WorkerStatus> {
        WorkerStatus::ALL.into_iter().find(|s| s.as_tag() == value)
    }
}

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
}

impl Instance {
    pub fn status_tag(&self) -> Option<&str> {
        self.tags.get(STATUS_TAG)
    }
}

/// Readiness markers on the shared file system.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markers {
    pub success: BTreeSet<IpAddr>,
    /// IP to a one-line summary of why prepare-data failed (exit code, last output line).
    pub failed: BTreeMap<IpAddr, String>,
    /// Interruption notices written by workers' agents.
    pub notices: Vec<Notice>,
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
}

/// One pass's view of the world. A source that could not be read completely is `Err(why)`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub instances: Result<Vec<Instance>, String>,
    pub markers: Result<Markers, String>,
    pub acks: Result<Acks, String>,
    /// Interruption and rebalance notices received since the last pass (queue and agents).
    pub notices: Vec<Notice>,
    /// The worker Auto Scaling group, when the config names one.
    pub group: Option<Result<Group, String>>,
    /// When `dtctl resume` last asked to re-arm replacing failed workers.
    pub resume_requested: Option<Millis>,
    /// The zones where the shared file system has a mount target; `None` when `shared_fs_id` is
    /// not configured or the last read failed (unknown: nothing is concluded from it).
    pub mount_targets: Option<MountTargets>,
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
    pub lifecycle_state: String,
    pub protected: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    pub name: String,
    pub heartbeat_timeout_ms: Millis,
}

/// A lifecycle action to complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAction {
    pub instance: String,
    pub hook: String,
    /// `CONTINUE` or `ABANDON`.
    pub result: &'static str,
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoticeTarget {
    Instance(String),
    Ip(IpAddr),
    CapacityReservation(String),
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// Waiting for the job's acknowledgement or the ack timeout.
    Waiting,
    /// Decided; the TerminateInstances call has not been confirmed yet.
    Requested,
    /// TerminateInstances succeeded: never sent again.
    Sent,
}

/// Why a worker leaves; only a deleted elastic tag can be taken back by restoring the tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    #[default]
    ElasticTag,
    Rebalance,
    CapacityBlock,
    /// EC2 scheduled a change (reboot, stop, retirement, maintenance) for it.
    ScheduledChange,
    /// AWS takes the instance away: it left at once and is never terminated by us.
    Interrupted,
    /// Its group is scaling in, or the group's desired capacity is below its protected workers.
    ScaleIn,
    /// Left its group's service (Standby, Detaching, Warmed): out of the job, kept running.
    OutOfService,
    /// Its prepare-data failed; a group worker is replaced.
    PrepareFailed,
}

/// How a leaving worker's instance ends once the job has let it go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// TerminateInstances (launch-template workers).
    #[default]
    Terminate,
    /// TerminateInstanceInAutoScalingGroup; `decrement` lowers the desired capacity with it
    /// (a voluntary removal) or not (the group replaces it).
    GroupTerminate { decrement: bool },
    /// The group is terminating it and waits on our terminating hook: complete it (CONTINUE).
    Hook { name: String },
    /// Nothing: it stays running outside the job (Standby), or AWS takes it (interruption).
    Keep,
}

/// A worker leaving: out of the host files, not yet terminated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    pub id: String,
    pub ip: IpAddr,
    /// The first generation that no longer lists it.
    pub generation: u64,
    pub queued_at: Millis,
    pub deadline: Millis,
    pub log_mark: u64,
    pub reason: String,
    pub termination: Termination,
    #[serde(default)]
    pub cause: Cause,
    #[serde(default)]
    pub end: End,
    /// When the last lifecycle heartbeat was sent for it.
    #[serde(default)]
    pub heartbeat_at: Option<Millis>,
}

/// A change of membership the job has not been told about yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    pub generation: u64,
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
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
    /// The `dtctl resume` request already honoured.
    #[serde(default)]
    pub resumed_at: Option<Millis>,
    /// Instances already journaled as waiting in a zone without a mount target, so a pass (or
    /// a restarted dtd) does not journal them again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub no_mount_target: BTreeSet<String>,
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

/// A line of the events journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub time: Millis,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The instance's Availability Zone, and the EFS file system, when the event is about them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_id: Option<String>,
    pub message: String,
}

impl Event {
    /// An event about the whole cluster; set `instance`, `ip`, `generation` as they apply.
    pub fn new(time: Millis, kind: &str, message: String) -> Event {
        Event {
            time,
            kind: kind.to_string(),
            instance: None,
            ip: None,
            generation: None,
            az: None,
            fs_id: None,
            message,
        }
    }
}

/// One row of `dtctl status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerView {
    pub id: String,
    pub ip: IpAddr,
    pub instance_type: String,
    pub az: String,
    pub market: String,
    /// The status tag value, or `BASE` for base hosts.
    pub status: String,
    pub since: Option<Millis>,
    pub waiting_for: Option<String>,
}

/// Where a status row's instance details come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowSource {
    /// An index into the snapshot's instances.
    Instance(usize),
    /// An index into the plan's remembered members (the EC2 view failed).
    Member(usize),
}

/// What a status row shows in its STATUS column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Status(WorkerStatus),
    /// A base host or the master: never managed, never removed.
    Base,
    /// Carries the cluster's tags but not the elastic tag, and never had a status.
    Unmanaged,
}

impl Shown {
    pub fn label(self) -> &'static str {
        match self {
            Shown::Status(s) => s.as_tag(),
            Shown::Base => "BASE",
            Shown::Unmanaged => "-",
        }
    }
}

/// What decide says about one worker: its status and what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub source: RowSource,
    pub shown: Shown,
    pub waiting_for: Option<String>,
}

impl Row {
    pub fn label(&self) -> &'static str {
        self.shown.label()
    }
}

/// Everything decide wants done, plus the state to remember once it is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub state: State,
    /// Host-file lines: base hosts first in config order, then workers in join order.
    pub hosts: Vec<Host>,
    /// Status tag value to the instances that need it.
    pub tags: BTreeMap<WorkerStatus, Vec<String>>,
    pub terminate: Vec<String>,
    /// TerminateInstanceInAutoScalingGroup: (instance, decrement the desired capacity).
    pub group_terminate: Vec<(String, bool)>,
    pub complete_hooks: Vec<HookAction>,
    /// RecordLifecycleActionHeartbeat: (instance, hook).
    pub heartbeats: Vec<(String, String)>,
    /// Group workers in the job to protect from scale-in.
    pub protect: Vec<String>,
    pub notify: Option<Notification>,
    pub events: Vec<Event>,
    /// One row per worker for the status report, cheap to produce; `decide::worker_views`
    /// turns them into [`WorkerView`]s.
    pub rows: Vec<Row>,
    /// Why this pass held its ground (a source failed), empty when it did not.
    pub holds: Vec<String>,
    /// Notices this pass could not heed (a drain on a partial view): keep them for the next.
    pub deferred_notices: Vec<String>,
}
