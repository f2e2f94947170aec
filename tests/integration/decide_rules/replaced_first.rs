//! Under `in_place` with `workers.replace_interrupted`, a member AWS recommends rebalancing
//! trains on until its replacement is in the job, then drains; the wait is kept in the state from
//! the first sight.

use crate::support::world::*;
use dt::decide::settle;
use dt::model::{Applied, LaunchFailed, Replaced};

fn in_place() -> (Rules, World, State) {
    let (mut r, w, state) = two_members();
    r.leave_before_loss_ms = Some(30_000);
    r.replace_interrupted = true;
    (r, w, state)
}

fn recommendation() -> Notice {
    let target = NoticeTarget::Instance("i-1".into());
    notice("e-1", NoticeKind::Rebalance, target)
}

fn launches(plan: &Plan) -> Vec<(String, Replaced)> {
    (plan.outcome.launches().into_iter())
        .map(|((replaces, because), _, _)| (replaces, because))
        .collect()
}

/// What act and settle make of the plan's launch.
fn launched(r: &Rules, plan: &Plan, result: Result<String, LaunchFailed>, now: Millis) -> State {
    let mut st = plan.state.clone();
    let applied = Applied {
        launches: vec![("dt-replace-i-1".into(), result)],
        ..Applied::default()
    };
    settle(r, &mut st, &applied, now);
    st
}

/// The replacement i-new (10.0.1.3) is listed and has prepared.
fn replacement_ready(w: &mut World) {
    w.instances.push(instance("i-new", "10.0.1.3", 4_000));
    w.ready("10.0.1.3");
}

fn holds(plan: &Plan) -> String {
    plan.outcome.holds.join("\n")
}

#[test]
fn a_recommended_member_trains_on_until_its_replacement_is_in_the_job_then_drains() {
    let (r, mut w, state) = in_place();
    w.notices = vec![recommendation()];
    let seen = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&seen), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(launches(&seen), [("i-1".into(), Replaced::Rebalance)]);
    assert_eq!(kinds(&seen), ["notice"]);
    assert!(seen.outcome.deferred_notices.is_empty(), "heeded now");
    assert!(seen.outcome.terminate().is_empty());

    w.notices.clear();
    let st = launched(&r, &seen, Ok("i-new".into()), 4_000);
    let training = pass(&r, &mut w, &st, 5_000);
    assert_eq!(hosts(&training), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(launches(&training).is_empty(), "launched once");
    assert!(
        holds(&training).contains("10.0.1.1 (i-1): it trains on until its replacement i-new"),
        "{}",
        holds(&training)
    );

    replacement_ready(&mut w);
    let joined = pass(&r, &mut w, &training.state, 6_000);
    let four = with_base(&["10.0.1.1", "10.0.1.2", "10.0.1.3"]);
    assert_eq!(hosts(&joined), four, "the replacement joins first");
    assert_eq!(joined.next_pass_at, Some(6_001), "a pass at once drains it");
    // The next pass, acknowledged or not, drains the recommended one.
    let drained = pass(&r, &mut w, &joined.state, 6_100);
    assert_eq!(hosts(&drained), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(tagged(&drained, WorkerStatus::RemovalQueued), ["i-1"]);
    let queued = (drained.outcome.events.iter()).find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::Rebalance));
    assert!(drained.state.replaced_first.is_empty());
    w.acks.generation = Some(drained.state.generation);
    let acked = pass(&r, &mut w, &drained.state, 8_000);
    assert_eq!(acked.outcome.terminate(), ["i-1"], "drained, as ever");
}

