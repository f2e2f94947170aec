//! A stalled job's hung nodes (`job.stall.action`): the members whose agent reports a training
//! process stopped are named on the `stalled` line, and drained or the job restarted as the
//! action says; never every member, never a node another instance's report names.

use dt::config::StallAction;
use dt::protocol::launcher::LauncherState;

use crate::support::world::*;

const STALL_AFTER: Millis = 600_000;
const STALLED_AT: Millis = 2_000 + STALL_AFTER;

fn hung_rules(action: StallAction) -> Rules {
    Rules {
        stall_after_ms: Some(STALL_AFTER),
        stall_action: action,
        launcher_silent_ms: Some(30_000),
        ..rules()
    }
}

/// The agent at `addr` reports its launcher running in generation 1, heard at `at`, with
/// `stopped` the process a signal stopped.
fn running(w: &mut World, addr: &str, id: &str, stopped: Option<u32>, at: Millis) {
    let l = LauncherSeen {
        instance_id: id.into(),
        state: LauncherState::Running,
        generation: Some(1),
        restarts: 0,
        reason: "node 0 of 2".into(),
        stopped,
        compute: None,
        heard_at: at,
    };
    w.markers.launchers.insert(ip(addr), l);
}

/// Two members training at step 5 since 2 s, both agents heard at `heard`, i-2's with
/// `stopped`; then the pass at which the step has stood still for `job.stall.after`.
fn stall(action: StallAction, stopped: [Option<u32>; 2]) -> (Rules, World, Plan) {
    let (_, mut w, state) = two_members();
    let r = hung_rules(action);
    at_step(&mut w, 5);
    running(&mut w, "10.0.1.1", "i-1", stopped[0], 2_000);
    running(&mut w, "10.0.1.2", "i-2", stopped[1], 2_000);
    let plan = pass(&r, &mut w, &state, 2_000);
    running(&mut w, "10.0.1.1", "i-1", stopped[0], STALLED_AT);
    running(&mut w, "10.0.1.2", "i-2", stopped[1], STALLED_AT);
    let plan = pass(&r, &mut w, &plan.state, STALLED_AT);
    (r, w, plan)
}

fn message<'a>(plan: &'a Plan, kind: &str) -> &'a str {
    let e = plan.outcome.events.iter().find(|e| e.kind == kind);
    e.map_or("", |e| e.message.as_str())
}

#[test]
fn drain_takes_the_named_member_out_at_once_and_terminates_it_once_its_launcher_stopped() {
    let (r, mut w, plan) = stall(StallAction::Drain, [None, Some(4242)]);
    assert_eq!(kinds(&plan), ["stalled", "removal_queued", "generation"]);
    assert!(
        message(&plan, "stalled").ends_with(
            "stalled; held back by 10.0.1.2 (its process 4242 stopped); drained \
             (job.stall.action: drain)"
        ),
        "{}",
        message(&plan, "stalled")
    );
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::Hung));
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1"]),
        "out of the job at once"
    );
    assert!(
        plan.outcome.terminate().is_empty(),
        "not before the job let it go"
    );
    let held = &plan.state.progress.as_ref().unwrap().held_back;
    assert!(held.starts_with("held back by 10.0.1.2"), "{held}");
    // The job acknowledges the generation without it; its agent stops its launcher.
    w.acks.generation = Some(plan.state.generation);
    let later = STALLED_AT + 1_000;
    running(&mut w, "10.0.1.1", "i-1", None, later);
    let mut stopped = w.markers.launchers[&ip("10.0.1.2")].clone();
    (stopped.state, stopped.stopped, stopped.heard_at) = (LauncherState::Stopped, None, later);
    w.markers.launchers.insert(ip("10.0.1.2"), stopped);
    let plan = pass(&r, &mut w, &plan.state, later);
    assert_eq!(plan.outcome.terminate(), ["i-2"]);
    // Once per stall: the pass after names and drains nobody again.
    let again = pass(&r, &mut w, &plan.state, later + 1_000);
    assert!(!kinds(&again).contains(&"stalled") && !kinds(&again).contains(&"removal_queued"));
}

#[test]
fn alert_names_the_node_and_changes_nothing() {
    let (_, _, plan) = stall(StallAction::Alert, [None, Some(4242)]);
    assert_eq!(kinds(&plan), ["stalled"]);
    assert!(message(&plan, "stalled").ends_with("held back by 10.0.1.2 (its process 4242 stopped)"));
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn with_every_member_named_none_is_drained() {
    let (_, _, plan) = stall(StallAction::Drain, [Some(7), Some(4242)]);
    assert_eq!(kinds(&plan), ["stalled"]);
    assert!(
        message(&plan, "stalled")
            .ends_with("none drained (every member is named, and one must stay)"),
        "{}",
        message(&plan, "stalled")
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn drain_with_no_node_named_does_nothing_more_and_restart_starts_a_new_generation() {
    let (_, _, plan) = stall(StallAction::Drain, [None, None]);
    assert_eq!(kinds(&plan), ["stalled"]);
    assert!(message(&plan, "stalled")
        .ends_with("no node named (no agent reports a stopped training process)"));
    let before = plan.state.generation;
    let (_, _, plan) = stall(StallAction::Restart, [None, None]);
    assert_eq!(kinds(&plan), ["stalled", "generation"]);
    assert!(
        message(&plan, "stalled").ends_with("every launcher restarts (job.stall.action: restart)")
    );
    assert_eq!(plan.state.generation, before + 1, "a new generation");
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2"]),
        "the same members"
    );
}

#[test]
fn a_stopped_process_in_a_report_naming_another_instance_names_nobody() {
    let (_, mut w, state) = two_members();
    let r = hung_rules(StallAction::Drain);
    at_step(&mut w, 5);
    running(&mut w, "10.0.1.1", "i-1", None, 2_000);
    // A report at i-2's IP that names i-1: not i-2's own word.
    running(&mut w, "10.0.1.2", "i-1", Some(4242), 2_000);
    let plan = pass(&r, &mut w, &state, 2_000);
    running(&mut w, "10.0.1.1", "i-1", None, STALLED_AT);
    running(&mut w, "10.0.1.2", "i-1", Some(4242), STALLED_AT);
    let plan = pass(&r, &mut w, &plan.state, STALLED_AT);
    assert_eq!(kinds(&plan), ["stalled"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}
