//! A status report from what one pass saw and decided.

use super::{ago, ProgressStatus, QuorumStatus, SourceStatus, StatusReport};
use crate::alerts::AlertStatus;
use crate::config::Config;
use crate::decide::worker_views;
use crate::model::*;

/// What a pass knows that its report shows, besides the config.
pub struct PassFacts<'a> {
    pub outcome: &'a Outcome,
    pub snap: &'a Snapshot,
    /// The state the outcome was decided with (members, removals, when each status began).
    pub state: &'a State,
    /// Why the event queue could not be read, if it could not.
    pub queue_error: Option<&'a str>,
    /// The mount-target zones' summary, or why they are unknown; `None` when not configured.
    pub mount_targets: Option<Read<String>>,
    pub ec2_calls: u32,
    pub listed_at: Option<Millis>,
    pub pass_ms: u64,
    pub errors: &'a [String],
    pub totals: &'a Totals,
    /// The alert webhooks as of this pass.
    pub alerts: Vec<AlertStatus>,
    /// torchft's Lighthouse (in-place strategy), when dtd runs one.
    pub lighthouse: Option<LighthouseFacts>,
    pub now: Millis,
}

/// torchft's Lighthouse as the status shows it.
pub struct LighthouseFacts {
    /// Where the nodes dial it (dtd's front).
    pub address: std::net::SocketAddr,
    /// Its supervisor's state.
    pub state: String,
    /// What the front refused lately, one line per source and kind.
    pub refused: Vec<String>,
}

impl StatusReport {
    pub fn build(cfg: &Config, f: PassFacts) -> StatusReport {
        let (snap, state) = (f.snap, f.state);
        let group = snap.group.as_ref().and_then(|g| g.as_ref().ok());
        let quorum = quorum(snap, &f);
        StatusReport {
            cluster: cfg.cluster.clone(),
            updated_at: f.now,
            pid: std::process::id(),
            interval_ms: cfg.interval.as_millis() as u64,
            min: group.map_or(cfg.workers.min, |g| g.min),
            max: group.map_or(cfg.workers.max, |g| g.max),
            current: f.outcome.hosts.len(),
            desired: group.map_or_else(|| desired(cfg, f.outcome), |g| g.desired),
            group: group.map(|g| g.name.clone()),
            replacing_stopped: replacing_stopped(cfg, state),
            generation: state.generation,
            acked_generation: acknowledged(state, snap, cfg.job.ack.host_worker_log.is_some()),
            pending_notification: state.pending_notification.as_ref().map(|n| n.generation),
            ec2_calls_last_pass: f.ec2_calls,
            instances_listed_at: f.listed_at,
            resync_ms: cfg.resync.as_millis() as u64,
            pass_ms: f.pass_ms,
            interruptions: state.interruptions,
            totals: f.totals.clone(),
            sources: sources(cfg, &f),
            holds: f.outcome.holds.clone(),
            refused: refused(&f),
            errors: f.errors.to_vec(),
            hosts: f.outcome.hosts.clone(),
            workers: worker_views(&f.outcome.rows, snap, state),
            alerts: f.alerts,
            progress: progress(cfg, snap, state),
            quorum,
            capacity: f.outcome.capacity.clone(),
        }
    }
}

/// What decide refused, then what the Lighthouse's front refused.
fn refused(f: &PassFacts) -> Vec<String> {
    let front = f.lighthouse.iter().flat_map(|l| l.refused.iter());
    f.outcome.refused.iter().chain(front).cloned().collect()
}

fn progress(cfg: &Config, snap: &Snapshot, state: &State) -> Option<ProgressStatus> {
    let stall = cfg.job.stall.as_ref()?;
    let known = state.progress.as_ref();
    Some(ProgressStatus {
        file: cfg.job.progress.display().to_string(),
        step: known.map(|k| k.step),
        advanced_at: known.map(|k| k.advanced_at),
        stalled: known.is_some_and(|k| k.stalled),
        stall_after_ms: stall.after.as_millis() as u64,
        held_back: known
            .filter(|k| k.stalled)
            .map(|k| k.held_back.clone())
            .unwrap_or_default(),
        error: snap
            .progress
            .as_ref()
            .and_then(|r| r.as_ref().err())
            .map(ToString::to_string),
    })
}

