//! Telling someone the job stalled, or moved again: the stall command (`job.stall.command`, or
//! the `job.notify` command) with `DT_EVENT=stalled` or `stall_cleared`, `DT_STEP` and
//! `DT_STALLED_SINCE` in its environment.
//!
//! Run once per change, when it is journaled: a failure is logged and shown in the status, not
//! retried (the journal line and its alerts already say it; a page sent twice helps nobody).

use super::hook::{self, HookError};
use crate::model::{rfc3339, StallChange};

/// The command's environment for `change`.
pub fn env(change: &StallChange) -> Vec<(&'static str, String)> {
    vec![
        ("DT_EVENT", change.kind().as_str().to_string()),
        ("DT_STEP", change.step.to_string()),
        ("DT_STALLED_SINCE", rfc3339(change.since).to_string()),
    ]
}

/// Runs `argv` for `change`; `Ok` says what ran.
pub async fn run(argv: &[String], change: &StallChange) -> Result<String, HookError> {
    let ran = hook::run(argv, &env(change)).await?;
    Ok(format!("{} ({}, step {})", ran, change.kind(), change.step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_the_event_the_step_and_since_when() {
        let change = StallChange {
            stalled: true,
            step: 1234,
            since: 1_795_508_201_000,
        };
        assert_eq!(
            env(&change),
            [
                ("DT_EVENT", "stalled".to_string()),
                ("DT_STEP", "1234".to_string()),
                ("DT_STALLED_SINCE", "2026-11-24T08:16:41Z".to_string()),
            ]
        );
        let cleared = StallChange {
            stalled: false,
            ..change
        };
        assert_eq!(env(&cleared)[0].1, "stall_cleared");
    }
}
