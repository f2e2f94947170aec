//! The programs the real `dtd agent` runs as root (prepare-data, the health check), attacked
//! through what a worker can write: a program others can write, one in a directory others can
//! write, a link to a good program, one owned by another user, one whose digest is not the
//! pinned one. Each would append a line to a file when run; the file stays absent, and the
//! failure marker, the master's reader and `dtctl status` (against moto) carry the reason.
//! The instance metadata is the IMDS stand-in (`support::imds`), as in `agent.rs`.

use serde_json::Value;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::agent::{tail, Worker, RECORD_RUN};
use crate::support::imds::ImdsStandIn;
use crate::support::*;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The worker's prepare-data program (a shell script that records each run).
fn prepare_program(w: &Worker) -> PathBuf {
    w.dir.path().join("prepare.sh")
}

/// Adds lines to the config's `agent:` section.
fn add_to_agent(w: &Worker, lines: &str) {
    let text = std::fs::read_to_string(w.config()).unwrap();
    let text = text.replacen("agent:\n", &format!("agent:\n{lines}"), 1);
    std::fs::write(w.config(), text).unwrap();
}

/// Starts the agent with 3 attempts allowed, waits for its failure marker and checks what a
/// refusal looks like everywhere: never run, not retried, the reason in the marker, in the
/// master's summary and in the agent's log. Returns the reason.
fn refused(w: &mut Worker) -> String {
    w.configure("attempts", "3");
    w.start(&[]);
    let v = w.wait_json("prepare_data_failed");
    assert_eq!(w.runs(), 0, "the refused program ran");
    assert_eq!(v["exit_code"], Value::Null);
    assert_eq!(v["attempts"], 1, "a refusal is not retried: {v}");
    assert_eq!(tail(&v), Vec::<String>::new());
    let reason = v["error"]
        .as_str()
        .expect("error in the marker")
        .to_string();
    assert!(reason.starts_with("refused "), "{reason}");
    assert_eq!(
        master_summary(w),
        format!("not started after 1 attempt(s): {reason}")
    );
    assert!(w.log().contains(&reason), "{}", w.log());
    assert_eq!(w.log().matches("prepare-data: starting").count(), 1);
    assert!(!w.marker("prepare_data_success").exists());
    reason
}

/// What the master's reader (`dtctl status`) makes of the failure marker.
fn master_summary(w: &Worker) -> String {
    match w.master_reads("prepare_data_failed") {
        dt::observe::markers::Body::Failed { summary, .. } => summary,
        other => panic!("not a failure: {other:?}"),
    }
}

#[test]
fn a_prepare_data_program_others_can_write_never_runs() {
    let mut w = Worker::new(RECORD_RUN);
    let prog = prepare_program(&w);
    chmod(&prog, 0o775);
    let reason = refused(&mut w);
    let p = prog.display();
    assert_eq!(
        reason,
        format!("refused {p}: {p} is writable by its group or others (mode 0775)")
    );
}

#[test]
fn a_prepare_data_program_in_a_directory_others_can_write_never_runs() {
    let mut w = Worker::new("");
    let open = w.dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let prog = open.join("prepare.sh");
    std::fs::write(&prog, format!("#!/bin/sh\n{RECORD_RUN}")).unwrap();
    chmod(&prog, 0o755);
    chmod(&open, 0o777);
    w.configure("prepare_data", &prog.display().to_string());
    let reason = refused(&mut w);
    assert_eq!(
        reason,
        format!(
            "refused {}: {} is writable by its group or others and not sticky (mode 0777)",
            prog.display(),
            open.display()
        )
    );
}

#[test]
fn a_link_to_a_good_prepare_data_program_never_runs() {
    let mut w = Worker::new(RECORD_RUN);
    let link = w.dir.path().join("prepare-link");
    symlink(prepare_program(&w), &link).unwrap();
    w.configure("prepare_data", &link.display().to_string());
    let reason = refused(&mut w);
    assert_eq!(
        reason,
        format!(
            "refused {l}: {l} is a symbolic link (to {}): name the program itself",
            prepare_program(&w).display(),
            l = link.display()
        )
    );
}

