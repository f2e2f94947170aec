use super::*;
use crate::model::{Cause, JobProgress, Member, Removal};

fn instance(n: u8, launched_at: Millis) -> Instance {
    Instance {
        id: format!("i-{n}"),
        ip: format!("10.0.0.{n}").parse().expect("an IP"),
        instance_type: "p4d.24xlarge".into(),
        az: "us-east-1a".into(),
        market: "spot".into(),
        launched_at,
        tags: Default::default(),
        capacity_reservation: None,
        subnet: None,
    }
}

fn member(i: &Instance, acked: bool) -> Member {
    Member {
        id: i.id.clone(),
        ip: i.ip,
        instance_type: i.instance_type.clone(),
        joined_generation: 1,
        joined_at: 0,
        log_mark: 0,
        acked,
    }
}

fn removal(i: &Instance, then: Option<crate::model::Ending>) -> Removal {
    Removal {
        id: i.id.clone(),
        ip: i.ip,
        generation: 2,
        queued_at: 0,
        deadline: 1,
        log_mark: 0,
        reason: "test".into(),
        stage: Stage::AwaitingAck {
            cause: Cause::ElasticTag,
            then,
            heartbeat_at: None,
        },
    }
}

/// `workers.slots: { p4d.24xlarge: 8, default: 1 }`.
fn gpus(kind: &str) -> u64 {
    if kind == "p4d.24xlarge" {
        8
    } else {
        1
    }
}

fn pass(g: &mut Goodput, now: Millis, list: &[Instance], markers: &Markers, state: &State) {
    g.account(&Seen {
        now,
        instances: list,
        markers: Some(markers),
        state,
        gpus: &gpus,
        price: &price,
        restarts: true,
    });
}

/// What a pass at `now` sees a worker doing, the current change begun at `change_at`.
fn role(
    state: &State,
    now: Millis,
    change_at: Option<Millis>,
    i: &Instance,
    markers: &Markers,
) -> Bucket {
    let seen = Seen {
        now,
        instances: &[],
        markers: Some(markers),
        state,
        gpus: &gpus,
        price: &price,
        restarts: true,
    };
    Roles::of(&seen, STEP_FRESH, change_at).bucket(i, Some(markers))
}

/// `workers.prices: { p4d.24xlarge: 32.77 }`.
fn price(i: &Instance) -> Option<f64> {
    (i.instance_type == "p4d.24xlarge").then_some(32.77)
}

/// One worker, launched at 0, ready and an acknowledged member of the job.
fn one_member() -> (Instance, Markers, State) {
    let a = instance(1, 0);
    let markers = Markers {
        success: [a.ip].into(),
        ..Markers::default()
    };
    let state = State {
        members: vec![member(&a, true)],
        ..State::default()
    };
    (a, markers, state)
}

fn node_s(g: &Goodput, b: Bucket) -> u64 {
    g.buckets.get(&b).map_or(0, |s| s.node_ms / 1000)
}

#[test]
fn each_worker_is_in_the_bucket_of_what_it_does() {
    let list: Vec<Instance> = (1..=7).map(|n| instance(n, 0)).collect();
    let markers = Markers {
        success: [1, 2, 3, 4, 5, 6].map(|n| list[n - 1].ip).into(),
        ..Markers::default()
    };
    let state = State {
        members: vec![member(&list[0], true), member(&list[1], false)],
        removals: vec![
            removal(&list[2], Some(crate::model::Ending::Terminate)),
            removal(&list[3], None),
        ],
        ..State::default()
    };
    let seen = |state: &State, n: usize| role(state, 0, None, &list[n], &markers);
    // A removal awaiting its acknowledgement: every member is paused (the job restarts).
    assert_eq!(seen(&state, 0), Bucket::Paused);
    assert_eq!(seen(&state, 1), Bucket::Paused);
    assert_eq!(seen(&state, 2), Bucket::Leaving);
    assert_eq!(
        seen(&state, 3),
        Bucket::Idle,
        "kept running outside the job"
    );
    assert_eq!(seen(&state, 4), Bucket::WaitingToJoin);
    assert_eq!(seen(&state, 6), Bucket::Preparing);
    let settled = State {
        members: vec![member(&list[0], true)],
        ..State::default()
    };
    assert_eq!(seen(&settled, 0), Bucket::Training);
    let stalled = State {
        progress: Some(JobProgress {
            step: 5,
            advanced_at: 0,
            stalled: true,
            held_back: String::new(),
            run: None,
            generation: None,
        }),
        ..settled
    };
    assert_eq!(seen(&stalled, 0), Bucket::Idle);
}

