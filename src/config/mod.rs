//! The YAML configuration file shared by `dtd` and `dtctl` (docs/configuration.md).
//!
//! Parsing is strict: unknown keys and bad values are errors that name the key and the line,
//! because a typo in a key that silently falls back to a default can terminate the wrong instance.
//! The file is read into [`raw`] structs, then resolved once into a [`Config`] whose fields hold
//! final values: every default that depends on another key (the state directory, the elastic tag,
//! the ack file, the prepare timeout...) is computed there, so callers only read fields.

mod alerts;
mod capacity;
mod de;
mod disruption;
mod elastic;
mod error;
mod in_place;
mod job_user;
mod join;
mod launch_template;
mod launcher;
mod notify;
mod owner;
mod position;
mod raw;
mod resolve;
mod sections;
#[cfg(test)]
mod tests;
mod users;
mod webhook_url;
mod workers;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::digest::Sha256;
use crate::protocol::host_files::{Format, HostTemplate};
use crate::protocol::identity::Certificates;
pub use alerts::{
    Alert, AlertFormat, Exposure, InClear, InlineSecret, UrlError, Webhook, WebhookFileError,
    WebhookUrl,
};
pub use capacity::{Capacity, Choice};
pub use disruption::{Budget, Disruption, Schedule, Window};
pub use elastic::Elastic;
pub use error::{ConfigError, InvalidConfig, Rule, TemplateUnusable};
pub use in_place::InPlace;
pub use job_user::JobUser;
pub use join::Join;
pub use launch_template::TemplateRef;
pub use launcher::{Launcher, NprocPerNode, Strategy};
pub use notify::Notify;
pub use owner::{JobOwner, JobOwnerError};
pub use sections::{
    Events, Health, HealthLeave, HealthPolicy, JournalConfig, MaxUnhealthy, MetricsConfig,
    Rebalance, Reports, Slots, Stall, StallAction, StragglerAction, Stragglers,
};
pub use users::NoUser;

/// What happens on a new worker before `dtd agent` starts (boot, EFS mount, release download) and
/// the pass that reads its marker: added to the agent's own limit for the default prepare timeout.
pub const PREPARE_MARGIN: Duration = Duration::from_secs(600);

/// The longest a lifecycle hook can hold an instance in a wait state: its GlobalTimeout is 48 hours
/// or 100 times the heartbeat timeout, whichever is smaller (Amazon EC2 Auto Scaling API
/// Reference, "LifecycleHook"). A longer prepare timeout could never be reached.
pub const HOOK_GLOBAL_TIMEOUT_MAX: Duration = Duration::from_secs(48 * 3600);

/// Where the elastic tag key defaults from: `<cluster>-aws-dl-cfn-elastic-worker` (2018 protocol).
pub const ELASTIC_TAG_SUFFIX: &str = "-aws-dl-cfn-elastic-worker";

