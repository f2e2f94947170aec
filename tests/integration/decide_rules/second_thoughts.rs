//! Second thoughts and notifications: a tag that comes back, a notification not delivered, acks that lie.

use crate::support::world::*;

#[test]
fn removal_is_cancelled_when_the_elastic_tag_returns() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));

    w.inst("i-1").tags.insert(ELASTIC.into(), "yes".into());
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(plan.state.removals.is_empty());
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(kinds(&plan), ["removal_cancelled", "joined", "generation"]);
    // Its marker is still there, so it is back in training, after the others.
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.1"]));
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-1"]);
}

#[test]
fn requested_termination_is_not_cancelled_by_the_elastic_tag() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    let plan = pass(&r, &mut w, &plan.state, 10_000 + TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);

    w.inst("i-1").tags.insert(ELASTIC.into(), "yes".into());
    let plan = pass(&r, &mut w, &plan.state, 20_000 + TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
}

#[test]
fn undelivered_notification_survives_and_merges() {
    let r = rules();
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
    ]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    let first = Notification {
        generation: 1,
        added: vec![ip("10.0.1.1")],
        removed: vec![],
        notices: vec![],
    };
    assert_eq!(plan.outcome.notify.as_ref(), Some(&first));

    // Not delivered (the job's pidfile is missing): the same notification is offered again.
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(plan.outcome.notify.as_ref(), Some(&first));

    // Another join before delivery: one notification carrying both.
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!(n.generation, 2);
    assert_eq!(n.added, [ip("10.0.1.1"), ip("10.0.1.2")]);

    // 10.0.1.1 leaves again before the job heard it came: the two cancel out.
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!(n.generation, 3);
    assert_eq!(n.added, [ip("10.0.1.2")]);
    assert!(n.removed.is_empty(), "{n:?}");

    // Delivered: the daemon clears it, and nothing is offered any more.
    let mut state = plan.state;
    state.pending_notification = None;
    let plan = pass(&r, &mut w, &state, 5_000);
    assert!(plan.outcome.notify.is_none());
}

#[test]
fn same_inputs_give_the_same_plan() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.instances.push(instance("i-4", "10.0.1.4", 300));
    w.ready("10.0.1.3");
    w.markers.failed.insert(ip("10.0.1.4"), "exit 1".into());
    w.instances.reverse();
    let snap = w.snap();
    let a = decide(&r, &snap, &state, 10_000);
    let b = decide(&r, &snap, &state, 10_000);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // Observation order does not matter either: EC2 pages come in any order. Only the rows'
    // positions into the snapshot differ, so the rows are compared as the status table shows them.
    w.instances.reverse();
    let snap_c = w.snap();
    let mut c = decide(&r, &snap_c, &state, 10_000);
    assert_eq!(
        worker_views(&a.outcome.rows, &snap, &a.state),
        worker_views(&c.outcome.rows, &snap_c, &c.state)
    );
    let mut a = a;
    a.outcome.rows.clear();
    c.outcome.rows.clear();
    assert_eq!(format!("{a:?}"), format!("{c:?}"));
}

#[test]
fn an_ack_file_ahead_of_the_daemon_does_not_acknowledge_an_unseen_removal() {
    let (r, mut w, state) = two_members();
    // A worker wrote it, or someone typed `dtctl ack 7`: dtd never wrote generations 2..7.
    w.acks.generation = Some(7);
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "terminated before the job saw it leave"
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(
        plan.state.generation, 2,
        "numbered from what dtd wrote, not from what the ack file claims"
    );
    assert_eq!(plan.outcome.notify.as_ref().unwrap().generation, 2);
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert_eq!(
        kinds(&plan),
        ["ack_refused", "removal_queued", "generation"]
    );
    assert!(
        plan.outcome.refused[0].contains("holds generation 7, but dtd has written only up to 1"),
        "{:?}",
        plan.outcome.refused
    );

    // Still above what dtd wrote: refused, and journaled only once.
    w.acks.generation = Some(8);
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(kinds(&plan), ["ack_refused"]);
    let plan = pass(&r, &mut w, &plan.state, 21_000);
    assert!(kinds(&plan).is_empty(), "{:?}", kinds(&plan));
    assert_eq!(plan.outcome.refused.len(), 1, "shown on every pass");

    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 22_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(plan.outcome.refused.is_empty());
}

