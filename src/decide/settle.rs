//! What act reported, settled in the state: the notification the job got is no longer
//! pending, a removal whose ending AWS accepted is ended (never sent again), a replacement
//! launched is no longer owed and a refused one waits before it is sent again. Act changes no
//! state; every transition and retry time is decided here, at the daemon's `now`.

use super::{removal, Rules};
use crate::model::*;

/// Returns the events the settling makes (`terminated`, `capacity_unavailable`).
pub fn settle(rules: &Rules, state: &mut State, applied: &Applied, now: Millis) -> Vec<Event> {
    if applied.delivered.is_some() && state.pending_notification == applied.delivered {
        state.pending_notification = None;
    }
    for (token, launched) in &applied.launches {
        match launched {
            Ok(launched) => {
                // A group's launch is its own: the instance it makes is not known here.
                let ours = |r: &Replacement| r.token == *token && r.group.is_none();
                if let Some(r) = state.replacements.iter().find(|r| ours(r)) {
                    let replaces = r.replaces.clone();
                    let l = LaunchedFor { replaces, at: now };
                    state.launched_for.insert(launched.clone(), l);
                }
                state.replacements.retain(|r| r.token != *token);
            }
            Err(e) => {
                for r in state.replacements.iter_mut().filter(|r| r.token == *token) {
                    r.retry_at = now.saturating_add(LAUNCH_RETRY_MS);
                    r.last_error = Some(e.to_string());
                }
            }
        }
    }
    let mut events = cool_down(rules, state, applied, now);
    for (id, call) in &applied.ended {
        events.extend(removal::confirm(state, std::slice::from_ref(id), call, now));
    }
    events
}

/// A choice EC2 had no capacity for is skipped for the cool-down, journaled once each time.
fn cool_down(rules: &Rules, state: &mut State, applied: &Applied, now: Millis) -> Vec<Event> {
    let until = now.saturating_add(rules.capacity_cool_down_ms);
    let mut events = Vec::new();
    for (choice, code, message) in &applied.no_capacity {
        let text = skip(state, choice.name(), code, message, until);
        events.push(Event::new(now, EventKind::CapacityUnavailable, text));
    }
    events
}

/// Skips the choice named `name` until `until`; returns what the journal says of it.
pub(super) fn skip(
    state: &mut State,
    name: String,
    code: &str,
    message: &str,
    until: Millis,
) -> String {
    let message: String = message.chars().take(300).collect();
    let text = format!(
        "no capacity for {name}: {code} ({message}); skipped until {}, the next choice is tried",
        rfc3339(until)
    );
    let u = Unavailable {
        until,
        code: code.to_string(),
        message,
    };
    state.no_capacity.insert(name, u);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// Two capacity choices, skipped for 90 s when refused.
    fn rules() -> Rules {
        let cfg = Config::parse(
            "cluster: demo\nworkers:\n  launch_template: lt-0abc\n  max: 4\n  capacity:\n    \
             cool_down: 90s\n    choices:\n      - { instance_type: p5.48xlarge, gpus: 8 }\n      \
             - { instance_type: p4d.24xlarge, gpus: 8 }\nshared_dir: /efs\n",
        )
        .expect("config");
        Rules::from_config(&cfg, Some("lt-0abc".into()))
    }

    #[test]
    fn a_choice_without_capacity_is_skipped_for_the_cool_down_and_journaled() {
        let mut state = State::default();
        let p5 = rules().capacity[0].clone();
        let applied = Applied {
            no_capacity: vec![(
                p5,
                "InsufficientInstanceCapacity".into(),
                "We currently do not have sufficient p5.48xlarge capacity".into(),
            )],
            ..Applied::default()
        };
        let events = settle(&rules(), &mut state, &applied, 1_000_000);
        let u = &state.no_capacity["p5.48xlarge"];
        assert_eq!(
            (u.until, u.code.as_str()),
            (1_090_000, "InsufficientInstanceCapacity")
        );
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventKind::CapacityUnavailable);
        assert!(
            events[0].message.contains("no capacity for p5.48xlarge"),
            "{:?}",
            events[0]
        );
    }

    fn owed(token: &str) -> Replacement {
        Replacement {
            replaces: "i-0old".into(),
            group: None,
            because: Replaced::Unhealthy,
            token: token.into(),
            queued_at: 0,
            retry_at: 0,
            last_error: None,
        }
    }

    #[test]
    fn a_refused_launch_waits_a_minute_from_now_and_a_launched_one_is_owed_no_more() {
        let detached = Replacement {
            replaces: "i-0ingroup".into(),
            group: Some("workers".into()),
            ..owed("dt-replace-g")
        };
        let mut state = State {
            replacements: vec![owed("dt-replace-a"), owed("dt-replace-b"), detached],
            ..State::default()
        };
        let applied = Applied {
            launches: vec![
                ("dt-replace-a".into(), Ok("i-0new".into())),
                (
                    "dt-replace-b".into(),
                    Err(LaunchFailed::Refused("InsufficientInstanceCapacity".into())),
                ),
                ("dt-replace-g".into(), Ok("workers".into())),
            ],
            ..Applied::default()
        };
        let now = 1_000_000;
        assert!(settle(&rules(), &mut state, &applied, now).is_empty());
        let replaces = "i-0old".to_string();
        assert_eq!(
            state.launched_for,
            [("i-0new".to_string(), LaunchedFor { replaces, at: now })].into(),
            "the ledger learns what the launch replaced; a group's launch names no instance"
        );
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
        settle(&rules(), &mut state, &old, 0);
        assert_eq!(state.pending_notification, Some(n(8)));
        let now = Applied {
            delivered: Some(n(8)),
            ..Applied::default()
        };
        settle(&rules(), &mut state, &now, 0);
        assert_eq!(state.pending_notification, None);
    }
}
