//! When decide next needs a pass without news (`Plan::next_pass_at`): the earliest deadline its
//! state holds, never one already past.

use crate::support::world::*;

#[test]
fn a_removal_awaiting_its_ack_asks_for_a_pass_at_its_ack_timeout() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.removals[0].deadline, 10_000 + TIMEOUT);
    assert_eq!(plan.next_pass_at, Some(10_000 + TIMEOUT));

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(plan.next_pass_at, Some(10_000 + TIMEOUT), "until it comes");

    let plan = pass(&r, &mut w, &plan.state, 10_000 + TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(plan.next_pass_at, None, "nothing left to wait for");
}

#[test]
fn a_ready_worker_in_a_join_batch_asks_for_a_pass_when_the_batch_ends() {
    let r = Rules {
        join_batch_ms: 30_000,
        ..rules()
    };
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(plan.next_pass_at, None, "preparing: no deadline of dtd's");

    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &plan.state, 5_000);
    assert_eq!(hosts(&plan), with_base(&[]), "waits for the batch");
    assert_eq!(plan.next_pass_at, Some(35_000));

    let plan = pass(&r, &mut w, &plan.state, 35_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert_eq!(plan.next_pass_at, None);
}

#[test]
fn a_refused_replacement_asks_for_a_pass_at_its_retry() {
    let (r, mut w, mut state) = two_members();
    state.replacements.push(Replacement {
        replaces: "i-9".into(),
        group: None,
        because: Replaced::Unhealthy,
        token: "t".into(),
        queued_at: 1_000,
        retry_at: 61_000,
        last_error: Some("InsufficientInstanceCapacity".into()),
    });
    let plan = pass(&r, &mut w, &state, 2_000);
    assert_eq!(plan.next_pass_at, Some(61_000));
}

#[test]
fn a_retry_already_due_does_not_hide_a_later_one() {
    let (r, mut w, mut state) = two_members();
    for (replaces, retry_at) in [("i-8", 1_500), ("i-9", 61_000)] {
        state.replacements.push(Replacement {
            replaces: replaces.into(),
            group: None,
            because: Replaced::Unhealthy,
            token: replaces.into(),
            queued_at: 1_000,
            retry_at,
            last_error: Some("InsufficientInstanceCapacity".into()),
        });
    }
    let plan = pass(&r, &mut w, &state, 2_000);
    assert_eq!(plan.next_pass_at, Some(61_000));
}
