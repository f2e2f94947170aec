//! The in-place strategy's quorum changes, from the job's progress file: each journaled once
//! (also across a restart), about the worker when one node moved, with what it cost.

use crate::support::world::*;
use dt::protocol::progress::{QuorumChangeLine, QuorumLine};

fn change(quorum: u64, step: u64, joined: &[&str], left: &[&str]) -> QuorumChangeLine {
    QuorumChangeLine {
        quorum,
        step,
        nodes: 2,
        joined: joined.iter().map(|a| ip(a)).collect(),
        left: left.iter().map(|a| ip(a)).collect(),
        lost_steps: quorum % 2,
        paused_s: 0.6,
        at: format!("2026-11-27T02:00:0{quorum}Z"),
    }
}

fn report(w: &mut World, step: u64, changes: Vec<QuorumChangeLine>) {
    w.progress = Some(Ok(Progress {
        step,
        time: None,
        checkpoint_step: None,
        quorum: Some(QuorumLine {
            quorum: changes.last().map(|c| c.quorum),
            nodes: 2,
            changes,
        }),
        run: None,
        generation: None,
    }));
}

#[test]
fn each_quorum_change_is_journaled_once_about_the_node_that_moved() {
    let (r, mut w, st) = two_members();
    let one = change(3, 120, &["10.0.1.1"], &[]);
    report(&mut w, 130, vec![one.clone()]);
    let plan = pass(&r, &mut w, &st, 1_000);
    let events: Vec<&Event> = (plan.outcome.events.iter())
        .filter(|e| e.kind == EventKind::QuorumChanged)
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].instance.as_deref(), Some("i-1"));
    assert_eq!(
        events[0].message,
        "torchft's quorum 3: 10.0.1.1 joined at step 120 (2 node(s)); 1 step(s) lost, trained again after 0.60s"
    );
    let cost = events[0].quorum.unwrap();
    assert_eq!((cost.lost_steps, cost.paused_ms, cost.step), (1, 600, 120));

    // The file repeats it with a newer one; a dtd started again journals only the newer.
    let two = change(4, 300, &["10.0.1.2"], &["10.0.1.1", "10.0.9.9"]);
    report(&mut w, 310, vec![one, two]);
    let plan = pass(&r, &mut w, &reloaded(&plan.state), 2_000);
    let events: Vec<&Event> = (plan.outcome.events.iter())
        .filter(|e| e.kind == EventKind::QuorumChanged)
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].instance, None, "three nodes moved: about the job");
    assert!(
        events[0]
            .message
            .contains("10.0.1.2 joined, 10.0.1.1, 10.0.9.9 left at step 300"),
        "{}",
        events[0].message
    );
    let again = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(count_kind(&again, "quorum_changed"), 0);
}
