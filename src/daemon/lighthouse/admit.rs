//! Who may say what to the Lighthouse: the rules of dtd's front (front.rs), without I/O.
//!
//! torchft 0.2.0's Lighthouse believes every caller. The front lets through only what a node of
//! the plan says of itself: a connection from a node's IP (or from this host, see below), a
//! replica id of `dt_torch`'s form (`<node IP>#<n>:<uuid>`) that names that same node, a manager
//! and a store at that node's IP, and one live replica per node. A loopback connection can only
//! come from a process on the master, which reaches the Lighthouse itself on loopback anyway, so
//! it is judged by the replica id alone (the loopback tests' nodes are all on one host).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::grpc::{GrpcError, Said};

/// Why a connection or a call was refused; its `class` and source make the journal's key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("connected, but is no node of the plan")]
    NotANode,
    #[error("asked for {0} (only a node's heartbeat and quorum calls are served: not torchft's dashboard, its status page or its kill route)")]
    Route(String),
    #[error("sent a call the front cannot read: {0}")]
    Malformed(#[from] GrpcError),
    #[error("named replica {0}, which is not dt_torch's `<node IP>#<n>:<uuid>`")]
    NotDtTorch(String),
    #[error("spoke for replica {replica} of node {node}, not its own")]
    ForAnother { replica: String, node: IpAddr },
    #[error("spoke for replica {replica} of {node}, which is no node of the plan")]
    NotInPlan { replica: String, node: IpAddr },
    #[error("gave replica {replica} a manager or store at {address}, not at its node's IP")]
    Elsewhere { replica: String, address: String },
    #[error("spoke for replica {replica} while {live} is its node's live replica")]
    Second { replica: String, live: String },
}

impl Refusal {
    /// The kind of refusal, journaled once per source.
    pub fn class(&self) -> &'static str {
        match self {
            Refusal::NotANode => "not-a-node",
            Refusal::Route(path) if path.ends_with("/kill") => "kill",
            Refusal::Route(_) => "route",
            Refusal::Malformed(_) => "malformed",
            Refusal::NotDtTorch(_) => "replica-id",
            Refusal::ForAnother { .. } => "another-node",
            Refusal::NotInPlan { .. } => "not-in-plan",
            Refusal::Elsewhere { .. } => "address",
            Refusal::Second { .. } => "second-replica",
        }
    }
}

/// What the front knows: the plan's nodes and each node's live replica.
pub struct Gate {
    nodes: HashSet<IpAddr>,
    live: HashMap<IpAddr, Live>,
    /// A replica silent this long is not live (the Lighthouse's own `heartbeat_timeout`).
    heartbeat_timeout: Duration,
}

struct Live {
    replica: String,
    heard: Instant,
}

impl Gate {
    pub fn new(heartbeat_timeout: Duration) -> Gate {
        Gate {
            nodes: HashSet::new(),
            live: HashMap::new(),
            heartbeat_timeout,
        }
    }

    /// The nodes of the plan and those leaving it (their training may still be finishing a step).
    pub fn set_nodes(&mut self, nodes: impl IntoIterator<Item = IpAddr>) {
        self.nodes = nodes.into_iter().collect();
        let nodes = &self.nodes;
        self.live.retain(|ip, _| nodes.contains(ip));
    }

    pub fn connection(&self, from: IpAddr) -> Result<(), Refusal> {
        match from.is_loopback() || self.nodes.contains(&from) {
            true => Ok(()),
            false => Err(Refusal::NotANode),
        }
    }

    /// Whether `from` may say this; an admitted call keeps its replica live.
    pub fn judge(&mut self, from: IpAddr, said: &Said, now: Instant) -> Result<(), Refusal> {
        let replica = said.replica();
        let node = node_of(replica).ok_or_else(|| Refusal::NotDtTorch(shown(replica)))?;
        let named = || shown(replica);
        if !from.is_loopback() && node != from {
            return Err(Refusal::ForAnother {
                replica: named(),
                node,
            });
        }
        if !self.nodes.contains(&node) {
            return Err(Refusal::NotInPlan {
                replica: named(),
                node,
            });
        }
        if let Said::Quorum {
            address,
            store_address,
            ..
        } = said
        {
            for a in [address, store_address] {
                if host_of(a) != Some(node) {
                    let address = shown(a);
                    return Err(Refusal::Elsewhere {
                        replica: named(),
                        address,
                    });
                }
            }
        }
        self.keep_live(node, replica, now)
    }

    fn keep_live(&mut self, node: IpAddr, replica: &str, now: Instant) -> Result<(), Refusal> {
        let timeout = self.heartbeat_timeout;
        match self.live.get_mut(&node) {
            Some(l) if l.replica != replica && now.duration_since(l.heard) < timeout => {
                Err(Refusal::Second {
                    replica: shown(replica),
                    live: shown(&l.replica),
                })
            }
            Some(l) => {
                l.replica.replace_range(.., replica);
                l.heard = now;
                Ok(())
            }
            None => {
                let replica = replica.to_string();
                self.live.insert(
                    node,
                    Live {
                        replica,
                        heard: now,
                    },
                );
                Ok(())
            }
        }
    }
}

