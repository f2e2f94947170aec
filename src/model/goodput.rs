//! The goodput ledger: every second of every worker instance `dtd` sees running, from its launch,
//! in exactly one bucket, so the buckets sum to the time paid for. Saved with the time each
//! instance is accounted up to, in one file, so a restarted `dtd` (even after `kill -9`) goes on
//! from there: the gap goes to the bucket the worker is in when it is seen again.
//!
//! A pass classifies each worker once and gives it the time since it was last accounted: what
//! it did between two passes is what it is doing at the second (off by at most one pass per
//! change).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::{Instance, Markers, Member, Millis, Removal, Stage, State};

mod changes;
pub use changes::{Change, CHANGES_KEPT};

/// Where a worker's second went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bucket {
    /// A member of the job, the job acknowledged the membership and its step is not stalled.
    Training,
    /// Booting, prepare-data, the health check: no success marker yet.
    Preparing,
    /// Ready (its success marker), not in the job yet: a batch, a checkpoint, the budget, max.
    WaitingToJoin,
    /// A member while a membership change is not yet acknowledged by the job (its restart, or
    /// the quorum change under `in_place`).
    Paused,
    /// Training time whose steps were lost (the job went back to its checkpoint) and trained again.
    Redone,
    /// Out of the job, not yet terminated.
    Leaving,
    /// Running, in no job: kept after a silence, or a member of a stalled job.
    Idle,
}

impl Bucket {
    pub const ALL: [Bucket; 7] = [
        Bucket::Training,
        Bucket::Preparing,
        Bucket::WaitingToJoin,
        Bucket::Paused,
        Bucket::Redone,
        Bucket::Leaving,
        Bucket::Idle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Training => "training",
            Bucket::Preparing => "preparing",
            Bucket::WaitingToJoin => "waiting_to_join",
            Bucket::Paused => "paused",
            Bucket::Redone => "redone",
            Bucket::Leaving => "leaving",
            Bucket::Idle => "idle",
        }
    }
}

/// Node and GPU time in one bucket, in ms, and what it cost at `workers.prices`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    pub node_ms: u64,
    pub gpu_ms: u64,
    /// Millionths of a dollar: the time of instances with a price, at the price when accounted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub micro_usd: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Spent {
    fn is_none(&self) -> bool {
        *self == Spent::default()
    }

    fn add(&mut self, other: Spent) {
        self.node_ms += other.node_ms;
        self.gpu_ms += other.gpu_ms;
        self.micro_usd += other.micro_usd;
    }

    /// `ms` of an instance with `gpus` GPUs at `usd_per_hour` (none: no price known).
    fn of(ms: u64, gpus: u64, usd_per_hour: Option<f64>) -> Spent {
        // A dollar an hour is a millionth of a dollar every 3.6 ms.
        let micro_usd = usd_per_hour.map_or(0, |p| (ms as f64 * p / 3.6).round() as u64);
        Spent {
            node_ms: ms,
            gpu_ms: ms * gpus,
            micro_usd,
        }
    }

    pub fn usd(&self) -> f64 {
        self.micro_usd as f64 / 1e6
    }
}

