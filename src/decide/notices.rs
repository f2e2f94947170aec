//! Notices from AWS (queue) and from workers' agents: an interruption takes a worker out of the
//! job at once; a rebalance recommendation, a Capacity Block's end or an EC2 scheduled change
//! (reboot, stop, retirement, maintenance) drains it gracefully.

use std::net::IpAddr;

use super::draft::Draft;
use super::inputs::Inputs;
use super::notice_targets::{targets, Target};
use super::{budget, removal, replaced_first, replacements, trains_on, trust};
use crate::config::Rebalance;
use crate::model::*;

/// How long a heeded notice id is remembered: longer than any redelivery or agent marker lives.
const NOTICE_MEMORY_MS: Millis = 24 * 3_600_000;

pub(super) fn heed(p: &Inputs, st: &mut State, out: &mut Draft, notices: &[Notice]) {
    let now = p.now;
    (st.noticed).retain(|_, at| now.saturating_sub(*at) < NOTICE_MEMORY_MS);
    let mut due = trains_on::due(p, st, out);
    due.extend(replaced_first::due(p, st, out));
    for n in due {
        for t in targets(p, st, &n.target) {
            heed_one(p, st, out, &n, t);
        }
    }
    // What takes a worker whatever min says goes first, so that a rebalance drain in the same
    // pass counts toward min only the workers that stay.
    let mut ordered: Vec<&Notice> = notices.iter().collect();
    ordered.sort_by_key(|n| match n.kind {
        NoticeKind::Rebalance => 1,
        _ => 0,
    });
    for n in ordered {
        if st.noticed.contains_key(&n.id) {
            continue;
        }
        let drain = matches!(
            n.kind,
            NoticeKind::Rebalance | NoticeKind::CapacityBlockExpiring | NoticeKind::ScheduledChange
        );
        if let NoticeTarget::Agent { instance, ip } = &n.target {
            if !believe_agent(p, st, out, n, instance, *ip, drain) {
                continue;
            }
        }
        if drain && !p.can_remove() {
            // A drain is voluntary: never on a partial view. The daemon keeps the notice.
            out.outcome.deferred_notices.push(n.id.clone());
            continue;
        }
        if trains_on::trains_on(p, st, out, n) || replaced_first::waits(p, st, out, n) {
            st.noticed.insert(n.id.clone(), now);
            out.outcome.heeded_notices.push(n.clone());
            continue;
        }
        if let Some(from) = drains_from(p, n).filter(|from| now < *from) {
            // Kept (the queue's message, the agent's marker) until its time comes.
            out.outcome.deferred_notices.push(n.id.clone());
            out.outcome.holds.push(format!(
                "{} from the {} for {}: drains from {} (events.scheduled_change_lead before it starts)",
                describe(n.kind),
                n.source,
                target_text(&n.target),
                rfc3339(from)
            ));
            continue;
        }
        let targets = targets(p, st, &n.target);
        if targets.is_empty() {
            // Not this cluster's, or already gone: nothing to do, nothing to remember.
            continue;
        }
        if let Some(why) = held_by_budget(p, st, n, &targets) {
            // Kept, like a drain not yet due, and heeded once a leave in progress ends.
            out.outcome.deferred_notices.push(n.id.clone());
            out.outcome.holds.push(format!(
                "{} from the {} for {}: held by {why}",
                describe(n.kind),
                n.source,
                target_text(&n.target)
            ));
            continue;
        }
        st.noticed.insert(n.id.clone(), now);
        out.outcome.heeded_notices.push(n.clone());
        for t in targets {
            heed_one(p, st, out, n, t);
        }
    }
}

/// The Capacity Blocks `workers.capacity` names whose end is 40 minutes away or less, as
/// notices: their workers drain when AWS's own warning would come, from the end date EC2 lists,
/// whether or not that warning reaches the event queue (one id per block and end, so each is
/// heeded once).
pub(super) fn capacity_block_ends(p: &Inputs) -> Vec<Notice> {
    let Some(Ok(read)) = p.reservations else {
        return Vec::new();
    };
    (read.values())
        .filter(|r| r.drains_at().is_some_and(|at| p.now >= at))
        .map(|r| Notice {
            id: format!("capacity-block-end:{}:{}", r.id, r.end.unwrap_or_default()),
            kind: NoticeKind::CapacityBlockExpiring,
            target: NoticeTarget::CapacityReservation(r.id.clone()),
            deadline: r.terminates_at(),
            source: "reservation",
        })
        .collect()
}

