//! The events journal's lines.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{Cause, Millis};

/// A journal line is one event, well under this; a longer line is not the daemon's and is skipped
/// by every reader. The journal's smallest `max_size` is this too.
pub const EVENT_LINE_LIMIT: usize = 64 * 1024;

/// A line of the events journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub time: Millis,
    pub kind: EventKind,
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
    /// When EC2 launched the instance, on the events that begin its story (`preparing`,
    /// `joined`): `dtctl explain` measures from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<Millis>,
    /// Why a worker leaves, on `removal_queued`: who asked, for `dtctl explain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// What a change of torchft's quorum cost, on `quorum_changed` (the metrics count it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumCost>,
    pub message: String,
}

/// One change of the in-place strategy's quorum, as the job measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumCost {
    pub quorum: u64,
    /// The first step the new quorum committed.
    pub step: u64,
    pub nodes: u64,
    pub lost_steps: u64,
    /// From the last step committed before the change to the first after it.
    pub paused_ms: u64,
}

impl Event {
    /// An event about the whole cluster; set `instance`, `ip`, `generation` as they apply.
    pub fn new(time: Millis, kind: EventKind, message: String) -> Event {
        Event {
            time,
            kind,
            instance: None,
            ip: None,
            generation: None,
            az: None,
            fs_id: None,
            launched_at: None,
            cause: None,
            quorum: None,
            message,
        }
    }

    /// The event's line in the journal (`events.jsonl`), without its newline.
    pub fn line(&self) -> String {
        // Strings, numbers and IPs: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// What a webhook deduplicates by (`Idempotency-Key`): the SHA-256 of [`Event::line`], so
    /// the same event has the same id in every attempt, across restarts, and in the journal.
    pub fn id(&self) -> String {
        crate::digest::Sha256::of(self.line().as_bytes()).to_string()
    }
}

/// What a journal line is about. Written as the snake_case names people and `dtctl events`
/// read; a kind this release does not know (a newer `dtd` wrote it) is kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A new worker was first seen, waiting for its prepare-data marker.
    Preparing,
    /// A new worker was first seen ready (its marker there) but held from joining: a batch,
    /// the job's next checkpoint, `join.sizes`, room under `max`.
    Ready,
    /// A worker's prepare-data failed (its failure marker), journaled once per instance.
    PrepareFailed,
    /// Replacing failed group workers stopped at `max_prepare_failures`, until `dtctl resume`.
    ReplacingStopped,
    /// A prepared worker joined the job.
    Joined,
    /// The job acknowledged a generation that lists a worker that joined: it trains.
    JoinAcknowledged,
    /// The host files changed: a new generation.
    Generation,
    /// The job was told about a generation.
    Notified,
    /// The job refused the notification (its pidfile names another program).
    NotifyRefused,
    RemovalQueued,
    RemovalHeld,
    RemovalRefused,
    RemovalCancelled,
    /// The job acknowledged a removal; the worker is let go.
    Acknowledged,
    AckTimeout,
    /// AWS accepted the call that ends a removed worker.
    Terminated,
    /// A member or a leaving worker stopped running on its own.
    Gone,
    Interrupted,
    Notice,
    NoticeIgnored,
    RebalanceRecommendation,
    PrepareNeverReported,
    /// `dtctl resume` re-armed replacing failed workers.
    Resumed,
    NoMountTarget,
    SourceFailed,
    SourceRecovered,
    /// A worker's health check failed (its `health_<ip>` report), journaled once per instance.
    Unhealthy,
    /// A worker journaled unhealthy reports healthy again.
    Healthy,
    /// More than `health.max_unhealthy` of the workers are unhealthy: removing and replacing
    /// unhealthy workers stopped, for a person.
    HealthStopped,
    /// Few enough workers are unhealthy again: removing and replacing them resumed.
    HealthResumed,
    /// More than `job.launcher.silent_share` of the members are silent at once: none is taken
    /// out for its silence (dtd's or the network's trouble, not theirs).
    SilenceWidespread,
    /// Few enough members are silent again: silent members are taken out again.
    SilenceSubsided,
    /// A launch-template worker was launched to replace an unhealthy one.
    ReplacementLaunched,
    /// EC2 had no capacity for a `workers.capacity` choice: it is skipped for its cool-down.
    CapacityUnavailable,
    /// The job's step (its progress file) has not advanced for `job.stall.after`.
    Stalled,
    /// The step advanced again after a stall (or the job stopped reporting, or has no workers).
    StallCleared,
    /// A member's compute time per step stayed above `job.stragglers.ratio` times the others'
    /// median for `job.stragglers.steps` steps.
    Straggler,
    /// A straggler journaled and kept (`alert`) is no longer slower than the rule allows.
    StragglerCleared,
    /// A worker's agent notice that EC2's view does not confirm (another instance at that IP,
    /// a Spot warning for an on-demand instance, too many from one IP): not heeded.
    NoticeRefused,
    /// A worker's agent said its instance was being interrupted, yet EC2 still runs it well
    /// past the notice's time: it may join again.
    NoticeUnconfirmed,
    /// The `ack` file names a generation dtd never wrote: ignored.
    AckRefused,
    /// A marker or report names an instance other than the one EC2 lists at its IP: ignored.
    MarkerRefused,
    /// A job file (`ack`, `host_worker_log`, `progress`, `job.pid`) owned by someone other than
    /// the job's user: ignored.
    FileRefused,
    /// A worker's launcher (`job.launcher`) started for a generation.
    LauncherStarted,
    /// Its agent stopped it (a new generation, or the worker left).
    LauncherStopped,
    /// It exited non-zero (or could not start) while listed: started again after a backoff.
    LauncherFailed,
    /// It exited 0 on its own.
    LauncherFinished,
    /// Every member's launcher finished in the current generation, and none is started again.
    JobFinished,
    /// Under the in-place strategy, torchft's quorum changed (the job's word, from its
    /// progress file): who joined or left, at which step, what it cost.
    QuorumChanged,
    /// Under the in-place strategy, dtd's front for torchft's Lighthouse refused a connection or
    /// a call (the dashboard's kill route, a replica that is no node of the plan or speaks for
    /// another): journaled once per source and kind.
    LighthouseRefused,
    #[serde(untagged)]
    Other(String),
}

