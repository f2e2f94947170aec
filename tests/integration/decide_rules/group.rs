//! The worker Auto Scaling group: scale-in, hooks, replacements, standby.

use crate::support::world::*;

#[test]
fn a_new_group_worker_is_held_by_the_launching_hook_until_its_marker_appears() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    let waiting = pass(&r, &mut w, &State::default(), 1_000);
    assert!(waiting.outcome.complete_hooks().is_empty());
    assert_eq!(worker(&waiting, &w, "i-1").label(), "PREPARING");
    // A long prepare-data keeps the hook alive.
    let long = pass(&r, &mut w, &waiting.state, 1_000 + HEARTBEAT / 2);
    assert_eq!(
        long.outcome.heartbeats(),
        [("i-1".to_string(), "grp-launching".to_string())]
    );
    w.ready("10.0.1.1");
    let ready = pass(&r, &mut w, &long.state, 2_000 + HEARTBEAT / 2);
    assert_eq!(
        hook(&ready),
        [("i-1".into(), "grp-launching".into(), "CONTINUE")]
    );
    assert_eq!(
        hosts(&ready),
        with_base(&[]),
        "not in the job before InService"
    );
    w.lifecycle("i-1", "InService");
    let joined = pass(&r, &mut w, &ready.state, 3_000 + HEARTBEAT / 2);
    assert!(remembered(&joined.state, |w| w.heartbeat_at.is_some()).is_empty());
    assert_eq!(hosts(&joined), with_base(&["10.0.1.1"]));
}

#[test]
fn a_new_group_worker_whose_prepare_data_failed_is_abandoned_and_counted() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    w.markers
        .failed
        .insert(ip("10.0.1.1"), "exit 3 after 3 attempt(s): no space".into());
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        hook(&plan),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(plan.state.prepare_failures, 1);
    assert!(plan
        .state
        .last_prepare_failure
        .as_deref()
        .unwrap()
        .contains("no space"));
    // The group has not moved it on yet: the completion is resent, the failure not recounted.
    let again = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(
        hook(&again),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(again.state.prepare_failures, 1, "one worker, one failure");
    assert_eq!(count_kind(&plan, "prepare_failed"), 1, "{:?}", kinds(&plan));
    let e = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "prepare_failed");
    assert!(
        e.is_some_and(|e| e.message.contains("no space")
            && e.message
                .ends_with("abandoned in Pending:Wait by grp-launching; the group replaces it")),
        "{e:?}"
    );
    let restarted = pass(&r, &mut w, &reloaded(&again.state), 4_000);
    for plan in [&again, &restarted] {
        assert_eq!(count_kind(plan, "prepare_failed"), 0, "{:?}", kinds(plan));
    }
}

