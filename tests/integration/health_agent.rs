//! The health check under the real `dtd agent` (issue 12): the default check,
//! templates/health/gpu_health.py, on a worker with no GPUs, where STAND-INS for `nvidia-smi` and
//! `dmesg` (tests/standins/bin, first on the agent's PATH) describe the node from a JSON file the
//! test rewrites: 8 GPUs, 7 of 8, an Xid 79 in the stand-in kernel log, an nvidia-smi that hangs.
//! The instance metadata is the IMDS stand-in (`support::imds`), which also says the instance
//! type. What is checked is what the master sees: `health_<ip>` and the success marker.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::agent::{process_gone, tail, Worker, ID, RECORD_RUN, WAIT};
use crate::support::{install, repo, wait_until};

const XID_79: &str = "[ 8123.456789] NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python3, \
                      GPU has fallen off the bus.";

/// Runs close enough together for a test, with room for a loaded machine within each.
const FAST: &[(&str, &str)] = &[("interval", "5s"), ("timeout", "4s")];

struct Node {
    worker: Worker,
    description: PathBuf,
}

impl Node {
    /// A p4d.24xlarge (8 GPUs) whose agent runs the default check with `args`, and `keys` of
    /// `agent.health` (`interval`, `timeout`).
    fn new(node: Value, args: &[&str], keys: &[(&str, &str)]) -> Node {
        let worker = Worker::new(RECORD_RUN);
        worker.imds.set("instance-type", "p4d.24xlarge");
        let check = install("templates/health/gpu_health.py", worker.dir.path(), 0o755);
        let mut command = vec![check.display().to_string()];
        command.extend(args.iter().map(|a| a.to_string()));
        // A JSON list of strings is a YAML flow sequence.
        let mut config = std::fs::read_to_string(worker.config()).unwrap();
        config.push_str(&format!("  health:\n    command: {}\n", json!(command)));
        for (key, value) in keys {
            config.push_str(&format!("    {key}: {value}\n"));
        }
        std::fs::write(worker.config(), config).unwrap();
        let description = worker.dir.path().join("node.json");
        let n = Node {
            worker,
            description,
        };
        n.describe(node);
        n
    }

    /// What the stand-ins say from now on.
    fn describe(&self, node: Value) {
        let tmp = self.description.with_extension("tmp");
        std::fs::write(&tmp, node.to_string()).unwrap();
        std::fs::rename(tmp, &self.description).unwrap();
    }

    fn start(&mut self) {
        let path = format!(
            "{}:{}",
            repo().join("tests/standins/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let env = [
            ("PATH", path),
            ("DT_STANDIN_NODE", self.description.display().to_string()),
        ];
        self.worker.start_with(&[], &env);
    }

    fn health_path(&self) -> PathBuf {
        self.worker.marker("health")
    }

    fn health(&self) -> Option<Value> {
        let body = std::fs::read(self.health_path()).ok()?;
        serde_json::from_slice(&body).ok()
    }

    /// Polls `health_<ip>` until it says what `wanted` accepts, and returns it.
    fn wait_health(&self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, WAIT, || self.health().is_some_and(|v| wanted(&v)));
        self.health().unwrap()
    }

    fn success(&self) -> bool {
        self.worker.marker("prepare_data_success").exists()
    }
}

fn reason(v: &Value) -> &str {
    v["reason"].as_str().unwrap_or_default()
}

#[test]
fn a_healthy_node_joins_and_reports_ok_with_its_instance_type() {
    let mut n = Node::new(json!({"gpus": 8}), &[], &[]);
    n.start();
    let success = n.worker.wait_json("prepare_data_success");
    assert_eq!(success["instance_id"], ID);
    let v = n.wait_health("health_<ip>", |_| true);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["gpus_lost"], false);
    assert_eq!(reason(&v), "ok");
    assert_eq!(v["instance_id"], ID);
    assert!(v["when"].as_str().unwrap().ends_with('Z'), "{v}");
    let lines = tail(&v);
    // DT_INSTANCE_TYPE came from the metadata: the check knew to expect 8.
    assert!(
        lines.contains(&"gpu count: 8 of 8 (p4d.24xlarge)".to_string()),
        "{lines:?}"
    );
    n.worker.wait_log("health check: passed");
}

