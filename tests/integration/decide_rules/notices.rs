//! Notices: interruptions, rebalance recommendations, Capacity Blocks, scheduled changes.

use crate::support::world::*;

#[test]
fn an_interruption_takes_the_worker_out_at_once_and_never_terminates_it() {
    let (r, mut w, state) = two_members();
    w.notices = vec![Notice {
        deadline: Some(123_000),
        ..spot("e-1", "i-1")
    }];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(plan.state.generation, 2);
    let n = plan.outcome.notify.clone().expect("the job is notified");
    assert_eq!(n.removed, [ip("10.0.1.1")]);
    // The job hears why and by when, for the worker that left.
    let told = JobNotice {
        ip: ip("10.0.1.1"),
        kind: dt::protocol::notices::Reason::Interruption,
        deadline: Some(123_000),
    };
    assert_eq!(n.notices, [told]);
    assert_eq!(tagged(&plan, WorkerStatus::Interrupted), ["i-1"]);
    assert!(kinds(&plan).contains(&"interrupted"), "{:?}", kinds(&plan));
    assert!(
        plan.outcome.terminate().is_empty(),
        "AWS reclaims it, not dtd"
    );
    assert_eq!(plan.state.interruptions, 1);

    // No acknowledgement, no timeout: it stays INTERRUPTED, untouched, until AWS takes it.
    w.notices.clear();
    let later = pass(&r, &mut w, &plan.state, 3_000 + 2 * TIMEOUT);
    assert!(later.outcome.terminate().is_empty());
    assert_eq!(worker(&later, &w, "i-1").label(), "INTERRUPTED");
    w.vanish("i-1");
    let gone = pass(&r, &mut w, &later.state, 3_000 + 3 * TIMEOUT);
    assert!(gone.state.removals.is_empty());
    assert_eq!(gone.state.interruptions, 1);
}

