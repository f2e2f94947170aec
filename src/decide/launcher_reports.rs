//! What the workers' launcher reports say, as a pass believes them: a worker's own report, its
//! silence, a leaver's launcher still running. Only reads: the rules that act on them are
//! `launcher`, `joining` and `removal`.

use super::inputs::Inputs;
use crate::model::*;

/// The report of the listed cluster worker at `at`, when it names that instance and a
/// generation dtd wrote (or none).
pub(super) fn report<'a>(p: &Inputs<'a>, st: &State, at: usize) -> Option<&'a LauncherSeen> {
    let inst = &p.list[at];
    let l = p.markers?.launchers.get(&inst.ip)?;
    l.believable(&inst.id, st.generation).then_some(l)
}

/// How long the worker at `at` has been silent: its agent's last report says its launcher runs,
/// and no newer report came for `silent_after`. The node stopped answering (SIGSTOPped, hung
/// kernel, cut network), or someone keeps its report from being replaced: a silence is no one's
/// word, so it takes a worker out of the job but never gets it terminated.
pub(super) fn silent(p: &Inputs, st: &State, at: usize) -> Option<Millis> {
    let after = p.rules.launcher_silent_ms?;
    quiet(p, st, at).filter(|q| *q >= after)
}

/// How long the worker at `at`, its launcher running, has not been heard from.
pub(super) fn quiet(p: &Inputs, st: &State, at: usize) -> Option<Millis> {
    let l = report(p, st, at)?;
    l.state
        .is_active()
        .then(|| p.now.saturating_sub(l.heard_at))
}

/// Why a leaving worker, acknowledged, is not let go yet: its launcher still runs. Not asked of
/// a worker that left for its silence: its report will not say anything new until it answers.
pub(super) fn still_running(p: &Inputs, st: &State, r: &Removal) -> Option<String> {
    p.rules.launcher_silent_ms?;
    if r.cause() == Some(Cause::Silent) {
        return None;
    }
    let at = p.at(&r.id)?;
    let l = report(p, st, at)?;
    l.state
        .is_active()
        .then(|| format!("its launcher to stop ({}: {})", l.state.as_str(), l.reason))
}
