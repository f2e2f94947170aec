//! The status report `dtd` writes after every pass and `dtctl status` prints.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::alerts::AlertStatus;
use crate::config::Config;
use crate::decide::worker_views;
use crate::hostfile::Host;
use crate::metrics::Totals;
use crate::model::*;

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
    /// What workers wrote that dtd did not believe (README, "What a worker can put there").
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
    /// Why the file cannot be read now (no stall is concluded from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The totals an earlier dtd wrote in its last status, if it can be read: counting goes on
/// from there. A status that is missing or unreadable starts the count again (with a warning).
pub fn read_totals(path: &std::path::Path) -> Option<Totals> {
    #[derive(Deserialize)]
    struct Last {
        #[serde(default)]
        totals: Option<Totals>,
    }
    let bytes = match crate::untrusted::read(path, STATUS_LIMIT) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!("{}: {e}; GPU time is counted from now", path.display());
            return None;
        }
    };
    match serde_json::from_slice::<Last>(&bytes) {
        Ok(last) => last.totals,
        Err(e) => {
            tracing::warn!("{}: {e}; GPU time is counted from now", path.display());
            None
        }
    }
}

/// A status report lists every worker: about 300 bytes each; more than this is not dtd's.
pub const STATUS_LIMIT: u64 = 64 << 20;

/// What a pass knows that its report shows, besides the config.
pub struct PassFacts<'a> {
    pub outcome: &'a Outcome,
    pub snap: &'a Snapshot,
    /// The state the outcome was decided with (members, removals, when each status began).
    pub state: &'a State,
    /// Why the event queue could not be read, if it could not.
    pub queue_error: Option<&'a str>,
    /// The mount-target zones' summary, or why they are unknown; `None` when not configured.
    pub mount_targets: Option<Result<String, String>>,
    pub ec2_calls: u32,
    pub listed_at: Option<Millis>,
    pub pass_ms: u64,
    pub errors: &'a [String],
    pub totals: &'a Totals,
    /// The alert webhooks as of this pass.
    pub alerts: Vec<AlertStatus>,
    pub now: Millis,
}

impl StatusReport {
    pub fn build(cfg: &Config, f: PassFacts) -> StatusReport {
        let (snap, state) = (f.snap, f.state);
        let group = snap.group.as_ref().and_then(|g| g.as_ref().ok());
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
            refused: f.outcome.refused.clone(),
            errors: f.errors.to_vec(),
            hosts: f.outcome.hosts.clone(),
            workers: worker_views(&f.outcome.rows, snap, state),
            alerts: f.alerts,
            progress: progress(cfg, snap, state),
        }
    }
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
        error: snap
            .progress
            .as_ref()
            .and_then(|r| r.as_ref().err())
            .cloned(),
    })
}