#[test]
fn a_held_worker_that_never_reports_is_heartbeated_until_the_prepare_timeout_then_abandoned() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    assert_eq!(worker(&first, &w, "i-1").label(), "PREPARING");
    assert!(
        waiting_for(&first, &w, "i-1").contains("abandoned if none within 1h"),
        "{}",
        waiting_for(&first, &w, "i-1")
    );
    // Before the timeout: a heartbeat every half heartbeat timeout, nothing completed.
    let mut state = first.state;
    let mut now = HELD_AT;
    let mut sent = 0;
    while now + HEARTBEAT / 2 < HELD_AT + PREPARE_TIMEOUT {
        now += HEARTBEAT / 2;
        let plan = pass(&r, &mut w, &state, now);
        assert!(
            plan.outcome.complete_hooks().is_empty(),
            "completed at {now}"
        );
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
        sent += beats(&plan);
        state = plan.state;
    }
    assert_eq!(sent as u64, PREPARE_TIMEOUT / (HEARTBEAT / 2) - 1);
    let last = pass(&r, &mut w, &state, HELD_AT + PREPARE_TIMEOUT - 1);
    assert!(
        last.outcome.complete_hooks().is_empty(),
        "one millisecond early"
    );

    // At the timeout: ABANDON, journaled, counted, and no more heartbeats.
    let over = pass(&r, &mut w, &last.state, HELD_AT + PREPARE_TIMEOUT);
    assert_eq!(
        hook(&over),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(beats(&over), 0);
    assert_eq!(count_kind(&over, "prepare_never_reported"), 1);
    let event = over
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "prepare_never_reported");
    let event = event.unwrap();
    assert_eq!(event.instance.as_deref(), Some("i-1"));
    assert!(
        event.message.contains("never reported within 1h"),
        "{}",
        event.message
    );
    assert_eq!(tagged(&over, WorkerStatus::PrepareFailed), ["i-1"]);
    assert!(waiting_for(&over, &w, "i-1").contains("the group to replace it"));
    assert_eq!(over.state.prepare_failures, 1);

    // The group is slow to act: ABANDON is resent, nothing journaled or counted again, and
    // still no heartbeat however long it takes.
    let abandon = hook(&over);
    let mut state = over.state;
    for n in 1..=4 {
        let plan = pass(
            &r,
            &mut w,
            &state,
            HELD_AT + PREPARE_TIMEOUT + n * HEARTBEAT,
        );
        assert_eq!(hook(&plan), abandon);
        assert_eq!(beats(&plan), 0, "heartbeat after ABANDON");
        assert_eq!(count_kind(&plan, "prepare_never_reported"), 0);
        assert_eq!(plan.state.prepare_failures, 1);
        state = plan.state;
    }
    w.lifecycle("i-1", "Terminating");
    let gone = pass(
        &r,
        &mut w,
        &state,
        HELD_AT + PREPARE_TIMEOUT + 10 * HEARTBEAT,
    );
    assert!(gone.outcome.complete_hooks().is_empty() && gone.outcome.heartbeats().is_empty());
    assert!(remembered(&gone.state, |w| w.launch_wait.is_some()
        || w.heartbeat_at.is_some())
    .is_empty());
}

#[test]
fn a_marker_just_before_the_prepare_timeout_still_joins() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    w.ready("10.0.1.1");
    let ready = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT - 1);
    let cont = [("i-1".into(), "grp-launching".into(), "CONTINUE")];
    assert_eq!(hook(&ready), cont);
    // The group has not put it in service by the time the timeout passes: still CONTINUE.
    let late = pass(&r, &mut w, &ready.state, HELD_AT + PREPARE_TIMEOUT + 1_000);
    assert_eq!(hook(&late), cont);
    assert_eq!(count_kind(&late, "prepare_never_reported"), 0);
    assert_eq!(late.state.prepare_failures, 0);
    w.lifecycle("i-1", "InService");
    let joined = pass(&r, &mut w, &late.state, HELD_AT + PREPARE_TIMEOUT + 2_000);
    assert_eq!(hosts(&joined), with_base(&["10.0.1.1"]));
}

#[test]
fn a_restarted_dtd_keeps_the_prepare_clock_and_journals_once() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    let halfway = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT / 2);
    // dtd restarts: the wait is measured from when it was first seen, not from the restart.
    let over = pass(
        &r,
        &mut w,
        &reloaded(&halfway.state),
        HELD_AT + PREPARE_TIMEOUT,
    );
    assert_eq!(
        hook(&over),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(count_kind(&over, "prepare_never_reported"), 1);
    // Restarting again before the group acted neither journals nor counts it a second time.
    let again = pass(
        &r,
        &mut w,
        &reloaded(&over.state),
        HELD_AT + PREPARE_TIMEOUT + 2_000,
    );
    assert_eq!(hook(&again), hook(&over));
    assert_eq!(count_kind(&again, "prepare_never_reported"), 0);
    assert_eq!(again.state.prepare_failures, 1);
    assert_eq!(beats(&again), 0);
}

#[test]
fn a_state_file_from_before_the_prepare_timeout_starts_the_clock_at_the_first_pass() {
    let r = group_rules();
    let (mut w, _) = held_at_launch(&r);
    // Written by a dtd without launch_waits: the key is absent.
    let old: State = serde_json::from_str(
        r#"{"generation": 0, "members": [], "removals": [], "launch_heartbeats": {"i-1": 500}}"#,
    )
    .unwrap();
    let seen = pass(&r, &mut w, &old, 2_000);
    assert!(seen.outcome.complete_hooks().is_empty());
    let early = pass(&r, &mut w, &seen.state, 2_000 + PREPARE_TIMEOUT - 1);
    assert!(early.outcome.complete_hooks().is_empty());
    let over = pass(&r, &mut w, &early.state, 2_000 + PREPARE_TIMEOUT);
    assert_eq!(hook(&over).len(), 1);
}

