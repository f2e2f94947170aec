//! torchrun's command for one node: its arguments (the user's torchrun argv, the rendezvous the
//! agent derives from the launch plan and the strategy, then the user's script) and its
//! environment. Every value the agent adds is a number, an IP, a path of its config or the
//! cluster's name: nothing from a file reaches it as text.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use crate::agent::Identity;
use crate::config::{Config, Elastic, Launcher, Strategy};
use crate::program::EnvVar;
use crate::protocol::launch_plan::{self, LaunchPlan};

/// torch's rendezvous keep-alive under the elastic strategy: a node that left (stopped by a
/// signal, which does not take it out of the rendezvous) or vanished is dropped after
/// interval × attempts, and only then can the survivors' next round begin. torch's defaults
/// (5 s × 3) would add 15 s to every leave.
const KEEP_ALIVE: (u32, u32) = (1, 5);

/// One node's place in one generation's world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub generation: u64,
    /// The plan's nodes, in its order; this node is `hosts[rank]`.
    pub hosts: Vec<IpAddr>,
    pub rank: usize,
    /// The first listed node's rendezvous address: it hosts the c10d store.
    pub endpoint: SocketAddr,
    pub local: IpAddr,
}

impl Placement {
    /// Where `ip` stands in `plan`; `None` when the plan does not list it. Under `in_place` each
    /// node holds its own store: its torchrun is a world of one node.
    pub fn of(plan: &LaunchPlan, ip: IpAddr, port: u16, strategy: Strategy) -> Option<Placement> {
        let rank = plan.rank_of(ip)?;
        // In place, the store is the node's own, on a port the kernel picks (several loopback
        // "nodes" share a host; torchft's process groups use ephemeral ports between nodes
        // anyway), and torchrun tells the training which (MASTER_PORT).
        let endpoint = match strategy {
            Strategy::InPlace => SocketAddr::new(ip, 0),
            Strategy::Generation | Strategy::Elastic => SocketAddr::new(*plan.hosts.first()?, port),
        };
        Some(Placement {
            generation: plan.generation,
            hosts: plan.hosts.clone(),
            rank,
            endpoint,
            local: ip,
        })
    }

    pub fn nnodes(&self) -> usize {
        self.hosts.len()
    }

    /// Whether a run started for `self` serves `next` as it is: under `generation` only the
    /// same generation does; under `elastic` any generation with the same store holder does
    /// (torchrun's own rendezvous takes the new membership in); under `in_place` any plan that
    /// lists the node does (torchft takes it in).
    pub fn same_run(&self, next: &Placement, strategy: Strategy) -> bool {
        match strategy {
            Strategy::Generation => self == next,
            Strategy::Elastic | Strategy::InPlace => {
                self.endpoint == next.endpoint && self.local == next.local
            }
        }
    }

    /// The nodes `next` no longer lists: their processes may be gone or hung, and the workers
    /// here must leave the collective they share with them.
    pub fn lost_in(&self, next: &Placement) -> Vec<IpAddr> {
        let kept = |ip: &&IpAddr| !next.hosts.contains(ip);
        self.hosts.iter().filter(kept).copied().collect()
    }

    /// `generation`: a fresh rendezvous per generation, so torchrun never meets a closed or
    /// half-full one. `elastic`: one per store holder (the store dies with the holder's torchrun).
    /// `in_place`: one per node, which holds its own.
    pub fn rdzv_id(&self, cluster: &str, strategy: Strategy) -> String {
        let holder = || self.endpoint.ip().to_string().replace([':', '.'], "-");
        match strategy {
            Strategy::Generation => format!("{cluster}-g{}", self.generation),
            Strategy::Elastic => format!("{cluster}-e{}", holder()),
            Strategy::InPlace => format!("{cluster}-n{}", holder()),
        }
    }
}