impl EventKind {
    /// Something a worker wrote that dtd did not believe: logged as a warning, not as news.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            EventKind::NoticeRefused
                | EventKind::NoticeUnconfirmed
                | EventKind::AckRefused
                | EventKind::MarkerRefused
                | EventKind::FileRefused
                | EventKind::LighthouseRefused
        )
    }

    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Other(kind) => kind,
            known => known.name(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            EventKind::Preparing => "preparing",
            EventKind::Ready => "ready",
            EventKind::PrepareFailed => "prepare_failed",
            EventKind::ReplacingStopped => "replacing_stopped",
            EventKind::Joined => "joined",
            EventKind::JoinAcknowledged => "join_acknowledged",
            EventKind::Generation => "generation",
            EventKind::Notified => "notified",
            EventKind::NotifyRefused => "notify_refused",
            EventKind::RemovalQueued => "removal_queued",
            EventKind::RemovalHeld => "removal_held",
            EventKind::RemovalRefused => "removal_refused",
            EventKind::RemovalCancelled => "removal_cancelled",
            EventKind::Acknowledged => "acknowledged",
            EventKind::AckTimeout => "ack_timeout",
            EventKind::Terminated => "terminated",
            EventKind::Gone => "gone",
            EventKind::Interrupted => "interrupted",
            EventKind::Notice => "notice",
            EventKind::NoticeIgnored => "notice_ignored",
            EventKind::RebalanceRecommendation => "rebalance_recommendation",
            EventKind::PrepareNeverReported => "prepare_never_reported",
            EventKind::Resumed => "resumed",
            EventKind::NoMountTarget => "no_mount_target",
            EventKind::SourceFailed => "source_failed",
            EventKind::SourceRecovered => "source_recovered",
            EventKind::Unhealthy => "unhealthy",
            EventKind::Healthy => "healthy",
            EventKind::HealthStopped => "health_stopped",
            EventKind::HealthResumed => "health_resumed",
            EventKind::SilenceWidespread => "silence_widespread",
            EventKind::SilenceSubsided => "silence_subsided",
            EventKind::ReplacementLaunched => "replacement_launched",
            EventKind::CapacityUnavailable => "capacity_unavailable",
            EventKind::Stalled => "stalled",
            EventKind::StallCleared => "stall_cleared",
            EventKind::Straggler => "straggler",
            EventKind::StragglerCleared => "straggler_cleared",
            EventKind::NoticeRefused => "notice_refused",
            EventKind::NoticeUnconfirmed => "notice_unconfirmed",
            EventKind::AckRefused => "ack_refused",
            EventKind::MarkerRefused => "marker_refused",
            EventKind::FileRefused => "file_refused",
            EventKind::LauncherStarted => "launcher_started",
            EventKind::LauncherStopped => "launcher_stopped",
            EventKind::LauncherFailed => "launcher_failed",
            EventKind::LauncherFinished => "launcher_finished",
            EventKind::JobFinished => "job_finished",
            EventKind::QuorumChanged => "quorum_changed",
            EventKind::LighthouseRefused => "lighthouse_refused",
            EventKind::Other(_) => "",
        }
    }
}

