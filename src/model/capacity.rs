//! What a launched worker may be (`workers.capacity`), and the choices EC2 had no capacity for.

use serde::{Deserialize, Serialize};

use super::Millis;

/// One instance type, and optionally the subnet to launch it in (overrides of the launch
/// template's own) and the Capacity Reservation or Capacity Block to launch it from.
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
    /// A Capacity Reservation or Capacity Block id (`cr-...`), or the ARN of a resource group
    /// of Capacity Reservations: launched only into it, never as plain On-Demand.
    #[serde(default)]
    pub reservation: Option<String>,
}

impl Choice {
    /// How `dtctl status` and the journal name it: `p5.48xlarge in subnet-0a1b2c3d from
    /// cr-0123456789abcdef0`.
    pub fn name(&self) -> String {
        let mut name = self.instance_type.clone();
        if let Some(s) = &self.subnet {
            name.push_str(&format!(" in {s}"));
        }
        if let Some(r) = &self.reservation {
            name.push_str(&format!(" from {r}"));
        }
        name
    }

    /// The Capacity Reservation or Capacity Block id it names (not a resource group).
    pub fn reservation_id(&self) -> Option<&str> {
        self.reservation.as_deref().filter(|r| r.starts_with("cr-"))
    }
}

/// One choice as a launch sends it: a Capacity Block is launched with its own market type,
/// which only DescribeCapacityReservations tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchChoice {
    pub choice: Choice,
    pub capacity_block: bool,
}

/// A Capacity Reservation or Capacity Block a choice names, as DescribeCapacityReservations
/// said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub total: u32,
    /// Instances that can still be launched into it.
    pub available: u32,
    /// `active` is the only state a launch can use (`scheduled`, `payment-pending`, `expired`...).
    pub state: String,
    pub end: Option<Millis>,
    pub capacity_block: bool,
}

impl Reservation {
    /// For `dtctl status`: `Capacity Block, 3 of 8 left, ends 2026-11-27T10:00:00Z`.
    pub fn summary(&self) -> String {
        let kind = match self.capacity_block {
            true => "Capacity Block",
            false => "Capacity Reservation",
        };
        let mut text = format!("{kind}, {} of {} left", self.available, self.total);
        if self.state != "active" {
            text.push_str(&format!(", {}", self.state));
        }
        if let Some(end) = self.end {
            text.push_str(&format!(", ends {}", super::rfc3339(end)));
        }
        text
    }

    /// Why it cannot take a launch into a subnet of `subnet_zone`: it is in another zone.
    pub fn zone_conflict(&self, subnet_zone: &str) -> Option<String> {
        (self.zone != subnet_zone).then(|| {
            format!(
                "{} is in {}, its subnet in {subnet_zone}",
                self.id, self.zone
            )
        })
    }

    /// When EC2 starts terminating a Capacity Block's instances.
    pub fn terminates_at(&self) -> Option<Millis> {
        let end = self.end.filter(|_| self.capacity_block)?;
        Some(end.saturating_sub(CAPACITY_BLOCK_TERMINATES_MS))
    }

    /// When its instances are drained: when AWS's own warning comes.
    pub fn drains_at(&self) -> Option<Millis> {
        let end = self.end.filter(|_| self.capacity_block)?;
        Some(end.saturating_sub(CAPACITY_BLOCK_WARNS_MS))
    }
}

/// EC2 starts terminating a Capacity Block's instances 30 minutes before its end; EventBridge
/// warns 40 minutes before it ("Use Capacity Blocks for machine learning workloads", Amazon
/// EC2 User Guide).
pub const CAPACITY_BLOCK_TERMINATES_MS: Millis = 30 * 60_000;
pub const CAPACITY_BLOCK_WARNS_MS: Millis = 40 * 60_000;

/// One capacity choice as launches see it now, for `dtctl status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityStatus {
    /// The choice's name: `p5.48xlarge in subnet-0a1b2c3d`.
    pub choice: String,
    /// Why it is skipped (`InsufficientInstanceCapacity until ...`); `None`: it is tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The reservation it names, as last read: `Capacity Block, 3 of 8 left, ends ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
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
pub const NO_CAPACITY: [&str; 6] = [
    "InsufficientInstanceCapacity",
    "InsufficientCapacityOnHost",
    "InsufficientHostCapacity",
    "MaxSpotInstanceCountExceeded",
    "Unsupported",
    // A targeted Capacity Reservation or Capacity Block has no instance left.
    "ReservationCapacityExceeded",
];