#[test]
fn an_ack_of_the_largest_number_wraps_nothing() {
    let (r, mut w, state) = two_members();
    w.acks.generation = Some(u64::MAX);
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.generation, 2);
    let mut st = plan.state;
    for now in [20_000, 30_000, 10_000 + TIMEOUT - 1] {
        let plan = pass(&r, &mut w, &st, now);
        assert!(
            plan.outcome.terminate().is_empty(),
            "acknowledged by a wrapped number"
        );
        st = plan.state;
    }
    // A state file at the limit (edited by hand) holds the membership rather than wrap to 0.
    let mut full = st.clone();
    full.generation = u64::MAX;
    w.acks.generation = Some(u64::MAX);
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    let plan = pass(&r, &mut w, &full, 40_000);
    assert_eq!(plan.state.generation, u64::MAX);
    assert!(
        plan.outcome
            .holds
            .iter()
            .any(|h| h.contains("at its limit")),
        "{:?}",
        plan.outcome.holds
    );
}

#[test]
fn a_worker_made_a_base_host_while_leaving_is_not_terminated() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);

    // The operator keeps 10.0.1.1 by listing it in base_hosts and restarting dtd; then the job
    // acknowledges the generation that dropped it, and the ack timeout passes too.
    let mut kept = r.clone();
    kept.base_hosts.push(ip("10.0.1.1"));
    w.acks.generation = Some(2);
    let plan = pass(&kept, &mut w, &plan.state, 10_000 + 2 * TIMEOUT);
    assert!(
        plan.outcome.terminate().is_empty(),
        "terminated a base host"
    );
    assert!(plan.state.removals.is_empty(), "{:?}", plan.state.removals);
    assert_eq!(
        hosts(&plan),
        ["10.0.0.5", "10.0.0.4", "10.0.1.1", "10.0.1.2"]
    );
}

#[test]
fn a_member_made_a_base_host_is_listed_once() {
    let (mut r, mut w, state) = two_members();
    r.base_hosts.push(ip("10.0.1.1"));
    let plan = pass(&r, &mut w, &state, 10_000);
    let mut expected = with_base(&[]);
    expected.push("10.0.1.1".into());
    expected.push("10.0.1.2".into());
    assert_eq!(hosts(&plan), expected);
}

#[test]
fn with_the_state_lost_an_added_worker_leaving_waits_for_a_new_acknowledgement() {
    let (r, mut w, _) = two_members();
    w.delete_elastic_tag("i-1");
    w.acks.generation = Some(5);
    // A new master with an empty state directory: i-1 still says ADDED and may be training.
    // dtd numbers on from the `generation` file it wrote (`store::load_state_resuming`).
    let lost = State {
        generation: 5,
        ..State::default()
    };
    let plan = pass(&r, &mut w, &lost, 10_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "{:?}",
        plan.outcome.terminate()
    );
    assert_eq!(worker(&plan, &w, "i-1").label(), "REMOVAL_QUEUED");
    w.acks.generation = Some(6);
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert_eq!(plan.outcome.terminate(), vec!["i-1".to_string()]);
}

#[test]
fn a_held_removal_is_journaled_again_after_the_tag_came_back() {
    let r = Rules { min: 4, ..rules() };
    let (_, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(kinds(&plan), vec!["removal_held"]);
    w.inst("i-1").tags.insert(ELASTIC.into(), "true".into());
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(remembered(&plan.state, |w| w.held.is_some()).is_empty());
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(kinds(&plan), vec!["removal_held"]);
    w.vanish("i-1");
    let plan = pass(&r, &mut w, &plan.state, 13_000);
    assert!(
        remembered(&plan.state, |w| w.held.is_some()).is_empty(),
        "forgotten with the instance"
    );
}
