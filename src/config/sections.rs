//! The sections read as they are written: none has a default that depends on another key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::de::{duration, named, sha256};
use super::error::Rule;
use crate::digest::Sha256;

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

impl Events {
    /// SQS long polling waits 1 to 20 seconds.
    pub(super) fn check(&self) -> Result<(), Rule> {
        match (Duration::from_secs(1)..=Duration::from_secs(20)).contains(&self.wait) {
            true => Ok(()),
            false => Err(Rule::QueueWait),
        }
    }
}

fn default_scheduled_change_lead() -> Duration {
    Duration::from_secs(3600)
}

/// `agent.health`: the check `dtd agent` runs before the worker joins and every `interval` after.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// The check as an argv (never a shell); the first element is the program, looked up on
    /// `PATH` when it has no `/`. Checked non-empty when the file is resolved.
    pub command: Vec<String>,
    /// How often the check runs once the worker is up (a report at least this often).
    #[serde(
        default = "default_health_interval",
        deserialize_with = "health_interval"
    )]
    pub interval: Duration,
    /// One run's limit: past it the check's process group is killed and the worker is unhealthy.
    #[serde(
        default = "default_health_timeout",
        deserialize_with = "health_timeout"
    )]
    pub timeout: Duration,
    /// The digest the check's program (the command's first element) must have, if pinned.
    #[serde(default, deserialize_with = "health_sha256")]
    pub sha256: Option<Sha256>,
}

impl Health {
    /// A check needs a program; and one that may run as long as the interval could not report
    /// once every interval, which is what the master relies on to see a report that is out of
    /// date.
    pub(super) fn check(&self) -> Result<(), Rule> {
        if self.command.first().is_none_or(|p| p.is_empty()) {
            return Err(Rule::HealthWithoutProgram);
        }
        if self.timeout >= self.interval {
            let (timeout, interval) = (self.timeout, self.interval);
            return Err(Rule::HealthTimeout { timeout, interval });
        }
        Ok(())
    }
}

// Inside `health` serde loses the key's path (the error names `agent.health` only), so these
// name the key themselves.
fn health_interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("agent.health.interval", duration(d))
}

fn health_timeout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("agent.health.timeout", duration(d))
}

fn health_sha256<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Sha256>, D::Error> {
    sha256("agent.health.sha256", d)
}

fn default_health_interval() -> Duration {
    Duration::from_secs(300)
}

fn default_health_timeout() -> Duration {
    Duration::from_secs(120)
}

/// The Prometheus endpoint: off unless `listen` names an address (an IP and a port; a host name
/// is refused so that what is exposed is never decided by a resolver).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    #[serde(default, deserialize_with = "listen_address")]
    pub listen: Option<std::net::SocketAddr>,
}

fn listen_address<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    let addr = text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "`{text}` is not an IP and a port (e.g. 127.0.0.1:9464 or [::1]:9464)"
        ))
    })?;
    Ok(Some(addr))
}

/// `job.stall`: when the job's step (its progress file) stops advancing for `after`, `dtd`
/// journals `stalled` and runs `command` (or the `job.notify` command) with `DT_EVENT=stalled`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stall {
    #[serde(deserialize_with = "stall_after")]
    pub after: Duration,
    /// Run as an argv (never through a shell) on `stalled` and `stall_cleared`; without it the
    /// `job.notify` command is, if notify is one.
    #[serde(default, deserialize_with = "argv")]
    pub command: Option<Vec<String>>,
    /// What else is done when the job stalls.
    #[serde(default)]
    pub action: StallAction,
}

/// `job.stall.action`: what `dtd` does about a stall besides journaling and telling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StallAction {
    /// Journal, show and run the stall command: a person decides.
    #[default]
    Alert,
    /// The nodes holding the job back (a training process a signal stopped) leave the job, are
    /// terminated and replaced as unhealthy ones are; with none named, nothing more is done.
    Drain,
    /// As `drain`, and a new generation even with none named: under `generation` every
    /// launcher starts again from the checkpoint.
    Restart,
}

