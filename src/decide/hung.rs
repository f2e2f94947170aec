//! A stalled job's nodes that hold it back, and what `job.stall.action` does about them.
//!
//! A node is named when its agent reports a process of its launcher stopped by a signal: it
//! takes no part in a step, so a synchronous job waits on it until a collective times out (30
//! minutes on gloo). Only a member's own agent names it (a signed report, believed as every
//! launcher report is). The job is stalled already, so the disruption budget does not hold the
//! drain back: it would only keep the job stalled. Never every member: at least one must stay,
//! as a job that stopped everywhere is its own doing, not a node's.

use std::fmt::Write as _;

use super::draft::Draft;
use super::health;
use super::inputs::Inputs;
use super::launcher_reports::report;
use crate::config::StallAction;
use crate::model::*;

/// A member holding the job back: where it is listed and its stopped process.
pub(super) struct Hung {
    at: usize,
    pid: u32,
}

/// The members whose agent reports a stopped training process, not protected.
pub(super) fn named(p: &Inputs, st: &State) -> Vec<Hung> {
    let stopped = |m: &Member| {
        let at = p.at(&m.id)?;
        let l = report(p, st, at)?;
        let pid = l.stopped.filter(|_| l.state.is_active())?;
        (!p.rules.is_protected(m.ip)).then_some(Hung { at, pid })
    };
    st.members.iter().filter_map(stopped).collect()
}

/// What `job.stall.action` does about a stall: the members to drain and whether every launcher
/// restarts.
pub(super) struct Verdict {
    /// The nodes named and what is done, for the `stalled` line and the status.
    pub said: String,
    drain: Vec<Hung>,
    restart: bool,
}

/// Names the members holding the job back and decides what the action does about them.
pub(super) fn judge(p: &Inputs, st: &State) -> Verdict {
    let hung = named(p, st);
    let mut said = describe(p, &hung);
    let action = p.rules.stall_action;
    if action == StallAction::Alert {
        return Verdict {
            said,
            drain: Vec::new(),
            restart: false,
        };
    }
    let leave = p.can_remove() && !hung.is_empty() && hung.len() < st.members.len();
    if leave {
        let _ = write!(said, "; drained (job.stall.action: {})", name(action));
    } else if !hung.is_empty() {
        let why = match p.can_remove() {
            true => "every member is named, and one must stay",
            false => "a source is unread this pass",
        };
        let _ = write!(said, "; none drained ({why})");
    }
    let restart = action == StallAction::Restart;
    if restart {
        said.push_str("; every launcher restarts (job.stall.action: restart)");
    }
    Verdict {
        said,
        drain: if leave { hung } else { Vec::new() },
        restart,
    }
}

/// Carries the verdict out, once the stall is journaled.
pub(super) fn carry_out(p: &Inputs, st: &mut State, out: &mut Draft, v: &Verdict, step: u64) {
    for h in &v.drain {
        drain(p, st, out, h, step);
    }
    out.restart |= v.restart;
}

fn describe(p: &Inputs, hung: &[Hung]) -> String {
    if hung.is_empty() {
        return "no node named (no agent reports a stopped training process)".into();
    }
    let nodes: Vec<String> = (hung.iter())
        .map(|h| format!("{} (its process {} stopped)", p.list[h.at].ip, h.pid))
        .collect();
    format!("held back by {}", nodes.join(", "))
}

/// The member leaves the job now and ends as an unhealthy one does, after the job has let it go.
fn drain(p: &Inputs, st: &mut State, out: &mut Draft, h: &Hung, step: u64) {
    let reason = format!(
        "its training process {} stopped while the job stalled at step {step}",
        h.pid
    );
    let head = format!(
        "{reason}: {} leaves the job (job.stall.action: {})",
        p.list[h.at].ip,
        name(p.rules.stall_action)
    );
    health::drain(p, st, out, h.at, Cause::Hung, &reason, head);
}

fn name(action: StallAction) -> &'static str {
    match action {
        StallAction::Alert => "alert",
        StallAction::Drain => "drain",
        StallAction::Restart => "restart",
    }
}
