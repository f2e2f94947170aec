//! `join`: when ready workers join the job. Without it each joins at the first pass that sees
//! its prepare-data marker: a new generation, and a restart of the job, for each. `batch`
//! gathers the workers that become ready within a window into one generation; `at_checkpoint`
//! waits for the job's next checkpoint (its progress file's `checkpoint_step`), at most
//! `max_wait`; `sizes` lets the job grow only to allowed world sizes, the rest waiting as spares.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::de::duration;
use super::error::Rule;

/// The longest batch: a ready GPU worker idle for more than this is a cost no restart saves.
const MAX_BATCH: Duration = Duration::from_secs(3600);

/// How long ready workers wait for a checkpoint when `max_wait` is not given.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(1800);

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Join {
    /// How long the first ready worker waits for others to join with it (0: it joins at once).
    #[serde(default, deserialize_with = "batch")]
    pub batch: Duration,
    /// Ready workers join once the job's `checkpoint_step` moved on from what it was when the
    /// first of them became ready.
    #[serde(default)]
    pub at_checkpoint: bool,
    /// The longest a ready worker waits for that checkpoint.
    #[serde(default = "default_max_wait", deserialize_with = "max_wait")]
    pub max_wait: Duration,
    /// The world sizes (workers, base hosts included) the job may grow to, ascending; empty: any.
    #[serde(default, deserialize_with = "sizes")]
    pub sizes: Vec<usize>,
}

impl Default for Join {
    fn default() -> Join {
        Join {
            batch: Duration::ZERO,
            at_checkpoint: false,
            max_wait: DEFAULT_MAX_WAIT,
            sizes: Vec::new(),
        }
    }
}

impl Join {
    /// A size above `workers.max` is one the job never grows to.
    pub(super) fn check(&self, max: usize) -> Result<(), Rule> {
        match self.sizes.iter().find(|s| **s > max) {
            Some(size) => Err(Rule::JoinSizeAboveMax { size: *size, max }),
            None => Ok(()),
        }
    }
}

fn default_max_wait() -> Duration {
    DEFAULT_MAX_WAIT
}

/// Inside a flow mapping serde's path ends at `join`, so the message names the key itself.
fn batch<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let batch = duration(d).map_err(|e| serde::de::Error::custom(format!("batch: {e}")))?;
    if batch > MAX_BATCH {
        let shown = humantime::format_duration(batch);
        return Err(serde::de::Error::custom(format!(
            "batch: {shown} is longer than an hour; ready workers would sit idle that long"
        )));
    }
    Ok(batch)
}

fn max_wait<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration(d).map_err(|e| serde::de::Error::custom(format!("max_wait: {e}")))
}

/// At least one size, each at least 1, strictly ascending.
fn sizes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    let sizes = Vec::<usize>::deserialize(d)?;
    let ascending = sizes.windows(2).all(|w| w[0] < w[1]);
    if sizes.is_empty() || sizes[0] == 0 || !ascending {
        return Err(serde::de::Error::custom(
            "sizes: list the allowed world sizes, at least 1 and ascending (e.g. [2, 4, 8])",
        ));
    }
    Ok(sizes)
}
