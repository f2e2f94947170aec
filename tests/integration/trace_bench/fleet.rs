//! A replay's instances: the trace's, those `dtd` launched, and what EC2 tells them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::torchrun::{Node, Story};

/// The instances of a replay: the trace's, and those `dtd` launched.
pub(crate) struct Fleet {
    /// The trace's peak: its arrivals are launched only while fewer are live.
    pub(super) nodes: usize,
    pub(super) trace: BTreeMap<u64, Node>,
    /// Slots warned of their reclaim (or recommended to go), still running until it.
    pub(super) warned: BTreeSet<u64>,
    /// Instances `dtd` launched, by id.
    launched: BTreeMap<String, Node>,
    /// Every instance id ever seen, so that one `dtd` terminated is not adopted again.
    pub(super) seen: BTreeSet<String>,
    /// Each interruption of one of ours: when its first notice came (a rebalance
    /// recommendation, the warning, or the vanish), seconds in, and the instance's IP.
    pub hits: Vec<(f64, &'static str)>,
    /// The trace's arrivals not launched (the fleet was at its peak).
    pub skipped: u64,
    /// How many instances `dtd` launched, and how many of the fleet it terminated.
    pub adopted: u64,
    pub ended_by_dtd: u64,
}

impl Fleet {
    pub(super) fn new(nodes: usize) -> Fleet {
        Fleet {
            nodes,
            trace: BTreeMap::new(),
            warned: BTreeSet::new(),
            launched: BTreeMap::new(),
            seen: BTreeSet::new(),
            hits: Vec::new(),
            skipped: 0,
            adopted: 0,
            ended_by_dtd: 0,
        }
    }

    pub(super) fn live(&self) -> usize {
        self.trace.len() - self.warned.len() + self.launched.len()
    }

    /// Every instance stopped (their agents and what they run killed); the counts kept.
    pub(super) fn stopped(mut self) -> Fleet {
        self.trace.clear();
        self.launched.clear();
        self
    }

    /// Follows EC2: an agent on each instance `dtd` launched into the subnet, and the agent of
    /// each one `dtd` terminated (a drained straggler, say) gone with it.
    pub(super) fn follow_ec2(&mut self, s: &Story) {
        let Some(listed) = instances(s) else {
            return; // moto busy: the next tick
        };
        for (id, (ip, live)) in &listed {
            if *live && self.seen.insert(id.clone()) {
                let ip: &'static str = Box::leak(ip.clone().into_boxed_str());
                self.launched.insert(id.clone(), s.adopt(ip, id.clone()));
                self.adopted += 1;
            }
        }
        let ended = |id: &String| listed.get(id).is_some_and(|(_, live)| !live);
        let before = self.trace.len() + self.launched.len();
        self.launched.retain(|id, _| !ended(id));
        let gone: Vec<u64> = (self.trace.iter())
            .filter(|(_, n)| ended(&n.id))
            .map(|(slot, _)| *slot)
            .collect();
        for slot in gone {
            self.trace.remove(&slot);
            self.warned.remove(&slot);
        }
        self.ended_by_dtd += (before - self.trace.len() - self.launched.len()) as u64;
    }
}

/// The instances in the replay's subnet: id -> (IP, pending or running).
fn instances(s: &Story) -> Option<BTreeMap<String, (String, bool)>> {
    let subnet = aws_sdk_ec2::types::Filter::builder()
        .name("subnet-id")
        .values(&s.subnet)
        .build();
    let call = s.c.ec2.describe_instances().filters(subnet).send();
    let out = s.c.rt.block_on(call).ok()?;
    let found = out.reservations().iter().flat_map(|r| r.instances());
    let listed = found.filter_map(|i| {
        let state = i.state()?.name()?.as_str();
        let live = matches!(state, "pending" | "running");
        Some((
            i.instance_id()?.to_string(),
            (i.private_ip_address()?.to_string(), live),
        ))
    });
    Some(listed.collect())
}

/// EC2's Spot warning on the instance's metadata, for a reclaim `left` from now.
pub(super) fn warn(node: &Node, left: Duration) {
    let deadline = std::time::SystemTime::now() + left;
    let time = humantime::format_rfc3339_seconds(deadline);
    node.imds.set(
        "spot/instance-action",
        &format!(r#"{{"action":"terminate","time":"{time}"}}"#),
    );
}

/// EC2's rebalance recommendation, as AWS sends it: on the instance's metadata (its agent
/// reports it; a worker's word drains nothing) and to EventBridge, whose rule delivers it to the
/// event queue (`dtd` drains it, by default).
pub(super) fn recommend_rebalance(s: &Story, node: &Node) {
    let time = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    node.imds.set(
        "events/recommendations/rebalance",
        &format!(r#"{{"noticeTime":"{time}"}}"#),
    );
    let detail = serde_json::json!({ "instance-id": node.id });
    crate::support::put_ec2_event(&s.c, "EC2 Instance Rebalance Recommendation", detail);
}
