//! Health: a worker whose health check failed (its agent's `health_<ip>`) leaves the job and is
//! replaced. A member drains (terminated once the job acknowledges) or, when its GPUs are gone or
//! `health.leave` is `immediate`, leaves at once; a worker not in the job never joins. A group
//! worker is marked Unhealthy (the group replaces it); a launch-template worker is terminated,
//! and with `workers.replace_unhealthy` a new one is launched from the template.
//!
//! When more than `health.max_unhealthy` of the workers are unhealthy at once, nothing is
//! removed or replaced: a fleet-wide failure is more likely a bad check or a bad AMI than bad
//! GPUs, and replacing the fleet would stop the job for nothing. It resumes by itself once few
//! enough are unhealthy.

use super::draft::Draft;
use super::inputs::Inputs;
use super::{budget, group, holds, removal, replacements};
use crate::config::HealthLeave;
use crate::model::*;

/// The report of the listed cluster worker at `at`, when it says the worker is unhealthy. Only
/// with `agent.health` configured (without it no agent checks, and a `health_<ip>` file is
/// anyone's); a report another instance left under this IP, and a base host's or the master's,
/// are not.
pub(super) fn unhealthy<'a>(p: &Inputs<'a>, at: usize) -> Option<&'a HealthSeen> {
    let inst = &p.list[at];
    if !p.rules.health_checked || p.rules.is_protected(inst.ip) {
        return None;
    }
    (p.markers?.health.get(&inst.ip)).filter(|h| !h.ok && h.instance_id == inst.id)
}

pub(super) fn heed(p: &Inputs, st: &mut State, out: &mut Draft) {
    let Some(m) = p.markers.filter(|_| p.rules.health_checked) else {
        return;
    };
    let reported = (m.health.values())
        .filter(|h| !h.ok)
        .map(|h| &h.instance_id);
    let mut bad: Vec<usize> = reported
        .filter_map(|id| p.at(id))
        .filter(|&at| p.facts[at].cluster && unhealthy(p, at).is_some())
        .collect();
    bad.sort_unstable();
    bad.dedup();
    journal(p, st, out, &bad);
    if (bad.is_empty() && st.health_stopped.is_none()) || !within_limit(p, st, out, bad.len()) {
        return;
    }
    for at in bad {
        act_on(p, st, out, at);
    }
}

/// `unhealthy` once per instance; `healthy` when one journaled reports healthy again.
fn journal(p: &Inputs, st: &mut State, out: &mut Draft, bad: &[usize]) {
    for &at in bad {
        let (id, ip) = p.who(at);
        if st.pending(id).is_some_and(|w| w.unhealthy.is_some()) {
            continue;
        }
        let Some(h) = unhealthy(p, at) else {
            continue;
        };
        let msg = match h.gpus_lost {
            true => format!(
                "{ip} ({id}): health check failed (its GPUs are gone): {}",
                h.reason
            ),
            false => format!("{ip} ({id}): health check failed: {}", h.reason),
        };
        out.event(p, EventKind::Unhealthy, Some((id, ip)), None, msg);
        st.pending_mut(id).fell_ill(&h.reason);
    }
    let journaled = st.pending.values().filter(|w| w.unhealthy.is_some());
    if journaled.count() == bad.len() {
        return;
    }
    let still: rustc_hash::FxHashSet<&str> = bad.iter().map(|&at| p.who(at).0).collect();
    let mut healthy = Vec::new();
    for (id, w) in st.pending.iter_mut().filter(|(_, w)| w.unhealthy.is_some()) {
        if still.contains(id.as_str()) {
            continue;
        }
        // Forgotten once a complete view shows it gone; kept while it may only be unseen.
        match p.at(id) {
            Some(at) => healthy.push(at),
            None if p.can_remove() => {}
            None => continue,
        }
        w.unhealthy = None;
    }
    for at in healthy {
        let (id, ip) = p.who(at);
        let msg = format!("{ip} ({id}): health check passes again");
        out.event(p, EventKind::Healthy, Some((id, ip)), None, msg);
    }
}

/// The workers a share of `max_unhealthy` is of: every listed cluster worker dtd may remove.
fn workers(p: &Inputs) -> usize {
    (0..p.list.len())
        .filter(|&at| p.facts[at].cluster && !p.rules.is_protected(p.list[at].ip))
        .count()
}

