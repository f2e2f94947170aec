//! Joining: a worker whose prepare-data marker is there joins the job, within `max` and only on
//! a complete view; a member's view follows the job's acknowledgement of its join.

use std::collections::BTreeSet;

use super::draft::Draft;
use super::inputs::Inputs;
use super::{
    group, health, launch, launcher_reports, mount_targets, prepare_failed, trust, worker_count,
};
use crate::model::*;

/// A cluster instance that is not a member and carries the elastic tag.
pub(super) fn candidate(
    p: &Inputs,
    st: &mut State,
    out: &mut Draft,
    at: usize,
    joins: &mut Vec<usize>,
) {
    let ip = p.list[at].ip;
    // A marker naming another instance is not this one's (see `trust`): as if absent.
    let success = p.markers.is_some_and(|m| m.success.contains(&ip))
        && !trust::foreign_marker(p, st, out, at, false);
    let shown = (p.markers.and_then(|m| m.failed.get(&ip)))
        .filter(|_| !trust::foreign_marker(p, st, out, at, true));
    // Unsigned (no agent): a failure marker any worker could have written is only shown.
    let failed = shown.filter(|_| p.rules.reports_signed);
    let sick = health::unhealthy(p, at).cloned();
    let silent = launcher_reports::silent(p, st, at);
    if !group::serving(p, at) {
        let why = failed.map(|f| format!("prepare-data failed ({f})"));
        let why = why.or_else(|| {
            let h = sick.as_ref().filter(|_| !health::stopped(st))?;
            Some(h.describe())
        });
        launch::outside_service(p, st, out, at, success && sick.is_none(), why.as_ref());
    } else if let Some(h) = sick {
        // Replaced by `health` unless that stopped, or the view is partial.
        let why = match health::stopped(st) {
            true => "a person: health.max_unhealthy reached",
            false => "a complete view to replace it",
        };
        let why = format!("{why}; {}", h.describe());
        out.view(at, Some(WorkerStatus::Preparing), Some(why));
    } else if let Some(quiet) = silent {
        let why = format!(
            "its agent to be heard: its launcher report says it runs, unchanged for {}",
            crate::model::span(quiet)
        );
        out.view(at, Some(WorkerStatus::AddQueued), Some(why));
    } else if success {
        joins.push(at);
    } else if let (Some(why), true) = (failed, group::in_group(p, at)) {
        launch::replace_failed(p, st, out, at, why);
    } else if let Some(why) = failed {
        let why = format!("prepare-data failed ({why})");
        let then = "it waits for a person (a launch-template worker is not replaced)";
        prepare_failed::journal(p, st, out, at, &why, then);
        let why = format!("a person: {why}");
        out.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
    } else if let Some(why) = shown {
        let why = format!(
            "a person: prepare-data failed ({why}); with workers.reports unsigned a failure \
             marker, which any worker could write, is only shown"
        );
        out.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
    } else {
        let why = mount_targets::missing(p, st, out, at)
            .unwrap_or_else(|| format!("prepare-data marker prepare_data_success_{ip}"));
        out.view(at, Some(WorkerStatus::Preparing), Some(why));
    }
}

pub(super) fn join(p: &Inputs, st: &mut State, out: &mut Draft, joins: Vec<usize>) {
    if let Some(why) = batch_waits(p, st, &joins) {
        return hold(out, joins, &why);
    }
    // Spares first: a checkpoint that passes while none could join is not theirs to use.
    let joins = spares(p, st, out, joins);
    if let Some(why) = checkpoint_waits(p, st, &joins) {
        return hold(out, joins, &why);
    }
    let added = out.added.len();
    for at in joins {
        let inst = &p.list[at];
        let listed = st.members.iter().any(|m| m.ip == inst.ip);
        if !p.can_join() || listed {
            let why = if listed {
                "its IP to leave the host files"
            } else {
                "a complete view"
            };
            out.view(at, Some(WorkerStatus::AddQueued), Some(why.into()));
            continue;
        }
        if worker_count(p, st) >= p.rules.max {
            let why = format!("room under max ({})", p.rules.max);
            out.view(at, Some(WorkerStatus::AddQueued), Some(why));
            continue;
        }
        st.members.push(Member {
            id: inst.id.clone(),
            ip: inst.ip,
            instance_type: inst.instance_type.clone(),
            joined_generation: p.next_gen,
            joined_at: p.now,
            log_mark: p.log_mark(),
            acked: false,
        });
        out.added.push(inst.ip);
        if group::in_group(p, at) {
            st.prepare_failures = 0;
        }
        let msg = format!(
            "{} is ready (prepare-data marker) and joins the job",
            inst.ip
        );
        let joined = out.event(p, EventKind::Joined, Some(p.who(at)), Some(p.next_gen), msg);
        joined.launched_at = Some(inst.launched_at);
        member_view(p, st, out, st.members.len() - 1, at);
    }
    // The batch and the checkpoint were waited for: whoever is ready later waits anew.
    if out.added.len() > added {
        forget_ready(st, |_| false);
        st.checkpoint_wait = None;
    }
}

fn hold(out: &mut Draft, joins: Vec<usize>, why: &str) {
    for at in joins {
        out.view(at, Some(WorkerStatus::AddQueued), Some(why.to_string()));
    }
}

