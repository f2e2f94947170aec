//! The workers' launchers (`job.launcher`), from their agents' `launcher_<ip>` reports: each
//! change journaled once, `job_finished` when every member's launcher exited 0, a training
//! member whose agent went silent taken out of the job (not terminated), and a leaving worker
//! terminated only once its launcher has stopped.
//!
//! A report is believed only when its worker's agent signed it (observe's book), for the
//! instance EC2 lists at its IP, and for a generation dtd wrote.

use super::draft::Draft;
use super::inputs::Inputs;
use super::launcher_reports::{quiet, report, silent};
use crate::model::*;
use crate::protocol::launcher::LauncherState;

/// A member gone silent (its agent stopped reaching dtd: no report, no ping) leaves the job at
/// once, so the others start a world without it instead of waiting out a collective's timeout
/// (30 minutes on gloo). It stays running: a silence is nobody's word that it is gone, so it is
/// not terminated or replaced, does not count against `disruption.budget`, and joins again like
/// a new worker once its agent is heard. EC2 ends it if the instance really is gone. When more
/// than `job.launcher.silent_share` of the members are silent at once, none is taken out: that
/// is dtd's or the network's trouble, not theirs.
pub(super) fn heed_silence(p: &Inputs, st: &mut State, out: &mut Draft) {
    if p.rules.launcher_silent_ms.is_none() || !p.can_remove() {
        return;
    }
    let (mut gone, mut going) = (Vec::new(), 0);
    for (pos, m) in st.members.iter().enumerate() {
        let Some(at) = p.at(&m.id) else { continue };
        if p.rules.is_protected(m.ip) {
            continue;
        }
        going += usize::from(going_silent(p, st, at));
        if let Some(quiet) = silent(p, st, at) {
            gone.push((pos, at, quiet));
        }
    }
    if gone.is_empty() && st.silence_held.is_none() {
        return;
    }
    if !within_share(p, st, out, going) {
        return;
    }
    for (pos, at, quiet) in gone.into_iter().rev() {
        super::health::take_out(st, out, pos);
        let inst = &p.list[at];
        let reason = format!("its agent not heard for {}", span(quiet));
        let r = super::removal::new(p, inst, Cause::Silent, None, &reason);
        let msg = format!(
            "{reason}: {} left the job at once (the node stopped answering); not terminated on \
             a silence, it joins again once its agent is heard",
            inst.ip
        );
        let e = super::removal::queue_as(p, st, out, r, EventKind::RemovalQueued, msg);
        e.cause = Some(Cause::Silent);
    }
}

/// Counted against `job.launcher.silent_share` once not heard for half of `silent_after`: the
/// members a partition silenced fell silent up to a ping apart, and the first must not leave
/// alone before the others are seen to follow it.
fn going_silent(p: &Inputs, st: &State, at: usize) -> bool {
    let half = p.rules.launcher_silent_ms.unwrap_or(u64::MAX) / 2;
    quiet(p, st, at).is_some_and(|q| q >= half)
}

/// Holds (once journaled, shown every pass) while more than `job.launcher.silent_share` of the
/// members are silent; journals once when it ends. Returns whether silent members may leave.
fn within_share(p: &Inputs, st: &mut State, out: &mut Draft, silent: usize) -> bool {
    let members = st.members.len();
    let share = p.rules.launcher_silent_share;
    // A third of three is one: the float's last bit must not make it less.
    if silent as f64 <= share * members as f64 + 1e-9 {
        if st.silence_held.take().is_some() {
            let msg = format!(
                "{silent} of {members} members silent, within job.launcher.silent_share \
                 ({share:.2}): silent members are taken out of the job again"
            );
            out.event(p, EventKind::SilenceSubsided, None, None, msg);
        }
        return true;
    }
    if st.silence_held.is_none() {
        st.silence_held = Some(p.now);
        let msg = format!(
            "{silent} of {members} members silent at once, more than job.launcher.silent_share \
             ({share:.2}): none is taken out for its silence, as so many at once is more likely \
             dtd's or the network's trouble than theirs"
        );
        out.event(p, EventKind::SilenceWidespread, None, None, msg);
    }
    let since = st
        .silence_held
        .map_or(String::new(), |t| format!(" since {}", rfc3339(t)));
    out.outcome.holds.push(format!(
        "silence: {silent} of {members} members not heard from{since} (job.launcher.silent_share \
         {share:.2}): none taken out for it; see `dtctl events`"
    ));
    false
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
