//! Joining: a worker's marker, the join order, the acknowledgement, max.

use crate::support::world::*;

#[test]
fn without_marker_the_worker_is_preparing() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), ["i-1"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "PREPARING");
    assert!(waiting_for(&plan, &w, "i-1").contains("prepare_data_success_10.0.1.1"));
    assert_eq!(plan.state.generation, 0);
    assert!(plan.outcome.notify.is_none());
    assert_eq!(kinds(&plan), ["preparing"]);

    // The tag is already there on the next pass: it is not written again.
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert!(plan.outcome.tags().is_empty(), "{:?}", plan.outcome.tags());
}

#[test]
fn a_new_worker_is_journaled_as_preparing_once_with_its_launch_time() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100_000)]);
    w.inst("i-1").market = "spot".into();
    let first = pass(&r, &mut w, &State::default(), 101_000);
    let e = &first.outcome.events[0];
    assert_eq!(e.kind, "preparing");
    assert_eq!(
        (e.instance.as_deref(), e.ip, e.launched_at),
        (Some("i-1"), Some(ip("10.0.1.1")), Some(100_000))
    );
    assert_eq!(
        e.message,
        "10.0.1.1 (p3.2xlarge, spot, launched 1970-01-01T00:01:40Z) is preparing: waiting for its \
         prepare-data marker prepare_data_success_10.0.1.1"
    );

    // Not on later passes, nor after a restart from the saved state.
    let second = pass(&r, &mut w, &first.state, 102_000);
    let restarted = pass(&r, &mut w, &reloaded(&second.state), 103_000);
    for plan in [&second, &restarted] {
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    }
}

#[test]
fn a_failed_tag_write_does_not_journal_preparing_again_but_a_reused_ip_does() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    // Decided without applying its tags: the tag write failed, the state remembers the status.
    let first = decide(&r, &w.snap(), &State::default(), 1_000);
    assert_eq!(kinds(&first), ["preparing"]);
    let retried = decide(&r, &w.snap(), &reloaded(&first.state), 2_000);
    assert_eq!(tagged(&retried, WorkerStatus::Preparing), ["i-1"]);
    assert!(
        retried.outcome.events.is_empty(),
        "{:?}",
        retried.outcome.events
    );

    // Another instance with the same IP begins a story of its own.
    w.vanish("i-1");
    w.instances.push(instance("i-9", "10.0.1.1", 3_000));
    let reused = pass(&r, &mut w, &retried.state, 4_000);
    assert_eq!(kinds(&reused), ["preparing"]);
    assert_eq!(reused.outcome.events[0].instance.as_deref(), Some("i-9"));
}

#[test]
fn a_worker_ready_when_first_seen_begins_with_joined_and_its_launch_time() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(kinds(&plan), ["joined", "generation"]);
    assert_eq!(plan.outcome.events[0].launched_at, Some(100));
}

