//! Under `in_place`, a Spot-warned member trains on through its warning: it leaves
//! `job.launcher.in_place.leave_before_loss` before AWS takes it (a planned leave costs the
//! others under a second), and a launch-template worker's replacement is launched at the
//! warning's first sight, so it boots and prepares while the warned one still trains.
//!
//! The warning is heeded when first seen and its leave kept in the state: no one deleting,
//! putting back or blocking its queue message or marker afterwards changes when it leaves.

use super::draft::Draft;
use super::inputs::Inputs;
use super::notice_targets::{targets, Target};
use super::{group, replacements, trust};
use crate::model::*;

/// Whether `n` is a Spot warning whose member trains on (recorded in the state now, or told
/// already by another notice). `false`: it is heeded now (not `in_place`, not a Spot warning,
/// no time in it, too close to its time, or not a member).
pub(super) fn trains_on(p: &Inputs, st: &mut State, out: &mut Draft, n: &Notice) -> bool {
    let Some(lead) = p.rules.leave_before_loss_ms else {
        return false;
    };
    if n.kind != NoticeKind::Interruption {
        return false;
    }
    let Ok([t]) = <[Target; 1]>::try_from(targets(p, st, &n.target)) else {
        return false;
    };
    if st.trains_until.values().any(|w| w.instance == t.id) {
        // The same loss told twice (the queue and the agent): it leaves with the first.
        return true;
    }
    let member = st.members.iter().any(|m| m.id == t.id);
    if !member || p.rules.is_protected(t.ip) {
        return false;
    }
    // An agent's time is its worker's word: never later than a Spot warning's two minutes.
    let Some(loss) = (n.deadline).map(|d| d.min(p.now.saturating_add(trust::SPOT_WARNING_MS)))
    else {
        return false;
    };
    let leaves = loss.saturating_sub(lead);
    if p.now >= leaves {
        return false;
    }
    let msg = format!(
        "interruption warning from the {} for {}: it trains on until {} \
         (job.launcher.in_place.leave_before_loss before AWS takes it at {})",
        n.source,
        t.ip,
        rfc3339(leaves),
        rfc3339(loss)
    );
    out.event(p, EventKind::Notice, Some((&t.id, t.ip)), None, msg);
    // A group worker's replacement is its detaching, which waits for its leave: a detached
    // instance is no longer the group's, and the rules would read it as another worker.
    if !p.at(&t.id).is_some_and(|at| group::in_group(p, at)) {
        replacements::ahead(p, st, n, &t.id, t.ip);
    }
    let from_agent = n.source == "agent";
    let warned = TrainsOn {
        instance: t.id.clone(),
        leaves,
        loss,
        from_agent,
    };
    st.trains_until.insert(n.id.clone(), warned);
    // A rebalance recommendation's wait for its replacement is over: this leave comes first.
    st.replaced_first.retain(|_, w| w.instance != t.id);
    true
}

/// The warned members whose time to leave has come, as the notices to heed now; the others are
/// shown as holds.
pub(super) fn due(p: &Inputs, st: &mut State, out: &mut Draft) -> Vec<Notice> {
    let mut now = Vec::new();
    for (id, w) in std::mem::take(&mut st.trains_until) {
        if p.now < w.leaves {
            let who = match p.at(&w.instance) {
                Some(at) => format!("{} ({})", p.list[at].ip, w.instance),
                None => w.instance.clone(),
            };
            out.outcome.holds.push(format!(
                "interruption warning for {who}: it trains on until {} \
                 (job.launcher.in_place.leave_before_loss before AWS takes it at {})",
                rfc3339(w.leaves),
                rfc3339(w.loss)
            ));
            st.trains_until.insert(id, w);
            continue;
        }
        now.push(Notice {
            id,
            kind: NoticeKind::Interruption,
            target: NoticeTarget::Instance(w.instance),
            deadline: Some(w.loss),
            source: if w.from_agent { "agent" } else { "queue" },
        });
    }
    now
}
