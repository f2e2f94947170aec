//! `dtd agent`'s launcher supervision, the real binary, with a small shell script as the
//! launcher (the command `job.launcher.torchrun` names; what it runs is the user's): a plan a
//! worker wrote is not followed, an older plan is a replay, a failing launcher is started again
//! with a doubling backoff, and one that ignores the stop signal is killed after the grace with
//! the processes it started in sessions of their own. The real torchrun is in `torchrun.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::agent::process_gone;
use crate::support::imds::ImdsStandIn;
use crate::support::wait_until;

const IP: &str = "10.0.4.7";
const ID: &str = "i-0launchertest0001";
const WAIT: Duration = Duration::from_secs(20);

struct Node {
    dir: tempfile::TempDir,
    _imds: ImdsStandIn,
    agent: Child,
}

impl Node {
    /// An agent whose launcher is the shell script `body` (its argv is appended to `argv.log`).
    fn start(body: &str) -> Node {
        Node::start_with(body, "")
    }

    /// As `start`, with more of `job.launcher` (lines indented four spaces).
    fn start_with(body: &str, launcher_yaml: &str) -> Node {
        Node::start_as(body, launcher_yaml, None)
    }

    /// As `start_with`, with `user` as its `job.launcher.user` line (`None`: the tests' job user).
    fn start_as(body: &str, launcher_yaml: &str, user: Option<&str>) -> Node {
        let dir = tempfile::tempdir().unwrap();
        crate::support::open_to_job(dir.path());
        let efs = dir.path().join("efs");
        std::fs::create_dir(&efs).unwrap();
        // The job's user writes in the shared directory (through the access point, on AWS).
        crate::support::give_to_job(&efs);
        let launcher = dir.path().join("launcher.sh");
        let log = dir.path().join("argv.log");
        std::fs::write(&log, "").unwrap();
        crate::support::give_to_job(&log);
        let text = format!("#!/bin/sh\necho \"$@\" >> {}\n{body}\n", log.display());
        std::fs::write(&launcher, text).unwrap();
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
        let prepare = dir.path().join("prepare.sh");
        std::fs::write(&prepare, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&prepare, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (uid, gid) = crate::support::job_user();
        let user = match user {
            Some(line) => line.to_string(),
            None => format!("    user: {{ uid: {uid}, gid: {gid} }}\n"),
        };
        let config = format!(
            "cluster: itest\nworkers: {{ launch_template: lt-0abc, max: 4 }}\nshared_dir: {}\n\
             agent: {{ prepare_data: {}, imds_interval: 100ms }}\n\
             job:\n  launcher:\n    torchrun: [{}]\n    script: [/train.py]\n{user}    \
             stop: {{ grace: 1s }}\n    backoff: 1s\n{launcher_yaml}",
            efs.display(),
            prepare.display(),
            launcher.display()
        );
        std::fs::write(dir.path().join("dtd.yaml"), config).unwrap();
        let imds = ImdsStandIn::with_identity(IP, ID);
        let agent = Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["agent", "--config"])
            .arg(dir.path().join("dtd.yaml"))
            .arg("--key-file")
            .arg(dir.path().join("agent.key"))
            .envs(imds.env())
            .envs(crate::agent::no_ec2())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("agent.log")).unwrap())
            .spawn()
            .expect("starting dtd agent");
        Node {
            dir,
            _imds: imds,
            agent,
        }
    }

    fn efs(&self) -> PathBuf {
        self.dir.path().join("efs")
    }

    /// dtd's plan for `generation`, listing `hosts`.
    fn plan(&self, generation: u64, hosts: &[&str]) {
        self.plan_as(generation, hosts, None);
    }

    /// The plan, put in place whole and already owned by `uid` (a worker's user code), so the
    /// agent never sees it as anyone else's.
    fn plan_as(&self, generation: u64, hosts: &[&str], uid: Option<u32>) {
        let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
        let body = format!(
            "{{\"generation\":{generation},\"hosts\":[{}]}}\n",
            hosts.join(",")
        );
        let plan = self.efs().join("launch_plan");
        dt::fsutil::write_atomic_owned(&plan, body.as_bytes(), uid).unwrap();
    }

    /// The agent's launcher report, as it keeps it on its own disk and sends it to dtd.
    fn report(&self) -> Value {
        let own = self.dir.path().join("reports").join(ID);
        let body = std::fs::read(own.join(format!("launcher_{IP}"))).unwrap_or_default();
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    }

    fn wait_report(&self, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, WAIT, || f(&self.report()));
        self.report()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    fn starts(&self) -> usize {
        self.argv().lines().count()
    }

    fn argv(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("argv.log")).unwrap_or_default()
    }

    /// The argv of the launcher's `n`th start (from 0), once it wrote it: the agent reports a
    /// run as soon as it spawned the launcher, which may not have run its first line yet.
    fn argv_line(&self, n: usize) -> String {
        let what = format!("start {n}'s argv in argv.log");
        wait_until(&what, WAIT, || self.argv().lines().nth(n).is_some());
        self.argv().lines().nth(n).unwrap_or_default().to_string()
    }

    /// Lines in a file the launcher wrote in the shared directory.
    fn lines(&self, name: &str) -> usize {
        let text = std::fs::read_to_string(self.efs().join(name)).unwrap_or_default();
        text.lines().count()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- agent log ----\n{}", self.log());
        }
        // SIGTERM first: the agent stops its launcher and what it started (workers in sessions
        // of their own included), which a SIGKILL would leave running after the test.
        crate::support::signal(self.agent.id() as i32, "TERM");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while matches!(self.agent.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}

