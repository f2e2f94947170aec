//! A Spot market replayed against the real `dtd`, its agents, moto and a real PyTorch job
//! (`scripts/bench-trace`): instances arrive when the trace's capacity does (each boots and
//! prepares for the trace's preparing time, compressed), take EC2's two-minute warning (compressed
//! too) before the trace reclaims them, and are then gone: their processes killed and the
//! instance terminated, as AWS would. At the end, `dtd`'s goodput ledger beside the ideal: every
//! node-second the trace offered, training.
//!
//! `scripts/trace.py events` writes the events; `scripts/bench-trace` runs the ignored
//! `replays_the_trace_in_dt_trace_events` once per strategy and prints the table. The suite
//! replays a short trace of its own, so the replay cannot rot.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::goodput::{bucket, BUCKETS};
use crate::in_place::Lighthouse;
use crate::support::{self, free_port};
use crate::torchrun::{install_mode, Node, Script, Story, STORIES};

/// One line for scripts/bench-trace: `TRACE <strategy> | <measure>: <value>`.
fn figure(strategy: &str, measure: &str, value: f64) {
    eprintln!("\nTRACE {strategy} | {measure}: {value:.3}");
}

/// The job and the strategy's part of `job.launcher`, with a Lighthouse to clean up under
/// `in_place`.
fn job(strategy: &str) -> (Script, String, Option<Lighthouse>) {
    let steps = "'10000000'";
    match strategy {
        "in_place" => {
            let port = free_port();
            let script = Script {
                files: &["examples/in_place_job.py"],
                args: format!("--dir, {{efs}}, --steps, {steps}, --step-sleep, '0.05', --checkpoint-every, '100', --eval-every, '1000', --stop-timeout, '30', --count-trained, {{efs}}/trained"),
            };
            let yaml = format!(
                "    strategy: in_place\n    in_place: {{ lighthouse: '127.0.0.100:{port}' }}\n"
            );
            (
                script,
                yaml,
                Some(Lighthouse(format!("bind=127.0.0.1:{port}"))),
            )
        }
        "generation" => {
            let script = Script {
                files: &["examples/torch_job.py"],
                args: format!("--dir, {{efs}}, --steps, {steps}, --step-sleep, '0.05', --checkpoint-every, '20', --stop-timeout, '3', --count-trained, {{efs}}/trained"),
            };
            (script, String::new(), None)
        }
        other => panic!("DT_TRACE_STRATEGY: in_place or generation, not {other:?}"),
    }
}

/// The address of the trace's `slot`th instance: 127.0.0.101 and up (dtd's own Lighthouse
/// front is at .100, the tests' first nodes below it).
fn ip(slot: u64) -> &'static str {
    assert!(
        slot < 154,
        "a trace of at most 154 instances: scale it down"
    );
    Box::leak(format!("127.0.0.{}", 101 + slot).into_boxed_str())
}

/// What one replay measured.
pub(crate) struct Measured {
    pub goodput: Value,
    pub steps: u64,
    /// The job's own count of the node-seconds that trained steps it kept (`--count-trained`).
    pub job_node_s: f64,
}

/// The sum of the job's counts in `dir` (one file a node under `in_place`, one for the job else).
fn job_count(dir: &Path) -> f64 {
    let files = std::fs::read_dir(dir).map_or_else(|_| Vec::new(), |d| d.flatten().collect());
    let counts = files.iter().filter_map(|f| {
        let text = std::fs::read_to_string(f.path()).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        v["node_seconds"].as_f64()
    });
    counts.sum()
}

/// Replays `trace` (scripts/trace.py's events) under `strategy` and returns the ledger.
pub(crate) fn replay(trace: &Value, strategy: &str) -> Measured {
    let venv = support::torch_venv();
    let (script, yaml, lighthouse) = job(strategy);
    let mut s = Story::with(&venv, &script, &yaml);
    slow_prepare(&s, trace["prepare_s"].as_f64().unwrap_or(0.0));
    let events = trace["events"].as_array().expect("events").clone();
    let duration = Duration::from_secs_f64(trace["duration_s"].as_f64().expect("duration_s"));
    let start = Instant::now();
    let done = AtomicBool::new(false);
    let samples = std::env::var_os("DT_TRACE_SAMPLES");
    let running = std::thread::scope(|scope| {
        if let Some(path) = &samples {
            scope.spawn(|| sample(&s, Path::new(path), start, &done));
        }
        let running = play(&s, &events, start, duration);
        done.store(true, Ordering::Relaxed);
        running
    });
    let steps = s.progress().and_then(|p| p["step"].as_u64()).unwrap_or(0);
    let job_node_s = job_count(&s.c.efs().join("trained"));
    // The ledger as of the same moment: dtd writes its file when it stops, else only every
    // 10 s, which at 4 nodes is up to 40 node-seconds behind the job's count.
    s.c.stop_dtd();
    let out = s.c.dtctl(&["goodput", "-o", "json"]);
    assert!(
        out.status.success(),
        "dtctl goodput: {}",
        support::stderr(&out)
    );
    let goodput = serde_json::from_str(&support::stdout(&out)).expect("dtctl goodput's JSON");
    drop((running, lighthouse));
    Measured {
        goodput,
        steps,
        job_node_s,
    }
}