#[test]
fn the_buckets_sum_to_the_time_paid_from_each_launch_to_its_last_pass() {
    let mut g = Goodput::new(10_000);
    // One running before the ledger began (counted from then), one launched after it.
    let a = instance(1, 2_000);
    let b = instance(2, 12_500);
    let mut markers = Markers::default();
    let mut state = State::default();
    pass(&mut g, 11_000, std::slice::from_ref(&a), &markers, &state);
    assert_eq!(node_s(&g, Bucket::Preparing), 1);
    markers.success.insert(a.ip);
    let both = [a.clone(), b.clone()];
    pass(&mut g, 13_000, &both, &markers, &state);
    state.members.push(member(&a, true));
    pass(&mut g, 20_000, &both, &markers, &state);
    // b is gone (terminated between passes): its time ends at its last pass.
    pass(&mut g, 30_000, std::slice::from_ref(&a), &markers, &state);
    let paid_a = 30_000 - 10_000;
    let paid_b = 20_000 - 12_500;
    assert_eq!(g.paid().node_ms, paid_a + paid_b);
    assert_eq!(g.paid().gpu_ms, (paid_a + paid_b) * 8);
    // 27.5 s at 32.77 dollars an hour, each bucket's rounded to a millionth of a dollar.
    let usd = (27.5 * 32.77 / 3600.0 * 1e6_f64).round() as i64;
    assert!(
        (g.paid().micro_usd as i64 - usd).abs() <= 7,
        "{:?}",
        g.paid()
    );
    // The join seen at 20 s counts from the pass before (off by at most one pass a change).
    assert_eq!(node_s(&g, Bucket::Training), 17);
    assert_eq!(node_s(&g, Bucket::WaitingToJoin), 2, "a, from 11 s to 13 s");
    assert_eq!(g.accounted.keys().collect::<Vec<_>>(), ["i-1"]);
}

#[test]
fn a_restart_gives_the_gap_to_the_bucket_each_worker_is_found_in() {
    let mut g = Goodput::new(0);
    let (a, markers, state) = one_member();
    pass(&mut g, 5_000, std::slice::from_ref(&a), &markers, &state);
    let saved = serde_json::to_string(&g).expect("JSON");
    // dtd is killed, and started again 60 s later.
    let mut g: Goodput = serde_json::from_str(&saved).expect("read back");
    pass(&mut g, 65_000, std::slice::from_ref(&a), &markers, &state);
    assert_eq!(g.paid().node_ms, 65_000);
    assert_eq!(node_s(&g, Bucket::Training), 60);
    assert_eq!(g.master_ms, 65_000, "the master ran while dtd was down");
}

#[test]
fn steps_lost_to_a_restart_move_their_training_time_to_redone() {
    let mut g = Goodput::new(0);
    let (a, b) = (instance(1, 0), instance(2, 0));
    let list = [a.clone(), b.clone()];
    let markers = Markers {
        success: [a.ip, b.ip].into(),
        ..Markers::default()
    };
    let at_step = |step| State {
        members: vec![member(&a, true), member(&b, true)],
        progress: Some(JobProgress {
            step,
            advanced_at: 0,
            stalled: false,
            held_back: String::new(),
            run: None,
            generation: None,
        }),
        ..State::default()
    };
    pass(&mut g, 0, &list, &markers, &at_step(0));
    pass(&mut g, 10_000, &list, &markers, &at_step(100));
    // Back to its checkpoint at 60: 40 steps of 100 ms each on two nodes were lost.
    pass(&mut g, 11_000, &list, &markers, &at_step(60));
    assert_eq!(node_s(&g, Bucket::Redone), 8);
    assert_eq!(node_s(&g, Bucket::Training), 22 - 8);
    assert_eq!(g.paid().node_ms, 22_000, "moved, not added");
    // The dollars go with the time: 8 of 22 node-seconds.
    let (redone, paid) = (g.buckets[&Bucket::Redone], g.paid());
    // Each pass's share rounded to a millionth of a dollar: six of them here.
    let usd = (22_000.0 * 32.77_f64 / 3.6).round() as i64;
    assert!((paid.micro_usd as i64 - usd).abs() <= 6, "{paid:?}");
    let share = redone.micro_usd as f64 / paid.micro_usd as f64;
    assert!((share - 8.0 / 22.0).abs() < 1e-3, "{share}");
}

