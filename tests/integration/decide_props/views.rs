//! What a pass sees: a partial view removes nothing, the mount targets change only what a worker
//! waits for, and a targeted view decides what a complete listing would.

use std::collections::BTreeSet;
use std::net::IpAddr;

use proptest::prelude::*;

use dt::decide::decide;
use dt::model::*;

use super::support::{by_id, config, decisions, interrupted_ids, run, scenario, Scenario, Step};

proptest! {
    #![proptest_config(config())]

    /// A pass with any source unreadable removes nobody, queues no removal and terminates nothing.
    #[test]
    fn a_partial_view_removes_and_terminates_nothing(sc in scenario()) {
        run(&sc, |p| {
            if p.all_sources_ok() {
                return Ok(());
            }
            if !p.plan.outcome.terminate().is_empty() {
                return p.fail(format!("terminated {:?} on a partial view", p.plan.outcome.terminate()));
            }
            if p.plan.outcome.holds.is_empty() {
                return p.fail("a source failed but plan.outcome.holds is empty".into());
            }
            let listed: BTreeSet<IpAddr> = p.plan.outcome.hosts.iter().map(|h| h.ip).collect();
            // Interruptions are heeded on any view: the worker goes away whatever we see.
            let interrupted = interrupted_ids(&p.plan.state);
            for m in p.prev.members.iter().filter(|m| !interrupted.contains(&m.id)) {
                if !p.plan.state.members.iter().any(|k| k.id == m.id) || !listed.contains(&m.ip) {
                    return p.fail(format!("member {} ({}) removed on a partial view", m.id, m.ip));
                }
            }
            for r in p.plan.state.removals.iter().filter(|r| !r.is_interrupted()) {
                if !p.prev.removals.iter().any(|q| q.id == r.id) {
                    return p.fail(format!("removal of {} queued on a partial view", r.id));
                }
            }
            Ok(())
        })?;
    }

    /// What the file system's mount targets say only explains a wait: without them the pass
    /// decides the same membership, tags, terminations and hook actions, and journals the same
    /// events but `no_mount_target`.
    #[test]
    fn mount_targets_change_nothing_but_what_a_worker_waits_for(sc in scenario()) {
        run(&sc, |p| {
            let blind = Snapshot { mount_targets: None, ..p.snap.clone() };
            let other = decide(p.rules, &blind, p.prev, p.now);
            let (a, b) = (p.plan, &other);
            let same = a.outcome.hosts == b.outcome.hosts
                && a.outcome.tags() == b.outcome.tags()
                && a.outcome.terminate() == b.outcome.terminate()
                && a.outcome.group_terminate() == b.outcome.group_terminate()
                && a.outcome.complete_hooks() == b.outcome.complete_hooks()
                && a.outcome.heartbeats() == b.outcome.heartbeats()
                && a.outcome.protect() == b.outcome.protect()
                && a.outcome.notify == b.outcome.notify
                && a.outcome.holds == b.outcome.holds
                && a.outcome.deferred_notices == b.outcome.deferred_notices;
            if !same {
                return p.fail(format!("the mount targets changed the plan; without them: {other:?}"));
            }
            if without_mount_targets(&a.state) != without_mount_targets(&b.state) {
                return p.fail(format!("the mount targets changed the state: {:?}", a.state));
            }
            let events = |plan: &Plan| -> Vec<Event> {
                let kept = plan.outcome.events.iter().filter(|e| e.kind != "no_mount_target");
                kept.cloned().collect()
            };
            if events(a) != events(b) {
                return p.fail("the mount targets changed the journal beyond no_mount_target".into());
            }
            Ok(())
        })?;
    }

    /// Read targeted with every event arriving, the view is exactly the complete listing's (in id
    /// order), and the plan removes, terminates and lists what a complete listing's would.
    #[test]
    fn a_targeted_view_with_every_event_is_the_complete_view(sc in scenario()) {
        let steps = sc.steps.iter().map(|s| Step { lost: false, ..s.clone() }).collect();
        let sc = Scenario { targeted: true, steps, ..sc };
        run(&sc, |p| {
            let (Ok(view), Ok(all)) = (&p.snap.instances, &p.complete.instances) else {
                return Ok(());
            };
            if *view != by_id(all) {
                return p.fail(format!("the view {view:?} is not the listing {all:?}"));
            }
            let listed = decide(p.rules, p.complete, p.prev, p.now);
            if decisions(&listed) != decisions(p.plan) {
                return p.fail(format!("a complete listing decides {:?}", decisions(&listed)));
            }
            Ok(())
        })?;
    }

    /// Read targeted with events lost, nothing is terminated that a complete listing would not
    /// terminate, but the instances whose view is out of date; and a listing brings back the
    /// complete view, whatever was lost before it.
    #[test]
    fn a_targeted_view_terminates_nothing_a_complete_view_would_not(sc in scenario()) {
        let sc = Scenario { targeted: true, ..sc };
        run(&sc, |p| {
            let (Ok(view), Ok(all)) = (&p.snap.instances, &p.complete.instances) else {
                return Ok(());
            };
            if p.step.resync && *view != by_id(all) {
                return p.fail(format!("after a listing the view {view:?} is not {all:?}"));
            }
            let seen = |list: &[Instance], id: &str| list.iter().find(|i| i.id == id).cloned();
            let listed = decide(p.rules, p.complete, p.prev, p.now).outcome.terminate();
            for id in p.plan.outcome.terminate() {
                if seen(view, &id) == seen(all, &id) && !listed.contains(&id) {
                    return p.fail(format!("terminated {id}, which a complete listing would not"));
                }
            }
            Ok(())
        })?;
    }
}

/// The state but what it remembers of missing mount targets.
fn without_mount_targets(st: &State) -> State {
    let mut st = st.clone();
    st.pending.retain(|_, w| {
        w.no_mount_target = false;
        !w.is_empty()
    });
    st
}
