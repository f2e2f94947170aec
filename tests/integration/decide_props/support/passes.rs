//! A scenario run pass by pass as the daemon runs decide, and what a property sees of each pass.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use dt::decide::{decide, Rules};
use dt::model::*;

use super::reader::{named, Reader};
use super::scenario::{Scenario, Step};
use super::slots::{rules, START};
use super::world::build;

/// Everything a property may look at for one pass.
pub struct Pass<'a> {
    pub index: usize,
    pub rules: &'a Rules,
    pub prev: &'a State,
    pub snap: &'a Snapshot,
    /// What a complete listing would have shown this pass (the same as `snap` unless the
    /// scenario reads targeted).
    pub complete: &'a Snapshot,
    pub step: &'a Step,
    pub plan: &'a Plan,
    pub now: Millis,
    /// IPs that had a success marker in some snapshot fed so far, or were members at the start.
    pub ever_ready: &'a BTreeSet<IpAddr>,
    /// Instance ids whose TerminateInstances call succeeded on an earlier pass.
    pub sent: &'a BTreeSet<String>,
}

impl Pass<'_> {
    pub fn all_sources_ok(&self) -> bool {
        self.snap.instances.is_ok() && self.snap.markers.is_ok() && self.snap.acks.is_ok()
    }

    pub fn observed(&self, id: &str) -> Option<&Instance> {
        self.snap
            .instances
            .as_ref()
            .ok()?
            .iter()
            .find(|i| i.id == id)
    }

    /// The instance's own health report in this pass's snapshot says it is unhealthy.
    pub fn unhealthy(&self, id: &str) -> Option<&HealthSeen> {
        let inst = self.observed(id)?;
        let h = self.snap.markers.as_ref().ok()?.health.get(&inst.ip)?;
        (!h.ok && h.instance_id == id).then_some(h)
    }

    /// A member whose own launcher report says it trains and was last heard at least
    /// `silent_after` ago: the node stopped answering, and it leaves at once.
    pub fn silent(&self, id: &str) -> bool {
        let (Some(inst), Some(after)) = (self.observed(id), self.rules.launcher_silent_ms) else {
            return false;
        };
        let Some(l) = (self.snap.markers.as_ref().ok()).and_then(|m| m.launchers.get(&inst.ip))
        else {
            return false;
        };
        let member = self.prev.members.iter().any(|m| m.id == id);
        member
            && l.instance_id == id
            && l.state.is_active()
            && self.now.saturating_sub(l.heard_at) >= after
    }

    pub fn fail(&self, what: String) -> Result<(), String> {
        Err(format!(
            "pass {} at now={}: {what}\nprevious state: {:?}\nplan.outcome.terminate(): {:?}\nplan.outcome.hosts: {:?}\nplan.outcome.events: {:?}",
            self.index, self.now, self.prev, self.plan.outcome.terminate(), self.plan.outcome.hosts, self.plan.outcome.events
        ))
    }
}

/// Runs the scenario's passes like the daemon would, checking `check` after every decide.
pub fn run(
    sc: &Scenario,
    mut check: impl FnMut(&Pass) -> Result<(), String>,
) -> Result<(), TestCaseError> {
    let mut r = rules(sc.min, sc.max);
    if sc.in_place {
        r.leave_before_loss_ms = Some(30_000);
        r.replace_interrupted = true;
    }
    let (mut world, mut state) = build(sc);
    let mut ever_ready: BTreeSet<IpAddr> = state.members.iter().map(|m| m.ip).collect();
    let mut sent: BTreeSet<String> = state
        .removals
        .iter()
        .filter(|r| r.stage == Stage::Ended)
        .map(|r| r.id.clone())
        .collect();
    let mut now = START;
    let mut reader = sc.targeted.then(|| Reader::new(&world));
    for (index, step) in sc.steps.iter().enumerate() {
        let before: BTreeMap<usize, String> = (world.instances.iter())
            .map(|(s, i)| (*s, i.id.clone()))
            .collect();
        for op in &step.ops {
            world.apply(op, state.generation);
        }
        now += step.dt;
        let complete = world.snapshot(step);
        let snap = match &mut reader {
            None => complete.clone(),
            Some(r) => Snapshot {
                instances: r.view(&world, step, named(&step.ops, &before, &world)),
                ..complete.clone()
            },
        };
        if let Ok(m) = &snap.markers {
            ever_ready.extend(m.success.iter().copied());
        }
        let plan = decide(&r, &snap, &state, now);
        let pass = Pass {
            index,
            rules: &r,
            prev: &state,
            snap: &snap,
            complete: &complete,
            step,
            plan: &plan,
            now,
            ever_ready: &ever_ready,
            sent: &sent,
        };
        check(&pass).map_err(TestCaseError::fail)?;

        // What act and the daemon do with the plan.
        state = plan.state.clone();
        for (status, ids) in &plan.outcome.tags() {
            for i in world.instances.values_mut().filter(|i| ids.contains(&i.id)) {
                i.tags.insert(STATUS_TAG.into(), status.as_tag().into());
            }
            if let Some(r) = &mut reader {
                r.fleet.tagged(ids, STATUS_TAG, status.as_tag());
            }
        }
        if step.terminate_ok {
            let accepted = plan.outcome.terminate();
            let call = "TerminateInstances accepted for";
            let applied = dt::model::Applied {
                ended: accepted.into_iter().map(|id| (id, call)).collect(),
                ..Default::default()
            };
            dt::decide::settle(&r, &mut state, &applied, now);
            sent.extend(plan.outcome.terminate().iter().cloned());
            if step.shutdown {
                world
                    .instances
                    .retain(|_, i| !plan.outcome.terminate().contains(&i.id));
                if let Some(r) = &mut reader {
                    r.announced.extend(plan.outcome.terminate());
                }
            }
        }
        world.notices.clear();
        if step.delivered && state.pending_notification == plan.outcome.notify {
            state.pending_notification = None;
        }
    }
    Ok(())
}

pub fn interrupted_ids(st: &State) -> BTreeSet<String> {
    let interrupted = st.removals.iter().filter(|r| r.is_interrupted());
    interrupted.map(|r| r.id.clone()).collect()
}

/// Acknowledged by the job: a generation dtd wrote (at most `written`) that no longer lists it.
pub fn acknowledged(r: &Removal, acks: &Acks, written: u64) -> bool {
    acks.generation
        .is_some_and(|g| g >= r.generation && g <= written)
        || acks
            .log_removed
            .get(&r.ip)
            .is_some_and(|line| *line > r.log_mark)
}

pub fn by_id(list: &[Instance]) -> Vec<Instance> {
    let mut list = list.to_vec();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    list
}

/// What a plan takes away and keeps, whatever order the instances were listed in.
pub fn decisions(
    plan: &Plan,
) -> (
    BTreeSet<String>,
    BTreeSet<IpAddr>,
    BTreeSet<String>,
    BTreeSet<String>,
) {
    let ids = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    (
        ids(plan.outcome.terminate()),
        plan.outcome.hosts.iter().map(|h| h.ip).collect(),
        ids(plan.state.members.iter().map(|m| m.id.clone()).collect()),
        ids(plan.state.removals.iter().map(|r| r.id.clone()).collect()),
    )
}

pub fn config() -> ProptestConfig {
    ProptestConfig {
        // PROPTEST_CASES=100000 searches harder (a rare interleaving slipped past 256 once).
        cases: (std::env::var("PROPTEST_CASES").ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