/// The job's step as the ledger follows it: where this run of steps began, and the newest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRun {
    pub first: u64,
    pub first_at: Millis,
    pub last: u64,
    pub last_at: Millis,
    /// The run of the job's processes that wrote them, when the job names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl StepRun {
    fn at(step: u64, now: Millis, run: Option<String>) -> StepRun {
        StepRun {
            first: step,
            first_at: now,
            last: step,
            last_at: now,
            run,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goodput {
    /// When the ledger began: instances already running then are counted from here.
    pub since: Millis,
    pub buckets: BTreeMap<Bucket, Spent>,
    /// Each worker instance seen running at the last pass, and the time it is accounted up to.
    pub accounted: BTreeMap<String, Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<StepRun>,
    /// The master's own time (the instance `dtd` runs on), apart from the workers': from the
    /// ledger's start to its last pass, the time `dtd` was down included.
    #[serde(default)]
    pub master_ms: u64,
    /// The last pass accounted.
    #[serde(default)]
    pub last_pass: Millis,
    /// The totals every hour, oldest first, for the last [`MARKS_KEPT`] hours (`dtctl goodput
    /// --since`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
    /// The newest [`CHANGES_KEPT`] changes of membership, oldest first, with what each cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Training counted during a change only because the step was read advancing lately, while
    /// it has not advanced since: confirmed when it next advances, moved to where the members
    /// are found when it does not (paused, idle) or when it goes back. Also in `buckets`.
    #[serde(default, skip_serializing_if = "Spent::is_none")]
    pub unconfirmed: Spent,
    /// Replacements' preparing while the worker they replace has not left yet (launched at its
    /// warning), by instance id: charged to the change it leaves with. Also in `buckets`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owed: BTreeMap<String, Spent>,
}

/// A mark is taken at a pass this long after the one before.
pub const MARK_EVERY: Millis = 3_600_000;
/// Three days of hourly marks: about 30 KB of the ledger's file.
pub const MARKS_KEPT: usize = 72;

/// The ledger's totals at one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub at: Millis,
    pub buckets: BTreeMap<Bucket, Spent>,
    pub master_ms: u64,
}

/// What one pass sees, for the ledger.
pub struct Seen<'a> {
    pub now: Millis,
    pub instances: &'a [Instance],
    pub markers: Option<&'a Markers>,
    pub state: &'a State,
    /// The GPUs of an instance type (`workers.slots`).
    pub gpus: &'a dyn Fn(&str) -> u64,
    /// Its price in dollars an hour (`workers.prices`, else the Spot price history), when known.
    pub price: &'a dyn Fn(&Instance) -> Option<f64>,
    /// A change restarts the job's processes (every strategy but `in_place`): a step written
    /// by an older generation's processes is not the job training again.
    pub restarts: bool,
}

/// The job's step counts as advancing for at least this long after `dtd` first read it: rank 0
/// writes the progress file at most once a second, and `dtd` reads it once a pass.
pub const STEP_FRESH: Millis = 3_000;

/// ... and for this many of the job's own steps (its pace in this run of steps), for a job
/// whose steps take longer than a second.
const STEPS_FRESH: f64 = 3.0;

impl Goodput {
    pub fn new(now: Millis) -> Goodput {
        Goodput {
            since: now,
            last_pass: now,
            ..Goodput::default()
        }
    }

    /// Every bucket's total, the empty ones too.
    pub fn totals(&self) -> Vec<(Bucket, Spent)> {
        let of = |b| self.buckets.get(&b).copied().unwrap_or_default();
        Bucket::ALL.iter().map(|b| (*b, of(*b))).collect()
    }

    /// The time paid for: every bucket's.
    pub fn paid(&self) -> Spent {
        let mut sum = Spent::default();
        for s in self.buckets.values() {
            sum.add(*s);
        }
        sum
    }

