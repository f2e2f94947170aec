//! The next generation: this pass's joins and leaves folded into the notification the job has
//! not received yet, journaled as one `generation` line.

use std::net::IpAddr;

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// Folds this pass's changes into any notification the job has not received yet.
pub(super) fn bump(p: &Inputs, st: &mut State, out: &mut Draft) {
    if p.next_gen <= st.generation {
        // Only a state file edited by hand gets here: a wrapped number would be acknowledged.
        let why = format!("the generation counter is at its limit ({}): no new generation can be numbered; move state.json aside", st.generation);
        out.outcome.holds.push(why);
        return;
    }
    st.generation = p.next_gen;
    let mut n = st.pending_notification.take().unwrap_or_default();
    n.generation = p.next_gen;
    for ip in std::mem::take(&mut out.added) {
        toggle(&mut n.removed, &mut n.added, ip);
    }
    for ip in std::mem::take(&mut out.removed) {
        toggle(&mut n.added, &mut n.removed, ip);
    }
    // A notice is about a worker leaving: not one that is back, nor one told twice.
    let notices = std::mem::take(&mut out.notices);
    n.notices
        .retain(|j| n.removed.contains(&j.ip) && !notices.iter().any(|k| k.ip == j.ip));
    n.notices
        .extend(notices.into_iter().filter(|j| n.removed.contains(&j.ip)));
    let msg = format!(
        "generation {}: +[{}] -[{}]",
        n.generation,
        join_ips(&n.added),
        join_ips(&n.removed)
    );
    out.event(p, EventKind::Generation, None, Some(n.generation), msg);
    st.pending_notification = Some(n);
}

/// Moves `ip` out of `from` if it is there (a change undone), else records it in `to`.
fn toggle(from: &mut Vec<IpAddr>, to: &mut Vec<IpAddr>, ip: IpAddr) {
    if let Some(pos) = from.iter().position(|x| *x == ip) {
        from.remove(pos);
    } else if !to.contains(&ip) {
        to.push(ip);
    }
}
