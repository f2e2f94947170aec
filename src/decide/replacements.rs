//! Launches owed for launch-template workers that are unhealthy or warned of their loss (see
//! [`owe`]), and for group workers warned by AWS (their group's launch, by detaching them:
//! [`detach`]), sent until one is launched, each with the `workers.capacity` choices to try in
//! order: those EC2 has not refused within their cool-down, none in a zone the shared file
//! system cannot serve, and none from a reservation that cannot take one now (see
//! [`reserved`]). Settle starts a cool-down when act reports a choice refused.

use std::net::IpAddr;

use super::draft::Draft;
use super::inputs::Inputs;
use super::{group, trust};
use crate::model::*;

/// A launch from the template owed from now for `id`, once however often it is asked for, before
/// or after it is launched: its ClientToken names the instance it replaces, so an interrupted
/// worker that also fails its health check, or is warned twice, is replaced once.
pub(super) fn owe(p: &Inputs, st: &mut State, id: &str, because: Replaced, group: Option<String>) {
    // ClientToken: at most 64 ASCII characters ("Ensuring idempotency", Amazon EC2 API
    // Reference); an instance id is at most 19.
    let token = format!("dt-replace-{id}");
    let launched = st.launched_for.values().any(|l| l.replaces == id);
    if launched || st.replacements.iter().any(|r| r.token == token) {
        return;
    }
    st.replacements.push(Replacement {
        replaces: id.to_string(),
        group,
        because,
        token,
        queued_at: p.now,
        retry_at: p.now,
        last_error: None,
    });
}

/// With `workers.replace_interrupted`, a worker's replacement is owed the moment it is warned,
/// not after it is gone: the new one boots and prepares while the old one finishes (a Spot
/// warning gives two minutes). A rebalance recommendation counts only when it drains the
/// worker. A group worker's is its group's launch, and only for a Spot warning AWS sent: the
/// group's own ending of a drained worker (a rebalance, a Capacity Block) replaces it already,
/// and an agent's word alone may be false, while a detached worker stays out of its group.
pub(super) fn ahead(p: &Inputs, st: &mut State, n: &Notice, id: &str, ip: IpAddr) {
    let because = match n.kind {
        NoticeKind::Interruption => Replaced::Interrupted,
        NoticeKind::Rebalance if st.is_removing(ip) => Replaced::Rebalance,
        NoticeKind::CapacityBlockExpiring if st.is_removing(ip) => Replaced::CapacityBlock,
        _ => return,
    };
    let Some(at) = p.at(id).filter(|_| p.rules.replace_interrupted) else {
        return;
    };
    if !group::in_group(p, at) {
        if p.rules.launch_template_id.is_some() {
            owe(p, st, id, because, None);
        }
        return;
    }
    let from_aws = trust::unconfirmed_until(p, n).is_none();
    if let (Replaced::Interrupted, true, Some(g)) = (because, from_aws, p.group) {
        owe(p, st, id, because, Some(g.name.clone()));
    }
}

pub(super) fn send(p: &Inputs, st: &mut State, out: &mut Draft) {
    heed_add_refusals(p, st, out);
    st.no_capacity.retain(|_, u| u.until > p.now);
    show(p, st, out);
    detach(p, st, out);
    if st.replacements.iter().all(|r| r.group.is_some()) {
        return;
    }
    let choices = match usable(p, st) {
        Ok(choices) => choices,
        Err(why) => {
            for r in st.replacements.iter().filter(|r| r.group.is_none()) {
                let what = r.because.words();
                let msg = format!("replacement launch for {what} {}: {why}", r.replaces);
                out.outcome.holds.push(msg);
            }
            return;
        }
    };
    for r in st.replacements.iter().filter(|r| r.group.is_none()) {
        let doing = format!(
            "replacement launch for {} {}",
            r.because.words(),
            r.replaces
        );
        if due(p, out, r, &doing) {
            out.act(Action::Launch {
                replaces: r.replaces.clone(),
                because: r.because,
                token: r.token.clone(),
                choices: choices.clone(),
            });
        }
    }
}

