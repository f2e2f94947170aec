//! The configuration file as written: serde input, with the defaults that are constants. Keys
//! whose default depends on another key stay `None` here; [`super::resolve`] fills them in.
//!
//! `expecting` keeps type errors naming the section as users have seen it ("expected struct
//! Agent", not RawAgent).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::de::{cluster_name, duration, file_system_id, optional_duration, prepare_data_sha256};
use super::error::Rule;
pub(super) use super::workers::RawWorkers;
use super::{Alert, Events, Health, HealthPolicy, JournalConfig, MetricsConfig, Notify, Stall};
use crate::digest::Sha256;
use crate::protocol::host_files::Format;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "struct Config")]
pub(super) struct RawConfig {
    #[serde(deserialize_with = "cluster_name")]
    pub cluster: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(deserialize_with = "super::workers::checked")]
    pub workers: RawWorkers,
    pub shared_dir: PathBuf,
    #[serde(default, deserialize_with = "file_system_id")]
    pub shared_fs_id: Option<String>,
    #[serde(default = "default_shared_fs_refresh", deserialize_with = "duration")]
    pub shared_fs_refresh: Duration,
    #[serde(default)]
    pub hostfiles: Vec<RawHostfile>,
    #[serde(default)]
    pub job: RawJob,
    #[serde(default)]
    pub events: Events,
    #[serde(default = "default_interval", deserialize_with = "duration")]
    pub interval: Duration,
    #[serde(default, deserialize_with = "optional_duration")]
    pub resync: Option<Duration>,
    #[serde(default = "default_shared_poll", deserialize_with = "duration")]
    pub shared_poll: Duration,
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub journal: JournalConfig,
    #[serde(default)]
    pub join: super::Join,
    #[serde(default)]
    pub disruption: super::Disruption,
    #[serde(default)]
    pub allow_local_state_dir: bool,
    #[serde(default = "default_api_timeout", deserialize_with = "duration")]
    pub api_timeout: Duration,
    #[serde(default = "default_fs_timeout", deserialize_with = "duration")]
    pub fs_timeout: Duration,
    #[serde(default)]
    pub master: Option<IpAddr>,
    #[serde(default)]
    pub agent: RawAgent,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub alerts: Vec<Alert>,
    #[serde(default)]
    pub health: HealthPolicy,
}

/// The top level's own rules.
impl RawConfig {
    pub(super) fn check_shared_dir(&self) -> Result<(), Rule> {
        match self.shared_dir.is_absolute() {
            true => Ok(()),
            false => Err(Rule::SharedDirRelative),
        }
    }

    pub(super) fn check_periods(&self) -> Result<(), Rule> {
        if self.resync.is_some_and(|r| r < self.interval) {
            return Err(Rule::ResyncBelowInterval);
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&self.shared_poll) {
            return Err(Rule::SharedPoll);
        }
        if self.shared_fs_refresh < Duration::from_secs(1) {
            return Err(Rule::SharedFsRefresh);
        }
        Ok(())
    }

    pub(super) fn check_master(&self) -> Result<(), Rule> {
        match self.master {
            Some(master) if self.workers.base_hosts.contains(&master) => {
                Err(Rule::MasterIsBaseHost(master))
            }
            _ => Ok(()),
        }
    }
}

/// One host file: exactly one of a built-in format and a template file.
#[derive(Debug, Deserialize)]
#[serde(try_from = "RawHostfileSpec")]
pub(super) struct RawHostfile {
    pub path: PathBuf,
    pub form: HostfileForm,
}

#[derive(Debug)]
pub(super) enum HostfileForm {
    Format(Format),
    /// The template file's path, read when the config is resolved.
    Template(PathBuf),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHostfileSpec {
    path: PathBuf,
    #[serde(default)]
    format: Option<Format>,
    #[serde(default)]
    template: Option<PathBuf>,
}

/// A host file with both a format and a template, or neither.
#[derive(Debug, thiserror::Error)]
#[error(
    "a host file needs exactly one of format (mxnet, mpi, deepspeed, horovod) or template (a file)"
)]
pub(super) struct NotOneForm;

impl TryFrom<RawHostfileSpec> for RawHostfile {
    type Error = NotOneForm;

    fn try_from(r: RawHostfileSpec) -> Result<Self, NotOneForm> {
        let form = match (r.format, r.template) {
            (Some(format), None) => HostfileForm::Format(format),
            (None, Some(template)) => HostfileForm::Template(template),
            _ => return Err(NotOneForm),
        };
        Ok(RawHostfile { path: r.path, form })
    }
}