#[derive(Debug, Clone)]
pub struct Config {
    pub cluster: String,
    /// Otherwise the usual AWS configuration chain decides.
    pub region: Option<String>,
    pub workers: Workers,
    pub shared_dir: PathBuf,
    /// The EFS file system mounted at `shared_dir` (the stack fills it in): lets `dtd` say when a
    /// worker's Availability Zone has no mount target, and `dtctl doctor` check the file system.
    pub shared_fs_id: Option<String>,
    /// How often `dtd` re-reads the file system's mount targets; a worker seen in a zone without
    /// one triggers a read sooner, but never more often than this or once a minute.
    pub shared_fs_refresh: Duration,
    /// Never empty: `<shared_dir>/host_worker` in the mxnet format when the file lists none.
    pub hostfiles: Vec<HostfileSpec>,
    pub job: Job,
    pub events: Events,
    pub interval: Duration,
    /// How often `dtd` lists every worker instance, in the background, to catch whatever the
    /// events missed; between listings it reads only the instances an event or a marker names.
    /// Default one minute with an event queue, `interval` without one (nothing else would say
    /// that an elastic tag was deleted).
    pub resync: Duration,
    /// How often the shared directory is checked for new markers and acknowledgements (a
    /// directory read and two `stat`s); a change starts a pass at once.
    pub shared_poll: Duration,
    /// Where `dtd` keeps its state, status and events journal; default `<shared_dir>/.dt/<cluster>`.
    pub state_dir: PathBuf,
    /// When the events journal rotates and how many rotated files it keeps.
    pub journal: JournalConfig,
    /// When ready workers join: at once, or gathered into one generation (`join.batch`).
    pub join: Join,
    /// How many members may be leaving voluntarily at once (`disruption.budget`).
    pub disruption: Disruption,
    /// Lets the state directory be on the root file system (a demo or a test on one machine);
    /// otherwise `dtd run` refuses it, since a shared file system not yet mounted would leave the
    /// real state behind and start a second one under the mount point.
    pub allow_local_state_dir: bool,
    /// How long one AWS API call may take before it is retried (three attempts per call).
    pub api_timeout: Duration,
    /// How long a pass waits for the shared file system (or the state directory's) before it
    /// reports it stalled and holds.
    pub fs_timeout: Duration,
    /// The master node's private IP: never removed, never terminated, never listed as a worker.
    pub master: Option<IpAddr>,
    /// What `dtd agent` does on each worker.
    pub agent: Agent,
    /// `<shared_dir>/generation`, which the daemon writes after the host files.
    pub generation_file: PathBuf,
    /// Where `/metrics` and `/healthz` are served, if anywhere.
    pub metrics: MetricsConfig,
    /// Webhooks that journal events are posted to, off the control loop.
    pub alerts: Vec<Alert>,
    /// What dtd does with workers whose health check fails.
    pub health: HealthPolicy,
}

#[derive(Debug, Clone)]
pub struct Workers {
    /// At least one of the launch template and the group is set.
    pub launch_template: Option<TemplateRef>,
    pub auto_scaling_group: Option<String>,
    /// Default `<cluster>-aws-dl-cfn-elastic-worker`.
    pub elastic_tag: String,
    pub tags: BTreeMap<String, String>,
    pub min: usize,
    pub max: usize,
    pub base_hosts: Vec<IpAddr>,
    pub slots: Slots,
    pub page_size: i32,
    /// Consecutive prepare-data failures after which group workers are no longer replaced.
    pub max_prepare_failures: u32,
    /// How long a group worker may wait in `Pending:Wait` for a marker before it is abandoned:
    /// `workers.prepare_timeout`, or the agent's own limit plus [`PREPARE_MARGIN`].
    pub prepare_timeout: Duration,
    /// Launch a worker from the template for each unhealthy launch-template worker terminated.
    pub replace_unhealthy: bool,
    /// Launch a worker from the template as soon as a launch-template worker is warned of its
    /// loss (a Spot warning, a rebalance recommendation it is drained for, its Capacity Block's
    /// end), so that the new one prepares while the old one finishes.
    pub replace_interrupted: bool,
    /// What a launched worker may be, in order (`workers.capacity`); `None`: the template's own.
    pub capacity: Option<Capacity>,
    /// Whether the workers' reports must be signed by their agents (`workers.reports`).
    pub reports: Reports,
    /// Where `dtd run` takes the agents' reports (signed reports only).
    pub listen: SocketAddr,
    /// Whose signature on an instance identity document proves an agent's instance: AWS's.
    pub identity: Certificates,
    /// How far from dtd's clock a report's signing time may be.
    pub max_clock_skew: Duration,
    /// Dollars an hour per instance type, for the goodput ledger's cost (`workers.prices`).
    pub prices: BTreeMap<String, f64>,
    /// Whether a Spot worker whose type has no price is priced from EC2's Spot price history.
    pub spot_price_history: bool,
}

/// One host file: a built-in `format`, or a `template` file of the user's own.
#[derive(Debug, Clone)]
pub struct HostfileSpec {
    pub path: PathBuf,
    /// The built-in format; for a template host file, the form `dtctl hosts` prints (mxnet).
    pub format: Format,
    /// The template, read when the config was loaded, so a bad one stops `dtd` at start.
    pub template: Option<HostTemplate>,
}