/// A group worker's replacement: detached from its group until the group lists it no more (a
/// group read this pass; a failed read sends nothing). Capacity is the group's, not the choices'.
fn detach(p: &Inputs, st: &mut State, out: &mut Draft) {
    let Some(g) = p.group else {
        return;
    };
    let listed = |r: &Replacement| {
        r.group.as_deref() != Some(&g.name) || g.instances.contains_key(&r.replaces)
    };
    st.replacements.retain(listed);
    let ours = |r: &&Replacement| r.group.as_deref() == Some(&g.name);
    for r in st.replacements.iter().filter(ours) {
        let doing = format!(
            "detaching {} {} from its group",
            r.because.words(),
            r.replaces
        );
        if due(p, out, r, &doing) {
            out.act(Action::Detach {
                instance: r.replaces.clone(),
                because: r.because,
                token: r.token.clone(),
            });
        }
    }
}

/// Whether `r` is sent this pass; AWS's last refusal of it (`doing` names the call) is shown
/// until it goes through.
fn due(p: &Inputs, out: &mut Draft, r: &Replacement, doing: &str) -> bool {
    if let Some(e) = &r.last_error {
        let e: String = e.chars().take(300).collect();
        let next = rfc3339(r.retry_at.max(p.now));
        let msg = format!("{doing}: {e} (sent again from {next})");
        out.outcome.holds.push(msg);
    }
    p.now >= r.retry_at
}

/// Why a replacement launch waits: no capacity choice is usable.
#[derive(Debug, thiserror::Error)]
enum NoChoice {
    #[error("no capacity choice is usable; the first back is tried at {}", rfc3339(*.0))]
    BackAt(Millis),
    #[error("no capacity choice is usable now (dtctl status says why of each)")]
    None,
}

/// Why a capacity choice is skipped now, as `dtctl status` shows it beside the choice.
#[derive(Debug, thiserror::Error)]
enum Skip {
    #[error("{code} until {}", rfc3339(*.until))]
    Refused { code: String, until: Millis },
    /// `place`: the zone, and that the shared file system has no mount target there.
    #[error("{subnet} is in {place}")]
    Unmountable { subnet: String, place: String },
    #[error("EC2 does not list {0}")]
    NotListed(String),
    #[error("{id} not read: {why}")]
    NotRead { id: String, why: String },
    #[error("{0} not read yet")]
    NotReadYet(String),
    #[error("{id} is {state}, not active")]
    NotActive { id: String, state: String },
    #[error("{id} reserves {instance_type}")]
    OtherType { id: String, instance_type: String },
    #[error("{0} has no instance left")]
    Full(String),
    #[error("{id} ends at {}: no launch into its last 40 minutes", rfc3339(*.end))]
    Ending { id: String, end: Millis },
    /// The reservation's own words (`Reservation::zone_conflict`).
    #[error("{0}")]
    ZoneConflict(String),
    #[error("{id} is in {place}")]
    ReservationUnmountable { id: String, place: String },
}

/// The choices a launch may try now, in order (empty: the template as it is), or why none.
fn usable(p: &Inputs, st: &State) -> Result<Vec<LaunchChoice>, NoChoice> {
    let all = &p.rules.capacity;
    if all.is_empty() {
        return Ok(Vec::new());
    }
    let usable: Vec<LaunchChoice> = (all.iter())
        .filter_map(|c| match skipped(p, st, c) {
            Ok(capacity_block) => Some(LaunchChoice {
                choice: c.clone(),
                capacity_block,
            }),
            Err(_) => None,
        })
        .collect();
    if !usable.is_empty() {
        return Ok(usable);
    }
    let back = st.no_capacity.values().map(|u| u.until).min();
    Err(back.map_or(NoChoice::None, NoChoice::BackAt))
}

