//! Which generation a pass believes the job has applied: the `ack` file's, or with
//! `job.ack.by: launcher` the one every member's launcher reports running. Read before any rule
//! runs (`pass`), from the snapshot and the remembered state only.

use crate::model::*;
use crate::protocol::launcher::LauncherState;

/// The `ack` file's generation, if dtd wrote that generation: a job acknowledges only what it
/// was given, so a higher number (`18446744073709551615`, or one a worker typed) is a lie that
/// would count every later removal as acknowledged (`trust` journals the refusal).
pub(super) fn from_file(prev: &State, acks: Option<&Acks>) -> Result<Option<u64>, u64> {
    match acks.and_then(|a| a.generation) {
        Some(g) if g > prev.generation => Err(g),
        g => Ok(g),
    }
}

/// `job.ack.by: launcher`: the current generation is applied once every member's own launcher
/// report says it runs (or finished) in it; until then the last generation that was. A
/// leaving worker's launcher must also have stopped before it is terminated (`still_running`).
pub(super) fn by_launcher(markers: Option<&Markers>, prev: &State) -> Option<u64> {
    let Some(m) = markers else {
        return prev.launcher_acked;
    };
    let g = prev.generation;
    let runs = |member: &Member| {
        m.launchers.get(&member.ip).is_some_and(|l| {
            l.believable(&member.id, g)
                && l.generation == Some(g)
                && matches!(l.state, LauncherState::Running | LauncherState::Finished)
        })
    };
    if prev.members.iter().all(runs) {
        Some(g)
    } else {
        prev.launcher_acked
    }
}