/// `job.stragglers` as written: every key optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStragglers {
    #[serde(default)]
    pub action: Option<StragglerAction>,
    #[serde(default, deserialize_with = "straggler_ratio")]
    pub ratio: Option<f64>,
    #[serde(default, deserialize_with = "straggler_steps")]
    pub steps: Option<u64>,
}

/// `job.stragglers`: a member whose compute time per step (its job's `dt_torch`
/// `session.compute()`, reported by its agent) stays above `ratio` times the median of the other
/// members' for `steps` of the job's steps is a straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stragglers {
    pub action: StragglerAction,
    pub ratio: f64,
    pub steps: u64,
}

impl Stragglers {
    pub const RATIO: f64 = 1.3;
    pub const STEPS: u64 = 50;

    /// As written, with the defaults: `drain` under the in-place strategy (a leave there costs
    /// the others well under a second), `alert` under the others (each leave restarts the job).
    pub fn resolve(raw: Option<RawStragglers>, in_place: bool) -> Stragglers {
        let raw = raw.unwrap_or_default();
        let default = match in_place {
            true => StragglerAction::Drain,
            false => StragglerAction::Alert,
        };
        Stragglers {
            action: raw.action.unwrap_or(default),
            ratio: raw.ratio.unwrap_or(Self::RATIO),
            steps: raw.steps.unwrap_or(Self::STEPS),
        }
    }
}

impl Default for Stragglers {
    fn default() -> Self {
        Stragglers::resolve(None, false)
    }
}

/// `job.stragglers.action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StragglerAction {
    /// Nothing is compared.
    Off,
    /// Journaled (`straggler`, `straggler_cleared`), shown and alerted: a person decides.
    Alert,
    /// As `alert`, and the straggler leaves the job (within the disruption budget) and is
    /// replaced as an unhealthy worker is.
    Drain,
}

fn straggler_ratio<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let r = f64::deserialize(d)?;
    match r.is_finite() && r > 1.0 {
        true => Ok(Some(r)),
        false => Err(serde::de::Error::custom(format!(
            "ratio: {r} is not above 1 (a node is a straggler when its compute time is more than \
             ratio times the others' median; e.g. 1.3)"
        ))),
    }
}

fn straggler_steps<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match u64::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "steps: 0 would call a node a straggler on one slow step; at least 1",
        )),
        n => Ok(Some(n)),
    }
}

/// Inside a flow mapping serde's path ends at `job.stall`, so the message names the key itself.
fn stall_after<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration(d).map_err(|e| serde::de::Error::custom(format!("after: {e}")))
}

/// A program and its arguments: at least the program, named.
fn argv<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    match argv.first() {
        Some(program) if !program.is_empty() => Ok(Some(argv)),
        _ => Err(serde::de::Error::custom(
            "command must be [program, args..] with a program",
        )),
    }
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

/// `workers.reports`: whose word a report in the shared directory is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reports {
    /// Believed only when signed by the worker's own `dtd agent` (`protocol::signed`).
    #[default]
    Signed,
    /// The 2018 protocol, without `dtd agent`: each worker's prepare-data script writes its own
    /// `prepare_data_success_<ip>`, which makes it join; a failure marker is only shown; every
    /// other report is ignored. Any worker can then make any other join early, nothing more.
    Unsigned,
}

impl Reports {
    /// Health and launcher reports come only from `dtd agent`, which signs what it writes: a
    /// cluster that runs it has no use for unsigned reports, which any worker could write.
    pub(super) fn check(self, health: bool, launcher: bool) -> Result<(), Rule> {
        match (self, health, launcher) {
            (Reports::Signed, _, _) => Ok(()),
            (Reports::Unsigned, true, _) => Err(Rule::UnsignedWithAgent("agent.health")),
            (Reports::Unsigned, false, true) => Err(Rule::UnsignedWithAgent("job.launcher")),
            (Reports::Unsigned, false, false) => Ok(()),
        }
    }
}