/// Why a voluntary drain (a rebalance recommendation, a scheduled change) of a member waits for
/// the disruption budget; `None` for anything else.
fn held_by_budget(p: &Inputs, st: &State, n: &Notice, targets: &[Target]) -> Option<String> {
    let voluntary = match n.kind {
        NoticeKind::Rebalance => p.rules.rebalance == Rebalance::Drain,
        NoticeKind::ScheduledChange => true,
        _ => false,
    };
    let member = |t: &Target| st.members.iter().any(|m| m.id == t.id);
    if !voluntary || !targets.iter().any(member) {
        return None;
    }
    budget::exhausted(p, st)
}

/// Whether an agent's notice goes on to be heeded: only for the instance EC2 lists at its IP
/// (else refused), and only an interruption: a drain terminates the worker once the job lets it
/// go, which a worker's word alone never decides (AWS's own event, from the queue, does).
fn believe_agent(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    n: &Notice,
    instance: &str,
    ip: IpAddr,
    drain: bool,
) -> bool {
    let who = |id: &str| Some(id.to_string());
    let (key, kind, id, msg) = match trust::agent_target(p, st, n, instance, ip) {
        Ok(None) => return false,
        Ok(Some(_)) if !drain => return true,
        Ok(Some((id, _))) => {
            let msg = format!(
                "{} from the agent of {ip} ({id}): reported only; a drain needs AWS's own event \
                 (events.queue_url), a worker's word is not enough",
                describe(n.kind)
            );
            (
                RefusalKey::AgentDrain {
                    notice: n.id.clone(),
                },
                EventKind::Notice,
                who(&id),
                msg,
            )
        }
        Err(why) => {
            let msg = format!("{} in interruption_{ip} {why}: refused", describe(n.kind));
            let id = (p.at(instance).is_some()).then(|| instance.to_string());
            (
                RefusalKey::Notice {
                    notice: n.id.clone(),
                },
                EventKind::NoticeRefused,
                id,
                msg,
            )
        }
    };
    let subject = id.as_deref().map(|id| (id, ip));
    trust::refuse(p, st, out, key, kind, subject, msg);
    false
}

/// When a scheduled change's worker starts to drain: `scheduled_change_lead` before it starts.
fn drains_from(p: &Inputs, n: &Notice) -> Option<Millis> {
    match (n.kind, n.deadline) {
        (NoticeKind::ScheduledChange, Some(at)) => {
            Some(at.saturating_sub(p.rules.scheduled_change_lead_ms))
        }
        _ => None,
    }
}

fn heed_one(p: &Inputs, st: &mut State, out: &mut Draft, n: &Notice, t: Target) {
    if p.rules.is_protected(t.ip) {
        let msg = format!(
            "{} from the {}: {} is a base host, never removed by dtd; the job will lose it",
            describe(n.kind),
            n.source,
            t.ip
        );
        out.event(p, EventKind::NoticeIgnored, Some((&t.id, t.ip)), None, msg);
        return;
    }
    let (ip, t_id) = (t.ip, t.id.clone());
    // One leaving is replaced once: a second warning (a new event for the same loss, or a
    // Spot warning after a rebalance drain), or a worker a person is already removing, is not.
    let leaving = st.is_removing(ip);
    match n.kind {
        NoticeKind::Interruption => interrupt(p, st, out, n, t),
        NoticeKind::GroupTerminating if held_by_hook(p, &t.id) => {}
        NoticeKind::GroupTerminating => interrupt(p, st, out, n, t),
        NoticeKind::Rebalance if p.rules.rebalance == Rebalance::Report => {
            let msg = format!(
                "rebalance recommendation for {} from the {} (reported only: events.rebalance is report)",
                t.ip, n.source
            );
            let who = Some((t.id.as_str(), t.ip));
            out.event(p, EventKind::RebalanceRecommendation, who, None, msg);
        }
        NoticeKind::Rebalance => drain(p, st, out, n, t, Cause::Rebalance),
        NoticeKind::CapacityBlockExpiring => drain(p, st, out, n, t, Cause::CapacityBlock),
        NoticeKind::ScheduledChange => drain(p, st, out, n, t, Cause::ScheduledChange),
    }
    if !leaving {
        replacements::ahead(p, st, n, &t_id, ip);
    }
    if out.removed.contains(&ip) {
        out.notices.retain(|j| j.ip != ip);
        out.notices.push(JobNotice {
            ip,
            kind: n.kind.reason(),
            deadline: n.deadline,
        });
    }
}

