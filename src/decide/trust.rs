//! What a worker says is believed only as far as EC2's view or dtd's own state confirms it
//! (ARCHITECTURE.md, "Trust rules"). Every worker runs user code that can write any file in the
//! shared directory, with valid JSON and plausible numbers: these rules decide which of those
//! claims a pass acts on. Each refusal is shown in `dtctl status` on every pass that sees it and
//! journaled once, when first seen.

use std::net::IpAddr;

use super::draft::{Draft, Who};
use super::inputs::Inputs;
use super::rules::GROUP_TAG;
use crate::model::*;

/// One agent notice per worker IP is heeded in this long: a worker that lies about another's
/// interruption (with fresh notice ids) takes it out at most once an hour.
const AGENT_NOTICE_EVERY_MS: Millis = 3_600_000;
/// After an agent's interruption notice proved false, that IP's agent is not believed for a day.
const AGENT_NOTICE_DISTRUST_MS: Millis = 24 * 3_600_000;
/// A Spot interruption warning comes two minutes before AWS acts ("Spot Instance interruption
/// notices", Amazon EC2 User Guide); a notice claiming a later time is held to this.
pub(super) const SPOT_WARNING_MS: Millis = 2 * 60_000;
/// How long past the notice's time an interrupted instance may still show as running in EC2
/// (shutting down, a listing taken just before) before the notice is judged false.
const RECLAIM_GRACE_MS: Millis = 2 * 60_000;

/// Shows a refusal in status every pass it is seen, journals it the first time (by `key`).
pub(super) fn refuse(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    key: RefusalKey,
    kind: EventKind,
    who: Who,
    msg: String,
) {
    if st.refused.insert(key.clone()) {
        out.event(p, kind, who, None, msg.clone());
    }
    out.outcome.refused.push(msg);
    out.refused_keys.insert(key);
}

/// Forgets refusals no longer seen, so one that comes back is journaled again. Only on a pass
/// that read every source: a partial view did not look for them.
pub(super) fn forget_stale(p: &Inputs, st: &mut State, out: &Draft) {
    if p.can_remove() {
        st.refused.retain(|k| out.refused_keys.contains(k));
    }
    st.agent_notices.retain(|_, until| p.now < *until);
}

/// Each worker's agent key, as its agent first proved it with the instance's identity document,
/// is kept: a later hello with another key (user code on that instance, allowed to read its
/// metadata) cannot change whose word its reports are. A changed key is refused, journaled once
/// (the agents' port refuses such a hello too, once it knows the pin).
pub(super) fn pin_keys(p: &Inputs, st: &mut State, out: &mut Draft) {
    let Some(m) = p.markers else { return };
    for (id, key) in &m.key_proofs {
        let changed = st.with_worker(id, |w| match w.pin_key(key) {
            Pinned::Changed(pinned) => Some(pinned.short().to_string()),
            Pinned::First | Pinned::Same => None,
        });
        let Some(pinned) = changed else {
            continue;
        };
        let who = p.at(id).map(|at| p.who(at));
        let msg = format!(
            "{id}'s agent proved key {}…, but dtd keeps {pinned}…, the key its agent first \
             proved: reports signed with the new key are refused (terminate the worker if its \
             agent really lost its key)",
            key.short()
        );
        let refusal = RefusalKey::AgentKeyChanged {
            instance: id.clone(),
            key: key.short().to_string(),
        };
        refuse(p, st, out, refusal, EventKind::MarkerRefused, who, msg);
    }
}

/// The newest report of each kind believed from each worker's agent is remembered, so that a
/// restarted dtd believes nothing older.
pub(super) fn remember_newest(p: &Inputs, st: &mut State) {
    let Some(m) = p.markers else { return };
    for (id, kind, signed_at) in &m.newest {
        st.with_worker(id, |w| w.believed(*kind, *signed_at));
    }
}

