//! Leaving on purpose: the elastic tag, the acknowledgement or its timeout, min, base hosts.

use crate::support::world::*;

#[test]
fn removal_waits_for_the_ack_file_then_terminates() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.2"]),
        "out of the host file at once"
    );
    assert_eq!(plan.state.generation, 2);
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!((n.generation, n.removed), (2, vec![ip("10.0.1.1")]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert!(
        plan.outcome.terminate().is_empty(),
        "not before the job acknowledges"
    );
    assert_eq!(kinds(&plan), ["removal_queued", "generation"]);
    assert_eq!(plan.outcome.events[0].cause, Some(Cause::ElasticTag));
    assert!(waiting_for(&plan, &w, "i-1").contains("acknowledge generation 2"));

    // The job still runs generation 1: keep waiting.
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);

    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
    assert_eq!(kinds(&plan), ["acknowledged"]);
    assert!(matches!(plan.state.removals[0].stage, Stage::Ending(_)));
    assert_eq!(plan.state.generation, 2);
}

#[test]
fn removal_is_acknowledged_by_a_removed_line_after_its_mark_only() {
    let (r, mut w, state) = two_members();
    // The job once removed this IP, long ago: that line predates this removal.
    w.log(false, "10.0.1.1");
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.removals[0].log_mark, 1);

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "a line before the mark counted"
    );

    // A REMOVED line for another IP is not an acknowledgement either.
    w.log(false, "10.0.1.2");
    let plan = pass(&r, &mut w, &plan.state, 25_000);
    assert!(plan.outcome.terminate().is_empty());

    w.log(false, "10.0.1.1");
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
    assert_eq!(kinds(&plan), ["acknowledged"]);
}

#[test]
fn removal_terminates_at_the_ack_timeout() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    let deadline = plan.state.removals[0].deadline;
    assert_eq!(deadline, 10_000 + TIMEOUT);

    let plan = pass(&r, &mut w, &plan.state, deadline - 1);
    assert!(plan.outcome.terminate().is_empty());
    assert!(waiting_for(&plan, &w, "i-1").contains("timeout in 1s"));

    let plan = pass(&r, &mut w, &plan.state, deadline);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(kinds(&plan), ["ack_timeout"]);
    let said = &plan.outcome.events[0].message;
    assert!(
        said.contains("within the ack timeout (job.ack.timeout: "),
        "{said}"
    );
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
}

#[test]
fn removal_is_held_at_min_and_journaled_once() {
    let (_, mut w, state) = two_members();
    // Two base hosts + two members = 4 = min: nobody may leave.
    let r = Rules { min: 4, ..rules() };
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.notify.is_none());
    assert_eq!(plan.state.generation, 1);
    assert_eq!(kinds(&plan), ["removal_held"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "ADDED");
    assert_eq!(waiting_for(&plan, &w, "i-1"), "worker count above min (4)");

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(
        plan.outcome.events.is_empty(),
        "held twice: {:?}",
        plan.outcome.events
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));

    // A third worker joins: now there is room above min and the removal goes ahead.
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert!(remembered(&plan.state, |w| w.held.is_some()).is_empty());
}

#[test]
fn base_hosts_and_master_are_never_removed_or_terminated() {
    let r = rules();
    // 10.0.0.5 (base) and the master run as cluster workers without the elastic tag;
    // 10.0.0.4 (base) has no instance at all and is listed anyway.
    let mut base = instance("i-base", "10.0.0.5", 100);
    let mut master = instance("i-master", MASTER, 100);
    base.tags.remove(ELASTIC);
    master.tags.remove(ELASTIC);
    base.tags.insert(STATUS_TAG.into(), "ADDED".into());
    let mut w = World::with(vec![base, master]);
    w.ready("10.0.0.5");
    w.ready(MASTER);
    w.acks.generation = Some(99);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        hosts(&plan),
        with_base(&[]),
        "master listed or base host lost"
    );
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.tags().is_empty(), "{:?}", plan.outcome.tags());
    // 99 is no generation this (new) dtd wrote: refused, and changes nothing.
    assert_eq!(
        kinds(&plan),
        ["ack_refused", "removal_refused", "removal_refused"]
    );
    assert_eq!(worker(&plan, &w, "i-base").label(), "BASE");
    assert_eq!(worker(&plan, &w, "i-master").label(), "BASE");

    // Refused once, not on every pass; still not terminated long after any timeout.
    let plan = pass(&r, &mut w, &plan.state, 1_000 + 10 * TIMEOUT);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(hosts(&plan), with_base(&[]));
}