    /// Accounts the time since the last pass.
    pub fn account(&mut self, seen: &Seen) {
        let mut accounted = BTreeMap::new();
        self.note_change(seen.state, seen.now);
        let change_at = (self.changes.last())
            .filter(|c| c.generation == seen.state.generation)
            .map(|c| c.at);
        let roles = Roles::of(seen, self.step_fresh(), change_at);
        let stood = (seen.state.progress.as_ref()).is_some_and(|p| p.advanced_at <= self.last_pass);
        let mut unconfirmed = Spent::default();
        for i in seen.instances {
            // A worker seen for the first time was booting since its launch (not before the
            // ledger began, nor after now: a clock EC2 and dtd do not share).
            let (from, bucket) = match self.accounted.get(&i.id) {
                Some(at) => (*at, roles.bucket(i, seen.markers)),
                None => (i.launched_at.clamp(self.since, seen.now), Bucket::Preparing),
            };
            let ms = seen.now.saturating_sub(from);
            let (gpus, price) = ((seen.gpus)(&i.instance_type), (seen.price)(i));
            let spent = Spent::of(ms, gpus, price);
            (self.buckets.entry(bucket).or_default()).add(spent);
            if matches!(bucket, Bucket::Paused | Bucket::Leaving) {
                self.charge(roles.cause(i, seen.state), bucket, spent);
            }
            if bucket == Bucket::Preparing {
                if let Some(l) = seen.state.launched_for.get(&i.id) {
                    self.charge_replacement(&i.id, &l.replaces, spent);
                }
            }
            if bucket == Bucket::Training && roles.on_trust && stood {
                unconfirmed.add(spent);
            }
            accounted.insert(i.id.clone(), seen.now);
        }
        // An instance no longer seen ended at its last pass: its time is all accounted (and a
        // replacement gone before its predecessor left owes no change).
        self.owed.retain(|id, _| accounted.contains_key(id));
        self.accounted = accounted;
        let from = self.last_pass.max(self.since);
        self.master_ms += seen.now.saturating_sub(from);
        self.last_pass = self.last_pass.max(seen.now);
        self.settle(seen, &roles, unconfirmed);
        if let Some((steps, lost)) = self.redo(seen) {
            let moved = self.move_training(lost, Bucket::Redone);
            self.charge(seen.state.generation, Bucket::Redone, moved);
            self.charge_steps(seen.state.generation, steps);
        }
        self.mark(seen.now);
    }

    /// Takes an hourly mark when one is due (the first at the ledger's first pass).
    fn mark(&mut self, now: Millis) {
        let due = (self.marks.last()).is_none_or(|m| now >= m.at.saturating_add(MARK_EVERY));
        if !due {
            return;
        }
        self.marks.push(Mark {
            at: now,
            buckets: self.buckets.clone(),
            master_ms: self.master_ms,
        });
        let over = self.marks.len().saturating_sub(MARKS_KEPT);
        self.marks.drain(..over);
    }

    /// The ledger's time since the newest mark at or before `at`: its buckets and master's time
    /// less the mark's, `since` the mark's time, and the changes made since. `None`: no mark
    /// that old is kept.
    pub fn since(&self, at: Millis) -> Option<Goodput> {
        let mark = self.marks.iter().rev().find(|m| m.at <= at)?;
        let less = |b: &Bucket, s: &Spent| {
            let then = mark.buckets.get(b).copied().unwrap_or_default();
            let spent = Spent {
                node_ms: s.node_ms.saturating_sub(then.node_ms),
                gpu_ms: s.gpu_ms.saturating_sub(then.gpu_ms),
                micro_usd: s.micro_usd.saturating_sub(then.micro_usd),
            };
            (*b, spent)
        };
        Some(Goodput {
            since: mark.at,
            buckets: self.buckets.iter().map(|(b, s)| less(b, s)).collect(),
            master_ms: self.master_ms.saturating_sub(mark.master_ms),
            last_pass: self.last_pass,
            changes: (self.changes.iter())
                .filter(|c| c.at >= mark.at)
                .cloned()
                .collect(),
            ..Goodput::default()
        })
    }

    /// How long after the step was read advancing the job counts as training: its pace in this
    /// run of steps, a few steps' worth, and never under [`STEP_FRESH`].
    fn step_fresh(&self) -> Millis {
        let pace = (self.steps.as_ref()).filter(|r| r.last > r.first).map(|r| {
            let ms = r.last_at.saturating_sub(r.first_at) as f64;
            (STEPS_FRESH * ms / (r.last - r.first) as f64) as Millis
        });
        pace.unwrap_or(0).max(STEP_FRESH)
    }