/// The instance is being taken away: out of the host files now, no acknowledgement awaited,
/// never terminated by us (AWS does it).
fn interrupt(p: &Inputs, st: &mut State, out: &mut Draft, n: &Notice, t: Target) {
    let reason = format!("{} from the {}", describe(n.kind), n.source);
    let unconfirmed = trust::unconfirmed_until(p, n);
    if unconfirmed.is_some() {
        trust::heeded_from_agent(p, st, t.ip);
    }
    removal::interrupt(p, st, out, &t.id, t.ip, &reason, unconfirmed);
}

/// Leaves gracefully, like a deleted elastic tag: terminated once the job acknowledges.
/// A rebalance recommendation respects `min`; a Capacity Block's end and a scheduled change
/// do not, as the capacity goes away whatever we do.
fn drain(p: &Inputs, st: &mut State, out: &mut Draft, n: &Notice, t: Target, cause: Cause) {
    let mut reason = format!("{} from the {}", describe(n.kind), n.source);
    if let (NoticeKind::ScheduledChange, Some(at)) = (n.kind, n.deadline) {
        // People need the start time to judge it; the journal has no other field for it.
        reason.push_str(&format!(" (starts {})", rfc3339(at)));
    }
    let Some(pos) = st.members.iter().position(|m| m.id == t.id) else {
        let msg = format!("{reason}: {} is not in the job; nothing to drain", t.ip);
        out.event(p, EventKind::Notice, Some((&t.id, t.ip)), None, msg);
        return;
    };
    // Members no longer running leave later this pass: they do not count toward min.
    let running = (st.members.iter()).filter(|m| p.is_running(&m.id)).count();
    let count = p.rules.base_hosts.len() + running;
    if cause == Cause::Rebalance && count <= p.rules.min {
        let msg = format!(
            "{reason}: {} kept, the job is at min ({})",
            t.ip, p.rules.min
        );
        out.event(p, EventKind::RemovalHeld, Some((&t.id, t.ip)), None, msg);
        return;
    }
    st.members.remove(pos);
    out.removed.push(t.ip);
    // Its group replaces it (Capacity Rebalancing may already have).
    let then = match p.group.is_some_and(|g| g.instances.contains_key(&t.id)) {
        true => Ending::GroupTerminate { decrement: false },
        false => Ending::Terminate,
    };
    let mut r = removal::new_for(p, &t.id, t.ip, cause, Some(then), &reason);
    if let Some(deadline) = n.deadline {
        r.deadline = r.deadline.min(deadline);
    }
    removal::queue(p, st, out, r);
}

/// The group waits on our terminating hook for this instance: the hook path drains it.
fn held_by_hook(p: &Inputs, id: &str) -> bool {
    p.group
        .is_some_and(|g| g.terminating_hook.is_some() && g.instances.contains_key(id))
}

fn describe(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Interruption => "interruption warning",
        NoticeKind::Rebalance => "rebalance recommendation",
        NoticeKind::CapacityBlockExpiring => "Capacity Block expiration warning",
        NoticeKind::ScheduledChange => "EC2 scheduled change",
        NoticeKind::GroupTerminating => "Auto Scaling termination",
    }
}

fn target_text(t: &NoticeTarget) -> String {
    match t {
        NoticeTarget::Instance(id) => id.clone(),
        NoticeTarget::Ip(ip) => ip.to_string(),
        NoticeTarget::CapacityReservation(cr) => cr.clone(),
        NoticeTarget::Agent { instance, .. } => instance.clone(),
    }
}
