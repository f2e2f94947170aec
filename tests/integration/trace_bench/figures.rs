//! What a replay prints for scripts/bench-trace, and the job's size over it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Measured;
use crate::goodput::{bucket, BUCKETS};
use crate::torchrun::Story;

/// One line for scripts/bench-trace: `TRACE <strategy> | <measure>: <value>`.
pub(super) fn figure(strategy: &str, measure: &str, value: f64) {
    eprintln!("\nTRACE {strategy} | {measure}: {value:.3}");
}

/// Five times a second until `done`, the host file: who the job has.
pub(super) fn host_files(s: &Story, start: Instant, done: &AtomicBool) -> Vec<(f64, Vec<String>)> {
    let mut hosts = Vec::new();
    while !done.load(Ordering::Relaxed) {
        hosts.push((start.elapsed().as_secs_f64(), s.c.hosts()));
        std::thread::sleep(Duration::from_millis(200));
    }
    hosts
}

/// For an interruption of `ip` at `at`: the seconds from the host file's first falling below
/// the size it had just before, until it is back to that size (or `end`); `None` when `ip` was
/// not a member then (reclaimed while it prepared: that costs its preparing, not the job's size).
pub(super) fn below_after(
    hosts: &[(f64, Vec<String>)],
    at: f64,
    ip: &str,
    end: f64,
) -> Option<f64> {
    let (_, before) = hosts.iter().rev().find(|(t, _)| *t < at)?;
    if !before.iter().any(|h| h == ip) {
        return None;
    }
    let after = || hosts.iter().filter(|(t, _)| *t >= at);
    let Some((low, _)) = after().find(|(_, h)| h.len() < before.len()) else {
        return Some(0.0);
    };
    let back = after().find(|(t, h)| t > low && h.len() >= before.len());
    Some(back.map_or(end, |(t, _)| *t) - low)
}

/// The node-seconds the host file held fewer than `nodes` (the trace's peak).
pub(super) fn below_peak(hosts: &[(f64, Vec<String>)], nodes: usize) -> f64 {
    (hosts.windows(2))
        .map(|w| nodes.saturating_sub(w[0].1.len()) as f64 * (w[1].0 - w[0].0))
        .sum()
}

/// The figures scripts/bench-trace prints: the ideal and the forced preparing from the trace,
/// then the ledger's buckets and its share of the ideal.
pub(super) fn print(trace: &Value, strategy: &str, m: &Measured) {
    let ideal = trace["ideal_node_s"].as_f64().unwrap_or(0.0);
    let forced = trace["forced_prepare_node_s"].as_f64().unwrap_or(0.0);
    figure(strategy, "offered (node-s)", ideal);
    figure(strategy, "preparing the trace forces (node-s)", forced);
    for name in BUCKETS {
        figure(
            strategy,
            &format!("{name} (node-s)"),
            bucket(&m.goodput, name),
        );
    }
    let paid = m.goodput["paid"]["node_seconds"].as_f64().unwrap_or(0.0);
    figure(strategy, "paid (node-s)", paid);
    let training = bucket(&m.goodput, "training");
    figure(
        strategy,
        "trained / (offered - forced preparing) (%)",
        100.0 * training / (ideal - forced).max(1e-9),
    );
    figure(
        strategy,
        "trained / paid (%)",
        100.0 * training / paid.max(1e-9),
    );
    figure(strategy, "steps", m.steps as f64);
    figure(
        strategy,
        "the job's own count of trained (node-s)",
        m.job_node_s,
    );
    figure(
        strategy,
        "ledger's training / the job's count (%)",
        100.0 * training / m.job_node_s.max(1e-9),
    );
    let f = &m.fleet;
    let below: Vec<f64> = (f.hits.iter())
        .filter_map(|(at, ip)| below_after(&m.hosts, *at, ip, m.duration))
        .collect();
    figure(strategy, "interruptions of the fleet", f.hits.len() as f64);
    figure(strategy, "of members", below.len() as f64);
    figure(
        strategy,
        "seconds below the size before, per member's interruption (mean)",
        below.iter().sum::<f64>() / below.len().max(1) as f64,
    );
    figure(
        strategy,
        "node-s below the trace's peak size",
        below_peak(&m.hosts, f.nodes),
    );
    figure(strategy, "replacements dtd launched", f.adopted as f64);
    figure(strategy, "instances dtd terminated", f.ended_by_dtd as f64);
    figure(
        strategy,
        "arrivals not launched (fleet at peak)",
        f.skipped as f64,
    );
}
