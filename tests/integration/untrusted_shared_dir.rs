//! What a worker can put in the shared directory, against the real `dtd`: a FIFO at each file dtd
//! reads, a link to `/dev/zero`, a 3 GiB sparse file, a directory where a file should be, dtd's own
//! PID and a reused PID in the pidfile, a state directory that is not mounted, and a shared file
//! system that stops answering (a FUSE mount whose server is stopped: `bindfs`, installed by
//! scripts/setup). Each asserts what a user sees: passes go on, the warning is logged once, dtd
//! stays small, and the membership is right.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::support::*;

/// The job side: signal mode with a pidfile, the ack file and the 2018 log, all in the shared dir.
fn job_config(efs: &Path) -> String {
    let efs = efs.display();
    format!(
        "  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}\n  ack: {{ host_worker_log: {efs}/host_worker_log, file: {efs}/ack, timeout: 10m }}"
    )
}

/// A job that counts the SIGUSR1s it receives, one line each in `signals`.
struct CountingJob {
    child: Child,
    signals: PathBuf,
}

impl CountingJob {
    fn start(c: &Cluster) -> CountingJob {
        let signals = c.dir.path().join("signals");
        let script = "import signal, sys, time\n\
            def got(*_):\n    open(sys.argv[1], 'a').write('USR1\\n')\n\
            signal.signal(signal.SIGUSR1, got)\n\
            print('ready', flush=True)\n\
            while True: time.sleep(1)\n";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .arg(&signals)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        // The handler is installed once it says so; a SIGUSR1 before that would kill it.
        let mut ready = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        CountingJob { child, signals }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signals(&self) -> usize {
        std::fs::read_to_string(&self.signals)
            .unwrap_or_default()
            .lines()
            .count()
    }

    fn write_pidfile(&self, c: &Cluster) {
        std::fs::write(c.efs().join("job.pid"), format!("{}\n", self.pid())).unwrap();
    }
}

impl Drop for CountingJob {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cluster whose job counts its signals and has written its pidfile.
fn with_job() -> (Cluster, CountingJob) {
    let c = Cluster::new();
    let job = CountingJob::start(&c);
    job.write_pidfile(&c);
    (c, job)
}

fn start(c: &mut Cluster) {
    let job = job_config(&c.efs());
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
}

/// Launches a worker, writes its marker, waits until it is in the host file: the whole join
/// path works with the bad file in place.
fn join_one(c: &Cluster) -> (String, String) {
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts(&format!("{ip} to join"), |h| h.contains(&ip));
    (id, ip)
}

fn dtd_pid(c: &Cluster) -> u32 {
    c.dtd.as_ref().expect("dtd running").id()
}

/// The most memory dtd has held (VmHWM), in MiB.
fn peak_rss_mib(c: &Cluster, case: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", dtd_pid(c))).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    let mib = kib / 1024.0;
    eprintln!("peak RSS of dtd with {case}: {mib:.1} MiB");
    mib
}

fn assert_alive(c: &mut Cluster) {
    let child = c.dtd.as_mut().expect("dtd running");
    assert!(
        child.try_wait().unwrap().is_none(),
        "dtd exited: {:?}",
        child.try_wait()
    );
}

/// Passes go on, the warning is in the log exactly once, and dtd stays under 64 MiB.
fn assert_survived(c: &mut Cluster, case: &str, warning: &str) {
    c.wait_passes(5);
    assert_alive(c);
    let log = c.dtd_log();
    assert_eq!(
        warnings(&log, warning),
        1,
        "`{warning}` should be logged once; log:\n{log}"
    );
    let rss = peak_rss_mib(c, case);
    assert!(rss < 64.0, "dtd peaked at {rss:.1} MiB with {case}");
}

/// Warning lines of the log that say `text` (journal events are logged too, as info lines).
fn warnings(log: &str, text: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(" WARN ") && l.contains(text))
        .count()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn refusals(c: &Cluster) -> Vec<String> {
    c.journal()
        .iter()
        .filter(|e| e["kind"] == "notify_refused")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_fifo_as_ack_is_ignored_and_passes_go_on() {
    let (mut c, job) = with_job();
    mkfifo(&c.efs().join("ack"));
    start(&mut c);
    join_one(&c);
    assert_survived(&mut c, "a FIFO as ack", "ack is a FIFO, not a regular file");
    wait_until("the job to be signalled", Duration::from_secs(30), || {
        job.signals() >= 1
    });
    let s = c.status_json();
    let acks = &s["sources"].as_array().unwrap()[2];
    assert_eq!(acks["ok"], true, "{acks}");
}

#[test]
fn a_fifo_as_host_worker_log_is_ignored() {
    let (mut c, _job) = with_job();
    mkfifo(&c.efs().join("host_worker_log"));
    start(&mut c);
    join_one(&c);
    assert_survived(
        &mut c,
        "a FIFO as host_worker_log",
        "host_worker_log is a FIFO, not a regular file",
    );
}

#[test]
fn a_fifo_as_the_host_file_is_replaced_by_a_real_one() {
    let (mut c, _job) = with_job();
    let host_worker = c.efs().join("host_worker");
    mkfifo(&host_worker);
    start(&mut c);
    // Reading the FIFO would block this test; dtd must replace it without opening it.
    wait_until(
        "host_worker to become a regular file",
        Duration::from_secs(30),
        || std::fs::symlink_metadata(&host_worker).is_ok_and(|m| m.is_file()),
    );
    let (_, ip) = join_one(&c);
    assert_eq!(c.hosts(), vec![ip]);
    assert_survived(
        &mut c,
        "a FIFO as host_worker",
        "is a FIFO, not a regular file: replaced by the new content",
    );
}

#[test]
fn a_fifo_as_the_pidfile_is_refused_once_and_retried() {
    let mut c = Cluster::new();
    let job = CountingJob::start(&c);
    let pidfile = c.efs().join("job.pid");
    mkfifo(&pidfile);
    start(&mut c);
    join_one(&c);
    assert_survived(&mut c, "a FIFO as job.pid", "job.pid is a FIFO");
    let refused = refusals(&c);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("is a FIFO"), "{refused:?}");
    assert_eq!(job.signals(), 0);
    // The job writes its pidfile after all: the notification still pending reaches it.
    std::fs::remove_file(&pidfile).unwrap();
    job.write_pidfile(&c);
    wait_until("the retried signal", Duration::from_secs(30), || {
        job.signals() >= 1
    });
}

#[test]
fn a_link_to_dev_zero_is_not_read_through() {
    let (mut c, _job) = with_job();
    std::os::unix::fs::symlink("/dev/zero", c.efs().join("host_worker_log")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", c.efs().join("ack")).unwrap();
    start(&mut c);
    join_one(&c);
    assert_survived(
        &mut c,
        "links to /dev/zero as ack and host_worker_log",
        "host_worker_log is a symbolic link, not a regular file",
    );
    let log = c.dtd_log();
    assert_eq!(
        warnings(&log, "ack is a symbolic link, not a regular file"),
        1,
        "{log}"
    );
}

#[test]
fn a_three_gib_sparse_ack_is_refused_unread() {
    let (mut c, _job) = with_job();
    let ack = std::fs::File::create(c.efs().join("ack")).unwrap();
    ack.set_len(3 << 30).unwrap();
    start(&mut c);
    join_one(&c);
    assert_survived(
        &mut c,
        "a 3 GiB sparse ack",
        "ack holds 3221225472 bytes, more than the 32 it can hold",
    );
}

#[test]
fn a_directory_where_a_file_should_be() {
    let (mut c, job) = with_job();
    std::fs::create_dir(c.efs().join("ack")).unwrap();
    std::fs::create_dir(c.efs().join("hosts.mpi")).unwrap();
    start(&mut c);
    let (_, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    // The first host file is written; the second cannot replace a directory, and says so.
    c.wait_hosts(&format!("{ip} in host_worker"), |h| h.contains(&ip));
    let s = c.wait_status("the host file error", |s| {
        s["errors"].to_string().contains("hosts.mpi")
    });
    assert!(s["errors"].to_string().contains("host files"), "{s}");
    assert_survived(
        &mut c,
        "directories as ack and hosts.mpi",
        "ack is a directory",
    );
    // Host files that are not all written are not announced to the job.
    assert_eq!(job.signals(), 0);
    std::fs::remove_dir(c.efs().join("hosts.mpi")).unwrap();
    wait_until("the job to be signalled", Duration::from_secs(30), || {
        job.signals() >= 1
    });
    let mpi = std::fs::read_to_string(c.efs().join("hosts.mpi")).unwrap();
    assert_eq!(mpi, format!("{ip} slots=1\n"));
}

#[test]
fn dtd_never_signals_itself() {
    let mut c = Cluster::new();
    start(&mut c);
    let pid = dtd_pid(&c);
    std::fs::write(c.efs().join("job.pid"), format!("{pid}\n")).unwrap();
    join_one(&c);
    assert_survived(&mut c, "its own PID in job.pid", "is dtd itself");
    let refused = refusals(&c);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains(&format!("PID {pid} is dtd itself")),
        "{refused:?}"
    );
    let s = c.status_json();
    assert!(s["errors"].to_string().contains("is dtd itself"), "{s}");
}

#[test]
fn a_reused_pid_in_a_stale_pidfile_is_not_signalled() {
    let mut c = Cluster::new();
    // The job wrote its pidfile ten minutes ago and died; this process got its PID since.
    let mut stranger = Command::new("sleep").arg("600").spawn().unwrap();
    let pidfile = c.efs().join("job.pid");
    std::fs::write(&pidfile, format!("{}\n", stranger.id())).unwrap();
    let old = SystemTime::now() - Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(&pidfile)
        .unwrap()
        .set_modified(old)
        .unwrap();
    start(&mut c);
    join_one(&c);
    assert_survived(
        &mut c,
        "a reused PID in job.pid",
        "the pidfile is stale and its PID reused",
    );
    // SIGUSR1 would have killed `sleep`.
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "the stranger was signalled"
    );
    let refused = refusals(&c);
    assert_eq!(refused.len(), 1, "{refused:?}");
    let _ = stranger.kill();
    let _ = stranger.wait();
}

#[test]
fn expect_names_the_job() {
    let (mut c, job) = with_job();
    let efs = c.efs().display().to_string();
    let notify = format!("  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid, expect: train.py }}\n  ack: {{ timeout: 10m }}");
    c.write_config(&c.config(0, 8, &[], &notify));
    c.start_dtd();
    join_one(&c);
    c.wait_passes(3);
    let refused = refusals(&c);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("does not contain job.notify.expect `train.py`"),
        "{refused:?}"
    );
    assert_eq!(job.signals(), 0);
    // The right string: the pending notification goes through on a later pass.
    c.kill_dtd();
    c.write_config(&c.config(0, 8, &[], &notify.replace("train.py", "import signal")));
    c.start_dtd();
    wait_until("the job to be signalled", Duration::from_secs(30), || {
        job.signals() >= 1
    });
}

#[test]
fn a_state_directory_not_on_a_mount_is_refused() {
    let mut c = Cluster::new();
    let config = c.config(0, 8, &[], "  notify: none");
    c.write_config(&config.replace("allow_local_state_dir: true\n", ""));
    let out = Command::new(env!("CARGO_BIN_EXE_dtd"))
        .args(["run", "--config"])
        .arg(c.config_path())
        .envs(aws_env(&c.moto.endpoint()))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is on the root file system"), "{err}");
    assert!(
        err.contains(&format!("expected {} to be a mount", c.efs().display())),
        "{err}"
    );
    assert!(err.contains("allow_local_state_dir"), "{err}");
    assert!(
        !c.efs().join(".dt").exists(),
        "dtd made a state on the root disk"
    );

    // Mounted (a tmpfs stands in for EFS), the same config starts.
    let _mount = Mount::tmpfs(&c.efs(), "tmpfs");
    c.start_dtd();
    c.wait_passes(1);
    assert!(c.state_dir().join("state.json").exists());
    c.kill_dtd();
}

/// `bindfs SRC MNT`: MNT mirrors SRC through a FUSE server that the test can stop, so every
/// system call on MNT waits as on a hung NFS mount.
struct Fuse {
    mnt: PathBuf,
    server: i32,
}

impl Fuse {
    fn mount(src: &Path, mnt: &Path) -> Fuse {
        std::fs::create_dir_all(mnt).unwrap();
        let ok = Command::new("bindfs")
            .arg(src)
            .arg(mnt)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(
            ok,
            "bindfs failed: scripts/setup installs it (Debian package bindfs), and FUSE needs root"
        );
        let out = Command::new("pgrep")
            .args([
                "-n",
                "-f",
                &format!("bindfs {} {}", src.display(), mnt.display()),
            ])
            .output()
            .unwrap();
        let server = stdout(&out).trim().parse().expect("bindfs's PID");
        Fuse {
            mnt: mnt.to_path_buf(),
            server,
        }
    }