/// torchrun's arguments after its program (the program is `launcher.torchrun[0]`).
pub fn args(launcher: &Launcher, cluster: &str, at: &Placement) -> Vec<String> {
    let elastic = launcher.elastic();
    let mut argv: Vec<String> = launcher.torchrun[1..].to_vec();
    // Said, not guessed: torchrun guesses from the host's addresses, and on a host that holds
    // several nodes' addresses (or a test on loopback) every node would think it hosts the store.
    let mut conf = format!("is_host={}", at.rank == 0 || launcher.in_place().is_some());
    let nnodes = match &elastic {
        None if launcher.in_place().is_some() => "1".to_string(),
        None => at.nnodes().to_string(),
        Some(Elastic {
            min_nodes,
            max_nodes,
            last_call,
        }) => {
            let (interval, attempts) = KEEP_ALIVE;
            conf += &format!(
                ",last_call_timeout={},keep_alive_interval={interval},keep_alive_max_attempt={attempts}",
                last_call.as_secs()
            );
            format!("{min_nodes}:{max_nodes}")
        }
    };
    // No --node-rank: the c10d rendezvous assigns ranks itself, and torch 2.15 warns that it
    // ignores one given.
    argv.extend([
        format!("--nnodes={nnodes}"),
        format!("--nproc-per-node={}", launcher.nproc_per_node),
        "--rdzv-backend=c10d".to_string(),
        format!("--rdzv-endpoint={}", at.endpoint),
        format!("--rdzv-id={}", at.rdzv_id(cluster, launcher.strategy)),
        format!("--rdzv-conf={conf}"),
        format!("--local-addr={}", at.local),
        format!("--max-restarts={}", launcher.max_restarts()),
    ]);
    argv.extend(launcher.script.iter().cloned());
    argv
}

/// What torchrun and the script it starts learn from the agent, then the config's `env`.
pub fn env(cfg: &Config, launcher: &Launcher, who: &Identity, at: &Placement) -> Vec<EnvVar> {
    let mut env = crate::agent::env::agent_env(who, &cfg.shared_dir, &cfg.cluster);
    let path = |p: &Path| OsString::from(p);
    let shared = |name: &str| path(&cfg.shared_dir.join(name));
    env.extend([
        ("DT_GENERATION".into(), at.generation.to_string().into()),
        ("DT_NNODES".into(), at.nnodes().to_string().into()),
        ("DT_STRATEGY".into(), launcher.strategy.as_str().into()),
        ("DT_LAUNCH_PLAN".into(), shared(launch_plan::PLAN_FILE)),
        ("DT_ACK_FILE".into(), path(&cfg.job.ack.file)),
        ("DT_PROGRESS_FILE".into(), path(&cfg.job.progress)),
        (
            "DT_NOTICES_FILE".into(),
            shared(crate::protocol::notices::NOTICES_FILE),
        ),
    ]);
    if launcher.elastic().is_some() {
        // torchrun shares its rendezvous store with the workers by default, and a node that
        // joins a running world then waits for a MASTER_ADDR that rank 0, which built its store
        // info in an earlier round, never writes again (seen with torch 2.15: the round times
        // out after 60 s). Unshared, rank 0 writes it every round (pytorch issue 135712 gives
        // the same advice for restarts).
        env.push(("TORCH_DISABLE_SHARE_RDZV_TCP_STORE".into(), "1".into()));
    }
    if let Some(ip) = launcher.in_place() {
        env.extend(in_place_env(ip));
    }
    let user = launcher.env.iter();
    env.extend(user.map(|(k, v)| (k.clone().into(), OsString::from(v))));
    env
}

