//! Marker file names: `<prefix><ip>` in the shared directory, one per worker and kind.
//!
//! Any worker can create any file there, so a name is parsed, never trusted: one whose IP part is
//! not an address is rejected, and is never used to build a path or a command.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub const SUCCESS_PREFIX: &str = "prepare_data_success_";
pub const FAILED_PREFIX: &str = "prepare_data_failed_";
pub const INTERRUPTION_PREFIX: &str = "interruption_";
pub const HEALTH_PREFIX: &str = "health_";
pub const LAUNCHER_PREFIX: &str = "launcher_";
/// What the two prepare-data prefixes share: a name that starts so but is not UTF-8 is someone's
/// broken marker, worth a warning rather than silence.
pub const PREPARE_DATA_PREFIX: &str = "prepare_data_";

/// A marker's body is small; more than this is not read (a marker is not a log file).
pub const MAX_REPORT_BYTES: u64 = 16 * 1024;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// The worker's prepare-data program succeeded; any body (a 2018 script writes none).
    Success,
    /// It failed; the body is a [`FailureReport`](super::report::FailureReport).
    Failed,
    /// The agent saw a notice in the instance metadata; the body is an
    /// [`InterruptionMarker`](super::interruption::InterruptionMarker).
    Interruption,
    /// The agent's health check ran; the body is a
    /// [`HealthReport`](super::health::HealthReport).
    Health,
    /// The agent's launcher (`job.launcher`) changed state, or its heartbeat; the body is a
    /// [`LauncherReport`](super::launcher::LauncherReport).
    Launcher,
}

impl MarkerKind {
    const ALL: [MarkerKind; 5] = [
        MarkerKind::Success,
        MarkerKind::Failed,
        MarkerKind::Interruption,
        MarkerKind::Health,
        MarkerKind::Launcher,
    ];

    pub const fn prefix(self) -> &'static str {
        match self {
            MarkerKind::Success => SUCCESS_PREFIX,
            MarkerKind::Failed => FAILED_PREFIX,
            MarkerKind::Interruption => INTERRUPTION_PREFIX,
            MarkerKind::Health => HEALTH_PREFIX,
            MarkerKind::Launcher => LAUNCHER_PREFIX,
        }
    }
}

/// A marker's file name: which kind, for which worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MarkerName {
    pub kind: MarkerKind,
    pub ip: IpAddr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("not a marker's name")]
    NotAMarker,
    #[error("the part after the prefix is not an IP address")]
    NotAnIp,
}

impl MarkerName {
    pub fn new(kind: MarkerKind, ip: IpAddr) -> Self {
        MarkerName { kind, ip }
    }

    pub fn parse(name: &str) -> Result<MarkerName, NameError> {
        let (kind, rest) = MarkerKind::ALL
            .into_iter()
            .find_map(|kind| Some((kind, name.strip_prefix(kind.prefix())?)))
            .ok_or(NameError::NotAMarker)?;
        let ip = rest.parse().map_err(|_| NameError::NotAnIp)?;
        Ok(MarkerName { kind, ip })
    }

    /// The marker's path in the shared directory.
    pub fn path_in(&self, shared_dir: &Path) -> PathBuf {
        shared_dir.join(self.to_string())
    }
}

impl fmt::Display for MarkerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.kind.prefix(), self.ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in MarkerKind::ALL {
            for ip in ["10.0.0.7", "fe80::1"] {
                let name = MarkerName::new(kind, ip.parse().unwrap());
                assert_eq!(MarkerName::parse(&name.to_string()), Ok(name));
            }
        }
        let name = MarkerName::new(MarkerKind::Failed, "10.0.0.8".parse().unwrap());
        assert_eq!(name.to_string(), "prepare_data_failed_10.0.0.8");
        assert_eq!(
            name.path_in(Path::new("/efs")),
            Path::new("/efs/prepare_data_failed_10.0.0.8")
        );
        let spot = MarkerName::new(MarkerKind::Interruption, "10.0.0.9".parse().unwrap());
        assert_eq!(spot.to_string(), "interruption_10.0.0.9");
        let health = MarkerName::new(MarkerKind::Health, "10.0.0.9".parse().unwrap());
        assert_eq!(health.to_string(), "health_10.0.0.9");
    }

    #[test]
    fn other_files_and_bad_addresses_are_rejected() {
        for other in [
            "host_worker",
            "prepare_data_",
            "generation",
            "prepare_data_ok_1.2.3.4",
        ] {
            assert_eq!(
                MarkerName::parse(other),
                Err(NameError::NotAMarker),
                "{other}"
            );
        }
        for bad in [
            "prepare_data_success_10.0.0.7;rm -rf",
            "prepare_data_success_../../etc",
            "prepare_data_failed_",
            "interruption_10.0.0.300",
            "interruption_fe80::1%eth0",
        ] {
            assert_eq!(MarkerName::parse(bad), Err(NameError::NotAnIp), "{bad}");
        }
    }

    #[test]
    fn both_prepare_data_prefixes_share_the_family_prefix() {
        assert!(SUCCESS_PREFIX.starts_with(PREPARE_DATA_PREFIX));
        assert!(FAILED_PREFIX.starts_with(PREPARE_DATA_PREFIX));
    }
}
