//! Stragglers (`job.stragglers`): a synchronous job steps at the pace of its slowest node, so one
//! slow GPU slows every step of every node for as long as it stays. Each member's agent reports
//! its compute time per step as its job measures it (`dt_torch`'s `session.compute()`): a member
//! whose time stays above `ratio` times the median of the other members' for `steps` of the
//! job's steps, and by at least 5 ms, is a straggler. It is journaled and shown; with `drain` it
//! leaves the job within the disruption budget and is replaced as an unhealthy worker is. Never
//! the last member.
//!
//! Only a member's own agent reports its figure: a job can make its own node look slow, never
//! another. Members without a figure (a job that does not measure, a report of another
//! generation's run) are not compared.

use rustc_hash::FxHashSet;

use super::draft::Draft;
use super::inputs::Inputs;
use super::launcher_reports::report;
use super::{budget, health, holds};
use crate::config::StragglerAction;
use crate::model::*;

/// How much slower than the median a member must also be, whatever the ratio: below this the
/// difference is the scheduler's or a kernel launch's, not a slow GPU's (a job whose steps take
/// microseconds has no straggler worth a leave).
const MIN_EXCESS_MICROS: u64 = 5_000;

/// A member's figure: where it is listed, its compute time and the step it was measured at.
struct Figure {
    at: usize,
    micros: u64,
    step: u64,
}

pub(super) fn watch(p: &Inputs, st: &mut State, out: &mut Draft) {
    let rule = p.rules.stragglers;
    if rule.action == StragglerAction::Off {
        st.stragglers.clear();
        return;
    }
    if p.markers.is_none() {
        // The reports are unread this pass: what was counted is kept, not forgotten.
        return;
    }
    let figures = figures(p, st);
    let mut sorted: Vec<u64> = figures.iter().map(|f| f.micros).collect();
    sorted.sort_unstable();
    let mut slow_now = FxHashSet::default();
    for f in &figures {
        let Some(median) = median_of_others(&sorted, f.micros) else {
            continue;
        };
        let over = f.micros as f64 > rule.ratio * median as f64;
        if over && f.micros >= median + MIN_EXCESS_MICROS {
            slow_now.insert(p.list[f.at].id.clone());
            note(p, st, out, f, median);
        }
    }
    forget(p, st, out, &slow_now);
}

/// The members whose own agent reports a compute time for the run it has now.
fn figures(p: &Inputs, st: &State) -> Vec<Figure> {
    if p.markers.is_some_and(|m| m.launchers.is_empty()) {
        return Vec::new();
    }
    let figure = |m: &Member| {
        let at = p.at(&m.id)?;
        let l = report(p, st, at)?;
        let c = l.compute.filter(|_| l.state.is_active())?;
        Some(Figure {
            at,
            micros: c.micros,
            step: c.step,
        })
    };
    st.members.iter().filter_map(figure).collect()
}

/// The median (the upper one of an even count) of `sorted` without one copy of `x`, without
/// copying it: a pass compares every member, so this is O(log n) per member, not O(n).
fn median_of_others(sorted: &[u64], x: u64) -> Option<u64> {
    let k = sorted.len().checked_sub(1)? / 2;
    let first = sorted.partition_point(|v| *v < x);
    let at = if first <= k { k + 1 } else { k };
    sorted.get(at).copied()
}

/// A slow report: counted from its first step; journaled (and acted on) once it stayed slow for
/// `steps` steps.
fn note(p: &Inputs, st: &mut State, out: &mut Draft, f: &Figure, median: u64) {
    let id = p.list[f.at].id.clone();
    let s = st.stragglers.entry(id).or_insert(Slow {
        since_step: f.step,
        micros: f.micros,
        median,
        found: false,
    });
    (s.micros, s.median) = (f.micros, median);
    // A job restarted from an earlier checkpoint counts again from there.
    s.since_step = s.since_step.min(f.step);
    if !s.found && f.step >= s.since_step + p.rules.stragglers.steps {
        s.found = true;
        let (iid, ip) = p.who(f.at);
        let msg = format!("{ip} ({iid}): {}", describe(p, s));
        out.event(p, EventKind::Straggler, Some((iid, ip)), None, msg);
    }
    let s = s.clone();
    if s.found && p.rules.stragglers.action == StragglerAction::Drain {
        drain(p, st, out, f.at, &s);
    }
}

