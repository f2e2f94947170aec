//! A stalled job: its step (the progress file) has not advanced for `job.stall.after` while it
//! has workers to train on. Journaled once as `stalled`, shown, and handed to act for the stall
//! command; `stall_cleared` when the step moves again.
//!
//! Only what the job wrote is evidence. No progress file means the job does not report progress
//! (the contract makes it optional): never a stall. An unreadable file proves nothing either
//! way: the clock keeps running on the last step read, but no stall is journaled on its strength
//! (the status shows why it cannot be read). Without workers the job has nothing to train on, so
//! its step standing still is no stall: the clock starts again when it has some.

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// The step is followed whether or not stalls are watched (`job.stall.after`): the goodput
/// ledger moves lost steps to `redone` and tells a member's pause from its training by it.
pub(super) fn watch(p: &Inputs, st: &mut State, out: &mut Draft) {
    let after = p.rules.stall_after_ms;
    if let (None, Some(known)) = (after, st.progress.as_mut()) {
        // Stall detection was turned off: a stall shown goes with it, unjournaled.
        known.stalled = false;
        known.held_back.clear();
    }
    match p.progress {
        None => forget(p, st, out, "the job no longer writes its progress file"),
        Some(Err(_)) => {}
        Some(Ok(read)) if !has_workers(p, st) => {
            forget(p, st, out, "the job has no workers to train on");
            st.progress = Some(fresh(read, p.now));
        }
        Some(Ok(read)) => time(p, st, out, read, after),
    }
}

/// Base hosts or members: a job to train.
fn has_workers(p: &Inputs, st: &State) -> bool {
    !p.rules.base_hosts.is_empty() || !st.members.is_empty()
}

fn fresh(read: &Progress, now: Millis) -> JobProgress {
    JobProgress {
        step: read.step,
        advanced_at: now,
        stalled: false,
        held_back: String::new(),
        run: read.run.clone(),
        generation: read.generation,
    }
}

/// The step read this pass, against the one remembered; a stall only with `after`.
fn time(p: &Inputs, st: &mut State, out: &mut Draft, read: &Progress, after: Option<Millis>) {
    let step = read.step;
    let Some(known) = st.progress.as_mut() else {
        st.progress = Some(fresh(read, p.now));
        return;
    };
    // Any change counts: a step lower than before is a job restarted from its checkpoint.
    if known.step != step {
        let was = std::mem::replace(known, fresh(read, p.now));
        if was.stalled {
            let why = format!("the job's step advanced to {step}");
            clear(p, out, &was, step, &why);
        }
        return;
    }
    if known.run != read.run {
        known.run = read.run.clone();
    }
    known.generation = read.generation;
    let still = p.now.saturating_sub(known.advanced_at);
    if known.stalled || after.is_none_or(|after| still < after) {
        return;
    }
    known.stalled = true;
    let since = known.advanced_at;
    let verdict = super::hung::judge(p, st);
    let msg = format!(
        "the job's step {step} has not advanced for {} (since {}): stalled; {}",
        span(still),
        rfc3339(since),
        verdict.said
    );
    if let Some(known) = st.progress.as_mut() {
        known.held_back = verdict.said.clone();
    }
    out.event(p, EventKind::Stalled, None, None, msg);
    out.outcome.stall = Some(StallChange {
        stalled: true,
        step,
        since,
    });
    super::hung::carry_out(p, st, out, &verdict, step);
}

/// Nothing to time any more; a stall shown is cleared with `why`.
fn forget(p: &Inputs, st: &mut State, out: &mut Draft, why: &str) {
    if let Some(was) = st.progress.take().filter(|k| k.stalled) {
        clear(p, out, &was, was.step, why);
    }
}

fn clear(p: &Inputs, out: &mut Draft, was: &JobProgress, step: u64, why: &str) {
    let stood = span(p.now.saturating_sub(was.advanced_at));
    let msg = format!(
        "{why}; it was stalled at step {} for {stood}: stall cleared",
        was.step
    );
    out.event(p, EventKind::StallCleared, None, None, msg);
    out.outcome.stall = Some(StallChange {
        stalled: false,
        step,
        since: was.advanced_at,
    });
}
