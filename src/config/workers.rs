//! `workers` as written: which instances are workers, how many, and where they come from; the
//! section's own rules, checked as it is read, and its prepare timeout against the agent's limit,
//! checked once the whole file is.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::de::{duration, named, prepare_timeout};
use super::error::Rule;
use super::{Slots, HOOK_GLOBAL_TIMEOUT_MAX};
use crate::protocol::channel::PORT;
use crate::protocol::identity::Certificates;

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
    pub replace_interrupted: bool,
    #[serde(default)]
    pub capacity: Option<super::Capacity>,
    #[serde(default)]
    pub reports: super::Reports,
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default, deserialize_with = "identity_certificates")]
    pub identity_certificates: Option<Certificates>,
    #[serde(
        default = "default_max_clock_skew",
        deserialize_with = "max_clock_skew"
    )]
    pub max_clock_skew: Duration,
    #[serde(default)]
    pub prices: BTreeMap<String, f64>,
    #[serde(default)]
    pub spot_price_history: bool,
}

/// The section's own rules, checked while it is parsed so the error names `workers` and its line.
pub(super) fn checked<'de, D: Deserializer<'de>>(d: D) -> Result<RawWorkers, D::Error> {
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
        "{0} launches from launch_template, which is not set (group workers are replaced by \
         their group)"
    )]
    ReplaceWithoutTemplate(&'static str),
    #[error(
        "capacity overrides launch_template, which is not set (a group's choices are its mixed \
         instances policy)"
    )]
    CapacityWithoutTemplate,
    #[error("tags must name at least one worker tag (default NodeType: Worker)")]
    NoTags,
    #[error("prices.{0}: {1} is not a price in dollars an hour (a number above 0)")]
    Price(String, f64),
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
        // A group worker warned of its loss is replaced by its group (detached from it).
        if self.launch_template.is_none() && self.replace_unhealthy {
            return Err(WorkersError::ReplaceWithoutTemplate("replace_unhealthy"));
        }
        if self.capacity.is_some() && self.launch_template.is_none() {
            return Err(WorkersError::CapacityWithoutTemplate);
        }
        if self.tags.is_empty() {
            return Err(WorkersError::NoTags);
        }
        if let Some((kind, p)) = (self.prices.iter()).find(|(_, p)| !(p.is_finite() && **p > 0.0)) {
            return Err(WorkersError::Price(kind.clone(), *p));
        }
        Ok(())
    }

    /// A prepare timeout shorter than the agent's own limit would abandon a worker whose agent
    /// is still retrying, before it could report either way.
    pub(super) fn check_prepare_timeout(&self, limit: Duration) -> Result<(), Rule> {
        let Some(timeout) = self.prepare_timeout else {
            return Ok(());
        };
        if timeout < limit {
            return Err(Rule::PrepareTimeoutShort { timeout, limit });
        }
        if timeout > HOOK_GLOBAL_TIMEOUT_MAX {
            return Err(Rule::PrepareTimeoutLong(timeout));
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

fn default_max_prepare_failures() -> u32 {
    5
}

fn default_page_size() -> i32 {
    500
}

fn default_worker_tags() -> BTreeMap<String, String> {
    BTreeMap::from([("NodeType".to_string(), "Worker".to_string())])
}

/// Only this machine, unless configured: the stack listens on the master's own address.
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], PORT))
}

/// Amazon Time Sync keeps instances within milliseconds; a report signed this far from dtd's
/// clock is a replay, or a clock that is badly off.
fn default_max_clock_skew() -> Duration {
    Duration::from_secs(30)
}

fn max_clock_skew<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("workers.max_clock_skew", duration(d))
}

/// Read when the config is, so a file that is not a certificate stops `dtd` at start.
fn identity_certificates<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Certificates>, D::Error> {
    use serde::de::Error;
    let path = PathBuf::deserialize(d)?;
    let certs = Certificates::from_file(&path)
        .map_err(|e| D::Error::custom(format!("workers.identity_certificates: {e}")))?;
    Ok(Some(certs))
}