/// Every source a pass reads, whether it was read, and what it held.
fn sources(cfg: &Config, f: &PassFacts) -> Vec<SourceStatus> {
    let snap = f.snap;
    let source = |name: &str, r: Result<String, String>| SourceStatus {
        name: name.into(),
        ok: r.is_ok(),
        detail: r.unwrap_or_else(|e| e),
    };
    let listed = f.listed_at.map_or("never listed completely".into(), |at| {
        let every = humantime::format_duration(cfg.resync);
        format!(
            "listed {} ago, every {every}",
            ago(f.now.saturating_sub(at))
        )
    });
    let instances = (snap.instances.as_ref().map_err(String::clone))
        .map(|v| format!("{} instances with the worker tags ({listed})", v.len()));
    let markers = (snap.markers.as_ref().map_err(String::clone))
        .map(|m| format!("{} ready, {} failed", m.success.len(), m.failed.len()));
    let acks = (snap.acks.as_ref().map_err(String::clone)).map(|a| {
        let file = a.generation.map_or("-".into(), |g| g.to_string());
        format!("ack file: {file}, host_worker_log: {} lines", a.log_lines)
    });
    let mut all = vec![
        source("EC2 instances", instances),
        source("prepare-data markers", markers),
        source("acknowledgements", acks),
    ];
    if let Some(url) = &cfg.events.queue_url {
        let notices = format!("{url} (notices this pass: {})", snap.notices.len());
        let read = f.queue_error.map_or(Ok(notices), |e| Err(e.to_string()));
        all.push(source("event queue", read));
    }
    // Unknown zones hold nothing: a failed read is a source shown as failed, not a hold.
    if let Some(zones) = &f.mount_targets {
        all.push(source("EFS mount targets", zones.clone()));
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

impl StatusReport {
    /// With no pass for this long, dtd is taken to be stuck or gone (by `dtctl status` and
    /// `/healthz` alike): three intervals, and room for a pass that waits on a slow call.
    pub fn stale_after(interval: std::time::Duration) -> std::time::Duration {
        interval * 3 + std::time::Duration::from_secs(15)
    }

    /// Human form, in the spirit of `kubectl describe`.
    pub fn render(&self, now: Millis) -> String {
        let mut o = String::new();
        let age = now.saturating_sub(self.updated_at);
        let _ = writeln!(o, "Cluster:     {}", self.cluster);
        let _ = writeln!(
            o,
            "Daemon:      pid {}, last pass {} ago ({} ms, {} EC2 calls)",
            self.pid,
            ago(age),
            self.pass_ms,
            self.ec2_calls_last_pass
        );
        let limit = Self::stale_after(std::time::Duration::from_millis(self.interval_ms));
        let stale = u128::from(age) > limit.as_millis();
        if stale {
            let _ = writeln!(o, "WARNING:     no pass for {}: is dtd running?", ago(age));
        }
        let from = self
            .group
            .as_ref()
            .map_or(String::new(), |g| format!(", from group {g}"));
        let _ = writeln!(
            o,
            "Workers:     {} in the job, desired {} (min {}, max {}{from})",
            self.current, self.desired, self.min, self.max
        );
        if let Some(why) = &self.replacing_stopped {
            let _ = writeln!(o, "Replacing:   {why}");
        }
        let acked = self
            .acked_generation
            .map_or("none".to_string(), |g| g.to_string());
        let pending = self.pending_notification.map_or(String::new(), |g| {
            format!(", generation {g} not yet delivered to the job")
        });
        let _ = writeln!(
            o,
            "Generation:  {} (acknowledged: {acked}{pending})",
            self.generation
        );
        let _ = writeln!(o, "Totals:      {}", self.summary());
        if let Some(p) = &self.progress {
            p.render(&mut o, now);
        }
        for s in &self.sources {
            let mark = if s.ok { "ok" } else { "FAILED" };
            let _ = writeln!(o, "Source:      {:<22} {mark} {}", s.name, s.detail);
        }
        for h in &self.holds {
            let _ = writeln!(
                o,
                "HOLDING:     {h} (no removal or termination until it recovers)"
            );
        }
        for r in &self.refused {
            let _ = writeln!(o, "Refused:     {r}");
        }
        for e in &self.errors {
            let _ = writeln!(o, "Error:       {e}");
        }
        self.render_alerts(&mut o, now);
        let _ = writeln!(o);
        self.render_table(&mut o, now);
        o
    }

    /// Since dtd first managed the cluster: interruptions survived, GPU time trained and idle.
    pub fn summary(&self) -> String {
        let t = &self.totals;
        let since = rfc3339(t.since);
        format!(
            "since {since}: {} interruption(s) survived, {:.2} GPU-hours trained, {:.2} GPU-hours ready but idle",
            self.interruptions,
            t.gpu_seconds_training / 3600.0,
            t.gpu_seconds_idle / 3600.0
        )
    }

    /// A line per failing webhook; the others are in `-o json`.
    fn render_alerts(&self, o: &mut String, now: Millis) {
        for a in &self.alerts {
            let (Some(error), Some(since)) = (&a.last_error, a.failing_since) else {
                continue;
            };
            let _ = writeln!(
                o,
                "Alert:       {} FAILING for {}: {error} (sent {}, pending {}, dropped {})",
                a.webhook,
                ago(now.saturating_sub(since)),
                a.sent,
                a.pending,
                a.dropped
            );
        }
    }

    fn render_table(&self, o: &mut String, now: Millis) {
        // The LAUNCHER column only with `job.launcher`: after WAITING FOR, which then is padded.
        let launchers = self.workers.iter().any(|w| w.launcher.is_some());
        let waiting = |w: &WorkerView| w.waiting_for.clone().unwrap_or_else(|| "-".into());
        let width = match launchers {
            true => self
                .workers
                .iter()
                .map(|w| waiting(w).chars().count())
                .max(),
            false => None,
        };
        let width = width.unwrap_or(0).max("WAITING FOR".len());
        let launcher_head = if launchers { "  LAUNCHER" } else { "" };
        let head = format!(
            "{:<16} {:<20} {:<12} {:<11} {:<14} {:<15} {:>6}  {:<width$}{launcher_head}",
            "IP", "INSTANCE", "TYPE", "AZ", "MARKET", "STATUS", "SINCE", "WAITING FOR"
        );
        let _ = writeln!(o, "{}", head.trim_end());
        for w in &self.workers {
            let since = w.since.map_or("-".into(), |t| ago(now.saturating_sub(t)));
            let launcher = match (launchers, &w.launcher) {
                (true, l) => format!("  {}", l.as_deref().unwrap_or("-")),
                (false, _) => String::new(),
            };
            let line = format!(
                "{:<16} {:<20} {:<12} {:<11} {:<14} {:<15} {:>6}  {:<width$}{launcher}",
                w.ip.to_string(),
                w.id,
                w.instance_type,
                w.az,
                market_label(&w.market),
                w.status,
                since,
                waiting(w),
            );
            let _ = writeln!(o, "{}", line.trim_end());
        }
        if self.workers.is_empty() {
            let _ = writeln!(o, "(no worker instances found)");
        }
    }
}

impl ProgressStatus {
    /// `Stalled:` while the step stands still past the limit, `Progress:` otherwise; and why
    /// the file cannot be read, if it cannot.
    fn render(&self, o: &mut String, now: Millis) {
        let after = span(self.stall_after_ms);
        match (self.step, self.advanced_at) {
            (Some(step), Some(at)) if self.stalled => {
                let _ = writeln!(
                    o,
                    "Stalled:     step {step} has not advanced for {} (since {})",
                    span(now.saturating_sub(at)),
                    rfc3339(at)
                );
            }
            (Some(step), Some(at)) => {
                let _ = writeln!(
                    o,
                    "Progress:    step {step}, last advanced {} ago (a stall after {after})",
                    ago(now.saturating_sub(at))
                );
            }
            _ if self.error.is_none() => {
                let _ = writeln!(
                    o,
                    "Progress:    no step read from {} yet (a stall after {after} once there is)",
                    self.file
                );
            }
            _ => {}
        }
        if let Some(e) = &self.error {
            let _ = writeln!(o, "Progress:    unreadable, no stall concluded: {e}");
        }
    }
}

/// EC2's instance lifecycle value as the console shows it.
fn market_label(market: &str) -> &str {
    match market {
        "spot" => "Spot",
        "on-demand" => "On-Demand",
        "capacity-block" => "Capacity Block",
        other => other,
    }
}

/// `42s`, `5m`, `3h`: coarse, for a table.
pub fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "cluster: demo
workers: { launch_template: lt-0abc, min: 1, max: 3, base_hosts: [10.0.0.5] }
shared_dir: /efs
job: { ack: { host_worker_log: /efs/host_worker_log } }
events: { queue_url: 'https://sqs.us-east-1.amazonaws.com/1/q' }
";

    fn member(n: u8, generation: u64, acked: bool) -> Member {
        Member {
            id: format!("i-{n}"),
            ip: format!("10.0.1.{n}").parse().expect("an IP"),
            instance_type: "p3.2xlarge".into(),
            joined_generation: generation,
            joined_at: 0,
            log_mark: 0,
            acked,
        }
    }

    /// Built from a pass's data alone, without the daemon's loop.
    #[test]
    fn a_report_is_built_from_what_a_pass_saw_and_decided() {
        let cfg = Config::parse(CONFIG).expect("config");
        let snap = Snapshot {
            instances: Ok(Vec::new()),
            markers: Err("shared directory /efs: no answer in 5s".into()),
            acks: Ok(Acks {
                log_lines: 4,
                ..Acks::default()
            }),
            notices: Vec::new(),
            group: None,
            resume_requested: None,
            mount_targets: None,
            progress: None,
        };
        let state = State {
            generation: 3,
            members: vec![member(1, 2, true), member(2, 3, false)],
            ..State::default()
        };
        let outcome = Outcome {
            hosts: vec![crate::hostfile::Host {
                ip: "10.0.0.5".parse().expect("an IP"),
                slots: 1,
            }],
            holds: vec!["prepare-data markers: no answer".into()],
            ..Outcome::default()
        };
        let facts = PassFacts {
            outcome: &outcome,
            snap: &snap,
            state: &state,
            queue_error: Some("ReceiveMessage: throttled"),
            mount_targets: None,
            ec2_calls: 1,
            listed_at: Some(1_000),
            pass_ms: 12,
            errors: &[],
            totals: &Totals::default(),
            alerts: Vec::new(),
            now: 1_000,
        };
        let report = StatusReport::build(&cfg, facts);
        // The log confirms every join up to generation 2; generation 3's is not yet confirmed.
        assert_eq!(report.acked_generation, Some(2));
        assert_eq!((report.min, report.max, report.current), (1, 3, 1));
        assert_eq!(report.desired, 1, "only the base host: no rows");
        let sources: Vec<(&str, bool)> = (report.sources.iter())
            .map(|s| (s.name.as_str(), s.ok))
            .collect();
        assert_eq!(
            sources,
            [
                ("EC2 instances", true),
                ("prepare-data markers", false),
                ("acknowledgements", true),
                ("event queue", false),
            ]
        );
        assert_eq!(report.sources[3].detail, "ReceiveMessage: throttled");
        assert_eq!(report.holds, outcome.holds);
        assert_eq!(report.replacing_stopped, None);
    }

    fn alert(last_error: Option<&str>, failing_since: Option<Millis>) -> AlertStatus {
        AlertStatus {
            webhook: "https://hooks.slack.com/…".into(),
            format: crate::config::AlertFormat::Slack,
            sent: 4,
            pending: 2,
            dropped: 1,
            last_error: last_error.map(str::to_string),
            failing_since,
        }
    }

    #[test]
    fn a_failing_webhook_gets_a_line_and_a_healthy_one_none() {
        let mut report = empty_report();
        report.alerts = vec![
            alert(None, None),
            alert(Some("tcp connect error: Connection refused"), Some(10_000)),
        ];
        let text = report.render(25_000);
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("Alert:")).collect();
        assert_eq!(
            lines,
            ["Alert:       https://hooks.slack.com/… FAILING for 15s: tcp connect error: Connection refused (sent 4, pending 2, dropped 1)"]
        );
    }

    #[test]
    fn a_status_written_before_alerts_existed_still_reads() {
        let mut json = serde_json::to_value(empty_report()).expect("JSON");
        json.as_object_mut().expect("an object").remove("alerts");
        let report: StatusReport = serde_json::from_value(json).expect("read");
        assert!(report.alerts.is_empty());
    }

    fn progress_lines(p: ProgressStatus, now: Millis) -> Vec<String> {
        let mut report = empty_report();
        report.progress = Some(p);
        let text = report.render(now);
        let lines = text
            .lines()
            .filter(|l| l.starts_with("Stalled:") || l.starts_with("Progress:"));
        lines.map(str::to_string).collect()
    }

    fn progress(step: Option<u64>, stalled: bool, error: Option<&str>) -> ProgressStatus {
        ProgressStatus {
            file: "/efs/progress".into(),
            step,
            advanced_at: step.map(|_| 1_795_508_201_000),
            stalled,
            stall_after_ms: 600_000,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn a_stall_gets_its_line_with_the_step_and_how_long() {
        let now = 1_795_508_201_000 + 603_000;
        assert_eq!(
            progress_lines(progress(Some(1234), true, None), now),
            ["Stalled:     step 1234 has not advanced for 10m 3s (since 2026-11-24T08:16:41Z)"]
        );
        assert_eq!(
            progress_lines(progress(Some(1234), false, None), now - 600_000),
            ["Progress:    step 1234, last advanced 3s ago (a stall after 10m)"]
        );
        assert_eq!(
            progress_lines(progress(None, false, None), now),
            ["Progress:    no step read from /efs/progress yet (a stall after 10m once there is)"]
        );
        assert_eq!(
            progress_lines(
                progress(Some(1234), true, Some("/efs/progress is a FIFO")),
                now
            ),
            [
                "Stalled:     step 1234 has not advanced for 10m 3s (since 2026-11-24T08:16:41Z)",
                "Progress:    unreadable, no stall concluded: /efs/progress is a FIFO"
            ]
        );
    }

    #[test]
    fn the_progress_comes_from_the_state_and_the_files_error_from_the_snapshot() {
        let cfg = Config::parse(&CONFIG.replace(
            "job: { ack: { host_worker_log: /efs/host_worker_log } }",
            "job: { ack: { host_worker_log: /efs/host_worker_log }, stall: { after: 10m } }",
        ))
        .expect("config");
        let snap = Snapshot {
            progress: Some(Err("/efs/progress is a FIFO".into())),
            ..empty_snapshot()
        };
        let state = State {
            progress: Some(JobProgress {
                step: 1234,
                advanced_at: 1_795_508_201_000,
                stalled: true,
            }),
            ..State::default()
        };
        let report = StatusReport::build(&cfg, facts(&Outcome::default(), &snap, &state));
        let expected = progress(Some(1234), true, Some("/efs/progress is a FIFO"));
        assert_eq!(report.progress, Some(expected));
    }

    #[test]
    fn without_stall_detection_there_is_no_progress_line() {
        let report = empty_report();
        assert_eq!(report.progress, None);
        assert!(!report.render(0).contains("Progress:"));
        let json = serde_json::to_value(&report).expect("JSON");
        assert!(json.get("progress").is_none());
    }

    fn empty_snapshot() -> Snapshot {
        Snapshot {
            instances: Ok(Vec::new()),
            markers: Ok(Markers::default()),
            acks: Ok(Acks::default()),
            notices: Vec::new(),
            group: None,
            resume_requested: None,
            mount_targets: None,
            progress: None,
        }
    }

    fn facts<'a>(outcome: &'a Outcome, snap: &'a Snapshot, state: &'a State) -> PassFacts<'a> {
        PassFacts {
            outcome,
            snap,
            state,
            queue_error: None,
            mount_targets: None,
            ec2_calls: 0,
            listed_at: None,
            pass_ms: 1,
            errors: &[],
            totals: &TOTALS,
            alerts: Vec::new(),
            now: 0,
        }
    }

    const TOTALS: Totals = Totals {
        since: 0,
        gpu_seconds_training: 0.0,
        gpu_seconds_idle: 0.0,
    };

    fn empty_report() -> StatusReport {
        let cfg = Config::parse(CONFIG).expect("config");
        let snap = empty_snapshot();
        StatusReport::build(&cfg, facts(&Outcome::default(), &snap, &State::default()))
    }
}
