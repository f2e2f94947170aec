//! torchrun's command line for one node of one generation: the user's torchrun argv, the
//! rendezvous the agent derives from the launch plan, then the user's script. Every value the
//! agent adds is a number, an IP or the cluster's name: nothing from a file reaches it as text.

use std::net::{IpAddr, SocketAddr};

use crate::config::Launcher;
use crate::protocol::launch_plan::LaunchPlan;

/// One node's place in one generation's world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub generation: u64,
    pub nnodes: usize,
    pub rank: usize,
    /// The first listed node's rendezvous address: it hosts the c10d store.
    pub endpoint: SocketAddr,
    pub local: IpAddr,
}

impl Placement {
    /// Where `ip` stands in `plan`; `None` when the plan does not list it.
    pub fn of(plan: &LaunchPlan, ip: IpAddr, port: u16) -> Option<Placement> {
        let rank = plan.rank_of(ip)?;
        Some(Placement {
            generation: plan.generation,
            nnodes: plan.hosts.len(),
            rank,
            endpoint: SocketAddr::new(*plan.hosts.first()?, port),
            local: ip,
        })
    }

    /// A fresh rendezvous per generation: torchrun never meets a closed or half-full one.
    pub fn rdzv_id(&self, cluster: &str) -> String {
        format!("{cluster}-g{}", self.generation)
    }
}

/// torchrun's arguments after its program (the program is `launcher.torchrun[0]`).
pub fn args(launcher: &Launcher, cluster: &str, at: &Placement) -> Vec<String> {
    let mut argv: Vec<String> = launcher.torchrun[1..].to_vec();
    // No --node-rank: the c10d rendezvous assigns ranks itself, and torch 2.15 warns that it
    // ignores one given.
    argv.extend([
        format!("--nnodes={}", at.nnodes),
        format!("--nproc-per-node={}", launcher.nproc_per_node),
        "--rdzv-backend=c10d".to_string(),
        format!("--rdzv-endpoint={}", at.endpoint),
        format!("--rdzv-id={}", at.rdzv_id(cluster)),
        // Said, not guessed: torchrun guesses from the host's addresses, and on a host that
        // holds several nodes' addresses (or a test on loopback) every node would think it hosts
        // the store.
        format!("--rdzv-conf=is_host={}", at.rank == 0),
        format!("--local-addr={}", at.local),
        format!("--max-restarts={}", launcher.max_restarts),
    ]);
    argv.extend(launcher.script.iter().cloned());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher() -> Launcher {
        let yaml = "torchrun: [/opt/venv/bin/torchrun, --monitor-interval=1]\n\
                    script: [/shared/train.py, --epochs, '90']\nnproc_per_node: 2\n";
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_rendezvous_follows_the_plan() {
        let plan = LaunchPlan {
            generation: 12,
            hosts: vec!["10.0.1.5".parse().unwrap(), "fe80::7".parse().unwrap()],
        };
        let at = Placement::of(&plan, "fe80::7".parse().unwrap(), 29400).unwrap();
        assert_eq!(
            args(&launcher(), "demo", &at),
            [
                "--monitor-interval=1",
                "--nnodes=2",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=10.0.1.5:29400",
                "--rdzv-id=demo-g12",
                "--rdzv-conf=is_host=false",
                "--local-addr=fe80::7",
                "--max-restarts=0",
                "/shared/train.py",
                "--epochs",
                "90",
            ]
        );
        let first = Placement::of(&plan, "10.0.1.5".parse().unwrap(), 29400).unwrap();
        assert!(args(&launcher(), "demo", &first).contains(&"--rdzv-conf=is_host=true".into()));
        assert_eq!(
            Placement::of(&plan, "10.0.1.6".parse().unwrap(), 29400),
            None
        );
    }

    #[test]
    fn an_ipv6_endpoint_is_bracketed() {
        let plan = LaunchPlan {
            generation: 1,
            hosts: vec!["fe80::7".parse().unwrap()],
        };
        let at = Placement::of(&plan, "fe80::7".parse().unwrap(), 29400).unwrap();
        assert!(args(&launcher(), "c", &at).contains(&"--rdzv-endpoint=[fe80::7]:29400".into()));
    }
}
