//! An unchanged torchrun script is first-class: PyTorch's own DDP tutorial
//! (`tests/fixtures/ddp_tutorial/multinode.py`: no dt_torch, no ack, no stop handling; CPU
//! lines only changed) under both existing strategies, with `job.ack.by: launcher` (the agents'
//! launcher reports are the acknowledgement) and `job.launcher.workdir` (where its relative
//! `snapshot.pt` goes). A node joins, one leaves by its elastic tag and is terminated within
//! seconds of its launcher stopping (not at the ten-minute ack timeout); `dtctl status`,
//! `explain`, `scale --wait` and the GPU-time totals say the joined workers trained.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, wait_until};
use crate::torchrun::{Script, Story, PHASE, STORIES};

fn tutorial() -> Script {
    Script {
        files: &[
            "tests/fixtures/ddp_tutorial/multinode.py",
            "tests/fixtures/ddp_tutorial/datautils.py",
        ],
        // 1,200 epochs of 2,048 samples at about 50 ms each: the story's join and leave come
        // in its first half, with the restarts they cost.
        args: "'1200', '1', --batch_size, '32'".into(),
    }
}

/// The story's config with the strategy, a workdir the job's user owns, and the acknowledgement
/// by the launchers (the ack timeout raised to ten minutes: it must not be what lets a node go).
fn story(strategy: &str) -> (Story, std::path::PathBuf) {
    let venv = support::torch_venv();
    let mut s = Story::with(&venv, &tutorial(), &format!("    strategy: {strategy}\n"));
    let workdir = s.c.dir.path().join("work");
    std::fs::create_dir(&workdir).unwrap();
    let (uid, gid) = support::job_user();
    std::os::unix::fs::chown(&workdir, Some(uid), Some(gid)).unwrap();
    let text = std::fs::read_to_string(s.c.config_path()).unwrap();
    let text = text
        .replace(
            "  ack: { timeout: 3m }",
            "  ack: { by: launcher, timeout: 10m }",
        )
        .replace(
            &format!("    strategy: {strategy}\n"),
            &format!(
                "    strategy: {strategy}\n    workdir: {}\n",
                workdir.display()
            ),
        );
    s.c.write_config(&text);
    s.c.kill_dtd();
    s.c.start_dtd();
    (s, workdir)
}

/// Every joined worker ADDED and the generation acknowledged, as `dtctl status` shows it.
fn all_in(s: &Story, n: usize) -> bool {
    let status: Value =
        serde_json::from_str(&support::stdout(&s.c.dtctl(&["status", "-o", "json"])))
            .unwrap_or(Value::Null);
    let added = (status["workers"].as_array().into_iter().flatten())
        .filter(|w| w["status"] == "ADDED")
        .count();
    added == n && status["acked_generation"] == status["generation"]
}

fn run(strategy: &str) {
    let _turn = STORIES.enter();
    let (s, workdir) = story(strategy);
    let a = s.node("127.0.0.2", false);
    let b = s.node("127.0.0.3", false);
    wait_until(
        "two nodes in, acknowledged by their launchers",
        PHASE,
        || all_in(&s, 2),
    );
    wait_until("the tutorial's snapshot in the workdir", PHASE, || {
        workdir.join("snapshot.pt").exists()
    });

    let c = s.node("127.0.0.4", false);
    wait_until("three nodes in, acknowledged", PHASE, || all_in(&s, 3));
    let scale =
        s.c.dtctl(&["scale", "--replicas", "3", "--wait", "--timeout", "30s"]);
    assert!(
        scale.status.success()
            && support::stdout(&scale).contains("done: the job trains on 3 workers"),
        "{}{}",
        support::stdout(&scale),
        support::stderr(&scale)
    );
    let explain = support::stdout(&s.c.dtctl(&["explain", &c.id]));
    assert!(explain.contains("join_acknowledged"), "{explain}");

    // a leaves: terminated once its launcher stopped and the others run the new generation.
    let t = Instant::now();
    s.c.delete_elastic_tag(&a.id);
    wait_until("the leaving node terminated", PHASE, || {
        s.c.state_of(&a.id) == "terminated"
    });
    let took = t.elapsed();
    eprintln!(
        "FIGURE unchanged script ({strategy}): delete-tags -> terminated: {:.1}s",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(60), "terminated after {took:?}");
    assert_eq!(s.c.events_of("ack_timeout", &a.id), 0);
    assert_eq!(s.c.events_of("acknowledged", &a.id), 1);

    wait_until("job_finished journaled", Duration::from_secs(400), || {
        s.c.journal().iter().any(|e| e["kind"] == "job_finished")
    });
    assert!(
        all_in(&s, 2),
        "{}",
        support::stdout(&s.c.dtctl(&["status"]))
    );
    let status: Value =
        serde_json::from_str(&support::stdout(&s.c.dtctl(&["status", "-o", "json"]))).unwrap();
    let trained = status["totals"]["gpu_seconds_training"]
        .as_f64()
        .unwrap_or(0.0);
    let idle = status["totals"]["gpu_seconds_idle"]
        .as_f64()
        .unwrap_or(f64::MAX);
    assert!(
        trained > 10.0 * idle.max(1.0),
        "trained {trained} s, idle {idle} s"
    );
    drop((a, b, c));
}

#[test]
fn the_ddp_tutorial_unchanged_trains_through_a_join_and_a_leave_under_generation() {
    run("generation");
}

#[test]
fn the_ddp_tutorial_unchanged_trains_through_a_join_and_a_leave_under_elastic() {
    run("elastic");
}
