//! The rules of `decide::trust`: what a worker writes is believed only as far as EC2's view or
//! dtd's own state confirms it. Each test is a lie a worker's user code can tell with a
//! well-formed file, and what a user sees when dtd refuses it.

use dt::model::*;

use crate::support::world::{
    hosts, instance, ip, kinds, pass, rules, tagged, two_members, with_base, World,
};

const ID1: &str = "i-0000000000000000a";
const ID2: &str = "i-0000000000000000b";
const ID3: &str = "i-0000000000000000c";

/// Two Spot workers in the job (10.0.1.1 and 10.0.1.2), acknowledged, with EC2-form ids.
fn two_spot_members() -> (dt::decide::Rules, World, State) {
    let r = rules();
    let spot = |id, addr, at| Instance {
        market: "spot".into(),
        ..instance(id, addr, at)
    };
    let mut w = World::with(vec![spot(ID1, "10.0.1.1", 100), spot(ID2, "10.0.1.2", 200)]);
    w.ready("10.0.1.1");
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    w.acks.generation = Some(1);
    let mut state = pass(&r, &mut w, &plan.state, 2_000).state;
    state.pending_notification = None;
    (r, w, state)
}

/// What `dtd agent` writes in `interruption_<ip>`, as observe reads it.
fn agent_notice(id: &str, kind: NoticeKind, instance: &str, at: &str) -> Notice {
    Notice {
        id: format!("agent:{instance}:{id}"),
        kind,
        target: NoticeTarget::Agent {
            instance: instance.into(),
            ip: ip(at),
        },
        deadline: None,
        source: "agent",
    }
}

#[test]
fn a_notice_naming_another_workers_instance_is_refused_and_the_victim_trains() {
    let (r, mut w, state) = two_spot_members();
    // The worker at 10.0.1.1 writes interruption_10.0.1.1 naming its neighbour's instance id
    // (readable from the neighbour's success marker).
    w.notices = vec![agent_notice(
        "imds:spot-interruption:t",
        NoticeKind::Interruption,
        ID2,
        "10.0.1.1",
    )];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["notice_refused"]);
    let e = &plan.outcome.events[0];
    assert_eq!(e.instance.as_deref(), Some(ID2));
    assert_eq!(
        e.message,
        format!(
            "interruption warning in interruption_10.0.1.1 names {ID2}, which EC2 lists at 10.0.1.2: refused"
        )
    );
    assert_eq!(plan.outcome.refused, std::slice::from_ref(&e.message));
    assert!(plan.state.noticed.is_empty(), "never heeded");
    // The marker stays on disk: shown every pass, journaled once.
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert!(kinds(&again).is_empty(), "{:?}", kinds(&again));
    assert_eq!(again.outcome.refused.len(), 1);
    assert_eq!(hosts(&again), with_base(&["10.0.1.1", "10.0.1.2"]));
    // Removed from disk: forgotten, and journaled again if it comes back.
    w.notices.clear();
    let gone = pass(&r, &mut w, &again.state, 5_000);
    assert!(gone.outcome.refused.is_empty());
    assert!(gone.state.refused.is_empty());
}

