//! What one pass reads and never changes: the rules, the time, the snapshot and its indexes,
//! and the two facts every rule takes as given: which instances are the cluster's (a member
//! the group is terminating is not) and which acknowledgement is believed.

use rustc_hash::FxHashMap;

use super::rules::{Facts, Rules};
use crate::model::*;

/// Works on positions in the snapshot's instance list: ids are hashed once per pass, because
/// comparing and hashing them dominated a pass over 10,000 workers.
pub(super) struct Inputs<'a> {
    pub rules: &'a Rules,
    pub now: Millis,
    pub list: &'a [Instance],
    pub facts: Vec<Facts>,
    /// Cluster workers only: instance id to its position in `list`.
    pub index: FxHashMap<&'a str, usize>,
    pub ec2_ok: bool,
    /// The worker group, when configured and read; `group_ok` is false when it could not be.
    pub group: Option<&'a Group>,
    pub group_ok: bool,
    pub resume: Option<Millis>,
    pub markers: Option<&'a Markers>,
    pub acks: Option<&'a Acks>,
    pub mount_targets: Option<&'a MountTargets>,
    /// The zone of each capacity choice's subnet, as far as EC2 said.
    pub subnet_zones: &'a std::collections::BTreeMap<String, String>,
    /// The capacity choices EC2 refused to `dtctl add`.
    pub add_refusals: &'a [crate::protocol::capacity_refusals::CapacityRefusal],
    /// The reservations `workers.capacity` names by id, when it names any.
    pub reservations: Option<&'a Read<std::collections::BTreeMap<String, Reservation>>>,
    /// The job's progress file, when stall detection reads it and the job wrote one.
    pub progress: Option<&'a Read<Progress>>,
    /// The generation the `ack` file acknowledges, when dtd wrote it (see `trust`).
    pub ack: Option<u64>,
    /// An `ack` file naming a generation dtd never wrote: ignored, and shown.
    pub ack_refused: Option<u64>,
    /// The generation this pass's changes make.
    pub next_gen: u64,
}

impl<'a> Inputs<'a> {
    pub fn new(rules: &'a Rules, snap: &'a Snapshot, prev: &State, now: Millis) -> Self {
        let group = snap.group.as_ref().and_then(|g| g.as_ref().ok());
        let list: &[Instance] = snap.instances.as_deref().unwrap_or_default();
        let mut facts: Vec<Facts> = list.iter().map(|i| rules.facts(i)).collect();
        if let Some(g) = group {
            drop_terminating(g, list, &mut facts);
        }
        let mut index = FxHashMap::default();
        index.reserve(list.len());
        for (at, i) in list.iter().enumerate() {
            // An instance listed twice (pages that shifted) is decided once.
            if facts[at].cluster && index.insert(i.id.as_str(), at).is_some() {
                facts[at].cluster = false;
            }
        }
        let acks = snap.acks.as_ref().ok();
        let (ack, ack_refused) = match super::ack::from_file(prev, acks) {
            _ if rules.ack_by_launcher => {
                let markers = snap.markers.as_ref().ok();
                (super::ack::by_launcher(markers, prev), None)
            }
            Ok(g) => (g, None),
            Err(claimed) => (None, Some(claimed)),
        };
        Inputs {
            rules,
            now,
            list,
            facts,
            index,
            ec2_ok: snap.instances.is_ok(),
            group,
            group_ok: !matches!(snap.group, Some(Err(_))),
            resume: snap.resume_requested,
            markers: snap.markers.as_ref().ok(),
            acks: snap.acks.as_ref().ok(),
            mount_targets: snap.mount_targets.as_ref(),
            subnet_zones: &snap.subnet_zones,
            add_refusals: &snap.capacity_refusals,
            reservations: snap.reservations.as_ref(),
            progress: snap.progress.as_ref(),
            ack,
            ack_refused,
            // An ack above what dtd wrote is refused (see `trust`), so it cannot push the count.
            // Saturating: at u64::MAX `report` refuses to bump rather than wrap to 0, which would
            // count every later removal as acknowledged.
            next_gen: prev.generation.saturating_add(1),
        }
    }

    /// How the job acknowledged, as the journal says it: `by_file`, the acknowledged
    /// generation (the ack file, or under `job.ack.by: launcher` the launchers' reports), else
    /// `host_worker_log`.
    pub fn acked_by(&self, by_file: bool) -> &'static str {
        match (by_file, self.rules.ack_by_launcher) {
            (true, true) => "the launchers' reports",
            (true, false) => "ack file",
            (false, _) => "host_worker_log",
        }
    }

    pub fn can_join(&self) -> bool {
        self.ec2_ok && self.markers.is_some() && self.group_ok
    }

    /// Removing or terminating needs every source: a partial view never takes anything away.
    pub fn can_remove(&self) -> bool {
        self.can_join() && self.acks.is_some()
    }

    /// A listed cluster worker's position.
    pub fn at(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// The listed cluster worker at `ip`, if any (the index holds each instance once).
    pub fn at_ip(&self, ip: std::net::IpAddr) -> Option<usize> {
        (0..self.list.len())
            .find(|&at| self.list[at].ip == ip && self.at(&self.list[at].id) == Some(at))
    }

    pub fn is_running(&self, id: &str) -> bool {
        self.index.contains_key(id)
    }

    /// The instance and its IP, as events name them.
    pub fn who(&self, at: usize) -> (&'a str, std::net::IpAddr) {
        let list: &'a [Instance] = self.list;
        (list[at].id.as_str(), list[at].ip)
    }

    /// The `host_worker_log` position a join or removal decided now is measured from.
    pub fn log_mark(&self) -> u64 {
        self.acks.map_or(0, |a| a.log_lines)
    }
}

/// Instances the group is terminating without waiting for us are as good as gone.
fn drop_terminating(g: &Group, list: &[Instance], facts: &mut [Facts]) {
    for (at, inst) in list.iter().enumerate() {
        let state = g.instances.get(&inst.id).map(|m| &m.lifecycle_state);
        if matches!(
            state,
            Some(
                LifecycleState::Terminating
                    | LifecycleState::TerminatingProceed
                    | LifecycleState::Terminated
            )
        ) {
            facts[at].cluster = false;
        }
    }
}