/// Reports about listed workers that are not believed (see `observe::markers::book`): shown,
/// and journaled once per file and kind of lie.
pub(super) fn refuse_reports(p: &Inputs, st: &mut State, out: &mut Draft) {
    let Some(m) = p.markers else { return };
    for r in &m.refused {
        let who = p.at(&r.instance).map(|at| p.who(at));
        let key = RefusalKey::Report {
            file: r.file.clone(),
            class: r.class.clone(),
        };
        refuse(
            p,
            st,
            out,
            key,
            EventKind::MarkerRefused,
            who,
            r.why.clone(),
        );
    }
}

/// The job's files someone other than the job's user owns (a worker created them first): not
/// read at all by observe; journaled once and shown here.
pub(super) fn refuse_files(p: &Inputs, st: &mut State, out: &mut Draft) {
    for why in p.acks.map(|a| a.refused.as_slice()).unwrap_or_default() {
        let key = RefusalKey::File { why: why.clone() };
        refuse(p, st, out, key, EventKind::FileRefused, None, why.clone());
    }
}

pub(super) fn refuse_ack(p: &Inputs, st: &mut State, out: &mut Draft, claimed: u64) {
    let msg = format!(
        "the ack file holds generation {claimed}, but dtd has written only up to {}: ignored \
         (leaving workers wait for an acknowledgement dtd wrote, or the ack timeout)",
        st.generation
    );
    let key = RefusalKey::Ack { claimed };
    refuse(p, st, out, key, EventKind::AckRefused, None, msg);
}

/// Why an agent's interruption notice is not believed, as the refusal shows it.
#[derive(Debug, thiserror::Error)]
pub(super) enum NoticeRefusal {
    #[error("names {0:?}, which is not an instance id")]
    NotAnInstanceId(String),
    #[error("names {claimed}, which EC2 lists at {listed}")]
    ListedElsewhere { claimed: String, listed: IpAddr },
    #[error("names {claimed}, but EC2 lists {holder} at {ip}")]
    AnotherAtIp {
        claimed: String,
        holder: String,
        ip: IpAddr,
    },
    #[error("names {claimed}, which is at {known}")]
    RememberedElsewhere { claimed: String, known: IpAddr },
    #[error("comes too soon after the last notice from {ip}'s agent (next believed from {})", rfc3339(*.until))]
    TooSoon { ip: IpAddr, until: Millis },
    #[error("is a Spot interruption warning, but EC2 says {id} is {market}")]
    NotSpot { id: String, market: String },
    #[error(
        "says its Auto Scaling group is terminating it, but EC2 says {0} is in no worker group"
    )]
    NotInGroup(String),
}

/// An agent's notice names an instance and comes from the marker of an IP. It is believed only
/// when EC2 lists that instance at that IP (or, when EC2 could not be read, the state remembers
/// it there), and only for what EC2 says the instance is. `Ok(None)`: not this cluster's.
pub(super) fn agent_target(
    p: &Inputs,
    st: &State,
    n: &Notice,
    claimed: &str,
    ip: IpAddr,
) -> Result<Option<(String, IpAddr)>, NoticeRefusal> {
    use NoticeRefusal::*;
    if !is_ec2_instance_id(claimed) {
        return Err(NotAnInstanceId(claimed.chars().take(40).collect()));
    }
    let claimed_id = || claimed.to_string();
    if let Some(at) = p.at(claimed) {
        let inst = &p.list[at];
        if inst.ip != ip {
            let listed = inst.ip;
            return Err(ListedElsewhere {
                claimed: claimed_id(),
                listed,
            });
        }
        kind_fits(p, n.kind, inst)?;
    } else if let Some(at) = p.at_ip(ip) {
        let holder = p.list[at].id.clone();
        return Err(AnotherAtIp {
            claimed: claimed_id(),
            holder,
            ip,
        });
    } else {
        let remembered = (st.members.iter().map(|m| (&m.id, m.ip)))
            .chain(st.removals.iter().map(|r| (&r.id, r.ip)))
            .find(|(id, _)| *id == claimed);
        match remembered {
            Some((_, known)) if known != ip => {
                return Err(RememberedElsewhere {
                    claimed: claimed_id(),
                    known,
                });
            }
            Some(_) => {}
            None => return Ok(None),
        }
    }
    if let Some(until) = st.agent_notices.get(&ip).filter(|u| p.now < **u) {
        if !already_reclaimed(st, claimed) {
            return Err(TooSoon { ip, until: *until });
        }
    }
    Ok(Some((claimed.to_string(), ip)))
}

