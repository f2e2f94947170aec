//! Stragglers (`job.stragglers`): a member whose own agent reports a compute time per step above
//! the ratio times the other members' median, for the rule's number of the job's steps, is
//! journaled once and shown; `drain` takes it out of the job within the budget and replaces it;
//! it is forgotten (and said to be back) once it is not slow.

use dt::config::{StragglerAction, Stragglers};
use dt::protocol::launcher::{LauncherState, StepCompute};

use crate::support::world::*;

fn straggler_rules(action: StragglerAction) -> Rules {
    Rules {
        stragglers: Stragglers {
            action,
            ratio: 1.3,
            steps: 50,
        },
        ..rules()
    }
}

/// The agent at `addr` reports its launcher running in generation 1 with a compute time of
/// `millis` per step at `step`.
fn computing(w: &mut World, addr: &str, id: &str, step: u64, millis: u64, at: Millis) {
    let l = LauncherSeen {
        instance_id: id.into(),
        state: LauncherState::Running,
        generation: Some(1),
        restarts: 0,
        reason: "node 0 of 2".into(),
        stopped: None,
        compute: Some(StepCompute {
            step,
            micros: millis * 1_000,
        }),
        heard_at: at,
    };
    w.markers.launchers.insert(ip(addr), l);
}

/// Both members report at `step`: i-1 at 100 ms, i-2 at `slow` ms; one pass.
fn at(r: &Rules, w: &mut World, st: &State, step: u64, slow: u64, now: Millis) -> Plan {
    computing(w, "10.0.1.1", "i-1", step, 100, now);
    computing(w, "10.0.1.2", "i-2", step, slow, now);
    pass(r, w, st, now)
}

fn message<'a>(plan: &'a Plan, kind: &str) -> &'a str {
    let e = plan.outcome.events.iter().find(|e| e.kind == kind);
    e.map_or("", |e| e.message.as_str())
}

#[test]
fn alert_journals_a_member_slow_for_the_rules_steps_once_shows_it_and_says_when_it_is_back() {
    let r = straggler_rules(StragglerAction::Alert);
    let (_, mut w, state) = two_members();
    let plan = at(&r, &mut w, &state, 10, 250, 3_000);
    assert!(
        kinds(&plan).is_empty(),
        "slow since step 10, not yet for 50 steps"
    );
    let plan = at(&r, &mut w, &plan.state, 59, 250, 4_000);
    assert!(kinds(&plan).is_empty(), "49 steps");
    let plan = at(&r, &mut w, &plan.state, 60, 250, 5_000);
    assert_eq!(kinds(&plan), ["straggler"]);
    assert_eq!(
        message(&plan, "straggler"),
        "10.0.1.2 (i-2): a straggler: its compute time per step is 0.250 s, 2.5 x the other \
         members' median (0.100 s), since step 10 (job.stragglers: above 1.3 x for 50 steps)"
    );
    let row = worker(&plan, &w, "i-2");
    assert!(
        row.waiting_for
            .as_deref()
            .is_some_and(|s| s.starts_with("a straggler")),
        "{row:?}"
    );
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2"]),
        "alert: kept"
    );
    let plan = at(&r, &mut w, &plan.state, 80, 250, 6_000);
    assert!(kinds(&plan).is_empty(), "journaled once");
    let plan = at(&r, &mut w, &plan.state, 90, 120, 7_000);
    assert_eq!(kinds(&plan), ["straggler_cleared"]);
    assert!(plan.state.stragglers.is_empty());
}