impl RawHostfile {
    pub(super) fn check(&self) -> Result<(), Rule> {
        match self.path.is_absolute() && self.path.file_name().is_some() {
            true => Ok(()),
            false => Err(Rule::HostfileNotAFile(self.path.clone())),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "struct Job")]
pub(super) struct RawJob {
    #[serde(default)]
    pub notify: Notify,
    #[serde(default)]
    pub ack: RawAck,
    /// The job's progress file; default `<shared_dir>/progress`.
    #[serde(default)]
    pub progress: Option<PathBuf>,
    #[serde(default)]
    pub stall: Option<Stall>,
    #[serde(default)]
    pub stragglers: Option<super::sections::RawStragglers>,
    /// Whose files the job's are; default: the owner of their directory.
    #[serde(default)]
    pub owner: Option<super::owner::JobOwner>,
    #[serde(default)]
    pub launcher: Option<super::launcher::Launcher>,
}

impl RawJob {
    pub(super) fn check_progress(&self) -> Result<(), Rule> {
        match self.progress.as_ref().is_some_and(|p| !p.is_absolute()) {
            true => Err(Rule::ProgressRelative),
            false => Ok(()),
        }
    }

    /// The launcher's settings, and the acknowledgement by launchers only with a launcher.
    pub(super) fn check(&self) -> Result<(), Rule> {
        match &self.launcher {
            Some(launcher) => launcher.check(),
            None if self.ack.by == super::AckBy::Launcher => Err(Rule::AckByLauncherAlone),
            None => Ok(()),
        }
    }
}

/// A key left out takes its value from [`Default`].
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields, expecting = "struct Ack")]
pub(super) struct RawAck {
    pub by: super::AckBy,
    pub host_worker_log: Option<PathBuf>,
    pub file: Option<PathBuf>,
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
}

impl Default for RawAck {
    fn default() -> Self {
        RawAck {
            by: super::AckBy::Job,
            host_worker_log: None,
            file: None,
            timeout: Duration::from_secs(600),
        }
    }
}

/// A key left out takes its value from [`Default`].
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields, expecting = "struct Agent")]
pub(super) struct RawAgent {
    pub prepare_data: Option<PathBuf>,
    #[serde(deserialize_with = "prepare_data_sha256")]
    pub prepare_data_sha256: Option<Sha256>,
    pub args: Vec<String>,
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    pub attempts: u32,
    #[serde(deserialize_with = "duration")]
    pub retry_delay: Duration,
    #[serde(deserialize_with = "duration")]
    pub imds_interval: Duration,
    pub health: Option<Health>,
    pub key_file: Option<PathBuf>,
    pub report_to: Option<std::net::SocketAddr>,
}

impl Default for RawAgent {
    fn default() -> Self {
        RawAgent {
            prepare_data: None,
            prepare_data_sha256: None,
            args: Vec::new(),
            timeout: Duration::from_secs(3600),
            attempts: 3,
            retry_delay: Duration::from_secs(10),
            imds_interval: Duration::from_secs(1),
            health: None,
            key_file: None,
            report_to: None,
        }
    }
}

impl RawAgent {
    pub(super) fn check_attempts(&self) -> Result<(), Rule> {
        match self.attempts {
            0 => Err(Rule::NoAttempt),
            _ => Ok(()),
        }
    }

    /// The longest `dtd agent` takes before it writes a marker: every attempt running into its
    /// timeout, with the pauses between them, then the health check running into its own (the
    /// success marker waits for the first check to pass).
    pub fn limit(&self) -> Duration {
        let pauses = (self.retry_delay).saturating_mul(self.attempts.saturating_sub(1));
        let check = self.health.as_ref().map_or(Duration::ZERO, |h| h.timeout);
        (self.timeout.saturating_mul(self.attempts))
            .saturating_add(pauses)
            .saturating_add(check)
    }
}

fn default_shared_fs_refresh() -> Duration {
    Duration::from_secs(300)
}

fn default_interval() -> Duration {
    Duration::from_secs(2)
}

/// A directory read and two `stat`s five times a second: cheap, and a join or an acknowledgement
/// waits 0.1 s for it on average.
fn default_shared_poll() -> Duration {
    Duration::from_millis(200)
}

fn default_fs_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_api_timeout() -> Duration {
    Duration::from_secs(10)
}