#[test]
fn a_partial_view_never_abandons_a_held_worker() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    for (markers, acks) in [(false, true), (true, false)] {
        let snap = Snapshot {
            markers: if markers {
                Ok(w.markers.clone())
            } else {
                Err("EFS unreachable".into())
            },
            acks: if acks {
                Ok(w.acks.clone())
            } else {
                Err("ack file unreadable".into())
            },
            ..w.snap()
        };
        let plan = decide(&r, &snap, &first.state, HELD_AT + PREPARE_TIMEOUT + 1);
        assert!(
            plan.outcome.complete_hooks().is_empty(),
            "{:?}",
            plan.outcome.complete_hooks()
        );
        assert_eq!(beats(&plan), 1, "kept alive until the view is complete");
        assert_eq!(count_kind(&plan, "prepare_never_reported"), 0);
    }
    let complete = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT + 2);
    assert_eq!(hook(&complete).len(), 1);
}

#[test]
fn never_reporting_counts_toward_max_prepare_failures_and_resume_rearms_it() {
    let r = Rules {
        max_prepare_failures: 1,
        ..group_rules()
    };
    let (mut w, first) = held_at_launch(&r);
    let abandoned = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT);
    assert_eq!(abandoned.state.prepare_failures, 1);
    // The group replaced it with i-2, whose user data dies the same way.
    w.vanish("i-1");
    w.instances.push(group_instance("i-2", "10.0.1.2", 200));
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-2", "Pending:Wait");
    let t2 = HELD_AT + PREPARE_TIMEOUT + 1_000;
    let seen = pass(&r, &mut w, &abandoned.state, t2);
    let held = pass(&r, &mut w, &seen.state, t2 + PREPARE_TIMEOUT);
    assert!(
        held.outcome.complete_hooks().is_empty(),
        "replacing has stopped"
    );
    assert_eq!(count_kind(&held, "prepare_never_reported"), 1);
    assert_eq!(tagged(&held, WorkerStatus::PrepareFailed), ["i-2"]);
    let why = waiting_for(&held, &w, "i-2");
    assert!(
        why.contains("a person") && why.contains("dtctl resume"),
        "{why}"
    );
    // Held for a person: the hook is kept alive, the event not journaled again.
    let later = pass(&r, &mut w, &held.state, t2 + PREPARE_TIMEOUT + HEARTBEAT);
    assert_eq!(beats(&later), 1);
    assert_eq!(count_kind(&later, "prepare_never_reported"), 0);
    w.resume = Some(t2 + PREPARE_TIMEOUT + HEARTBEAT);
    let resumed = pass(
        &r,
        &mut w,
        &later.state,
        t2 + PREPARE_TIMEOUT + 2 * HEARTBEAT,
    );
    assert_eq!(
        hook(&resumed),
        [("i-2".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(resumed.state.prepare_failures, 1);
    assert_eq!(beats(&resumed), 0);
}

#[test]
fn instances_outside_service_are_never_in_the_host_files() {
    let (r, mut w, state) = two_group_members();
    w.lifecycle("i-2", "Standby");
    w.instances.push(group_instance("i-3", "10.0.1.3", 300));
    w.group_mut().instances.insert(
        "i-3".into(),
        GroupMember {
            lifecycle_state: "Warmed:Stopped".into(),
            protected: false,
        },
    );
    w.ready("10.0.1.3");
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(waiting_for(&plan, &w, "i-3").contains("Warmed:Stopped"));
    // Standby is a person's choice: drained, acknowledged, then left running.
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert!(acked.outcome.terminate().is_empty() && acked.outcome.group_terminate().is_empty());
    assert!(acked.state.removals.is_empty());
    // Back in service, it joins again.
    w.lifecycle("i-2", "InService");
    let back = pass(&r, &mut w, &acked.state, 5_000);
    assert_eq!(hosts(&back), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn a_scale_in_by_the_group_drains_through_the_terminating_hook_with_heartbeats() {
    let (r, mut w, state) = two_group_members();
    w.lifecycle("i-2", "Terminating:Wait");
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(
        plan.outcome.complete_hooks().is_empty(),
        "held until the job lets it go"
    );
    let beat = pass(&r, &mut w, &plan.state, 3_000 + HEARTBEAT / 2);
    assert_eq!(
        beat.outcome.heartbeats(),
        [("i-2".to_string(), "grp-terminating".to_string())]
    );
    let quiet = pass(&r, &mut w, &beat.state, 3_000 + HEARTBEAT / 2 + 1_000);
    assert!(
        quiet.outcome.heartbeats().is_empty(),
        "one heartbeat per half timeout"
    );
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &quiet.state, 3_000 + HEARTBEAT);
    assert_eq!(
        hook(&acked),
        [("i-2".into(), "grp-terminating".into(), "CONTINUE")]
    );
    assert!(acked.outcome.terminate().is_empty() && acked.outcome.group_terminate().is_empty());
}

#[test]
fn a_lower_desired_capacity_drains_the_newest_protected_worker_first() {
    let (r, mut w, state) = two_group_members();
    w.group_mut().desired = 1;
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]), "i-2 launched last");
    assert!(plan.outcome.group_terminate().is_empty());
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::ScaleIn));
    let again = pass(&r, &mut w, &plan.state, 3_500);
    assert_eq!(
        hosts(&again),
        with_base(&["10.0.1.1"]),
        "drained once, not twice"
    );
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &again.state, 4_000);
    assert_eq!(
        acked.outcome.group_terminate(),
        [("i-2".to_string(), false)]
    );
}