#[test]
fn a_launch_plan_a_worker_wrote_is_not_followed_until_dtd_writes_one() {
    let n = Node::start("exec sleep 60");
    n.wait_report("the idle report", |r| r["state"] == "idle");
    // A worker's user code (another uid, as the workers' access point makes every worker file)
    // places a plan listing this node.
    n.plan_as(4, &[IP], Some(65534));
    wait_until("the refusal in the agent's log", WAIT, || {
        n.log().contains("is owned by uid 65534")
    });
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(n.report()["state"], "idle", "{}", n.log());
    assert_eq!(n.starts(), 0);
    n.plan(4, &[IP]);
    let r = n.wait_report("running", |r| r["state"] == "running");
    assert_eq!(r["generation"], 4);
    assert_eq!(r["rdzv_id"], "itest-g4");
}

#[test]
fn an_older_plan_is_a_replay_and_is_ignored() {
    let n = Node::start("exec sleep 60");
    n.plan(5, &[IP]);
    let pid = n.wait_report("running", |r| r["state"] == "running")["pid"].clone();
    n.plan(3, &["10.0.4.8", IP]);
    wait_until("the replay warned about", WAIT, || {
        n.log().contains("ignoring a launch plan of generation 3")
    });
    let r = n.report();
    assert_eq!(
        (
            r["state"].clone(),
            r["pid"].clone(),
            r["generation"].clone()
        ),
        ("running".into(), pid, 5.into())
    );
    n.argv_line(0);
    assert_eq!(n.starts(), 1);
}

#[test]
fn a_failing_launcher_is_started_again_with_a_doubling_backoff_and_shown() {
    let n = Node::start("echo 'CUDA error: out of memory' >&2\nexit 1");
    n.plan(2, &["10.0.4.8", IP]);
    let r = n.wait_report("a second failure", |r| {
        r["state"] == "failed" && r["restarts"] == 1
    });
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["reason"], "exit code 1; started again in 2s");
    assert_eq!(
        r["output_tail"].as_array().unwrap().last().unwrap(),
        "CUDA error: out of memory"
    );
    let first = n.argv_line(0);
    assert_eq!(
        first,
        "--nnodes=2 --nproc-per-node=gpu --rdzv-backend=c10d --rdzv-endpoint=10.0.4.8:29400 \
         --rdzv-id=itest-g2 --rdzv-conf=is_host=false --local-addr=10.0.4.7 --max-restarts=0 /train.py"
    );
    // A new generation starts at once, whatever the backoff of the old one.
    n.plan(3, &[IP]);
    n.wait_report("started for generation 3", |r| r["generation"] == 3);
}

