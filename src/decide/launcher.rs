//! The workers' launchers (`job.launcher`), from their agents' `launcher_<ip>` reports: each
//! change journaled once, `job_finished` when every member's launcher exited 0, a training
//! member whose agent went silent taken for gone, and a leaving worker terminated only once its
//! launcher has stopped.
//!
//! A report is believed only for the instance EC2 lists at its IP, and only for a generation dtd
//! wrote: any worker can write any report.

use super::draft::Draft;
use super::pass::Pass;
use crate::model::*;
use crate::protocol::launcher::LauncherState;

/// The report of the listed cluster worker at `at`, when it names that instance and a
/// generation dtd wrote (or none).
fn report<'a>(p: &Pass<'a>, st: &State, at: usize) -> Option<&'a Launcher> {
    let inst = &p.list[at];
    let l = p.markers?.launchers.get(&inst.ip)?;
    l.believable(&inst.id, st.generation).then_some(l)
}

/// A training member whose agent has not touched its report for `silent_after` stopped
/// answering (SIGSTOPped, hung kernel, cut network): it leaves the job at once as an unhealthy
/// worker does, so the others start a world without it instead of waiting out a collective's
/// timeout (30 minutes on gloo).
pub(super) fn silent(p: &Pass, st: &State, at: usize) -> Option<Health> {
    let after = p.rules.launcher_silent_ms?;
    let l = report(p, st, at)?;
    let quiet = p.now.saturating_sub(l.heard_at);
    if !l.state.is_active() || quiet < after {
        return None;
    }
    // Only a member: a launcher runs only where the plan lists it, so a "running" report of any
    // other worker is stale or forged, and must not get a preparing worker terminated. (Looked
    // up last: every joining candidate asks.)
    if !st.members.iter().any(|m| m.id == l.instance_id) {
        return None;
    }
    Some(Health {
        instance_id: l.instance_id.clone(),
        ok: false,
        gpus_lost: false,
        vanished: true,
        reason: format!(
            "the node stopped answering: its launcher report unchanged for {}",
            span(quiet)
        ),
        when: None,
    })
}

/// Why a leaving worker, acknowledged, is not let go yet: its launcher still runs.
pub(super) fn still_running(p: &Pass, st: &State, r: &Removal) -> Option<String> {
    p.rules.launcher_silent_ms?;
    let at = p.at(&r.id)?;
    let l = report(p, st, at)?;
    l.state
        .is_active()
        .then(|| format!("its launcher to stop ({}: {})", l.state.as_str(), l.reason))
}

/// Journals each listed worker's launcher change once, and `job_finished` once per generation.
pub(super) fn watch(p: &Pass, st: &mut State, out: &mut Draft) {
    let Some(m) = p.markers.filter(|_| p.rules.launcher_silent_ms.is_some()) else {
        return;
    };
    // By report, through the instance index: a pass over 1,000 workers without launcher reports
    // does nothing here.
    for l in m.launchers.values() {
        let Some(at) = p.at(&l.instance_id) else {
            continue;
        };
        if let Some(l) = report(p, st, at) {
            journal(p, st, out, at, l);
        }
    }
    if p.can_remove() {
        st.launchers.retain(|id, _| p.is_running(id));
    }
    finished(p, st, out);
}

fn journal(p: &Pass, st: &mut State, out: &mut Draft, at: usize, l: &Launcher) {
    let (id, ip) = p.who(at);
    let now = (l.state, l.generation);
    if st.launchers.get(id) == Some(&now) {
        return;
    }
    st.launchers.insert(id.to_string(), now);
    let kind = match l.state {
        LauncherState::Running => EventKind::LauncherStarted,
        LauncherState::Stopped => EventKind::LauncherStopped,
        LauncherState::Failed => EventKind::LauncherFailed,
        LauncherState::Finished => EventKind::LauncherFinished,
        LauncherState::Idle | LauncherState::Stopping => return,
    };
    let g = l.generation.map_or("-".into(), |g| g.to_string());
    let msg = format!(
        "{ip} ({id}): launcher {} in generation {g}: {}",
        l.state.as_str(),
        l.reason
    );
    out.event(p, kind, Some((id, ip)), l.generation, msg);
}

/// Every member's launcher exited 0 in the current generation: the job is done.
fn finished(p: &Pass, st: &mut State, out: &mut Draft) {
    if st.members.is_empty() || st.finished == Some(st.generation) {
        return;
    }
    let done = st.members.iter().all(|m| {
        let at = p.at(&m.id);
        let l = at.and_then(|at| report(p, st, at));
        l.is_some_and(|l| l.state == LauncherState::Finished && l.generation == Some(st.generation))
    });
    if done {
        st.finished = Some(st.generation);
        let msg = format!(
            "every launcher of generation {} exited 0 ({} workers): the job finished",
            st.generation,
            st.members.len()
        );
        out.event(p, EventKind::JobFinished, None, Some(st.generation), msg);
    }
}
