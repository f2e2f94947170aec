//! The properties only mean something if the random runs reach the rules they guard.

use std::collections::BTreeMap;

use proptest::strategy::Strategy;

use super::support::{by_id, run, scenario};

/// The properties only mean something if the random runs reach the rules they guard: over a
/// fixed sample of scenarios, every kind of decision must happen a fair number of times.
#[test]
fn the_random_runs_reach_every_rule() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    for _ in 0..256 {
        let sc = scenario().new_tree(&mut runner).unwrap().current();
        run(&sc, |p| {
            let mut count =
                |what: &'static str, yes: bool| *seen.entry(what).or_default() += yes as usize;
            count("pass", true);
            count("terminated", !p.plan.outcome.terminate().is_empty());
            count("partial view", !p.all_sources_ok());
            count("targeted view", sc.targeted && p.snap.instances.is_ok());
            if let (Ok(view), Ok(all)) = (&p.snap.instances, &p.complete.instances) {
                count("out-of-date view", *view != by_id(all));
            }
            count(
                "at max",
                p.plan.outcome.rows.iter().any(|w| {
                    w.waiting_for
                        .as_deref()
                        .is_some_and(|s| s.starts_with("room under max"))
                }),
            );
            for kind in [
                "preparing",
                "prepare_failed",
                "joined",
                "join_acknowledged",
                "removal_queued",
                "acknowledged",
                "ack_timeout",
                "removal_held",
                "removal_refused",
                "removal_cancelled",
                "gone",
                "interrupted",
                "no_mount_target",
                "unhealthy",
            ] {
                count(kind, p.plan.outcome.events.iter().any(|e| e.kind == kind));
            }
            Ok(())
        })
        .unwrap();
    }
    println!("passes reaching each decision: {seen:?}");
    for (what, n) in &seen {
        assert!(*n >= 10, "only {n} passes reached `{what}`: {seen:?}");
    }
}
