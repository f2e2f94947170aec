//! Removals that are held (a base host, `min`, the disruption budget, a drain while removing is
//! stopped): journaled once, and again only after the worker was asked to stay or its removal
//! went ahead.

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// Why the worker's requested removal is held, if it is.
pub(super) fn is_held<'s>(st: &'s State, id: &str) -> Option<&'s str> {
    st.pending(id)?.held.as_deref()
}

/// Holds the worker's removal, journaled (`removal_held`) the first time: `msg` is made only then.
pub(super) fn journal_held(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    msg: impl FnOnce() -> String,
) {
    let id = &p.list[at].id;
    if is_held(st, id).is_none() {
        let msg = msg();
        out.event(
            p,
            EventKind::RemovalHeld,
            Some(p.who(at)),
            None,
            msg.clone(),
        );
        st.pending_mut(id).hold(&msg);
    }
}

/// The worker's removal goes ahead: no longer held.
pub(super) fn released(st: &mut State, id: &str) {
    if let Some(w) = st.pending.get_mut(id) {
        w.held = None;
    }
}

/// Members asked to stay after all: a later removal is journaled again. An unhealthy member or
/// a straggler whose drain is held stays too, still held. The few held are looked through rather than every
/// staying member looked up: those are the bulk of a pass.
pub(super) fn release_stayers(p: &Inputs, st: &mut State, stayed: &[bool]) {
    let stragglers = &st.stragglers;
    for (id, w) in st.pending.iter_mut().filter(|(_, w)| w.held.is_some()) {
        let straggler = stragglers.get(id).is_some_and(|s| s.found);
        if p.at(id).is_some_and(|at| stayed[at]) && !straggler {
            w.stays();
        }
    }
}
