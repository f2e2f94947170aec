//! The generation counter and the journal: the generation grows by one whatever the ack file
//! says, and a beginning, a failure or a join acknowledgement is journaled once.

use std::collections::BTreeSet;

use proptest::prelude::*;

use dt::model::*;

use super::support::{config, run, scenario};

proptest! {
    #![proptest_config(config())]

    /// Whatever the ack file holds, the generation only ever grows by one per pass that changes
    /// the membership (never wraps, never jumps to what a worker wrote), and the ack file counts
    /// only up to what dtd wrote.
    #[test]
    fn the_generation_grows_by_one_whatever_the_ack_file_says(sc in scenario()) {
        run(&sc, |p| {
            let (before, after) = (p.prev.generation, p.plan.state.generation);
            if after != before && after != before + 1 {
                return p.fail(format!("generation {before} became {after}"));
            }
            let claimed = p.snap.acks.as_ref().ok().and_then(|a| a.generation);
            let refused = p.plan.outcome.events.iter().any(|e| e.kind == EventKind::AckRefused);
            if claimed.is_some_and(|g| g > before) && p.plan.outcome.refused.is_empty() {
                return p.fail(format!("ack {claimed:?} above generation {before} not shown as refused"));
            }
            if refused && claimed.is_none_or(|g| g <= before) {
                return p.fail(format!("ack {claimed:?} refused at generation {before}"));
            }
            Ok(())
        })?;
    }

    /// A worker's beginning (`preparing`) and its prepare-data failure (`prepare_failed`) are
    /// journaled at most once per instance, however many passes read the same tags and markers;
    /// the job's acknowledgement of a join (`join_acknowledged`) once per join: only for a
    /// member not yet acknowledged.
    #[test]
    fn beginnings_failures_and_join_acknowledgements_are_journaled_once(sc in scenario()) {
        let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
        run(&sc, |p| {
            for e in &p.plan.outcome.events {
                let id = e.instance.clone().unwrap_or_default();
                if e.kind == "join_acknowledged" {
                    let waiting = p.prev.members.iter().any(|m| m.id == id && !m.acked);
                    if !waiting {
                        return p.fail(format!("`join_acknowledged` for {id}, not a member waiting for it"));
                    }
                } else if (e.kind == "preparing" || e.kind == "prepare_failed")
                    && !seen.insert((e.kind.to_string(), id.clone()))
                {
                    return p.fail(format!("`{}` journaled again for {id}", e.kind));
                }
            }
            Ok(())
        })?;
    }
}
