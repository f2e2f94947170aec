//! How long one reconcile pass spends in `decide` at 10, 1,000 and 10,000 workers.
//!
//! Self-contained (no criterion): `cargo bench --bench decide`. Each size is a realistic steady
//! state — every worker a member the job acknowledged, plus a few joining, a few preparing, a
//! few asked to leave this pass and a few removals waiting for the job, every member's health
//! check passing — and decide runs on the same inputs over and over for a fixed time budget.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{instance, ip, ELASTIC, NOW};
use dt::decide::{decide, decide_from, Rules};
use dt::model::*;

const BASE: usize = 2;
/// Workers in each transient state (joining, preparing, leaving, waiting for an ack).
const FEW: usize = 5;
/// Time spent measuring each size, after a short warm-up.
const BUDGET: Duration = Duration::from_secs(2);
const TARGET: Duration = Duration::from_millis(5);

/// Rules, snapshot and remembered state for `workers` workers in steady state.
fn steady_state(workers: usize) -> (Rules, Snapshot, State) {
    let rules = common::rules(BASE, workers + 2 * FEW);
    let few = FEW.min(workers / 4).max(1);
    let members = workers - BASE;
    let mut instances = Vec::new();
    let mut state = State {
        generation: 40,
        ..State::default()
    };
    let mut markers = Markers::default();
    for n in 0..members {
        // The first `few` members had their elastic tag deleted: they leave on this pass.
        instances.push(instance(n, Some(WorkerStatus::Added), n >= few));
        state.members.push(Member {
            id: instances[n].id.clone(),
            ip: ip(n),
            instance_type: "p4d.24xlarge".into(),
            joined_generation: 1 + (n % 40) as u64,
            joined_at: NOW - 3_000_000,
            log_mark: 0,
            acked: true,
        });
        markers.success.insert(ip(n));
        // dtd remembers since when each member is ADDED, as it does once they joined.
        remember_added(&mut state, &instances[n], NOW - 3_000_000);
        // With `agent.health`, every worker's agent reports; all pass here.
        let health = HealthSeen {
            instance_id: instances[n].id.clone(),
            ok: true,
            gpus_lost: false,
            reason: "ok".into(),
            when: Some(NOW - 60_000),
        };
        markers.health.insert(ip(n), health);
    }
    let mut next = members;
    for _ in 0..few {
        // Left earlier; the job has not acknowledged generation 40 yet.
        let i = instance(next, Some(WorkerStatus::RemovalQueued), false);
        state.removals.push(Removal {
            id: i.id.clone(),
            ip: i.ip,
            generation: 40,
            queued_at: NOW - 10_000,
            deadline: NOW + 590_000,
            log_mark: 0,
            reason: "elastic tag deleted".into(),
            stage: Stage::AwaitingAck {
                cause: Cause::ElasticTag,
                then: Some(Ending::Terminate),
                heartbeat_at: None,
            },
        });
        instances.push(i);
        // Ready to join on this pass.
        instances.push(instance(next + 1, Some(WorkerStatus::Preparing), true));
        markers.success.insert(ip(next + 1));
        // Still running its prepare-data script.
        instances.push(instance(next + 2, Some(WorkerStatus::Preparing), true));
        next += 3;
    }
    let acks = Acks {
        generation: Some(39),
        log_lines: 0,
        ..Acks::default()
    };
    let snap = Snapshot {
        reservations: None,
        instances: Ok(instances),
        markers: Ok(markers),
        acks: Ok(acks),
        notices: Vec::new(),
        group: None,
        resume_requested: None,
        subnet_zones: Default::default(),
        capacity_refusals: Vec::new(),
        mount_targets: None,
        progress: None,
    };
    // One pass fills what the daemon remembers between passes (the `since` times).
    let mut warm = snap.clone();
    if let Ok(v) = &mut warm.instances {
        for i in v.iter_mut() {
            i.tags.insert(ELASTIC.into(), "true".into());
        }
    }
    state.workers = decide(&rules, &warm, &state, NOW - 2_000).state.workers;
    (rules, snap, state)
}