/// Stops (once) above the limit and resumes (once) at or under it. Returns whether to act.
fn within_limit(p: &Inputs, st: &mut State, out: &mut Draft, bad: usize) -> bool {
    let total = workers(p);
    let max = p.rules.max_unhealthy;
    let allowed = max.allowed(total);
    if bad > allowed {
        if st.health_stopped.is_none() {
            st.health_stopped = Some(p.now);
            let msg = format!(
                "{bad} of {total} workers unhealthy, more than health.max_unhealthy ({max}, \
                 {allowed} here): removing and replacing unhealthy workers stopped, as a \
                 fleet-wide failure is more likely a bad check or a bad AMI; it resumes when \
                 {allowed} or fewer are unhealthy"
            );
            out.event(p, EventKind::HealthStopped, None, None, msg);
        }
        let since = st
            .health_stopped
            .map_or(String::new(), |t| format!(" since {}", rfc3339(t)));
        out.outcome.holds.push(format!(
            "health: {bad} of {total} workers unhealthy (health.max_unhealthy {max}){since}: \
             none removed or replaced until {allowed} or fewer are; see `dtctl events`"
        ));
        return false;
    }
    if st.health_stopped.take().is_some() {
        let msg = format!(
            "{bad} of {total} workers unhealthy, within health.max_unhealthy ({max}): \
             removing and replacing unhealthy workers resumed"
        );
        out.event(p, EventKind::HealthResumed, None, None, msg);
    }
    true
}

/// Whether removing and replacing unhealthy workers is stopped (`max_unhealthy`).
pub(super) fn stopped(st: &State) -> bool {
    st.health_stopped.is_some()
}

fn act_on(p: &Inputs, st: &mut State, out: &mut Draft, at: usize) {
    let id = p.list[at].id.as_str();
    if st.removals.iter().any(|r| r.id == id) || !p.can_remove() {
        // Already on its way out; or a partial view, on which nothing is removed.
        return;
    }
    match st.members.iter().position(|m| m.id == id) {
        Some(pos) => leave(p, st, out, at, pos),
        // A group worker held by the launching hook is abandoned there (`launch`).
        None if p.facts[at].elastic && group::serving(p, at) => replace_unjoined(p, st, out, at),
        None => {}
    }
}

/// A member leaves: at once when its GPUs are gone or `health.leave` says so, else it drains.
fn leave(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, pos: usize) {
    let Some(h) = unhealthy(p, at) else {
        return;
    };
    let inst = &p.list[at];
    let at_once = h.gpus_lost || p.rules.health_leave == HealthLeave::Immediate;
    // A drain is voluntary: it waits for the disruption window and budget, training on.
    if let Some(why) = budget::exhausted(p, st).filter(|_| !at_once) {
        return hold_drain(p, st, out, at, &why);
    }
    holds::released(st, &inst.id);
    let reason = h.describe();
    if !at_once {
        let head = format!("{reason}: {} leaves the job", inst.ip);
        return drain(p, st, out, at, Cause::Unhealthy, &reason, head);
    }
    take_out(st, out, pos);
    let end = ending(p, at);
    owe_replacement(p, st, at, &end);
    let mut r = removal::new(p, inst, Cause::Unhealthy, Some(end.clone()), &reason);
    let then = then_text(&end);
    r.stage.end(end);
    let why = match h.gpus_lost {
        true => "its GPUs are gone",
        false => "health.leave is immediate",
    };
    let msg = format!("{reason}: {} left the job at once ({why}); {then}", inst.ip);
    removal::queue_as(p, st, out, r, EventKind::RemovalQueued, msg).cause = Some(Cause::Unhealthy);
}

/// A member leaves the job now and ends as an unhealthy one does once the job has let it go (its
/// replacement owed from now). `head` says who leaves and why; the journal line adds the ending
/// and the generation the job must acknowledge.
pub(super) fn drain(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    cause: Cause,
    reason: &str,
    head: String,
) {
    let inst = &p.list[at];
    let Some(pos) = st.members.iter().position(|m| m.id == inst.id) else {
        return;
    };
    take_out(st, out, pos);
    let end = ending(p, at);
    owe_replacement(p, st, at, &end);
    let r = removal::new(p, inst, cause, Some(end.clone()), reason);
    let then = then_text(&end);
    let msg = format!(
        "{head}; {then} after the job acknowledges generation {}",
        r.generation
    );
    removal::queue_as(p, st, out, r, EventKind::RemovalQueued, msg);
}

