//! What act reported, settled in the state: the notification the job got is no longer
//! pending, a removal whose ending AWS accepted is ended (never sent again), a replacement
//! launched is no longer owed and a refused one waits before it is sent again. Act changes no
//! state; every transition and retry time is decided here, at the daemon's `now`.

use super::removal;
use crate::model::*;

/// How long a refused replacement launch waits before it is sent again.
pub const LAUNCH_RETRY_MS: Millis = 60_000;

/// Returns the events the settling makes (`terminated`).
pub fn settle(state: &mut State, applied: &Applied, now: Millis) -> Vec<Event> {
    if applied.delivered.is_some() && state.pending_notification == applied.delivered {
        state.pending_notification = None;
    }
    for (token, launched) in &applied.launches {
        match launched {
            Ok(_) => state.replacements.retain(|r| r.token != *token),
            Err(e) => {
                for r in state.replacements.iter_mut().filter(|r| r.token == *token) {
                    r.retry_at = now.saturating_add(LAUNCH_RETRY_MS);
                    r.last_error = Some(e.clone());
                }
            }
        }
    }
    let mut events = Vec::new();
    for (id, call) in &applied.ended {
        events.extend(removal::confirm(state, std::slice::from_ref(id), call, now));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owed(token: &str) -> Replacement {
        Replacement {
            replaces: "i-0old".into(),
            token: token.into(),
            queued_at: 0,
            retry_at: 0,
            last_error: None,
        }
    }

    #[test]
    fn a_refused_launch_waits_a_minute_from_now_and_a_launched_one_is_owed_no_more() {
        let mut state = State {
            replacements: vec![owed("dt-replace-a"), owed("dt-replace-b")],
            ..State::default()
        };
        let applied = Applied {
            launches: vec![
                ("dt-replace-a".into(), Ok("i-0new".into())),
                (
                    "dt-replace-b".into(),
                    Err("InsufficientInstanceCapacity".into()),
                ),
            ],
            ..Applied::default()
        };
        let now = 1_000_000;
        assert!(settle(&mut state, &applied, now).is_empty());
        assert_eq!(state.replacements.len(), 1);
        let r = &state.replacements[0];
        assert_eq!(
            (r.token.as_str(), r.retry_at, r.last_error.as_deref()),
            (
                "dt-replace-b",
                now + 60_000,
                Some("InsufficientInstanceCapacity")
            )
        );
    }

    #[test]
    fn only_the_notification_still_pending_is_cleared() {
        let n = |generation| Notification {
            generation,
            added: Vec::new(),
            removed: Vec::new(),
            notices: Vec::new(),
        };
        let mut state = State {
            pending_notification: Some(n(8)),
            ..State::default()
        };
        let old = Applied {
            delivered: Some(n(7)),
            ..Applied::default()
        };
        settle(&mut state, &old, 0);
        assert_eq!(state.pending_notification, Some(n(8)));
        let now = Applied {
            delivered: Some(n(8)),
            ..Applied::default()
        };
        settle(&mut state, &now, 0);
        assert_eq!(state.pending_notification, None);
    }
}