/// The steady state with every member's agent reporting its launcher running and the job's step
/// time (`session.compute()`), none a straggler: what `job.stragglers` compares on every pass.
fn with_step_times(workers: usize) -> (Rules, Snapshot, State) {
    let (mut rules, mut snap, mut state) = steady_state(workers);
    rules.stragglers.action = dt::config::StragglerAction::Drain;
    rules.launcher_silent_ms = Some(30_000);
    if let Ok(m) = &mut snap.markers {
        for (n, member) in state.members.iter().enumerate() {
            let l = LauncherSeen {
                instance_id: member.id.clone(),
                state: dt::protocol::launcher::LauncherState::Running,
                generation: Some(40),
                restarts: 0,
                reason: "running".into(),
                stopped: None,
                compute: Some(dt::protocol::launcher::StepCompute {
                    step: 1_200,
                    micros: 180_000 + (n % 7) as u64 * 1_000,
                }),
                heard_at: NOW - 1_000,
            };
            m.launchers.insert(member.ip, l);
        }
    }
    // One pass remembers each launcher's state as journaled, as the daemon does between passes
    // (else every pass would journal every launcher anew).
    state.workers = decide(&rules, &snap, &state, NOW - 2_000).state.workers;
    (rules, snap, state)
}

fn remember_added(state: &mut State, inst: &Instance, at: Millis) {
    state
        .worker_mut(&inst.id)
        .set_status(WorkerStatus::Added, at);
}

fn show(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

type Scenario = fn(usize) -> (Rules, Snapshot, State);

/// Runs decide for the time budget; returns the sorted sample of pass durations.
fn measure(workers: usize, scenario: Scenario) -> Vec<Duration> {
    let (rules, snap, state) = scenario(workers);
    // A sanity check that the scenario is what it claims: joins and leaves on every pass.
    let plan = decide(&rules, &snap, &state, NOW);
    assert_eq!(
        plan.outcome.hosts.len(),
        workers,
        "steady state at {workers}"
    );
    assert!(!plan.outcome.events.is_empty());

    let warm_up = Instant::now();
    while warm_up.elapsed() < BUDGET / 10 {
        black_box(decide(black_box(&rules), black_box(&snap), &state, NOW));
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while (started.elapsed() < BUDGET || samples.len() < 20) && samples.len() < 200_000 {
        // The daemon hands its state over; the copy this loop needs is made outside the timing.
        let prev = state.clone();
        let t = Instant::now();
        let plan = decide_from(black_box(&rules), black_box(&snap), prev, NOW);
        samples.push(t.elapsed());
        black_box(plan);
    }
    samples.sort();
    samples
}

fn main() {
    // `cargo bench` passes `--bench`. `cargo test --all-targets` runs this file without it, in a
    // debug build: there it only checks that the scenarios hold, at the two smaller sizes.
    if !std::env::args().any(|a| a == "--bench") {
        for workers in [10, 1_000] {
            for scenario in [steady_state as Scenario, with_step_times] {
                let (rules, snap, state) = scenario(workers);
                let plan = decide(&rules, &snap, &state, NOW);
                assert_eq!(plan.outcome.hosts.len(), workers);
                assert!(plan.state.stragglers.is_empty(), "no straggler");
            }
        }
        println!("decide benchmark scenarios hold (run `cargo bench --bench decide` for figures)");
        return;
    }
    let mut median_at_10k = None;
    let runs = [
        ("decide", steady_state as Scenario, &[10, 1_000, 10_000][..]),
        ("+steps", with_step_times, &[1_000, 10_000][..]),
    ];
    for (workers, name, scenario) in runs
        .iter()
        .flat_map(|(name, f, sizes)| sizes.iter().map(move |w| (*w, *name, *f)))
    {
        let s = measure(workers, scenario);
        let pick = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        println!(
            "{name}  {workers:>6} workers  {:>7} iterations  median {:>9}  p95 {:>9}  max {:>9}",
            s.len(),
            show(pick(0.5)),
            show(pick(0.95)),
            show(s[s.len() - 1]),
        );
        if workers == 10_000 && name == "decide" {
            median_at_10k = Some(pick(0.5));
        }
    }
    let median = median_at_10k.unwrap_or_default();
    let verdict = if median < TARGET { "met" } else { "NOT met" };
    println!(
        "target: under {} at 10,000 workers (median {}): {verdict}",
        show(TARGET),
        show(median)
    );
}
