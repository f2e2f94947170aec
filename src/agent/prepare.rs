//! Runs the prepare-data program with a time limit and a bounded number of attempts, then writes
//! `prepare_data_success_<ip>` or `prepare_data_failed_<ip>` for the master.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::reports::Reports;
use super::Identity;
use crate::config::Config;
use crate::digest::Sha256;
use crate::program::{self, Outcome, Program, Status};
use crate::protocol::markers::MarkerKind;
use crate::protocol::report::{self, FailureReport, SuccessReport};

pub struct Spec {
    pub program: PathBuf,
    pub sha256: Option<Sha256>,
    pub args: Vec<String>,
    pub timeout: Duration,
    pub attempts: u32,
    pub retry_delay: Duration,
    pub shared_dir: PathBuf,
    pub cluster: String,
    pub identity: Identity,
    pub reports: Reports,
}

impl Spec {
    pub fn from_config(cfg: &Config, identity: Identity, reports: Reports) -> Spec {
        let a = &cfg.agent;
        Spec {
            program: a.prepare_data.clone(),
            sha256: a.prepare_data_sha256,
            args: a.args.clone(),
            timeout: a.timeout,
            attempts: a.attempts.max(1),
            retry_delay: a.retry_delay,
            shared_dir: cfg.shared_dir.clone(),
            cluster: cfg.cluster.clone(),
            identity,
            reports,
        }
    }

    /// This agent's own report of `kind` for this instance, if there is one. Whatever else is
    /// there (an earlier owner's of this IP, one another worker put under this name) is
    /// removed: it must not make this instance look ready, nor failed.
    fn own_report(&self, kind: MarkerKind) -> bool {
        let mine = &self.identity.instance_id;
        match self.reports.read_own(kind) {
            Ok(None) => false,
            Ok(Some(body)) if report::owner(&body).as_ref() == Some(mine) => true,
            Ok(Some(_)) => {
                self.reports.remove(kind);
                false
            }
            Err(why) => {
                tracing::info!("{why}: not taken for this instance's");
                self.reports.remove(kind);
                false
            }
        }
    }
}

/// Whether this instance already prepared its data (the agent restarted): only a success
/// marker this agent signed for this instance says so.
pub fn already_prepared(spec: &Spec) -> bool {
    spec.own_report(MarkerKind::Failed);
    spec.own_report(MarkerKind::Success)
}

/// A run of prepare-data that succeeded: what its success marker says.
pub struct Prepared {
    attempts: u32,
    took: Duration,
    tail: Vec<String>,
}

/// Runs the attempts; when all fail, writes the failure marker and returns `None`. A refused
/// program is not tried again: it stays what it is until someone fixes it, and the sooner the
/// marker says why, the sooner the master (and `dtctl status`) does. The success marker is the
/// caller's to write ([`write_success`]): with a health check, only once the check passed.
pub async fn prepare(spec: &Spec) -> Option<Prepared> {
    let started = Instant::now();
    let mut last = None;
    for n in 1..=spec.attempts {
        tracing::info!(attempt = n, of = spec.attempts, program = %spec.program.display(), "prepare-data: starting");
        let attempt = run_attempt(spec, n).await;
        if attempt.status == Status::Exited(0) {
            tracing::info!(attempt = n, elapsed = ?started.elapsed(), "prepare-data: succeeded");
            return Some(Prepared {
                attempts: n,
                took: started.elapsed(),
                tail: attempt.tail,
            });
        }
        tracing::warn!(
            attempt = n,
            of = spec.attempts,
            last_output = attempt.tail.last().map_or("", String::as_str),
            "prepare-data: failed: {}",
            attempt.status.describe(spec.timeout)
        );
        let refused = matches!(attempt.status, Status::Refused(_));
        last = Some((n, attempt));
        if refused {
            break;
        }
        if n < spec.attempts {
            tokio::time::sleep(spec.retry_delay).await;
        }
    }
    if let Some((attempts, attempt)) = last {
        write_failure(spec, started.elapsed(), attempts, attempt).await;
    }
    None
}

/// The worker is ready: the master adds it at its next pass.
pub async fn write_success(spec: &Spec, done: Prepared) {
    let json = SuccessReport {
        instance_id: spec.identity.instance_id.clone(),
        attempts: done.attempts,
        duration_s: seconds(done.took),
        output_tail: done.tail,
    }
    .render();
    let reports = &spec.reports;
    reports
        .write_retrying(MarkerKind::Success, &json, spec.retry_delay)
        .await;
    tracing::info!(path = %reports.path(MarkerKind::Success).display(), "wrote marker");
    reports.remove(MarkerKind::Failed);
}

async fn write_failure(spec: &Spec, took: Duration, attempts: u32, attempt: Outcome) {
    let status = attempt.status;
    let json = FailureReport {
        instance_id: spec.identity.instance_id.clone(),
        exit_code: match status {
            Status::Exited(c) => Some(c),
            _ => None,
        },
        signal: match status {
            Status::Signalled(s) => Some(s),
            _ => None,
        },
        timed_out: status == Status::TimedOut,
        attempts,
        duration_s: seconds(took),
        output_tail: attempt.tail,
        error: match status {
            Status::NotStarted(why) | Status::Refused(why) => Some(why),
            _ => None,
        },
    }
    .render();
    let path = spec.reports.path(MarkerKind::Failed);
    (spec.reports)
        .write_retrying(MarkerKind::Failed, &json, spec.retry_delay)
        .await;
    tracing::warn!(path = %path.display(), "prepare-data: failed after {attempts} attempt(s); wrote the failure marker");
}

fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

async fn run_attempt(spec: &Spec, n: u32) -> Outcome {
    let mut env = super::env::agent_env(&spec.identity, &spec.shared_dir, &spec.cluster);
    env.push(("DT_ATTEMPT".into(), n.to_string().into()));
    program::run(&Program {
        path: &spec.program,
        sha256: spec.sha256.as_ref(),
        args: &spec.args,
        env,
        timeout: spec.timeout,
        what: "prepare-data",
        echo: false,
        user: None,
        dir: None,
    })
    .await
}
