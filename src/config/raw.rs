//! The configuration file as written: serde input, with the defaults that are constants. Keys
//! whose default depends on another key stay `None` here; [`super::resolve`] fills them in.
//!
//! `expecting` keeps type errors naming the section as users have seen it ("expected struct
//! Agent", not RawAgent).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::de::{
    cluster_name, duration, file_system_id, optional_duration, prepare_data_sha256, prepare_timeout,
};
use super::{
    Alert, Events, Health, HealthPolicy, JournalConfig, MetricsConfig, Notify, Slots, Stall,
};
use crate::digest::Sha256;
use crate::hostfile::Format;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "struct Config")]
pub(super) struct RawConfig {
    #[serde(deserialize_with = "cluster_name")]
    pub cluster: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(deserialize_with = "checked_workers")]
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkers {
    #[serde(default)]
    pub launch_template: Option<super::TemplateRef>,
    #[serde(default)]
    pub auto_scaling_group: Option<String>,
    #[serde(default)]
    pub elastic_tag: Option<String>,
    #[serde(default = "default_worker_tags")]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub min: usize,
    pub max: usize,
    #[serde(default)]
    pub base_hosts: Vec<IpAddr>,
    #[serde(default)]
    pub slots: Option<Slots>,
    #[serde(default = "default_page_size")]
    pub page_size: i32,
    #[serde(default = "default_max_prepare_failures")]
    pub max_prepare_failures: u32,
    #[serde(default, deserialize_with = "prepare_timeout")]
    pub prepare_timeout: Option<Duration>,
    #[serde(default)]
    pub replace_unhealthy: bool,
    #[serde(default)]
    pub capacity: Option<super::Capacity>,
    #[serde(default)]
    pub reports: super::Reports,
}

/// The section's own rules, checked while it is parsed so the error names `workers` and its line.
fn checked_workers<'de, D: Deserializer<'de>>(d: D) -> Result<RawWorkers, D::Error> {
    let workers = RawWorkers::deserialize(d)?;
    workers.check().map_err(serde::de::Error::custom)?;
    Ok(workers)
}

/// Why the `workers` section is refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum WorkersError {
    #[error("one of launch_template or auto_scaling_group is required")]
    NoSource,
    #[error("max must be at least 1")]
    NoMax,
    #[error("min ({min}) is greater than max ({max})")]
    MinAboveMax { min: usize, max: usize },
    #[error("{n} base_hosts do not fit under max ({max})")]
    BaseHostsAboveMax { n: usize, max: usize },
    #[error("base_hosts lists {0} twice")]
    BaseHostTwice(IpAddr),
    #[error("page_size must be within 5..=1000, got {0}")]
    PageSize(i32),
    #[error("max_prepare_failures must be at least 1")]
    NoPrepareFailure,
    #[error(
        "replace_unhealthy launches from launch_template, which is not set (group workers are \
         replaced by their group)"
    )]
    ReplaceWithoutTemplate,
    #[error(
        "capacity overrides launch_template, which is not set (a group's choices are its mixed \
         instances policy)"
    )]
    CapacityWithoutTemplate,
    #[error("tags must name at least one worker tag (default NodeType: Worker)")]
    NoTags,
}

impl RawWorkers {
    fn check(&self) -> Result<(), WorkersError> {
        if self.launch_template.is_none() && self.auto_scaling_group.is_none() {
            return Err(WorkersError::NoSource);
        }
        if self.max == 0 {
            return Err(WorkersError::NoMax);
        }
        if self.min > self.max {
            let (min, max) = (self.min, self.max);
            return Err(WorkersError::MinAboveMax { min, max });
        }
        self.check_base_hosts()?;
        if !(5..=1000).contains(&self.page_size) {
            return Err(WorkersError::PageSize(self.page_size));
        }
        if self.max_prepare_failures == 0 {
            return Err(WorkersError::NoPrepareFailure);
        }
        if self.replace_unhealthy && self.launch_template.is_none() {
            return Err(WorkersError::ReplaceWithoutTemplate);
        }
        if self.capacity.is_some() && self.launch_template.is_none() {
            return Err(WorkersError::CapacityWithoutTemplate);
        }
        if self.tags.is_empty() {
            return Err(WorkersError::NoTags);
        }
        Ok(())
    }

    fn check_base_hosts(&self) -> Result<(), WorkersError> {
        let hosts = &self.base_hosts;
        if hosts.len() > self.max {
            let (n, max) = (hosts.len(), self.max);
            return Err(WorkersError::BaseHostsAboveMax { n, max });
        }
        let mut seen = std::collections::BTreeSet::new();
        match hosts.iter().find(|ip| !seen.insert(**ip)) {
            Some(dup) => Err(WorkersError::BaseHostTwice(*dup)),
            None => Ok(()),
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
    /// Whose files the job's are; default: the owner of their directory.
    #[serde(default)]
    pub owner: Option<super::owner::JobOwner>,
    #[serde(default)]
    pub launcher: Option<super::launcher::Launcher>,
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
        }
    }
}

impl RawAgent {
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

fn default_max_prepare_failures() -> u32 {
    5
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

fn default_page_size() -> i32 {
    1000
}

fn default_worker_tags() -> BTreeMap<String, String> {
    BTreeMap::from([("NodeType".to_string(), "Worker".to_string())])
}