#[test]
fn an_instance_type_without_a_price_costs_no_dollars() {
    let mut g = Goodput::new(0);
    let a = Instance {
        instance_type: "m5.large".into(),
        ..instance(1, 0)
    };
    let state = State::default();
    pass(&mut g, 9_000, &[a], &Markers::default(), &state);
    assert_eq!(g.paid().node_ms, 9_000);
    assert_eq!(g.paid().micro_usd, 0);
}

#[test]
fn a_mark_each_hour_gives_the_time_since_it_and_only_three_days_are_kept() {
    let hour = MARK_EVERY;
    let mut g = Goodput::new(0);
    let (a, markers, state) = one_member();
    let list = std::slice::from_ref(&a);
    // A pass every 10 minutes for two hours and a half: marks at 0, 1 h and 2 h.
    for n in 0..=15 {
        pass(&mut g, n * hour / 6, list, &markers, &state);
    }
    assert_eq!(
        g.marks.iter().map(|m| m.at / hour).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    // Since 1.5 h ago, at 2.5 h: from the mark at 1 h, the newest at or before 1 h.
    let w = g.since(hour).expect("a mark at 1 h");
    assert_eq!(w.since, hour);
    assert_eq!(node_s(&w, Bucket::Training), 3 * 1800);
    assert_eq!(w.paid().node_ms, g.paid().node_ms - hour);
    assert_eq!(w.master_ms, g.master_ms - hour);
    assert!(g.since(hour - 1).is_some(), "the mark at 0 h");
    // Three days later, only the last 72 marks stay.
    for n in 3..=(3 + 24 * 3) {
        pass(&mut g, n * hour, list, &markers, &state);
    }
    assert_eq!(g.marks.len(), MARKS_KEPT);
    assert!(g.since(hour).is_none(), "older than any mark kept");
    let saved: Goodput =
        serde_json::from_str(&serde_json::to_string(&g).expect("JSON")).expect("read back");
    assert_eq!(saved.marks, g.marks);
}

#[test]
fn with_a_progress_file_the_members_train_while_the_step_advances() {
    let (a, b, c) = (instance(1, 0), instance(2, 0), instance(3, 0));
    let markers = Markers {
        success: [a.ip, b.ip, c.ip].into(),
        ..Markers::default()
    };
    // c joins at 9 s: the generation with it is not acknowledged yet (its process is starting).
    let joining = State {
        members: vec![member(&a, true), member(&b, true), member(&c, false)],
        pending_notification: Some(Default::default()),
        progress: Some(JobProgress {
            step: 40,
            advanced_at: 10_000,
            stalled: false,
            held_back: String::new(),
            run: None,
            generation: None,
        }),
        ..State::default()
    };
    let at = |st: &State, now, i| role(st, now, Some(9_000), i, &markers);
    // The step was read advancing 2 s ago: a and b train on (in place, or the old generation
    // finishing its step); c is the change's pause.
    assert_eq!(at(&joining, 12_000, &a), Bucket::Training);
    assert_eq!(at(&joining, 12_000, &c), Bucket::Paused);
    // It has stood for more than STEP_FRESH: the change holds them up.
    assert_eq!(at(&joining, 10_000 + STEP_FRESH + 1, &a), Bucket::Paused);
    // Acknowledged, but the step has not moved since the change began at 11 s: the job is
    // restarting, not training.
    let acked = State {
        members: vec![member(&a, true), member(&b, true), member(&c, true)],
        pending_notification: None,
        ..joining.clone()
    };
    assert_eq!(
        role(&acked, 20_000, Some(11_000), &b, &markers),
        Bucket::Paused
    );
    // Once it has (read at 10 s, the change at 9 s), a step taking long is still training.
    assert_eq!(at(&acked, 60_000, &b), Bucket::Training);
    // Without a progress file the acknowledgements alone say: paused while c is not.
    let unread = State {
        progress: None,
        ..joining.clone()
    };
    assert_eq!(at(&unread, 12_000, &a), Bucket::Paused);
}

#[test]
fn training_counted_on_the_steps_word_moves_to_paused_when_the_step_stands() {
    let (a, markers, steady) = one_member();
    let list = [a];
    let at_step = |st: &State, step, read| State {
        progress: progress(step, read),
        ..st.clone()
    };
    let changing = State {
        pending_notification: Some(Default::default()),
        generation: 2,
        ..steady.clone()
    };
    // Step 40 read at 10 s; a change begins at 11 s and the step never moves again: the two
    // seconds counted as training on its word (12 and 13 s) were the change's.
    let run = |then: &[(Millis, State)]| {
        let mut g = Goodput::new(0);
        pass(
            &mut g,
            10_000,
            &list,
            &markers,
            &at_step(&steady, 40, 10_000),
        );
        pass(
            &mut g,
            11_000,
            &list,
            &markers,
            &at_step(&steady, 40, 10_000),
        );
        for (now, st) in then {
            pass(&mut g, *now, &list, &markers, st);
        }
        g
    };
    let stood = at_step(&changing, 40, 10_000);
    let g = run(&[
        (12_000, stood.clone()),
        (13_000, stood.clone()),
        (14_000, stood.clone()),
    ]);
    assert_eq!(node_s(&g, Bucket::Training), 1);
    assert_eq!(node_s(&g, Bucket::Paused), 3);
    assert_eq!(g.changes.last().map(|c| c.paused.node_ms), Some(3_000));
    assert!(g.unconfirmed.is_none());
    // The step moves at 13 s: the old generation was finishing its steps, training all along.
    let g = run(&[
        (12_000, stood.clone()),
        (13_000, at_step(&changing, 41, 13_000)),
    ]);
    assert_eq!(node_s(&g, Bucket::Training), 3);
    assert_eq!(node_s(&g, Bucket::Paused), 0);
    // It goes back at 13 s (a restart from the checkpoint): the second on its word was paused.
    let g = run(&[
        (12_000, stood.clone()),
        (13_000, at_step(&changing, 30, 13_000)),
    ]);
    assert_eq!(node_s(&g, Bucket::Training), 2);
    assert_eq!(node_s(&g, Bucket::Paused), 1);
    // The job acknowledges at 13 s before its step moves (a quick restart that will go on
    // from the same step): the second on its word was the restart's.
    let acked = State {
        pending_notification: None,
        ..stood.clone()
    };
    let g = run(&[(12_000, stood.clone()), (13_000, acked)]);
    assert_eq!(node_s(&g, Bucket::Training), 1);
    assert_eq!(node_s(&g, Bucket::Paused), 2);
    // The job stalls instead: the time on its word was idle.
    let stalled = State {
        progress: Some(JobProgress {
            stalled: true,
            ..JobProgress::clone(stood.progress.as_ref().expect("a step"))
        }),
        ..stood.clone()
    };
    let g = run(&[(12_000, stood.clone()), (13_000, stalled)]);
    assert_eq!(node_s(&g, Bucket::Training), 1);
    assert_eq!(node_s(&g, Bucket::Idle), 2);
    // Saved halfway, what is still on the step's word is saved with it.
    let g = run(&[(12_000, stood.clone())]);
    let back: Goodput =
        serde_json::from_str(&serde_json::to_string(&g).expect("json")).expect("back");
    assert_eq!(back.unconfirmed.node_ms, 1_000);
}

#[test]
fn a_new_run_of_the_job_is_a_restart_even_when_it_passed_the_old_step_unseen() {
    let (a, markers, steady) = one_member();
    let list = [a];
    let at = |step, read, run: &str, from| State {
        progress: Some(JobProgress {
            run: Some(crate::protocol::progress::RunLine {
                id: run.into(),
                from,
            }),
            ..JobProgress::clone(progress(step, read).as_ref().expect("a step"))
        }),
        ..steady.clone()
    };
    let mut g = Goodput::new(0);
    for (now, step) in [(1_000, 10), (2_000, 20), (3_000, 30)] {
        pass(&mut g, now, &list, &markers, &at(step, now, "a", 0));
    }
    // Started again from its checkpoint at 20, it is at 35 when the next pass reads it: the
    // steps 21 to 30 were trained twice (a tenth of a second each, at the old run's pace).
    pass(&mut g, 4_000, &list, &markers, &at(35, 4_000, "b", 20));
    assert_eq!(
        g.buckets.get(&Bucket::Redone).map(|s| s.node_ms),
        Some(1_000)
    );
    // The same run going on is no restart.
    pass(&mut g, 5_000, &list, &markers, &at(45, 5_000, "b", 20));
    assert_eq!(
        g.buckets.get(&Bucket::Redone).map(|s| s.node_ms),
        Some(1_000)
    );
    assert_eq!(g.steps.as_ref().and_then(|r| r.run.as_deref()), Some("b"));
}

/// The job's progress at `step`, first read at `at`.
fn progress(step: u64, at: Millis) -> Option<JobProgress> {
    Some(JobProgress {
        step,
        advanced_at: at,
        stalled: false,
        held_back: String::new(),
        run: None,
        generation: None,
    })
}

/// The job's step `step`, read at `at`, written by its processes of generation `generation`.
fn progress_in(generation: u64, step: u64, at: Millis) -> Option<JobProgress> {
    progress(step, at).map(|p| JobProgress {
        generation: Some(generation),
        ..p
    })
}

/// Where a change restarts the job (`generation`), the old generation's last steps after the
/// change began are not the job training again: from when they stand until the new
/// generation's first step, the members are paused, however soon the new generation is
/// acknowledged (as the launcher acknowledges it, when it starts the new processes), and even
/// when a generation between (a join, then a warning before it trained) stepped after the
/// change. A bench replay under `generation` found those seconds counted as training: the
/// ledger 4.8 % over the job's own count.
#[test]
fn a_restart_is_paused_until_the_new_generation_steps_even_when_an_old_one_stepped_after_it() {
    let (a, markers, steady) = one_member();
    let list = [a];
    let changing = State {
        pending_notification: Some(Default::default()),
        generation: 3,
        ..steady.clone()
    };
    let acked = State {
        pending_notification: None,
        ..changing.clone()
    };
    let at = |st: &State, generation, step, read| State {
        progress: progress_in(generation, step, read),
        ..st.clone()
    };
    // Step 40 of generation 1 read at 10 s; generation 3 at 11 s; generation 2's processes
    // (started before it) step to 45, read at 12 s; acknowledged at 13 s; generation 3's first
    // step at 21 s.
    let mut passes = vec![
        (10_000, at(&steady, 1, 40, 10_000)),
        (11_000, at(&changing, 1, 40, 10_000)),
        (12_000, at(&changing, 2, 45, 12_000)),
    ];
    passes.extend((13..=20).map(|s| (s * 1_000, at(&acked, 2, 45, 12_000))));
    passes.push((21_000, at(&acked, 3, 46, 21_000)));
    let replay = |restarts: bool| {
        let mut g = Goodput::new(0);
        for (now, st) in &passes {
            g.account(&Seen {
                now: *now,
                instances: &list,
                markers: Some(&markers),
                state: st,
                gpus: &gpus,
                price: &price,
                restarts,
            });
        }
        g
    };
    let g = replay(true);
    assert_eq!(node_s(&g, Bucket::Training), 3, "10-12 s and 20-21 s");
    assert_eq!(node_s(&g, Bucket::Paused), 8, "12-20 s");
    assert_eq!(g.changes.last().map(|c| c.paused.node_ms), Some(8_000));
    // Under `in_place` the processes go on through a change: their steps after it began are
    // the job training, and a pause of theirs afterwards is not the change's.
    let g = replay(false);
    assert_eq!(node_s(&g, Bucket::Training), 11);
    assert_eq!(node_s(&g, Bucket::Paused), 0);
}

#[test]
fn each_change_is_charged_its_pauses_its_leavers_and_its_lost_steps() {
    let (a, b) = (instance(1, 0), instance(2, 0));
    let list = [a.clone(), b.clone()];
    let markers = Markers {
        success: [a.ip, b.ip].into(),
        ..Markers::default()
    };
    let mut g = Goodput::new(0);
    // Generation 1: both join; unacknowledged for 10 s, then 100 s of training to step 100.
    let joining = State {
        generation: 1,
        members: vec![member(&a, false), member(&b, false)],
        progress: progress(0, 0),
        ..State::default()
    };
    pass(&mut g, 0, &list, &markers, &joining);
    pass(&mut g, 10_000, &list, &markers, &joining);
    let trained = State {
        members: vec![member(&a, true), member(&b, true)],
        progress: progress(100, 110_000),
        ..joining.clone()
    };
    pass(&mut g, 110_000, &list, &markers, &trained);
    // Generation 2: b warned of its loss; a paused 20 s while b leaves, and the job went back
    // to its checkpoint at step 60: 40 steps lost, at the run's 1.1 s a step, of the one member
    // that trains them again.
    let interrupted = State {
        generation: 2,
        members: vec![member(&a, false)],
        removals: vec![Removal {
            reason: "a Spot interruption notice from the queue".into(),
            ..removal(&b, Some(crate::model::Ending::Terminate))
        }],
        progress: progress(60, 130_000),
        ..State::default()
    };
    pass(&mut g, 130_000, &list, &markers, &interrupted);

    assert_eq!(g.changes.len(), 2, "{:?}", g.changes);
    let (join, leave) = (&g.changes[0], &g.changes[1]);
    assert_eq!(join.generation, 1);
    assert_eq!(join.what, "10.0.0.1, 10.0.0.2 joined");
    assert_eq!(join.paused.node_ms, 2 * 10_000);
    assert_eq!(join.cost().gpu_ms, 2 * 10_000 * 8);
    assert_eq!(leave.generation, 2);
    assert_eq!(
        leave.what,
        "10.0.0.2 left (a Spot interruption notice from the queue)"
    );
    assert_eq!(leave.at, 130_000);
    assert_eq!(leave.paused.node_ms, 20_000, "a, while b leaves");
    assert_eq!(leave.leaving.node_ms, 20_000, "b, out of the job");
    assert_eq!(leave.redone_steps, 40);
    assert_eq!(leave.redone.node_ms, 44_000);
    // At 32.77 dollars an hour per node, 20 + 20 + 44 node-seconds.
    let usd = leave.cost().micro_usd as f64 / 1e6;
    assert!((usd - 84.0 * 32.77 / 3600.0).abs() < 1e-5, "{usd}");
    // A breakdown of the buckets: every paused, leaving and redone second is some change's.
    let charged =
        |part: fn(&Change) -> Spent| -> u64 { g.changes.iter().map(|c| part(c).node_ms).sum() };
    assert_eq!(charged(|c| c.paused), g.buckets[&Bucket::Paused].node_ms);
    assert_eq!(charged(|c| c.leaving), g.buckets[&Bucket::Leaving].node_ms);
    assert_eq!(charged(|c| c.redone), g.buckets[&Bucket::Redone].node_ms);
    // Saved and read back; a window has the changes made in it.
    let back: Goodput =
        serde_json::from_str(&serde_json::to_string(&g).expect("JSON")).expect("read back");
    assert_eq!(back.changes, g.changes);
    assert_eq!(g.since(0).expect("the first mark").changes.len(), 2);
}

#[test]
fn the_newest_changes_are_kept_and_a_large_one_names_five() {
    let list: Vec<Instance> = (1..=8).map(|n| instance(n, 0)).collect();
    let markers = Markers::default();
    let mut g = Goodput::new(0);
    let mut joined = State {
        generation: 1,
        members: list.iter().map(|i| member(i, true)).collect(),
        ..State::default()
    };
    pass(&mut g, 0, &list, &markers, &joined);
    assert_eq!(
        g.changes[0].what,
        "10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5 and 3 more joined"
    );
    for n in 2..=(CHANGES_KEPT as u64 + 10) {
        joined.generation = n;
        pass(&mut g, n * 1000, &list, &markers, &joined);
    }
    assert_eq!(g.changes.len(), CHANGES_KEPT);
    assert_eq!(g.changes[0].generation, 11);
    assert_eq!(
        g.changes[CHANGES_KEPT - 1].what,
        format!(
            "generation {}, no member added or removed",
            CHANGES_KEPT + 10
        )
    );
    // A pass at the same generation, or a state without one, records nothing.
    pass(&mut g, 999_000, &list, &markers, &joined);
    assert_eq!(g.changes.len(), CHANGES_KEPT);
}

/// A replacement launched at its predecessor's warning prepares before the predecessor leaves:
/// that time is owed (and kept across a restart of dtd) until the leave, then charged to it with
/// the rest of its preparing; a worker launched for growth is charged to no change.
#[test]
fn a_replacements_preparing_is_charged_to_the_change_its_predecessor_left_with() {
    let (a, b) = (instance(1, 0), instance(2, 0));
    let (fresh, grown) = (instance(3, 20_000), instance(4, 20_000));
    let markers = Markers {
        success: [a.ip, b.ip].into(),
        ..Markers::default()
    };
    let mut g = Goodput::new(0);
    let both = State {
        generation: 1,
        members: vec![member(&a, true), member(&b, true)],
        ..State::default()
    };
    pass(&mut g, 0, &[a.clone(), b.clone()], &markers, &both);
    // b warned at 20 s, its replacement launched then (and one for growth); b leaves at 50 s.
    let warned = State {
        launched_for: [(
            fresh.id.clone(),
            crate::model::LaunchedFor {
                replaces: b.id.clone(),
                at: 20_000,
            },
        )]
        .into(),
        ..both.clone()
    };
    let all = [a.clone(), b.clone(), fresh.clone(), grown.clone()];
    pass(&mut g, 20_000, &all, &markers, &warned);
    pass(&mut g, 40_000, &all, &markers, &warned);
    assert_eq!(g.owed[&fresh.id].node_ms, 20_000, "prepared before b left");
    let mut g: Goodput =
        serde_json::from_str(&serde_json::to_string(&g).expect("JSON")).expect("read back");
    let left = State {
        generation: 2,
        members: vec![member(&a, true)],
        removals: vec![removal(&b, Some(crate::model::Ending::Terminate))],
        ..warned.clone()
    };
    pass(&mut g, 50_000, &all, &markers, &left);
    pass(&mut g, 80_000, &all, &markers, &left);
    let leave = g.changes.last().expect("b's leave");
    assert_eq!(leave.replaced, std::slice::from_ref(&b.id));
    assert_eq!(
        leave.replacing.node_ms, 60_000,
        "its preparing, before and after"
    );
    assert!(g.owed.is_empty(), "{:?}", g.owed);
    assert_eq!(
        g.buckets[&Bucket::Preparing].node_ms,
        2 * 60_000,
        "the grown worker prepared as long, charged to no change"
    );
    let (paused, leaving) = (leave.paused.node_ms, leave.leaving.node_ms);
    assert_eq!(leave.cost().node_ms, paused + leaving + 60_000);
    // A replacement gone before its predecessor left owes nothing.
    let mut g = Goodput::new(0);
    pass(&mut g, 0, &[a.clone(), b.clone()], &markers, &both);
    pass(&mut g, 20_000, &all, &markers, &warned);
    pass(&mut g, 30_000, &[a.clone(), b.clone()], &markers, &warned);
    assert!(g.owed.is_empty(), "{:?}", g.owed);
}
