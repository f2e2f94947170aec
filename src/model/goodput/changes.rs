//! What each change of membership cost: the ledger's paused, leaving and redone time charged to
//! the generation whose change caused it, so `dtctl goodput` can say what a Spot interruption of
//! 10.0.1.8 cost, not only what all of them did. A breakdown of the buckets, never extra time: a
//! second charged to a change is also in its bucket.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Bucket, Goodput, Spent};
use crate::model::{Millis, State};

/// The newest changes kept (about 30 KB of the ledger's file): older ones fall off, their time
/// staying in the buckets.
pub const CHANGES_KEPT: usize = 100;
/// Workers named in a change's `what`; a larger change says how many more.
const NAMED: usize = 5;

/// One change of the job's membership (one generation) and what it cost so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The generation the change made.
    pub generation: u64,
    /// When the ledger first saw it.
    pub at: Millis,
    /// Who left (and why) and who joined: `10.0.1.8 left (spot interruption ...); 10.0.1.9 joined`.
    pub what: String,
    /// The members' time while the job had not acknowledged it (a restart, a quorum change).
    #[serde(default)]
    pub paused: Spent,
    /// The leavers' time out of the job, before they were gone.
    #[serde(default)]
    pub leaving: Spent,
    /// Training lost with it (the job went back to its checkpoint) and trained again.
    #[serde(default)]
    pub redone: Spent,
    #[serde(default)]
    pub redone_steps: u64,
    /// The preparing (boot, prepare-data, health check) of the instances `dtd` launched to
    /// replace its leavers, before and after they left.
    #[serde(default, skip_serializing_if = "Spent::is_none")]
    pub replacing: Spent,
    /// Its leavers `dtd` launched (or owes) a replacement for, by instance id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<String>,
}

impl Change {
    /// Everything charged to it.
    pub fn cost(&self) -> Spent {
        let mut sum = self.paused;
        sum.add(self.leaving);
        sum.add(self.redone);
        sum.add(self.replacing);
        sum
    }
}

impl Goodput {
    /// Records the change that made `st`'s generation the first time a pass sees it.
    pub(super) fn note_change(&mut self, st: &State, now: Millis) {
        let seen = self.changes.last().map_or(0, |c| c.generation);
        if st.generation == 0 || st.generation <= seen {
            return;
        }
        self.changes.push(Change {
            generation: st.generation,
            at: now,
            what: describe(st),
            replaced: replaced(st),
            ..Change::default()
        });
        let over = self.changes.len().saturating_sub(CHANGES_KEPT);
        self.changes.drain(..over);
        self.charge_owed(st);
    }

    /// Charges the preparing of `id` (`spent`), an instance launched to replace `replaces`, to
    /// the change `replaces` left with; until it has left, owed.
    pub(super) fn charge_replacement(&mut self, id: &str, replaces: &str, spent: Spent) {
        let left_with =
            (self.changes.iter_mut().rev()).find(|c| c.replaced.iter().any(|r| r == replaces));
        match left_with {
            Some(c) => c.replacing.add(spent),
            None => self.owed.entry(id.to_string()).or_default().add(spent),
        }
    }

    /// What replacements prepared before their predecessor left, charged once it has.
    fn charge_owed(&mut self, st: &State) {
        for (id, spent) in std::mem::take(&mut self.owed) {
            if let Some(l) = st.launched_for.get(&id) {
                self.charge_replacement(&id, &l.replaces, spent);
            }
        }
    }

    /// The change of `generation`, when it is kept.
    fn change_mut(&mut self, generation: u64) -> Option<&mut Change> {
        // The newest first: nearly every charge is to the current generation.
        (self.changes.iter_mut().rev()).find(|c| c.generation == generation)
    }

    /// Charges `spent`, put in `bucket`, to the change of `generation` when it is kept.
    pub(super) fn charge(&mut self, generation: u64, bucket: Bucket, spent: Spent) {
        let Some(c) = self.change_mut(generation) else {
            return;
        };
        match bucket {
            Bucket::Paused => c.paused.add(spent),
            Bucket::Leaving => c.leaving.add(spent),
            Bucket::Redone => c.redone.add(spent),
            _ => {}
        }
    }

    pub(super) fn charge_steps(&mut self, generation: u64, steps: u64) {
        if let Some(c) = self.change_mut(generation) {
            c.redone_steps += steps;
        }
    }
}

/// The leavers at `st`'s generation that have a replacement launched or owed.
fn replaced(st: &State) -> Vec<String> {
    let launched = |id: &str| st.launched_for.values().any(|l| l.replaces == id);
    let owed = |id: &str| st.replacements.iter().any(|r| r.replaces == id);
    (st.removals.iter())
        .filter(|r| r.generation == st.generation && (launched(&r.id) || owed(&r.id)))
        .map(|r| r.id.clone())
        .collect()
}

/// Who left and who joined at `st`'s generation, from its removals and members.
fn describe(st: &State) -> String {
    let g = st.generation;
    let left: Vec<String> = (st.removals.iter())
        .filter(|r| r.generation == g)
        .map(|r| format!("{} left ({})", r.ip, r.reason))
        .collect();
    let joined: Vec<String> = (st.members.iter())
        .filter(|m| m.joined_generation == g)
        .map(|m| m.ip.to_string())
        .collect();
    let mut what = named(&left);
    if !joined.is_empty() {
        let sep = if what.is_empty() { "" } else { "; " };
        let _ = write!(what, "{sep}{} joined", named(&joined));
    }
    if what.is_empty() {
        let _ = write!(what, "generation {g}, no member added or removed");
    }
    what
}

fn named(each: &[String]) -> String {
    let mut s = each[..each.len().min(NAMED)].join(", ");
    if each.len() > NAMED {
        let _ = write!(s, " and {} more", each.len() - NAMED);
    }
    s
}