/// The member at `pos` leaves the host files now; the job is told it was unhealthy (it cannot
/// take part: a failed check, or a silence).
pub(super) fn take_out(st: &mut State, out: &mut Draft, pos: usize) {
    let ip = st.members.remove(pos).ip;
    out.removed.push(ip);
    out.notices.retain(|j| j.ip != ip);
    out.notices.push(JobNotice {
        ip,
        kind: crate::protocol::notices::Reason::Unhealthy,
        deadline: None,
    });
}

/// Journaled once (`removal_held`); `show_kept` shows why it still trains.
fn hold_drain(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, why: &str) {
    let ip = p.list[at].ip;
    holds::journal_held(p, st, out, at, || format!("removal of {ip} held: {why}"));
}

/// A worker not in the job never joins: it is replaced at once. One whose tag says it may be
/// training (ADDED, REMOVAL_QUEUED: the state was lost) first waits for an acknowledgement given
/// after this pass, as `leaving::retire_unjoined` does, unless its GPUs are gone.
fn replace_unjoined(p: &Inputs, st: &mut State, out: &mut Draft, at: usize) {
    let Some(h) = unhealthy(p, at) else {
        return;
    };
    let inst = &p.list[at];
    let end = ending(p, at);
    owe_replacement(p, st, at, &end);
    let then = then_text(&end);
    let reason = h.describe();
    let mut r = removal::new(p, inst, Cause::Unhealthy, Some(end.clone()), &reason);
    let may_train = matches!(
        p.facts[at].status,
        Some(WorkerStatus::Added | WorkerStatus::RemovalQueued)
    );
    let msg = if may_train && !h.gpus_lost {
        let gen = r.generation;
        let ip = inst.ip;
        format!("{reason}: {ip} may still be in the job (its tag says so); {then} after the job acknowledges generation {gen}")
    } else {
        r.stage.end(end);
        format!("{reason}: {} never joins the job; {then}", inst.ip)
    };
    removal::queue_as(p, st, out, r, EventKind::RemovalQueued, msg).cause = Some(Cause::Unhealthy);
}

/// A group worker is marked Unhealthy (its group replaces it); a launch-template worker is
/// terminated.
pub(super) fn ending(p: &Inputs, at: usize) -> Ending {
    match group::in_group(p, at) {
        true => Ending::MarkUnhealthy,
        false => Ending::Terminate,
    }
}

/// A terminated launch-template worker's replacement is owed from now when `replace_unhealthy`
/// is set: the new worker prepares while this one goes (sent by `replacements::send`).
pub(super) fn owe_replacement(p: &Inputs, st: &mut State, at: usize, end: &Ending) {
    if *end != Ending::Terminate
        || !p.rules.replace_unhealthy
        || p.rules.launch_template_id.is_none()
    {
        return;
    }
    replacements::owe(p, st, &p.list[at].id, Replaced::Unhealthy, None);
}

pub(super) fn then_text(end: &Ending) -> &'static str {
    match end {
        Ending::MarkUnhealthy => "marked Unhealthy, its Auto Scaling group replaces it",
        _ => "terminated",
    }
}

/// While stopped, an unhealthy member stays in the job: its row says why and what it waits for.
pub(super) fn show_kept(p: &Inputs, st: &State, out: &mut Draft) {
    let unhealthy = (st.pending.iter()).filter_map(|(id, w)| Some((id, w.unhealthy.as_ref()?, w)));
    for (id, reason, w) in unhealthy {
        let Some(at) = p.at(id) else { continue };
        let why = match (stopped(st), w.held.as_ref()) {
            (true, _) => {
                format!(
                    "a person: health check failed ({reason}); kept, health.max_unhealthy reached"
                )
            }
            (false, Some(held)) => format!("health check failed ({reason}); {held}"),
            (false, None) => continue,
        };
        if let Some(view) = out.views[at].as_mut() {
            view.1 = Some(why);
        }
    }
}
