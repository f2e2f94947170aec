//! The health check (`agent.health`): runs the check program, turns how it ended into a
//! [`HealthReport`] and writes it to `health_<ip>` after every run, for the master to act on.
//! The verdict is the exit status (`protocol::health`): 0 healthy, [`GPUS_LOST_EXIT`] the GPUs
//! are gone, anything else (a signal, a timeout, a program that cannot start) unhealthy.

use std::path::PathBuf;
use std::time::Duration;

use super::reports::Reports;
use super::Identity;
use crate::config::{Config, Health};
use crate::digest::Sha256;
use crate::program::{self, Outcome, Program, Status};
use crate::protocol::health::{HealthReport, GPUS_LOST_EXIT};
use crate::protocol::markers::MarkerKind;

pub struct Checker {
    program: PathBuf,
    sha256: Option<Sha256>,
    args: Vec<String>,
    timeout: Duration,
    env: Vec<program::EnvVar>,
    instance_id: String,
    reports: Reports,
    /// Pause between attempts to write the report while the shared directory fails.
    retry_delay: Duration,
    /// The last verdict, so that only a change is logged, not every run.
    last_ok: Option<bool>,
}

impl Checker {
    /// `instance_type` (from the metadata) reaches the check as `DT_INSTANCE_TYPE`: the default
    /// check expects as many GPUs as the type has.
    pub fn new(
        cfg: &Config,
        health: &Health,
        identity: &Identity,
        reports: Reports,
        instance_type: Option<String>,
    ) -> Checker {
        let (program, args) = match health.command.split_first() {
            Some((p, rest)) => (PathBuf::from(p), rest.to_vec()),
            // The config refuses an empty command; an empty program fails to start, visibly.
            None => (PathBuf::new(), Vec::new()),
        };
        let mut env = super::env::agent_env(identity, &cfg.shared_dir, &cfg.cluster);
        if let Some(t) = instance_type {
            env.push(("DT_INSTANCE_TYPE".into(), t.into()));
        }
        Checker {
            program,
            sha256: health.sha256,
            args,
            timeout: health.timeout,
            env,
            instance_id: identity.instance_id.clone(),
            reports,
            retry_delay: cfg.agent.retry_delay,
            last_ok: None,
        }
    }

    /// Runs the check once, writes `health_<ip>` and returns whether the worker is healthy.
    pub async fn check(&mut self) -> bool {
        let outcome = program::run(&Program {
            path: &self.program,
            sha256: self.sha256.as_ref(),
            args: &self.args,
            env: self.env.clone(),
            timeout: self.timeout,
            what: "health check",
            echo: false,
            user: None,
            dir: None,
        })
        .await;
        let report = verdict(
            &outcome,
            self.timeout,
            &self.instance_id,
            crate::clock::now_millis(),
        );
        let ok = report.ok;
        self.log_change(&report);
        // Rewritten after every run: logged only when the write fails (every `interval` would
        // fill the log).
        (self.reports)
            .write_retrying(MarkerKind::Health, &report.render(), self.retry_delay)
            .await;
        ok
    }

    fn log_change(&mut self, report: &HealthReport) {
        let was = self.last_ok.replace(report.ok);
        match (was, report.ok) {
            (Some(true), true) | (Some(false), false) => {}
            (None, true) => tracing::info!("health check: passed"),
            (Some(false), true) => tracing::info!("health check: passes again"),
            (_, false) => tracing::warn!(
                gpus_lost = report.gpus_lost,
                "health check: failed: {}",
                report.reason
            ),
        }
    }
}

/// What the check's end says, as the report the master reads.
fn verdict(
    outcome: &Outcome,
    timeout: Duration,
    instance_id: &str,
    at: crate::time::Millis,
) -> HealthReport {
    let last_line = || outcome.tail.iter().rev().find(|l| !l.trim().is_empty());
    let (ok, gpus_lost, reason) = match &outcome.status {
        Status::Exited(0) => (true, false, "ok".to_string()),
        // The check's own words for why; how it ended when it printed nothing.
        Status::Exited(c) => (
            false,
            *c == GPUS_LOST_EXIT,
            last_line().map_or_else(
                || outcome.status.describe(timeout),
                |l| l.trim().to_string(),
            ),
        ),
        // Killed or never started: how it ended says more than whatever it printed last.
        other => (false, false, other.describe(timeout)),
    };
    HealthReport {
        instance_id: instance_id.to_string(),
        ok,
        gpus_lost,
        reason,
        when: crate::time::rfc3339(at).to_string(),
        output_tail: outcome.tail.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: Status, tail: &[&str]) -> Outcome {
        Outcome {
            status,
            tail: tail.iter().map(|l| l.to_string()).collect(),
        }
    }

    fn judge(status: Status, tail: &[&str]) -> HealthReport {
        let at = 1_795_000_000_000;
        verdict(
            &outcome(status, tail),
            Duration::from_secs(120),
            "i-0abc",
            at,
        )
    }

    #[test]
    fn exit_zero_is_healthy_whatever_it_printed() {
        let r = judge(Status::Exited(0), &["gpu count: 8 of 8", "all good"]);
        assert!(r.ok && !r.gpus_lost);
        assert_eq!(r.reason, "ok");
        assert_eq!(r.when, "2026-11-18T11:06:40Z");
        assert_eq!(r.output_tail.len(), 2);
    }

    #[test]
    fn exit_three_is_gpus_lost_with_the_checks_last_line() {
        let r = judge(
            Status::Exited(GPUS_LOST_EXIT),
            &["FAIL x", "7 of 8 GPUs visible", " "],
        );
        assert!(!r.ok && r.gpus_lost);
        assert_eq!(r.reason, "7 of 8 GPUs visible");
    }

    #[test]
    fn other_ends_are_unhealthy_and_say_how_it_ended() {
        let r = judge(Status::Exited(1), &[]);
        assert_eq!(
            (r.ok, r.gpus_lost, r.reason.as_str()),
            (false, false, "exit code 1")
        );
        let r = judge(Status::TimedOut, &["querying GPUs"]);
        assert_eq!(r.reason, "timed out after 2m, killed");
        assert!(!r.gpus_lost);
        let r = judge(Status::Signalled(9), &[]);
        assert_eq!(r.reason, "killed by signal 9");
        let r = judge(Status::NotStarted("program not found: /x".into()), &[]);
        assert_eq!(r.reason, "program not found: /x");
    }
}
