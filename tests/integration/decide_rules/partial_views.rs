//! Partial views: a source that could not be read holds what it would decide.

use crate::support::world::*;

#[test]
fn ec2_failure_holds_everything() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let queued = pass(&r, &mut w, &state, 10_000).state;
    w.acks.generation = Some(2);
    let mut snap = w.snap();
    snap.instances = Err("DescribeInstances: throttled".into());
    // Past the deadline too: still nothing is terminated on a partial view.
    let plan = decide(&r, &snap, &queued, 10_000 + 2 * TIMEOUT);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]), "host file changed");
    assert!(plan.outcome.terminate().is_empty());
    assert!(
        plan.outcome.holds[0].contains("EC2 instances"),
        "{:?}",
        plan.outcome.holds
    );
    assert_eq!(plan.state.generation, 2);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    // The member it cannot see is still shown, with what it waits for.
    assert_eq!(waiting_for(&plan, &w, "i-2"), "a complete EC2 view");

    // EC2 answers again: the acknowledged removal goes ahead.
    let plan = pass(&r, &mut w, &plan.state, 10_000 + 2 * TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(plan.outcome.holds.is_empty());
}

#[test]
fn ec2_failure_does_not_drop_members_it_cannot_see() {
    let (r, w, state) = two_members();
    let snap = Snapshot {
        instances: Err("timeout".into()),
        ..w.snap()
    };
    let plan = decide(&r, &snap, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.notify.is_none());
    assert_eq!(plan.state.members, state.members);
}

#[test]
fn marker_failure_blocks_joins_and_removals() {
    let (r, mut w, state) = two_members();
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    w.delete_elastic_tag("i-1");
    let mut snap = w.snap();
    snap.markers = Err("EFS: stale file handle".into());
    let plan = decide(&r, &snap, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(plan.state.generation, 1);
    assert!(plan.outcome.holds[0].contains("prepare-data markers"));
    assert_eq!(
        waiting_for(&plan, &w, "i-1"),
        "a complete view to remove it"
    );

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert_eq!(plan.state.generation, 2);
}

#[test]
fn ack_failure_blocks_removals_and_terminations() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let queued = pass(&r, &mut w, &state, 10_000).state;
    w.delete_elastic_tag("i-2");
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    let mut snap = w.snap();
    snap.acks = Err("ack: permission denied".into());
    let plan = decide(&r, &snap, &queued, 10_000 + 2 * TIMEOUT);
    assert!(
        plan.outcome.terminate().is_empty(),
        "i-1 terminated past its deadline"
    );
    assert!(plan.outcome.holds[0].contains("acknowledgements"));
    // i-2 stays; joins do not need the acks, so i-3 joins.
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(plan.state.removals.len(), 1);
    assert_eq!(waiting_for(&plan, &w, "i-1"), "a complete view");

    let plan = pass(&r, &mut w, &plan.state, 10_000 + 2 * TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.3"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-2"]);
}
