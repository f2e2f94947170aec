//! New group workers: the launching hook holds one in `Pending:Wait` until its data is ready
//! (CONTINUE) or it failed or never reported (ABANDON: the group replaces it); a group worker
//! whose prepare-data failed is replaced; replacing stops after `max_prepare_failures` in a row
//! until `dtctl resume`.

use super::draft::Draft;
use super::inputs::Inputs;
use super::{group, mount_targets, prepare_failed, removal};
use crate::model::*;

/// A group instance not in service: never in the host files. A new one held by the launching
/// hook waits for its prepare-data (see `held_at_launch`).
pub(super) fn outside_service(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    ready: bool,
    failed: Option<&String>,
) {
    let state = group::lifecycle(p, at).map_or("", |m| m.lifecycle_state.as_str());
    let hook = p.group.and_then(|g| g.launching_hook.as_ref());
    match (state, hook) {
        ("Pending:Wait", Some(hook)) => held_at_launch(p, st, out, at, hook, ready, failed),
        _ => {
            let why = format!("lifecycle state {state}: not in the job");
            let status = failed.map(|_| WorkerStatus::PrepareFailed);
            out.view(at, status.or(Some(WorkerStatus::Preparing)), Some(why));
        }
    }
}

/// Let in once its data is ready; abandoned (the group replaces it) when prepare-data failed
/// or never reported within the prepare timeout; kept alive by heartbeats meanwhile.
///
/// The timeout runs from the first pass that saw the instance in `Pending:Wait`, remembered
/// in the state, not from its launch time: the hook's own timeout starts when the instance
/// enters the wait state ("How lifecycle hooks work", Amazon EC2 Auto Scaling User Guide),
/// which can be long after launch (an instance from a warm pool, or attached to the group).
fn held_at_launch(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    hook: &Hook,
    ready: bool,
    failed: Option<&String>,
) {
    let id = p.list[at].id.as_str();
    let wait = st.pending_mut(id).wait_at_launch(p.now).clone();
    let why = match failed {
        Some(f) => f.clone(),
        None => never_reported_why(p, at),
    };
    let failing = Failing {
        at,
        hook,
        why: &why,
    };
    if wait.abandoned {
        // Resent until the group moves it on: a completion that failed is retried.
        out.complete(id, &hook.name, HookResult::Abandon);
        let why = format!("the group to replace it: {why}");
        out.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
    } else if ready && p.can_join() {
        out.complete(id, &hook.name, HookResult::Continue);
        let why = Some("the group to put it in service".to_string());
        out.view(at, Some(WorkerStatus::Preparing), why);
    } else if failed.is_some() {
        abandon_or_hold(p, st, out, &failing, true);
    } else if p.now.saturating_sub(wait.since) >= p.rules.prepare_timeout_ms && p.can_remove() {
        never_reported(p, st, out, &failing, wait.timed_out);
    } else {
        heartbeat(p, st, out, id, hook);
        let left = (wait.since + p.rules.prepare_timeout_ms).saturating_sub(p.now);
        let marker = format!("prepare-data marker prepare_data_success_{}", p.list[at].ip);
        let why = format!(
            "{} (held in Pending:Wait by {}; abandoned if none within {})",
            mount_targets::missing(p, st, out, at).unwrap_or(marker),
            hook.name,
            span_left(left)
        );
        out.view(at, Some(WorkerStatus::Preparing), Some(why));
    }
}

fn never_reported_why(p: &Inputs, at: usize) -> String {
    let limit = span_left(p.rules.prepare_timeout_ms);
    format!(
        "prepare-data never reported within {limit} (no marker from {})",
        p.list[at].ip
    )
}

/// A worker held in `Pending:Wait` by the launching hook that failed, and why.
struct Failing<'a> {
    at: usize,
    hook: &'a Hook,
    why: &'a str,
}

/// Journaled once, then treated like a prepare-data failure: the user data died before the
/// agent could write a marker, and would die the same way on every replacement.
fn never_reported(p: &Inputs, st: &mut State, out: &mut Draft, f: &Failing, journaled: bool) {
    let Failing { at, hook, why } = *f;
    let (id, ip) = p.who(at);
    change_wait(st, id, |w| w.timed_out = true);
    let abandoning = replacing(p, st, out);
    if !journaled {
        let then = match abandoning {
            true => "abandoned; the group replaces it",
            false => "held for a person: replacing failed workers has stopped",
        };
        let msg = format!("{ip} held in Pending:Wait by {}: {why}; {then}", hook.name);
        out.event(
            p,
            EventKind::PrepareNeverReported,
            Some((id, ip)),
            None,
            msg,
        );
    }
    abandon_or_hold(p, st, out, f, false);
}

