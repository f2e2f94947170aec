//! The status report in human form (`dtctl status`).

use std::fmt::Write as _;

use super::{ProgressStatus, StatusReport};
use crate::model::*;

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
        if let Some(q) = &self.quorum {
            q.render(&mut o);
        }
        for s in &self.sources {
            let mark = if s.ok { "ok" } else { "FAILED" };
            let _ = writeln!(o, "Source:      {:<22} {mark} {}", s.name, s.detail);
        }
        for (n, c) in self.capacity.iter().enumerate() {
            let now = c
                .skipped
                .as_deref()
                .map_or("tried".into(), |why| format!("skipped: {why}"));
            let held = (c.reservation.as_deref()).map_or(String::new(), |r| format!(" ({r})"));
            let _ = writeln!(o, "Capacity:    {}. {}{held} {now}", n + 1, c.choice);
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
    pub(super) fn render(&self, o: &mut String, now: Millis) {
        let after = span(self.stall_after_ms);
        match (self.step, self.advanced_at) {
            (Some(step), Some(at)) if self.stalled => {
                let _ = writeln!(
                    o,
                    "Stalled:     step {step} has not advanced for {} (since {})",
                    span(now.saturating_sub(at)),
                    rfc3339(at)
                );
                if !self.held_back.is_empty() {
                    let _ = writeln!(o, "             {}", self.held_back);
                }
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

impl super::QuorumStatus {
    /// `Quorum:` the quorum and the Lighthouse; `Last change:` who joined or left, at which
    /// step, at what cost.
    fn render(&self, o: &mut String) {
        let quorum = match (self.quorum, self.nodes, self.step) {
            (Some(q), Some(n), Some(step)) => {
                format!("torchft quorum {q}: {n} node(s) at step {step}")
            }
            _ => "no quorum reported yet (the job's progress file)".to_string(),
        };
        let _ = writeln!(
            o,
            "Quorum:      {quorum}; Lighthouse {} {}",
            self.lighthouse, self.lighthouse_state
        );
        if let Some(c) = &self.last_change {
            let ips = |v: &[std::net::IpAddr]| {
                v.iter()
                    .map(|ip| ip.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut who = Vec::new();
            if !c.joined.is_empty() {
                who.push(format!("{} joined", ips(&c.joined)));
            }
            if !c.left.is_empty() {
                who.push(format!("{} left", ips(&c.left)));
            }
            let _ = writeln!(
                o,
                "Last change: at step {} ({}): {}; {} step(s) lost, trained again after {:.2}s",
                c.step,
                c.at,
                if who.is_empty() {
                    "re-formed".into()
                } else {
                    who.join(", ")
                },
                c.lost_steps,
                c.paused_s
            );
        }
    }
}
