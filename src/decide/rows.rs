//! The rows of `dtctl status`, remembering when each worker's status began, and the status
//! report's table built from them.

use std::net::IpAddr;

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// The rows of `dtctl status` in IP order, remembering when each status began.
pub(super) fn rows(p: &Inputs, st: &mut State, out: &mut Draft) -> Vec<Row> {
    if !p.ec2_ok {
        let members = st.members.iter().enumerate();
        return members.map(|(i, m)| unseen_member(i, m)).collect();
    }
    let list = p.list;
    let mut rows = Vec::with_capacity(list.len());
    // Those that joined this pass began their story with `joined`.
    let joined_now: rustc_hash::FxHashSet<IpAddr> = (st.members.iter())
        .filter(|m| m.joined_generation == p.next_gen)
        .map(|m| m.ip)
        .collect();
    for (at, view) in out.views.iter_mut().enumerate() {
        let Some((status, waiting_for)) = view.take() else {
            continue;
        };
        let inst = &list[at];
        let shown = match status {
            Some(s) => Shown::Status(s),
            None if p.rules.is_protected(inst.ip) => Shown::Base,
            None => Shown::Unmanaged,
        };
        // The tag holds the previous status: only a change needs remembering.
        if let Some(s) = status.filter(|s| p.facts[at].status != Some(*s)) {
            if is_new(p, st, at) && !joined_now.contains(&inst.ip) {
                out.outcome
                    .events
                    .extend(first_seen(p, at, s, waiting_for.as_deref()));
            }
            st.worker_mut(&inst.id).set_status(s, p.now);
        } else if status.is_none() {
            // A base host or one that lost its elastic tags: no status, so no time it began.
            lost_status(st, &inst.id);
        }
        rows.push(Row {
            source: RowSource::Instance(at),
            shown,
            waiting_for,
        });
    }
    rows
}

fn lost_status(st: &mut State, id: &str) {
    if let Some(w) = st.workers.get_mut(id).filter(|w| w.status.is_some()) {
        w.status = None;
    }
}

/// Seen with a managed status for the first time: no status tag yet, and no status remembered
/// for this instance (a tag write that failed leaves the tag empty, but the memory says it).
fn is_new(p: &Inputs, st: &State, at: usize) -> bool {
    let inst = &p.list[at];
    p.facts[at].status.is_none() && st.worker(&inst.id).is_none_or(|w| w.status.is_none())
}

/// The beginning of a worker's story: `preparing`, or `ready` when it is ready at once but
/// held from joining (a member, one that joined at once, began with `joined` instead).
fn first_seen(p: &Inputs, at: usize, status: WorkerStatus, why: Option<&str>) -> Option<Event> {
    let inst = &p.list[at];
    let launched = rfc3339(inst.launched_at);
    let seen = format!(
        "{} ({}, {}, launched {launched})",
        inst.ip, inst.instance_type, inst.market
    );
    let (kind, msg) = match status {
        WorkerStatus::Preparing => (
            EventKind::Preparing,
            format!(
                "{seen} is preparing: waiting for its prepare-data marker prepare_data_success_{}",
                inst.ip
            ),
        ),
        WorkerStatus::AddQueued => (
            EventKind::Ready,
            format!(
                "{seen} is ready (prepare-data marker) and waits to join: {}",
                why.unwrap_or("its turn")
            ),
        ),
        _ => return None,
    };
    Some(Event {
        instance: Some(inst.id.clone()),
        ip: Some(inst.ip),
        launched_at: Some(inst.launched_at),
        ..Event::new(p.now, kind, msg)
    })
}

fn unseen_member(index: usize, m: &Member) -> Row {
    let status = if m.acked {
        WorkerStatus::Added
    } else {
        WorkerStatus::AddQueued
    };
    Row {
        source: RowSource::Member(index),
        shown: Shown::Status(status),
        waiting_for: Some("a complete EC2 view".into()),
    }
}

/// A worker's launcher in a few words, from the report its instance wrote (as `decide` believes
/// it: that instance's, of a generation dtd wrote).
fn launcher_line(snap: &Snapshot, state: &State, id: &str, ip: std::net::IpAddr) -> Option<String> {
    let l = snap.markers.as_ref().ok()?.launchers.get(&ip)?;
    if !l.believable(id, state.generation) {
        return None;
    }
    let g = l.generation.map_or(String::new(), |g| format!(" g{g}"));
    let restarts = match l.restarts {
        0 => String::new(),
        n => format!(", {n} restart(s)"),
    };
    // The node's own work per step, where its job measures it: the figure stragglers are
    // found by, beside the others'.
    let compute = (l.compute)
        .filter(|_| l.state.is_active())
        .map_or(String::new(), |c| {
            format!(
                "; {:.1} ms a step at step {}",
                c.micros as f64 / 1e3,
                c.step
            )
        });
    Some(format!(
        "{}{g} ({}{restarts}){compute}",
        l.state.as_str(),
        l.reason
    ))
}

/// The status report's table: base hosts first, then by IP.
/// `state` is the one the rows were decided with: its members and when each status began.
pub fn worker_views(rows: &[Row], snap: &Snapshot, state: &State) -> Vec<WorkerView> {
    let members = &state.members;
    let instances = snap.instances.as_deref().unwrap_or_default();
    let mut out: Vec<WorkerView> = rows
        .iter()
        .filter_map(|row| {
            let (id, ip, instance_type, az, market) = match row.source {
                RowSource::Instance(i) => {
                    let inst = instances.get(i)?;
                    let (az, market) = (inst.az.as_str(), inst.market.as_str());
                    (&inst.id, inst.ip, &inst.instance_type, az, market)
                }
                RowSource::Member(i) => {
                    let m = members.get(i)?;
                    (&m.id, m.ip, &m.instance_type, "?", "?")
                }
            };
            Some(WorkerView {
                id: id.clone(),
                ip,
                instance_type: instance_type.clone(),
                az: az.to_string(),
                market: market.to_string(),
                status: row.label().to_string(),
                since: (state.worker(id).and_then(|w| w.status))
                    .filter(|s| Shown::Status(s.status) == row.shown)
                    .map(|s| s.at),
                waiting_for: row.waiting_for.clone(),
                launcher: launcher_line(snap, state, id, ip),
            })
        })
        .collect();
    out.sort_by_key(|v| (v.status != "BASE", v.ip));
    out
}
