//! Sorts every cluster instance: a member that stays, a base host, one on its way out, one
//! ready to join, one asked to leave.

use super::draft::Draft;
use super::inputs::Inputs;
use super::{holds, joining, leaving};
use crate::model::*;

/// Finds each member's instance; members whose instance is no longer running leave at once,
/// as there is nothing to drain. Returns, per listed instance, its position in `st.members`.
pub(super) fn locate_members(p: &Inputs, st: &mut State, out: &mut Draft) -> Vec<Option<usize>> {
    let mut member_of = vec![None; p.list.len()];
    // Room for this pass's joins: growing a vector of 10,000 members copies all of them.
    let mut kept = Vec::with_capacity(st.members.len() + p.list.len().min(64));
    for m in std::mem::take(&mut st.members) {
        match p.at(&m.id) {
            Some(at) => {
                member_of[at] = Some(kept.len());
                kept.push(m);
            }
            None if p.can_remove() => {
                out.removed.push(m.ip);
                let msg = format!("{} is no longer running; removed from the host files", m.ip);
                let who = Some((m.id.as_str(), m.ip));
                out.event(p, EventKind::Gone, who, Some(p.next_gen), msg);
            }
            None => kept.push(m),
        }
    }
    st.members = kept;
    member_of
}

/// Members that stay get their view here; returns the instances ready to join and the members
/// asked to leave, in launch order.
pub(super) fn classify(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    member_of: &[Option<usize>],
) -> (Vec<usize>, Vec<usize>) {
    let list = p.list;
    let mut leaving = vec![false; list.len()];
    for r in &st.removals {
        if let Some(at) = p.at(&r.id) {
            leaving[at] = true;
        }
    }
    // Members that stay are the bulk of a pass and their order does not matter; everything
    // else is decided in launch order, so that joins under max and holds at min are fair.
    let mut others = Vec::new();
    let mut stayed = vec![false; list.len()];
    for at in 0..list.len() {
        if !p.facts[at].cluster {
            continue;
        }
        let staying = p.facts[at].elastic
            && !leaving[at]
            && !p.rules.is_protected(list[at].ip)
            && super::group::serving(p, at);
        match member_of[at] {
            Some(pos) if staying => stay(p, st, out, pos, at, &mut stayed),
            _ => others.push(at),
        }
    }
    others.sort_unstable_by(|&a, &b| {
        (list[a].launched_at, &list[a].id).cmp(&(list[b].launched_at, &list[b].id))
    });
    let (mut joins, mut leaves) = (Vec::new(), Vec::new());
    for at in others {
        let elastic = p.facts[at].elastic;
        if p.rules.is_protected(list[at].ip) {
            protected(p, st, out, at, elastic);
        } else if leaving[at] && leaving::reconsider(p, st, out, at, elastic) {
            continue;
        } else if let Some(pos) = member_of[at] {
            if elastic && super::group::serving(p, at) {
                stay(p, st, out, pos, at, &mut stayed);
            } else {
                leaves.push(at);
            }
        } else if !elastic {
            leaving::retire_unjoined(p, st, out, at);
        } else {
            joining::candidate(p, st, out, at, &mut joins);
        }
    }
    holds::release_stayers(p, st, &stayed);
    (joins, leaves)
}

fn stay(p: &Inputs, st: &mut State, out: &mut Draft, pos: usize, at: usize, stayed: &mut [bool]) {
    stayed[at] = true;
    joining::member_view(p, st, out, pos, at);
}

fn protected(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, elastic: bool) {
    let inst = &p.list[at];
    let what = if p.rules.master == Some(inst.ip) {
        "master"
    } else {
        "base host"
    };
    if !elastic && holds::is_held(st, &inst.id).is_none() {
        let msg = format!("{} is a {what}: never removed or terminated", inst.ip);
        let who = Some(p.who(at));
        out.event(p, EventKind::RemovalRefused, who, None, msg.clone());
        st.pending_mut(&inst.id).hold(&msg);
    }
    out.view(at, None, None);
}
