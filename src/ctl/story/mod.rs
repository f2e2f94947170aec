//! A worker's story, told from the events journal: the pure part of `dtctl explain` (no I/O, no
//! clock). An IP may have been several instances' over time; each instance gets its own story.

use std::net::IpAddr;

use serde::Serialize;

use crate::model::{
    is_ec2_instance_id, span_measured, Cause, Change, Event, EventKind, Millis, WorkerView,
};

/// What `dtctl explain` is asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Ip(IpAddr),
    Instance(String),
}

/// What `dtctl explain` was given instead of an IP or an instance id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither an IP address nor an EC2 instance id (i- and 8 or 17 hex digits)")]
pub struct NotATarget(String);

impl Target {
    /// A private IP, or an EC2 instance id (`i-` and 8 or 17 lowercase hex digits).
    pub fn parse(s: &str) -> Result<Target, NotATarget> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Target::Ip(ip));
        }
        if is_ec2_instance_id(s) {
            return Ok(Target::Instance(s.to_string()));
        }
        Err(NotATarget(s.to_string()))
    }

    /// Whether a journal line is about this IP or instance (and names its instance).
    pub fn matches(&self, e: &Event) -> bool {
        match self {
            Target::Ip(ip) => e.ip == Some(*ip) && e.instance.is_some(),
            Target::Instance(id) => e.instance.as_deref() == Some(id),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Ip(ip) => write!(f, "{ip}"),
            Target::Instance(id) => f.write_str(id),
        }
    }
}

/// One instance's life as the journal tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Story {
    pub instance: String,
    pub ip: Option<IpAddr>,
    /// Its EC2 launch time, when a `preparing` or `joined` line carries it.
    pub launched_at: Option<Millis>,
    pub steps: Vec<Step>,
    pub totals: TimeSpent,
    /// Where it is now, from dtd's last status report; `None` when the report does not list it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now: Option<WorkerView>,
    /// What the changes it joined and left in cost the job, from the goodput ledger (those it
    /// still keeps).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
}

/// One journal line of the story, with what it means for the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub time: Millis,
    pub kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    pub message: String,
    /// What the journal line implies and does not say: how long it prepared, who asked it to go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Time spent in each part of its life. Each says what it is measured between; a part still
/// under way at the end of the journal is measured up to now and marked `open`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TimeSpent {
    pub preparing: Option<Span>,
    pub launch_to_training: Option<Span>,
    pub ready_idle: Option<Span>,
    pub in_job: Option<Span>,
    pub leaving: Option<Span>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Span {
    pub ms: u64,
    pub between: &'static str,
    /// Still under way when the journal ends: measured up to now.
    pub open: bool,
}

pub const PREPARING: &str = "EC2 launch -> ready (joined) or prepare-data failed";
pub const LAUNCH_TO_TRAINING: &str = "EC2 launch -> the job's acknowledgement of its join";
pub const READY_IDLE: &str = "joined -> the job's acknowledgement, plus let go -> terminated and \
     removal cancelled -> joined again (a wait for room under max is not journaled)";
pub const IN_JOB: &str = "the job's acknowledgement of its join -> out of the host files";
pub const LEAVING: &str = "out of the host files -> the job's acknowledgement (or the ack timeout)";

/// The stories of every instance `target` names, oldest first. `now` ends what is still open.
pub fn stories(events: &[Event], target: &Target, now: Millis) -> Vec<Story> {
    let mut ids: Vec<(&str, Millis)> = Vec::new();
    for e in events.iter().filter(|e| target.matches(e)) {
        let Some(id) = e.instance.as_deref() else {
            continue;
        };
        if !ids.iter().any(|(known, _)| *known == id) {
            ids.push((id, e.time));
        }
    }
    ids.sort_by_key(|(_, first)| *first);
    ids.into_iter()
        .map(|(id, _)| {
            let mut mine: Vec<&Event> = (events.iter())
                .filter(|e| e.instance.as_deref() == Some(id))
                .collect();
            // dtd journals `preparing` (or `ready`) at the end of the pass that first saw the
            // worker, after what that pass said about it (`no_mount_target`): the story still
            // begins with it.
            mine.sort_by_key(|e| (e.time, !is_first_seen(&e.kind)));
            story(id, &mine, now)
        })
        .collect()
}

fn story(id: &str, events: &[&Event], now: Millis) -> Story {
    let launched_at = events.iter().find_map(|e| e.launched_at);
    let mut steps: Vec<Step> = events.iter().map(|e| step(e)).collect();
    note_preparing(&mut steps, now);
    Story {
        instance: id.to_string(),
        ip: events.iter().rev().find_map(|e| e.ip),
        launched_at,
        totals: time_spent(launched_at, events, now),
        steps,
        now: None,
        changes: Vec::new(),
    }
}

fn step(e: &Event) -> Step {
    let note = match &e.kind {
        EventKind::RemovalQueued => e.cause.map(|c| format!("asked by {}", who_asked(c))),
        EventKind::Interrupted => Some("asked by AWS: the instance is being taken away".into()),
        EventKind::Gone => Some("it stopped running without dtd terminating it".into()),
        _ => None,
    };
    Step {
        time: e.time,
        kind: e.kind.clone(),
        generation: e.generation,
        message: e.message.clone(),
        note,
    }
}