#[test]
fn a_duplicate_notice_is_heeded_once() {
    let (r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-1"), spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    let interrupted = kinds(&plan).iter().filter(|k| **k == "interrupted").count();
    assert_eq!(interrupted, 1);
    // Redelivered after a restart: the state remembers the event id.
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
    assert_eq!(again.state.generation, 2);
    assert_eq!(again.state.interruptions, 1);
}

#[test]
fn the_agent_and_the_queue_reporting_one_interruption_count_once() {
    let (r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    let mut agent = spot("agent:i-1:imds:spot-interruption:t", "i-1");
    agent.source = "agent";
    w.notices = vec![agent];
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
    assert_eq!(again.state.generation, 2, "no second generation");
    assert_eq!(again.state.interruptions, 1);
    assert!(again.outcome.terminate().is_empty());
}

#[test]
fn a_notice_for_a_foreign_or_unknown_instance_changes_nothing() {
    let (r, mut w, state) = two_members();
    let mut foreign = instance("i-9", "10.0.9.9", 300);
    foreign.tags.remove("NodeType");
    w.instances.push(foreign);
    w.notices = vec![
        spot("e-1", "i-9"),
        spot("e-2", "i-404"),
        notice(
            "e-3",
            NoticeKind::Interruption,
            NoticeTarget::Ip(ip("10.0.9.9")),
        ),
    ];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(plan.state.noticed.is_empty());
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn an_interruption_ends_the_wait_of_a_worker_already_leaving() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let queued = pass(&r, &mut w, &state, 3_000);
    assert_eq!(tagged(&queued, WorkerStatus::RemovalQueued), ["i-1"]);
    w.notices = vec![spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &queued.state, 4_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(tagged(&plan, WorkerStatus::Interrupted), ["i-1"]);
    w.notices.clear();
    let after_timeout = pass(&r, &mut w, &plan.state, 4_000 + TIMEOUT);
    assert!(
        after_timeout.outcome.terminate().is_empty(),
        "never terminated by dtd"
    );
}

#[test]
fn an_interruption_is_heeded_even_when_ec2_cannot_be_read() {
    let (r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-2")];
    let snap = Snapshot {
        instances: Err("timeout".into()),
        ..w.snap()
    };
    let plan = decide(&r, &snap, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn an_interrupted_worker_that_never_joined_never_joins() {
    let (r, mut w, state) = two_members();
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.notices = vec![notice(
        "m-1",
        NoticeKind::Interruption,
        NoticeTarget::Ip(ip("10.0.1.3")),
    )];
    let plan = pass(&r, &mut w, &state, 3_000);
    w.ready("10.0.1.3");
    w.notices.clear();
    let later = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(hosts(&later), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(worker(&later, &w, "i-3").label(), "INTERRUPTED");
}

#[test]
fn a_base_host_interruption_is_journaled_but_it_stays() {
    let r = rules();
    let mut w = World::with(vec![instance("i-b", BASE[0], 50)]);
    w.notices = vec![spot("e-1", "i-b")];
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(kinds(&plan), ["notice_ignored"]);
}

#[test]
fn a_rebalance_recommendation_drains_gracefully() {
    let (r, mut w, state) = two_members();
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert!(plan.outcome.terminate().is_empty(), "waits for the job");
    assert!(waiting_for(&plan, &w, "i-1").contains("acknowledge generation 2"));
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::Rebalance));
    w.notices.clear();
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(acked.outcome.terminate(), ["i-1"]);
    assert_eq!(
        acked.state.interruptions, 0,
        "a drain is not an interruption"
    );
    // The elastic tag is still there: a drain is not cancelled by it.
    assert!(w.inst("i-1").tags.get(ELASTIC).is_some());
}

#[test]
fn a_rebalance_recommendation_in_report_mode_only_journals() {
    let (mut r, mut w, state) = two_members();
    r.rebalance = dt::config::Rebalance::Report;
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["rebalance_recommendation"]);
}

#[test]
fn a_rebalance_recommendation_holds_at_min() {
    let (mut r, mut w, state) = two_members();
    r.min = 4;
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["removal_held"]);
}

/// Found by decide_props: a rebalance heard before an interruption in the same pass counted
/// the interrupted worker toward min and drained below it.
#[test]
fn a_rebalance_counts_toward_min_only_the_workers_an_interruption_leaves() {
    let (mut r, mut w, state) = two_members();
    r.min = 3;
    w.notices = vec![
        notice(
            "e-1",
            NoticeKind::Rebalance,
            NoticeTarget::Instance("i-1".into()),
        ),
        notice(
            "e-2",
            NoticeKind::Interruption,
            NoticeTarget::Instance("i-2".into()),
        ),
    ];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(kinds(&plan).contains(&"removal_held"), "{:?}", kinds(&plan));
}

/// The same with a failed health check: the unhealthy worker leaves whatever min says, and
/// the rebalance drain then waits.
#[test]
fn a_rebalance_counts_toward_min_only_the_workers_a_failed_check_leaves() {
    let (mut r, mut w, state) = two_members();
    r.min = 3;
    w.notices = vec![notice(
        "e-1",
        NoticeKind::Rebalance,
        NoticeTarget::Instance("i-1".into()),
    )];
    w.health("i-2", false, false, "Xid 79");
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(kinds(&plan).contains(&"removal_held"), "{:?}", kinds(&plan));
}

#[test]
fn a_capacity_block_ending_drains_its_workers_below_min_and_before_the_end() {
    let (mut r, mut w, state) = two_members();
    r.min = 4;
    w.inst("i-1").capacity_reservation = Some("cr-1".into());
    w.inst("i-2").capacity_reservation = Some("cr-1".into());
    let mut n = notice(
        "e-1",
        NoticeKind::CapacityBlockExpiring,
        NoticeTarget::CapacityReservation("cr-1".into()),
    );
    n.deadline = Some(3_000 + 60_000);
    w.notices = vec![n];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert!(plan.state.removals.iter().all(|x| x.deadline == 63_000));
    w.notices.clear();
    let deadline = pass(&r, &mut w, &plan.state, 63_000);
    let mut terminated = deadline.outcome.terminate().clone();
    terminated.sort();
    assert_eq!(terminated, ["i-1", "i-2"]);
    // Said as what it was: the block's end, not a job that never acknowledges.
    let timed_out = deadline
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "ack_timeout");
    let said = &timed_out.expect("journaled").message;
    assert!(
        said.contains("before its Capacity Block's end (1970-01-01T00:01:03Z)"),
        "{said}"
    );
}

#[test]
fn a_scheduled_change_weeks_away_drains_only_its_lead_before_it_starts() {
    let (r, mut w, state) = two_members();
    let starts = 3_000 + 14 * 24 * 3_600_000;
    let mut n = notice(
        "health:arn:i-1",
        NoticeKind::ScheduledChange,
        NoticeTarget::Instance("i-1".into()),
    );
    n.deadline = Some(starts);
    w.notices = vec![n];
    // Two weeks ahead: the GPUs keep training; the notice is kept and the hold says until when.
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(plan.outcome.deferred_notices, ["health:arn:i-1"]);
    assert!(
        plan.outcome
            .holds
            .iter()
            .any(|h| h.contains("i-1: drains from")),
        "{:?}",
        plan.outcome.holds
    );
    assert!(kinds(&plan).is_empty(), "{:?}", kinds(&plan));
    // An hour (the default lead) before it starts, it drains, terminated by the start at the latest.
    let from = starts - r.scheduled_change_lead_ms;
    let plan = pass(&r, &mut w, &plan.state, from);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(plan.outcome.deferred_notices.is_empty());
    assert_eq!(kinds(&plan), ["removal_queued", "generation"]);
    assert!(plan.state.removals.iter().all(|x| x.deadline <= starts));
}

/// (replaced instance, why, token) of each launch.
fn replacing(plan: &Plan) -> Vec<(String, Replaced, String)> {
    (plan.outcome.launches().into_iter())
        .map(|((replaces, because), token, _)| (replaces, because, token))
        .collect()
}

#[test]
fn with_replace_interrupted_a_warned_worker_is_replaced_while_it_is_still_there() {
    let (mut r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-1")];
    let off = pass(&r, &mut w, &state, 3_000);
    assert!(replacing(&off).is_empty(), "off by default");

    r.replace_interrupted = true;
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.2"]),
        "out of the job at once"
    );
    let owed = (
        "i-1".to_string(),
        Replaced::Interrupted,
        "dt-replace-i-1".to_string(),
    );
    assert_eq!(replacing(&plan), std::slice::from_ref(&owed));
    assert!(
        plan.outcome.terminate().is_empty(),
        "AWS reclaims it, not dtd"
    );
    // Redelivered, and then failing its health check too: still one launch, one token.
    r.replace_unhealthy = true;
    w.health("i-1", false, true, "0 of 8 GPUs visible");
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(again.state.replacements.len(), 1);
    assert_eq!(replacing(&again), [owed]);
}

#[test]
fn with_replace_interrupted_a_rebalance_drain_and_a_capacity_blocks_end_are_replaced() {
    let (mut r, mut w, state) = two_members();
    r.replace_interrupted = true;
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    let owed = (
        "i-1".to_string(),
        Replaced::Rebalance,
        "dt-replace-i-1".to_string(),
    );
    assert_eq!(replacing(&plan), [owed]);

    w.inst("i-2").capacity_reservation = Some("cr-1".into());
    let mut n = notice(
        "e-2",
        NoticeKind::CapacityBlockExpiring,
        NoticeTarget::CapacityReservation("cr-1".into()),
    );
    n.deadline = Some(64_000);
    w.notices = vec![n];
    let ended = pass(&r, &mut w, &plan.state, 4_000);
    let why: Vec<_> = ended
        .state
        .replacements
        .iter()
        .map(|x| (x.replaces.as_str(), x.because))
        .collect();
    assert_eq!(
        why,
        [
            ("i-1", Replaced::Rebalance),
            ("i-2", Replaced::CapacityBlock)
        ]
    );
}

#[test]
fn a_rebalance_that_drains_no_one_replaces_no_one() {
    let (mut r, mut w, state) = two_members();
    r.replace_interrupted = true;
    r.min = 4;
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target.clone())];
    let held = pass(&r, &mut w, &state, 3_000);
    assert_eq!(kinds(&held), ["removal_held"]);
    assert!(replacing(&held).is_empty(), "kept at min: nothing is lost");
    r.min = 0;
    r.rebalance = dt::config::Rebalance::Report;
    w.notices = vec![notice("e-2", NoticeKind::Rebalance, target)];
    let reported = pass(&r, &mut w, &state, 3_000);
    assert!(replacing(&reported).is_empty(), "reported only");
}

