//! How the daemon reads EC2 in a targeted scenario: the fleet as a listing left it, kept current
//! by reads of what events and markers name.

use std::collections::{BTreeMap, BTreeSet};

use dt::model::*;
use dt::observe::fleet::{Fleet, Targets};

use super::scenario::{Op, Step};
use super::world::World;

/// The daemon's EC2 view in a targeted scenario: the fleet as the first listing left it, kept
/// current by reads of what events and markers name, and by the listings the steps bring.
pub struct Reader {
    pub fleet: Fleet,
    /// Instances the last pass terminated: EC2 announces their state change.
    pub announced: BTreeSet<String>,
    /// What a read that failed still has to read.
    pub owed: Targets,
}

impl Reader {
    pub fn new(world: &World) -> Reader {
        let mut fleet = Fleet::default();
        let seq = fleet.begin();
        fleet.apply_listing(seq, 0, world.instances.values().cloned().collect());
        Reader {
            fleet,
            announced: BTreeSet::new(),
            owed: Targets::default(),
        }
    }

    /// What the daemon decides on this pass: `named` (the instances this step's events name,
    /// unless they are lost) and the marker IPs no known worker has, read from the world.
    pub fn view(&mut self, w: &World, step: &Step, named: BTreeSet<String>) -> Read<Vec<Instance>> {
        let mut t = std::mem::take(&mut self.owed);
        let announced = std::mem::take(&mut self.announced);
        if !step.lost {
            t.ids.extend(named.into_iter().chain(announced));
        }
        if step.ec2_err {
            self.owed = t;
            return Err("DescribeInstances failed".into());
        }
        if !step.markers_err {
            let marked = w.markers.success.iter().chain(w.markers.failed.keys());
            t.ips.extend(self.fleet.unknown_ips(marked.copied()));
        }
        let covered = |i: &&Instance| t.ids.contains(&i.id) || t.ips.contains(&i.ip);
        let found = w.instances.values().filter(covered).cloned().collect();
        let seq = self.fleet.begin();
        self.fleet.apply_read(seq, &t, found);
        if step.resync {
            let seq = self.fleet.begin();
            self.fleet
                .apply_listing(seq, 0, w.instances.values().cloned().collect());
        }
        Ok(self.fleet.instances().to_vec())
    }
}

/// The instances in the slots `ops` changes, before and after.
pub fn named(ops: &[Op], before: &BTreeMap<usize, String>, w: &World) -> BTreeSet<String> {
    let slots = ops.iter().filter_map(|op| match *op {
        Op::DeleteElastic(s) | Op::AddElastic(s) | Op::Vanish(s) | Op::Launch(s) => Some(s),
        _ => None,
    });
    let ids = slots.flat_map(|s| {
        [
            before.get(&s).cloned(),
            w.instances.get(&s).map(|i| i.id.clone()),
        ]
    });
    ids.flatten().collect()
}
