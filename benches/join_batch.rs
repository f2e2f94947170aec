//! How many generations (each a restart of the job) 8 workers cost as they become ready over a
//! minute, with and without `join.batch` and `join.at_checkpoint`: decide's passes every second
//! on a simulated clock, each worker's marker appearing at its time, the job checkpointing every
//! 30 s. Each restart of a running job redoes the training since its last checkpoint; that is
//! counted too. `cargo bench --bench join_batch` prints the figures of BENCHMARKS.md; it
//! measures the rule, not the machine, so they are exact.

mod common;

use common::{instance, ip, rules, NOW};
use dt::decide::decide_from;
use dt::model::*;

const WORKERS: usize = 8;
const PASS_MS: u64 = 1_000;
const MINUTES: u64 = 3;
/// The job saves a checkpoint every this often (and says so in its progress file).
const CHECKPOINT_MS: u64 = 30_000;

/// When each worker's marker appears (ms after the start), for one arrival pattern.
fn arrivals(pattern: &str) -> Vec<u64> {
    match pattern {
        // One every 7.5 s over the minute.
        "even" => (0..WORKERS as u64).map(|n| n * 7_500).collect(),
        // A reproducible scatter over the minute (a 64-bit LCG, Knuth's MMIX constants).
        _ => {
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut times: Vec<u64> = (0..WORKERS)
                .map(|_| {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    (x >> 33) % 60_000
                })
                .collect();
            times.sort_unstable();
            times
        }
    }
}

/// What the workers' joins cost: generations, when the last one joined, and the training redone
/// by the restarts of a running job (ms since its last checkpoint, summed).
struct Cost {
    generations: u64,
    last_join: u64,
    redone: u64,
}

fn simulate(batch_ms: u64, at_checkpoint: bool, arrive: &[u64]) -> Cost {
    let rules = dt::decide::Rules {
        join_batch_ms: batch_ms,
        join_at_checkpoint: at_checkpoint,
        join_max_wait_ms: 10 * 60_000,
        ..rules(0, WORKERS + 1)
    };
    let instances: Vec<Instance> = (0..WORKERS).map(|n| instance(n, None, true)).collect();
    let mut state = State::default();
    let (mut last_join, mut redone) = (0, 0);
    for t in (0..MINUTES * 60_000).step_by(PASS_MS as usize) {
        let checkpoint = t / CHECKPOINT_MS * CHECKPOINT_MS;
        let mut markers = Markers::default();
        for (n, at) in arrive.iter().enumerate() {
            if *at <= t {
                markers.success.insert(ip(n));
            }
        }
        let snap = Snapshot {
            reservations: None,
            instances: Ok(instances.clone()),
            markers: Ok(markers),
            acks: Ok(Acks::default()),
            notices: Vec::new(),
            group: None,
            resume_requested: None,
            subnet_zones: Default::default(),
            capacity_refusals: Vec::new(),
            mount_targets: None,
            progress: Some(Ok(Progress {
                step: t,
                time: None,
                checkpoint_step: Some(checkpoint),
                quorum: None,
                run: None,
                generation: None,
            })),
        };
        let members = state.members.len();
        state = decide_from(&rules, &snap, state, NOW + t).state;
        if state.members.len() > members {
            last_join = t;
            if members > 0 {
                redone += t - checkpoint;
            }
        }
    }
    assert_eq!(state.members.len(), WORKERS, "every worker joined");
    Cost {
        generations: state.generation,
        last_join,
        redone,
    }
}

fn main() {
    println!(
        "8 workers ready over 60 s, a pass every second, a checkpoint every 30 s: generations (job \
         restarts), when the last joined, and the training the restarts redid"
    );
    println!(
        "{:<10} {:>12} {:>14} {:>12} {:>12} {:>8}",
        "arrivals", "join.batch", "at_checkpoint", "generations", "last joined", "redone"
    );
    for pattern in ["even", "scattered"] {
        let arrive = arrivals(pattern);
        for (batch_s, at_checkpoint) in [
            (0, false),
            (10, false),
            (30, false),
            (60, false),
            (0, true),
            (30, true),
        ] {
            let cost = simulate(batch_s * 1_000, at_checkpoint, &arrive);
            let batch = format!("{batch_s}s");
            println!(
                "{pattern:<10} {batch:>12} {at_checkpoint:>14} {:>12} {:>11}s {:>7}s",
                cost.generations,
                cost.last_join / 1_000,
                cost.redone / 1_000
            );
        }
    }
}