/// The in-place strategy's view: the Lighthouse dtd runs, and the quorum as the job reports it.
fn quorum(snap: &Snapshot, f: &PassFacts) -> Option<QuorumStatus> {
    let lighthouse = f.lighthouse.as_ref()?;
    let read = snap.progress.as_ref().and_then(|r| r.as_ref().ok());
    let q = read.and_then(|p| p.quorum.as_ref());
    Some(QuorumStatus {
        lighthouse: lighthouse.address.to_string(),
        lighthouse_state: lighthouse.state.clone(),
        step: read.map(|p| p.step),
        quorum: q.and_then(|q| q.quorum),
        nodes: q.map(|q| q.nodes),
        last_change: q.and_then(|q| q.changes.last().cloned()),
    })
}

/// A source's line: what it held, or why it was not read.
fn source<E: std::fmt::Display>(source: Source, read: Result<String, E>) -> SourceStatus {
    SourceStatus {
        name: source.name().into(),
        ok: read.is_ok(),
        detail: read.unwrap_or_else(|e| e.to_string()),
    }
}

/// Every source a pass reads, whether it was read, and what it held.
fn sources(cfg: &Config, f: &PassFacts) -> Vec<SourceStatus> {
    let snap = f.snap;
    let listed = f.listed_at.map_or("never listed completely".into(), |at| {
        let every = humantime::format_duration(cfg.resync);
        format!(
            "listed {} ago, every {every}",
            ago(f.now.saturating_sub(at))
        )
    });
    let instances = (snap.instances.as_ref())
        .map(|v| format!("{} instances with the worker tags ({listed})", v.len()));
    let markers = (snap.markers.as_ref())
        .map(|m| format!("{} ready, {} failed", m.success.len(), m.failed.len()));
    let acks = (snap.acks.as_ref()).map(|a| {
        let file = a.generation.map_or("-".into(), |g| g.to_string());
        format!("ack file: {file}, host_worker_log: {} lines", a.log_lines)
    });
    let mut all = vec![
        source(Source::Instances, instances),
        source(Source::Markers, markers),
        source(Source::Acks, acks),
    ];
    if let Some(url) = &cfg.events.queue_url {
        let notices = format!("{url} (notices this pass: {})", snap.notices.len());
        let read = f.queue_error.map_or(Ok(notices), Err);
        all.push(source(Source::EventQueue, read));
    }
    // Unknown zones hold nothing: a failed read is a source shown as failed, not a hold.
    if let Some(zones) = &f.mount_targets {
        all.push(source(Source::MountTargets, zones.clone()));
    }
    all
}

fn replacing_stopped(cfg: &Config, state: &State) -> Option<String> {
    let limit = cfg.workers.max_prepare_failures;
    (state.prepare_failures >= limit).then(|| {
        let last = state.last_prepare_failure.as_deref().unwrap_or("-");
        format!("stopped after {limit} prepare-data failures in a row (last: {last}); `dtctl resume` re-arms it")
    })
}

/// Base hosts plus every worker joined or on its way in (preparing, queued), capped at max.
fn desired(cfg: &Config, outcome: &Outcome) -> usize {
    let coming = [
        WorkerStatus::Preparing,
        WorkerStatus::AddQueued,
        WorkerStatus::Added,
    ];
    let managed = (outcome.rows.iter())
        .filter(|r| matches!(r.shown, Shown::Status(s) if coming.contains(&s)))
        .count();
    (cfg.workers.base_hosts.len() + managed).min(cfg.workers.max)
}

/// The newest generation the job is known to have applied: the ack file's, or with the
/// `host_worker_log` form (which names IPs, not generations) the newest generation whose every
/// join and removal the log has confirmed.
fn acknowledged(state: &State, snap: &Snapshot, log_form: bool) -> Option<u64> {
    if state.launcher_acked.is_some() {
        return state.launcher_acked;
    }
    let acks = snap.acks.as_ref().ok()?;
    let from_log = log_form.then(|| {
        let unconfirmed_joins = (state.members.iter())
            .filter(|m| !m.acked)
            .map(|m| m.joined_generation);
        let waiting = (state.removals.iter()).filter(|r| r.awaits_ack());
        let oldest_unconfirmed = unconfirmed_joins.chain(waiting.map(|r| r.generation)).min();
        oldest_unconfirmed.map_or(state.generation, |g| g.saturating_sub(1))
    });
    // An ack above what dtd wrote is refused (shown under `refused`), not acknowledged.
    let by_file = acks.generation.filter(|g| *g <= state.generation);
    by_file.max(from_log.filter(|g| *g > 0))
}
