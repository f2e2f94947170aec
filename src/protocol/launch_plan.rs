//! `<shared_dir>/launch_plan`: which nodes the job's launchers (torchrun) start on for the current
//! generation, in host-file order. Written by `dtd run` (with `job.launcher`) after the host files
//! and before the `generation` file; read by every worker's `dtd agent`.
//!
//! One file, replaced atomically, so an agent never pairs a generation with another generation's
//! hosts (reading `generation` and then a host file could). The node rank is a host's place in
//! `hosts`; the first host holds the rendezvous.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ParseError;

/// The plan's name in the shared directory (not configurable: agents look for it).
pub const PLAN_FILE: &str = "launch_plan";

/// Room for more than 20,000 IPv6 hosts; an agent reads no more.
pub const MAX_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchPlan {
    pub generation: u64,
    /// The nodes, in host-file order; never two the same.
    pub hosts: Vec<IpAddr>,
}

impl LaunchPlan {
    pub fn render(&self) -> Vec<u8> {
        // Serializing a number and IPs cannot fail.
        let mut json = serde_json::to_vec(self).unwrap_or_default();
        json.push(b'\n');
        json
    }

    /// Parses a plan read from the shared directory: IPs parse as IPs (serde refuses anything
    /// else), and a host listed twice makes the plan no plan (ranks would collide).
    pub fn parse(body: &[u8]) -> Result<LaunchPlan, ParseError> {
        let plan: LaunchPlan = serde_json::from_slice(body).map_err(ParseError::Plan)?;
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = plan.hosts.iter().find(|ip| !seen.insert(**ip)) {
            return Err(ParseError::PlanListsTwice(*twice));
        }
        Ok(plan)
    }

    /// This node's rank, when the plan lists it.
    pub fn rank_of(&self, ip: IpAddr) -> Option<usize> {
        self.hosts.iter().position(|h| *h == ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_round_trips_and_ranks_follow_the_order() {
        let plan = LaunchPlan {
            generation: 7,
            hosts: vec!["127.0.0.3".parse().unwrap(), "fe80::1".parse().unwrap()],
        };
        let body = plan.render();
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            "{\"generation\":7,\"hosts\":[\"127.0.0.3\",\"fe80::1\"]}\n"
        );
        assert_eq!(LaunchPlan::parse(&body).unwrap(), plan);
        assert_eq!(plan.rank_of("fe80::1".parse().unwrap()), Some(1));
        assert_eq!(plan.rank_of("127.0.0.9".parse().unwrap()), None);
    }

    /// The golden plan under tests/fixtures/protocol/, which dt_torch's tests read too.
    #[test]
    fn the_golden_plan_is_what_dtd_writes() {
        let golden = include_str!("../../tests/fixtures/protocol/launch_plan.json");
        let plan = LaunchPlan {
            generation: 8,
            hosts: ["10.0.1.6", "10.0.1.5", "fd00::7"]
                .map(|ip| ip.parse().unwrap())
                .to_vec(),
        };
        assert_eq!(String::from_utf8(plan.render()).unwrap(), golden);
        assert_eq!(LaunchPlan::parse(golden.as_bytes()).unwrap(), plan);
    }

    #[test]
    fn anything_else_is_no_plan() {
        for bad in [
            &b"{\"generation\":1,\"hosts\":[\"10.0.0.1\",\"10.0.0.1\"]}"[..],
            b"{\"generation\":1,\"hosts\":[\"10.0.0.1;reboot\"]}",
            b"{\"generation\":-1,\"hosts\":[]}",
            b"{\"generation\":18446744073709551616,\"hosts\":[]}",
            b"{\"generation\":1,\"hosts\":[],\"argv\":[\"sh\"]}",
            b"7\n",
        ] {
            assert!(
                LaunchPlan::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
