//! `disruption`: how many members may be leaving voluntarily at once (Karpenter's disruption
//! budget, for a training job). Unlimited unless configured, as before it existed.

use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disruption {
    /// A number of workers (`1`) or a share of them (`"10%"`).
    #[serde(default, deserialize_with = "budget")]
    pub budget: Budget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Budget {
    #[default]
    Unlimited,
    Workers(usize),
    /// Of the workers (base hosts, members and those leaving), rounded up: `10%` of 5 is 1.
    Percent(u8),
}

impl Budget {
    /// How many may be leaving at once out of `workers`; `None`: no limit.
    pub fn allowed(self, workers: usize) -> Option<usize> {
        match self {
            Budget::Unlimited => None,
            Budget::Workers(n) => Some(n),
            Budget::Percent(p) => Some((workers * usize::from(p)).div_ceil(100)),
        }
    }
}

/// A number (a YAML integer, or digits in a string) or digits and `%`, 0 to 100.
fn budget<'de, D: Deserializer<'de>>(d: D) -> Result<Budget, D::Error> {
    use serde::de::Error;
    let value = serde_yaml::Value::deserialize(d)?;
    let text = match &value {
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::String(s) => s.trim().to_string(),
        _ => String::new(),
    };
    let bad = || {
        D::Error::custom(format!(
            "budget: `{}` is not a number of workers (e.g. 1) or a share of them (e.g. \"10%\")",
            text.chars().take(40).collect::<String>()
        ))
    };
    match text.strip_suffix('%') {
        Some(share) => match share.trim().parse::<u8>() {
            Ok(p) if p <= 100 => Ok(Budget::Percent(p)),
            _ => Err(bad()),
        },
        None => text.parse().map(Budget::Workers).map_err(|_| bad()),
    }
}