/// The node a `dt_torch` replica id names: the IP before its `#`.
fn node_of(replica: &str) -> Option<IpAddr> {
    let (ip, rest) = replica.split_once('#')?;
    rest.contains(':').then_some(())?;
    ip.parse().ok()
}

/// The IP of `http://<ip>:<port>` (the manager) or `<ip>:<port>` (the store).
fn host_of(address: &str) -> Option<IpAddr> {
    let rest = address.strip_prefix("http://").unwrap_or(address);
    let (host, port) = rest.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// A caller's text as people are shown it: at most 80 characters, no control characters.
pub fn shown(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(80)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "10.0.1.5";
    const B: &str = "10.0.1.6";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn gate() -> Gate {
        let mut g = Gate::new(Duration::from_secs(2));
        g.set_nodes([ip(A), ip(B)]);
        g
    }

    fn beat(replica: &str) -> Said {
        Said::Heartbeat {
            replica: replica.into(),
        }
    }

    fn ask(replica: &str, manager: &str, store: &str) -> Said {
        Said::Quorum {
            replica: replica.into(),
            address: format!("http://{manager}:40001"),
            store_address: format!("{store}:29500"),
            step: 1_000_000,
        }
    }

    #[test]
    fn a_node_speaks_for_itself() {
        let (mut g, now) = (gate(), Instant::now());
        assert_eq!(g.connection(ip(A)), Ok(()));
        assert_eq!(g.judge(ip(A), &beat("10.0.1.5#5:u1"), now), Ok(()));
        assert_eq!(g.judge(ip(A), &ask("10.0.1.5#5:u1", A, A), now), Ok(()));
    }

    #[test]
    fn an_address_outside_the_plan_is_refused_at_once() {
        assert_eq!(gate().connection(ip("10.0.1.9")), Err(Refusal::NotANode));
        assert_eq!(gate().connection(ip("127.0.0.1")), Ok(()));
    }

    #[test]
    fn a_node_cannot_speak_for_another_or_for_none() {
        let (mut g, now) = (gate(), Instant::now());
        let refused = |g: &mut Gate, from: &str, said: Said| g.judge(ip(from), &said, now).err();
        let class = |r: Option<Refusal>| r.map(|r| r.class());
        assert_eq!(
            class(refused(&mut g, A, beat("10.0.1.6#6:u"))),
            Some("another-node")
        );
        assert_eq!(class(refused(&mut g, A, beat("ghost"))), Some("replica-id"));
        assert_eq!(
            class(refused(&mut g, A, beat("10.0.1.5#5"))),
            Some("replica-id")
        );
        let lo = "127.0.0.1";
        assert_eq!(
            class(refused(&mut g, lo, beat("10.0.1.9#9:u"))),
            Some("not-in-plan")
        );
        let far = ask("10.0.1.5#5:u", "10.9.9.9", A);
        assert_eq!(class(refused(&mut g, A, far)), Some("address"));
        let store = ask("10.0.1.5#5:u", A, "10.0.1.6");
        assert_eq!(class(refused(&mut g, A, store)), Some("address"));
        assert_eq!(g.judge(ip(lo), &beat("10.0.1.6#6:u"), now), Ok(()));
    }

    #[test]
    fn a_second_replica_waits_until_the_first_is_silent() {
        let (mut g, now) = (gate(), Instant::now());
        assert_eq!(g.judge(ip(A), &beat("10.0.1.5#5:u1"), now), Ok(()));
        let twin = g.judge(ip(A), &beat("10.0.1.5#5:u2"), now + Duration::from_secs(1));
        assert_eq!(twin.map_err(|r| r.class()), Err("second-replica"));
        let later = now + Duration::from_secs(2);
        assert_eq!(g.judge(ip(A), &beat("10.0.1.5#5:u2"), later), Ok(()));
        let back = g.judge(ip(A), &beat("10.0.1.5#5:u1"), later);
        assert_eq!(back.map_err(|r| r.class()), Err("second-replica"));
    }

    #[test]
    fn a_node_out_of_the_plan_is_refused_and_forgotten() {
        let (mut g, now) = (gate(), Instant::now());
        assert_eq!(g.judge(ip(B), &beat("10.0.1.6#6:u1"), now), Ok(()));
        g.set_nodes([ip(A)]);
        assert_eq!(g.connection(ip(B)), Err(Refusal::NotANode));
        g.set_nodes([ip(A), ip(B)]);
        assert_eq!(g.judge(ip(B), &beat("10.0.1.6#6:u2"), now), Ok(()));
    }

    #[test]
    fn what_people_see_of_a_callers_text_is_bounded() {
        assert_eq!(shown("a\u{1b}[2Jb"), "a?[2Jb");
        assert_eq!(shown(&"x".repeat(500)).len(), 80);
    }
}
