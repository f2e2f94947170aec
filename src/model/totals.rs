//! What `dtd` counted since it first managed the cluster: metrics count it, `status.json` keeps
//! it, and a restarted `dtd` reads it back (GPU time would otherwise restart at zero).

use serde::{Deserialize, Serialize};

use super::Millis;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// When `dtd` began counting.
    pub since: Millis,
    pub gpu_seconds_training: f64,
    pub gpu_seconds_idle: f64,
}
