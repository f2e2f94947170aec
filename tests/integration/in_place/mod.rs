//! The in-place strategy with real PyTorch and torchft (`job.launcher.strategy: in_place`): one
//! torchrun per loopback "node", each a torchft replica group; `dtd run` runs torchft's
//! Lighthouse; `examples/in_place_job.py` trains through `dt_torch.InPlace`.
//!
//! One story: two nodes train; a third joins (the others keep their processes and pause at most
//! a step); one leaves by its elastic tag (no step lost, terminated once the quorum trained
//! without it and its launcher stopped); one vanishes (SIGKILL of everything on it: at most the
//! step in flight is lost, the last node trains on in the same processes); `dtd run` is killed
//! -9 and started again (it adopts the Lighthouse: training does not notice); a Spot node joins,
//! takes its warning and trains on until `leave_before_loss` before its loss; the job finishes
//! with the loss curve of a run without any change.

mod lighthouse;
mod straggler;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::agent::process_gone;
use crate::support::{self, free_port, signal, tree, wait_for, wait_until};
use crate::torchrun::{
    figure, single_run, Node, Script, Story, JOIN, LEAVE, PHASE, SPOT, STORIES, VANISH,
};

const STEPS: u64 = 2400;

fn script() -> Script {
    Script {
        files: &["examples/in_place_job.py"],
        args: format!(
            "--dir, {{efs}}, --steps, '{STEPS}', --step-sleep, '0.05', --checkpoint-every, '100', --eval-every, '100', --stop-timeout, '30'"
        ),
    }
}

/// Kills a Lighthouse left behind (a `dtd` killed -9 leaves it for the next to adopt).
pub(crate) struct Lighthouse(pub String);

impl Drop for Lighthouse {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", &self.0])
            .status();
    }
}

/// The quorum the job reports: (quorum id, nodes, step, the last change).
pub(super) fn quorum(s: &Story) -> Option<(u64, u64, u64, Value)> {
    let p = s.progress()?;
    let q = &p["in_place"];
    let last = q["changes"].as_array().and_then(|c| c.last().cloned());
    Some((
        q["quorum"].as_u64()?,
        q["nodes"].as_u64()?,
        p["step"].as_u64()?,
        last.unwrap_or(Value::Null),
    ))
}

/// Waits until a quorum of `nodes` other than `after` trains 10 steps past where it was first
/// seen; returns its id and its last change (the one that formed it).
pub(super) fn wait_quorum(s: &Story, nodes: u64, after: u64, what: &str) -> (u64, Value) {
    let mut first: Option<(u64, u64)> = None;
    let mut probe = || {
        let q = quorum(s)?;
        if q.1 != nodes || q.0 == after {
            return None;
        }
        let (id, step) = *first.get_or_insert((q.0, q.2));
        (id == q.0 && q.2 >= step + 10).then_some((q.0, q.3))
    };
    wait_for(what, PHASE, &mut probe, |q| q.is_some()).unwrap_or_default()
}

/// A node's torchrun and the training processes under it.
pub(super) fn processes(s: &Story, node: &Node) -> Vec<i32> {
    s.processes(node)
}