fn default_queue_wait() -> Duration {
    Duration::from_secs(20)
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

/// `health`: what dtd does with a worker whose health check (`agent.health`) fails.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthPolicy {
    /// Above this many unhealthy workers at once, removing and replacing them stops: a fleet-wide
    /// failure is more likely a bad check or a bad AMI than bad GPUs.
    #[serde(default)]
    pub max_unhealthy: MaxUnhealthy,
    /// How an unhealthy member leaves when its GPUs are still there (gone GPUs always leave at
    /// once).
    #[serde(default)]
    pub leave: HealthLeave,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthLeave {
    /// Out of the host files, terminated once the job acknowledges (it may checkpoint first).
    #[default]
    Drain,
    /// Out of the host files and replaced at once, without waiting for the job.
    Immediate,
}

/// A share of the workers (`20%`) or a number of them (`3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnhealthy {
    Percent(u32),
    Count(usize),
}

impl Default for MaxUnhealthy {
    /// Karpenter's node repair stops at the same share of a node pool.
    fn default() -> Self {
        MaxUnhealthy::Percent(20)
    }
}

impl MaxUnhealthy {
    /// How many of `workers` may be unhealthy and still be acted on; a share allows at least
    /// one, so that a small cluster still replaces a single bad worker.
    pub fn allowed(self, workers: usize) -> usize {
        match self {
            MaxUnhealthy::Percent(p) => (workers * p as usize / 100).max(1),
            MaxUnhealthy::Count(n) => n,
        }
    }
}

impl std::fmt::Display for MaxUnhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxUnhealthy::Percent(p) => write!(f, "{p}%"),
            MaxUnhealthy::Count(n) => write!(f, "{n}"),
        }
    }
}

impl<'de> Deserialize<'de> for MaxUnhealthy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Count(usize),
            Text(String),
        }
        let bad = |v: &str| {
            serde::de::Error::custom(format!(
                "max_unhealthy `{v}` is neither a share (e.g. 20%, 1% to 100%) nor a number of workers"
            ))
        };
        match Either::deserialize(d)? {
            Either::Count(n) => Ok(MaxUnhealthy::Count(n)),
            Either::Text(t) => {
                let p = (t.trim().strip_suffix('%'))
                    .and_then(|n| n.trim().parse::<u32>().ok())
                    .filter(|p| (1..=100).contains(p))
                    .ok_or_else(|| bad(&t))?;
                Ok(MaxUnhealthy::Percent(p))
            }
        }
    }
}

/// `journal`: the events journal rotates once it would grow past `max_size`, keeping `keep`
/// rotated files (`events.jsonl.1` the newest), so a long run cannot fill the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalConfig {
    #[serde(
        default = "default_journal_max_size",
        deserialize_with = "journal_max_size"
    )]
    pub max_size: u64,
    #[serde(default = "default_journal_keep", deserialize_with = "journal_keep")]
    pub keep: usize,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            max_size: default_journal_max_size(),
            keep: default_journal_keep(),
        }
    }
}

/// About 200,000 events (a line is about 300 bytes): years of a busy cluster's story.
fn default_journal_max_size() -> u64 {
    64 << 20
}

fn default_journal_keep() -> usize {
    4
}

/// The smallest journal: as large as the longest line a reader takes.
const JOURNAL_MIN_SIZE: u64 = crate::model::EVENT_LINE_LIMIT as u64;
const JOURNAL_MAX_KEEP: usize = 100;

fn journal_max_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    let size = super::de::byte_size(d).map_err(|e| D::Error::custom(format!("max_size: {e}")))?;
    if size < JOURNAL_MIN_SIZE {
        return Err(D::Error::custom("max_size: at least 64KiB"));
    }
    Ok(size)
}

fn journal_keep<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    use serde::de::Error;
    let keep = usize::deserialize(d)?;
    if !(1..=JOURNAL_MAX_KEEP).contains(&keep) {
        return Err(D::Error::custom(format!(
            "keep: {keep} is not between 1 and {JOURNAL_MAX_KEEP}"
        )));
    }
    Ok(keep)
}
