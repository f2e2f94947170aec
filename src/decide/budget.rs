//! The disruption budget (`disruption.budget`) and windows (`disruption.windows`): a voluntary
//! leave (elastic tag deleted, the group's scale-in, a rebalance recommendation, an EC2
//! scheduled change, an unhealthy worker that can drain) starts only within a window and while
//! fewer workers are leaving than the budget allows. Every leave in progress counts against the
//! budget, from the host files until its instance stops running, an involuntary one too (an
//! interruption, a Capacity Block's end, GPUs gone), which is never held; but not a worker gone
//! silent, which is out of the job on no one's word (a worker could fake the silence of others
//! to use the budget up).

use chrono::DateTime;
use rustc_hash::FxHashSet;

use super::inputs::Inputs;
use super::worker_count;
use crate::config::Budget;
use crate::model::*;

/// Why a voluntary leave waits now; `None`: it may start.
pub(super) fn exhausted(p: &Inputs, st: &State) -> Option<String> {
    closed(p).or_else(|| spent(p, st))
}

/// Outside every disruption window: which they are and when the next opens. `None` within one,
/// or without windows.
fn closed(p: &Inputs) -> Option<String> {
    let windows = &p.rules.disruption_windows;
    if windows.is_empty() || open_now(p)? {
        return None;
    }
    let each: Vec<String> = (windows.iter())
        .map(|w| {
            format!(
                "{} for {}",
                w.schedule.text,
                humantime::format_duration(w.duration)
            )
        })
        .collect();
    Some(format!(
        "the disruption windows ({}; UTC): the next opens at {}",
        each.join(", "),
        next_window(p).map_or("no time".into(), |t| rfc3339(t).to_string())
    ))
}

/// Within one of the windows now (`None`: the time cannot be read as a date).
fn open_now(p: &Inputs) -> Option<bool> {
    let now = DateTime::from_timestamp_millis(i64::try_from(p.now).ok()?)?;
    for w in &p.rules.disruption_windows {
        let length = chrono::Duration::from_std(w.duration).ok()?;
        if let Ok(opened) = w.schedule.cron.find_previous_occurrence(&now, true) {
            if now < opened + length {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// When the next disruption window opens, if any is configured.
pub(super) fn next_window(p: &Inputs) -> Option<Millis> {
    let now = DateTime::from_timestamp_millis(i64::try_from(p.now).ok()?)?;
    let next = (p.rules.disruption_windows.iter())
        .filter_map(|w| w.schedule.cron.find_next_occurrence(&now, false).ok())
        .min()?;
    u64::try_from(next.timestamp_millis()).ok()
}

/// The budget spent: who is leaving. `None`: room, or no budget.
fn spent(p: &Inputs, st: &State) -> Option<String> {
    let budget = p.rules.disruption_budget;
    if budget == Budget::Unlimited {
        return None;
    }
    // Until its instance stops running: one EC2 no longer lists is gone (pruned later). A
    // silent worker is out of the job on no one's word: it does not use the budget up.
    let counts = |r: &&Removal| p.is_running(&r.id) && r.cause() != Some(Cause::Silent);
    let leaving: Vec<&Removal> = st.removals.iter().filter(counts).collect();
    let allowed = budget.allowed(workers(p, st, &leaving))?;
    if leaving.len() < allowed {
        return None;
    }
    let mut who: Vec<String> = (leaving.iter().take(3)).map(|r| r.ip.to_string()).collect();
    if leaving.len() > who.len() {
        who.push(format!("{} more", leaving.len() - who.len()));
    }
    let who = match who.is_empty() {
        true => "none".to_string(),
        false => who.join(", "),
    };
    Some(format!(
        "the disruption budget: {allowed} may be leaving at once, {} are ({who})",
        leaving.len()
    ))
}

/// What a share is of: the workers, those leaving included (a member leaving on this pass is
/// both a member and a removal until the pass ends).
fn workers(p: &Inputs, st: &State, leaving: &[&Removal]) -> usize {
    let ids: FxHashSet<&str> = leaving.iter().map(|r| r.id.as_str()).collect();
    let staying = (st.members.iter())
        .filter(|m| !ids.contains(m.id.as_str()))
        .count();
    worker_count(p, st) - st.members.len() + staying + ids.len()
}
