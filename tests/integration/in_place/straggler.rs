//! A straggler, end to end, at the defaults a user gets (`job.stragglers` unset: under
//! `in_place` a straggler is drained after 50 steps above 1.3 x the others' median): three
//! loopback nodes train `examples/in_place_job.py` (a matrix product per step stands in for a
//! model's forward pass, timed by `session.compute()`); one node's training process is put in a
//! CPU cgroup limited to a twentieth of a core, as a slow GPU would be. The job slows to its pace;
//! its agent's reports show it; `dtd` journals it, drains it and terminates it; the two others
//! train on in the same processes at their old pace or better.

use std::time::{Duration, Instant};

use super::{processes, quorum, wait_quorum, Lighthouse};
use crate::support::{self, free_port, wait_for, wait_until};
use crate::torchrun::{figure, Script, Story, PHASE, STORIES};

/// The documented rule: `job.stragglers.steps`' default.
const STEPS: u64 = dt::config::Stragglers::STEPS;

/// What the default rule may take beyond its steps: the median of a node's last 10 steps turns
/// after 5 slow ones, its figure reaches `dtd` at the agent's next heartbeat (2 s) after
/// `dt_torch`'s next write (1 s), and this test reads the journal between its own calls of
/// `dtctl`. 6 to 26 steps in six runs, quiet and busy (BENCHMARKS.md).
const REPORT_SLACK: u64 = 50;

fn script() -> Script {
    Script {
        files: &["examples/in_place_job.py"],
        args: "--dir, {efs}, --steps, '100000', --step-sleep, '0.05', --compute-load, '600', \
               --checkpoint-every, '100', --stop-timeout, '30'"
            .into(),
    }
}

/// A CPU limit on processes: cgroup v1's `cpu` controller, or v2's `cpu.max`.
struct CpuLimit(std::path::PathBuf);

impl CpuLimit {
    /// `share` of one core for `pids` (every thread of each).
    fn new(pids: &[i32], share: f64) -> CpuLimit {
        let name = format!("dt-straggler-{}", std::process::id());
        let (v1, v2) = (
            std::path::Path::new("/sys/fs/cgroup/cpu"),
            std::path::Path::new("/sys/fs/cgroup"),
        );
        // A short period: the node's work per step is a few milliseconds between sleeps, which a
        // 100 ms period's quota would let run unthrottled.
        let period = 20_000;
        let quota = (f64::from(period) * share) as u64;
        let dir = if v1.join("cpu.cfs_quota_us").exists() {
            let dir = v1.join(&name);
            std::fs::create_dir_all(&dir).expect("a cgroup v1 cpu group (run as root)");
            std::fs::write(dir.join("cpu.cfs_period_us"), period.to_string()).unwrap();
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).unwrap();
            dir
        } else if v2.join("cgroup.controllers").exists() {
            let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+cpu");
            let dir = v2.join(&name);
            std::fs::create_dir_all(&dir).expect("a cgroup v2 group (run as root)");
            std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))
                .expect("cgroup v2's cpu controller");
            dir
        } else {
            panic!("no cgroup cpu controller at /sys/fs/cgroup/cpu or /sys/fs/cgroup (v2)");
        };
        for pid in pids {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        }
        CpuLimit(dir)
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        // Empty once the processes in it are gone (the drained node's are killed).
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The job's steps per second over `window`, from its progress file.
fn rate(s: &Story, window: Duration) -> f64 {
    let step = || quorum(s).map_or(0, |q| q.2);
    let (first, t) = (step(), Instant::now());
    std::thread::sleep(window);
    (step() - first) as f64 / t.elapsed().as_secs_f64()
}

#[test]
fn a_node_slowed_by_a_cpu_limit_is_found_within_the_rules_steps_drained_and_the_pace_comes_back() {
    let _turn = STORIES.enter();
    let venv = support::torch_venv();
    let port = free_port();
    let _lighthouse = Lighthouse(format!("bind=127.0.0.1:{port}"));
    let yaml =
        format!("    strategy: in_place\n    in_place: {{ lighthouse: '127.0.0.100:{port}' }}\n");
    let s = Story::with(&venv, &script(), &yaml);
    let a = s.node("127.0.0.2", false);
    let b = s.node("127.0.0.3", false);
    let c = s.node("127.0.0.4", false);
    let (q3, _) = wait_quorum(&s, 3, 0, "a quorum of 3 training");
    let (pa, pb) = (processes(&s, &a), processes(&s, &b));
    let before = rate(&s, Duration::from_secs(10));

    let workers: Vec<i32> = processes(&s, &c).into_iter().skip(1).collect();
    assert!(!workers.is_empty(), "c's training processes");
    let limit = CpuLimit::new(&workers, 0.05);
    let slowed_at = quorum(&s).map_or(0, |q| q.2);
    let slowed = rate(&s, Duration::from_secs(5));
    // What the last look saw, for the message on a timeout: c's row in `dtctl status`.
    let found = wait_for(
        "c journaled a straggler",
        PHASE,
        || {
            let e = s.c.journal_of(&c.id);
            let found = e.iter().any(|e| e["kind"] == "straggler");
            let row = support::stdout(&s.c.dtctl(&["status"]));
            let row = row
                .lines()
                .find(|l| l.contains(c.ip))
                .unwrap_or("")
                .to_string();
            let row = format!("{row} / {}", s.launcher(c.ip));
            (found.then(|| quorum(&s).map_or(0, |q| q.2)), row)
        },
        |(step, _)| step.is_some(),
    );
    let found = found.0.unwrap_or(u64::MAX) - slowed_at;
    figure(
        "in_place",
        "straggler",
        "steps from the slowdown to found",
        found as f64,
    );
    assert!(
        found <= STEPS + REPORT_SLACK,
        "found {found} steps after the slowdown"
    );
    let journal = s.c.journal_of(&c.id);
    let said = journal.iter().find(|e| e["kind"] == "straggler");
    let said = said.and_then(|e| e["message"].as_str()).unwrap_or_default();
    assert!(
        said.contains("job.stragglers: above 1.3 x for 50 steps"),
        "{said}"
    );
    let queued = journal.iter().filter(|e| e["kind"] == "removal_queued");
    assert_eq!(
        queued.filter(|e| e["cause"] == "straggler").count(),
        1,
        "{journal:?}"
    );

    wait_quorum(&s, 2, q3, "a quorum of 2 without the straggler");
    let after = rate(&s, Duration::from_secs(10));
    figure("in_place", "straggler", "steps per second before", before);
    figure("in_place", "straggler", "steps per second slowed", slowed);
    figure("in_place", "straggler", "steps per second after", after);
    eprintln!("steps/s: {before:.2} before, {slowed:.2} slowed, {after:.2} after; found {found} steps after");
    assert!(
        slowed < before * 0.9,
        "the limit slowed the job: {slowed:.2} vs {before:.2}"
    );
    assert!(
        after >= before * 0.9,
        "the pace came back: {after:.2} vs {before:.2}"
    );
    assert_eq!(
        (processes(&s, &a), processes(&s, &b)),
        (pa, pb),
        "the others' processes kept"
    );
    wait_until("the straggler terminated", PHASE, || {
        s.c.state_of(&c.id) == "terminated"
    });
    let explain = support::stdout(&s.c.dtctl(&["explain", &c.id]));
    assert!(explain.contains("job.stragglers"), "{explain}");
    drop((a, b, c, limit));
}