/// A choice EC2 refused to `dtctl add` is skipped as if dtd's own launch had been refused:
/// for the cool-down from the refusal, journaled once. Only the config's own choices count.
fn heed_add_refusals(p: &Inputs, st: &mut State, out: &mut Draft) {
    let seen = st.add_refusals_seen;
    let new = (p.add_refusals.iter()).filter(|r| Some(r.at) > seen);
    for r in new {
        st.add_refusals_seen = st.add_refusals_seen.max(Some(r.at));
        let ours = p.rules.capacity.iter().any(|c| c.name() == r.choice);
        let until = (r.at.min(p.now)).saturating_add(p.rules.capacity_cool_down_ms);
        if !ours || until <= p.now {
            continue;
        }
        let said = super::settle::skip(st, r.choice.clone(), &r.code, &r.message, until);
        let msg = format!("dtctl add found {said}");
        out.event(p, EventKind::CapacityUnavailable, None, None, msg);
    }
}

/// Why a choice is skipped now; for one that is not, whether it is a Capacity Block.
fn skipped(p: &Inputs, st: &State, c: &Choice) -> Result<bool, Skip> {
    if let Some(u) = st.no_capacity.get(&c.name()) {
        let (code, until) = (u.code.clone(), u.until);
        return Err(Skip::Refused { code, until });
    }
    let zone = c.subnet.as_ref().and_then(|s| subnet_zone(p, s));
    if let Some(place) = zone.and_then(|z| unmountable(p, z)) {
        let subnet = c.subnet.clone().unwrap_or_default();
        return Err(Skip::Unmountable { subnet, place });
    }
    reserved(p, c, zone)
}

/// Whether the reservation a choice names by id can take a launch now (`Ok`: whether it is a
/// Capacity Block). A resource group is EC2's to match within, and a choice naming none is
/// always `Ok(false)`. What was not read is not launched into: a Capacity Block needs its
/// market type.
fn reserved(p: &Inputs, c: &Choice, subnet_zone: Option<&str>) -> Result<bool, Skip> {
    let Some(id) = c.reservation_id() else {
        return Ok(false);
    };
    let id = id.to_string();
    let r = match p.reservations {
        Some(Ok(read)) => read.get(&id).ok_or_else(|| Skip::NotListed(id.clone()))?,
        Some(Err(e)) => {
            return Err(Skip::NotRead {
                id,
                why: e.to_string(),
            })
        }
        None => return Err(Skip::NotReadYet(id)),
    };
    if r.state != "active" {
        let state = r.state.clone();
        return Err(Skip::NotActive { id, state });
    }
    if r.instance_type != c.instance_type {
        let instance_type = r.instance_type.clone();
        return Err(Skip::OtherType { id, instance_type });
    }
    if r.available == 0 {
        return Err(Skip::Full(id));
    }
    if let Some(at) = r.drains_at().filter(|at| p.now >= *at) {
        let end = r.end.unwrap_or(at);
        return Err(Skip::Ending { id, end });
    }
    if let Some(why) = subnet_zone.and_then(|z| r.zone_conflict(z)) {
        return Err(Skip::ZoneConflict(why));
    }
    match unmountable(p, &r.zone) {
        Some(place) => Err(Skip::ReservationUnmountable { id, place }),
        None => Ok(r.capacity_block),
    }
}

fn subnet_zone<'p>(p: &Inputs<'p>, subnet: &str) -> Option<&'p str> {
    p.subnet_zones.get(subnet).map(String::as_str)
}

/// `zone, where fs-... has no mount target` when the shared file system cannot serve it;
/// `None` when it can, or when that is unknown (nothing is concluded from what was not read).
fn unmountable(p: &Inputs, zone: &str) -> Option<String> {
    let mt = p.mount_targets?;
    (!mt.zones.contains(zone)).then(|| format!("{zone}, where {} has no mount target", mt.fs_id))
}

/// Every choice in order, why it is skipped now, and its reservation as last read, for
/// `dtctl status`.
fn show(p: &Inputs, st: &State, out: &mut Draft) {
    let read = p.reservations.and_then(|r| r.as_ref().ok());
    for c in &p.rules.capacity {
        let reservation = (c.reservation_id()).and_then(|id| read?.get(id));
        out.outcome.capacity.push(CapacityStatus {
            choice: c.name(),
            skipped: skipped(p, st, c).err().map(|e| e.to_string()),
            reservation: reservation.map(Reservation::summary),
        });
    }
}