/// The trace's events, each at its time, until `duration`: the instances still running then.
fn play(s: &Story, events: &[Value], start: Instant, duration: Duration) -> BTreeMap<u64, Node> {
    let mut running: BTreeMap<u64, Node> = BTreeMap::new();
    // (when, slot): an instance the trace reclaims at that time.
    let mut gone: Vec<(Duration, u64)> = Vec::new();
    let at = |e: &Value, key: &str| Duration::from_secs_f64(e[key].as_f64().unwrap_or(0.0));
    for e in events {
        let when = at(e, "at");
        end_reclaimed(s, &mut running, &mut gone, start, when);
        sleep_until(start, when);
        let slot = e["slot"].as_u64().expect("slot");
        match e["kind"].as_str() {
            Some("arrive") => {
                running.insert(slot, s.node(ip(slot), true));
            }
            Some("warn") => {
                let left = at(e, "gone").saturating_sub(start.elapsed());
                if let Some(node) = running.get(&slot) {
                    warn(node, left);
                }
                gone.push((at(e, "gone"), slot));
            }
            Some("vanish") => gone.push((when, slot)),
            other => panic!("an event of kind {other:?}"),
        }
    }
    end_reclaimed(s, &mut running, &mut gone, start, duration);
    sleep_until(start, duration);
    running
}

/// `DT_TRACE_SAMPLES=FILE`: twice a second, the ledger as last written (every 10 s) beside the
/// job's own count and its progress, one line each, to find when the two part.
fn sample(s: &Story, path: &Path, start: Instant, done: &AtomicBool) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("DT_TRACE_SAMPLES: a file to write");
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let out = s.c.dtctl(&["goodput", "-o", "json"]);
        let g: Value = serde_json::from_str(&support::stdout(&out)).unwrap_or(Value::Null);
        if g["buckets"].as_array().is_none() {
            continue; // no ledger written yet
        }
        let p = s.progress().unwrap_or(Value::Null);
        let line = format!(
            "{:.1} s: training {:.1} paused {:.1} redone {:.1} job {:.1} step {} generation {} world {}",
            start.elapsed().as_secs_f64(),
            bucket(&g, "training"),
            bucket(&g, "paused"),
            bucket(&g, "redone"),
            job_count(&s.c.efs().join("trained")),
            p["step"],
            p["generation"],
            p["world_size"],
        );
        writeln!(f, "{line}").expect("DT_TRACE_SAMPLES: writing");
    }
}

/// A new instance boots and prepares for `seconds` before its success marker.
fn slow_prepare(s: &Story, seconds: f64) {
    let prepare = s.c.dir.path().join("prepare.sh");
    std::fs::write(&prepare, format!("#!/bin/sh\nsleep {seconds:.3}\n")).expect("prepare.sh");
    install_mode(&prepare, 0o755);
}

fn sleep_until(start: Instant, when: Duration) {
    if let Some(left) = when.checked_sub(start.elapsed()) {
        std::thread::sleep(left);
    }
}