#[test]
fn a_removed_group_worker_shrinks_its_group() {
    let (r, mut w, state) = two_group_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 3_000);
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(acked.outcome.group_terminate(), [("i-1".to_string(), true)]);
    assert!(acked.outcome.terminate().is_empty());
}

#[test]
fn failing_group_workers_are_replaced_until_the_limit_then_resume_rearms() {
    let r = Rules {
        max_prepare_failures: 2,
        ..group_rules()
    };
    let mut w = World::with(vec![]);
    w.group = Some(Ok(group_of(&w, 3)));
    let mut state = State::default();
    let mut now = 1_000;
    for n in 1..=3 {
        let (id, addr) = (format!("i-{n}"), format!("10.0.1.{n}"));
        w.instances.push(group_instance(&id, &addr, now));
        w.group = Some(Ok(group_of(&w, 3)));
        w.markers.failed.insert(ip(&addr), format!("exit {n}"));
        let plan = pass(&r, &mut w, &state, now);
        let replaced = plan
            .outcome
            .group_terminate()
            .iter()
            .any(|(i, d)| i == &id && !d);
        assert_eq!(
            replaced,
            n <= 2,
            "failure {n}: {:?}",
            plan.outcome.group_terminate()
        );
        // Each failure is journaled, and so is reaching the limit, once: at the second.
        let failed = (plan.outcome.events.iter()).find(|e| e.kind == "prepare_failed");
        let then = match n <= 2 {
            true => "the group replaces it",
            false => "held for a person: replacing failed workers has stopped (`dtctl resume` re-arms it)",
        };
        assert!(
            failed.is_some_and(|e| e.instance.as_deref() == Some(id.as_str())
                && e.message
                    .contains(&format!("prepare-data failed (exit {n})"))
                && e.message.ends_with(then)),
            "failure {n}: {:?}",
            plan.outcome.events
        );
        if n <= 2 {
            let queued = plan
                .outcome
                .events
                .iter()
                .find(|e| e.kind == "removal_queued");
            assert_eq!(queued.and_then(|e| e.cause), Some(Cause::PrepareFailed));
        }
        let stopped = (plan.outcome.events.iter()).filter(|e| e.kind == "replacing_stopped");
        let stopped: Vec<&Event> = stopped.collect();
        assert_eq!(stopped.len(), (n == 2) as usize, "failure {n}: {stopped:?}");
        if n == 2 {
            assert_eq!(
                stopped[0].message,
                "replacing failed group workers stopped after 2 prepare-data failures in a row \
                 (the last: 10.0.1.2: prepare-data failed (exit 2)); `dtctl resume` re-arms it"
            );
            assert_eq!(
                kinds(&plan)[..2],
                ["prepare_failed", "replacing_stopped"],
                "the failure, then what it stopped"
            );
        }
        state = plan.state;
        now += 1_000;
    }
    assert_eq!(state.prepare_failures, 2);
    let waiting = pass(&r, &mut w, &reloaded(&state), now);
    assert!(waiting_for(&waiting, &w, "i-3").contains("dtctl resume"));
    assert!(
        waiting.outcome.events.is_empty(),
        "{:?}",
        waiting.outcome.events
    );
    w.resume = Some(now);
    let resumed = pass(&r, &mut w, &state, now + 1_000);
    assert!(resumed
        .outcome
        .group_terminate()
        .contains(&("i-3".to_string(), false)));
    assert!(kinds(&resumed).contains(&"resumed"));
    assert_eq!(
        count_kind(&resumed, "prepare_failed"),
        0,
        "i-3's failure was journaled when it was held"
    );
    assert_eq!(resumed.state.prepare_failures, 1);
}

