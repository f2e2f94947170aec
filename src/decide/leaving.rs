//! Leaving: a member asked to leave (elastic tag deleted, out of its group's service, its group
//! terminating it) goes out of the host files, within `min` for a voluntary leave, and is let
//! go once the job acknowledges (see `removal`). A deleted elastic tag put back in time cancels.

use super::draft::Draft;
use super::inputs::Inputs;
use super::{budget, group, holds, joining, removal, worker_count};
use crate::model::*;

pub(super) fn leave(p: &Inputs, st: &mut State, out: &mut Draft, leaves: Vec<usize>) {
    let mut gone = rustc_hash::FxHashSet::default();
    for at in leaves {
        if !p.can_remove() {
            let why = "a complete view to remove it".to_string();
            out.view(at, Some(WorkerStatus::Added), Some(why));
            continue;
        }
        let r = group::departure(p, at);
        let voluntary = r.cause() == Some(Cause::ElasticTag);
        if voluntary && worker_count(p, st) - gone.len() <= p.rules.min {
            let why = format!("worker count above min ({})", p.rules.min);
            let msg = format!("the job is at min ({})", p.rules.min);
            hold(p, st, out, at, &msg, why);
            continue;
        }
        if let Some(why) = budget::exhausted(p, st).filter(|_| voluntary) {
            hold(p, st, out, at, &why, why.clone());
            continue;
        }
        let inst = &p.list[at];
        holds::released(st, &inst.id);
        gone.insert(inst.id.as_str());
        out.removed.push(inst.ip);
        removal::queue(p, st, out, r);
    }
    // One sweep for every leaver: a sweep each made leaving quadratic.
    if !gone.is_empty() {
        st.members.retain(|m| !gone.contains(m.id.as_str()));
    }
}

/// The member stays in the job, its removal journaled once as held (`held_by`) and shown as
/// waiting for `why`.
fn hold(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, held_by: &str, why: String) {
    let inst = &p.list[at];
    holds::journal_held(p, st, out, at, || {
        format!("removal of {} held: {held_by}", inst.ip)
    });
    if let Some(pos) = st.members.iter().position(|m| m.id == inst.id) {
        joining::member_view(p, st, out, pos, at);
    }
    if let Some(v) = out.views[at].as_mut() {
        v.1 = Some(why);
    }
}

/// A managed instance that lost its elastic tag before or without joining: nothing to drain.
pub(super) fn retire_unjoined(p: &Inputs, st: &mut State, out: &mut Draft, at: usize) {
    let Some(tag) = p.facts[at].status else {
        out.view(at, None, Some("no elastic tag: not managed".into()));
        return;
    };
    if !p.can_remove() {
        out.view(at, Some(tag), Some("a complete view to retire it".into()));
        return;
    }
    let inst = &p.list[at];
    let then = group::voluntary_end(p, at);
    let mut r = removal::new(
        p,
        inst,
        Cause::ElasticTag,
        Some(then.clone()),
        "elastic tag deleted",
    );
    // Only ADDED / REMOVAL_QUEUED can still be training (state lost): those wait for an ack,
    // numbered above anything acknowledged, so that only an acknowledgement given after this
    // pass (or the timeout) may let a possibly training worker go. The others end at once
    // (`removal::advance` sends it on this same pass).
    if !matches!(tag, WorkerStatus::Added | WorkerStatus::RemovalQueued) {
        r.stage.end(then);
    }
    removal::queue(p, st, out, r).cause = Some(Cause::ElasticTag);
}

/// An instance already leaving stays on its way out, unless its elastic tag came back before
/// anything irreversible happened. Returns true when the instance is handled.
pub(super) fn reconsider(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    elastic: bool,
) -> bool {
    let id = &p.list[at].id;
    let Some(pos) = st.removals.iter().position(|r| r.id == *id) else {
        return false;
    };
    if elastic && removal::cancellable(&st.removals[pos]) && p.can_join() {
        let r = st.removals.remove(pos);
        let msg = format!("elastic tag is back on {}: removal cancelled", r.ip);
        let who = Some((r.id.as_str(), r.ip));
        out.event(p, EventKind::RemovalCancelled, who, None, msg);
        return false;
    }
    true
}
