//! `dtd agent`, the worker side: learns the instance's identity from its metadata, runs the
//! prepare-data program, then the health check when one is configured, and writes the marker;
//! meanwhile it watches the metadata for interruption notices (a Spot warning can come while data
//! is still being prepared), and once ready runs the health check every interval.

mod channel;
mod env;
pub mod health;
pub mod imds;
pub mod key;
pub mod launcher;
pub mod notice;
mod outbox;
pub mod prepare;
pub mod reports;
pub mod signer;
pub mod watch;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::config::{Config, Health, Reports};
use imds::Imds;
use watch::FailureLog;

/// Reads of `instance-type` before the health check goes without it.
const INSTANCE_TYPE_TRIES: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot install the {0} handler: {1}")]
    Signal(&'static str, std::io::Error),
    #[error("instance id `{0}` is not one (expected letters, digits and '-', like i-0abc123)")]
    InstanceId(String),
    #[error(transparent)]
    Key(#[from] key::KeyError),
}

/// Identity given on the command line, which takes precedence over the metadata's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub ip: Option<IpAddr>,
    pub instance_id: Option<String>,
    /// Where the signing key is kept, instead of `agent.key_file` (several agents on one
    /// machine, in a demo or a test, each need their own).
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Identity {
    pub ip: IpAddr,
    pub instance_id: String,
}

/// Runs until SIGTERM or SIGINT; then stops at once (killing a running prepare-data program).
pub async fn run(cfg: &Config, overrides: Overrides) -> Result<(), AgentError> {
    if let Some(id) = &overrides.instance_id {
        check_instance_id(id)?;
    }
    let mut term = signal(SignalKind::terminate()).map_err(|e| AgentError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| AgentError::Signal("SIGINT", e))?;
    let key_file = (overrides.key_file.clone()).unwrap_or_else(|| cfg.agent.key_file.clone());
    let signer = signer::Signer::new(key::load_or_create(&key_file)?);
    tokio::select! {
        () = work(cfg, overrides, signer) => {}
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    Ok(())
}

async fn work(cfg: &Config, overrides: Overrides, signer: signer::Signer) {
    let imds = Imds::new();
    let identity = identity(&imds, &overrides, cfg.agent.imds_interval).await;
    tracing::info!(ip = %identity.ip, instance_id = %identity.instance_id, shared_dir = %cfg.shared_dir.display(), key = %signer.public(), "dtd agent started");
    let key_file = overrides.key_file.as_ref().unwrap_or(&cfg.agent.key_file);
    let (reports, sender) = match cfg.workers.reports {
        Reports::Unsigned => {
            let files = reports::Reports::files(&cfg.shared_dir, identity.ip, signer.clone());
            (files, None)
        }
        Reports::Signed => {
            let outbox = outbox::Outbox::default();
            let own = own_reports_dir(key_file, &identity.instance_id);
            let to_dtd =
                reports::Reports::to_dtd(&own, identity.ip, signer.clone(), outbox.clone());
            to_dtd.resume();
            let sender = channel::Sender::new(cfg, identity.clone(), signer.clone(), outbox);
            (to_dtd, Some(sender))
        }
    };
    let send = async {
        if let Some(sender) = sender {
            sender.run().await;
        }
    };
    let watcher = watch::Watcher::new(
        imds,
        identity.clone(),
        reports.clone(),
        cfg.agent.imds_interval,
    );
    let spec = prepare::Spec::from_config(cfg, identity.clone(), reports.clone());
    let launch = async {
        if let Some(launcher) = &cfg.job.launcher {
            launcher::run(cfg, launcher, identity, reports).await;
        }
    };
    tokio::join!(send, watcher.run(), prepare_then_check(cfg, &spec), launch);
}

/// This worker's copies of its reports: beside the agent's key, on its own disk, per instance
/// (a disk image made from a worker does not speak for the next).
fn own_reports_dir(key_file: &std::path::Path, instance_id: &str) -> PathBuf {
    let dir = key_file.parent().unwrap_or(std::path::Path::new("."));
    dir.join("reports").join(instance_id)
}

/// Where prepare-data left this instance.
enum Readiness {
    /// An earlier run of the agent wrote the success marker.
    AlreadyPrepared,
    /// Just prepared: the success marker is still to write.
    Prepared(prepare::Prepared),
    /// The failure marker is written: the master replaces the worker, nothing more to do.
    Failed,
}

/// Prepares the data (unless an earlier run of the agent did), then, with a health check, runs it
/// before the success marker and every interval after.
async fn prepare_then_check(cfg: &Config, spec: &prepare::Spec) {
    let readiness = if prepare::already_prepared(spec) {
        tracing::info!("prepare-data: the success marker is already there; not running it again");
        Readiness::AlreadyPrepared
    } else {
        match prepare::prepare(spec).await {
            Some(done) => Readiness::Prepared(done),
            None => Readiness::Failed,
        }
    };
    match (readiness, &cfg.agent.health) {
        (Readiness::Failed, _) | (Readiness::AlreadyPrepared, None) => {}
        (Readiness::Prepared(done), None) => prepare::write_success(spec, done).await,
        (readiness, Some(health)) => check_forever(cfg, spec, health, readiness).await,
    }
}

/// Runs the check at once and then every interval. A worker just prepared joins only if the
/// first check passes; one that fails it never joins (the master replaces it), and its checks go
/// on so that the report stays current.
async fn check_forever(cfg: &Config, spec: &prepare::Spec, health: &Health, readiness: Readiness) {
    // Its own client: the watch owns the other, and must not wait for this one.
    let instance_type = read_instance_type(&Imds::new()).await;
    let reports = spec.reports.clone();
    let mut checker = health::Checker::new(cfg, health, &spec.identity, reports, instance_type);
    // Runs start every interval (the config keeps the timeout shorter), so a report is never
    // older than the interval plus one run.
    let mut ticks = tokio::time::interval(health.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let healthy = checker.check().await;
    if let Readiness::Prepared(done) = readiness {
        if healthy {
            prepare::write_success(spec, done).await;
        } else {
            tracing::warn!(
                "health check failed before the worker joined: no success marker; it will not join"
            );
        }
    }
    loop {
        ticks.tick().await;
        checker.check().await;
    }
}

/// The instance type, for the check's expected GPU count: a few tries, then the check runs
/// without it (the default check then says it skipped the count).
async fn read_instance_type(imds: &Imds) -> Option<String> {
    let mut failures = FailureLog::default();
    for _ in 0..INSTANCE_TYPE_TRIES {
        if let Some(text) = read(imds, "instance-type", &mut failures).await {
            let t = text.trim();
            if is_instance_type(t) {
                return Some(t.to_string());
            }
            failures.failed(
                "instance-type",
                &invalid("instance-type", "is not an instance type"),
            );
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tracing::warn!("the health check runs without DT_INSTANCE_TYPE: the metadata did not say the instance type");
    None
}

/// It reaches the check's environment: keep it to what EC2 names types with (`p4d.24xlarge`).
fn is_instance_type(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// Waits until both the IP and the instance id are known; the metadata is retried for ever.
async fn identity(imds: &Imds, overrides: &Overrides, interval: Duration) -> Identity {
    let mut failures = FailureLog::default();
    loop {
        let ip = match overrides.ip {
            Some(ip) => Some(ip),
            None => read_ip(imds, &mut failures).await,
        };
        let id = match &overrides.instance_id {
            Some(id) => Some(id.clone()),
            None => read_instance_id(imds, &mut failures).await,
        };
        if let (Some(ip), Some(instance_id)) = (ip, id) {
            return Identity { ip, instance_id };
        }
        tokio::time::sleep(interval).await;
    }
}

async fn read_ip(imds: &Imds, failures: &mut FailureLog) -> Option<IpAddr> {
    let text = read(imds, "local-ipv4", failures).await?;
    match text.trim().parse() {
        Ok(ip) => Some(ip),
        Err(_) => {
            failures.failed("local-ipv4", &invalid("local-ipv4", "is not an IP address"));
            None
        }
    }
}

async fn read_instance_id(imds: &Imds, failures: &mut FailureLog) -> Option<String> {
    let text = read(imds, "instance-id", failures).await?;
    let id = text.trim();
    match check_instance_id(id) {
        Ok(()) => Some(id.to_string()),
        Err(_) => {
            failures.failed(
                "instance-id",
                &invalid("instance-id", "is not an instance id"),
            );
            None
        }
    }
}

async fn read(imds: &Imds, path: &'static str, failures: &mut FailureLog) -> Option<String> {
    match imds.require(path).await {
        Ok(v) => {
            failures.ok(path);
            Some(v)
        }
        Err(e) => {
            failures.failed(path, &e);
            None
        }
    }
}

fn invalid(path: &str, what: &str) -> imds::ImdsFailure {
    imds::ImdsFailure {
        path: format!("/latest/meta-data/{path}"),
        class: "invalid".into(),
        message: format!("the metadata's {path} {what}"),
    }
}

/// The id reaches the environment of a program and JSON; keep it to what EC2 issues.
fn check_instance_id(id: &str) -> Result<(), AgentError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(AgentError::InstanceId(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_ec2_names_instance_types_with_reaches_the_check() {
        for good in ["p4d.24xlarge", "p6-b200.48xlarge", "g5.xlarge"] {
            assert!(is_instance_type(good), "{good}");
        }
        for bad in [
            "",
            "p4d 24xlarge",
            "$(reboot)",
            "p4d.24xlarge\n",
            &"x".repeat(65),
        ] {
            assert!(!is_instance_type(bad), "{bad:?}");
        }
    }
}
