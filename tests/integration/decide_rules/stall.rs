//! Stalled jobs: the job's step, from its progress file, standing still for `job.stall.after`.

use crate::support::world::*;

const STALL_AFTER: Millis = 600_000;

fn stall_rules() -> Rules {
    Rules {
        stall_after_ms: Some(STALL_AFTER),
        ..rules()
    }
}

/// A pass whose state goes through its JSON form, as a restarted dtd would read it.
fn pass_restarted(r: &Rules, w: &mut World, state: &State, now: Millis) -> Plan {
    let mut plan = pass(r, w, state, now);
    let json = serde_json::to_string(&plan.state).unwrap();
    plan.state = serde_json::from_str(&json).unwrap();
    plan
}

#[test]
fn a_step_standing_still_is_stalled_once_and_cleared_when_it_moves() {
    let r = stall_rules();
    let mut w = World::default();
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &State::default(), 0);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER - 1);
    assert!(
        kinds(&plan).is_empty(),
        "not yet: {:?}",
        plan.outcome.events
    );

    let plan = pass_restarted(&r, &mut w, &plan.state, STALL_AFTER + 3_000);
    assert_eq!(kinds(&plan), ["stalled"]);
    let msg = &plan.outcome.events[0].message;
    assert_eq!(
        msg,
        "the job's step 5 has not advanced for 10m 3s (since 1970-01-01T00:00:00Z): stalled; no node \
         named (no agent reports a stopped training process)"
    );
    let stalled = StallChange {
        stalled: true,
        step: 5,
        since: 0,
    };
    assert_eq!(plan.outcome.stall, Some(stalled));
    assert!(plan.state.progress.as_ref().unwrap().stalled);
    // Journaled once, also across a restart (the state remembers it).
    let plan = pass_restarted(&r, &mut w, &plan.state, STALL_AFTER * 2);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());

    at_step(&mut w, 6);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 3);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
    assert_eq!(
        plan.outcome.events[0].message,
        "the job's step advanced to 6; it was stalled at step 5 for 30m: stall cleared"
    );
    let cleared = StallChange {
        stalled: false,
        step: 6,
        since: 0,
    };
    assert_eq!(plan.outcome.stall, Some(cleared));
    // Timed again from the step that moved: a second stall is a new one.
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 4 - 1);
    assert!(kinds(&plan).is_empty());
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 4);
    assert_eq!(kinds(&plan), ["stalled"]);
    assert_eq!(plan.outcome.stall.map(|s| s.since), Some(STALL_AFTER * 3));
}

#[test]
fn a_step_that_goes_back_is_progress() {
    // A job restarted from its checkpoint reports a lower step: it trains.
    let r = stall_rules();
    let mut w = World::default();
    at_step(&mut w, 500);
    let plan = pass(&r, &mut w, &State::default(), 0);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER);
    assert_eq!(kinds(&plan), ["stalled"]);
    at_step(&mut w, 480);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER + 1);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
}

#[test]
fn a_job_that_writes_no_progress_file_never_stalls() {
    let r = stall_rules();
    let mut w = World::default();
    let mut state = State::default();
    for now in [0, STALL_AFTER, STALL_AFTER * 10] {
        let plan = pass(&r, &mut w, &state, now);
        assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
        assert_eq!(plan.state.progress, None);
        state = plan.state;
    }
    // A stalled job whose file disappears stopped reporting: nothing is known, the stall clears.
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &state, 0);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER);
    assert_eq!(kinds(&plan), ["stalled"]);
    w.progress = None;
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER + 1);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
    assert!(plan.outcome.events[0]
        .message
        .starts_with("the job no longer writes its progress file"));
    assert_eq!(plan.state.progress, None);
}

#[test]
fn an_unreadable_progress_file_neither_stalls_nor_clears() {
    let r = stall_rules();
    let mut w = World::default();
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &State::default(), 0);
    w.progress = Some(Err("/efs/progress is a FIFO, not a regular file".into()));
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 2);
    assert!(kinds(&plan).is_empty(), "nothing concluded from it");
    // The clock kept running on the last step read: readable again and unchanged, it stalled.
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 2 + 1);
    assert_eq!(kinds(&plan), ["stalled"]);
    w.progress = Some(Err("unreadable".into()));
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 3);
    assert!(kinds(&plan).is_empty(), "a stall shown stays shown");
    assert!(plan.state.progress.as_ref().unwrap().stalled);
}

#[test]
fn a_job_without_workers_is_not_stalled() {
    let without = Rules {
        base_hosts: Vec::new(),
        min: 0,
        ..stall_rules()
    };
    let mut w = World::default();
    at_step(&mut w, 5);
    let mut state = State::default();
    for now in [0, STALL_AFTER, STALL_AFTER * 5] {
        let plan = pass(&without, &mut w, &state, now);
        assert!(kinds(&plan).is_empty(), "{:?}", plan.outcome.events);
        state = plan.state;
    }
    // The clock starts when workers come back, not when the step last moved.
    let with = stall_rules();
    let plan = pass(&with, &mut w, &state, STALL_AFTER * 6 - 1);
    assert!(kinds(&plan).is_empty());
    let plan = pass(&with, &mut w, &plan.state, STALL_AFTER * 6);
    assert_eq!(kinds(&plan), ["stalled"]);
    // A stalled job that loses its workers is no longer stalled: it waits for them.
    let plan = pass(&without, &mut w, &plan.state, STALL_AFTER * 7);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
    assert!(plan.outcome.events[0]
        .message
        .starts_with("the job has no workers to train on"));
}

#[test]
fn members_are_workers_enough() {
    let r = Rules {
        base_hosts: Vec::new(),
        min: 0,
        ..stall_rules()
    };
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &State::default(), 0);
    assert_eq!(hosts(&plan), ["10.0.1.1"]);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER);
    assert_eq!(kinds(&plan), ["stalled"]);
}

/// The step is still followed (the goodput ledger's redone time, and in-place pauses), but no
/// stall is journaled, and one shown goes with the config, unjournaled.
#[test]
fn without_stall_detection_nothing_is_timed() {
    let r = rules();
    let mut w = World::default();
    at_step(&mut w, 5);
    let stalled = State {
        progress: Some(JobProgress {
            step: 5,
            advanced_at: 0,
            stalled: true,
            held_back: String::new(),
            run: None,
            generation: None,
        }),
        ..State::default()
    };
    let plan = pass(&r, &mut w, &stalled, STALL_AFTER * 10);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
    let known = plan.state.progress.clone().expect("the step followed");
    assert_eq!(
        (known.step, known.stalled),
        (5, false),
        "the stall gone with the config"
    );
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 100);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
    at_step(&mut w, 3);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 101);
    let known = plan.state.progress.expect("the step followed");
    assert_eq!(
        (known.step, known.advanced_at),
        (3, STALL_AFTER * 101),
        "a step gone back is followed too (redone time)"
    );
}

#[test]
fn a_state_written_before_stall_detection_still_reads() {
    let state: State = serde_json::from_str(r#"{"generation": 3, "members": [], "removals": []}"#)
        .expect("an older state file");
    assert_eq!((state.generation, state.progress), (3, None));
}