#[test]
fn instances_without_the_cluster_tags_are_ignored() {
    let r = rules();
    let mut other_role = instance("i-role", "10.0.2.1", 100);
    other_role.tags.insert("NodeType".into(), "Master".into());
    let mut other_template = instance("i-lt", "10.0.2.2", 100);
    other_template
        .tags
        .insert("aws:ec2launchtemplate:id".into(), "lt-2".into());
    // Also tempting: managed-looking status tag and no elastic tag (would be terminated if ours).
    let mut no_role = instance("i-norole", "10.0.2.3", 100);
    no_role.tags.remove("NodeType");
    no_role.tags.remove(ELASTIC);
    no_role.tags.insert(STATUS_TAG.into(), "PREPARING".into());
    let mut w = World::with(vec![other_role, other_template, no_role]);
    for a in ["10.0.2.1", "10.0.2.2", "10.0.2.3"] {
        w.ready(a);
    }
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.tags().is_empty(), "{:?}", plan.outcome.tags());
    assert!(plan.outcome.rows.is_empty(), "{:?}", plan.outcome.rows);
    assert!(plan.outcome.events.is_empty());
}

#[test]
fn unjoined_managed_instance_losing_its_elastic_tag_is_terminated_at_once() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), ["i-1"]);

    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(
        plan.outcome.terminate(),
        ["i-1"],
        "terminated once, right away"
    );
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
    assert_eq!(kinds(&plan), ["removal_queued"]);
    assert_eq!(
        plan.outcome.events[0].cause,
        Some(Cause::ElasticTag),
        "ending at once, it still says why"
    );
    assert_eq!(plan.state.generation, 0, "it never was in the host file");
    assert!(plan.outcome.notify.is_none());
    assert!(matches!(plan.state.removals[0].stage, Stage::Ending(_)));
}

#[test]
fn instance_never_managed_without_elastic_tag_is_left_alone() {
    let r = rules();
    let mut i = instance("i-1", "10.0.1.1", 100);
    i.tags.remove(ELASTIC);
    let mut w = World::with(vec![i]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.tags().is_empty());
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(worker(&plan, &w, "i-1").label(), "-");
    assert_eq!(waiting_for(&plan, &w, "i-1"), "no elastic tag: not managed");
}

#[test]
fn requested_termination_is_resent_sent_is_not_and_gone_is_forgotten() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);

    // The TerminateInstances call failed (state still Requested): asked again.
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);

    // It succeeded: the daemon marks it Sent, and it is never sent again.
    let mut state = plan.state;
    state.removals[0].stage = Stage::Ended;
    let plan = pass(&r, &mut w, &state, 40_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(worker(&plan, &w, "i-1").label(), "REMOVED");
    assert_eq!(waiting_for(&plan, &w, "i-1"), "the instance to shut down");

    // Once the instance is gone the removal is forgotten, quietly.
    w.vanish("i-1");
    let plan = pass(&r, &mut w, &plan.state, 50_000);
    assert!(plan.state.removals.is_empty());
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn member_whose_instance_is_gone_leaves_the_host_file() {
    let (r, mut w, state) = two_members();
    w.vanish("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(kinds(&plan), ["gone", "generation"]);
    assert_eq!(plan.state.generation, 2);
    assert_eq!(
        plan.outcome.notify.clone().unwrap().removed,
        [ip("10.0.1.1")]
    );
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.state.removals.is_empty());
}

fn budget_of_one(r: Rules) -> Rules {
    Rules {
        disruption_budget: dt::config::Budget::Workers(1),
        ..r
    }
}

/// `disruption.budget: 1`: of two elastic tags deleted at once, one worker leaves and the other
/// stays in the job, held and shown why, until the first's instance stops running.
#[test]
fn a_budget_of_one_holds_the_second_voluntary_removal_until_the_first_ends() {
    let (r, mut w, state) = two_members();
    let r = budget_of_one(r);
    w.delete_elastic_tag("i-1");
    w.delete_elastic_tag("i-2");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    let held = "the disruption budget: 1 may be leaving at once, 1 are (10.0.1.1)";
    assert_eq!(waiting_for(&plan, &w, "i-2"), held);
    let journaled: Vec<_> = (plan.outcome.events.iter())
        .filter(|e| e.kind == "removal_held")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(journaled, [format!("removal of 10.0.1.2 held: {held}")]);

    // Acknowledged and terminated, but still running: still leaving, still counted.
    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(!kinds(&plan).contains(&"removal_held"), "journaled once");

    w.vanish("i-1");
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-2"]);
}

/// An interruption is never held, and counts against the budget: the deleted tag waits.
#[test]
fn an_interruption_is_never_held_and_counts_against_the_budget() {
    let (r, mut w, state) = two_members();
    let r = budget_of_one(r);
    w.inst("i-1").market = "spot".into();
    w.notices.push(spot("e-1", "i-1"));
    w.delete_elastic_tag("i-2");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(
        waiting_for(&plan, &w, "i-2").starts_with("the disruption budget"),
        "{}",
        waiting_for(&plan, &w, "i-2")
    );
}

/// A share rounds up: 25% of the 4 workers (2 base hosts, 2 members) is 1.
#[test]
fn a_budget_share_of_the_workers_rounds_up() {
    let (r, mut w, state) = two_members();
    let r = Rules {
        disruption_budget: dt::config::Budget::Percent(25),
        ..r
    };
    w.delete_elastic_tag("i-1");
    w.delete_elastic_tag("i-2");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
}

/// A rebalance recommendation is a voluntary drain: while the budget is in use its notice stays
/// queued (deferred, with a HOLDING line), and is heeded once the leave in progress has ended.
#[test]
fn a_rebalance_drain_waits_for_the_budget_with_its_notice_kept() {
    let (r, mut w, state) = two_members();
    let r = budget_of_one(r);
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 5_000);
    let target = NoticeTarget::Instance("i-2".into());
    w.notices = vec![notice("rb-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &plan.state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(plan.outcome.deferred_notices, ["rb-1"]);
    let holds = plan.outcome.holds.join("\n");
    assert!(holds.contains("held by the disruption budget"), "{holds}");
    assert!(!plan.state.noticed.contains_key("rb-1"));

    w.vanish("i-1");
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert!(plan.outcome.deferred_notices.is_empty());
    assert!(plan.state.noticed.contains_key("rb-1"));
}

/// `disruption.windows`: a window opening at 01:00 UTC for an hour (the passes' clock starts at
/// the epoch). A deleted elastic tag outside it is held, shown with when the next opens, and
/// leaves once the window is open.
#[test]
fn a_voluntary_leave_outside_the_disruption_windows_waits_for_the_next() {
    let (r, mut w, state) = two_members();
    let cfg = dt::config::Config::parse(
        "cluster: demo\nworkers: { launch_template: lt-0abc, max: 4 }\nshared_dir: /efs\n\
         disruption: { windows: [ { schedule: \"0 1 * * *\", duration: 1h } ] }\n",
    )
    .expect("config");
    let r = Rules {
        disruption_windows: cfg.disruption.windows.clone(),
        ..r
    };
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]), "held");
    let held = "the disruption windows (0 1 * * * for 1h; UTC): the next opens at \
                1970-01-01T01:00:00Z";
    assert_eq!(waiting_for(&plan, &w, "i-1"), held);
    assert_eq!(kinds(&plan), ["removal_held"]);
    let plan = pass(&r, &mut w, &plan.state, 3_599_000);
    assert!(plan.outcome.events.is_empty(), "journaled once");
    let plan = pass(&r, &mut w, &plan.state, 3_600_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]), "the window opened");
    // Closed again at 02:00: an interruption is never held.
    w.inst("i-2").market = "spot".into();
    w.notices.push(spot("e-2", "i-2"));
    let plan = pass(&r, &mut w, &plan.state, 7_300_000);
    assert_eq!(hosts(&plan), with_base(&[]));
}