#[test]
fn an_unreadable_group_holds_every_removal() {
    let (r, mut w, state) = two_group_members();
    w.delete_elastic_tag("i-1");
    w.group = Some(Err("throttled".into()));
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.holds.iter().any(|h| h.contains("throttled")));
}

#[test]
fn a_drained_group_worker_is_replaced_by_its_group() {
    let (r, mut w, state) = two_group_members();
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    w.notices.clear();
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(
        acked.outcome.group_terminate(),
        [("i-1".to_string(), false)]
    );
    assert!(acked.outcome.terminate().is_empty());
}

#[test]
fn an_interruption_on_a_partial_view_is_remembered_until_the_view_is_complete() {
    let (r, mut w, state) = two_members();
    w.vanish("i-2");
    w.notices = vec![spot("e-1", "i-2")];
    let snap = Snapshot {
        markers: Err("EFS unreachable".into()),
        ..w.snap()
    };
    let plan = decide(&r, &snap, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    let kept = plan
        .state
        .removals
        .iter()
        .any(|x| x.id == "i-2" && x.is_interrupted());
    assert!(kept, "{:?}", plan.state.removals);
    w.notices.clear();
    let complete = pass(&r, &mut w, &plan.state, 4_000);
    assert!(complete.state.removals.is_empty());
}

const FS: &str = "fs-0123abcd";
const NO_TARGET_IN_1C: &str =
    "an EFS mount target in us-east-1c: fs-0123abcd has none there, so it cannot mount the shared directory";

fn mount_targets_in(zones: &[&str]) -> Option<MountTargets> {
    Some(MountTargets {
        fs_id: FS.into(),
        zones: zones.iter().map(|z| z.to_string()).collect(),
    })
}

/// i-1 (10.0.1.1) in us-east-1a, which has a mount target; i-2 (10.0.1.2) in us-east-1c, which
/// has none. Neither has a marker yet.
fn split_across_zones() -> World {
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
    ]);
    w.inst("i-2").az = "us-east-1c".into();
    w.mount_targets = mount_targets_in(&["us-east-1a"]);
    w
}