/// What EC2 says of the instance must fit the notice: a Spot warning is for a Spot instance (or
/// one in a Capacity Reservation, whose interruptible kind warns the same way), a group's
/// termination for one of the group's instances.
fn kind_fits(p: &Inputs, kind: NoticeKind, inst: &Instance) -> Result<(), NoticeRefusal> {
    match kind {
        NoticeKind::Interruption
            if inst.market != "spot" && inst.capacity_reservation.is_none() =>
        {
            let (id, market) = (inst.id.clone(), inst.market.clone());
            Err(NoticeRefusal::NotSpot { id, market })
        }
        NoticeKind::GroupTerminating
            if p.rules.auto_scaling_group.is_none()
                || inst.tags.get(GROUP_TAG) != p.rules.auto_scaling_group.as_deref() =>
        {
            Err(NoticeRefusal::NotInGroup(inst.id.clone()))
        }
        _ => Ok(()),
    }
}

fn already_reclaimed(st: &State, id: &str) -> bool {
    (st.removals.iter()).any(|r| r.id == id && r.is_interrupted())
}

/// An agent's notice that took a worker out: the next one from that IP waits an hour.
pub(super) fn heeded_from_agent(p: &Inputs, st: &mut State, ip: IpAddr) {
    st.agent_notices.insert(ip, p.now + AGENT_NOTICE_EVERY_MS);
}

/// Until when an interruption only an agent reported may leave its instance running before the
/// notice is judged false: the notice's time, at most two minutes away, plus a grace.
pub(super) fn unconfirmed_until(p: &Inputs, n: &Notice) -> Option<Millis> {
    if n.source != "agent" {
        return None;
    }
    let latest = p.now.saturating_add(SPOT_WARNING_MS);
    let at = n.deadline.unwrap_or(latest).clamp(p.now, latest);
    Some(at.saturating_add(RECLAIM_GRACE_MS))
}

/// An interruption only a worker's agent reported, and its instance still runs past the time
/// AWS would have taken it: the notice was false. The worker may join again; its IP's agent is
/// not believed for a day.
pub(super) fn release_unconfirmed(p: &Inputs, st: &mut State, out: &mut Draft, r: &Removal) {
    let msg = format!(
        "{} ({}) is still running after its agent's interruption notice ({}): EC2 never took \
         it; it may join again, and agent notices from {} are not believed until {}",
        r.ip,
        r.id,
        r.reason,
        r.ip,
        rfc3339(p.now + AGENT_NOTICE_DISTRUST_MS)
    );
    st.agent_notices
        .insert(r.ip, p.now + AGENT_NOTICE_DISTRUST_MS);
    let who = Some((r.id.as_str(), r.ip));
    out.event(p, EventKind::NoticeUnconfirmed, who, None, msg);
}

/// A success or failure marker whose body names an instance other than the one EC2 lists at
/// its IP: written for an earlier owner of the IP, or by another worker. `None`: believed (it
/// names this instance, or none, as a 2018 marker does).
pub(super) fn foreign_marker(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    failed: bool,
) -> bool {
    let inst = &p.list[at];
    let markers = p.markers;
    let named = match failed {
        false => markers.and_then(|m| m.success_named.get(&inst.ip)),
        true => markers.and_then(|m| m.failed_named.get(&inst.ip)),
    };
    let Some(named) = named.filter(|n| **n != inst.id) else {
        return false;
    };
    let file = match failed {
        false => "prepare_data_success",
        true => "prepare_data_failed",
    };
    let shown: String = named.chars().take(40).collect();
    let msg = format!(
        "{file}_{} names {shown:?}, but EC2 lists {} at {}: ignored",
        inst.ip, inst.id, inst.ip
    );
    let key = RefusalKey::ForeignMarker {
        failed,
        instance: inst.id.clone(),
        named: shown,
    };
    refuse(
        p,
        st,
        out,
        key,
        EventKind::MarkerRefused,
        Some(p.who(at)),
        msg,
    );
    true
}
