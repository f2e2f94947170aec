//! `job.launcher.elastic`: torchrun's own rendezvous bounds under `strategy: elastic`.

use std::time::Duration;

use serde::Deserialize;

/// `job.launcher.elastic`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "ElasticFields")]
pub struct Elastic {
    pub min_nodes: u32,
    pub max_nodes: u32,
    /// How long a rendezvous round waits for more nodes once it has `min_nodes` (torch's
    /// `last_call_timeout`, whole seconds).
    pub last_call: Duration,
}

impl Default for Elastic {
    fn default() -> Self {
        Elastic {
            min_nodes: 1,
            max_nodes: 1024,
            last_call: Duration::from_secs(3),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ElasticFields {
    min_nodes: Option<u32>,
    max_nodes: Option<u32>,
    #[serde(default, deserialize_with = "super::de::optional_duration")]
    last_call: Option<Duration>,
}

/// Why `job.launcher.elastic` is refused.
#[derive(Debug, thiserror::Error)]
pub enum ElasticError {
    #[error(
        "job.launcher.elastic: min_nodes ({min}) must be at least 1 and at most max_nodes ({max})"
    )]
    Nodes { min: u32, max: u32 },
    #[error(
        "job.launcher.elastic.last_call: whole seconds up to 10m, not {}",
        humantime::format_duration(*.0)
    )]
    LastCall(Duration),
}

impl TryFrom<ElasticFields> for Elastic {
    type Error = ElasticError;

    fn try_from(f: ElasticFields) -> Result<Self, ElasticError> {
        let d = Elastic::default();
        let e = Elastic {
            min_nodes: f.min_nodes.unwrap_or(d.min_nodes),
            max_nodes: f.max_nodes.unwrap_or(d.max_nodes),
            last_call: f.last_call.unwrap_or(d.last_call),
        };
        if e.min_nodes == 0 || e.min_nodes > e.max_nodes {
            let (min, max) = (e.min_nodes, e.max_nodes);
            return Err(ElasticError::Nodes { min, max });
        }
        // torch reads the timeout as whole seconds.
        if e.last_call.subsec_nanos() != 0 || e.last_call > Duration::from_secs(600) {
            return Err(ElasticError::LastCall(e.last_call));
        }
        Ok(e)
    }
}