impl std::fmt::Display for EventKind {
    /// Honours width and alignment (`{:<18}`), as the columns of `dtctl events` need.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_kind_reads_back_from_its_name() {
        let known = [
            EventKind::Preparing,
            EventKind::Ready,
            EventKind::PrepareFailed,
            EventKind::ReplacingStopped,
            EventKind::Joined,
            EventKind::JoinAcknowledged,
            EventKind::Generation,
            EventKind::Notified,
            EventKind::NotifyRefused,
            EventKind::RemovalQueued,
            EventKind::RemovalHeld,
            EventKind::RemovalRefused,
            EventKind::RemovalCancelled,
            EventKind::Acknowledged,
            EventKind::AckTimeout,
            EventKind::Terminated,
            EventKind::Gone,
            EventKind::Interrupted,
            EventKind::Notice,
            EventKind::NoticeIgnored,
            EventKind::RebalanceRecommendation,
            EventKind::PrepareNeverReported,
            EventKind::Resumed,
            EventKind::NoMountTarget,
            EventKind::SourceFailed,
            EventKind::SourceRecovered,
            EventKind::Unhealthy,
            EventKind::Healthy,
            EventKind::HealthStopped,
            EventKind::HealthResumed,
            EventKind::SilenceWidespread,
            EventKind::SilenceSubsided,
            EventKind::ReplacementLaunched,
            EventKind::CapacityUnavailable,
            EventKind::Stalled,
            EventKind::StallCleared,
            EventKind::Straggler,
            EventKind::StragglerCleared,
            EventKind::NoticeRefused,
            EventKind::NoticeUnconfirmed,
            EventKind::AckRefused,
            EventKind::MarkerRefused,
            EventKind::FileRefused,
            EventKind::LauncherStarted,
            EventKind::LauncherStopped,
            EventKind::LauncherFailed,
            EventKind::LauncherFinished,
            EventKind::JobFinished,
            EventKind::QuorumChanged,
            EventKind::LighthouseRefused,
        ];
        for kind in known {
            let json = serde_json::to_string(&kind).expect("serialized");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(
                serde_json::from_str::<EventKind>(&json).expect("read"),
                kind
            );
        }
    }

    #[test]
    fn an_unknown_kind_is_kept_as_written() {
        let kind: EventKind = serde_json::from_str("\"rebooted\"").expect("read");
        assert_eq!(kind, EventKind::Other("rebooted".into()));
        assert_eq!(
            serde_json::to_string(&kind).expect("written"),
            "\"rebooted\""
        );
    }
}
