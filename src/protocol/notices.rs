//! `<shared_dir>/notices`: why workers left and by when (docs/job-contract.md, "The job contract"), written by
//! `dtd run` before it signals the job; the torchrun helper (`dt_torch.py`) and the example job
//! read it too. The same notices reach a membership hook as `DT_NOTICES` and `DT_REASON`.
//!
//! `tests/fixtures/protocol/notices.json` is a body as `dtd` writes it; the Rust and the Python
//! tests both read it, so the writer and the readers cannot drift apart.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The file's name in the shared directory.
pub const NOTICES_FILE: &str = "notices";

/// Why a worker left, as the job reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The instance is taken away (a Spot warning, an interruptible reservation, its group
    /// terminating it without a hook).
    Interruption,
    Rebalance,
    CapacityBlockExpiring,
    ScheduledChange,
    GroupTerminating,
    /// Its health check failed, its GPUs are gone, or it stopped answering.
    Unhealthy,
}

impl Reason {
    /// Every reason, in the enum's order.
    pub const ALL: [Reason; 6] = [
        Reason::Interruption,
        Reason::Rebalance,
        Reason::CapacityBlockExpiring,
        Reason::ScheduledChange,
        Reason::GroupTerminating,
        Reason::Unhealthy,
    ];

    /// As `DT_REASON` and the file's `kind` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Interruption => "interruption",
            Reason::Rebalance => "rebalance",
            Reason::CapacityBlockExpiring => "capacity_block_expiring",
            Reason::ScheduledChange => "scheduled_change",
            Reason::GroupTerminating => "group_terminating",
            Reason::Unhealthy => "unhealthy",
        }
    }
}

/// One worker's notice: who, why, and when AWS acts (RFC 3339), if the notice says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub ip: IpAddr,
    pub kind: Reason,
    pub deadline: Option<String>,
}

/// The file's body: one generation's notices, replaced at every signal so that the job never
/// reads an earlier generation's as its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notices {
    pub generation: u64,
    pub notices: Vec<Notice>,
}

impl Notices {
    pub fn render(&self) -> Vec<u8> {
        // Numbers, IPs and fixed words: serializing cannot fail.
        let mut json = serde_json::to_vec(self).unwrap_or_default();
        json.push(b'\n');
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN: &str = include_str!("../../tests/fixtures/protocol/notices.json");

    #[test]
    fn the_golden_body_is_what_dtd_writes_and_reads_back() {
        let body = Notices {
            generation: 8,
            notices: vec![
                Notice {
                    ip: "10.0.1.5".parse().unwrap(),
                    kind: Reason::Interruption,
                    deadline: Some("2026-11-24T08:16:41Z".into()),
                },
                Notice {
                    ip: "10.0.1.6".parse().unwrap(),
                    kind: Reason::Unhealthy,
                    deadline: None,
                },
            ],
        };
        assert_eq!(String::from_utf8(body.render()).unwrap(), GOLDEN);
        assert_eq!(serde_json::from_str::<Notices>(GOLDEN).unwrap(), body);
    }

    #[test]
    fn each_reason_is_spelled_as_serde_writes_it() {
        for r in Reason::ALL {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
    }
}
