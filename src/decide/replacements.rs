//! Launches owed for unhealthy launch-template workers, sent until one is launched, each with
//! the `workers.capacity` choices to try in order: those EC2 has not refused within their
//! cool-down, none in a zone the shared file system cannot serve, and none from a reservation
//! that cannot take one now (see [`reserved`]). Settle starts a cool-down when act reports a
//! choice refused.

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

pub(super) fn send(p: &Inputs, st: &mut State, out: &mut Draft) {
    heed_add_refusals(p, st, out);
    st.no_capacity.retain(|_, u| u.until > p.now);
    show(p, st, out);
    if st.replacements.is_empty() {
        return;
    }
    let choices = match usable(p, st) {
        Ok(choices) => choices,
        Err(why) => {
            for r in &st.replacements {
                let msg = format!("replacement launch for unhealthy {}: {why}", r.replaces);
                out.outcome.holds.push(msg);
            }
            return;
        }
    };
    for r in &st.replacements {
        if let Some(e) = &r.last_error {
            let e: String = e.chars().take(300).collect();
            let next = rfc3339(r.retry_at.max(p.now));
            let msg = format!(
                "replacement launch for unhealthy {}: {e} (sent again from {next})",
                r.replaces
            );
            out.outcome.holds.push(msg);
        }
        if p.now >= r.retry_at {
            out.act(Action::Launch {
                replaces: r.replaces.clone(),
                token: r.token.clone(),
                choices: choices.clone(),
            });
        }
    }
}

/// The choices a launch may try now, in order (empty: the template as it is), or why none.
fn usable(p: &Inputs, st: &State) -> Result<Vec<LaunchChoice>, String> {
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
    Err(match back {
        Some(at) => format!(
            "no capacity choice is usable; the first back is tried at {}",
            rfc3339(at)
        ),
        None => "no capacity choice is usable now (dtctl status says why of each)".into(),
    })
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
fn skipped(p: &Inputs, st: &State, c: &Choice) -> Result<bool, String> {
    if let Some(u) = st.no_capacity.get(&c.name()) {
        return Err(format!("{} until {}", u.code, rfc3339(u.until)));
    }
    let zone = c.subnet.as_ref().and_then(|s| subnet_zone(p, s));
    if let Some(why) = zone.and_then(|z| unmountable(p, z)) {
        return Err(format!(
            "{} is in {why}",
            c.subnet.as_deref().unwrap_or_default()
        ));
    }
    reserved(p, c, zone)
}

/// Whether the reservation a choice names by id can take a launch now (`Ok`: whether it is a
/// Capacity Block). A resource group is EC2's to match within, and a choice naming none is
/// always `Ok(false)`. What was not read is not launched into: a Capacity Block needs its
/// market type.
fn reserved(p: &Inputs, c: &Choice, subnet_zone: Option<&str>) -> Result<bool, String> {
    let Some(id) = c.reservation_id() else {
        return Ok(false);
    };
    let r = match p.reservations {
        Some(Ok(read)) => read.get(id).ok_or(format!("EC2 does not list {id}"))?,
        Some(Err(e)) => return Err(format!("{id} not read: {e}")),
        None => return Err(format!("{id} not read yet")),
    };
    if r.state != "active" {
        return Err(format!("{id} is {}, not active", r.state));
    }
    if r.instance_type != c.instance_type {
        return Err(format!("{id} reserves {}", r.instance_type));
    }
    if r.available == 0 {
        return Err(format!("{id} has no instance left"));
    }
    if let Some(at) = r.drains_at().filter(|at| p.now >= *at) {
        let end = r.end.unwrap_or(at);
        return Err(format!(
            "{id} ends at {}: no launch into its last 40 minutes",
            rfc3339(end)
        ));
    }
    if let Some(why) = subnet_zone.and_then(|z| r.zone_conflict(z)) {
        return Err(why);
    }
    match unmountable(p, &r.zone) {
        Some(why) => Err(format!("{id} is in {why}")),
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
            skipped: skipped(p, st, c).err(),
            reservation: reservation.map(Reservation::summary),
        });
    }
}
