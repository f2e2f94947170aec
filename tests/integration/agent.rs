//! `dtd agent`, the real binary, on a "worker" whose instance metadata is a local stand-in
//! (`support::imds::ImdsStandIn`: IMDS cannot run off EC2), with no `dtd` to send its reports
//! to. The prepare-data programs are small shell scripts; what is checked is what the agent said
//! (the copies of its reports it keeps on its own disk, which it sends to `dtd` as they are, and
//! what the master's reader makes of them), the agent's log, processes left (or not) behind, the
//! exit status. That the reports reach `dtd` is the cluster tests' (story.rs, launcher_agent.rs,
//! no_worker_speaks_for_another.rs).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::imds::ImdsStandIn;
use crate::support::{signal, wait_until};
use dt::protocol::interruption::{InterruptionMarker, NoticeKind};
use serde_json::Value;

pub(crate) const IP: &str = "10.0.3.7";
pub(crate) const ID: &str = "i-0agenttest0000001";
const SPOT: &str = "spot/instance-action";
const REBALANCE: &str = "events/recommendations/rebalance";
const LIFECYCLE: &str = "autoscaling/target-lifecycle-state";
const SCHEDULED: &str = "events/maintenance/scheduled";
pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) struct Worker {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) imds: ImdsStandIn,
    agent: Option<Child>,
    starts: usize,
    /// The instance the metadata names now.
    id: String,
}

