//! Under `in_place`, a Spot-warned member trains on until `leave_before_loss` before its loss,
//! its replacement launched at the warning; the leave is kept in the state from the first sight.

use crate::support::world::*;
use dt::decide::settle;
use dt::model::{Applied, Replaced};

const LEAD: Millis = 30_000;
/// AWS takes i-1 two minutes after the warning at 3 s.
const LOSS: Millis = 123_000;
const LEAVES: Millis = LOSS - LEAD;

fn in_place() -> (Rules, World, State) {
    let (mut r, w, state) = two_members();
    r.leave_before_loss_ms = Some(LEAD);
    r.replace_interrupted = true;
    (r, w, state)
}

fn warning(id: &str, source: &'static str) -> Notice {
    Notice {
        deadline: Some(LOSS),
        source,
        ..spot(id, "i-1")
    }
}

fn launches(plan: &Plan) -> Vec<String> {
    (plan.outcome.launches().into_iter())
        .map(|((replaces, _), _, _)| replaces)
        .collect()
}

/// What act and settle make of the plan's launch: the replacement runs as i-new.
fn launched(r: &Rules, plan: &Plan, now: Millis) -> State {
    let mut st = plan.state.clone();
    let applied = Applied {
        launches: vec![("dt-replace-i-1".into(), Ok("i-new".into()))],
        ..Applied::default()
    };
    settle(r, &mut st, &applied, now);
    st
}

#[test]
fn a_warned_member_trains_on_until_its_lead_before_the_loss_its_replacement_launched_at_once() {
    let (r, mut w, state) = in_place();
    w.notices = vec![warning("e-1", "queue")];
    let warned = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&warned), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(warned.state.generation, state.generation, "no change yet");
    assert_eq!(launches(&warned), ["i-1"], "the replacement at the warning");
    assert_eq!(kinds(&warned), ["notice"]);
    let said = &warned.outcome.events[0].message;
    assert!(
        said.contains("trains on until 1970-01-01T00:01:33"),
        "{said}"
    );
    assert!(
        warned.outcome.deferred_notices.is_empty(),
        "heeded: the queue's message goes"
    );
    assert_eq!(warned.state.interruptions, 0);
    assert_eq!(
        warned.next_pass_at,
        Some(LEAVES),
        "a pass at its leave, whatever `interval`"
    );

    // The queue's message is gone; the replacement is launched; then one second before its time.
    w.notices.clear();
    let st = launched(&r, &warned, 4_000);
    let training = pass(&r, &mut w, &st, LEAVES - 1_000);
    assert_eq!(hosts(&training), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(launches(&training).is_empty());
    let hold = training.outcome.holds.join("\n");
    assert_eq!(training.next_pass_at, Some(LEAVES));
    assert!(
        hold.contains("10.0.1.1 (i-1): it trains on until"),
        "{hold}"
    );

    let left = pass(&r, &mut w, &training.state, LEAVES);
    assert_eq!(hosts(&left), with_base(&["10.0.1.2"]));
    assert_eq!(tagged(&left, WorkerStatus::Interrupted), ["i-1"]);
    let told = left.outcome.notify.clone().expect("the job is notified");
    assert_eq!(
        told.notices[0].deadline,
        Some(LOSS),
        "the job hears the loss's time"
    );
    assert!(launches(&left).is_empty(), "replaced once");
    assert!(
        left.outcome.terminate().is_empty(),
        "AWS reclaims it, not dtd"
    );
    assert_eq!(left.state.interruptions, 1);
    assert!(left.state.trains_until.is_empty());
}

