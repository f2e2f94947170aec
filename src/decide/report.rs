//! The end of a pass: what the other rules left, put in the order act applies it (the next
//! generation, the status tags, the rows, the host files) and the next deadline.

use super::draft::Draft;
use super::inputs::Inputs;
use super::{generation, group, host_list, rows, status_tags};
use crate::model::*;

pub(super) fn finish(p: &Inputs, mut st: State, mut out: Draft) -> Plan {
    if !out.added.is_empty() || !out.removed.is_empty() || out.restart {
        generation::bump(p, &mut st, &mut out);
    }
    if p.ec2_ok {
        st.forget_gone(|id| p.is_running(id), p.index.len(), p.now);
    }
    for (status, instances) in status_tags::tags(p, &out) {
        out.act(Action::Tag { status, instances });
    }
    let rows = rows::rows(p, &mut st, &mut out);
    let protect = group::to_protect(p, &st);
    if !protect.is_empty() {
        out.act(Action::Protect { instances: protect });
    }
    let outcome = Outcome {
        notify: st.pending_notification.clone(),
        hosts: host_list::hosts(p, &st),
        rows,
        ..out.outcome
    };
    let next_pass_at = super::wake::next(p, &st);
    Plan {
        state: st,
        outcome,
        next_pass_at,
    }
}
