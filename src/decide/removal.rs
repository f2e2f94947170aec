//! The removal lifecycle, one state machine (see [`Stage`]):
//!
//! ```text
//!   AwaitingAck --(acknowledged, or the ack timeout)--> Ending --(call confirmed)--> Ended
//!        |                 \--(ends with `then: None`: kept running)--> forgotten
//!        |--(elastic tag back, cause ElasticTag)--> cancelled
//!   any --(interruption)--> Reclaiming --(only an agent said so, and EC2 still runs it past
//!                                          the notice's time)--> forgotten (may join again)
//!   any --(instance stopped running, on a complete view)--> forgotten
//! ```
//!
//! [`advance`] is the only thing that moves a removal forward on a pass; `interrupt`, `cancel`
//! and [`confirm`] are the transitions other events cause.

use std::net::IpAddr;

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// A removal of a listed instance waiting for the job's acknowledgement of the next generation.
pub(super) fn new(
    p: &Inputs,
    inst: &Instance,
    cause: Cause,
    then: Option<Ending>,
    reason: &str,
) -> Removal {
    new_for(p, &inst.id, inst.ip, cause, then, reason)
}

pub(super) fn new_for(
    p: &Inputs,
    id: &str,
    ip: IpAddr,
    cause: Cause,
    then: Option<Ending>,
    reason: &str,
) -> Removal {
    Removal {
        id: id.to_string(),
        ip,
        generation: p.next_gen,
        queued_at: p.now,
        deadline: p.now + p.rules.ack_timeout_ms,
        log_mark: p.log_mark(),
        reason: reason.to_string(),
        stage: Stage::AwaitingAck {
            cause,
            then,
            heartbeat_at: None,
        },
    }
}

/// Remembers a new removal and journals it, with its cause while it has one; returns the event
/// for a caller whose removal ends at once to say why.
pub(super) fn queue<'d>(
    p: &Inputs,
    st: &mut State,
    out: &'d mut Draft,
    r: Removal,
) -> &'d mut Event {
    let (ip, generation, reason) = (r.ip, r.generation, &r.reason);
    let (kind, msg) = match r.stage {
        Stage::Reclaiming { .. } => (
            EventKind::Interrupted,
            format!("{reason}: {ip} left the job at once; the job keeps training without it"),
        ),
        Stage::AwaitingAck { .. } => (
            EventKind::RemovalQueued,
            format!("{reason}: {ip} leaves the job; terminated after the job acknowledges generation {generation}"),
        ),
        Stage::Ending(_) | Stage::Ended => (
            EventKind::RemovalQueued,
            format!("{reason}: {ip} never joined the job; terminating"),
        ),
    };
    queue_as(p, st, out, r, kind, msg)
}

/// [`queue`] with the event's kind and message chosen by the caller.
pub(super) fn queue_as<'d>(
    p: &Inputs,
    st: &mut State,
    out: &'d mut Draft,
    r: Removal,
    kind: EventKind,
    msg: String,
) -> &'d mut Event {
    let (id, ip, generation, cause) = (r.id.clone(), r.ip, r.generation, r.cause());
    st.removals.push(r);
    let e = out.event(p, kind, Some((&id, ip)), Some(generation), msg);
    e.cause = cause;
    e
}

/// Only a deleted elastic tag can be taken back, and only before the worker is let go.
pub(super) fn cancellable(r: &Removal) -> bool {
    r.cause() == Some(Cause::ElasticTag)
}

/// AWS takes the instance away: a member leaves the job at once; a worker already leaving
/// stops waiting for an acknowledgement it may not live to see. Never terminated by us.
pub(super) fn interrupt(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    id: &str,
    ip: IpAddr,
    reason: &str,
    unconfirmed_until: Option<Millis>,
) {
    if let Some(pos) = st.members.iter().position(|m| m.id == id) {
        st.members.remove(pos);
        out.removed.push(ip);
        st.interruptions += 1;
    } else if let Some(r) = st.removals.iter_mut().find(|r| r.id == id) {
        if !r.stage.reclaim(unconfirmed_until) {
            return;
        }
        let msg = format!("{reason}: {ip} was already leaving; AWS takes it back");
        out.event(p, EventKind::Interrupted, Some((id, ip)), None, msg);
        return;
    }
    let mut r = new_for(p, id, ip, Cause::ElasticTag, None, reason);
    r.stage.reclaim(unconfirmed_until);
    queue(p, st, out, r);
}

