//! The disruption budget (`disruption.budget`): a voluntary leave (elastic tag deleted, the
//! group's scale-in, a rebalance recommendation, an EC2 scheduled change) starts only while
//! fewer workers are leaving than the budget allows. Every leave in progress counts against it,
//! from the host files until its instance stops running, an involuntary one too (an
//! interruption, a Capacity Block's end, GPUs gone, an unhealthy worker), which is never held.

use rustc_hash::FxHashSet;

use super::pass::Pass;
use super::worker_count;
use crate::config::Budget;
use crate::model::*;

/// Why a voluntary leave waits now; `None`: it may start (or there is no budget).
pub(super) fn exhausted(p: &Pass, st: &State) -> Option<String> {
    let budget = p.rules.disruption_budget;
    if budget == Budget::Unlimited {
        return None;
    }
    // Until its instance stops running: one EC2 no longer lists is gone (pruned later).
    let leaving: Vec<&Removal> = st.removals.iter().filter(|r| p.is_running(&r.id)).collect();
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
fn workers(p: &Pass, st: &State, leaving: &[&Removal]) -> usize {
    let ids: FxHashSet<&str> = leaving.iter().map(|r| r.id.as_str()).collect();
    let staying = (st.members.iter())
        .filter(|m| !ids.contains(m.id.as_str()))
        .count();
    worker_count(p, st) - st.members.len() + staying + ids.len()
}