/// Ready when first seen but held (here a spare of `join.sizes`): its story begins with
/// `ready`, once, saying what it waits for, so `dtctl explain` can tell it.
#[test]
fn a_worker_ready_when_first_seen_but_held_begins_with_ready_once() {
    let r = Rules {
        join_sizes: vec![4],
        ..rules()
    };
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(kinds(&plan), ["ready"]);
    let e = &plan.outcome.events[0];
    assert_eq!(
        (e.instance.as_deref(), e.launched_at),
        (Some("i-1"), Some(100))
    );
    assert_eq!(
        e.message,
        "10.0.1.1 (p3.2xlarge, on-demand, launched 1970-01-01T00:00:00Z) is ready (prepare-data \
         marker) and waits to join: a spare: join.sizes lets the job grow from 2 to 4 workers, 1 \
         ready"
    );
    let again = pass(&r, &mut w, &plan.state, 2_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
}

#[test]
fn failed_marker_shows_prepare_failed_and_why() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.markers
        .failed
        .insert(ip("10.0.1.1"), "exit 3: disk full".into());
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(tagged(&plan, WorkerStatus::PrepareFailed), ["i-1"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "PREPARE_FAILED");
    assert!(waiting_for(&plan, &w, "i-1").contains("exit 3: disk full"));
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn a_failed_launch_template_worker_is_journaled_once_until_it_is_gone() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.markers
        .failed
        .insert(ip("10.0.1.1"), "exit 3: disk full".into());
    let first = pass(&r, &mut w, &State::default(), 1_000);
    let failed: Vec<&Event> = (first.outcome.events.iter())
        .filter(|e| e.kind == "prepare_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", first.outcome.events);
    assert_eq!(
        (failed[0].instance.as_deref(), failed[0].ip),
        (Some("i-1"), Some(ip("10.0.1.1")))
    );
    assert_eq!(
        failed[0].message,
        "10.0.1.1 (i-1): prepare-data failed (exit 3: disk full); it waits for a person \
         (a launch-template worker is not replaced)"
    );

    // The marker is read again on every pass, and by a restarted dtd: journaled once.
    let second = pass(&r, &mut w, &first.state, 2_000);
    let restarted = pass(&r, &mut w, &reloaded(&second.state), 3_000);
    for plan in [&second, &restarted] {
        assert_eq!(worker(plan, &w, "i-1").label(), "PREPARE_FAILED");
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    }
    // Forgotten once the instance is gone.
    w.vanish("i-1");
    let gone = pass(&r, &mut w, &restarted.state, 4_000);
    assert!(remembered(&gone.state, |w| w.prepare_failed).is_empty());
}

#[test]
fn joiners_follow_base_hosts_in_join_order_with_one_generation_per_pass() {
    let r = rules();
    // Launch time decides the order within a pass, not the instance id or the IP.
    let mut w = World::with(vec![
        instance("i-a", "10.0.1.9", 200),
        instance("i-b", "10.0.1.1", 100),
    ]);
    w.ready("10.0.1.9");
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.9"]));
    assert_eq!(plan.state.generation, 1, "two joins, one generation");
    let n = plan.outcome.notify.clone().expect("the job is notified");
    assert_eq!(n.generation, 1);
    assert_eq!(n.added, [ip("10.0.1.1"), ip("10.0.1.9")]);
    assert!(n.removed.is_empty());
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-a", "i-b"]);
    assert_eq!(kinds(&plan), ["joined", "joined", "generation"]);
    assert!(waiting_for(&plan, &w, "i-a").contains("acknowledge generation 1"));

    // A worker launched earlier but ready later goes after them: join order, not launch order.
    w.instances.push(instance("i-c", "10.0.1.5", 50));
    w.ready("10.0.1.5");
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.9", "10.0.1.5"])
    );
    assert_eq!(plan.state.generation, 2);
}

#[test]
fn join_is_acknowledged_by_the_ack_file() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-1"]);

    // An older generation does not acknowledge the join.
    w.acks.generation = Some(0);
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert!(plan.outcome.tags().is_empty());
    assert_eq!(worker(&plan, &w, "i-1").label(), "ADD_QUEUED");

    w.acks.generation = Some(1);
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(tagged(&plan, WorkerStatus::Added), ["i-1"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "ADDED");
    assert_eq!(worker(&plan, &w, "i-1").waiting_for, None);
    assert_eq!(
        plan.state.generation, 1,
        "acknowledging changes no membership"
    );
    // From now on it trains: journaled once, not on later passes nor after a restart.
    assert_eq!(kinds(&plan), ["join_acknowledged"]);
    let e = &plan.outcome.events[0];
    assert_eq!(
        (e.instance.as_deref(), e.generation),
        (Some("i-1"), Some(1))
    );
    assert_eq!(
        e.message,
        "job acknowledged generation 1, which lists 10.0.1.1 (ack file): it trains"
    );
    // The job goes on acknowledging it (the ack file read again at every pass).
    w.acks.generation = Some(1);
    let later = pass(&r, &mut w, &plan.state, 4_000);
    let restarted = pass(&r, &mut w, &reloaded(&later.state), 5_000);
    for plan in [&later, &restarted] {
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    }
}