/// The change that formed a quorum: who moved, and the figures scripts/bench-torchrun prints
/// beside the other strategies' (`t`: when the change began; `kept`: the others' processes).
fn check_change(
    change: &Value,
    moved: (&str, &str),
    max_lost: u64,
    what: &str,
    t: Instant,
    kept: bool,
) {
    let (key, ip) = moved;
    let who: Vec<&str> = (change[key].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(who, [ip], "{change}");
    let lost = change["lost_steps"].as_u64().unwrap_or(u64::MAX);
    assert!(lost <= max_lost, "{lost} steps lost: {change}");
    figure(
        "in_place",
        what,
        "to training again (s)",
        t.elapsed().as_secs_f64(),
    );
    figure(
        "in_place",
        what,
        "the others' processes kept",
        f64::from(u8::from(kept)),
    );
    figure("in_place", what, "steps lost", lost as f64);
    let paused = change["paused_s"].as_f64().unwrap_or(f64::NAN);
    figure("in_place", what, "the others paused (s)", paused);
    assert!(kept, "{what}: the others' processes changed");
}

#[test]
fn in_place_nodes_join_leave_vanish_and_take_a_spot_warning_while_the_others_keep_their_processes()
{
    let _turn = STORIES.enter();
    let venv = support::torch_venv();
    let port = free_port();
    let _lighthouse = Lighthouse(format!("bind=127.0.0.1:{port}"));
    // The nodes dial dtd's front on the "master's" address; torchft's own Lighthouse listens
    // behind it on 127.0.0.1. A job of two when a node vanishes: its one silent member is half
    // of it. `collective_timeout` is left at its default (10 s), so that the vanished node's
    // figure is the one a user gets.
    let yaml = format!(
        "    strategy: in_place\n    in_place: {{ lighthouse: '127.0.0.100:{port}' }}\n    \
         silent_share: 0.5\n"
    );
    let mut s = Story::with(&venv, &script(), &yaml);

    // Two nodes train.
    let a = s.node("127.0.0.2", false);
    let b = s.node("127.0.0.3", false);
    let (q1, _) = wait_quorum(&s, 2, 0, "a quorum of 2 training");
    let (pa, pb) = (processes(&s, &a), processes(&s, &b));
    assert!(pa.len() >= 2 && pb.len() >= 2, "{pa:?} {pb:?}");

    // A third joins: only its processes start; it copies the state from a live peer.
    let c = s.node("127.0.0.4", false);
    let marker = s.c.own_report(&c.id, c.ip, "prepare_data_success");
    wait_until("the new node's marker", PHASE, || marker.exists());
    let t = Instant::now();
    let (q2, change) = wait_quorum(&s, 3, q1, "a quorum of 3 training");
    let kept = (processes(&s, &a), processes(&s, &b)) == (pa.clone(), pb);
    check_change(&change, ("joined", c.ip), 0, JOIN, t, kept);
    let said = s.log(c.ip);
    let first = (said.lines()).find_map(|l| {
        l.split("first step committed ")
            .nth(1)?
            .split('s')
            .next()?
            .parse::<f64>()
            .ok()
    });
    let first = first.unwrap_or_else(|| panic!("no first step in {said}"));
    figure(
        "in_place",
        JOIN,
        "its first step after it was ready (s)",
        first,
    );

    // b leaves by its elastic tag: no step lost; terminated after the job let it go.
    let pc = processes(&s, &c);
    let t = Instant::now();
    s.c.delete_elastic_tag(&b.id);
    let (q3, change) = wait_quorum(&s, 2, q2, "a quorum of 2 after the leave");
    let kept = (processes(&s, &a), processes(&s, &c)) == (pa.clone(), pc);
    check_change(&change, ("left", b.ip), 0, LEAVE, t, kept);
    wait_until("the leaving node's termination journaled", PHASE, || {
        s.event_time("terminated", &b.id).is_some()
    });
    let at = |kind: &str| s.event_time(kind, &b.id).unwrap_or(u64::MAX);
    assert!(
        at("launcher_stopped") <= at("terminated") && at("acknowledged") <= at("terminated"),
        "{:?}",
        s.c.journal_of(&b.id)
    );
    let explain = support::stdout(&s.c.dtctl(&["explain", &b.id]));
    assert!(explain.contains("quorum_changed"), "{explain}");

    // c vanishes: every process on it stopped. At most the step in flight is lost.
    let agent = c.agent.id() as i32;
    let hung: Vec<i32> = std::iter::once(agent).chain(tree(agent)).collect();
    let t = Instant::now();
    for pid in &hung {
        signal(*pid, "STOP");
    }
    let (q4, change) = wait_quorum(&s, 1, q3, "a quorum of 1 after the vanished node");
    check_change(
        &change,
        ("left", c.ip),
        1,
        VANISH,
        t,
        processes(&s, &a) == pa,
    );
    // status.json is dtd's last finished pass: it may be a pass behind the job's own file.
    wait_until("dtctl status showing the quorum without it", PHASE, || {
        let status = support::stdout(&s.c.dtctl(&["status"]));
        status.contains("Quorum:      torchft quorum") && status.contains("127.0.0.4 left")
    });
    wait_until("the hung node out of the job on its silence", PHASE, || {
        !s.c.hosts().contains(&c.ip.to_string())
    });
    s.kept_after_silence(&c);
    let mut c = c;
    s.person_terminates(&mut c, &hung);

    // dtd killed -9 and started again: it adopts the Lighthouse, the quorum goes on unchanged
    // (training pauses while no dtd serves the front: 20 steps take that much longer).
    let mut twenty_steps = |restart: bool| {
        let (step, t) = (quorum(&s).map_or(0, |q| q.2), Instant::now());
        if restart {
            s.c.kill_dtd();
            s.c.start_dtd();
        }
        wait_until("20 more steps", PHASE, || {
            quorum(&s).is_some_and(|q| q.2 >= step + 20)
        });
        t.elapsed().as_secs_f64()
    };
    let before = twenty_steps(false);
    let across = twenty_steps(true);
    figure(
        "in_place",
        "dtd restarted (kill -9)",
        "20 steps before it (s)",
        before,
    );
    figure(
        "in_place",
        "dtd restarted (kill -9)",
        "20 steps across it (s)",
        across,
    );
    s.c.wait_passes(3);
    assert_eq!(
        quorum(&s).map(|q| q.0),
        Some(q4),
        "the quorum did not change"
    );
    let status = support::stdout(&s.c.dtctl(&["status"]));
    assert!(status.contains("adopted"), "{status}");

    // A Spot node joins, then gets its warning, 45 s before AWS takes it (two minutes on the
    // market; shorter here to keep the story short): it trains on until the default
    // `leave_before_loss` (30 s) before the loss, then leaves like a planned leave.
    let d = s.node("127.0.0.5", true);
    let (q5, _) = wait_quorum(&s, 2, q4, "a quorum of 2 with the Spot node");
    let pd = processes(&s, &d);
    let warned_at = std::time::SystemTime::now();
    let deadline = warned_at + Duration::from_secs(45);
    let when = humantime::format_rfc3339_seconds(deadline);
    let warned = Instant::now();
    d.imds.set(
        "spot/instance-action",
        &format!(r#"{{"action":"terminate","time":"{when}"}}"#),
    );
    // The notice's time is in whole seconds: it leaves 14 to 15 s after the warning; looked at
    // a second before the earliest.
    let leaves = deadline - Duration::from_secs(32);
    let until = leaves.duration_since(std::time::SystemTime::now());
    std::thread::sleep(until.unwrap_or_default());
    assert!(
        pd.iter().all(|p| !process_gone(*p)),
        "it left before its time"
    );
    assert_eq!(
        quorum(&s).map(|q| q.0),
        Some(q5),
        "the quorum changed before its time"
    );
    wait_until("the Spot node's processes gone", PHASE, || {
        pd.iter().all(|p| process_gone(*p))
    });
    let gone = warned.elapsed();
    assert!(
        gone < Duration::from_secs(45),
        "gone after {gone:?}, past the loss"
    );
    let epoch = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH);
    let left = s
        .event_time("interrupted", &d.id)
        .expect("interrupted journaled");
    let trained_on =
        Duration::from_millis(left).saturating_sub(epoch(warned_at).unwrap_or_default());
    assert!(
        (Duration::from_secs(13)..Duration::from_secs(30)).contains(&trained_on),
        "left {trained_on:?} after the warning: not 30 s before the loss"
    );
    figure(
        "in_place",
        SPOT,
        "trained on through its warning (s)",
        trained_on.as_secs_f64(),
    );
    let after_leave = gone.saturating_sub(trained_on).as_secs_f64();
    figure(
        "in_place",
        SPOT,
        "its processes gone after its leave (s)",
        after_leave,
    );
    let t = warned + trained_on;
    let (_, change) = wait_quorum(&s, 1, q5, "a quorum of 1 after the Spot warning");
    check_change(&change, ("left", d.ip), 0, SPOT, t, processes(&s, &a) == pa);

    // The job finishes; every point of its loss curve is the one a run without changes draws.
    wait_until("job_finished journaled", Duration::from_secs(400), || {
        s.c.journal().iter().any(|e| e["kind"] == "job_finished")
    });
    let result = read_json(&s.c.efs().join("in_place_job_result.json"));
    assert_eq!(result["steps"].as_u64(), Some(STEPS));
    let single = single_run(
        &venv,
        s.c.dir.path(),
        "in_place_job",
        STEPS,
        &["--eval-every", "100"],
    );
    let (curve, alone) = (&result["curve"], &single["curve"]);
    let points = alone.as_object().map_or(0, |o| o.len());
    assert_eq!(curve.as_object().map(|o| o.len()), Some(points), "{curve}");
    for (step, want) in alone.as_object().into_iter().flatten() {
        let (got, want) = (curve[step].as_f64().unwrap(), want.as_f64().unwrap());
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1e-3),
            "step {step}: loss {got} with changes, {want} without"
        );
    }
    let changed = (s.c.journal().iter())
        .filter(|e| e["kind"] == "quorum_changed")
        .count();
    assert!(changed >= 4, "{changed} quorum changes journaled");
    drop((a, b, c, d));
    s.c.stop_dtd();
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_default()).unwrap_or(Value::Null)
}
