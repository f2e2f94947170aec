//! The sections read as they are written: none has a default that depends on another key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::de::duration;

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
}

// Inside `health` serde loses the key's path (the error names `agent.health` only), so these
// name the key themselves.
fn health_interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("agent.health.interval", duration(d))
}

fn health_timeout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("agent.health.timeout", duration(d))
}

fn named<E: serde::de::Error>(key: &str, r: Result<Duration, E>) -> Result<Duration, E> {
    r.map_err(|e| E::custom(format!("{key}: {e}")))
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rebalance {
    /// Remove the worker from the job gracefully (acknowledged), then terminate it.
    #[default]
    Drain,
    /// Journal and show the recommendation; change nothing.
    Report,
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