#[test]
fn a_notice_for_an_ip_ec2_gives_another_instance_is_refused() {
    let (r, mut w, state) = two_spot_members();
    // An instance id EC2 does not list, in a marker for an IP EC2 gives a worker.
    w.notices = vec![agent_notice("x", NoticeKind::Interruption, ID3, "10.0.1.2")];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(kinds(&plan), ["notice_refused"]);
    assert!(
        plan.outcome.refused[0].contains(&format!("names {ID3}, but EC2 lists {ID2} at 10.0.1.2")),
        "{:?}",
        plan.outcome.refused
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    // Not an instance id at all.
    w.notices = vec![agent_notice(
        "y",
        NoticeKind::Interruption,
        "i-1;rm",
        "10.0.1.2",
    )];
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(kinds(&plan), ["notice_refused"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn a_spot_warning_for_an_on_demand_instance_is_refused() {
    let (r, mut w, state) = two_members();
    let (id, at) = ("i-00000001", "10.0.1.1");
    w.inst("i-1").id = id.into();
    let mut state = state;
    state.members[0].id = id.into();
    w.notices = vec![agent_notice("s", NoticeKind::Interruption, id, at)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(kinds(&plan), ["notice_refused"]);
    assert!(
        plan.outcome.refused[0].contains("EC2 says i-00000001 is on-demand"),
        "{:?}",
        plan.outcome.refused
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    // Nor a group's termination of an instance in no worker group.
    w.notices = vec![agent_notice("g", NoticeKind::GroupTerminating, id, at)];
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(kinds(&plan), ["notice_refused"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn a_true_agent_notice_takes_its_own_worker_out_at_once() {
    let (r, mut w, state) = two_spot_members();
    w.notices = vec![Notice {
        deadline: Some(3_000 + 120_000),
        ..agent_notice("s", NoticeKind::Interruption, ID1, "10.0.1.1")
    }];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(kinds(&plan), ["interrupted", "generation"]);
    assert_eq!(tagged(&plan, WorkerStatus::Interrupted), [ID1]);
    // AWS takes it: forgotten like any interruption, nothing refused or released.
    w.notices.clear();
    w.vanish(ID1);
    let plan = pass(&r, &mut w, &plan.state, 200_000);
    assert!(plan.state.removals.is_empty());
    assert!(!kinds(&plan).contains(&"notice_unconfirmed"));
}

#[test]
fn an_interruption_ec2_never_carries_out_is_released_and_the_worker_joins_again() {
    let (r, mut w, state) = two_spot_members();
    // The worker lies about itself (or its agent is wrong): out at once, as a true one would be.
    w.notices = vec![Notice {
        deadline: Some(3_000 + 120_000),
        ..agent_notice("s", NoticeKind::Interruption, ID1, "10.0.1.1")
    }];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    w.apply_tags(&plan);
    // Two minutes after the notice's time, EC2 still runs it.
    let waiting = pass(&r, &mut w, &plan.state, 3_000 + 120_000 + 119_000);
    assert!(waiting.state.removals.iter().any(|r| r.id == ID1));
    let released = pass(&r, &mut w, &waiting.state, 3_000 + 240_000);
    assert_eq!(kinds(&released), ["notice_unconfirmed"]);
    assert!(released.state.removals.is_empty());
    assert!(released.outcome.terminate().is_empty(), "never terminated");
    w.apply_tags(&released);
    // Its marker is still there: it joins again, in a new generation.
    let back = pass(&r, &mut w, &released.state, 3_000 + 241_000);
    assert_eq!(hosts(&back), with_base(&["10.0.1.2", "10.0.1.1"]));
    // Its agent is not believed again for a day, whatever id it writes.
    w.notices = vec![agent_notice(
        "s2",
        NoticeKind::Interruption,
        ID1,
        "10.0.1.1",
    )];
    let again = pass(&r, &mut w, &back.state, 3_000 + 300_000);
    assert_eq!(kinds(&again), ["notice_refused"]);
    assert!(
        again.outcome.refused[0].contains("too soon after the last notice"),
        "{:?}",
        again.outcome.refused
    );
    assert_eq!(hosts(&again), with_base(&["10.0.1.2", "10.0.1.1"]));
}

#[test]
fn the_queue_confirms_an_agent_interruption() {
    let (r, mut w, state) = two_spot_members();
    w.notices = vec![agent_notice("s", NoticeKind::Interruption, ID1, "10.0.1.1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    w.notices = vec![crate::support::world::spot("e-1", ID1)];
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    // EC2 is slow to show it stopped: no release once AWS itself said so.
    w.notices.clear();
    let later = pass(&r, &mut w, &plan.state, 3_000 + 600_000);
    assert!(!kinds(&later).contains(&"notice_unconfirmed"));
    assert_eq!(
        tagged(&later, WorkerStatus::Interrupted),
        Vec::<String>::new()
    );
    assert!(later.state.removals.iter().any(|r| r.id == ID1));
    assert_eq!(hosts(&later), with_base(&["10.0.1.2"]));
}

#[test]
fn agent_notices_from_one_ip_are_heeded_at_most_once_an_hour() {
    let (r, mut w, state) = two_spot_members();
    w.notices = vec![agent_notice("a", NoticeKind::Interruption, ID1, "10.0.1.1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(plan.state.agent_notices[&ip("10.0.1.1")], 3_000 + 3_600_000);
    // The same interruption again under another id changes nothing and is not refused.
    w.notices = vec![agent_notice("b", NoticeKind::Interruption, ID1, "10.0.1.1")];
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert!(
        again.outcome.refused.is_empty(),
        "{:?}",
        again.outcome.refused
    );
    assert_eq!(hosts(&again), with_base(&["10.0.1.2"]));
}

#[test]
fn an_agent_rebalance_or_scheduled_change_is_reported_but_never_drains() {
    let (r, mut w, state) = two_spot_members();
    w.notices = vec![
        agent_notice("r", NoticeKind::Rebalance, ID1, "10.0.1.1"),
        Notice {
            deadline: Some(10_000),
            ..agent_notice("m", NoticeKind::ScheduledChange, ID2, "10.0.1.2")
        },
    ];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["notice", "notice"]);
    assert!(
        plan.outcome.refused[0].contains("reported only; a drain needs AWS's own event"),
        "{:?}",
        plan.outcome.refused
    );
    assert!(plan.state.removals.is_empty());
    let later = pass(&r, &mut w, &plan.state, 3_000 + 3 * 3_600_000);
    assert!(later.state.removals.is_empty());
    assert!(kinds(&later).is_empty());
}

#[test]
fn a_marker_naming_another_instance_neither_joins_nor_fails_the_worker() {
    let (r, mut w, state) = two_spot_members();
    w.instances.push(instance(ID3, "10.0.1.3", 300));
    // The success marker of 10.0.1.3 names its neighbour: written by another worker (or left
    // by an earlier owner of the IP).
    w.ready("10.0.1.3");
    w.markers.success_named.insert(ip("10.0.1.3"), ID1.into());
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["marker_refused", "preparing"]);
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), [ID3]);
    assert!(
        plan.outcome.refused[0].contains(&format!(
            "prepare_data_success_10.0.1.3 names \"{ID1}\", but EC2 lists {ID3} at 10.0.1.3"
        )),
        "{:?}",
        plan.outcome.refused
    );
    // A failure marker naming another instance does not fail it either.
    w.markers.failed.insert(ip("10.0.1.3"), "exit 1".into());
    w.markers.failed_named.insert(ip("10.0.1.3"), ID2.into());
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(kinds(&plan), ["marker_refused"]);
    assert_eq!(plan.outcome.refused.len(), 2);
    assert!(!kinds(&plan).contains(&"prepare_failed"));
    // Its own agent's marker (naming it) joins it.
    w.markers.failed.clear();
    w.markers.failed_named.clear();
    w.markers.success_named.insert(ip("10.0.1.3"), ID3.into());
    let plan = pass(&r, &mut w, &plan.state, 5_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2", "10.0.1.3"])
    );
    assert!(plan.outcome.refused.is_empty());
}