    /// When the job's step went back (a restart from its checkpoint): the steps lost and their
    /// training time at the rate this run of steps trained, to be moved to `redone`.
    fn redo(&mut self, seen: &Seen) -> Option<(u64, Spent)> {
        let p = seen.state.progress.as_ref()?;
        let (step, now) = (p.step, seen.now);
        let restarted = self.restarted(p);
        let new_run = || StepRun::at(step, now, p.run.as_ref().map(|r| r.id.clone()));
        let run = self.steps.get_or_insert_with(new_run);
        if run.run.is_none() {
            run.run = p.run.as_ref().map(|r| r.id.clone());
        }
        if !restarted && step >= run.last {
            if step > run.last {
                (run.last, run.last_at) = (step, now);
            }
            return None;
        }
        // A new run of the job started from `from`, though it may have passed the old one's
        // last step before this pass read it; otherwise the step itself went back.
        let resumed = (p.run.as_ref())
            .filter(|_| restarted)
            .map_or(step, |r| r.from);
        let lost = run.last.saturating_sub(resumed);
        let (steps, ms) = (
            run.last - run.first,
            run.last_at.saturating_sub(run.first_at),
        );
        *run = new_run();
        if steps == 0 || lost == 0 {
            return None;
        }
        let per_step = ms as f64 / steps as f64;
        let members = seen.state.members.len() as f64;
        let node_ms = (lost as f64 * per_step * members) as u64;
        let gpus: u64 = (seen.state.members.iter())
            .map(|m| (seen.gpus)(&m.instance_type))
            .sum();
        let gpu_ms = (lost as f64 * per_step) as u64 * gpus;
        let spent = Spent {
            node_ms,
            gpu_ms,
            micro_usd: 0,
        };
        Some((lost, spent))
    }

    /// Confirms the training counted on the step's word once it advances again; when it went
    /// back (a restart), or the members are now found held, that time was the change's (or the
    /// stall's): it moves to their bucket.
    fn settle(&mut self, seen: &Seen, roles: &Roles, counted: Spent) {
        use std::cmp::Ordering;
        self.unconfirmed.add(counted);
        let Some(p) = seen.state.progress.as_ref() else {
            self.unconfirmed = Spent::default();
            return;
        };
        if self.unconfirmed.is_none() {
            return;
        }
        // A new run of the job is a step gone back, wherever its step stands.
        let went = match self.restarted(p) {
            true => Some(Ordering::Less),
            false => self.steps.as_ref().map(|r| p.step.cmp(&r.last)),
        };
        let to = match went {
            Some(Ordering::Greater) => {
                self.unconfirmed = Spent::default();
                return;
            }
            Some(Ordering::Less) => Bucket::Paused,
            // Acknowledged before the step moved: the job restarted (or re-formed its quorum)
            // in those seconds, whatever it does next.
            _ if !roles.changing => roles.held_as().unwrap_or(Bucket::Paused),
            // Still on the step's word: wait for it to move, or for the members to be held.
            _ => match roles.held_as() {
                Some(b) => b,
                None => return,
            },
        };
        let unconfirmed = std::mem::take(&mut self.unconfirmed);
        let moved = self.move_training(unconfirmed, to);
        if to == Bucket::Paused {
            self.charge(seen.state.generation, to, moved);
        }
    }

    /// The job names a run of its processes other than the one whose steps the ledger follows.
    fn restarted(&self, p: &crate::model::JobProgress) -> bool {
        let was = self.steps.as_ref().and_then(|r| r.run.as_deref());
        matches!((was, &p.run), (Some(was), Some(now)) if was != now.id)
    }