#[test]
fn join_is_acknowledged_by_an_added_line_after_the_mark() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    // The job already logged 10.0.1.1 as added in an earlier life of the cluster.
    w.log(true, "10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(plan.state.members[0].log_mark, 1);
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-1"]);

    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(
        worker(&plan, &w, "i-1").label(),
        "ADD_QUEUED",
        "old line counted"
    );

    w.log(true, "10.0.1.1");
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(tagged(&plan, WorkerStatus::Added), ["i-1"]);
    assert_eq!(kinds(&plan), ["join_acknowledged"]);
    assert!(plan.outcome.events[0].message.contains("(host_worker_log)"));
}

#[test]
fn joins_stop_at_max() {
    let r = Rules { max: 3, ..rules() };
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
        instance("i-3", "10.0.1.3", 300),
    ]);
    for a in ["10.0.1.1", "10.0.1.2", "10.0.1.3"] {
        w.ready(a);
    }
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert_eq!(
        plan.outcome.notify.as_ref().unwrap().added,
        [ip("10.0.1.1")]
    );
    assert_eq!(
        tagged(&plan, WorkerStatus::AddQueued),
        ["i-1", "i-2", "i-3"]
    );
    for id in ["i-2", "i-3"] {
        assert_eq!(waiting_for(&plan, &w, id), "room under max (3)");
    }

    // Still full on the next pass: nothing changes.
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert_eq!(plan.state.generation, 1);
    assert_eq!(waiting_for(&plan, &w, "i-2"), "room under max (3)");
}

fn batched(ms: Millis) -> Rules {
    Rules {
        join_batch_ms: ms,
        ..rules()
    }
}

/// `join.batch`: workers ready at 0 s, 5 s and 10 s of a 30 s batch join in one generation at
/// 30 s, shown until then as waiting for the batch; a restart keeps the window.
#[test]
fn workers_ready_within_the_batch_join_in_one_generation() {
    let r = batched(30_000);
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 100),
        instance("i-3", "10.0.1.3", 100),
    ]);
    let mut state = State::default();
    let mut generations = Vec::new();
    for (now, ready) in [
        (1_000, "10.0.1.1"),
        (6_000, "10.0.1.2"),
        (11_000, "10.0.1.3"),
    ] {
        w.ready(ready);
        let plan = pass(&r, &mut w, &reloaded(&state), now);
        assert_eq!(
            hosts(&plan),
            with_base(&[]),
            "joined before the batch ended"
        );
        let why = waiting_for(&plan, &w, "i-1");
        assert!(why.contains("the join batch"), "{why}");
        state = plan.state;
        generations.push(state.generation);
    }
    let before = pass(&r, &mut w, &state, 30_999);
    assert_eq!(hosts(&before), with_base(&[]));
    assert!(waiting_for(&before, &w, "i-3").contains("join together in 1s"));

    let plan = pass(&r, &mut w, &before.state, 31_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.2", "10.0.1.3"])
    );
    assert_eq!(plan.state.generation, generations[0] + 1, "one generation");
    assert_eq!(kinds(&plan), ["joined", "joined", "joined", "generation"]);
    assert!(remembered(&plan.state, |w| w.ready_since.is_some()).is_empty());
}

#[test]
fn a_batch_that_fills_the_room_under_max_joins_at_once() {
    let r = Rules {
        max: 4,
        ..batched(30_000)
    };
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 100),
    ]);
    w.ready("10.0.1.1");
    w.ready("10.0.1.2");
    // Two base hosts and two ready workers: max is reached, no one else can come.
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn without_a_batch_each_ready_worker_joins_at_once() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(remembered(&plan.state, |w| w.ready_since.is_some()).is_empty());
}

fn at_checkpoint(max_wait_ms: Millis) -> Rules {
    Rules {
        join_at_checkpoint: true,
        join_max_wait_ms: max_wait_ms,
        ..rules()
    }
}

