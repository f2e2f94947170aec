//! Under `in_place` with `workers.replace_interrupted`, a launch-template member AWS recommends
//! rebalancing is replaced first: its replacement is launched at once and it trains on until
//! that replacement is in the job, then drains as before. This is what an Auto Scaling group's
//! Capacity Rebalancing does (launch, then terminate the old one once the new one is in
//! service): a recommendation costs the job no time below its size, and if AWS then reclaims
//! the instance, its Spot warning takes over (`trains_on`).
//!
//! The recommendation is heeded when first seen and the wait kept in the state, so the queue's
//! message deleted or put back, or dtd restarted, changes neither the launch nor the drain. An
//! agent's recommendation never gets here: a drain needs AWS's own event.

use super::draft::Draft;
use super::inputs::Inputs;
use super::notice_targets::{targets, Target};
use super::{budget, group, replacements};
use crate::config::Rebalance;
use crate::model::*;

/// Whether `n` is a rebalance recommendation whose member trains on until its replacement joins
/// (recorded in the state now). `false`: it is heeded now, as ever.
pub(super) fn waits(p: &Inputs, st: &mut State, out: &mut Draft, n: &Notice) -> bool {
    let applies = p.rules.leave_before_loss_ms.is_some()
        && p.rules.replace_interrupted
        && p.rules.launch_template_id.is_some()
        && p.rules.rebalance == Rebalance::Drain;
    if !applies || n.kind != NoticeKind::Rebalance {
        return false;
    }
    let Ok([t]) = <[Target; 1]>::try_from(targets(p, st, &n.target)) else {
        return false;
    };
    let member = st.members.iter().any(|m| m.id == t.id);
    let in_group = p.at(&t.id).is_some_and(|at| group::in_group(p, at));
    if !member || in_group || p.rules.is_protected(t.ip) || st.is_removing(t.ip) {
        return false;
    }
    if super::worker_count(p, st) >= p.rules.max {
        // At max the replacement could never join, and it would wait forever, billed.
        return false;
    }
    let msg = format!(
        "rebalance recommendation from the {} for {}: its replacement is launched now and it \
         trains on until that one is in the job, then drains",
        n.source, t.ip
    );
    out.event(p, EventKind::Notice, Some((&t.id, t.ip)), None, msg);
    replacements::owe(p, st, &t.id, Replaced::Rebalance, None);
    let wait = ReplacedFirst { instance: t.id };
    st.replaced_first.insert(n.id.clone(), wait);
    true
}

/// The recommended members whose replacement is in the job (or gone for good), as the notices
/// to heed now; a wait whose member left the job otherwise is forgotten (a Spot warning's
/// `trains_on` ends it itself); the others are shown as holds.
pub(super) fn due(p: &Inputs, st: &mut State, out: &mut Draft) -> Vec<Notice> {
    let mut now = Vec::new();
    for (id, w) in std::mem::take(&mut st.replaced_first) {
        let member = st.members.iter().find(|m| m.id == w.instance);
        let Some(ip) = member.map(|m| m.ip) else {
            continue;
        };
        let held = match replacement(st, &w.instance) {
            Waiting::Owed => Some("its replacement, not launched yet, is in the job".into()),
            Waiting::Preparing(new) => Some(format!("its replacement {new} is in the job")),
            Waiting::Joined | Waiting::Gone => voluntary_hold(p, st),
        };
        if let Some(why) = held {
            let who = format!("{ip} ({})", w.instance);
            out.outcome.holds.push(format!(
                "rebalance recommendation for {who}: it trains on until {why}"
            ));
            st.replaced_first.insert(id, w);
            continue;
        }
        now.push(Notice {
            id,
            kind: NoticeKind::Rebalance,
            target: NoticeTarget::Instance(w.instance),
            deadline: None,
            source: "queue",
        });
    }
    now
}

/// Whether a recommended member drains at the next pass, its replacement in the job and nothing
/// holding it: `wake` asks for that pass at once (the join is this pass's, after the notices
/// were heeded). One the budget holds waits for what frees the budget, not for a pass each
/// millisecond.
pub(super) fn drains_next(p: &Inputs, st: &State) -> bool {
    let joined = |w: &ReplacedFirst| matches!(replacement(st, &w.instance), Waiting::Joined);
    st.replaced_first.values().any(joined) && voluntary_hold(p, st).is_none()
}

/// Where the replacement of `instance` is.
fn replacement(st: &State, instance: &str) -> Waiting {
    if st.replacements.iter().any(|r| r.replaces == instance) {
        return Waiting::Owed;
    }
    let launched = st.launched_for.iter().find(|(_, l)| l.replaces == instance);
    match launched {
        None => Waiting::Gone,
        Some((new, _)) if st.members.iter().any(|m| m.id == *new) => Waiting::Joined,
        Some((new, _)) => Waiting::Preparing(new.clone()),
    }
}

enum Waiting {
    /// Its launch is owed (not sent yet, or refused and sent again).
    Owed,
    /// Launched, not in the job yet.
    Preparing(String),
    Joined,
    /// Launched and gone before it joined: the member drains now, as it would have without one.
    Gone,
}

/// Why the drain, voluntary, waits although its replacement is in: a partial view or the
/// disruption budget.
fn voluntary_hold(p: &Inputs, st: &State) -> Option<String> {
    if !p.can_remove() {
        return Some("this pass sees all of EC2 (a drain is never made on a partial view)".into());
    }
    (budget::exhausted(p, st)).map(|why| format!("the disruption budget lets it go ({why})"))
}
