//! What a dtd killed between two writes left half-recorded, put right before the first pass.
//!
//! A pass journals its events, then saves the state they explain. A dtd killed between the two
//! leaves a removal whose ending AWS confirmed, and whose `terminated` line is in the journal,
//! still `Ending` in the state. Decide journals `terminated` for an `Ending` removal whose
//! instance is gone (the line a dtd killed before journaling never wrote), so such a removal
//! is confirmed here from the journal: its line is not written twice.

use std::path::Path;

use crate::act::journal;
use crate::model::*;

/// Confirms the `Ending` removals whose `terminated` line the journal already holds.
pub(super) fn confirm_journaled_endings(state: &mut State, journal_path: &Path) {
    let ending = |r: &Removal| matches!(r.stage, Stage::Ending(_));
    if !state.removals.iter().any(ending) {
        return;
    }
    let wanted = |e: &Event| {
        e.kind == EventKind::Terminated
            && (state.removals.iter()).any(|r| ending(r) && journaled_for(e, r))
    };
    let lines = match journal::read_matching(journal_path, wanted) {
        Ok((lines, _)) => lines,
        Err(e) => {
            tracing::warn!(
                journal = %journal_path.display(),
                "cannot read the journal for removals already journaled as terminated: {e}"
            );
            return;
        }
    };
    for r in state.removals.iter_mut().filter(|r| ending(r)) {
        if lines.iter().any(|e| journaled_for(e, r)) {
            tracing::info!(instance = %r.id, "its termination is journaled: confirmed");
            r.stage.confirm();
        }
    }
}

/// The `terminated` line of this removal: the same instance, in the same generation.
fn journaled_for(e: &Event, r: &Removal) -> bool {
    e.instance.as_deref() == Some(r.id.as_str()) && e.generation == Some(r.generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::JournalConfig;

    fn ending(id: &str, generation: u64) -> Removal {
        Removal {
            id: id.into(),
            ip: "10.0.0.4".parse().unwrap(),
            generation,
            queued_at: 0,
            deadline: 0,
            log_mark: 0,
            reason: "elastic tag deleted".into(),
            stage: Stage::Ending(Ending::Terminate),
        }
    }

    fn terminated(id: &str, generation: u64) -> Event {
        Event {
            instance: Some(id.into()),
            generation: Some(generation),
            ..Event::new(5, EventKind::Terminated, format!("TerminateInstances {id}"))
        }
    }

    #[test]
    fn an_ending_already_journaled_as_terminated_is_confirmed_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let lines = [terminated("i-a", 3), terminated("i-b", 2)];
        journal::append(&path, &lines, JournalConfig::default()).unwrap();
        let mut state = State {
            removals: vec![ending("i-a", 3), ending("i-b", 3), ending("i-c", 3)],
            ..State::default()
        };
        confirm_journaled_endings(&mut state, &path);
        let stages: Vec<bool> = (state.removals.iter())
            .map(|r| matches!(r.stage, Stage::Ended))
            .collect();
        // i-b's line is of another generation's removal; i-c has none.
        assert_eq!(stages, [true, false, false]);
    }

    #[test]
    fn without_a_journal_nothing_is_confirmed() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State {
            removals: vec![ending("i-a", 3)],
            ..State::default()
        };
        confirm_journaled_endings(&mut state, &dir.path().join("events.jsonl"));
        assert!(matches!(state.removals[0].stage, Stage::Ending(_)));
    }
}
