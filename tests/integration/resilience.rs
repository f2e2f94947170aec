//! What goes wrong: many pages, garbage on the shared directory, the AWS API going away, the
//! daemon killed mid-removal, bad input to the CLI.

use std::time::Duration;

use crate::support::*;

fn quiet_job(c: &Cluster) -> String {
    format!(
        "  notify: none\n  ack: {{ host_worker_log: {}/host_worker_log, timeout: 10m }}",
        c.efs().display()
    )
}

#[test]
fn more_than_a_thousand_workers_across_many_pages() {
    let mut c = Cluster::new();
    c.worker_extra = "  page_size: 10\n".into();
    // moto filters every instance on every page call: several seconds a page at this size. No
    // periodic listing after the first: every DescribeInstances call counted is the first's.
    let metrics = format!("127.0.0.1:{}", free_port());
    c.extra = format!("api_timeout: 60s\nresync: 10m\nmetrics: {{ listen: '{metrics}' }}\n");
    let job = quiet_job(&c);
    c.write_config(&c.config(0, 2000, &[], &job));
    // 105 reservations of 10: moto pages DescribeInstances by reservation.
    let mut launched = Vec::new();
    for _ in 0..105 {
        launched.extend(c.launch(10));
    }
    // moto draws private IPs at random from 10/8: two of 1,050 share one in about 3% of runs,
    // which EC2 never does. The second of such a pair is terminated, as if never launched.
    let mut ips = std::collections::BTreeSet::new();
    for (id, ip) in &launched {
        if !ips.insert(ip.clone()) {
            c.aws(&["ec2", "terminate-instances", "--instance-ids", id]);
        }
    }
    // After: the first of a pair is then the one instance alive at its IP.
    ips.iter().for_each(|ip| c.marker(ip));
    let workers = ips.len();
    c.start_dtd();
    wait_until(
        &format!("{workers} workers in the host file"),
        Duration::from_secs(300),
        || c.hosts().len() == workers,
    );
    // Each agent's hello names an instance the listing already holds: no call of its own.
    let (_, scraped) = prometheus::get(metrics.parse().unwrap(), "/metrics").expect("scraped");
    let calls = scraped
        .lines()
        .find(|l| l.starts_with("dt_aws_calls_total") && l.contains("\"DescribeInstances\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(
        calls,
        Some(11.0),
        "one call per page, not per instance or per agent"
    );
    // Status tags are written after the host file, in batches: wait for the last batch.
    // moto may answer this read with a 500 while dtd tags in another of its threads: "not yet".
    let queued = || {
        c.try_aws(&[
            "ec2",
            "describe-instances",
            "--filters",
            "Name=tag:elastic_worker_status,Values=ADD_QUEUED",
            "--query",
            "length(Reservations[].Instances[])",
        ])
    };
    let _ = wait_for(
        &format!("{workers} workers tagged ADD_QUEUED"),
        Duration::from_secs(120),
        queued,
        |seen| seen.as_deref() == Ok(workers.to_string().as_str()),
    );
}

/// With the 2018 protocol's marker files (`workers.reports: unsigned`): garbage names and files
/// are warned about once each and never get in a real marker's way. (With signed reports no
/// marker file is read at all.)
#[test]
fn garbage_in_the_shared_directory_is_ignored_with_a_warning() {
    let mut c = Cluster::new();
    c.worker_extra = "  reports: unsigned\n".into();
    let job = quiet_job(&c);
    c.write_config(&c.config(0, 8, &[], &job));
    let efs = c.efs();
    let (_bad_id, dir_ip) = c.launch(1).remove(0);
    let (fifo_id, fifo_ip) = c.launch(1).remove(0);
    let (id, ip) = c.launch(1).remove(0);
    std::fs::write(efs.join("prepare_data_success_not-an-ip"), "").unwrap();
    std::fs::write(efs.join("prepare_data_success_10.0.0.1;reboot"), "").unwrap();
    use std::os::unix::ffi::OsStrExt;
    let raw = std::ffi::OsStr::from_bytes(b"prepare_data_success_\xff\xfe");
    std::fs::write(efs.join(raw), "").unwrap();
    std::fs::create_dir(efs.join(format!("prepare_data_success_{dir_ip}"))).unwrap();
    let fifo = efs.join(format!("prepare_data_failed_{fifo_ip}"));
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::write(efs.join("ack"), b"\xff not a number").unwrap();
    c.append_log("1 ADDED 10.9.9.9 2026-11-22 10:00:00\n2 ADD");
    // The worker's own prepare-data script, as in 2018.
    std::fs::write(efs.join(format!("prepare_data_success_{ip}")), "").unwrap();
    c.start_dtd();

    c.wait_hosts("the worker with a real marker to join", |h| {
        h == [ip.clone()]
    });
    c.wait_tag(&fifo_id, "PREPARING");
    let log = c.dtd_log();
    for needle in [
        "not an IP address",
        "not UTF-8",
        "not a regular file",
        "ack file does not hold",
    ] {
        assert!(log.contains(needle), "no warning `{needle}` in:\n{log}");
    }
    assert_eq!(
        log.matches("not an IP address").count(),
        2,
        "each bad name warned once"
    );
    // The truncated log line is completed later and then counts.
    c.append_log(&format!("ED {ip} 2026-11-22 10:00:01\n"));
    c.wait_tag(&id, "ADDED");
}

#[test]
fn the_api_going_away_holds_the_ground_and_recovery_resumes() {
    let mut c = Cluster::new();
    c.extra = "api_timeout: 2s\n".into();
    let job = quiet_job(&c);
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let workers = c.launch(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    c.wait_hosts("both workers to join", |h| h.len() == 2);
    let before = c.hosts();

    c.moto.pause();
    wait_until(
        "the failure to show in status",
        Duration::from_secs(40),
        || {
            let s = c.try_status();
            s["sources"][0]["ok"] == false && s["holds"].as_array().is_some_and(|h| !h.is_empty())
        },
    );
    assert_eq!(c.hosts(), before, "nothing removed on a failed view");
    let text = stdout(&c.dtctl(&["status"]));
    assert!(
        text.contains("HOLDING") && text.contains("FAILED"),
        "{text}"
    );
    assert!(c.journal().iter().any(|e| e["kind"] == "source_failed"));

    c.moto.resume();
    wait_until("recovery", Duration::from_secs(40), || {
        c.journal().iter().any(|e| e["kind"] == "source_recovered")
    });
    assert_eq!(c.hosts(), before);
    c.delete_elastic_tag(&workers[0].0);
    c.wait_hosts("a removal after recovery", |h| h == [workers[1].1.clone()]);
}

#[test]
fn dtd_killed_mid_removal_converges_and_terminates_once() {
    let mut c = Cluster::new();
    let job = quiet_job(&c);
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let workers = c.launch(3);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    c.wait_hosts("three workers to join", |h| h.len() == 3);
    let (leaving, staying) = workers.split_at(2);

    for (id, _) in leaving {
        c.delete_elastic_tag(id);
    }
    // SIGKILL at assorted moments while the removal is decided, acknowledged and carried out.
    for (round, delay_ms) in [40u64, 170, 330, 520, 90, 700].into_iter().enumerate() {
        std::thread::sleep(Duration::from_millis(delay_ms));
        c.kill_dtd();
        c.start_dtd();
        if round == 2 {
            // A dtd started again first hears its agents (up to a few seconds): the removal's
            // generation is acknowledged once written, and the kills go on while it is let go.
            c.wait_hosts("the leaving workers out", |h| h == [staying[0].1.clone()]);
            assert!(c
                .dtctl(&["ack", c.written_generation().trim()])
                .status
                .success());
        }
    }
    for (id, _) in leaving {
        wait_until("termination", Duration::from_secs(30), || {
            c.state_of(id) != "running"
        });
    }
    c.wait_hosts("only the staying worker", |h| h == [staying[0].1.clone()]);
    for (id, _) in leaving {
        // Journaled once EC2 answered, which can be just after the state changed.
        c.wait_events("terminated", id, 1);
    }
    c.kill_dtd();
    c.start_dtd();
    // The restarted daemon's passes: a second termination would be journaled in them.
    c.wait_passes(3);
    for (id, _) in leaving {
        assert_eq!(
            c.events_of("terminated", id),
            1,
            "exactly one termination for {id}"
        );
        assert_eq!(c.tag(id, STATUS).as_deref(), Some("REMOVED"));
    }
    assert_eq!(c.state_of(&staying[0].0), "running");
    assert_eq!(
        c.tag(&staying[0].0, STATUS).as_deref(),
        Some("ADDED"),
        "acknowledged with the ack"
    );
}

#[test]
fn sigterm_stops_cleanly_and_a_second_daemon_is_refused() {
    let mut c = Cluster::new();
    let job = quiet_job(&c);
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    wait_until("a first pass", Duration::from_secs(10), || {
        c.state_dir().join("status.json").exists()
    });

    let second = std::process::Command::new(env!("CARGO_BIN_EXE_dtd"))
        .args(["run", "--config"])
        .arg(c.config_path())
        .envs(aws_env(&c.moto.endpoint()))
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        stderr(&second).contains("another dtd"),
        "{}",
        stderr(&second)
    );

    let mut child = c.dtd.take().unwrap();
    signal(child.id() as i32, "TERM");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "dtd did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(c.dtd_log().contains("dtd stopping"));
}

#[test]
fn the_cli_explains_what_is_wrong() {
    let mut c = Cluster::new();
    c.extra = "api_timeout: 2s\n".into();
    let job = quiet_job(&c);
    c.write_config(&c.config(0, 8, &[], &job));
    let out = c.dtctl(&["status"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("dtd has not run for cluster itest"),
        "{}",
        stderr(&out)
    );

    let out = c.dtctl(&["remove", "not-a-host"]);
    assert!(
        stderr(&out).contains("not a private IP or an instance id"),
        "{}",
        stderr(&out)
    );

    let bad = c.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        c.config(0, 8, &[], &job)
            .replace("  max: 8", "  max: 8\n  mx: 3"),
    )
    .unwrap();
    let out = c.dtctl(&["config", "check", &path_str(&bad)]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown field `mx`") && stderr(&out).contains("line 6"),
        "{}",
        stderr(&out)
    );
    let out = c.dtctl(&["config", "check", &path_str(&c.config_path())]);
    assert!(
        stdout(&out).contains("ok (cluster itest"),
        "{}",
        stdout(&out)
    );

    c.moto.pause();
    let out = c.dtctl(&["add"]);
    c.moto.resume();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("RunInstances"), "{}", stderr(&out));
}
