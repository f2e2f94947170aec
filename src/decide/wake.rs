//! When decide next needs a pass although nothing new was heard: the earliest of the deadlines
//! the remembered state holds (an acknowledgement's timeout, a hook's heartbeat, a Spot-warned
//! member's leave, a rebalance-recommended member's drain once its replacement joined, a
//! prepare timeout, a join batch or checkpoint wait ending, a launch's retry, a cool-down
//! ending, a silence or a stall becoming one, an unconfirmed notice's release, a disruption
//! window opening). As a reconciler returns its requeue: the loop wakes then, or on news, or at
//! its `interval` at the latest. A deadline already past is not one: this pass handled it, or
//! it waits on something a deadline does not bring (a complete view).

use super::inputs::Inputs;
use super::{joining, replaced_first};
use crate::model::*;

/// The earliest deadline after `p.now`, if any.
pub(super) fn next(p: &Inputs, st: &State) -> Option<Millis> {
    let groups = [
        removals(p, st),
        launches(p, st),
        joins(p, st),
        retries(p, st),
        watches(p, st),
        super::budget::next_window(p),
    ];
    earliest(groups.into_iter().flatten(), p.now)
}

/// Past deadlines are dropped before the minimum is taken: one already handled must not hide
/// a later one of the same kind.
fn earliest(deadlines: impl Iterator<Item = Millis>, now: Millis) -> Option<Millis> {
    deadlines.filter(|at| *at > now).min()
}

/// An acknowledgement's timeout, the terminating hook's next heartbeat, an unconfirmed agent
/// notice's release, a Spot-warned member's leave (`trains_on`: late, it would meet its loss),
/// a rebalance-recommended member's drain (`replaced_first`: at once).
fn removals(p: &Inputs, st: &State) -> Option<Millis> {
    let warned = st.trains_until.values().map(|w| w.leaves);
    let replaced = (replaced_first::drains_next(p, st)).then(|| p.now.saturating_add(1));
    let beat =
        (p.group.and_then(|g| g.terminating_hook.as_ref())).map(|h| h.heartbeat_timeout_ms / 2);
    let each = st.removals.iter().flat_map(|r| match &r.stage {
        Stage::AwaitingAck { heartbeat_at, .. } => [
            Some(r.deadline),
            beat.map(|b| heartbeat_at.unwrap_or(r.queued_at).saturating_add(b)),
        ],
        Stage::Reclaiming { unconfirmed_until } => [*unconfirmed_until, None],
        _ => [None, None],
    });
    earliest(each.flatten().chain(warned).chain(replaced), p.now)
}

/// A worker held by the launching hook: its prepare timeout and its next heartbeat.
/// Only a launching hook holds workers in `Pending:Wait`: without one, no wait is timed.
fn launches(p: &Inputs, st: &State) -> Option<Millis> {
    let hook = p.group.and_then(|g| g.launching_hook.as_ref())?;
    let beat = hook.heartbeat_timeout_ms / 2;
    let records = st.pending.values();
    let timeouts = (records.clone().filter_map(|w| w.launch_wait.as_ref()))
        .filter(|w| !w.timed_out && !w.abandoned)
        .map(|w| w.since.saturating_add(p.rules.prepare_timeout_ms));
    let beats = records.filter_map(|w| Some(w.heartbeat_at?.saturating_add(beat)));
    earliest(timeouts.chain(beats), p.now)
}

/// The join batch's end and the checkpoint wait's `join.max_wait`.
fn joins(p: &Inputs, st: &State) -> Option<Millis> {
    let batch = (p.rules.join_batch_ms > 0)
        .then(|| joining::first_ready(st))
        .flatten()
        .map(|first| first.saturating_add(p.rules.join_batch_ms));
    let checkpoint = (st.checkpoint_wait.as_ref())
        .filter(|w| !w.passed)
        .map(|w| w.since.saturating_add(p.rules.join_max_wait_ms));
    earliest(batch.into_iter().chain(checkpoint), p.now)
}

/// A refused launch sent again, a capacity choice's cool-down ending.
fn retries(p: &Inputs, st: &State) -> Option<Millis> {
    let launches = st.replacements.iter().map(|r| r.retry_at);
    let cool_downs = st.no_capacity.values().map(|u| u.until);
    earliest(launches.chain(cool_downs), p.now)
}

/// The job's step standing still long enough to be a stall, and a member's launcher report
/// unchanged long enough to be a silence.
fn watches(p: &Inputs, st: &State) -> Option<Millis> {
    let stall = (p.rules.stall_after_ms)
        .zip(st.progress.as_ref().filter(|k| !k.stalled))
        .map(|(after, k)| k.advanced_at.saturating_add(after));
    let silence = p.rules.launcher_silent_ms.and_then(|after| {
        let reports = p.markers?.launchers.values();
        let active = reports.filter(|l| l.state.is_active());
        earliest(active.map(|l| l.heard_at.saturating_add(after)), p.now)
    });
    earliest(stall.into_iter().chain(silence), p.now)
}
