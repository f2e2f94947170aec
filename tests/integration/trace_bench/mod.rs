//! A Spot market replayed against the real `dtd`, its agents, moto and a real PyTorch job
//! (`scripts/bench-trace`): instances arrive when the trace's capacity does (each boots and
//! prepares for the trace's preparing time, compressed), take EC2's two-minute warning (compressed
//! too) before the trace reclaims them, and are then gone: their processes killed and the
//! instance terminated, as AWS would. At the end, `dtd`'s goodput ledger beside the ideal: every
//! node-second the trace offered, training.
//!
//! With the remedies ([`Remedies::On`]), `dtd` also launches a replacement at each warning
//! from a second pool that has capacity (`workers.capacity`, as capacity fallback to another
//! type or On-Demand gives), drains stragglers and hung nodes and replaces them; an agent is
//! started on each instance `dtd` launches, and the trace's arrivals are launched only while
//! the fleet is below the trace's peak (an Auto Scaling group at that desired size would not
//! launch more). Without them, the trace's instances only.
//!
//! `scripts/trace.py events` writes the events; `scripts/bench-trace` runs the ignored
//! `replays_the_trace_in_dt_trace_events` once per strategy and remedies and prints the table.
//! The suite replays short traces of its own, so the replay cannot rot.

mod figures;
mod fleet;
mod remedies;
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::goodput::bucket;
use crate::support;
use crate::torchrun::{install_mode, Story};
use figures::host_files;
use fleet::{recommend_rebalance, warn, Fleet};
use remedies::job;
pub(crate) use remedies::Remedies;

/// The address of the trace's `slot`th instance: 127.0.0.101 and up (dtd's own Lighthouse
/// front is at .100, the tests' first nodes below it).
pub(super) fn ip(slot: u64) -> &'static str {
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
    pub fleet: Fleet,
    /// The host file, sampled: (seconds from the start, its IPs).
    pub hosts: Vec<(f64, Vec<String>)>,
    pub duration: f64,
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

/// Replays `trace` (scripts/trace.py's events) under `strategy`, prints the figures
/// scripts/bench-trace reads (the column `remedies.name(strategy)`) and returns them.
pub(crate) fn replay(trace: &Value, strategy: &str, remedies: Remedies) -> Measured {
    let venv = support::torch_venv();
    let speed = trace["speed"].as_f64().unwrap_or(1.0);
    let (script, mut yaml, lighthouse) = job(strategy, speed);
    // After `job.launcher`'s lines: two spaces in, the job's own keys.
    yaml.push_str(&remedies.job(speed));
    // The event queue the stack makes: AWS sends a rebalance recommendation there too.
    let mut s = Story::with_workers(&venv, &script, &yaml, |c, subnet| {
        c.worker_extra = remedies.workers(subnet);
        let queue = support::create_event_queue(c);
        c.extra = format!("events:\n  queue_url: {queue}\n");
    });
    slow_prepare(&s, trace["prepare_s"].as_f64().unwrap_or(0.0));
    let events = trace["events"].as_array().expect("events").clone();
    let duration = Duration::from_secs_f64(trace["duration_s"].as_f64().expect("duration_s"));
    let nodes = trace["nodes"].as_u64().expect("nodes") as usize;
    let start = Instant::now();
    let done = AtomicBool::new(false);
    let samples = std::env::var_os("DT_TRACE_SAMPLES");
    let (fleet, hosts) = std::thread::scope(|scope| {
        if let Some(path) = &samples {
            scope.spawn(|| sample(&s, Path::new(path), start, &done));
        }
        let hosts = scope.spawn(|| host_files(&s, start, &done));
        let mut fleet = Fleet::new(nodes);
        play(&s, &mut fleet, &events, start, duration);
        done.store(true, Ordering::Relaxed);
        (fleet, hosts.join().expect("the host file's sampler"))
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
    let fleet = fleet.stopped();
    drop(lighthouse);
    let m = Measured {
        goodput,
        steps,
        job_node_s,
        fleet,
        hosts,
        duration: duration.as_secs_f64(),
    };
    figures::print(trace, &remedies.name(strategy), &m);
    m
}

/// The trace's events, each at its time, until `duration`.
fn play(s: &Story, fleet: &mut Fleet, events: &[Value], start: Instant, duration: Duration) {
    // (when, slot): an instance the trace reclaims at that time.
    let mut gone: Vec<(Duration, u64)> = Vec::new();
    let at = |e: &Value, key: &str| Duration::from_secs_f64(e[key].as_f64().unwrap_or(0.0));
    for e in events {
        let when = at(e, "at");
        end_reclaimed(s, fleet, &mut gone, start, when);
        wait_until(s, fleet, start, when);
        let slot = e["slot"].as_u64().expect("slot");
        match e["kind"].as_str() {
            Some("arrive") if fleet.live() < fleet.nodes => {
                let node = s.node(ip(slot), true);
                fleet.seen.insert(node.id.clone());
                fleet.trace.insert(slot, node);
            }
            Some("arrive") => fleet.skipped += 1,
            Some("rebalance") => {
                if let Some(node) = fleet.trace.get(&slot) {
                    recommend_rebalance(s, node);
                    fleet.warned.insert(slot);
                    fleet.hits.push((when.as_secs_f64(), node.ip));
                }
            }
            Some("warn") => {
                let left = at(e, "gone").saturating_sub(start.elapsed());
                if let Some(node) = fleet.trace.get(&slot) {
                    warn(node, left);
                    if fleet.warned.insert(slot) {
                        fleet.hits.push((when.as_secs_f64(), node.ip));
                    }
                }
                gone.push((at(e, "gone"), slot));
            }
            Some("vanish") => gone.push((when, slot)),
            other => panic!("an event of kind {other:?}"),
        }
    }
    end_reclaimed(s, fleet, &mut gone, start, duration);
    wait_until(s, fleet, start, duration);
}

/// Until `when`, following EC2 twice a second (see [`Fleet::follow_ec2`]).
fn wait_until(s: &Story, fleet: &mut Fleet, start: Instant, when: Duration) {
    loop {
        fleet.follow_ec2(s);
        let Some(left) = when.checked_sub(start.elapsed()) else {
            return;
        };
        std::thread::sleep(left.min(Duration::from_millis(500)));
    }
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

/// The instances the trace reclaims before `until`, each at its time: everything on it killed
/// and the instance terminated, with its state-change events, as AWS does.
fn end_reclaimed(
    s: &Story,
    fleet: &mut Fleet,
    gone: &mut Vec<(Duration, u64)>,
    start: Instant,
    until: Duration,
) {
    gone.sort();
    while let Some(&(when, slot)) = gone.first().filter(|(w, _)| *w <= until) {
        gone.remove(0);
        wait_until(s, fleet, start, when);
        if let Some(node) = fleet.trace.remove(&slot) {
            if !fleet.warned.remove(&slot) {
                fleet.hits.push((when.as_secs_f64(), node.ip)); // a vanish: no notice first
            }
            let id = node.id.clone();
            drop(node);
            s.c.aws(&["ec2", "terminate-instances", "--instance-ids", &id]);
            // What EventBridge then delivers on AWS (moto sends none): with the queue, dtd
            // lists EC2 whole once a minute and reads what events name between.
            for state in ["shutting-down", "terminated"] {
                let detail = serde_json::json!({ "instance-id": id, "state": state });
                support::put_ec2_event(&s.c, "EC2 Instance State-change Notification", detail);
            }
        }
    }
}
