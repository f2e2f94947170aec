//! The YAML configuration file shared by `dtd` and `dtctl` (DESIGN.md, "Configuration").
//!
//! Parsing is strict: unknown keys and bad values are errors that name the key and the line,
//! because a typo in a key that silently falls back to a default can terminate the wrong instance.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::hostfile::{Format, HostTemplate};

/// What happens on a new worker before `dtd agent` starts (boot, EFS mount, release download) and
/// the pass that reads its marker: added to the agent's own limit for the default prepare timeout.
pub const PREPARE_MARGIN: Duration = Duration::from_secs(600);

/// The longest a lifecycle hook can hold an instance in a wait state: its GlobalTimeout is 48 hours
/// or 100 times the heartbeat timeout, whichever is smaller (Amazon EC2 Auto Scaling API
/// Reference, "LifecycleHook"). A longer prepare timeout could never be reached.
pub const HOOK_GLOBAL_TIMEOUT_MAX: Duration = Duration::from_secs(48 * 3600);

/// Where the elastic tag key defaults from: `<cluster>-aws-dl-cfn-elastic-worker` (2018 protocol).
pub const ELASTIC_TAG_SUFFIX: &str = "-aws-dl-cfn-elastic-worker";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(deserialize_with = "cluster_name")]
    pub cluster: String,
    #[serde(default)]
    pub region: Option<String>,
    pub workers: Workers,
    pub shared_dir: PathBuf,
    /// The EFS file system mounted at `shared_dir` (the stack fills it in): lets `dtd` say when a
    /// worker's Availability Zone has no mount target, and `dtctl doctor` check the file system.
    #[serde(default, deserialize_with = "file_system_id")]
    pub shared_fs_id: Option<String>,
    /// How often `dtd` re-reads the file system's mount targets; a worker seen in a zone without
    /// one triggers a read sooner, but never more often than this or once a minute.
    #[serde(default = "default_shared_fs_refresh", deserialize_with = "duration")]
    pub shared_fs_refresh: Duration,
    #[serde(default)]
    pub hostfiles: Vec<HostfileSpec>,
    #[serde(default)]
    pub job: Job,
    #[serde(default)]
    pub events: Events,
    #[serde(default = "default_interval", deserialize_with = "duration")]
    pub interval: Duration,
    /// Where `dtd` keeps its state, status and events journal; default `<shared_dir>/.dt/<cluster>`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// Lets the state directory be on the root file system (a demo or a test on one machine);
    /// otherwise `dtd run` refuses it, since a shared file system not yet mounted would leave the
    /// real state behind and start a second one under the mount point.
    #[serde(default)]
    pub allow_local_state_dir: bool,
    /// How long one AWS API call may take before it is retried (three attempts per call).
    #[serde(default = "default_api_timeout", deserialize_with = "duration")]
    pub api_timeout: Duration,
    /// How long a pass waits for the shared file system (or the state directory's) before it
    /// reports it stalled and holds.
    #[serde(default = "default_fs_timeout", deserialize_with = "duration")]
    pub fs_timeout: Duration,
    /// The master node's private IP: never removed, never terminated, never listed as a worker.
    #[serde(default)]
    pub master: Option<IpAddr>,
    /// What `dtd agent` does on each worker.
    #[serde(default)]
    pub agent: Agent,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawWorkers")]
pub struct Workers {
    pub launch_template: Option<String>,
    pub auto_scaling_group: Option<String>,
    pub elastic_tag: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub min: usize,
    pub max: usize,
    pub base_hosts: Vec<IpAddr>,
    pub slots: Slots,
    pub page_size: i32,
    /// Consecutive prepare-data failures after which group workers are no longer replaced.
    pub max_prepare_failures: u32,
    /// How long a group worker may wait in `Pending:Wait` for a marker before it is abandoned;
    /// `None` here, resolved from the agent's limits by [`Config::prepare_timeout`].
    pub prepare_timeout: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkers {
    #[serde(default)]
    launch_template: Option<String>,
    #[serde(default)]
    auto_scaling_group: Option<String>,
    #[serde(default)]
    elastic_tag: Option<String>,
    #[serde(default = "default_worker_tags")]
    tags: BTreeMap<String, String>,
    #[serde(default)]
    min: usize,
    max: usize,
    #[serde(default)]
    base_hosts: Vec<IpAddr>,
    #[serde(default)]
    slots: Slots,
    #[serde(default = "default_page_size")]
    page_size: i32,
    #[serde(default = "default_max_prepare_failures")]
    max_prepare_failures: u32,
    #[serde(default, deserialize_with = "prepare_timeout")]
    prepare_timeout: Option<Duration>,
}

impl TryFrom<RawWorkers> for Workers {
    type Error = String;

