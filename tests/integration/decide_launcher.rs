//! The rules about workers' launchers (`job.launcher`), through `decide` alone: a training member
//! whose agent went silent leaves at once, is not terminated, and joins again once heard; an
//! acknowledged leaving worker waits for its launcher to stop; `job_finished` once; and what a
//! forged report cannot do.

use dt::decide::Rules;
use dt::model::*;
use dt::protocol::launcher::LauncherState;

use crate::support::world::{
    hosts, ip, kinds, pass, rules, two_members, waiting_for, with_base, World,
};

const SILENT: u64 = 30_000;

/// Half the job may be silent and still be taken out: these tests' jobs are of two.
fn launcher_rules() -> Rules {
    Rules {
        launcher_silent_ms: Some(SILENT),
        launcher_silent_share: 0.5,
        ack_by_launcher: false,
        ..rules()
    }
}

/// The agent at `addr` reported `state` in generation `g`, heard at `at`.
fn report(w: &mut World, addr: &str, id: &str, state: LauncherState, g: u64, at: Millis) {
    let l = LauncherSeen {
        instance_id: id.into(),
        state,
        generation: Some(g),
        restarts: 0,
        reason: "node 0 of 2".into(),
        stopped: None,
        compute: None,
        heard_at: at,
    };
    w.markers.launchers.insert(ip(addr), l);
}

/// Two members training in generation 1, their launchers running and heard at 2 s.
fn training() -> (Rules, World, State) {
    let (_, mut w, state) = two_members();
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Running, 1, 2_000);
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 1, 2_000);
    (launcher_rules(), w, state)
}

#[test]
fn each_launcher_change_is_journaled_once() {
    let (r, mut w, state) = training();
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(kinds(&plan), ["launcher_started", "launcher_started"]);
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Failed, 1, 5_000);
    let plan = pass(&r, &mut w, &plan.state, 5_000);
    assert_eq!(kinds(&plan), ["launcher_failed"]);
    assert_eq!(plan.outcome.events[0].instance.as_deref(), Some("i-1"));
}

#[test]
fn a_training_member_whose_agent_went_silent_leaves_at_once_is_kept_and_joins_again_once_heard() {
    let (r, mut w, state) = training();
    // i-2's agent keeps pinging dtd; i-1's stops at 2 s.
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 1, 31_000);
    let plan = pass(&r, &mut w, &state, 31_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2"]),
        "29 s is not silent"
    );
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 1, 32_000);
    let plan = pass(&r, &mut w, &plan.state, 32_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.2"]),
        "out of the job at once"
    );
    assert!(
        plan.outcome.terminate().is_empty(),
        "a silence is no one's word: nothing terminated on it"
    );
    let e = (plan.outcome.events.iter())
        .find(|e| e.kind == "removal_queued")
        .unwrap();
    assert_eq!(e.cause, Some(Cause::Silent));
    assert!(e.message.contains("not heard for 30s"), "{}", e.message);
    assert!(e.message.contains("not terminated"), "{}", e.message);
    // Still silent after the job let it go: kept, not rejoining.
    w.acks.generation = Some(plan.state.generation);
    let first = pass(&r, &mut w, &plan.state, 40_000);
    let plan = pass(&r, &mut w, &first.state, 40_500);
    assert!(plan.outcome.terminate().is_empty());
    let acked = acknowledged(&[&first, &plan]);
    assert!(
        acked.ends_with("(ack file); it stays running, outside the job"),
        "{acked}"
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    let why = waiting_for(&plan, &w, "i-1");
    assert!(why.contains("its agent to be heard"), "{why}");
    // Its agent is heard again (its launcher stopped, as the plan no longer lists it): it joins
    // again like a new worker.
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Stopped, 2, 41_000);
    let plan = pass(&r, &mut w, &plan.state, 41_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.1"]));
}

#[test]
fn above_the_silent_share_no_silent_member_leaves_and_the_hold_is_journaled_once() {
    // The default share, a third: both members of two silent at once is dtd's or the network's
    // trouble (a dtd restarted without its agents yet, a partition), not theirs.
    let r = Rules {
        launcher_silent_share: 1.0 / 3.0,
        ..launcher_rules()
    };
    let (_, mut w, state) = training();
    let plan = pass(&r, &mut w, &state, 40_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2"]),
        "nobody taken out"
    );
    assert!(
        kinds(&plan).contains(&"silence_widespread"),
        "{:?}",
        kinds(&plan)
    );
    let held = plan.outcome.holds.join("\n");
    assert!(held.contains("2 of 2 members not heard from"), "{held}");
    let plan = pass(&r, &mut w, &plan.state, 41_000);
    assert!(
        !kinds(&plan).contains(&"silence_widespread"),
        "journaled once"
    );
    assert_eq!(plan.outcome.holds.len(), 1, "shown every pass");
    // One of them is heard again: one silent of two is still more than a third.
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 1, 42_000);
    let plan = pass(&r, &mut w, &plan.state, 42_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    // Under a share of a half, the silent one leaves, and the hold's end is journaled.
    let r = Rules {
        launcher_silent_share: 0.5,
        ..r
    };
    let plan = pass(&r, &mut w, &plan.state, 43_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(
        kinds(&plan).contains(&"silence_subsided"),
        "{:?}",
        kinds(&plan)
    );
}

#[test]
fn a_silent_report_of_a_worker_not_training_removes_nothing() {
    let (r, mut w, state) = training();
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Stopped, 1, 2_000);
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Finished, 1, 2_000);
    let plan = pass(&r, &mut w, &state, 600_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn a_report_naming_another_instance_or_an_unwritten_generation_is_not_believed() {
    let (r, mut w, state) = training();
    // A worker's user code writes i-1's report in i-2's name, and one from the future.
    report(&mut w, "10.0.1.1", "i-2", LauncherState::Running, 1, 2_000);
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 99, 2_000);
    let plan = pass(&r, &mut w, &state, 600_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2"]),
        "nobody taken for gone"
    );
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    // Nor shown in `dtctl status`.
    let views = dt::decide::worker_views(&plan.outcome.rows, &w.snap(), &plan.state);
    let shown: Vec<_> = views.iter().filter_map(|v| v.launcher.as_ref()).collect();
    assert!(shown.is_empty(), "{shown:?}");
}

