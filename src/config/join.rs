//! `join`: when ready workers join the job. Without it each joins at the first pass that sees
//! its prepare-data marker: a new generation, and a restart of the job, for each. `batch`
//! gathers the workers that become ready within a window into one generation.

use std::time::Duration;

use serde::Deserialize;

use super::de::duration;

/// The longest batch: a ready GPU worker idle for more than this is a cost no restart saves.
const MAX_BATCH: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Join {
    /// How long the first ready worker waits for others to join with it (0: it joins at once).
    #[serde(default, deserialize_with = "batch")]
    pub batch: Duration,
}

/// Inside a flow mapping serde's path ends at `join`, so the message names the key itself.
fn batch<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let batch = duration(d).map_err(|e| serde::de::Error::custom(format!("batch: {e}")))?;
    if batch > MAX_BATCH {
        let shown = humantime::format_duration(batch);
        return Err(serde::de::Error::custom(format!(
            "batch: {shown} is longer than an hour; ready workers would sit idle that long"
        )));
    }
    Ok(batch)
}
