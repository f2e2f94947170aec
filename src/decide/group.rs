//! The worker Auto Scaling group's rules: only `InService` instances train; a member the group
//! takes out of service or terminates leaves the job; workers in the job are protected from
//! scale-in, so the group shrinks through dtd, drained first.

use super::draft::Draft;
use super::inputs::Inputs;
use super::{budget, removal, worker_count};
use crate::model::*;

pub(super) fn lifecycle<'a>(p: &Inputs<'a>, at: usize) -> Option<&'a GroupMember> {
    let list: &'a [Instance] = p.list;
    p.group?.instances.get(&list[at].id)
}

pub(super) fn in_group(p: &Inputs, at: usize) -> bool {
    lifecycle(p, at).is_some()
}

/// May train: not in the group (a launch-template worker) or in service in it.
pub(super) fn serving(p: &Inputs, at: usize) -> bool {
    lifecycle(p, at).is_none_or(|m| m.lifecycle_state == LifecycleState::InService)
}

/// How a voluntarily removed worker ends: its group shrinks with it.
pub(super) fn voluntary_end(p: &Inputs, at: usize) -> Ending {
    match in_group(p, at) {
        true => Ending::GroupTerminate { decrement: true },
        false => Ending::Terminate,
    }
}

/// Why a member leaves, and how it ends once the job has let it go.
pub(super) fn departure(p: &Inputs, at: usize) -> Removal {
    let state = lifecycle(p, at).map(|m| &m.lifecycle_state);
    let hook = p.group.and_then(|g| g.terminating_hook.as_ref());
    let (cause, then, reason) = match (state, hook) {
        (Some(LifecycleState::TerminatingWait), Some(h)) => (
            Cause::ScaleIn,
            Some(Ending::Hook {
                name: h.name.clone(),
            }),
            "its Auto Scaling group is terminating it".to_string(),
        ),
        (Some(s), _) if *s != LifecycleState::InService => {
            (Cause::OutOfService, None, format!("lifecycle state {s}"))
        }
        _ => (
            Cause::ElasticTag,
            Some(voluntary_end(p, at)),
            "elastic tag deleted".to_string(),
        ),
    };
    removal::new(p, &p.list[at], cause, then, &reason)
}

/// The group's desired capacity is below its workers in service, and the ones left are
/// protected members: drain the newest, then terminate them without replacement.
pub(super) fn scale_in(p: &Inputs, st: &mut State, out: &mut Draft) {
    let Some(g) = p.group else { return };
    if !p.can_remove() {
        return;
    }
    let leaving: rustc_hash::FxHashSet<&str> = st.removals.iter().map(|r| r.id.as_str()).collect();
    let protected = (g.instances.iter())
        .filter(|(_, m)| m.lifecycle_state == LifecycleState::InService && m.protected)
        .filter(|(id, _)| !leaving.contains(id.as_str()))
        .count();
    let excess = protected.saturating_sub(g.desired);
    let mut newest: Vec<usize> = (st.members.iter())
        .filter_map(|m| p.at(&m.id))
        .filter(|&at| g.instances.get(&p.list[at].id).is_some_and(|m| m.protected))
        .collect();
    newest.sort_by_key(|&at| std::cmp::Reverse(p.list[at].launched_at));
    for at in newest.into_iter().take(excess) {
        drain_for_scale_in(p, st, out, at, g.desired);
    }
}

fn drain_for_scale_in(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, desired: usize) {
    let inst = &p.list[at];
    let held = match worker_count(p, st) <= p.rules.min {
        true => Some(format!(
            "scale-in to {desired} held at min ({})",
            p.rules.min
        )),
        false => budget::exhausted(p, st).map(|why| format!("scale-in to {desired} held: {why}")),
    };
    if let Some(msg) = held {
        // The text follows the desired capacity; the event is journaled once.
        let was = st.pending_mut(&inst.id).held.replace(msg.clone());
        if was.is_none() {
            out.event(p, EventKind::RemovalHeld, Some(p.who(at)), None, msg);
        }
        return;
    }
    let reason = format!("the group's desired capacity is {desired}");
    let then = Some(Ending::GroupTerminate { decrement: false });
    let r = removal::new(p, inst, Cause::ScaleIn, then, &reason);
    out.removed.push(inst.ip);
    st.members.retain(|m| m.id != inst.id);
    removal::queue(p, st, out, r);
}

/// Group workers in the job, not yet protected from scale-in.
pub(super) fn to_protect(p: &Inputs, st: &State) -> Vec<String> {
    let Some(g) = p.group else {
        return Vec::new();
    };
    let mut ids: Vec<String> = (st.members.iter())
        .filter(|m| g.instances.get(&m.id).is_some_and(|x| !x.protected))
        .map(|m| m.id.clone())
        .collect();
    ids.sort();
    ids
}