/// Who asked for a removal, for people.
pub fn who_asked(cause: Cause) -> &'static str {
    match cause {
        Cause::ElasticTag => {
            "a person: its elastic tag was deleted (EC2 console, `aws ec2 delete-tags` or `dtctl remove`)"
        }
        Cause::Rebalance => "AWS: a rebalance recommendation (elevated risk of interruption)",
        Cause::CapacityBlock => "AWS: its Capacity Block ends",
        Cause::ScheduledChange => "AWS: an EC2 scheduled change (reboot, stop, retirement)",
        Cause::ScaleIn => "its Auto Scaling group: scale-in",
        Cause::OutOfService => "its Auto Scaling group: it left the group's service",
        Cause::PrepareFailed => "dtd: its prepare-data failed, the group replaces it",
        Cause::Unhealthy => "dtd: its agent's health check failed (`health_<ip>`), it is replaced",
        Cause::Silent => {
            "dtd: its agent went silent (no new `launcher_<ip>`); kept running, it joins again \
             once heard"
        }
        Cause::Hung => {
            "dtd: the job stalled and its agent reported a training process stopped \
             (`job.stall.action`); it is replaced"
        }
        Cause::Straggler => {
            "dtd: its compute time per step held the job back (`job.stragglers`); it is replaced"
        }
    }
}

fn is_first_seen(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Preparing | EventKind::Ready)
}

/// A `preparing` step says how long it prepared, a `ready` one how long it waited: until it
/// joined, failed or was removed.
fn note_preparing(steps: &mut [Step], now: Millis) {
    let ends = [
        EventKind::Joined,
        EventKind::PrepareFailed,
        EventKind::RemovalQueued,
        EventKind::Gone,
        EventKind::Interrupted,
    ];
    for at in 0..steps.len() {
        let doing = match steps[at].kind {
            EventKind::Preparing => "preparing",
            EventKind::Ready => "ready and waiting to join",
            _ => continue,
        };
        let end = steps[at + 1..].iter().find(|s| ends.contains(&s.kind));
        let note = match end {
            Some(s) => format!(
                "{doing} for {} after dtd first saw it (until {})",
                span_measured(s.time.saturating_sub(steps[at].time)),
                s.kind
            ),
            None => format!(
                "still {doing}: {} so far",
                span_measured(now.saturating_sub(steps[at].time))
            ),
        };
        steps[at].note = Some(note);
    }
}

/// Where the worker is, as far as the journal tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Launched, not yet ready; or out of the job for good.
    Outside,
    /// In the host files; the job has not acknowledged it yet.
    Joined,
    Training,
    /// Out of the host files, waiting for the job to let go.
    Leaving,
    /// Ready and running, not in the job: let go, or its removal cancelled before it joins again.
    Idle,
}

/// Sums the time spent in each phase, walking the events in order.
fn time_spent(launched_at: Option<Millis>, events: &[&Event], now: Millis) -> TimeSpent {
    let mut sums = Sums::default();
    let (mut phase, mut since) = (Phase::Outside, 0);
    let mut ready_at = None;
    let mut training_at = None;
    for e in events {
        let next = match e.kind {
            EventKind::Joined => Some(Phase::Joined),
            EventKind::JoinAcknowledged if phase == Phase::Joined => Some(Phase::Training),
            EventKind::RemovalQueued if phase == Phase::Training || phase == Phase::Joined => {
                Some(Phase::Leaving)
            }
            EventKind::RemovalQueued => Some(Phase::Outside),
            EventKind::RemovalCancelled => Some(Phase::Idle),
            EventKind::Acknowledged | EventKind::AckTimeout if phase == Phase::Leaving => {
                Some(Phase::Idle)
            }
            EventKind::Terminated | EventKind::Gone | EventKind::Interrupted => {
                Some(Phase::Outside)
            }
            _ => None,
        };
        if matches!(e.kind, EventKind::Joined | EventKind::PrepareFailed) {
            ready_at = ready_at.or(Some(e.time));
        }
        if e.kind == EventKind::JoinAcknowledged {
            training_at = training_at.or(Some(e.time));
        }
        if let Some(next) = next.filter(|n| *n != phase) {
            sums.add(phase, e.time.saturating_sub(since), false);
            (phase, since) = (next, e.time);
        }
    }
    sums.add(phase, now.saturating_sub(since), true);
    let from_launch = |to: Option<Millis>, between| {
        let (from, to) = (launched_at?, to?);
        Some(Span {
            ms: to.saturating_sub(from),
            between,
            open: false,
        })
    };
    TimeSpent {
        preparing: from_launch(ready_at, PREPARING),
        launch_to_training: from_launch(training_at, LAUNCH_TO_TRAINING),
        ready_idle: sums.span(Phase::Idle, READY_IDLE),
        in_job: sums.span(Phase::Training, IN_JOB),
        leaving: sums.span(Phase::Leaving, LEAVING),
    }
}

/// The time spent in one kind of phase: whether it was ever entered, and is still under way.
#[derive(Default, Clone, Copy)]
struct Part {
    ms: u64,
    seen: bool,
    open: bool,
}

#[derive(Default)]
struct Sums {
    idle: Part,
    training: Part,
    leaving: Part,
}

impl Sums {
    /// Time in the host files before the job's acknowledgement counts as ready but idle: the
    /// job has not applied the generation that lists it.
    fn part(&mut self, phase: Phase) -> Option<&mut Part> {
        match phase {
            Phase::Joined | Phase::Idle => Some(&mut self.idle),
            Phase::Training => Some(&mut self.training),
            Phase::Leaving => Some(&mut self.leaving),
            Phase::Outside => None,
        }
    }

    fn add(&mut self, phase: Phase, ms: u64, open: bool) {
        if let Some(part) = self.part(phase) {
            *part = Part {
                ms: part.ms + ms,
                seen: true,
                open: part.open || open,
            };
        }
    }

    fn span(&mut self, phase: Phase, between: &'static str) -> Option<Span> {
        let part = *self.part(phase)?;
        part.seen.then_some(Span {
            ms: part.ms,
            between,
            open: part.open,
        })
    }
}

#[cfg(test)]
mod tests;