#[derive(Debug, Clone)]
pub struct Job {
    pub notify: Notify,
    pub ack: Ack,
    /// The job's progress file (`{"step": N, "time": …}`); default `<shared_dir>/progress`.
    /// Read only with `stall` configured.
    pub progress: PathBuf,
    /// Stall detection; off when absent.
    pub stall: Option<Stall>,
    /// Stragglers: found from the members' compute times, then alerted or drained.
    pub stragglers: Stragglers,
    /// Whose files the job's are (see [`Job::owner_uid`]); `None`: their directory's owner.
    pub owner: Option<JobOwner>,
    /// The per-node launcher (torchrun) `dtd agent` runs on every listed node; `None`: the job
    /// starts itself.
    pub launcher: Option<Launcher>,
}

impl Job {
    /// The command run on `stalled` and `stall_cleared`: `stall.command`, else the notify
    /// command; `None` when neither is configured (the stall is only journaled and shown).
    pub fn stall_command(&self) -> Option<&[String]> {
        let stall = self.stall.as_ref()?;
        match (&stall.command, &self.notify) {
            (Some(argv), _) => Some(argv),
            (None, Notify::Command(argv)) => Some(argv),
            (None, _) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Ack {
    /// Who says a generation was applied: the job (its files), or the agents' launcher reports.
    pub by: AckBy,
    /// The 2018 form: lines `SEQ ADDED|REMOVED IP TIME` appended by the job.
    pub host_worker_log: Option<PathBuf>,
    /// The generation form, written by the job or `dtctl ack G`; default `<shared_dir>/ack`.
    pub file: PathBuf,
    pub timeout: Duration,
}

/// `job.ack.by`: whose word a generation's acknowledgement is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckBy {
    /// The job writes the `ack` file (or `host_worker_log`), e.g. through `dt_torch`.
    #[default]
    Job,
    /// A generation counts as applied once every member's launcher reports it running (a
    /// script that writes no ack; needs `job.launcher`).
    Launcher,
}

/// `dtd agent`: prepare-data on boot, the health check, then watch the instance's own metadata for
/// notices while the check runs again every interval.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The prepare-data program (run as an argv, no shell); default
    /// `/usr/local/libexec/dt/prepare-data`, outside the shared directory workers write.
    pub prepare_data: PathBuf,
    /// The digest its bytes must have, if pinned.
    pub prepare_data_sha256: Option<Sha256>,
    /// Extra arguments passed to it after the program.
    pub args: Vec<String>,
    /// One attempt's time limit; the attempt is killed when it is exceeded.
    pub timeout: Duration,
    /// Attempts before a failure marker is written (1 = no retry).
    pub attempts: u32,
    /// Pause between attempts.
    pub retry_delay: Duration,
    /// How often the instance metadata is polled for interruption notices.
    pub imds_interval: Duration,
    /// The health check; `None`: no check, the success marker follows prepare-data at once.
    pub health: Option<Health>,
    /// The agent's signing key, on the worker's own disk (made at the first start).
    pub key_file: PathBuf,
    /// Where the agent sends its reports; `None`: the address `dtd run` publishes in the
    /// shared directory (`protocol::channel::ADDRESS_FILE`).
    pub report_to: Option<SocketAddr>,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        let cfg = Config::parse(&text).map_err(|error| ConfigError::Invalid {
            path: path.to_path_buf(),
            error,
        })?;
        alerts::check_inline_secrets(&cfg.alerts, path).map_err(|error| ConfigError::Exposed {
            path: path.to_path_buf(),
            error,
        })?;
        Ok(cfg)
    }

    /// Parses, validates and resolves; the error names the key and the line.
    pub fn parse(text: &str) -> Result<Config, InvalidConfig> {
        let de = serde_yaml::Deserializer::from_str(text);
        let raw: raw::RawConfig =
            serde_path_to_error::deserialize(de).map_err(|e| InvalidConfig::from_yaml(text, e))?;
        resolve::resolve(raw, text)
    }
}