/// With `join.batch`, why the ready workers wait: until the first of them has been ready for the
/// batch, unless they already fill the room under `max` (more cannot come). `None`: they join.
/// Remembers when each was first ready, and forgets a worker no longer waiting.
fn batch_waits(p: &Inputs, st: &mut State, joins: &[usize]) -> Option<String> {
    let batch = p.rules.join_batch_ms;
    if batch == 0 {
        return None;
    }
    let ids: BTreeSet<&str> = joins.iter().map(|at| p.list[*at].id.as_str()).collect();
    forget_ready(st, |id| ids.contains(id));
    for id in &ids {
        st.pending_mut(id).ready_since.get_or_insert(p.now);
    }
    let first = first_ready(st)?;
    if !p.can_join() {
        // They wait for a complete view (`join` says so), their window running on.
        return None;
    }
    let ends = first.saturating_add(batch);
    let room = p.rules.max.saturating_sub(worker_count(p, st));
    if p.now >= ends || joins.len() >= room {
        return None;
    }
    let left = span_left(ends - p.now);
    Some(format!(
        "the join batch: {} ready worker(s) join together in {left} (join.batch {})",
        joins.len(),
        span(batch)
    ))
}

/// With `join.at_checkpoint`, why the ready workers wait: until the job's `checkpoint_step`
/// moves on from what it was when they began waiting, at most `join.max_wait`. A job with no
/// worker has nothing to checkpoint: they join at once. `None`: they join.
fn checkpoint_waits(p: &Inputs, st: &mut State, joins: &[usize]) -> Option<String> {
    if !p.rules.join_at_checkpoint || joins.is_empty() || worker_count(p, st) == 0 {
        st.checkpoint_wait = None;
        return None;
    }
    let seen = match p.progress {
        Some(Ok(progress)) => progress.checkpoint_step,
        _ => None,
    };
    let wait = st.checkpoint_wait.get_or_insert(CheckpointWait {
        since: p.now,
        checkpoint: seen,
        passed: false,
    });
    let moved = seen.is_some_and(|c| wait.checkpoint.is_none_or(|w| c > w));
    let ends = wait.since.saturating_add(p.rules.join_max_wait_ms);
    if wait.passed || moved || p.now >= ends {
        wait.passed = true;
        return None;
    }
    let after = wait
        .checkpoint
        .map_or("the job's first".into(), |c| format!("one after step {c}"));
    Some(format!(
        "the job's next checkpoint: {} ready worker(s) join at {after} (join.at_checkpoint; at \
         most {} more)",
        joins.len(),
        span_left(ends - p.now)
    ))
}

/// With `join.sizes`, the ready workers that join: as many as bring the job to the largest
/// allowed size within reach (and `max`). The rest wait as spares, ready and idle.
fn spares(p: &Inputs, st: &State, out: &mut Draft, mut joins: Vec<usize>) -> Vec<usize> {
    let sizes = &p.rules.join_sizes;
    if sizes.is_empty() {
        return joins;
    }
    let now = worker_count(p, st);
    let reach = now.saturating_add(joins.len()).min(p.rules.max);
    let target = sizes.iter().rev().find(|s| **s <= reach).copied();
    let joining = target.unwrap_or(0).saturating_sub(now).min(joins.len());
    let grown = now + joining;
    let spare = joins.len() - joining;
    let why = match sizes.iter().find(|s| **s > grown) {
        Some(next) => {
            format!("a spare: join.sizes lets the job grow from {grown} to {next} workers, {spare} ready")
        }
        None => format!("a spare: the job has the largest of join.sizes ({grown} workers)"),
    };
    for at in joins.split_off(joining) {
        out.view(at, Some(WorkerStatus::AddQueued), Some(why.clone()));
    }
    joins
}

/// A member is ADDED once the job acknowledged its join (ack file or `host_worker_log`),
/// journaled once: from then on it trains.
pub(super) fn member_view(p: &Inputs, st: &mut State, out: &mut Draft, pos: usize, at: usize) {
    let m = &mut st.members[pos];
    if let Some(a) = p.acks.filter(|_| !m.acked) {
        let by_file = p.ack.is_some_and(|g| g >= m.joined_generation);
        let by_log = (a.log_added.get(&m.ip)).is_some_and(|line| *line > m.log_mark);
        if by_file || by_log {
            m.acked = true;
            let how = p.acked_by(by_file);
            let gen = m.joined_generation;
            let msg = format!(
                "job acknowledged generation {gen}, which lists {} ({how}): it trains",
                m.ip
            );
            out.event(
                p,
                EventKind::JoinAcknowledged,
                Some((&m.id, m.ip)),
                Some(gen),
                msg,
            );
        }
    }
    let (status, waiting) = if m.acked {
        (WorkerStatus::Added, None)
    } else {
        let gen = m.joined_generation;
        (
            WorkerStatus::AddQueued,
            Some(format!("job to acknowledge generation {gen}")),
        )
    };
    out.view(at, Some(status), waiting);
}

/// When the first of the ready workers waiting for `join.batch` became ready.
pub(super) fn first_ready(st: &State) -> Option<Millis> {
    st.pending.values().filter_map(|w| w.ready_since).min()
}

/// Forgets when the workers not to `keep` became ready: they wait anew if they are ready later.
fn forget_ready(st: &mut State, keep: impl Fn(&str) -> bool) {
    for (id, w) in st.pending.iter_mut() {
        if !keep(id) {
            w.ready_since = None;
        }
    }
}
