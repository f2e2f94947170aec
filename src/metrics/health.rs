//! `/healthz`: healthy while passes complete on time and every source was read completely.

use std::time::{Duration, Instant};

use crate::status::StatusReport;

pub struct DaemonHealth {
    started: Instant,
    /// A pass older than this means the loop is stuck (or dtd is about to be).
    stale_after: Duration,
    last_pass: Option<Instant>,
    /// The sources the last pass could not read, with why.
    failing: Vec<Reason>,
}

/// Why `/healthz` answers 503: every reason, one a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", lines(.0))]
pub struct Unhealthy(pub Vec<Reason>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("no pass completed for {late_s}s (limit {limit_s}s)")]
    Late { late_s: u64, limit_s: u64 },
    #[error("no pass completed yet (started {0}s ago)")]
    NoPassYet(u64),
    #[error("source {name}: {detail}")]
    Source { name: String, detail: String },
    #[error("the daemon's health record is poisoned (a pass panicked)")]
    Poisoned,
}

fn lines(reasons: &[Reason]) -> String {
    let lines: Vec<String> = reasons.iter().map(Reason::to_string).collect();
    lines.join("\n")
}

impl DaemonHealth {
    pub fn new(started: Instant, stale_after: Duration) -> DaemonHealth {
        DaemonHealth {
            started,
            stale_after,
            last_pass: None,
            failing: Vec::new(),
        }
    }

    pub fn passed(&mut self, at: Instant, report: &StatusReport) {
        self.last_pass = Some(at);
        self.failing = (report.sources.iter())
            .filter(|s| !s.ok)
            .map(|s| Reason::Source {
                name: s.name.clone(),
                detail: s.detail.clone(),
            })
            .collect();
    }

    /// `Ok` with a one-line summary, or `Err` with every reason it is not healthy.
    pub fn verdict(&self, now: Instant) -> Result<&'static str, Unhealthy> {
        let mut reasons = Vec::new();
        match self.last_pass {
            Some(at) if now.duration_since(at) > self.stale_after => reasons.push(Reason::Late {
                late_s: now.duration_since(at).as_secs(),
                limit_s: self.stale_after.as_secs(),
            }),
            Some(_) => {}
            None => reasons.push(Reason::NoPassYet(
                now.duration_since(self.started).as_secs(),
            )),
        }
        reasons.extend(self.failing.iter().cloned());
        match reasons.is_empty() {
            true => Ok("ok: passes on time, every source read"),
            false => Err(Unhealthy(reasons)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::SourceStatus;

    fn report(sources: &[(&str, bool)]) -> StatusReport {
        let mut r: StatusReport = serde_json::from_value(serde_json::json!({
            "cluster": "c", "updated_at": 0, "pid": 1, "interval_ms": 1000, "min": 0, "max": 1,
            "current": 0, "desired": 0, "generation": 0, "acked_generation": null,
            "pending_notification": null, "ec2_calls_last_pass": 0, "pass_ms": 0,
            "sources": [], "holds": [], "errors": [], "hosts": [], "workers": []
        }))
        .expect("a report");
        r.sources = (sources.iter())
            .map(|(name, ok)| SourceStatus {
                name: name.to_string(),
                ok: *ok,
                detail: format!("{name} detail"),
            })
            .collect();
        r
    }

    #[test]
    fn unhealthy_before_the_first_pass_when_late_and_when_a_source_fails() {
        let t0 = Instant::now();
        let mut h = DaemonHealth::new(t0, Duration::from_secs(10));
        assert!(h
            .verdict(t0)
            .unwrap_err()
            .to_string()
            .contains("no pass completed yet"));
        h.passed(t0, &report(&[("EC2 instances", true)]));
        assert!(h.verdict(t0 + Duration::from_secs(10)).is_ok());
        let late = (h.verdict(t0 + Duration::from_secs(11)))
            .unwrap_err()
            .to_string();
        assert!(
            late.contains("no pass completed for 11s (limit 10s)"),
            "{late}"
        );
        h.passed(
            t0,
            &report(&[("EC2 instances", false), ("event queue", true)]),
        );
        let failing = h.verdict(t0).unwrap_err().to_string();
        assert_eq!(failing, "source EC2 instances: EC2 instances detail");
    }
}
