//! `disruption`: how many members may be leaving voluntarily at once (Karpenter's disruption
//! budget, for a training job), and when (its `schedule` and `duration`, in UTC). Unlimited and
//! at any time unless configured, as before it existed.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::de::duration;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disruption {
    /// A number of workers (`1`) or a share of them (`"10%"`).
    #[serde(default, deserialize_with = "budget")]
    pub budget: Budget,
    /// When voluntary leaves may start; empty: at any time.
    #[serde(default)]
    pub windows: Vec<Window>,
}

/// A window opens at each time its cron `schedule` (UTC) names and stays open for `duration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    #[serde(deserialize_with = "schedule")]
    pub schedule: Schedule,
    #[serde(deserialize_with = "window_duration")]
    pub duration: Duration,
}

/// A cron schedule and the text it was written as (for messages).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub text: String,
    pub cron: croner::Cron,
}

/// The five POSIX fields (minute hour day-of-month month day-of-week), in UTC.
fn schedule<'de, D: Deserializer<'de>>(d: D) -> Result<Schedule, D::Error> {
    let text = String::deserialize(d)?;
    let fields = text.split_whitespace().count();
    let cron = (fields == 5)
        .then(|| croner::Cron::from_str(&text).ok())
        .flatten()
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "schedule: `{}` is not a cron schedule of five fields (minute hour day month \
                 weekday, UTC; e.g. \"0 22 * * *\")",
                text.chars().take(60).collect::<String>()
            ))
        })?;
    Ok(Schedule { text, cron })
}

/// At most a week: a longer window is no window.
fn window_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let d = duration(d).map_err(|e| serde::de::Error::custom(format!("duration: {e}")))?;
    if d > Duration::from_secs(7 * 24 * 3600) {
        return Err(serde::de::Error::custom("duration: at most 7 days"));
    }
    Ok(d)
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