fn detaching(plan: &Plan) -> Vec<(String, Replaced, String)> {
    (plan.outcome.detaches().into_iter())
        .map(|((id, because), token)| (id, because, token))
        .collect()
}

#[test]
fn a_group_worker_warned_by_aws_is_detached_for_its_groups_replacement() {
    let (mut r, mut w, state) = two_group_members();
    w.notices = vec![spot("e-1", "i-1")];
    let off = pass(&r, &mut w, &state, 3_000);
    assert!(detaching(&off).is_empty(), "off by default");

    r.replace_interrupted = true;
    r.launch_template_id = Some("lt-1".into());
    let plan = pass(&r, &mut w, &state, 3_000);
    assert!(kinds(&plan).contains(&"interrupted"), "{:?}", kinds(&plan));
    assert!(
        replacing(&plan).is_empty(),
        "the group's launch, not the template's"
    );
    let owed = (
        "i-1".to_string(),
        Replaced::Interrupted,
        "dt-replace-i-1".to_string(),
    );
    assert_eq!(detaching(&plan), std::slice::from_ref(&owed));
    assert_eq!(plan.state.replacements[0].group.as_deref(), Some("grp"));
    // Refused (sent again once its retry time comes), then detached: once the group no longer
    // lists it, nothing is owed, whatever act reported.
    let mut refused = plan.state.clone();
    refused.replacements[0].retry_at = 60_000;
    assert!(detaching(&pass(&r, &mut w, &refused, 4_000)).is_empty());
    assert_eq!(detaching(&pass(&r, &mut w, &refused, 61_000)), [owed]);
    if let Some(Ok(g)) = w.group.as_mut() {
        g.instances.remove("i-1");
    }
    let detached = pass(&r, &mut w, &refused, 62_000);
    assert!(detaching(&detached).is_empty());
    assert!(detached.state.replacements.is_empty());
}