pub(super) fn advance_all(p: &Inputs, st: &mut State, out: &mut Draft) {
    let removals = std::mem::take(&mut st.removals);
    for mut r in removals {
        if advance(p, st, out, &mut r) {
            st.removals.push(r);
        }
    }
}

/// Moves one removal forward; returns false when it is finished and can be forgotten.
fn advance(p: &Inputs, st: &mut State, out: &mut Draft, r: &mut Removal) -> bool {
    if p.rules.is_protected(r.ip) {
        // Made a base host (or the master) since it was queued: never terminated.
        return false;
    }
    if r.is_interrupted() {
        return await_reclaim(p, st, out, r);
    }
    if !p.can_remove() {
        let status = match r.stage {
            Stage::AwaitingAck { .. } => WorkerStatus::RemovalQueued,
            _ => WorkerStatus::Removed,
        };
        out.view_id(p, &r.id, status, Some("a complete view".into()));
        return true;
    }
    if !p.is_running(&r.id) {
        let who = Some((r.id.as_str(), r.ip));
        if r.awaits_ack() {
            let msg = format!("{} stopped running before it was terminated", r.ip);
            out.event(p, EventKind::Gone, who, Some(r.generation), msg);
        } else if matches!(r.stage, Stage::Ending(_)) {
            // Its ending was sent and never confirmed (journaled): the call failed, or dtd died
            // before the answer was recorded. A confirmation already in the journal was found
            // when dtd started (`daemon::recover`), so this is the one `terminated` line.
            let msg = format!(
                "{} ({}) is no longer running; the call ending it was not confirmed",
                r.id, r.ip
            );
            out.event(p, EventKind::Terminated, who, Some(r.generation), msg);
        }
        return false;
    }
    match &r.stage {
        Stage::AwaitingAck { .. } => return await_ack(p, st, out, r),
        Stage::Ending(e) => {
            // The last call was never confirmed (it failed, or the daemon died): send it again.
            send(out, &r.id, e);
            out.view_id(p, &r.id, WorkerStatus::Removed, None);
        }
        Stage::Ended | Stage::Reclaiming { .. } => {
            let why = Some("the instance to shut down".to_string());
            out.view_id(p, &r.id, WorkerStatus::Removed, why);
        }
    }
    true
}

/// Returns false when the removal is finished and can be forgotten. With a launcher, an
/// acknowledged worker also waits (within the ack timeout) for its launcher to stop, so it is
/// terminated only once its processes are gone.
fn await_ack(p: &Inputs, st: &State, out: &mut Draft, r: &mut Removal) -> bool {
    let by_file = p.ack.is_some_and(|g| g >= r.generation);
    let by_log = (p.acks.and_then(|a| a.log_removed.get(&r.ip))).is_some_and(|l| *l > r.log_mark);
    let running = (by_file || by_log)
        .then(|| super::launcher_reports::still_running(p, st, r))
        .flatten()
        .filter(|_| p.now < r.deadline);
    let (kind, msg) = if let Some(why) = running {
        out.view_id(p, &r.id, WorkerStatus::RemovalQueued, Some(why));
        heartbeat(p, out, r);
        return true;
    } else if by_file || by_log {
        let msg = format!(
            "job acknowledged the removal of {} ({}); {}",
            r.ip,
            p.acked_by(by_file),
            then_words(r)
        );
        (EventKind::Acknowledged, msg)
    } else if p.now >= r.deadline {
        (EventKind::AckTimeout, timed_out(p, r))
    } else {
        let secs = (r.deadline - p.now).div_ceil(1000);
        let mut why = format!(
            "job to acknowledge generation {} (timeout in {secs}s)",
            r.generation
        );
        if matches!(
            r.cause(),
            Some(Cause::Unhealthy | Cause::Hung | Cause::Straggler)
        ) {
            // The row is where people look for why a worker they did not remove is leaving.
            why = format!("{}; {why}", r.reason);
        }
        out.view_id(p, &r.id, WorkerStatus::RemovalQueued, Some(why));
        heartbeat(p, out, r);
        return true;
    };
    let who = Some((r.id.as_str(), r.ip));
    out.event(p, kind, who, Some(r.generation), msg);
    let Some(end) = r.stage.job_done() else {
        // Out of the job and acknowledged; it stays running and may come back.
        return false;
    };
    send(out, &r.id, &end);
    out.view_id(p, &r.id, WorkerStatus::Removed, None);
    true
}