/// How torchft in the training reaches `dtd`'s Lighthouse and how long it waits for peers.
fn in_place_env(ip: &crate::config::InPlace) -> Vec<EnvVar> {
    vec![
        ("TORCHFT_LIGHTHOUSE".into(), ip.url().into()),
        (
            "DT_COLLECTIVE_TIMEOUT".into(),
            ip.collective_timeout.as_secs().to_string().into(),
        ),
        ("DT_MIN_NODES".into(), ip.min_nodes.to_string().into()),
        // A quorum waits up to a minute, retried this often: a Lighthouse down for about a
        // minute (dtd restarting) pauses the training instead of crashing every node.
        ("TORCHFT_QUORUM_RETRIES".into(), "120".into()),
        // torchft's Rust side logs every quorum and commit at INFO: a line per node per step.
        ("RUST_LOG".into(), "warn".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher() -> Launcher {
        let yaml = "torchrun: [/opt/venv/bin/torchrun, --monitor-interval=1]\n\
                    script: [/shared/train.py, --epochs, '90']\nnproc_per_node: 2\n";
        serde_yaml::from_str(yaml).unwrap()
    }

    fn plan(generation: u64, hosts: &[&str]) -> LaunchPlan {
        LaunchPlan {
            generation,
            hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
        }
    }

    /// Where the node at `me` stands in `plan` (None: not listed), the rendezvous on 29400.
    fn placed(plan: &LaunchPlan, me: &str, strategy: Strategy) -> Option<Placement> {
        Placement::of(plan, me.parse().unwrap(), 29400, strategy)
    }

    #[test]
    fn the_rendezvous_follows_the_plan() {
        let plan = plan(12, &["10.0.1.5", "fe80::7"]);
        let at = placed(&plan, "fe80::7", Strategy::Generation).unwrap();
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
        let first = placed(&plan, "10.0.1.5", Strategy::Generation).unwrap();
        assert!(args(&launcher(), "demo", &first).contains(&"--rdzv-conf=is_host=true".into()));
        assert_eq!(placed(&plan, "10.0.1.6", Strategy::Generation), None);
    }

    #[test]
    fn the_elastic_strategy_keeps_one_rendezvous_per_holder() {
        let yaml = "torchrun: [/t]\nscript: [/s]\nstrategy: elastic\nelastic: { min_nodes: 2, max_nodes: 8 }\n";
        let l: Launcher = serde_yaml::from_str(yaml).unwrap();
        let e = Strategy::Elastic;
        let at = |generation, hosts: &[&str]| placed(&plan(generation, hosts), "10.0.1.6", e);
        let g3 = at(3, &["10.0.1.5", "10.0.1.6"]).unwrap();
        assert_eq!(
            args(&l, "demo", &g3)[..7],
            [
                "--nnodes=2:8",
                "--nproc-per-node=gpu",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=10.0.1.5:29400",
                "--rdzv-id=demo-e10-0-1-5",
                "--rdzv-conf=is_host=false,last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=5",
                "--local-addr=10.0.1.6",
            ]
        );
        assert!(args(&l, "demo", &g3).contains(&"--max-restarts=1000".into()));
        // A join keeps the run; a leave keeps it and names who is gone; a new holder ends it.
        let g4 = at(4, &["10.0.1.5", "10.0.1.6", "10.0.1.7"]).unwrap();
        let g5 = at(5, &["10.0.1.5", "10.0.1.6"]).unwrap();
        let g6 = at(6, &["10.0.1.6"]).unwrap();
        assert!(g3.same_run(&g4, e) && g4.same_run(&g5, e) && !g5.same_run(&g6, e));
        assert!(!g3.same_run(&g4, Strategy::Generation));
        assert_eq!(g4.lost_in(&g5), ["10.0.1.7".parse::<IpAddr>().unwrap()]);
        assert!(g3.lost_in(&g4).is_empty());
    }

    #[test]
    fn in_place_each_node_runs_a_world_of_one_for_as_long_as_it_is_listed() {
        let yaml = "torchrun: [/t]\nscript: [/s]\nstrategy: in_place\nin_place: { lighthouse: '10.0.0.5:29510' }\n";
        let l: Launcher = serde_yaml::from_str(yaml).unwrap();
        let at = |generation, hosts: &[&str]| {
            placed(&plan(generation, hosts), "10.0.1.6", Strategy::InPlace)
        };
        let g3 = at(3, &["10.0.1.5", "10.0.1.6"]).unwrap();
        assert_eq!(
            args(&l, "demo", &g3)[..7],
            [
                "--nnodes=1",
                "--nproc-per-node=gpu",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=10.0.1.6:0",
                "--rdzv-id=demo-n10-0-1-6",
                "--rdzv-conf=is_host=true",
                "--local-addr=10.0.1.6",
            ]
        );
        assert!(args(&l, "demo", &g3).contains(&"--max-restarts=10".into()));
        // Joins and leaves of others, even of the first node, keep the run.
        let g4 = at(4, &["10.0.1.6", "10.0.1.7"]).unwrap();
        assert!(g3.same_run(&g4, Strategy::InPlace));
        assert!(at(5, &["10.0.1.7"]).is_none());
    }

    #[test]
    fn an_ipv6_endpoint_is_bracketed() {
        let at = placed(&plan(1, &["fe80::7"]), "fe80::7", Strategy::Generation).unwrap();
        assert!(args(&launcher(), "c", &at).contains(&"--rdzv-endpoint=[fe80::7]:29400".into()));
    }
}