/// A node whose launcher starts a worker in a session of its own, as torchrun does, then runs
/// `then` (shell); once it runs: the node, the launcher's pid and the worker's.
fn with_session_worker(then: &str) -> (Node, i32, i32) {
    let pidfile = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    std::fs::remove_file(&pidfile).unwrap();
    let body = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 300' &\n{then}",
        pidfile.display()
    );
    let n = Node::start(&body);
    n.plan(1, &[IP]);
    let r = n.wait_report("running", |r| r["state"] == "running");
    let launcher = r["pid"].as_i64().unwrap() as i32;
    // `>` creates the file before echo writes to it: wait for the whole line.
    wait_until("the worker's pid", WAIT, || {
        std::fs::read_to_string(&pidfile).is_ok_and(|t| t.ends_with('\n'))
    });
    let worker = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (n, launcher, worker)
}

#[test]
fn a_launcher_that_ignores_the_stop_signal_is_killed_after_the_grace_with_what_it_started() {
    let (n, launcher, worker) = with_session_worker("trap '' TERM\nwhile :; do sleep 1; done");
    n.plan(2, &["10.0.4.8"]);
    let r = n.wait_report("stopped", |r| r["state"] == "stopped");
    assert_eq!(r["reason"], "the launch plan no longer lists this node");
    assert_eq!(r["signal"], 9, "SIGKILL after the 1 s grace: {r}");
    assert!(process_gone(launcher), "the launcher is gone");
    assert!(
        process_gone(worker),
        "its worker in another session is gone too"
    );
    assert!(n.log().contains("outlived its grace"), "{}", n.log());
}

#[test]
fn stopping_the_agent_stops_its_launcher_and_what_it_started() {
    let (mut n, launcher, worker) = with_session_worker("wait");
    // systemctl stop dtd: SIGTERM to the agent.
    crate::support::signal(n.agent.id() as i32, "TERM");
    wait_until("the agent to exit", WAIT, || {
        n.agent.try_wait().unwrap().is_some()
    });
    wait_until("the launcher and its worker gone", WAIT, || {
        process_gone(launcher) && process_gone(worker)
    });
}

