//! What a launched worker may be (`workers.capacity`), and the choices EC2 had no capacity for.

use serde::{Deserialize, Serialize};

use super::Millis;

/// One instance type, and optionally the subnet to launch it in: an override of the launch
/// template's own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    pub instance_type: String,
    /// GPUs per instance of this type: every choice has the same number (a job places one
    /// process per GPU on every node alike), and it is the workers' slots unless
    /// `workers.slots` says otherwise.
    pub gpus: u32,
    #[serde(default)]
    pub subnet: Option<String>,
}

impl Choice {
    /// How `dtctl status` and the journal name it: `p5.48xlarge in subnet-0a1b2c3d`.
    pub fn name(&self) -> String {
        match &self.subnet {
            Some(s) => format!("{} in {s}", self.instance_type),
            None => self.instance_type.clone(),
        }
    }
}

/// A choice EC2 refused for lack of capacity: skipped until `until`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    pub until: Millis,
    /// EC2's error code, e.g. `InsufficientInstanceCapacity`.
    pub code: String,
    pub message: String,
}

/// EC2's error codes that mean "not this type here, now": the next choice may have it
/// ("Error codes for the Amazon EC2 API"; CreateFleet's per-override errors use the same).
pub const NO_CAPACITY: [&str; 5] = [
    "InsufficientInstanceCapacity",
    "InsufficientCapacityOnHost",
    "InsufficientHostCapacity",
    "MaxSpotInstanceCountExceeded",
    "Unsupported",
];