#[test]
fn a_worker_in_a_zone_without_a_mount_target_waits_for_one_and_is_journaled_once() {
    let r = rules();
    let mut w = split_across_zones();
    let first = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(waiting_for(&first, &w, "i-2"), NO_TARGET_IN_1C);
    assert_eq!(
        waiting_for(&first, &w, "i-1"),
        "prepare-data marker prepare_data_success_10.0.1.1"
    );
    assert_eq!(worker(&first, &w, "i-2").label(), "PREPARING");
    let journaled: Vec<&Event> = (first.outcome.events.iter())
        .filter(|e| e.kind == "no_mount_target")
        .collect();
    assert_eq!(journaled.len(), 1, "{:?}", first.outcome.events);
    let e = journaled[0];
    assert_eq!(e.instance.as_deref(), Some("i-2"));
    assert_eq!(e.ip, Some(ip("10.0.1.2")));
    assert_eq!(e.az.as_deref(), Some("us-east-1c"));
    assert_eq!(e.fs_id.as_deref(), Some(FS));
    assert!(e.message.contains("us-east-1c") && e.message.contains(FS));

    // Later passes, and a restarted dtd, say the same without journaling it again.
    let second = pass(&r, &mut w, &first.state, 2_000);
    let restarted = pass(&r, &mut w, &reloaded(&second.state), 3_000);
    for plan in [&second, &restarted] {
        assert_eq!(waiting_for(plan, &w, "i-2"), NO_TARGET_IN_1C);
        assert_eq!(
            count_kind(plan, "no_mount_target"),
            0,
            "{:?}",
            plan.outcome.events
        );
    }
}

#[test]
fn the_check_only_explains_a_wait_it_never_removes_terminates_or_holds() {
    let r = rules();
    let mut w = split_across_zones();
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert!(plan.outcome.terminate().is_empty() && plan.state.removals.is_empty());
    assert!(plan.outcome.holds.is_empty(), "{:?}", plan.outcome.holds);
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), ["i-1", "i-2"]);
    // A marker that does appear (the agent found another way) still joins.
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
}

#[test]
fn once_the_zone_has_a_mount_target_the_marker_wait_comes_back() {
    let r = rules();
    let mut w = split_across_zones();
    let first = pass(&r, &mut w, &State::default(), 1_000);
    w.mount_targets = mount_targets_in(&["us-east-1a", "us-east-1c"]);
    let covered = pass(&r, &mut w, &first.state, 2_000);
    assert_eq!(
        waiting_for(&covered, &w, "i-2"),
        "prepare-data marker prepare_data_success_10.0.1.2"
    );
    assert_eq!(count_kind(&covered, "no_mount_target"), 0);
    w.ready("10.0.1.2");
    let joined = pass(&r, &mut w, &covered.state, 3_000);
    assert_eq!(hosts(&joined), with_base(&["10.0.1.2"]));
}

#[test]
fn unknown_zones_claim_nothing() {
    let r = rules();
    let mut w = split_across_zones();
    // Not configured, or the last read failed: the usual wait, nothing journaled.
    w.mount_targets = None;
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        waiting_for(&plan, &w, "i-2"),
        "prepare-data marker prepare_data_success_10.0.1.2"
    );
    assert_eq!(count_kind(&plan, "no_mount_target"), 0);
    assert!(remembered(&plan.state, |w| w.no_mount_target).is_empty());
    // An instance whose zone EC2 did not give is not judged either.
    w.mount_targets = mount_targets_in(&["us-east-1a"]);
    w.inst("i-2").az = String::new();
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(count_kind(&plan, "no_mount_target"), 0);
}

#[test]
fn an_instance_that_is_gone_is_forgotten() {
    let r = rules();
    let mut w = split_across_zones();
    let first = pass(&r, &mut w, &State::default(), 1_000);
    assert!(remembered(&first.state, |w| w.no_mount_target).contains(&"i-2"));
    w.vanish("i-2");
    let after = pass(&r, &mut w, &first.state, 2_000);
    assert!(remembered(&after.state, |w| w.no_mount_target).is_empty());
}

#[test]
fn a_group_worker_held_at_launch_in_a_zone_without_a_mount_target_says_so() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    w.inst("i-1").az = "us-east-1c".into();
    w.mount_targets = mount_targets_in(&["us-east-1a"]);
    let plan = pass(&r, &mut w, &State::default(), HELD_AT);
    let why = waiting_for(&plan, &w, "i-1");
    assert!(
        why.starts_with(NO_TARGET_IN_1C) && why.contains("abandoned if none within 1h"),
        "{why}"
    );
    assert_eq!(count_kind(&plan, "no_mount_target"), 1);
    assert!(
        plan.outcome.complete_hooks().is_empty(),
        "held, not abandoned early"
    );
}