#[test]
fn the_wait_survives_a_restart_and_the_message_put_back_or_deleted_changes_nothing() {
    let (r, mut w, state) = in_place();
    w.notices = vec![recommendation()];
    let seen = pass(&r, &mut w, &state, 3_000);
    let st = reloaded(&launched(&r, &seen, Ok("i-new".into()), 4_000));
    // The same message again after dtd's restart.
    let again = pass(&r, &mut w, &st, 5_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
    assert!(launches(&again).is_empty());
    assert_eq!(hosts(&again), with_base(&["10.0.1.1", "10.0.1.2"]));
    // Then deleted: it still drains once its replacement is in.
    w.notices.clear();
    replacement_ready(&mut w);
    let mut st = reloaded(&again.state);
    for now in [6_000, 7_000] {
        let plan = pass(&r, &mut w, &st, now);
        w.acks.generation = Some(plan.state.generation);
        st = plan.state;
    }
    assert_eq!(
        st.members.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["i-2", "i-new"]
    );
}

#[test]
fn a_refused_launch_keeps_it_training_and_a_replacement_gone_lets_it_drain() {
    let (r, mut w, state) = in_place();
    w.notices = vec![recommendation()];
    let seen = pass(&r, &mut w, &state, 3_000);
    w.notices.clear();
    let refused = LaunchFailed::Refused("InsufficientInstanceCapacity".into());
    let st = launched(&r, &seen, Err(refused), 4_000);
    let held = pass(&r, &mut w, &st, 5_000);
    assert_eq!(hosts(&held), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(
        holds(&held).contains("it trains on until its replacement, not launched yet"),
        "{}",
        holds(&held)
    );

    // Launched, then gone before it joined (EC2 lists it no more, long after its launch).
    let st = launched(&r, &held, Ok("i-new".into()), 200_000);
    let forgotten = pass(&r, &mut w, &st, 900_000);
    assert!(forgotten.state.launched_for.is_empty());
    let gone = pass(&r, &mut w, &forgotten.state, 901_000);
    assert_eq!(hosts(&gone), with_base(&["10.0.1.2"]), "it drains now");
    assert_eq!(tagged(&gone, WorkerStatus::RemovalQueued), ["i-1"]);
}

#[test]
fn a_spot_warning_after_the_recommendation_takes_over_and_launches_nothing_more() {
    let (r, mut w, state) = in_place();
    w.notices = vec![recommendation()];
    let seen = pass(&r, &mut w, &state, 3_000);
    let st = launched(&r, &seen, Ok("i-new".into()), 4_000);
    w.notices = vec![Notice {
        deadline: Some(125_000),
        ..spot("e-2", "i-1")
    }];
    let warned = pass(&r, &mut w, &st, 5_000);
    assert!(launches(&warned).is_empty(), "replaced once");
    assert_eq!(hosts(&warned), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(warned.state.replaced_first.is_empty(), "the warning has it");
    w.notices.clear();
    let left = pass(&r, &mut w, &warned.state, 95_000);
    assert_eq!(hosts(&left), with_base(&["10.0.1.2"]));
    assert_eq!(tagged(&left, WorkerStatus::Interrupted), ["i-1"]);
}

#[test]
fn elsewhere_a_recommendation_drains_at_once_as_before() {
    // Not in_place; no replacement coming; at max; a group worker (its group's Capacity
    // Rebalancing).
    let (mut plain, _, _) = in_place();
    plain.leave_before_loss_ms = None;
    let (mut unreplaced, _, _) = in_place();
    unreplaced.replace_interrupted = false;
    for r in [plain, unreplaced] {
        let (_, mut w, state) = in_place();
        w.notices = vec![recommendation()];
        let plan = pass(&r, &mut w, &state, 3_000);
        assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
        assert!(plan.state.replaced_first.is_empty());
    }
    // At max: the replacement could never join.
    let (mut r, mut w, state) = in_place();
    r.max = 4;
    w.notices = vec![recommendation()];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    let (mut r, mut w, state) = two_group_members();
    r.leave_before_loss_ms = Some(30_000);
    r.replace_interrupted = true;
    w.notices = vec![recommendation()];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
}

#[test]
fn with_its_replacement_in_the_budget_still_holds_the_drain_and_no_pass_is_asked_for_meanwhile() {
    let (mut r, mut w, state) = in_place();
    r.disruption_budget = dt::config::Budget::Workers(1);
    w.notices = vec![recommendation()];
    let seen = pass(&r, &mut w, &state, 3_000);
    w.notices.clear();
    // i-2 leaves first (its elastic tag deleted): the one removal the budget allows.
    w.delete_elastic_tag("i-2");
    let st = launched(&r, &seen, Ok("i-new".into()), 4_000);
    let leaving = pass(&r, &mut w, &st, 5_000);
    assert_eq!(tagged(&leaving, WorkerStatus::RemovalQueued), ["i-2"]);
    replacement_ready(&mut w);
    let joined = pass(&r, &mut w, &leaving.state, 6_000);
    let held = pass(&r, &mut w, &joined.state, 6_100);
    assert!(hosts(&held).contains(&"10.0.1.1".to_string()));
    assert!(
        holds(&held).contains("it trains on until the disruption budget lets it go"),
        "{}",
        holds(&held)
    );
    assert_ne!(held.next_pass_at, Some(6_101), "no pass each millisecond");
    // The job lets i-2 go and it is terminated: the budget is free, and i-1 drains.
    w.acks.generation = Some(held.state.generation);
    let acked = pass(&r, &mut w, &held.state, 7_000);
    assert_eq!(acked.outcome.terminate(), ["i-2"]);
    let mut st = acked.state.clone();
    let applied = Applied {
        ended: vec![("i-2".into(), "TerminateInstances accepted for")],
        ..Applied::default()
    };
    settle(&r, &mut st, &applied, 7_000);
    w.vanish("i-2");
    let drained = pass(&r, &mut w, &st, 8_000);
    assert_eq!(hosts(&drained), with_base(&["10.0.1.3"]));
    assert_eq!(tagged(&drained, WorkerStatus::RemovalQueued), ["i-1"]);
}
