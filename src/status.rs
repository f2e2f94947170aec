//! The status report `dtd` writes after every pass and `dtctl status` prints.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::hostfile::Host;
use crate::model::{Millis, WorkerView};

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
    pub pass_ms: u64,
    pub sources: Vec<SourceStatus>,
    pub holds: Vec<String>,
    pub errors: Vec<String>,
    pub hosts: Vec<Host>,
    pub workers: Vec<WorkerView>,
}

impl StatusReport {
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
        let stale = age > 3 * self.interval_ms + 15_000;
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
        let _ = writeln!(
            o,
            "Interrupted: {} worker(s) lost to interruptions, the job kept training",
            self.interruptions
        );
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
        for e in &self.errors {
            let _ = writeln!(o, "Error:       {e}");
        }
        let _ = writeln!(o);
        self.render_table(&mut o, now);
        o
    }

    fn render_table(&self, o: &mut String, now: Millis) {
        let _ = writeln!(
            o,
            "{:<16} {:<20} {:<12} {:<11} {:<14} {:<15} {:>6}  WAITING FOR",
            "IP", "INSTANCE", "TYPE", "AZ", "MARKET", "STATUS", "SINCE"
        );
        for w in &self.workers {
            let since = w.since.map_or("-".into(), |t| ago(now.saturating_sub(t)));
            let waiting = w.waiting_for.as_deref().unwrap_or("-");
            let _ = writeln!(
                o,
                "{:<16} {:<20} {:<12} {:<11} {:<14} {:<15} {:>6}  {waiting}",
                w.ip.to_string(),
                w.id,
                w.instance_type,
                w.az,
                market_label(&w.market),
                w.status,
                since
            );
        }
        if self.workers.is_empty() {
            let _ = writeln!(o, "(no worker instances found)");
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