    fn try_from(r: RawWorkers) -> Result<Self, String> {
        if r.launch_template.is_none() && r.auto_scaling_group.is_none() {
            return Err("one of launch_template or auto_scaling_group is required".into());
        }
        if r.max == 0 {
            return Err("max must be at least 1".into());
        }
        if r.min > r.max {
            return Err(format!("min ({}) is greater than max ({})", r.min, r.max));
        }
        if r.base_hosts.len() > r.max {
            return Err(format!(
                "{} base_hosts do not fit under max ({})",
                r.base_hosts.len(),
                r.max
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = r.base_hosts.iter().find(|ip| !seen.insert(**ip)) {
            return Err(format!("base_hosts lists {dup} twice"));
        }
        if !(5..=1000).contains(&r.page_size) {
            return Err(format!(
                "page_size must be within 5..=1000, got {}",
                r.page_size
            ));
        }
        if r.max_prepare_failures == 0 {
            return Err("max_prepare_failures must be at least 1".into());
        }
        if r.tags.is_empty() {
            return Err("tags must name at least one worker tag (default NodeType: Worker)".into());
        }
        Ok(Workers {
            launch_template: r.launch_template,
            auto_scaling_group: r.auto_scaling_group,
            elastic_tag: r.elastic_tag,
            tags: r.tags,
            min: r.min,
            max: r.max,
            base_hosts: r.base_hosts,
            slots: r.slots,
            page_size: r.page_size,
            max_prepare_failures: r.max_prepare_failures,
            prepare_timeout: r.prepare_timeout,
        })
    }
}

/// Slots per worker: one number for every worker, or per instance type with a default.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Slots {
    All(u32),
    ByType(BTreeMap<String, u32>),
}

impl Default for Slots {
    fn default() -> Self {
        Slots::All(1)
    }
}

impl Slots {
    pub fn for_type(&self, instance_type: &str) -> u32 {
        match self {
            Slots::All(n) => *n,
            Slots::ByType(map) => map
                .get(instance_type)
                .or_else(|| map.get("default"))
                .copied()
                .unwrap_or(1),
        }
    }
}

/// One host file: a built-in `format`, or a `template` file of the user's own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawHostfileSpec")]
pub struct HostfileSpec {
    pub path: PathBuf,
    /// The built-in format; for a template host file, the form `dtctl hosts` prints (mxnet).
    pub format: Format,
    /// Path of the template file; `template` holds it once the config is loaded.
    pub template_path: Option<PathBuf>,
    pub template: Option<HostTemplate>,
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

impl TryFrom<RawHostfileSpec> for HostfileSpec {
    type Error = String;

    fn try_from(r: RawHostfileSpec) -> Result<Self, String> {
        match (r.format, r.template) {
            (Some(format), None) => Ok(HostfileSpec {
                path: r.path,
                format,
                template_path: None,
                template: None,
            }),
            (None, Some(template)) => Ok(HostfileSpec {
                path: r.path,
                format: Format::Mxnet,
                template_path: Some(template),
                template: None,
            }),
            _ => Err(
                "a host file needs exactly one of format (mxnet, mpi, deepspeed, horovod) or template (a file)"
                    .into(),
            ),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    #[serde(default)]
    pub notify: Notify,
    #[serde(default)]
    pub ack: Ack,
}

/// How the job hears about a new membership (DESIGN.md, "The job contract").
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Notify {
    #[default]
    None,
    Signal {
        signal: nix::sys::signal::Signal,
        pidfile: PathBuf,
        /// A string the process's command line must contain before it is signalled.
        expect: Option<String>,
    },
    Command(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    #[serde(default)]
    signal: Option<String>,
    #[serde(default)]
    pidfile: Option<PathBuf>,
    #[serde(default)]
    expect: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for Notify {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Word(String),
            Map(RawNotify),
        }
        match Either::deserialize(d)? {
            Either::Word(w) if w == "none" => Ok(Notify::None),
            Either::Word(w) => Err(D::Error::custom(format!(
                "unknown notify `{w}`: use none, {{ signal, pidfile }} or {{ command: [..] }}"
            ))),
            Either::Map(RawNotify {
                signal: Some(sig),
                pidfile: Some(pidfile),
                expect,
                command: None,
            }) => Ok(Notify::Signal {
                signal: parse_signal(&sig).map_err(D::Error::custom)?,
                pidfile,
                expect: expect_text(expect).map_err(D::Error::custom)?,
            }),
            Either::Map(RawNotify {
                signal: None,
                pidfile: None,
                expect: None,
                command: Some(argv),
            }) if !argv.is_empty() && !argv[0].is_empty() => Ok(Notify::Command(argv)),
            Either::Map(_) => Err(D::Error::custom(
                "notify needs exactly { signal, pidfile[, expect] } or { command: [program, args..] }",
            )),
        }
    }
}

fn expect_text(expect: Option<String>) -> Result<Option<String>, String> {
    match expect {
        Some(e) if e.trim().is_empty() => {
            Err("expect must not be empty: it is a string the job's command line contains".into())
        }
        other => Ok(other),
    }
}

fn parse_signal(name: &str) -> Result<nix::sys::signal::Signal, String> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse()
        .map_err(|_| format!("unknown signal `{name}` (e.g. SIGUSR1, SIGHUP)"))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    /// The 2018 form: lines `SEQ ADDED|REMOVED IP TIME` appended by the job.
    #[serde(default)]
    pub host_worker_log: Option<PathBuf>,
    /// The generation form, written by the job or `dtctl ack G`; default `<shared_dir>/ack`.
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default = "default_ack_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
}

impl Default for Ack {
    fn default() -> Self {
        Ack {
            host_worker_log: None,
            file: None,
            timeout: default_ack_timeout(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Events {
    /// EventBridge -> SQS queue of interruption, rebalance, state-change and lifecycle events.
    #[serde(default)]
    pub queue_url: Option<String>,
    /// What a rebalance recommendation does: drain the worker now, or only report it.
    #[serde(default)]
    pub rebalance: Rebalance,
    /// SQS long-poll wait per receive (1s..=20s).
    #[serde(default = "default_queue_wait", deserialize_with = "duration")]
    pub wait: Duration,
    /// How long before an EC2 scheduled change starts its worker is drained: AWS announces
    /// retirements days or weeks ahead, and the GPUs are worth using until then.
    #[serde(
        default = "default_scheduled_change_lead",
        deserialize_with = "duration"
    )]
    pub scheduled_change_lead: Duration,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            queue_url: None,
            rebalance: Rebalance::default(),
            wait: default_queue_wait(),
            scheduled_change_lead: default_scheduled_change_lead(),
        }
    }
}

fn default_scheduled_change_lead() -> Duration {
    Duration::from_secs(3600)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rebalance {
    /// Remove the worker from the job gracefully (acknowledged), then terminate it.
    #[default]
    Drain,
    /// Journal and show the recommendation; change nothing.
    Report,
}

/// `dtd agent`: prepare-data on boot, then watch the instance's own metadata for notices.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The prepare-data program (run as an argv, no shell); default `<shared_dir>/prepare-data.py`.
    #[serde(default)]
    pub prepare_data: Option<PathBuf>,
    /// Extra arguments passed to it after the program.
    #[serde(default)]
    pub args: Vec<String>,
    /// One attempt's time limit; the attempt is killed when it is exceeded.
    #[serde(default = "default_prepare_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Attempts before a failure marker is written (1 = no retry).
    #[serde(default = "default_prepare_attempts")]
    pub attempts: u32,
    /// Pause between attempts.
    #[serde(default = "default_retry_delay", deserialize_with = "duration")]
    pub retry_delay: Duration,
    /// How often the instance metadata is polled for interruption notices.
    #[serde(default = "default_imds_interval", deserialize_with = "duration")]
    pub imds_interval: Duration,
}

impl Default for Agent {
    fn default() -> Self {
        Agent {
            prepare_data: None,
            args: Vec::new(),
            timeout: default_prepare_timeout(),
            attempts: default_prepare_attempts(),
            retry_delay: default_retry_delay(),
            imds_interval: default_imds_interval(),
        }
    }
}

fn default_queue_wait() -> Duration {
    Duration::from_secs(20)
}

fn default_prepare_timeout() -> Duration {
    Duration::from_secs(3600)
}

fn default_prepare_attempts() -> u32 {
    3
}

fn default_retry_delay() -> Duration {
    Duration::from_secs(10)
}

fn default_imds_interval() -> Duration {
    Duration::from_secs(1)
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

fn default_fs_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_api_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_ack_timeout() -> Duration {
    Duration::from_secs(600)
}

fn default_page_size() -> i32 {
    1000
}

fn default_worker_tags() -> BTreeMap<String, String> {
    BTreeMap::from([("NodeType".to_string(), "Worker".to_string())])
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    use serde::de::Error;
    let text = String::deserialize(d)?;
    let parsed = humantime::parse_duration(&text).map_err(|e| {
        D::Error::custom(format!("bad duration `{text}` ({e}); write e.g. 2s, 10m"))
    })?;
    if parsed.is_zero() {
        return Err(D::Error::custom("duration must be greater than zero"));
    }
    Ok(parsed)
}

/// Inside `workers` serde loses the key's path (the section is parsed through RawWorkers), so
/// the message names the key itself.
fn prepare_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    use serde::de::Error;
    duration(d)
        .map(Some)
        .map_err(|e| D::Error::custom(format!("prepare_timeout: {e}")))
}

/// Cluster names end up in tag keys and directory names, so only a safe alphabet is allowed.
fn cluster_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    let name = String::deserialize(d)?;
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(name)
    } else {
        Err(D::Error::custom(format!(
            "cluster `{name}` must be 1-64 characters of letters, digits, '-' or '_'"
        )))
    }
}

/// An EFS file system id as the EFS API writes it: `fs-` and 8 or 17 hex digits (older ids have
/// 8). It reaches API calls and messages only, but a typo should fail here, not at the first call.
fn file_system_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error;
    let id = String::deserialize(d)?;
    let hex = id.strip_prefix("fs-").unwrap_or("");
    let ok = (hex.len() == 8 || hex.len() == 17)
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(Some(id))
    } else {
        Err(D::Error::custom(format!(
            "shared_fs_id `{id}` is not an EFS file system id (fs- and 8 or 17 lowercase hex digits)"
        )))
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses and validates; the error text names the key and the line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let de = serde_yaml::Deserializer::from_str(text);
        let mut cfg: Config =
            serde_path_to_error::deserialize(de).map_err(|e| describe(text, e))?;
        cfg.validate(text)?;
        cfg.load_templates(text)?;
        cfg.resolve_defaults();
        Ok(cfg)
    }