/// Abandons a worker that failed, counted once; past `max_prepare_failures` in a row it is
/// held (heartbeats go on) for a person, like any failed group worker. `marker`: it failed by
/// its failure marker (journaled here), rather than by never reporting (journaled already).
fn abandon_or_hold(p: &Inputs, st: &mut State, out: &mut Draft, f: &Failing, marker: bool) {
    let Failing { at, hook, why } = *f;
    let id = p.list[at].id.as_str();
    if let Some(held) = held_why(p, st, out, why) {
        if marker && p.can_remove() {
            prepare_failed::journal(p, st, out, at, why, HELD);
        }
        heartbeat(p, st, out, id, hook);
        out.view(at, Some(WorkerStatus::PrepareFailed), Some(held));
        return;
    }
    if marker {
        let then = format!(
            "abandoned in Pending:Wait by {}; the group replaces it",
            hook.name
        );
        prepare_failed::journal(p, st, out, at, why, &then);
    }
    count_failure(p, st, out, at, why);
    change_wait(st, id, |w| w.abandoned = true);
    out.complete(id, &hook.name, HookResult::Abandon);
    let why = format!("the group to replace it: {why}");
    out.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
}

/// What happens to a failed group worker once replacing has stopped.
const HELD: &str =
    "held for a person: replacing failed workers has stopped (`dtctl resume` re-arms it)";

/// What a failed worker waits for when it is not replaced now: a complete view, or a person
/// once replacing has stopped. `None`: replace it.
fn held_why(p: &Inputs, st: &mut State, out: &mut Draft, why: &str) -> Option<String> {
    if !p.can_remove() {
        return Some(format!("a complete view to replace it: {why}"));
    }
    if !replacing(p, st, out) {
        let limit = p.rules.max_prepare_failures;
        return Some(format!("a person: {why}; replacing stopped after {limit} failures in a row, `dtctl resume` re-arms it"));
    }
    None
}

/// Keeps a long prepare-data from running into the launching hook's timeout (ABANDON).
fn heartbeat(p: &Inputs, st: &mut State, out: &mut Draft, id: &str, hook: &Hook) {
    if st
        .pending_mut(id)
        .heartbeat_due(p.now, hook.heartbeat_timeout_ms / 2)
    {
        out.heartbeat(id, &hook.name);
    }
}

fn change_wait(st: &mut State, id: &str, change: impl FnOnce(&mut LaunchWait)) {
    if let Some(w) = st.pending.get_mut(id).and_then(|w| w.launch_wait.as_mut()) {
        change(w);
    }
}

/// Forgets heartbeat times and waits of instances no longer held by the launching hook.
pub(super) fn prune(p: &Inputs, st: &mut State) {
    let Some(g) = p.group else { return };
    let held = |id: &String| {
        (g.instances.get(id)).is_some_and(|m| m.lifecycle_state == LifecycleState::PendingWait)
    };
    for (id, w) in st.pending.iter_mut() {
        if !held(id) {
            w.launch_ended();
        }
    }
}

/// Replacing stops after `max_prepare_failures` in a row, until `dtctl resume`.
fn replacing(p: &Inputs, st: &mut State, out: &mut Draft) -> bool {
    if let Some(at) = p.resume.filter(|t| Some(*t) > st.resumed_at) {
        st.resumed_at = Some(at);
        if st.prepare_failures > 0 {
            let msg = format!(
                "replacing failed workers re-armed by dtctl resume after {} failures",
                st.prepare_failures
            );
            out.event(p, EventKind::Resumed, None, None, msg);
        }
        st.prepare_failures = 0;
    }
    st.prepare_failures < p.rules.max_prepare_failures
}

/// `why` is the whole reason, e.g. "prepare-data failed (exit 3)", shown by `dtctl status`
/// once replacing stops. Reaching the limit is journaled once: the count only grows while
/// replacing, and `dtctl resume` starts it again from zero.
fn count_failure(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, why: &str) {
    st.prepare_failures += 1;
    let last = format!("{}: {why}", p.list[at].ip);
    if st.prepare_failures == p.rules.max_prepare_failures {
        let msg = format!(
            "replacing failed group workers stopped after {} prepare-data failures in a row \
             (the last: {last}); `dtctl resume` re-arms it",
            st.prepare_failures
        );
        out.event(p, EventKind::ReplacingStopped, None, None, msg);
    }
    st.last_prepare_failure = Some(last);
}

/// A group worker whose prepare-data failed is terminated and the group replaces it,
/// unless too many failed in a row: then it is left for a person.
pub(super) fn replace_failed(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, why: &str) {
    let failed = format!("prepare-data failed ({why})");
    if let Some(held) = held_why(p, st, out, &failed) {
        if p.can_remove() {
            prepare_failed::journal(p, st, out, at, &failed, HELD);
        }
        out.view(at, Some(WorkerStatus::PrepareFailed), Some(held));
        return;
    }
    prepare_failed::journal(p, st, out, at, &failed, "the group replaces it");
    count_failure(p, st, out, at, &failed);
    let reason = format!("{failed}; the group replaces it");
    let end = Ending::GroupTerminate { decrement: false };
    let mut r = removal::new(p, &p.list[at], Cause::PrepareFailed, None, &reason);
    r.stage.end(end);
    removal::queue(p, st, out, r).cause = Some(Cause::PrepareFailed);
}