#[test]
fn a_slowness_that_stops_before_the_rules_steps_is_forgotten_and_counted_again_from_scratch() {
    let r = straggler_rules(StragglerAction::Drain);
    let (_, mut w, state) = two_members();
    let plan = at(&r, &mut w, &state, 10, 250, 3_000);
    let plan = at(&r, &mut w, &plan.state, 40, 129, 4_000);
    assert!(plan.state.stragglers.is_empty(), "1.29 x is within 1.3 x");
    let plan = at(&r, &mut w, &plan.state, 50, 250, 5_000);
    let plan = at(&r, &mut w, &plan.state, 99, 250, 6_000);
    assert!(kinds(&plan).is_empty(), "since step 50: 49 steps");
    let (_, mut w, state) = two_members();
    computing(&mut w, "10.0.1.1", "i-1", 10, 1, 3_000);
    computing(&mut w, "10.0.1.2", "i-2", 10, 5, 3_000);
    let plan = pass(&r, &mut w, &state, 3_000);
    assert!(
        plan.state.stragglers.is_empty(),
        "5 x, but 4 ms: noise, not a slow GPU"
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn drain_takes_the_straggler_out_and_replaces_it_once_the_job_let_it_go() {
    let r = Rules {
        replace_unhealthy: true,
        ..straggler_rules(StragglerAction::Drain)
    };
    let (_, mut w, state) = two_members();
    let plan = at(&r, &mut w, &state, 10, 400, 3_000);
    let plan = at(&r, &mut w, &plan.state, 60, 400, 4_000);
    assert_eq!(kinds(&plan), ["straggler", "removal_queued", "generation"]);
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::Straggler));
    assert!(
        message(&plan, "removal_queued")
            .contains("it leaves the job (job.stragglers.action: drain)"),
        "{}",
        message(&plan, "removal_queued")
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(
        plan.outcome.terminate().is_empty(),
        "not before the job let it go"
    );
    assert_eq!(
        plan.state.replacements.len(),
        1,
        "its replacement is owed at once"
    );
    w.acks.generation = Some(plan.state.generation);
    let mut stopped = w.markers.launchers[&ip("10.0.1.2")].clone();
    (stopped.state, stopped.compute) = (LauncherState::Stopped, None);
    w.markers.launchers.insert(ip("10.0.1.2"), stopped);
    computing(&mut w, "10.0.1.1", "i-1", 70, 100, 5_000);
    let plan = pass(&r, &mut w, &plan.state, 5_000);
    assert_eq!(plan.outcome.terminate(), ["i-2"]);
    assert!(
        !kinds(&plan).contains(&"straggler_cleared"),
        "{:?}",
        kinds(&plan)
    );
}

#[test]
fn off_compares_nothing_and_a_lone_figure_has_no_one_to_be_slower_than() {
    let r = straggler_rules(StragglerAction::Off);
    let (_, mut w, state) = two_members();
    let plan = at(&r, &mut w, &state, 10, 400, 3_000);
    let plan = at(&r, &mut w, &plan.state, 100, 400, 4_000);
    assert!(kinds(&plan).is_empty() && plan.state.stragglers.is_empty());
    let r = straggler_rules(StragglerAction::Drain);
    let (_, mut w, state) = two_members();
    computing(&mut w, "10.0.1.2", "i-2", 10, 400, 3_000);
    let plan = pass(&r, &mut w, &state, 3_000);
    computing(&mut w, "10.0.1.2", "i-2", 100, 400, 4_000);
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    assert!(
        kinds(&plan).is_empty(),
        "i-1 reports no figure: nothing to compare"
    );
}

#[test]
fn the_budget_holds_a_drain_journaled_once_and_the_last_member_always_stays() {
    let r = Rules {
        disruption_budget: dt::config::Budget::Workers(0),
        ..straggler_rules(StragglerAction::Drain)
    };
    let (_, mut w, state) = two_members();
    let plan = at(&r, &mut w, &state, 10, 400, 3_000);
    let plan = at(&r, &mut w, &plan.state, 60, 400, 4_000);
    assert_eq!(kinds(&plan), ["straggler", "removal_held"]);
    let plan = at(&r, &mut w, &plan.state, 70, 400, 5_000);
    assert!(
        kinds(&plan).is_empty(),
        "held, journaled once: {:?}",
        kinds(&plan)
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}
