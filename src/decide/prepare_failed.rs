//! A worker whose prepare-data failed is journaled once (`prepare_failed`), with what happens to
//! it next, when dtd decides it: its failure marker stays on the shared directory and is read on
//! every pass, and a restarted dtd must not alert about it again.

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// Journals `why` (e.g. "prepare-data failed (exit 3: ...)") and `then` for the instance at
/// `at`, unless it was journaled before.
pub(super) fn journal(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    why: &str,
    then: &str,
) {
    let (id, ip) = p.who(at);
    if !st.pending_mut(id).prepare_failed_once() {
        return;
    }
    let msg = format!("{ip} ({id}): {why}; {then}");
    out.event(p, EventKind::PrepareFailed, Some((id, ip)), None, msg);
}