#[test]
fn the_leave_survives_a_restart_and_the_notice_put_back_or_told_again_changes_nothing() {
    let (r, mut w, state) = in_place();
    w.notices = vec![warning("e-1", "queue")];
    let warned = pass(&r, &mut w, &state, 3_000);
    // dtd restarts; the same message comes again, and the agent tells the same loss.
    let st = reloaded(&warned.state);
    let mut agent = warning("agent:i-1:imds:spot-interruption:t", "agent");
    agent.deadline = Some(LOSS + 60_000);
    w.notices = vec![warning("e-1", "queue"), agent];
    w.inst("i-1").market = "spot".into();
    let again = pass(&r, &mut w, &st, 10_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
    assert_eq!(hosts(&again), with_base(&["10.0.1.1", "10.0.1.2"]));
    let left = pass(&r, &mut w, &reloaded(&again.state), LEAVES);
    assert_eq!(
        hosts(&left),
        with_base(&["10.0.1.2"]),
        "with the first's time"
    );
    assert_eq!(
        kinds(&left).iter().filter(|k| **k == "interrupted").count(),
        1
    );
    let later = pass(&r, &mut w, &left.state, LOSS);
    assert_eq!(later.state.generation, left.state.generation);
    assert_eq!(later.state.interruptions, 1);
}

#[test]
fn an_agents_time_is_held_to_two_minutes_after_its_warning() {
    let (r, mut w, state) = in_place();
    w.inst("i-1").market = "spot".into();
    let mut agent = warning("agent:i-1:imds:spot-interruption:t", "agent");
    agent.deadline = Some(3_000 + 3_600_000);
    w.notices = vec![agent];
    let warned = pass(&r, &mut w, &state, 3_000);
    assert_eq!(kinds(&warned), ["notice"]);
    w.notices.clear();
    let left = pass(&r, &mut w, &warned.state, 3_000 + 120_000 - LEAD);
    assert_eq!(hosts(&left), with_base(&["10.0.1.2"]));
}

#[test]
fn a_warning_too_close_to_its_time_or_without_one_leaves_at_once() {
    for deadline in [Some(3_000 + LEAD), None] {
        let (r, mut w, state) = in_place();
        w.notices = vec![Notice {
            deadline,
            ..warning("e-1", "queue")
        }];
        let plan = pass(&r, &mut w, &state, 3_000);
        assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]), "{deadline:?}");
        assert_eq!(launches(&plan), ["i-1"]);
    }
    // Not under in_place: at once, as ever.
    let (mut r, mut w, state) = in_place();
    r.leave_before_loss_ms = None;
    w.notices = vec![warning("e-1", "queue")];
    assert_eq!(
        hosts(&pass(&r, &mut w, &state, 3_000)),
        with_base(&["10.0.1.2"])
    );
}

#[test]
fn a_warned_member_gone_before_its_time_is_forgotten() {
    let (r, mut w, state) = in_place();
    w.notices = vec![warning("e-1", "queue")];
    let warned = pass(&r, &mut w, &state, 3_000);
    w.notices.clear();
    w.vanish("i-1");
    let gone = pass(&r, &mut w, &launched(&r, &warned, 4_000), 20_000);
    assert_eq!(hosts(&gone), with_base(&["10.0.1.2"]));
    let after = pass(&r, &mut w, &gone.state, LEAVES);
    assert!(after.state.trains_until.is_empty());
    assert!(launches(&after).is_empty());
}

#[test]
fn a_group_worker_is_detached_for_its_replacement_only_when_it_leaves() {
    let (mut r, mut w, state) = two_group_members();
    r.replace_interrupted = true;
    r.leave_before_loss_ms = Some(LEAD);
    w.notices = vec![warning("e-1", "queue")];
    let warned = pass(&r, &mut w, &state, 3_000);
    assert!(warned.outcome.detaches().is_empty());
    assert_eq!(kinds(&warned), ["notice"]);
    w.notices.clear();
    let left = pass(&r, &mut w, &warned.state, LEAVES);
    let detached: Vec<_> = (left.outcome.detaches().into_iter())
        .map(|((id, because), _)| (id, because))
        .collect();
    assert_eq!(detached, [("i-1".to_string(), Replaced::Interrupted)]);
}