    fn stop(&self) {
        signal(self.server, "STOP");
    }

    fn resume(&self) {
        signal(self.server, "CONT");
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        self.resume();
        let unmounted = Command::new("fusermount").arg("-u").arg(&self.mnt).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

#[test]
fn a_stalled_shared_file_system_is_reported_and_held_and_the_queue_waits() {
    let mut c = Cluster::new();
    let queue = create_event_queue(&c);
    // Redelivered every second while dtd keeps it: only the newest receipt can delete it.
    c.aws(&[
        "sqs",
        "set-queue-attributes",
        "--queue-url",
        &queue,
        "--attributes",
        "VisibilityTimeout=1",
    ]);
    let fuse = Fuse::mount(&c.efs(), &c.dir.path().join("mnt"));
    let (efs, mnt) = (
        c.efs().display().to_string(),
        fuse.mnt.display().to_string(),
    );
    // dtd sees the shared directory through the FUSE mount; its state (and the test's reads)
    // stay on the directory underneath.
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    let config = config.replace(&efs, &mnt);
    c.write_config(&format!(
        "{config}state_dir: {efs}/.dt/{CLUSTER}\nfs_timeout: 1s\nevents:\n  queue_url: {queue}\n"
    ));
    // Launched before dtd starts, so that its first listing has the worker: launched after, on
    // a busy machine the listing could come first and miss it, and with no worker's subnet known
    // yet no report's IP is looked up, so nothing showed it for the 30 s the join is awaited.
    let (id, ip) = c.launch(1).remove(0);
    c.start_dtd();
    c.marker(&ip);
    c.wait_hosts(&format!("{ip} to join"), |h| h.contains(&ip));

    fuse.stop();
    put_ec2_event(
        &c,
        "EC2 Spot Instance Interruption Warning",
        serde_json::json!({ "instance-id": id, "instance-action": "terminate" }),
    );
    let s = c.wait_status("the shared directory stalled", |s| {
        s["sources"].to_string().contains("not answering")
    });
    assert!(s["errors"].to_string().contains("not answering"), "{s}");
    c.wait_passes(3);
    let failed: Vec<_> = c
        .journal()
        .into_iter()
        .filter(|e| e["kind"] == "source_failed")
        .collect();
    // The acknowledgements (and the markers, with unsigned reports) are read from the shared
    // directory; the agents' reports are not, and go on arriving.
    assert_eq!(failed.len(), 1, "acknowledgements: {failed:?}");
    // Held: the warning is not heeded while the host file cannot be written.
    assert!(c.hosts().contains(&ip));
    assert_eq!(c.events_of("interrupted", &id), 0);
    assert_alive(&mut c);

    fuse.resume();
    c.wait_hosts(&format!("{ip} to leave after the stall"), |h| {
        !h.contains(&ip)
    });
    c.wait_events("interrupted", &id, 1);
    let recovered = || {
        (c.journal().iter())
            .filter(|e| e["kind"] == "source_recovered")
            .count()
    };
    // The pass that heeds the warning may still hold the read that timed out (an interruption
    // needs no complete view); the next one reads the directory again and journals it.
    wait_until(
        "the acknowledgements recovered",
        Duration::from_secs(10),
        || recovered() >= 1,
    );
    assert_eq!(c.events_of("interrupted", &id), 1);
    wait_until(
        "the heeded warning deleted from the queue",
        Duration::from_secs(30),
        || queue_depth(&c, &queue) == 0,
    );
    c.wait_passes(2);
    assert_eq!(recovered(), 1, "the recovery journaled once");
    let s = c.status_json();
    assert!(!s["errors"].to_string().contains("event queue"), "{s}");
}

#[test]
fn bad_health_reports_and_a_fifo_progress_file_are_refused_and_passes_go_on() {
    let (mut c, _job) = with_job();
    let efs = c.efs();
    mkfifo(&efs.join("health_10.0.9.1"));
    std::os::unix::fs::symlink("/dev/zero", efs.join("health_10.0.9.2")).unwrap();
    let huge = std::fs::File::create(efs.join("health_10.0.9.3")).unwrap();
    huge.set_len(3 << 30).unwrap();
    mkfifo(&efs.join("progress"));
    let job = format!("{}\n  stall: {{ after: 1s }}", job_config(&efs));
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    join_one(&c);
    assert_survived(&mut c, "bad health reports", "FIFO");
    // With signed reports no report file is opened at all: a FIFO, a link to /dev/zero or 3 GiB
    // under a report's name cost dtd nothing (and, for IPs no worker has, are not even shown).
    let log = c.dtd_log();
    for name in ["health_10.0.9.1", "health_10.0.9.2", "health_10.0.9.3"] {
        assert_eq!(warnings(&log, name), 0, "{name} was read: {log}");
    }
    let progress = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("progress") && l.contains("FIFO"));
    assert_eq!(progress.count(), 1, "{log}");
    // An unreadable progress file proves nothing: no stall, and the status says why.
    assert!(!c.journal().iter().any(|e| e["kind"] == "stalled"));
    let text = stdout(&c.dtctl(&["status"]));
    assert!(text.contains("FIFO"), "{text}");
}