/// Which deadline passed: the ack timeout, or the sooner one of the notice that drained the
/// worker (a Capacity Block's end, a scheduled change's start), which people must not mistake
/// for a job that never acknowledges.
fn timed_out(p: &Inputs, r: &Removal) -> String {
    let timeout = p.rules.ack_timeout_ms;
    if r.deadline >= r.queued_at.saturating_add(timeout) {
        let took = humantime::format_duration(std::time::Duration::from_millis(timeout));
        return format!(
            "no acknowledgement for {} within the ack timeout (job.ack.timeout: {took}); {}",
            r.ip,
            then_words(r)
        );
    }
    let what = match r.cause() {
        Some(Cause::CapacityBlock) => "its Capacity Block's end",
        Some(Cause::ScheduledChange) => "its scheduled change",
        _ => "its notice's deadline",
    };
    format!(
        "no acknowledgement for {} before {what} ({}); {}",
        r.ip,
        rfc3339(r.deadline),
        then_words(r)
    )
}

/// What follows the job's side of a removal, as the journal says it: every ending terminates
/// the instance (by us, its group, or its hook); none leaves it running outside the job (a
/// member drained on a silence).
fn then_words(r: &Removal) -> &'static str {
    match &r.stage {
        Stage::AwaitingAck { then: None, .. } => "it stays running, outside the job",
        _ => "terminating",
    }
}

/// Sends what ends a removal whose job side is done.
fn send(out: &mut Draft, id: &str, end: &Ending) {
    match end {
        Ending::Terminate => out.act(Action::Terminate {
            instance: id.to_string(),
        }),
        Ending::GroupTerminate { decrement } => out.act(Action::GroupTerminate {
            instance: id.to_string(),
            decrement: *decrement,
        }),
        Ending::Hook { name } => out.complete(id, name, HookResult::Continue),
        Ending::MarkUnhealthy => out.act(Action::SetUnhealthy {
            instance: id.to_string(),
        }),
    }
}

/// Keeps the terminating hook from timing out while the job finishes with the worker.
fn heartbeat(p: &Inputs, out: &mut Draft, r: &mut Removal) {
    let Stage::AwaitingAck {
        then: Some(Ending::Hook { name }),
        heartbeat_at,
        ..
    } = &mut r.stage
    else {
        return;
    };
    let Some(h) = p.group.and_then(|g| g.terminating_hook.as_ref()) else {
        return;
    };
    let last = heartbeat_at.unwrap_or(r.queued_at);
    if p.now.saturating_sub(last) >= h.heartbeat_timeout_ms / 2 {
        out.heartbeat(&r.id, name);
        *heartbeat_at = Some(p.now);
    }
}

/// Interrupted workers stay shown as INTERRUPTED until AWS has taken them. Forgotten once a
/// complete view no longer shows it: like every removal, it is not dropped on a partial one.
fn await_reclaim(p: &Inputs, st: &mut State, out: &mut Draft, r: &Removal) -> bool {
    if p.can_remove() && !p.is_running(&r.id) {
        return false;
    }
    if let Stage::Reclaiming {
        unconfirmed_until: Some(until),
    } = r.stage
    {
        if p.can_remove() && p.now >= until {
            super::trust::release_unconfirmed(p, st, out, r);
            return false;
        }
    }
    let why = Some("AWS to reclaim it".to_string());
    out.view_id(p, &r.id, WorkerStatus::Interrupted, why);
    true
}

/// The calls that ended these instances succeeded (`what` names the call): their removals are
/// never sent again. Returns the `terminated` events to journal.
pub(super) fn confirm(state: &mut State, done: &[String], what: &str, now: Millis) -> Vec<Event> {
    let mut events = Vec::new();
    for r in state.removals.iter_mut().filter(|r| done.contains(&r.id)) {
        if !r.stage.confirm() {
            continue;
        }
        let message = format!("{what} {} ({})", r.id, r.ip);
        events.push(Event {
            instance: Some(r.id.clone()),
            ip: Some(r.ip),
            generation: Some(r.generation),
            ..Event::new(now, EventKind::Terminated, message)
        });
    }
    events
}