impl Worker {
    /// A worker whose prepare-data program is `script` (a shell script body).
    pub(crate) fn new(script: &str) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("efs")).unwrap();
        let prog = dir.path().join("prepare.sh");
        std::fs::write(&prog, format!("#!/bin/sh\n{script}")).unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let w = Worker {
            dir,
            imds: ImdsStandIn::with_identity(IP, ID),
            agent: None,
            starts: 0,
            id: ID.to_string(),
        };
        let config = format!(
            "cluster: itest\nworkers: {{ launch_template: lt-0abc, max: 4 }}\nshared_dir: {}\n\
             agent:\n  prepare_data: {}\n  args: [{}]\n  timeout: 5s\n  attempts: 1\n  \
             retry_delay: 100ms\n  imds_interval: 100ms\n",
            w.efs().display(),
            prog.display(),
            w.runs_file().display(),
        );
        std::fs::write(w.config(), config).unwrap();
        w
    }

    /// Sets a key of the config's `agent:` section.
    pub(crate) fn configure(&self, key: &str, value: &str) {
        let text = std::fs::read_to_string(self.config()).unwrap();
        let prefix = format!("  {key}:");
        assert!(text.contains(&prefix), "no agent key {key}");
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with(&prefix) {
                    format!("{prefix} {value}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(self.config(), lines.join("\n") + "\n").unwrap();
    }

    pub(crate) fn efs(&self) -> PathBuf {
        self.dir.path().join("efs")
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.dir.path().join("dtd.yaml")
    }

    /// Scripts append a line here per run (it is their first argument).
    fn runs_file(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    pub(crate) fn runs(&self) -> usize {
        std::fs::read_to_string(self.runs_file())
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn log_path(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!("agent-{n}.log"))
    }

    /// The log of the latest start.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path(self.starts)).unwrap_or_default()
    }

    pub(crate) fn start(&mut self, extra: &[&str]) {
        self.start_with(extra, &[]);
    }

    /// With more in the agent's environment (a `PATH` with stand-ins first).
    pub(crate) fn start_with(&mut self, extra: &[&str], env: &[(&str, String)]) {
        self.starts += 1;
        let log = std::fs::File::create(self.log_path(self.starts)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["agent", "--config"])
            .arg(self.config())
            .arg("--key-file")
            .arg(self.key_file())
            .args(extra)
            .envs(self.imds.env())
            .envs(no_ec2())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting dtd agent");
        self.agent = Some(child);
    }

    /// The agent's signing key, made at its first start.
    pub(crate) fn key_file(&self) -> PathBuf {
        self.dir.path().join("agent.key")
    }

    /// What the master's reader makes of the report `name` the agent said last.
    pub(crate) fn master_reads(&self, name: &str) -> dt::observe::markers::Body {
        let file = format!("{name}_{IP}");
        let n = dt::protocol::markers::MarkerName::parse(&file).expect("a report's name");
        let bytes = std::fs::read(self.marker(name)).expect("the agent's report");
        let read = dt::observe::markers::read::from_bytes(&n, &bytes, None, None);
        read.body.expect("a report the master can read")
    }

    /// The instance the metadata names from now on (the same IP, a new instance).
    pub(crate) fn new_instance(&mut self, id: &str) {
        self.imds.set("instance-id", id);
        self.id = id.to_string();
    }

    pub(crate) fn pid(&self) -> i32 {
        self.agent.as_ref().expect("agent running").id() as i32
    }

    /// SIGKILL, as a crash or a reboot would.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.agent.take().expect("agent running");
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            assert!(start.elapsed() < WAIT, "dtd agent did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The agent's copy of its report `name` (`prepare_data_success`, `health`, …): on its own
    /// disk, beside its key, per instance.
    pub(crate) fn marker(&self, name: &str) -> PathBuf {
        self.own_dir().join(format!("{name}_{IP}"))
    }

    pub(crate) fn own_dir(&self) -> PathBuf {
        self.dir.path().join("reports").join(&self.id)
    }

    pub(crate) fn wait_json(&self, name: &str) -> Value {
        let path = self.marker(name);
        wait_until(&format!("{name} marker"), WAIT, || path.exists());
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    }

    fn interruption(&self) -> InterruptionMarker {
        let path = self.marker("interruption");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    fn wait_interruption(&self, kind: NoticeKind) -> InterruptionMarker {
        let path = self.marker("interruption");
        wait_until(&format!("a {kind:?} marker"), WAIT, || {
            std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<InterruptionMarker>(&b).ok())
                .is_some_and(|m| m.kind == kind)
        });
        self.interruption()
    }

    /// Lets the agent poll `path` `n` more times.
    fn wait_polls(&self, path: &str, n: usize) {
        let target = self.imds.requests(path) + n;
        wait_until(&format!("{n} polls of {path}"), WAIT, || {
            self.imds.requests(path) >= target
        });
    }

    pub(crate) fn wait_log(&self, text: &str) {
        wait_until(&format!("`{text}` in the agent's log"), WAIT, || {
            self.log().contains(text)
        });
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

pub(crate) fn tail(v: &Value) -> Vec<String> {
    v["output_tail"]
        .as_array()
        .expect("output_tail is a list")
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

/// Gone, or a zombie waiting for a reaper (the container's init may not reap).
pub(crate) fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// An agent without EC2 here: its attempts to tag its instance with its key go to a closed port
/// on loopback (and are retried, logged), never to AWS.
pub(crate) fn no_ec2() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
    ]
}

/// What the master's reader (`dtctl status`) makes of the failure marker.
fn master_summary(w: &Worker) -> String {
    match w.master_reads("prepare_data_failed") {
        dt::observe::markers::Body::Failed { summary, .. } => summary,
        other => panic!("not a failure: {other:?}"),
    }
}

pub(crate) const RECORD_RUN: &str = "echo \"run $DT_ATTEMPT\" >> \"$1\"\n";

#[test]
fn success_marker_names_the_run_and_removes_a_stale_failure() {
    let script = format!(
        "{RECORD_RUN}echo \"agent=$DT_AGENT ip=$DT_IP id=$DT_INSTANCE_ID cluster=$DT_CLUSTER dir=$DT_SHARED_DIR attempt=$DT_ATTEMPT\"\n\
         echo 'to stderr' >&2\necho done\n"
    );
    let mut w = Worker::new(&script);
    // An earlier run's failure, not this instance's (it names none).
    std::fs::create_dir_all(w.own_dir()).unwrap();
    std::fs::write(w.marker("prepare_data_failed"), "{\"exit_code\": 1}").unwrap();
    w.start(&[]);
    let v = w.wait_json("prepare_data_success");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["instance_id"], ID);
    assert!(v["duration_s"].as_f64().unwrap() >= 0.0);
    let expected = format!(
        "agent=1 ip={IP} id={ID} cluster=itest dir={} attempt=1",
        w.efs().display()
    );
    assert_eq!(tail(&v), vec![expected, "to stderr".into(), "done".into()]);
    w.wait_log("removed stale report");
    assert!(!w.marker("prepare_data_failed").exists());
    assert_eq!(w.runs(), 1);
    assert!(w.log().contains("prepare-data: succeeded"), "{}", w.log());
    // Without agent.health there is no check, and no report of one.
    assert!(!w.marker("health").exists());
}

#[test]
fn failing_every_attempt_leaves_a_failure_marker_with_exit_code_and_tail() {
    let script =
        format!("{RECORD_RUN}echo \"attempt $DT_ATTEMPT\"\necho 'disk full' >&2\nexit 3\n");
    let mut w = Worker::new(&script);
    w.configure("attempts", "3");
    w.start(&[]);
    let v = w.wait_json("prepare_data_failed");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["attempts"], 3);
    assert_eq!(v["timed_out"], false);
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(tail(&v), vec!["attempt 3", "disk full"]);
    assert_eq!(w.runs(), 3);
    assert_eq!(w.log().matches("prepare-data: starting").count(), 3);
    assert!(!w.marker("prepare_data_success").exists());
    assert_eq!(master_summary(&w), "exit 3 after 3 attempt(s): disk full");
}

#[test]
fn a_hanging_program_and_its_child_are_killed_at_the_timeout() {
    let script = format!(
        "{RECORD_RUN}sleep 300 &\necho $! > \"$DT_SHARED_DIR/../child.pid\"\necho $$ > \"$DT_SHARED_DIR/../script.pid\"\necho 'downloading'\nwait\n"
    );
    let mut w = Worker::new(&script);
    w.configure("timeout", "1s");
    let started = Instant::now();
    w.start(&[]);
    let v = w.wait_json("prepare_data_failed");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(v["timed_out"], true);
    assert_eq!(v["exit_code"], Value::Null);
    assert_eq!(tail(&v), vec!["downloading"]);
    for file in ["child.pid", "script.pid"] {
        let pid: i32 = std::fs::read_to_string(w.dir.path().join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_until(&format!("{file} process to be killed"), WAIT, || {
            process_gone(pid)
        });
    }
    assert!(
        w.log().contains("timed out after 1s, killed"),
        "{}",
        w.log()
    );
}

#[test]
fn a_missing_program_is_a_failure_with_a_clear_error() {
    let mut w = Worker::new("");
    let missing = w.dir.path().join("no-such-prepare.py");
    w.configure("prepare_data", &missing.display().to_string());
    w.configure("attempts", "2");
    w.start(&[]);
    let v = w.wait_json("prepare_data_failed");
    assert_eq!(
        v["error"],
        format!("program not found: {}", missing.display())
    );
    assert_eq!(v["exit_code"], Value::Null);
    assert_eq!(v["attempts"], 2);
    assert_eq!(tail(&v), Vec::<String>::new());
}

#[test]
fn a_restarted_agent_does_not_prepare_again() {
    let mut w = Worker::new(&format!(
        "{RECORD_RUN}if [ \"$2\" = --slow ]; then sleep 1; fi\necho ok\n"
    ));
    w.start(&[]);
    w.wait_json("prepare_data_success");
    w.kill();
    w.start(&[]);
    w.wait_log("not running it again");
    w.wait_polls(SPOT, 5);
    assert_eq!(w.runs(), 1);

    // The same IP on a new instance (the old one terminated, its disk image reused): the old
    // success is not this one's, nor a failure naming the old instance found in its place.
    w.kill();
    w.new_instance("i-0newowner00000001");
    std::fs::create_dir_all(w.own_dir()).unwrap();
    std::fs::write(
        w.marker("prepare_data_failed"),
        format!("{{\"instance_id\": \"{ID}\", \"exit_code\": 1}}"),
    )
    .unwrap();
    w.configure("args", &format!("[{}, '--slow']", w.runs_file().display()));
    w.start(&[]);
    // While this instance prepares (the script sleeps), no old report speaks for it.
    wait_until("the old failure to be cleared", WAIT, || {
        !w.marker("prepare_data_failed").exists() && !w.marker("prepare_data_success").exists()
    });
    wait_until("a second run", WAIT, || w.runs() == 2);
    wait_until("the new owner's marker", WAIT, || {
        std::fs::read_to_string(w.marker("prepare_data_success"))
            .is_ok_and(|s| s.contains("i-0newowner00000001"))
    });
}

#[test]
fn a_spot_notice_is_written_once_across_polls_and_restarts() {
    let mut w = Worker::new("echo ok\n");
    w.start(&[]);
    w.wait_json("prepare_data_success");
    let body = r#"{"action":"terminate","time":"2026-11-23T10:00:00Z"}"#;
    w.imds.set(SPOT, body);
    let m = w.wait_interruption(NoticeKind::SpotInterruption);
    assert_eq!(m.id, "imds:spot-interruption:2026-11-23T10:00:00Z");
    assert_eq!(m.instance_id, ID);
    assert_eq!(m.ip.to_string(), IP);
    assert_eq!(m.detail, body);
    assert_eq!(m.action_time.as_deref(), Some("2026-11-23T10:00:00Z"));
    humantime::parse_rfc3339(&m.noticed_at).unwrap();
    let path = w.marker("interruption");
    let ino = inode(&path);
    w.wait_polls(SPOT, 10);
    assert_eq!(inode(&path), ino, "the marker was rewritten");
    assert_eq!(w.log().matches("wrote the marker").count(), 1);

    w.kill();
    w.start(&["--ip", IP]);
    w.wait_log("already written for this instance");
    w.wait_polls(SPOT, 10);
    assert_eq!(
        inode(&path),
        ino,
        "the marker was rewritten after a restart"
    );
    assert_eq!(w.interruption(), m);
    assert!(!w.log().contains("wrote the marker"), "{}", w.log());
}

#[test]
fn a_spot_notice_replaces_a_rebalance_recommendation() {
    let mut w = Worker::new("echo ok\n");
    w.start(&[]);
    w.imds
        .set(REBALANCE, r#"{"noticeTime":"2026-11-23T09:50:00Z"}"#);
    let m = w.wait_interruption(NoticeKind::RebalanceRecommendation);
    assert_eq!(m.id, "imds:rebalance-recommendation:2026-11-23T09:50:00Z");
    assert_eq!(m.action_time, None);
    w.imds
        .set(SPOT, r#"{"action":"stop","time":"2026-11-23T10:00:00Z"}"#);
    let m = w.wait_interruption(NoticeKind::SpotInterruption);
    assert_eq!(m.action_time.as_deref(), Some("2026-11-23T10:00:00Z"));
}

#[test]
fn a_rebalance_recommendation_never_replaces_a_spot_notice() {
    let mut w = Worker::new("echo ok\n");
    w.start(&[]);
    w.imds.set(
        SPOT,
        r#"{"action":"terminate","time":"2026-11-23T10:00:00Z"}"#,
    );
    let m = w.wait_interruption(NoticeKind::SpotInterruption);
    w.imds
        .set(REBALANCE, r#"{"noticeTime":"2026-11-23T10:00:05Z"}"#);
    w.wait_polls(REBALANCE, 5);
    // Even once the spot notice is no longer served.
    w.imds.remove(SPOT);
    w.wait_polls(REBALANCE, 5);
    assert_eq!(w.interruption(), m);
}

#[test]
fn lifecycle_terminated_is_a_notice_and_in_service_is_not() {
    let mut w = Worker::new("echo ok\n");
    w.imds.set(LIFECYCLE, "InService");
    w.start(&[]);
    w.wait_polls(LIFECYCLE, 5);
    assert!(!w.marker("interruption").exists());
    w.imds.set(LIFECYCLE, "Terminated");
    let m = w.wait_interruption(NoticeKind::LifecycleTerminate);
    assert_eq!(m.id, format!("imds:lifecycle-terminate:{ID}"));
    assert_eq!(m.detail, "Terminated");
}

/// AWS's documented `events/maintenance/scheduled` body ("Scheduled events for your instances",
/// tests/fixtures/events/): the agent writes a marker due at `NotBefore`, which the master reads
/// as a scheduled change for this instance. The documented history (canceled, completed) served
/// at the same path first is no notice.
#[test]
fn a_scheduled_maintenance_event_is_a_notice_the_master_reads_and_a_canceled_one_is_not() {
    let fixture =
        |name: &str| std::fs::read_to_string(crate::support::fixtures::dir().join(name)).unwrap();
    let mut w = Worker::new("echo ok\n");
    w.imds
        .set(SCHEDULED, &fixture("imds-maintenance-history.json"));
    w.start(&[]);
    w.wait_polls(SCHEDULED, 5);
    assert!(!w.marker("interruption").exists());
    w.imds
        .set(SCHEDULED, &fixture("imds-maintenance-scheduled.json"));
    let m = w.wait_interruption(NoticeKind::ScheduledMaintenance);
    assert_eq!(
        m.id,
        "imds:scheduled-maintenance:instance-event-0d59937288b749b32"
    );
    assert_eq!(m.action_time.as_deref(), Some("2019-01-21T09:00:43Z"));
    assert_eq!(m.instance_id, ID);
    let dt::observe::markers::Body::Notice(n) = w.master_reads("interruption") else {
        panic!("not a notice");
    };
    assert_eq!(n.kind, dt::model::NoticeKind::ScheduledChange);
    // The instance and IP it names, for the master to check against EC2's view.
    let target = dt::model::NoticeTarget::Agent {
        instance: ID.into(),
        ip: IP.parse().unwrap(),
    };
    assert_eq!(n.target, target);
    assert_eq!(n.deadline, dt::time::parse_rfc3339("2019-01-21T09:00:43Z"));
}

#[test]
fn the_watch_runs_while_data_is_still_being_prepared() {
    let mut w = Worker::new(&format!("{RECORD_RUN}sleep 4\n"));
    w.imds.set(
        SPOT,
        r#"{"action":"terminate","time":"2026-11-23T10:00:00Z"}"#,
    );
    w.start(&[]);
    w.wait_interruption(NoticeKind::SpotInterruption);
    // The watch and prepare-data start together: the notice does not say the script ran yet.
    wait_until("prepare-data to start", Duration::from_secs(10), || {
        w.runs() == 1
    });
    assert!(!w.marker("prepare_data_success").exists());
    w.wait_json("prepare_data_success");
}

#[test]
fn imds_errors_are_logged_once_and_the_agent_recovers() {
    let mut w = Worker::new("echo ok\n");
    w.imds.fail_with(Some(500));
    w.start(&[]);
    wait_until("token attempts", WAIT, || w.imds.requests("api/token") >= 6);
    assert!(!w.marker("prepare_data_success").exists());
    w.imds.fail_with(None);
    w.wait_json("prepare_data_success");
    w.wait_log("IMDS answers again");
    let warned = |path: &str| {
        w.log()
            .lines()
            .filter(|l| l.contains("retrying; logged again") && l.contains(path))
            .count()
    };
    assert_eq!(warned("local-ipv4"), 1, "{}", w.log());
    assert!(
        w.log()
            .contains("cannot get an IMDSv2 session token: HTTP 500"),
        "{}",
        w.log()
    );

    // An outage once a session token is held: the watch keeps polling and logs it once.
    w.imds.fail_with(Some(500));
    w.wait_polls(SPOT, 6);
    assert_eq!(warned(SPOT), 1, "{}", w.log());
    assert!(w.log().contains("HTTP 500"), "{}", w.log());
    w.imds.set(
        SPOT,
        r#"{"action":"terminate","time":"2026-11-23T10:00:00Z"}"#,
    );
    w.imds.fail_with(None);
    w.wait_interruption(NoticeKind::SpotInterruption);
}

#[test]
fn sigterm_stops_the_agent_and_kills_a_running_prepare_data() {
    let script = format!(
        "{RECORD_RUN}sleep 300 &\necho $! > \"$DT_SHARED_DIR/../child.pid\"\necho started\nwait\n"
    );
    let mut w = Worker::new(&script);
    w.start(&[]);
    let pid_file = w.dir.path().join("child.pid");
    wait_until("the prepare-data child", WAIT, || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let child: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    signal(w.pid(), "TERM");
    let status = w.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", w.log());
    wait_until("the child to be killed", WAIT, || process_gone(child));
    assert!(!w.marker("prepare_data_failed").exists());
    assert!(!w.marker("prepare_data_success").exists());
    assert!(w.log().contains("SIGTERM: stopping"), "{}", w.log());
}

#[test]
fn sigint_stops_a_watching_agent() {
    let mut w = Worker::new("echo ok\n");
    w.start(&["--ip", IP, "--instance-id", ID]);
    w.wait_json("prepare_data_success");
    signal(w.pid(), "INT");
    assert_eq!(w.wait_exit().code(), Some(0));
}

#[test]
fn a_bad_instance_id_override_is_refused() {
    let mut w = Worker::new("echo ok\n");
    w.start(&["--instance-id", "i-1;reboot"]);
    assert_eq!(w.wait_exit().code(), Some(1));
    assert!(w.log().contains("i-1;reboot"), "{}", w.log());
}

#[test]
fn the_example_prepare_data_script_runs_under_the_agent() {
    let mut w = Worker::new("");
    // Beside the modules it imports, as docs/torchrun.md installs them.
    let script = crate::support::install("prepare-data/synthetic.py", w.dir.path(), 0o755);
    crate::support::install("prepare-data/dtprepare.py", w.dir.path(), 0o644);
    crate::support::install("prepare-data/dt_atomic.py", w.dir.path(), 0o644);
    w.configure("prepare_data", &script.display().to_string());
    w.configure("args", "[--samples, '10']");
    w.start(&[]);
    let v = w.wait_json("prepare_data_success");
    assert_eq!(v["instance_id"], ID);
    let lines = tail(&v);
    assert_eq!(
        lines.last().map(String::as_str),
        Some("[synthetic] ready (dtd agent writes the marker)"),
        "{lines:?}"
    );
    let data = w.efs().join(format!("data/synthetic-{IP}.csv"));
    assert_eq!(std::fs::read_to_string(data).unwrap().lines().count(), 11);
}