/// What the job's progress file says: its step and its last checkpoint's.
fn progress(w: &mut World, step: u64, checkpoint_step: Option<u64>) {
    w.progress = Some(Ok(Progress {
        step,
        time: None,
        checkpoint_step,
        quorum: None,
        run: None,
        generation: None,
    }));
}

/// `join.at_checkpoint`: ready workers wait for the job's next checkpoint, joining in the pass
/// that sees `checkpoint_step` move on, with a batch that ended before it (no second wait).
#[test]
fn ready_workers_join_once_the_checkpoint_step_moves_on() {
    let r = Rules {
        join_batch_ms: 5_000,
        ..at_checkpoint(600_000)
    };
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 100),
    ]);
    progress(&mut w, 150, Some(100));
    w.ready("10.0.1.1");
    w.ready("10.0.1.2");
    let mut state = State::default();
    for now in [1_000, 7_000, 60_000] {
        let plan = pass(&r, &mut w, &reloaded(&state), now);
        assert_eq!(
            hosts(&plan),
            with_base(&[]),
            "joined at {now} before a checkpoint"
        );
        state = plan.state;
    }
    let plan = pass(&r, &mut w, &state, 61_000);
    let why = waiting_for(&plan, &w, "i-2");
    assert!(
        why.starts_with("the job's next checkpoint: 2 ready worker(s) join at one after step 100"),
        "{why}"
    );
    // A progress line with the same checkpoint is not one.
    progress(&mut w, 190, Some(100));
    let plan = pass(&r, &mut w, &plan.state, 62_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    progress(&mut w, 200, Some(200));
    let plan = pass(&r, &mut w, &plan.state, 63_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(
        plan.state.generation,
        state.generation + 1,
        "one generation"
    );
    assert!(
        plan.state.checkpoint_wait.is_none()
            && remembered(&plan.state, |w| w.ready_since.is_some()).is_empty()
    );
}

#[test]
fn without_a_checkpoint_they_join_after_max_wait_and_a_job_with_no_worker_is_not_waited_for() {
    let r = at_checkpoint(120_000);
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    let why = waiting_for(&plan, &w, "i-1");
    assert!(
        why.contains("join at the job's first (join.at_checkpoint; at most 2m more)"),
        "{why}"
    );
    let plan = pass(&r, &mut w, &plan.state, 120_999);
    assert_eq!(hosts(&plan), with_base(&[]));
    let plan = pass(&r, &mut w, &plan.state, 121_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1"]),
        "max_wait is the bound"
    );

    let empty = Rules {
        base_hosts: Vec::new(),
        ..at_checkpoint(120_000)
    };
    let plan = pass(&empty, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), ["10.0.1.1"], "no job to checkpoint: at once");
}

/// `join.sizes` [4, 6] with two base hosts: one ready worker waits as a spare, two join (4),
/// a third waits again until a fourth makes 6.
#[test]
fn join_sizes_hold_spares_until_the_next_allowed_size() {
    let r = Rules {
        join_sizes: vec![4, 6],
        ..rules()
    };
    let ips = ["10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4"];
    let ids = ["i-1", "i-2", "i-3", "i-4"];
    let mut w = World::with(
        ids.iter()
            .zip(ips)
            .map(|(id, ip)| instance(id, ip, 100))
            .collect(),
    );
    w.ready(ips[0]);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    let why = waiting_for(&plan, &w, "i-1");
    assert_eq!(
        why,
        "a spare: join.sizes lets the job grow from 2 to 4 workers, 1 ready"
    );
    w.ready(ips[1]);
    w.ready(ips[2]);
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(hosts(&plan), with_base(&ips[..2]), "4 of 5 reachable");
    assert!(waiting_for(&plan, &w, "i-3").contains("from 4 to 6 workers"));
    w.ready(ips[3]);
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(hosts(&plan), with_base(&ips));
}