/// An unhealthy member that can drain (its GPUs are there) is a voluntary leave: with a budget
/// of none it trains on, held and shown why, and drains once the budget allows.
#[test]
fn an_unhealthy_member_that_can_drain_waits_for_the_budget() {
    let (r, mut w, state) = two_members();
    let held = Rules {
        disruption_budget: dt::config::Budget::Workers(0),
        ..r.clone()
    };
    w.health("i-1", false, false, "Xid 13 (graphics engine exception)");
    let plan = pass(&held, &mut w, &state, 10_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2"]),
        "trains on"
    );
    let why = waiting_for(&plan, &w, "i-1");
    assert!(
        why.starts_with("health check failed (Xid 13") && why.contains("removal of 10.0.1.1 held"),
        "{why}"
    );
    assert_eq!(
        kinds(&plan)
            .iter()
            .filter(|k| **k == "removal_held")
            .count(),
        1
    );
    let plan = pass(&held, &mut w, &plan.state, 11_000);
    assert!(!kinds(&plan).contains(&"removal_held"), "journaled once");
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.2"]),
        "drains once allowed"
    );
    // GPUs gone is involuntary: never held.
    let (_, mut w, state) = two_members();
    w.health("i-2", false, true, "7 of 8 GPUs visible");
    let plan = pass(&held, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
}

#[test]
fn an_ending_never_confirmed_is_journaled_terminated_once_its_instance_is_gone() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    // TerminateInstances went through, but dtd died before its answer was journaled and saved.
    w.instances.retain(|i| i.id != "i-1");
    let gone = pass(&r, &mut w, &plan.state, 40_000);
    assert_eq!(kinds(&gone), ["terminated"]);
    assert_eq!(gone.outcome.events[0].instance.as_deref(), Some("i-1"));
    assert_eq!(gone.outcome.events[0].generation, Some(2));
    assert!(gone.state.removals.is_empty());
    let later = pass(&r, &mut w, &gone.state, 50_000);
    assert!(
        later.outcome.events.is_empty(),
        "{:?}",
        later.outcome.events
    );
}
