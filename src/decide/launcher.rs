//! The workers' launchers (`job.launcher`), from their agents' `launcher_<ip>` reports: each
//! change journaled once, `job_finished` when every member's launcher exited 0, a training
//! member whose agent went silent taken out of the job (not terminated), and a leaving worker
//! terminated only once its launcher has stopped.
//!
//! A report is believed only when its worker's agent signed it (observe's book), for the
//! instance EC2 lists at its IP, and for a generation dtd wrote.

use super::draft::Draft;
use super::inputs::Inputs;
use super::launcher_reports::{report, silent};
use crate::model::*;
use crate::protocol::launcher::LauncherState;

/// A member gone silent leaves the job at once, so the others start a world without it instead
/// of waiting out a collective's timeout (30 minutes on gloo). It stays running: nothing
/// confirms it is gone (a worker can keep another's report from being replaced), so it is not
/// terminated or replaced, does not count against `disruption.budget`, and joins again like a
/// new worker once its agent is heard. EC2 ends it if the instance really is gone.
pub(super) fn heed_silence(p: &Inputs, st: &mut State, out: &mut Draft) {
    if p.rules.launcher_silent_ms.is_none() || !p.can_remove() {
        return;
    }
    let mut gone = Vec::new();
    for (pos, m) in st.members.iter().enumerate() {
        let Some(at) = p.at(&m.id) else { continue };
        if let Some(quiet) = silent(p, st, at).filter(|_| !p.rules.is_protected(m.ip)) {
            gone.push((pos, at, quiet));
        }
    }
    for (pos, at, quiet) in gone.into_iter().rev() {
        super::health::take_out(st, out, pos);
        let inst = &p.list[at];
        let reason = format!("its launcher report unchanged for {}", span(quiet));
        let r = super::removal::new(p, inst, Cause::Silent, None, &reason);
        let msg = format!(
            "{reason}: {} left the job at once (the node stopped answering, or someone keeps \
             its report from being replaced); not terminated on a silence, it joins again once \
             its agent is heard",
            inst.ip
        );
        let e = super::removal::queue_as(p, st, out, r, EventKind::RemovalQueued, msg);
        e.cause = Some(Cause::Silent);
    }
}

/// Journals each listed worker's launcher change once, and `job_finished` once per generation.
pub(super) fn watch(p: &Inputs, st: &mut State, out: &mut Draft) {
    st.launcher_acked = p.ack.filter(|_| p.rules.ack_by_launcher);
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
    finished(p, st, out);
}

fn journal(p: &Inputs, st: &mut State, out: &mut Draft, at: usize, l: &LauncherSeen) {
    let (id, ip) = p.who(at);
    let now = (l.state, l.generation);
    if !st.with_worker(id, |w| w.launcher_seen(now)) {
        return;
    }
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
fn finished(p: &Inputs, st: &mut State, out: &mut Draft) {
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