#[test]
fn under_the_elastic_strategy_a_run_outlives_joins_and_a_leave_ends_only_its_workers() {
    // Like torchrun: workers in sessions of their own, started again when they exit.
    let body = "cd \"$DT_SHARED_DIR\"\nwhile :; do\n  setsid sh -c 'trap \"echo kicked >> kicked.log; exit 75\" TERM; echo $$ >> workers.log; while :; do sleep 0.1; done' &\n  wait\ndone";
    let n = Node::start_with(
        body,
        "    strategy: elastic\n    elastic: { max_nodes: 4, last_call: 2s }\n",
    );
    n.plan(1, &[IP, "10.0.4.8"]);
    let r = n.wait_report("running", |r| r["state"] == "running");
    let pid = r["pid"].clone();
    assert_eq!(r["rdzv_id"], "itest-e10-0-4-7");
    assert_eq!(
        n.argv_line(0),
        "--nnodes=1:4 --nproc-per-node=gpu --rdzv-backend=c10d --rdzv-endpoint=10.0.4.7:29400 \
         --rdzv-id=itest-e10-0-4-7 --rdzv-conf=is_host=true,last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=5 \
         --local-addr=10.0.4.7 --max-restarts=1000 /train.py"
    );
    wait_until("the first worker", WAIT, || n.lines("workers.log") == 1);

    // A join: the run follows the new generation; nothing is signalled (torchrun's own
    // rendezvous sees the new node waiting).
    n.plan(2, &[IP, "10.0.4.8", "10.0.4.9"]);
    let r = n.wait_report("following generation 2", |r| r["generation"] == 2);
    assert_eq!(
        (r["state"].clone(), r["pid"].clone()),
        ("running".into(), pid.clone())
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!((n.lines("kicked.log"), n.starts()), (0, 1));

    // A leave: the workers get the stop signal, torchrun (the launcher) does not.
    n.plan(3, &[IP, "10.0.4.9"]);
    let r = n.wait_report("following generation 3", |r| r["generation"] == 3);
    assert_eq!(r["pid"], pid, "the launcher itself was not restarted");
    assert!(
        r["reason"].as_str().unwrap().contains("10.0.4.8 left"),
        "{r}"
    );
    wait_until("the worker kicked and started again", WAIT, || {
        n.lines("kicked.log") == 1 && n.lines("workers.log") == 2
    });
    assert_eq!(n.starts(), 1);

    // A new store holder: a new rendezvous, so the launcher starts again.
    n.plan(4, &["10.0.4.9", IP]);
    let r = n.wait_report("a new run for generation 4", |r| {
        r["state"] == "running" && r["generation"] == 4 && r["pid"] != pid
    });
    assert_eq!(r["rdzv_id"], "itest-e10-0-4-9");
    let second = n.argv_line(1);
    assert!(
        second.contains("--rdzv-endpoint=10.0.4.9:29400")
            && second.contains("--rdzv-conf=is_host=false,"),
        "{second}"
    );
    assert!(process_gone(pid.as_i64().unwrap() as i32));
}

/// A process's `Uid:`, `Gid:` and `Groups:` lines from /proc, as the kernel holds them.
fn credentials(pid: i32) -> (String, String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = |key: &str| {
        (status.lines())
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    (line("Uid:"), line("Gid:"), line("Groups:"))
}

/// Issue 29, item 1: torchrun and everything it starts run as `job.launcher.user` (real,
/// effective, saved and file-system ids alike), with no supplementary groups, though the agent
/// runs as root (in CI). An agent run by a user runs the job as that user and keeps its groups.
#[test]
fn the_launcher_and_what_it_starts_run_as_the_jobs_user_without_root_or_its_groups() {
    let n = Node::start("sleep 60 &\nexec sleep 61");
    n.plan(1, &[IP]);
    let r = n.wait_report("running", |r| r["state"] == "running");
    let launcher = r["pid"].as_i64().expect("the launcher's pid") as i32;
    wait_until("the launcher's child", WAIT, || {
        !crate::support::tree(launcher).is_empty()
    });
    let (uid, gid) = crate::support::job_user();
    let groups = match nix::unistd::geteuid().is_root() {
        true => String::new(),
        false => {
            let mine = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = mine
                .lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .unwrap();
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        }
    };
    let procs: Vec<i32> = std::iter::once(launcher)
        .chain(crate::support::tree(launcher))
        .collect();
    assert_eq!(procs.len(), 2, "{procs:?}");
    for pid in procs {
        let ids = |n: u32| format!("{n} {n} {n} {n}");
        assert_eq!(
            credentials(pid),
            (ids(uid), ids(gid), groups.clone()),
            "process {pid}"
        );
    }
    let agent = credentials(n.agent.id() as i32).0;
    let me = nix::unistd::geteuid().as_raw();
    assert!(agent.starts_with(&me.to_string()), "{agent}");
}

/// Root is refused as the job's user: named in the config, the agent does not start; left to
/// default with the agent running as root (CI), the launcher is not started and says why.
#[test]
fn the_job_is_never_started_as_root() {
    let mut named = Node::start_as("exec sleep 60", "", Some("    user: 0\n"));
    let status = named.agent.wait().expect("the agent exits");
    assert!(!status.success());
    let log = named.log();
    assert!(
        log.contains("the job is user code and never runs as root"),
        "{log}"
    );
    if !nix::unistd::geteuid().is_root() {
        // An agent run by a user starts the job as that user (checked above), never as root.
        return;
    }
    let n = Node::start_as("exec sleep 60", "", Some(""));
    n.plan(1, &[IP]);
    let r = n.wait_report("the refusal", |r| r["state"] == "failed");
    let reason = r["reason"].as_str().unwrap_or("");
    assert!(reason.contains("user code never runs as root"), "{r}");
    assert_eq!(n.starts(), 0, "nothing ran");
}