/// EC2's Spot warning on the instance's metadata, for a reclaim `left` from now.
fn warn(node: &Node, left: Duration) {
    let deadline = std::time::SystemTime::now() + left;
    let time = humantime::format_rfc3339_seconds(deadline);
    node.imds.set(
        "spot/instance-action",
        &format!(r#"{{"action":"terminate","time":"{time}"}}"#),
    );
}

/// The instances the trace reclaims before `until`, each at its time: everything on it killed
/// and the instance terminated, as AWS does.
fn end_reclaimed(
    s: &Story,
    running: &mut BTreeMap<u64, Node>,
    gone: &mut Vec<(Duration, u64)>,
    start: Instant,
    until: Duration,
) {
    gone.sort();
    while let Some(&(when, slot)) = gone.first().filter(|(w, _)| *w <= until) {
        gone.remove(0);
        sleep_until(start, when);
        if let Some(node) = running.remove(&slot) {
            let id = node.id.clone();
            drop(node);
            s.c.aws(&["ec2", "terminate-instances", "--instance-ids", &id]);
        }
    }
}

/// The figures scripts/bench-trace prints: the ideal and the forced preparing from the trace,
/// then the ledger's buckets and its share of the ideal.
fn print(trace: &Value, strategy: &str, m: &Measured) {
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
}

#[test]
#[ignore = "a benchmark of many minutes: scripts/bench-trace runs it"]
fn replays_the_trace_in_dt_trace_events() {
    let path =
        std::env::var("DT_TRACE_EVENTS").expect("DT_TRACE_EVENTS: scripts/trace.py's events");
    let strategy = std::env::var("DT_TRACE_STRATEGY").unwrap_or_else(|_| "in_place".into());
    let text = std::fs::read_to_string(Path::new(&path)).expect("the events file");
    let trace: Value = serde_json::from_str(&text).expect("the events' JSON");
    let _turn = STORIES.enter();
    let m = replay(&trace, &strategy);
    print(&trace, &strategy, &m);
}

/// The suite's own short trace (trace seconds at 60x): two instances from the start, a third
/// arriving after its 5 minutes of preparing, one reclaimed with its warning, one vanishing.
#[test]
fn a_short_trace_replayed_under_in_place_is_all_in_the_ledger() {
    let _turn = STORIES.enter();
    let trace = serde_json::json!({
        "nodes": 3, "speed": 60.0, "warning_s": 2.0, "prepare_s": 5.0, "duration_s": 70.0,
        "events": [
            {"at": 0.0, "kind": "arrive", "slot": 0},
            {"at": 0.0, "kind": "arrive", "slot": 1},
            {"at": 10.0, "kind": "arrive", "slot": 2},
            {"at": 35.0, "kind": "warn", "slot": 1, "gone": 37.0},
            {"at": 50.0, "kind": "vanish", "slot": 2, "gone": 50.0},
        ],
        "ideal_node_s": 70.0 + 37.0 + 40.0,
        "forced_prepare_node_s": 15.0,
    });
    let m = replay(&trace, "in_place");
    print(&trace, "in_place", &m);
    let g = &m.goodput;
    let sum: f64 = BUCKETS.iter().map(|n| bucket(g, n)).sum();
    let paid = g["paid"]["node_seconds"].as_f64().expect("paid");
    assert!((sum - paid).abs() < 0.002, "{sum} against {paid}: {g}");
    assert!(bucket(g, "preparing") >= 3.0 * 4.0, "three prepared: {g}");
    assert!(bucket(g, "training") > 20.0, "trained: {g}");
    assert!(m.steps > 0, "the job's steps");
    assert!(
        m.job_node_s > 10.0,
        "the job counted its own: {}",
        m.job_node_s
    );
    // The reclaimed instances' time ends when they do: nothing paid past the offer, but what
    // the agents and dtd take to notice (a pass, a listing).
    let offered = trace["ideal_node_s"].as_f64().unwrap_or_default();
    assert!(
        paid <= offered + 30.0,
        "paid {paid} of {offered} offered: {g}"
    );
}

/// Under `generation` a warned leave restarts every node: the ledger counts the restart as the
/// change's pause, not training, so its training stays within 10 % of the job's own count
/// (the old processes' last steps after the change began once counted the whole restart as
/// training, 18 to 24 node-seconds a change at 3 to 4 nodes: 4.8 % over a replayed hour).
#[test]
fn a_short_trace_replayed_under_generation_counts_the_restart_as_paused() {
    let _turn = STORIES.enter();
    let trace = serde_json::json!({
        "nodes": 3, "speed": 60.0, "warning_s": 3.0, "prepare_s": 0.0, "duration_s": 60.0,
        "events": [
            {"at": 0.0, "kind": "arrive", "slot": 0},
            {"at": 0.0, "kind": "arrive", "slot": 1},
            {"at": 0.0, "kind": "arrive", "slot": 2},
            {"at": 30.0, "kind": "warn", "slot": 2, "gone": 33.0},
        ],
        "ideal_node_s": 60.0 + 60.0 + 33.0,
        "forced_prepare_node_s": 0.0,
    });
    let m = replay(&trace, "generation");
    print(&trace, "generation", &m);
    let g = &m.goodput;
    let training = bucket(g, "training");
    let ratio = training / m.job_node_s.max(1e-9);
    assert!(
        (0.9..=1.1).contains(&ratio),
        "the ledger's training {training:.1} against the job's count {:.1}: {g}",
        m.job_node_s
    );
    let changes = g["changes"].as_array().expect("changes");
    let leave = (changes.iter())
        .find(|c| c["what"].as_str().is_some_and(|w| w.contains("left")))
        .unwrap_or_else(|| panic!("the leave's change: {g}"));
    assert!(
        leave["paused_node_seconds"].as_f64().unwrap_or(0.0) > 2.0 * 2.0,
        "the two that stay were paused while they restarted: {leave}"
    );
}