    fn validate(&self, text: &str) -> Result<(), String> {
        if !self.shared_dir.is_absolute() {
            return Err(at_key(
                text,
                "shared_dir",
                "shared_dir must be an absolute path",
            ));
        }
        for spec in &self.hostfiles {
            if !spec.path.is_absolute() || spec.path.file_name().is_none() {
                return Err(at_key(
                    text,
                    "hostfiles",
                    &format!(
                        "hostfiles: path {} must be an absolute file path",
                        spec.path.display()
                    ),
                ));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(20)).contains(&self.events.wait) {
            return Err(at_key(
                text,
                "wait",
                "events.wait must be within 1s..=20s (SQS long polling)",
            ));
        }
        if self.agent.attempts == 0 {
            return Err(at_key(
                text,
                "attempts",
                "agent.attempts must be at least 1",
            ));
        }
        if self.shared_fs_refresh < Duration::from_secs(1) {
            return Err(at_key(
                text,
                "shared_fs_refresh",
                "shared_fs_refresh must be at least 1s",
            ));
        }
        self.validate_prepare_timeout(text)?;
        if let Some(master) = self.master {
            if self.workers.base_hosts.contains(&master) {
                return Err(at_key(
                    text,
                    "master",
                    "master must not also be a base host",
                ));
            }
        }
        Ok(())
    }

    /// A prepare timeout shorter than the agent's own limit would abandon a worker whose agent is
    /// still retrying, before it could report either way.
    fn validate_prepare_timeout(&self, text: &str) -> Result<(), String> {
        let Some(t) = self.workers.prepare_timeout else {
            return Ok(());
        };
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let agent = self.agent_limit();
        if t < agent {
            let msg = format!(
                "workers.prepare_timeout ({}) is shorter than the agent's own limit ({}: agent.timeout \
                 × agent.attempts plus the retry delays); a worker still preparing would be abandoned",
                show(t),
                show(agent)
            );
            return Err(at_key(text, "prepare_timeout", &msg));
        }
        if t > HOOK_GLOBAL_TIMEOUT_MAX {
            let msg = format!(
                "workers.prepare_timeout ({}) is longer than 48h, the most a lifecycle hook can hold an instance",
                show(t)
            );
            return Err(at_key(text, "prepare_timeout", &msg));
        }
        Ok(())
    }

    /// The longest `dtd agent` takes before it writes a marker: every attempt running into its
    /// timeout, with the pauses between them.
    pub fn agent_limit(&self) -> Duration {
        let a = &self.agent;
        let pauses = a.retry_delay.saturating_mul(a.attempts.saturating_sub(1));
        a.timeout.saturating_mul(a.attempts).saturating_add(pauses)
    }

    /// How long a new group worker held by the launching hook may go without a prepare-data
    /// marker before it is abandoned: `workers.prepare_timeout`, or the agent's limit plus
    /// [`PREPARE_MARGIN`].
    pub fn prepare_timeout(&self) -> Duration {
        (self.workers.prepare_timeout)
            .unwrap_or_else(|| self.agent_limit().saturating_add(PREPARE_MARGIN))
    }

    /// Reads every host-file template now, so a bad one stops `dtd` at start, not mid-run.
    fn load_templates(&mut self, text: &str) -> Result<(), String> {
        for (i, spec) in self.hostfiles.iter_mut().enumerate() {
            let Some(path) = &spec.template_path else {
                continue;
            };
            // The key usually sits inside a flow mapping (`- { path: .., template: .. }`), where
            // at_key's search for a line starting with the key would miss it.
            let shown = path.display().to_string();
            let line = text
                .lines()
                .position(|l| l.contains("template:") && l.contains(&shown))
                .map(|n| format!(" at line {}", n + 1))
                .unwrap_or_default();
            let fail = |message: String| format!("hostfiles[{i}].template: {message}{line}");
            if !path.is_absolute() {
                return Err(fail(format!("{shown} must be an absolute path")));
            }
            let body = std::fs::read_to_string(path)
                .map_err(|e| fail(format!("cannot read {shown}: {e}")))?;
            let template = HostTemplate::parse(&body).map_err(|e| fail(format!("{shown} {e}")))?;
            spec.template = Some(template);
        }
        Ok(())
    }

    fn resolve_defaults(&mut self) {
        if self.hostfiles.is_empty() {
            self.hostfiles.push(HostfileSpec {
                path: self.shared_dir.join("host_worker"),
                format: Format::Mxnet,
                template_path: None,
                template: None,
            });
        }
        if self.job.ack.file.is_none() {
            self.job.ack.file = Some(self.shared_dir.join("ack"));
        }
        if self.agent.prepare_data.is_none() {
            self.agent.prepare_data = Some(self.shared_dir.join("prepare-data.py"));
        }
        if self.state_dir.is_none() {
            self.state_dir = Some(self.shared_dir.join(".dt").join(&self.cluster));
        }
        if self.workers.elastic_tag.is_none() {
            self.workers.elastic_tag = Some(format!("{}{ELASTIC_TAG_SUFFIX}", self.cluster));
        }
    }

    pub fn elastic_tag(&self) -> &str {
        self.workers.elastic_tag.as_deref().unwrap_or_default()
    }

    pub fn state_dir(&self) -> &Path {
        self.state_dir.as_deref().unwrap_or(&self.shared_dir)
    }

    pub fn ack_file(&self) -> &Path {
        self.job.ack.file.as_deref().unwrap_or(&self.shared_dir)
    }

    /// The file the daemon writes the current generation to, after the host files.
    pub fn generation_file(&self) -> PathBuf {
        self.shared_dir.join("generation")
    }
}

/// serde_yaml places syntax and type errors itself; errors raised by our own checks (durations,
/// signals, cross-field rules) carry no position, so the key's line is looked up from its path.
fn describe(text: &str, e: serde_path_to_error::Error<serde_yaml::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let message = inner.to_string();
    // Custom errors carry a location serde_yaml does not print (the document's start).
    if message.contains(" at line ") || path == "." {
        return message;
    }
    let key = path
        .rsplit('.')
        .map(|seg| seg.split('[').next().unwrap_or(seg))
        .find(|seg| !seg.is_empty())
        .unwrap_or(&path);
    at_key(text, key, &format!("{path}: {message}"))
}

/// Adds "at line N" for checks made after parsing, where serde no longer knows the position.
fn at_key(text: &str, key: &str, message: &str) -> String {
    let line = text
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{key}:")))
        .map(|i| i + 1);
    match line {
        Some(n) => format!("{message} at line {n}"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "cluster: demo
workers:
  launch_template: lt-0abc
  min: 1
  max: 4
  base_hosts: [10.0.0.5]
shared_dir: /efs
job:
  notify: { signal: SIGUSR1, pidfile: /efs/job.pid }
  ack: { host_worker_log: /efs/host_worker_log, timeout: 10m }
interval: 1s
";

    #[test]
    fn good_file_gets_defaults() {
        let cfg = Config::parse(GOOD).unwrap();
        assert_eq!(cfg.elastic_tag(), "demo-aws-dl-cfn-elastic-worker");
        assert_eq!(cfg.hostfiles[0].path, PathBuf::from("/efs/host_worker"));
        assert_eq!(cfg.interval, Duration::from_secs(1));
        assert_eq!(cfg.job.ack.timeout, Duration::from_secs(600));
        assert_eq!(cfg.ack_file(), Path::new("/efs/ack"));
        assert_eq!(cfg.state_dir(), Path::new("/efs/.dt/demo"));
        assert_eq!(cfg.workers.tags.get("NodeType").unwrap(), "Worker");
        assert!(matches!(cfg.job.notify, Notify::Signal { .. }));
    }

    #[test]
    fn shared_fs_id_must_be_an_efs_id() {
        let with =
            |id: &str| GOOD.replace("interval: 1s", &format!("interval: 1s\nshared_fs_id: {id}"));
        let cfg = Config::parse(&with("fs-0123abcd")).unwrap();
        assert_eq!(cfg.shared_fs_id.as_deref(), Some("fs-0123abcd"));
        assert!(Config::parse(&with("fs-0123456789abcdef0")).is_ok());
        assert_eq!(cfg.shared_fs_refresh, Duration::from_secs(300));
        let e = error_of(&GOOD.replace("interval: 1s", "interval: 1s\nshared_fs_refresh: 0s"));
        assert!(
            e.contains("shared_fs_refresh") && e.contains("line 12"),
            "{e}"
        );
        for bad in ["fs-0123ABCD", "fs-123", "fsap-0123abcd", "'fs-0123abcd/..'"] {
            let e = error_of(&with(bad));
            assert!(e.contains("shared_fs_id"), "{bad}: {e}");
        }
    }

    fn error_of(text: &str) -> String {
        Config::parse(text).unwrap_err()
    }

    #[test]
    fn unknown_key_is_named_with_line() {
        let e = error_of(&GOOD.replace("  min: 1", "  minimum: 1"));
        assert!(e.contains("minimum") && e.contains("line 4"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let e = error_of(&GOOD.replace("interval: 1s", "interval: fast"));
        assert!(e.contains("interval") && e.contains("line 11"), "{e}");
        let e = error_of(&GOOD.replace("[10.0.0.5]", "[10.0.0.300]"));
        assert!(e.contains("base_hosts") && e.contains("line 6"), "{e}");
        let e = error_of(&GOOD.replace("max: 4", "max: 0"));
        assert!(e.contains("workers") && e.contains("max"), "{e}");
        let e = error_of(&GOOD.replace("SIGUSR1", "SIGNOPE"));
        assert!(e.contains("SIGNOPE") && e.contains("line 9"), "{e}");
        let e = error_of(&GOOD.replace("cluster: demo", "cluster: ../etc"));
        assert!(e.contains("cluster") && e.contains("line 1"), "{e}");
        let e = error_of(&GOOD.replace("shared_dir: /efs", "shared_dir: efs"));
        assert!(e.contains("shared_dir") && e.contains("line 7"), "{e}");
    }

    #[test]
    fn min_above_max_is_refused() {
        let e = error_of(&GOOD.replace("min: 1", "min: 9"));
        assert!(e.contains("min (9) is greater than max (4)"), "{e}");
    }

    #[test]
    fn notify_forms() {
        let cfg = Config::parse(&GOOD.replace(
            "{ signal: SIGUSR1, pidfile: /efs/job.pid }",
            "{ command: [/bin/echo, hi] }",
        ))
        .unwrap();
        assert_eq!(
            cfg.job.notify,
            Notify::Command(vec!["/bin/echo".into(), "hi".into()])
        );
        let cfg =
            Config::parse(&GOOD.replace("{ signal: SIGUSR1, pidfile: /efs/job.pid }", "none"))
                .unwrap();
        assert_eq!(cfg.job.notify, Notify::None);
        let e = error_of(&GOOD.replace("pidfile: /efs/job.pid", "command: [x]"));
        assert!(e.contains("exactly"), "{e}");
    }

    #[test]
    fn hostfile_templates_are_read_and_checked_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.tmpl");
        std::fs::write(&good, "# workers\n{ip} slots={slots}\n").unwrap();
        let with = |t: &Path| {
            GOOD.replace(
                "interval: 1s",
                &format!(
                    "interval: 1s\nhostfiles:\n  - {{ path: /efs/h, template: {} }}",
                    t.display()
                ),
            )
        };
        let cfg = Config::parse(&with(&good)).unwrap();
        let hosts = [crate::hostfile::Host {
            ip: "10.0.0.9".parse().unwrap(),
            slots: 4,
        }];
        let t = cfg.hostfiles[0].template.as_ref().unwrap();
        assert_eq!(t.render(&hosts), "# workers\n10.0.0.9 slots=4\n");

        let bad = dir.path().join("bad.tmpl");
        std::fs::write(&bad, "# workers\n{ip} slots={slot}\n").unwrap();
        let e = error_of(&with(&bad));
        assert!(
            e.contains("hostfiles[0].template")
                && e.contains("bad.tmpl line 2")
                && e.contains("line 13"),
            "{e}"
        );
        let e = error_of(&with(&dir.path().join("missing.tmpl")));
        assert!(e.contains("cannot read"), "{e}");
        let e = error_of(&GOOD.replace(
            "interval: 1s",
            "interval: 1s\nhostfiles:\n  - { path: /efs/h, format: mpi, template: /x }",
        ));
        assert!(e.contains("exactly one of format"), "{e}");
    }

    #[test]
    fn prepare_timeout_defaults_to_the_agents_limit_plus_a_margin() {
        let cfg = Config::parse(GOOD).unwrap();
        // 1h × 3 attempts + 2 pauses of 10s + the 10m margin.
        let expected = Duration::from_secs(3 * 3600 + 2 * 10 + 600);
        assert_eq!(cfg.prepare_timeout(), expected);
        let cfg = Config::parse(&format!(
            "{GOOD}agent:\n  timeout: 20m\n  attempts: 2\n  retry_delay: 1m\n"
        ))
        .unwrap();
        assert_eq!(cfg.prepare_timeout(), Duration::from_secs(41 * 60 + 600));
        let cfg =
            Config::parse(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: 5h")).unwrap();
        assert_eq!(cfg.prepare_timeout(), Duration::from_secs(5 * 3600));
    }

    #[test]
    fn a_prepare_timeout_the_agent_or_the_hook_cannot_honour_is_refused() {
        let e = error_of(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: 30m"));
        assert!(
            e.contains("workers.prepare_timeout (30m)")
                && e.contains("3h 20s")
                && e.contains("line 6"),
            "{e}"
        );
        let e = error_of(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: 3d"));
        assert!(e.contains("prepare_timeout") && e.contains("48h"), "{e}");
        let e = error_of(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: soon"));
        assert!(e.contains("prepare_timeout: bad duration `soon`"), "{e}");
    }

    #[test]
    fn slots_by_type() {
        let cfg = Config::parse(&GOOD.replace(
            "  max: 4",
            "  max: 4\n  slots: { p3.16xlarge: 8, default: 2 }",
        ))
        .unwrap();
        assert_eq!(cfg.workers.slots.for_type("p3.16xlarge"), 8);
        assert_eq!(cfg.workers.slots.for_type("g5.xlarge"), 2);
    }
}