#[test]
fn seven_of_eight_gpus_never_joins_even_once_healthy_again() {
    let mut n = Node::new(json!({"gpus": 7}), &[], FAST);
    n.start();
    let v = n.wait_health("an unhealthy report", |v| v["ok"] == false);
    assert_eq!(v["gpus_lost"], true, "{v}");
    assert_eq!(reason(&v), "7 of 8 GPUs visible (p4d.24xlarge has 8)");
    n.worker.wait_log("no success marker");
    assert!(!n.success());
    assert_eq!(n.worker.runs(), 1);
    // The checks go on and the report follows, but a worker that failed its first check is
    // replaced by the master, not let in late.
    n.describe(json!({"gpus": 8}));
    n.wait_health("a healthy report", |v| v["ok"] == true);
    n.worker.wait_log("health check: passes again");
    assert!(!n.success());
}

#[test]
fn an_xid_79_in_the_kernel_log_is_named_and_the_gpus_are_lost() {
    let log = json!(["[    0.000000] Linux version 6.1.0", XID_79]);
    let mut n = Node::new(json!({"gpus": 8, "kernel_log": log}), &[], &[]);
    n.start();
    let v = n.wait_health("an unhealthy report", |v| v["ok"] == false);
    assert_eq!(v["gpus_lost"], true, "{v}");
    assert_eq!(
        reason(&v),
        "Xid 79 (GPU has fallen off the bus) on PCI:0000:10:1c"
    );
    n.worker.wait_log("no success marker");
    assert!(!n.success());
}

#[test]
fn a_hanging_check_is_killed_with_its_process_group_and_counts_as_failed() {
    // The check's own per-call limit is longer than the agent's: the agent's kill is what ends it.
    let keys = [("interval", "1m"), ("timeout", "2s")];
    let mut n = Node::new(json!({"hang": true}), &["--call-timeout", "60"], &keys);
    n.start();
    let v = n.wait_health("an unhealthy report", |v| v["ok"] == false);
    assert_eq!(reason(&v), "timed out after 2s, killed");
    assert_eq!(v["gpus_lost"], false);
    assert!(!n.success());
    let pids = std::fs::read_to_string(n.description.with_extension("json.pids")).unwrap();
    let (pid, pgid) = pids.split_once(' ').unwrap();
    let (pid, pgid): (i32, i32) = (pid.parse().unwrap(), pgid.trim().parse().unwrap());
    wait_until("the hung stand-in nvidia-smi to be killed", WAIT, || {
        process_gone(pid)
    });
    wait_until("the check's process group to be gone", WAIT, || {
        group_members(pgid).is_empty()
    });
}

#[test]
fn the_check_runs_again_every_interval_and_a_restart_does_not_prepare_again() {
    let mut n = Node::new(json!({"gpus": 8}), &[], FAST);
    n.start();
    n.wait_health("a healthy report", |v| v["ok"] == true);
    // The report is written before prepare-data runs; its marker follows.
    wait_until("the success marker", WAIT, || n.success());
    n.describe(json!({"gpus": 8, "ecc": {"3": 1}}));
    let v = n.wait_health("the next run's report", |v| v["ok"] == false);
    assert_eq!(reason(&v), "GPU 3: 1 uncorrectable ECC error(s)");
    assert_eq!(v["gpus_lost"], false);
    n.worker.wait_log("health check: failed: GPU 3");
    // A joined worker stays joined: what to do about it is the master's call.
    assert!(n.success());
    // One line per change, not per run.
    let first = n.health().unwrap()["when"].clone();
    wait_until("another run", WAIT, || {
        n.health().is_some_and(|v| v["when"] != first)
    });
    assert_eq!(n.worker.log().matches("health check: failed").count(), 1);

    n.worker.kill();
    std::fs::remove_file(n.health_path()).unwrap();
    n.describe(json!({"gpus": 8}));
    n.start();
    n.wait_health("a report after the restart", |v| v["ok"] == true);
    n.worker.wait_log("not running it again");
    assert_eq!(n.worker.runs(), 1, "prepare-data ran again");
}

/// The processes whose process group is `pgid` (zombies count as gone).
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| in_group(*pid, pgid))
        .collect()
}

fn in_group(pid: i32, pgid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
    else {
        return false;
    };
    // After the command's closing parenthesis: state, ppid, pgrp.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
}