#[test]
fn a_group_worker_warned_by_its_agent_alone_is_not_detached() {
    let (mut r, mut w, state) = two_group_members();
    r.replace_interrupted = true;
    let mut agent = spot("e-1", "i-1");
    agent.source = "agent";
    w.instances[0].market = "spot".into();
    w.notices = vec![agent];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert!(kinds(&plan).contains(&"interrupted"), "{:?}", kinds(&plan));
    assert!(detaching(&plan).is_empty(), "its word may be false");
    assert!(plan.state.replacements.is_empty());
}

#[test]
fn a_second_warning_for_a_worker_already_leaving_launches_nothing_more() {
    let (mut r, mut w, state) = two_members();
    r.replace_interrupted = true;
    w.notices = vec![spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(replacing(&plan).len(), 1);
    // The launch succeeded: nothing is owed any more.
    let mut launched = plan.state.clone();
    launched.replacements.clear();
    w.notices = vec![spot("e-2", "i-1")];
    let again = pass(&r, &mut w, &launched, 4_000);
    assert!(
        replacing(&again).is_empty(),
        "{:?}",
        again.state.replacements
    );

    // A worker a person is removing (its elastic tag deleted) is not replaced when warned.
    w.notices.clear();
    w.delete_elastic_tag("i-2");
    let removing = pass(&r, &mut w, &state, 5_000);
    assert_eq!(tagged(&removing, WorkerStatus::RemovalQueued), ["i-2"]);
    w.notices = vec![spot("e-3", "i-2")];
    let warned = pass(&r, &mut w, &removing.state, 6_000);
    assert!(replacing(&warned).is_empty());
}
