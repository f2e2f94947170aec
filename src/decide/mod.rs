//! The rules, as one pure function: (rules, snapshot, remembered state, now) -> plan.
//!
//! No I/O, no clock, no randomness. Everything that can terminate or remove an instance is here,
//! so that the safety rules of ARCHITECTURE.md can be tested exhaustively (see the property tests).
//!
//! A pass reads its [`inputs::Inputs`] (the rules, the time, the snapshot and its indexes: never
//! changed), changes the [`State`], and writes a [`draft::Draft`] of the [`Outcome`]. Each rule
//! family is a file of free functions over those three: `notices`, `classify` (who stays, who
//! joins, who leaves), `joining`, `leaving`, `group` and `launch` (the worker group and its
//! launching hook), `removal` (the removal lifecycle), `launcher` (the workers' torchrun
//! launchers), `stall` (the job's step standing still), `stragglers` (a member slower than
//! the others), `trains_on` (a Spot-warned member training through its warning),
//! `replaced_first` (a member AWS recommends rebalancing, training until its replacement joins),
//! `trust` (what a worker wrote, believed only as far as EC2 or dtd's own state confirms it),
//! `replacements` (launches owed, over the capacity choices), `report` (rows, tags, host files).

mod ack;
mod budget;
mod classify;
mod draft;
mod generation;
mod group;
mod health;
mod holds;
mod host_list;
mod hung;
mod inputs;
mod joining;
mod launch;
mod launcher;
mod launcher_reports;
mod leaving;
mod mount_targets;
mod notice_targets;
mod notices;
mod prepare_failed;
mod quorum;
mod removal;
mod replaced_first;
mod replacements;
mod report;
mod rows;
mod rules;
mod settle;
mod stall;
mod status_tags;
mod stragglers;
mod trains_on;
mod trust;
mod wake;

use crate::model::*;

pub use rows::worker_views;
pub use rules::{Rules, GROUP_TAG, TEMPLATE_TAG};
pub use settle::settle;

/// Decides from a borrowed state (tests, tools); the daemon hands its state over with
/// [`decide_from`] and saves the copy.
pub fn decide(rules: &Rules, snap: &Snapshot, prev: &State, now: Millis) -> Plan {
    decide_from(rules, snap, prev.clone(), now)
}

pub fn decide_from(rules: &Rules, snap: &Snapshot, prev: State, now: Millis) -> Plan {
    let p = inputs::Inputs::new(rules, snap, &prev, now);
    let mut st = prev;
    let mut out = draft::Draft::new(snap, p.list.len());
    trust::pin_keys(&p, &mut st, &mut out);
    trust::remember_newest(&p, &mut st);
    trust::refuse_reports(&p, &mut st, &mut out);
    trust::refuse_files(&p, &mut st, &mut out);
    if let Some(claimed) = p.ack_refused {
        trust::refuse_ack(&p, &mut st, &mut out, claimed);
    }
    // Before members are located: a broken worker or a notice can take a member out of the
    // job. The broken leave first, whatever min says, so that a rebalance drain counts
    // toward min only the workers that stay.
    health::heed(&p, &mut st, &mut out);
    launcher::heed_silence(&p, &mut st, &mut out);
    let block_ends = notices::capacity_block_ends(&p);
    let heard = [snap.notices.as_slice(), &block_ends].concat();
    notices::heed(&p, &mut st, &mut out, &heard);
    replacements::send(&p, &mut st, &mut out);
    let member_of = classify::locate_members(&p, &mut st, &mut out);
    let (joins, leaves) = classify::classify(&p, &mut st, &mut out, &member_of);
    joining::join(&p, &mut st, &mut out, joins);
    leaving::leave(&p, &mut st, &mut out, leaves);
    stragglers::watch(&p, &mut st, &mut out);
    health::show_kept(&p, &st, &mut out);
    stragglers::show(&p, &st, &mut out);
    group::scale_in(&p, &mut st, &mut out);
    launch::prune(&p, &mut st);
    removal::advance_all(&p, &mut st, &mut out);
    launcher::watch(&p, &mut st, &mut out);
    // After joins and leaves: whether the job has workers is this pass's answer.
    stall::watch(&p, &mut st, &mut out);
    quorum::watch(&p, &mut st, &mut out);
    trust::forget_stale(&p, &mut st, &out);
    report::finish(&p, st, out)
}

/// Base hosts and members: what `min` and `max` count.
fn worker_count(p: &inputs::Inputs, st: &State) -> usize {
    p.rules.base_hosts.len() + st.members.len()
}