#[test]
fn an_acknowledged_leaving_worker_is_terminated_only_once_its_launcher_stopped() {
    let (r, mut w, state) = training();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.generation, 2);
    w.acks.generation = Some(2);
    report(
        &mut w,
        "10.0.1.1",
        "i-1",
        LauncherState::Stopping,
        1,
        11_000,
    );
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 2, 11_000);
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "its processes still run"
    );
    assert!(waiting_for(&plan, &w, "i-1").contains("its launcher to stop (stopping"));
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Stopped, 1, 12_000);
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(kinds(&plan).contains(&"acknowledged"), "{:?}", kinds(&plan));
}

#[test]
fn a_launcher_that_never_stops_holds_the_termination_only_until_the_ack_timeout() {
    let (r, mut w, state) = training();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(plan.outcome.terminate().is_empty());
    let timeout = 10_000 + crate::support::world::TIMEOUT;
    // Both agents still answer: i-1's torchrun just does not stop.
    report(
        &mut w,
        "10.0.1.1",
        "i-1",
        LauncherState::Running,
        1,
        timeout,
    );
    report(
        &mut w,
        "10.0.1.2",
        "i-2",
        LauncherState::Running,
        2,
        timeout,
    );
    let plan = pass(&r, &mut w, &plan.state, timeout);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
}

#[test]
fn job_finished_is_journaled_once_when_every_member_finished_in_the_generation() {
    let (r, mut w, state) = training();
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Finished, 1, 3_000);
    let plan = pass(&r, &mut w, &state, 3_000);
    assert!(!kinds(&plan).contains(&"job_finished"), "one still runs");
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Finished, 1, 4_000);
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(kinds(&plan), ["launcher_finished", "job_finished"]);
    assert_eq!(plan.outcome.events[1].generation, Some(1));
    let plan = pass(&r, &mut w, &plan.state, 5_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
}

#[test]
fn without_a_launcher_configured_reports_change_nothing() {
    let (_, mut w, state) = training();
    let r = rules();
    let plan = pass(&r, &mut w, &state, 600_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn a_silent_running_report_of_a_worker_not_in_the_job_removes_nothing() {
    let (r, mut w, state) = training();
    // A third worker, still preparing: a worker's user code writes a "running" report in its
    // name and lets it go silent, to get it terminated.
    w.instances
        .push(crate::support::world::instance("i-3", "10.0.1.3", 300));
    report(&mut w, "10.0.1.3", "i-3", LauncherState::Running, 1, 2_000);
    report(
        &mut w,
        "10.0.1.1",
        "i-1",
        LauncherState::Running,
        1,
        600_000,
    );
    report(
        &mut w,
        "10.0.1.2",
        "i-2",
        LauncherState::Running,
        1,
        600_000,
    );
    let plan = pass(&r, &mut w, &state, 600_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "{:?}",
        plan.outcome.events
    );
    assert!(!kinds(&plan).contains(&"unhealthy"), "{:?}", kinds(&plan));
}

/// `job.ack.by: launcher`, for a script that writes no ack: a generation is applied once every
/// member's launcher runs in it, and a leaver is terminated as soon as its launcher stopped,
/// not at the ack timeout. A joiner is acknowledged (it trains) the same way.
#[test]
fn acknowledged_by_the_launchers_a_leaver_goes_once_they_run_the_new_generation_and_its_stopped() {
    let (r, mut w, state) = training();
    let r = Rules {
        ack_by_launcher: true,
        ..r
    };
    w.acks.generation = None;
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.generation, 2);
    // i-2 has not followed generation 2 yet, and i-1's launcher still runs.
    report(
        &mut w,
        "10.0.1.1",
        "i-1",
        LauncherState::Stopping,
        1,
        11_000,
    );
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(
        plan.state.launcher_acked,
        Some(1),
        "generation 1 was running"
    );
    report(&mut w, "10.0.1.2", "i-2", LauncherState::Running, 2, 12_000);
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(plan.state.launcher_acked, Some(2));
    assert!(
        plan.outcome.terminate().is_empty(),
        "i-1's launcher still stops"
    );
    assert!(waiting_for(&plan, &w, "i-1").contains("its launcher to stop"));
    report(&mut w, "10.0.1.1", "i-1", LauncherState::Stopped, 1, 13_000);
    let plan = pass(&r, &mut w, &plan.state, 13_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    let acked = acknowledged(&[&plan]);
    assert!(
        acked.ends_with("(the launchers' reports); terminating"),
        "no ack file was written: {acked}"
    );
}

/// The message of the `acknowledged` event the plans journaled.
fn acknowledged(plans: &[&Plan]) -> String {
    let mut events = plans.iter().flat_map(|p| &p.outcome.events);
    let acked = events.find(|e| e.kind == "acknowledged");
    acked.expect("an acknowledged event").message.clone()
}