    /// Moves `lost` from training to `to` (redone, paused, idle), no more than training holds;
    /// its dollars go with it at training's average price per GPU-ms. Returns what was moved.
    fn move_training(&mut self, lost: Spent, to: Bucket) -> Spent {
        let training = self.buckets.entry(Bucket::Training).or_default();
        let gpu_ms = lost.gpu_ms.min(training.gpu_ms);
        let share = gpu_ms as f64 / training.gpu_ms.max(1) as f64;
        let take = Spent {
            node_ms: lost.node_ms.min(training.node_ms),
            gpu_ms,
            micro_usd: ((training.micro_usd as f64 * share) as u64).min(training.micro_usd),
        };
        training.node_ms -= take.node_ms;
        training.gpu_ms -= take.gpu_ms;
        training.micro_usd -= take.micro_usd;
        self.buckets.entry(to).or_default().add(take);
        take
    }
}

/// What a pass's workers are doing, looked up by instance id: a pass at 10,000 workers must not
/// scan the members for each.
struct Roles<'a> {
    members: HashMap<&'a str, &'a Member>,
    removals: HashMap<&'a str, &'a Removal>,
    /// A change of membership the job has not acknowledged: every member pauses for it.
    changing: bool,
    stalled: bool,
    /// The job's step, when it writes a progress file, overrules the acknowledgements: `held`
    /// while it has not advanced since the current change began (a job that acknowledged its
    /// restart before it trains again) or, where a change restarts the job, while the step is
    /// an older generation's (its last steps after the change began, then the restart);
    /// `advancing` while it was read advancing lately (an old generation finishing its step
    /// before a change is acknowledged, `in_place`'s members while a joiner starts).
    held: bool,
    advancing: bool,
    /// The members train only on the step's word: a change would hold them, but the step was
    /// read advancing lately.
    on_trust: bool,
}

impl<'a> Roles<'a> {
    fn of(seen: &Seen<'a>, fresh: Millis, change_at: Option<Millis>) -> Roles<'a> {
        let st = seen.state;
        let progress = st.progress.as_ref();
        let changing =
            st.pending_notification.is_some() || st.removals.iter().any(|r| r.awaits_ack());
        let stalled = progress.is_some_and(|p| p.stalled);
        let held = progress.is_some_and(|p| {
            let since_change = change_at.is_some_and(|at| p.advanced_at < at);
            since_change || (seen.restarts && p.generation.is_some_and(|g| g < st.generation))
        });
        let advancing = progress.is_some_and(|p| seen.now.saturating_sub(p.advanced_at) <= fresh);
        Roles {
            members: st.members.iter().map(|m| (m.id.as_str(), m)).collect(),
            removals: st.removals.iter().map(|r| (r.id.as_str(), r)).collect(),
            changing,
            stalled,
            held,
            advancing,
            on_trust: advancing && (changing || held) && !stalled,
        }
    }

    /// Where the acknowledged members are at this pass when not training: idle in a stalled
    /// job, paused while a change holds them.
    fn held_as(&self) -> Option<Bucket> {
        if self.stalled {
            return Some(Bucket::Idle);
        }
        (!self.advancing && (self.changing || self.held)).then_some(Bucket::Paused)
    }

    /// The generation whose change a worker's time at this pass is charged to: its removal's
    /// for a leaver, the current one's for the others (only paused time is charged to it).
    fn cause(&self, i: &Instance, st: &State) -> u64 {
        (self.removals.get(i.id.as_str())).map_or(st.generation, |r| r.generation)
    }

    /// What the worker is doing at this pass.
    fn bucket(&self, i: &Instance, markers: Option<&Markers>) -> Bucket {
        if let Some(r) = self.removals.get(i.id.as_str()) {
            let kept = matches!(r.stage, Stage::AwaitingAck { then: None, .. });
            return if kept { Bucket::Idle } else { Bucket::Leaving };
        }
        if let Some(m) = self.members.get(i.id.as_str()) {
            if !m.acked {
                return Bucket::Paused;
            }
            return self.held_as().unwrap_or(Bucket::Training);
        }
        match markers.is_some_and(|m| m.success.contains(&i.ip)) {
            true => Bucket::WaitingToJoin,
            false => Bucket::Preparing,
        }
    }
}

#[cfg(test)]
mod tests;
