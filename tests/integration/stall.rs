//! Stalled jobs, end to end: the example job trains on a base host and reports its step in the
//! progress file; stopped with SIGSTOP, its step stands still and the real `dtd` journals
//! `stalled`, shows it in `dtctl status`, posts it to an alert webhook and runs the stall
//! command; resumed with SIGCONT, `stall_cleared` follows the same way and the status line goes.

use std::path::Path;
use std::time::Duration;

use crate::support::webhook::WebhookReceiver;
use crate::support::*;

/// A job stopped with SIGSTOP, resumed with SIGCONT when dropped: a failing test never leaves
/// a stopped process behind (its SIGTERM would wait for a SIGCONT that never comes).
struct Stopped(i32);

impl Stopped {
    fn stop(pid: i32) -> Stopped {
        signal(pid, "STOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// The stall command's environment as it wrote it to `<dir>/<DT_EVENT>.env` (only the `DT_`
/// lines), once the command has finished writing it.
fn hook_env(dir: &Path, event: &str) -> Vec<String> {
    let text = wait_for(
        &format!("the stall command to run with DT_EVENT={event}"),
        Duration::from_secs(30),
        || std::fs::read_to_string(dir.join(format!("{event}.env"))).unwrap_or_default(),
        // `done` is written last, after the environment.
        |text| text.ends_with("done\n"),
    );
    let lines = text.lines().filter(|l| l.starts_with("DT_"));
    lines.map(str::to_string).collect()
}

fn journaled(c: &Cluster, kind: &str) -> Vec<serde_json::Value> {
    wait_for(
        &format!("`{kind}` in the journal"),
        Duration::from_secs(30),
        || {
            let mut lines = c.journal();
            lines.retain(|e| e["kind"] == kind);
            lines
        },
        |lines| !lines.is_empty(),
    )
}

/// The step in the job's progress file.
fn progress_step(c: &Cluster) -> u64 {
    let text = std::fs::read_to_string(c.efs().join("progress")).expect("the progress file");
    let line: serde_json::Value = serde_json::from_str(&text).expect("a progress line");
    line["step"].as_u64().expect("a step")
}

#[test]
fn a_stopped_job_is_stalled_and_a_resumed_one_is_not() {
    let mut c = Cluster::new();
    let (_, base_ip) = c.launch(1).remove(0);
    let hooks = c.dir.path().join("stall-hooks");
    std::fs::create_dir(&hooks).unwrap();
    let alerts = WebhookReceiver::start();
    c.extra = format!(
        "alerts:\n  - {{ webhook: '{}', events: [stalled, stall_cleared], allow_http: true }}\n",
        alerts.url("/dtd")
    );
    let (efs, out) = (path_str(&c.efs()), path_str(&hooks));
    // The job is signalled (as the example expects); the stall has a command of its own.
    let job = format!(
        "  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}\n  ack: {{ host_worker_log: {efs}/host_worker_log, timeout: 10m }}\n  stall: {{ after: 4s, command: [/bin/bash, -c, 'env | sort > \"$1/$DT_EVENT.env\" && echo done >> \"$1/$DT_EVENT.env\"', stall-hook, {out}] }}"
    );
    c.write_config(&c.config(1, 8, &[&base_ip], &job));
    c.start_dtd();
    c.wait_hosts("the base host to be listed", |h| h == [base_ip.clone()]);
    let job = start_example_job(&c);

    // Training: dtd sees the step advance, and no stall.
    let first = c.wait_status("a step read from the progress file", |s| {
        s["progress"]["step"].as_u64().is_some()
    })["progress"]["step"]
        .clone();
    c.wait_status("the step advancing", |s| {
        s["progress"]["step"] != first && s["progress"]["stalled"] == false
    });
    let printed = c.wait_status_text("Progress:    step ");
    assert!(printed.contains("(a stall after 4s)"), "{printed}");
    assert!(c.journal().iter().all(|e| e["kind"] != "stalled"));

    let stopped = Stopped::stop(job.0.id() as i32);
    let stalled = journaled(&c, "stalled");
    let step = progress_step(&c);
    let message = stalled[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("the job's step {step} has not advanced for ")),
        "{message}"
    );
    let env = hook_env(&hooks, "stalled");
    assert!(env.contains(&"DT_EVENT=stalled".to_string()), "{env:?}");
    assert!(env.contains(&format!("DT_STEP={step}")), "{env:?}");
    assert!(
        env.iter().any(|l| l.starts_with("DT_STALLED_SINCE=20")),
        "{env:?}"
    );
    let printed = c.wait_status_text(&format!("Stalled:     step {step} has not advanced for "));
    assert!(!printed.contains("Progress:    step"), "{printed}");
    let events = stdout(&c.dtctl(&["events", "--since", "10m"]));
    assert!(events.contains("stalled"), "{events}");
    // Journaled once, however many passes see the step standing still.
    c.wait_passes(3);
    assert_eq!(
        c.journal()
            .iter()
            .filter(|e| e["kind"] == "stalled")
            .count(),
        1
    );

    drop(stopped);
    let cleared = journaled(&c, "stall_cleared");
    let message = cleared[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the job's step advanced to "),
        "{message}"
    );
    let env = hook_env(&hooks, "stall_cleared");
    assert!(
        env.contains(&"DT_EVENT=stall_cleared".to_string()),
        "{env:?}"
    );
    let status = c.wait_status("the stall cleared", |s| s["progress"]["stalled"] == false);
    assert!(status["progress"]["step"].as_u64() > Some(step), "{status}");
    let printed = c.wait_status_text("Progress:    step ");
    assert!(!printed.contains("Stalled:"), "{printed}");

    let posted = wait_for(
        "both alerts at the webhook",
        Duration::from_secs(30),
        || alerts.received(),
        |r| r.len() >= 2,
    );
    let kinds: Vec<String> = (posted.iter())
        .map(|r| r.json()["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["stalled", "stall_cleared"]);
}

/// The stall command runs as root on the master too: one anyone else could have put in place
/// (its directory writable by others) is not run; the stall is journaled and the refusal with
/// it, once, naming the path at fault.
#[test]
fn a_stall_command_others_could_change_is_refused_and_journaled() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Cluster::new();
    let (_, base_ip) = c.launch(1).remove(0);
    let hooks = c.dir.path().join("stall-hooks");
    std::fs::create_dir(&hooks).unwrap();
    let command = hooks.join("page.sh");
    let ran = c.dir.path().join("paged");
    std::fs::write(&command, format!("#!/bin/bash\ntouch {}\n", ran.display())).unwrap();
    std::fs::set_permissions(&command, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&hooks, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The job's progress, written once by the test as the job's user (the test's own): its step
    // stands still, so the job stalls.
    std::fs::write(c.efs().join("progress"), "{\"step\": 42}\n").unwrap();
    let owner = nix::unistd::geteuid().as_raw();
    let job = format!(
        "  owner: {owner}\n  ack: {{ timeout: 10m }}\n  stall: {{ after: 2s, command: [{}] }}",
        command.display()
    );
    c.write_config(&c.config(1, 8, &[&base_ip], &job));
    c.start_dtd();

    let stalled = journaled(&c, "stalled");
    assert!(
        (stalled[0]["message"].as_str().unwrap()).starts_with("the job's step 42 has not advanced"),
        "{stalled:?}"
    );
    let refused = journaled(&c, "notify_refused");
    let message = refused[0]["message"].as_str().unwrap();
    let why = format!(
        "stall command (stalled): hook refused {}: {} is writable by its group or others and not sticky (mode 0777)",
        command.display(),
        hooks.display()
    );
    assert!(message.starts_with(&why), "{message}");
    assert!(message.ends_with("(not retried)"), "{message}");
    // Run once per change: later passes neither run it nor journal it again.
    c.wait_passes(3);
    let kinds: Vec<_> = (c.journal().iter())
        .filter(|e| e["kind"] == "notify_refused")
        .map(|e| e["message"].clone())
        .collect();
    assert_eq!(kinds.len(), 1, "{kinds:?}");
    assert!(!ran.exists(), "a refused stall command ran");
}
