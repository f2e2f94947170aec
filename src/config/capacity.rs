//! `workers.capacity`: what a worker launched by `dtd` or `dtctl add` may be, in order of
//! preference (SkyPilot's `ordered` resources, ParallelCluster's capacity failover). A choice
//! EC2 has no capacity for is skipped for `cool_down`, and the next one is tried.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::de::duration;
pub use crate::model::Choice;

/// How long a choice EC2 refused for lack of capacity is skipped when the config does not say.
const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(600);

/// More choices than this is a typo, not a preference list (CreateFleet takes 300 overrides).
const MAX_CHOICES: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// In order of preference; at least one.
    pub choices: Vec<Choice>,
    pub cool_down: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapacity {
    choices: Vec<Choice>,
    #[serde(default, deserialize_with = "cool_down")]
    cool_down: Option<Duration>,
}

fn cool_down<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("cool_down: {e}")))
}

impl<'de> Deserialize<'de> for Capacity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Capacity, D::Error> {
        let raw = RawCapacity::deserialize(d)?;
        check(&raw.choices).map_err(|e| serde::de::Error::custom(format!("capacity: {e}")))?;
        Ok(Capacity {
            choices: raw.choices,
            cool_down: raw.cool_down.unwrap_or(DEFAULT_COOL_DOWN),
        })
    }
}

/// Why `workers.capacity` is refused. What a worker wrote is cut short in the message.
#[derive(Debug, thiserror::Error)]
enum CapacityError {
    #[error("choices must list 1 to {MAX_CHOICES} choices")]
    Count,
    #[error("choices lists {0} twice")]
    Twice(String),
    #[error(
        "every choice must have the same number of GPUs: {first} has {first_gpus}, {other} has \
         {other_gpus}"
    )]
    Gpus {
        first: String,
        first_gpus: u32,
        other: String,
        other_gpus: u32,
    },
    #[error("`{}` is not an instance type (e.g. p4d.24xlarge)", cut(.0, 40))]
    NotAnInstanceType(String),
    #[error("{0}: gpus must be at least 1")]
    NoGpus(String),
    #[error("`{}` is not a subnet id (subnet-...)", cut(.0, 40))]
    NotASubnet(String),
    #[error(
        "`{}` is not a Capacity Reservation id (cr-...) or the ARN of a resource group \
         (arn:aws:resource-groups:REGION:ACCOUNT:group/NAME)",
        cut(.0, 80)
    )]
    NotAReservation(String),
}

/// At most the first `n` characters of `text`.
fn cut(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

fn check(choices: &[Choice]) -> Result<(), CapacityError> {
    if choices.is_empty() || choices.len() > MAX_CHOICES {
        return Err(CapacityError::Count);
    }
    let mut seen = BTreeSet::new();
    for c in choices {
        check_choice(c)?;
        if !seen.insert(c) {
            return Err(CapacityError::Twice(c.name()));
        }
    }
    let first = &choices[0];
    match choices.iter().find(|c| c.gpus != first.gpus) {
        Some(c) => Err(CapacityError::Gpus {
            first: first.instance_type.clone(),
            first_gpus: first.gpus,
            other: c.instance_type.clone(),
            other_gpus: c.gpus,
        }),
        None => Ok(()),
    }
}

fn check_choice(c: &Choice) -> Result<(), CapacityError> {
    let t = &c.instance_type;
    if !is_instance_type(t) {
        return Err(CapacityError::NotAnInstanceType(t.clone()));
    }
    if c.gpus == 0 {
        return Err(CapacityError::NoGpus(t.clone()));
    }
    if let Some(s) = c.subnet.as_deref().filter(|s| !is_subnet_id(s)) {
        return Err(CapacityError::NotASubnet(s.into()));
    }
    match c.reservation.as_deref() {
        Some(r) if !is_reservation_id(r) && !is_reservation_group(r) => {
            Err(CapacityError::NotAReservation(r.into()))
        }
        _ => Ok(()),
    }
}

/// A family and a size, as EC2 names them: `p4d.24xlarge`, `u-6tb1.metal`.
fn is_instance_type(t: &str) -> bool {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 32
            && (s.bytes()).all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    matches!(t.split_once('.'), Some((family, size)) if ok(family) && ok(size))
}

fn is_subnet_id(s: &str) -> bool {
    has_hex_id(s, "subnet-")
}

/// Capacity Reservations and Capacity Blocks alike: `cr-0123456789abcdef0`.
fn is_reservation_id(s: &str) -> bool {
    has_hex_id(s, "cr-")
}

fn has_hex_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|hex| {
        (8..=17).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// `arn:aws:resource-groups:us-east-1:123456789012:group/my-reservations` (any partition).
fn is_reservation_group(s: &str) -> bool {
    let f: Vec<&str> = s.splitn(6, ':').collect();
    let [arn, partition, service, region, account, resource] = f[..] else {
        return false;
    };
    let name = resource.strip_prefix("group/").unwrap_or_default();
    let word = |w: &str, extra: &[u8]| {
        !w.is_empty() && (w.bytes()).all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
    };
    arn == "arn"
        && partition.starts_with("aws")
        && word(partition, b"-")
        && service == "resource-groups"
        && word(region, b"-")
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && name.len() <= 128
        && word(name, b"._-")
}
