//! How many generations (each a restart of the job) 8 workers cost as they become ready over a
//! minute, with and without `join.batch`: decide's passes every second on a simulated clock,
//! each worker's marker appearing at its time. `cargo bench --bench join_batch` prints the
//! figures of BENCHMARKS.md; it measures the rule, not the machine, so they are exact.

mod common;

use common::{instance, ip, rules, NOW};
use dt::decide::decide_from;
use dt::model::*;

const WORKERS: usize = 8;
const PASS_MS: u64 = 1_000;
const MINUTES: u64 = 3;

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

/// The generations the workers' joins took, and when the last one joined (ms after the start).
fn simulate(batch_ms: u64, arrive: &[u64]) -> (u64, u64) {
    let rules = dt::decide::Rules {
        join_batch_ms: batch_ms,
        ..rules(0, WORKERS + 1)
    };
    let instances: Vec<Instance> = (0..WORKERS).map(|n| instance(n, None, true)).collect();
    let mut state = State::default();
    let mut last_join = 0;
    for t in (0..MINUTES * 60_000).step_by(PASS_MS as usize) {
        let mut markers = Markers::default();
        for (n, at) in arrive.iter().enumerate() {
            if *at <= t {
                markers.success.insert(ip(n));
            }
        }
        let snap = Snapshot {
            instances: Ok(instances.clone()),
            markers: Ok(markers),
            acks: Ok(Acks::default()),
            notices: Vec::new(),
            group: None,
            resume_requested: None,
            mount_targets: None,
            progress: None,
        };
        let members = state.members.len();
        state = decide_from(&rules, &snap, state, NOW + t).state;
        if state.members.len() > members {
            last_join = t;
        }
    }
    assert_eq!(state.members.len(), WORKERS, "every worker joined");
    (state.generation, last_join)
}

fn main() {
    println!("8 workers ready over 60 s, a pass every second: generations (job restarts), and when the last joined");
    println!(
        "{:<10} {:>12} {:>12} {:>12}",
        "arrivals", "join.batch", "generations", "last joined"
    );
    for pattern in ["even", "scattered"] {
        let arrive = arrivals(pattern);
        for batch_s in [0, 10, 30, 60] {
            let (generations, last) = simulate(batch_s * 1_000, &arrive);
            let batch = format!("{batch_s}s");
            println!(
                "{pattern:<10} {batch:>12} {generations:>12} {:>11}s",
                last / 1_000
            );
        }
    }
}