#[test]
fn a_prepare_data_program_owned_by_another_user_never_runs() {
    if !nix::unistd::geteuid().is_root() {
        // Only root can give a file to another user; program::trust's unit tests hold the rule.
        eprintln!("NOTE: not root: a file of another user cannot be made here");
        return;
    }
    let mut w = Worker::new(RECORD_RUN);
    let prog = prepare_program(&w);
    nix::unistd::chown(&prog, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let reason = refused(&mut w);
    let p = prog.display();
    assert_eq!(
        reason,
        format!("refused {p}: {p} is owned by uid 65534, not root")
    );
}

#[test]
fn a_prepare_data_program_whose_digest_is_not_the_pinned_one_never_runs_and_the_right_one_does() {
    let mut w = Worker::new(RECORD_RUN);
    let prog = prepare_program(&w);
    let actual = dt::digest::Sha256::of_reader(std::fs::File::open(&prog).unwrap()).unwrap();
    let pinned = "0123456789abcdef".repeat(4);
    add_to_agent(&w, &format!("  prepare_data_sha256: {pinned}\n"));
    let reason = refused(&mut w);
    assert_eq!(
        reason,
        format!(
            "refused {}: its sha256 is {actual}, not the pinned {pinned}",
            prog.display()
        )
    );

    w.kill();
    std::fs::remove_file(w.marker("prepare_data_failed")).unwrap();
    let text = std::fs::read_to_string(w.config()).unwrap();
    std::fs::write(w.config(), text.replace(&pinned, &actual.to_string())).unwrap();
    w.start(&[]);
    w.wait_json("prepare_data_success");
    assert_eq!(w.runs(), 1);
}

/// The stack's layout (`templates/user-data/master.sh`): the shared directory is writable by the
/// workers' group but sticky, the program sits in a directory only root writes. That runs; the
/// same program loose in the shared directory does not, even root's: workers could add beside it
/// what it loads (a Python script's own directory comes first on `sys.path`).
#[test]
fn the_stacks_layout_runs_and_a_program_loose_in_the_shared_directory_does_not() {
    let mut w = Worker::new("");
    let efs = w.efs();
    chmod(&efs, 0o1775);
    let loose = efs.join("prepare-data.py");
    std::fs::write(&loose, format!("#!/bin/sh\n{RECORD_RUN}")).unwrap();
    chmod(&loose, 0o755);
    w.configure("prepare_data", &loose.display().to_string());
    let reason = refused(&mut w);
    assert_eq!(
        reason,
        format!(
            "refused {}: {} is writable by its group or others (mode 1775): a program's own \
             directory must be written by no one else, sticky or not",
            loose.display(),
            efs.display()
        )
    );

    w.kill();
    std::fs::remove_file(w.marker("prepare_data_failed")).unwrap();
    let home = efs.join("prepare");
    std::fs::create_dir(&home).unwrap();
    chmod(&home, 0o755);
    let placed = home.join("prepare-data.py");
    std::fs::rename(&loose, &placed).unwrap();
    w.configure("prepare_data", &placed.display().to_string());
    w.start(&[]);
    w.wait_json("prepare_data_success");
    assert_eq!(w.runs(), 1);
}

/// Run from the checked descriptor: the kernel names the program by it (`$0`, the script path
/// an interpreter is given), and `DT_PROGRAM` says where it was found; `#!` scripts, through
/// `env` or not, still run.
#[test]
fn shell_and_env_python_scripts_run_from_the_checked_descriptor() {
    let mut w = Worker::new(&format!(
        "{RECORD_RUN}echo \"sh \\$0=$0 DT_PROGRAM=$DT_PROGRAM\"\n"
    ));
    w.start(&[]);
    let v = w.wait_json("prepare_data_success");
    let line = tail(&v).pop().unwrap();
    let (zero, program) = line.split_once(" DT_PROGRAM=").unwrap();
    assert!(zero.starts_with("sh $0=/proc/self/fd/"), "{line}");
    assert_eq!(program, prepare_program(&w).display().to_string());
    w.kill();

    let mut w = Worker::new("");
    let py = w.dir.path().join("prepare.py");
    std::fs::write(
        &py,
        "#!/usr/bin/env python3\nimport os, sys\n\
         open(sys.argv[1], 'a').write('run\\n')\n\
         print('py', sys.argv[0], os.environ['DT_PROGRAM'])\n",
    )
    .unwrap();
    chmod(&py, 0o755);
    w.configure("prepare_data", &py.display().to_string());
    w.start(&[]);
    let v = w.wait_json("prepare_data_success");
    let line = tail(&v).pop().unwrap();
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(words[0], "py");
    assert!(words[1].starts_with("/proc/self/fd/"), "{line}");
    assert_eq!(words[2], py.display().to_string());
    assert_eq!(w.runs(), 1);
}

#[test]
fn a_refused_health_check_is_a_failing_report_with_the_reason_and_the_worker_never_joins() {
    let mut w = Worker::new(RECORD_RUN);
    let check = w.dir.path().join("check.sh");
    let ran = w.dir.path().join("check-ran");
    std::fs::write(
        &check,
        format!("#!/bin/sh\necho ran >> {}\n", ran.display()),
    )
    .unwrap();
    chmod(&check, 0o757);
    add_to_agent(
        &w,
        &format!(
            "  health:\n    command: [{}]\n    interval: 1m\n    timeout: 5s\n",
            check.display()
        ),
    );
    w.start(&[]);
    let report = w.wait_json("health");
    let c = check.display();
    let reason = format!("refused {c}: {c} is writable by its group or others (mode 0757)");
    assert_eq!(report["ok"], false);
    assert_eq!(report["gpus_lost"], false);
    assert_eq!(report["reason"], reason);
    assert!(!ran.exists(), "the refused check ran");
    assert_eq!(w.runs(), 1, "prepare-data itself ran");
    w.wait_log("no success marker; it will not join");
    assert!(!w.marker("prepare_data_success").exists());
    assert!(w.log().contains(&reason), "{}", w.log());
}

/// The 2018 default, `<shared_dir>/prepare-data.py`, put there by a worker (here: writable by
/// everyone, in a shared directory as sticky as the stack's) before a new worker boots: that
/// worker's real agent refuses it, the master marks the instance PREPARE_FAILED and
/// `dtctl status` says why.
#[test]
fn dtctl_status_shows_why_a_workers_prepare_data_was_refused() {
    let mut c = Cluster::new();
    let job = format!(
        "  notify: none\n  ack: {{ host_worker_log: {}/host_worker_log, timeout: 10m }}",
        c.efs().display()
    );
    c.write_config(&c.config(0, 4, &[], &job));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);

    let efs = c.efs();
    chmod(&efs, 0o1777);
    let planted = efs.join("prepare-data.py");
    let ran = c.dir.path().join("planted-ran");
    std::fs::write(
        &planted,
        format!("#!/bin/sh\necho root >> {}\n", ran.display()),
    )
    .unwrap();
    chmod(&planted, 0o777);
    let config = c.dir.path().join("agent.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster: {CLUSTER}\nworkers: {{ launch_template: itest-worker-template, max: 4 }}\n\
             shared_dir: {}\nagent:\n  prepare_data: {}\n  imds_interval: 200ms\n",
            efs.display(),
            planted.display()
        ),
    )
    .unwrap();
    let imds = ImdsStandIn::with_identity(&ip, &id);
    let log = std::fs::File::create(c.dir.path().join("agent.log")).unwrap();
    let mut agent = (c.agent_command(&config, &ip, &id, &imds))
        .stderr(log)
        .spawn()
        .expect("dtd agent");

    c.wait_tag(&id, "PREPARE_FAILED");
    let p = planted.display();
    let printed = c.wait_status_text(&format!(
        "not started after 1 attempt(s): refused {p}: {p} is writable by its group or others \
         (mode 0777)"
    ));
    assert!(printed.contains(&id), "{printed}");
    assert!(!ran.exists(), "the planted program ran");
    assert!(c.hosts().is_empty());
    let _ = agent.kill();
    let _ = agent.wait();
}