/// What the rule saw, for the journal and the status.
fn describe(p: &Inputs, s: &Slow) -> String {
    let rule = p.rules.stragglers;
    format!(
        "a straggler: its compute time per step is {:.3} s, {:.1} x the other members' median \
         ({:.3} s), since step {} (job.stragglers: above {} x for {} steps)",
        s.micros as f64 / 1e6,
        s.micros as f64 / s.median.max(1) as f64,
        s.median as f64 / 1e6,
        s.since_step,
        rule.ratio,
        rule.steps
    )
}

/// Members no longer slow (or no longer members) are forgotten; one journaled and still in the
/// job is said to be back within the rule.
fn forget(p: &Inputs, st: &mut State, out: &mut Draft, slow_now: &FxHashSet<String>) {
    let gone: Vec<String> = (st.stragglers.keys())
        .filter(|id| !slow_now.contains(id.as_str()))
        .cloned()
        .collect();
    for id in gone {
        let Some(s) = st.stragglers.remove(&id) else {
            continue;
        };
        let member = st.members.iter().find(|m| m.id == id);
        if let (true, Some(m)) = (s.found, member) {
            let msg = format!(
                "{} ({id}): no longer a straggler (job.stragglers: within {} x the others' median)",
                m.ip, p.rules.stragglers.ratio
            );
            out.event(p, EventKind::StragglerCleared, Some((&id, m.ip)), None, msg);
        }
    }
}

/// The straggler leaves the job once the budget allows (journaled once while held) and ends as
/// an unhealthy worker does. The last member stays: a job of one has no one to wait for.
fn drain(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, s: &Slow) {
    let inst = &p.list[at];
    let member = st.members.iter().any(|m| m.id == inst.id);
    if !member
        || st.members.len() < 2
        || !p.can_remove()
        || st.removals.iter().any(|r| r.id == inst.id)
    {
        return;
    }
    if let Some(why) = budget::exhausted(p, st) {
        let ip = inst.ip;
        holds::journal_held(p, st, out, at, || format!("removal of {ip} held: {why}"));
        return;
    }
    holds::released(st, &inst.id);
    let reason = describe(p, s);
    let head = format!(
        "{}: {reason}; it leaves the job (job.stragglers.action: drain)",
        inst.ip
    );
    health::drain(p, st, out, at, Cause::Straggler, &reason, head);
}

/// A straggler kept in the job (`alert`, or held by the budget): its row says so.
pub(super) fn show(p: &Inputs, st: &State, out: &mut Draft) {
    for (id, s) in st.stragglers.iter().filter(|(_, s)| s.found) {
        let Some(at) = p.at(id).filter(|_| st.members.iter().any(|m| &m.id == id)) else {
            continue;
        };
        if let Some(view) = out.views[at].as_mut() {
            view.1 = Some(describe(p, s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::median_of_others;

    #[test]
    fn the_median_of_the_others_is_the_median_of_the_list_without_that_one() {
        let naive = |v: &[u64], i: usize| {
            let mut o: Vec<u64> = v.to_vec();
            o.remove(i);
            o.sort_unstable();
            o.get(o.len() / 2).copied()
        };
        let lists: [&[u64]; 6] = [
            &[5],
            &[1, 9],
            &[3, 3, 3],
            &[1, 2, 3, 4],
            &[7, 1, 7, 2, 9, 7],
            &[4, 4, 1, 8],
        ];
        for v in lists {
            let mut sorted = v.to_vec();
            sorted.sort_unstable();
            for (i, x) in v.iter().enumerate() {
                assert_eq!(
                    median_of_others(&sorted, *x),
                    naive(v, i),
                    "{v:?} without {x}"
                );
            }
        }
    }
}
