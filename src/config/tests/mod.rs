//! The configuration file's parsing, checks and defaults.

use super::*;
use crate::model::EventKind;

const GOOD: &str = "cluster: demo
workers:
  launch_template: lt-0abc
  min: 1
  max: 4
  base_hosts: [10.0.0.5]
shared_dir: /efs
job:
  notify: { signal: SIGUSR1, pidfile: /efs/job.pid }
  ack: { host_worker_log: /efs/host_worker_log, timeout: 10m }
interval: 1s
";

#[test]
fn good_file_gets_defaults() {
    let cfg = Config::parse(GOOD).unwrap();
    assert_eq!(cfg.workers.elastic_tag, "demo-aws-dl-cfn-elastic-worker");
    assert_eq!(cfg.hostfiles[0].path, PathBuf::from("/efs/host_worker"));
    assert_eq!(cfg.interval, Duration::from_secs(1));
    assert_eq!(cfg.job.ack.timeout, Duration::from_secs(600));
    assert_eq!(cfg.job.ack.file, Path::new("/efs/ack"));
    assert_eq!(cfg.state_dir, Path::new("/efs/.dt/demo"));
    assert_eq!(cfg.workers.tags.get("NodeType").unwrap(), "Worker");
    assert!(matches!(cfg.job.notify, Notify::Signal { .. }));
}

#[test]
fn shared_fs_id_must_be_an_efs_id() {
    let with =
        |id: &str| GOOD.replace("interval: 1s", &format!("interval: 1s\nshared_fs_id: {id}"));
    let cfg = Config::parse(&with("fs-0123abcd")).unwrap();
    assert_eq!(cfg.shared_fs_id.as_deref(), Some("fs-0123abcd"));
    assert!(Config::parse(&with("fs-0123456789abcdef0")).is_ok());
    assert_eq!(cfg.shared_fs_refresh, Duration::from_secs(300));
    let e = error_of(&GOOD.replace("interval: 1s", "interval: 1s\nshared_fs_refresh: 0s"));
    assert!(
        e.contains("shared_fs_refresh") && e.contains("line 12"),
        "{e}"
    );
    for bad in ["fs-0123ABCD", "fs-123", "fsap-0123abcd", "'fs-0123abcd/..'"] {
        let e = error_of(&with(bad));
        assert!(e.contains("shared_fs_id"), "{bad}: {e}");
    }
}

/// The good file with one change, which must parse.
fn good_with(from: &str, to: &str) -> Config {
    Config::parse(&GOOD.replace(from, to)).unwrap()
}

fn error_of(text: &str) -> String {
    Config::parse(text).unwrap_err().to_string()
}

#[test]
fn unknown_key_is_named_with_line() {
    let e = error_of(&GOOD.replace("  min: 1", "  minimum: 1"));
    assert!(e.contains("minimum") && e.contains("line 4"), "{e}");
}

#[test]
fn bad_values_name_key_and_line() {
    let e = error_of(&GOOD.replace("interval: 1s", "interval: fast"));
    assert!(e.contains("interval") && e.contains("line 11"), "{e}");
    let e = error_of(&GOOD.replace("[10.0.0.5]", "[10.0.0.300]"));
    assert!(e.contains("base_hosts") && e.contains("line 6"), "{e}");
    let e = error_of(&GOOD.replace("max: 4", "max: 0"));
    assert!(e.contains("workers") && e.contains("max"), "{e}");
    let e = error_of(&GOOD.replace("SIGUSR1", "SIGNOPE"));
    assert!(e.contains("SIGNOPE") && e.contains("line 9"), "{e}");
    let e = error_of(&GOOD.replace("cluster: demo", "cluster: ../etc"));
    assert!(e.contains("cluster") && e.contains("line 1"), "{e}");
    let e = error_of(&GOOD.replace("shared_dir: /efs", "shared_dir: efs"));
    assert!(e.contains("shared_dir") && e.contains("line 7"), "{e}");
}

#[test]
fn min_above_max_is_refused() {
    let e = error_of(&GOOD.replace("min: 1", "min: 9"));
    assert!(e.contains("min (9) is greater than max (4)"), "{e}");
}

#[test]
fn prices_are_dollars_an_hour_above_zero() {
    let priced =
        |p: &str| GOOD.replace("min: 1", &format!("min: 1\n  prices: {{ g5.xlarge: {p} }}"));
    let cfg = Config::parse(&priced("1.006")).expect("a price");
    assert_eq!(cfg.workers.prices.get("g5.xlarge"), Some(&1.006));
    for bad in ["0", "-1", ".nan", ".inf"] {
        let e = error_of(&priced(bad));
        assert!(
            e.contains("prices.g5.xlarge") && e.contains("dollars an hour"),
            "{bad}: {e}"
        );
    }
    assert!(error_of(&priced("cheap")).contains("prices"));
}

#[test]
fn notify_forms() {
    let cfg = good_with(
        "{ signal: SIGUSR1, pidfile: /efs/job.pid }",
        "{ command: [/bin/echo, hi] }",
    );
    assert_eq!(
        cfg.job.notify,
        Notify::Command(vec!["/bin/echo".into(), "hi".into()])
    );
    let cfg = good_with("{ signal: SIGUSR1, pidfile: /efs/job.pid }", "none");
    assert_eq!(cfg.job.notify, Notify::None);
    let e = error_of(&GOOD.replace("pidfile: /efs/job.pid", "command: [x]"));
    assert!(e.contains("exactly"), "{e}");
}

#[test]
fn hostfile_templates_are_read_and_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.tmpl");
    std::fs::write(&good, "# workers\n{ip} slots={slots}\n").unwrap();
    let with = |t: &Path| {
        GOOD.replace(
            "interval: 1s",
            &format!(
                "interval: 1s\nhostfiles:\n  - {{ path: /efs/h, template: {} }}",
                t.display()
            ),
        )
    };
    let cfg = Config::parse(&with(&good)).unwrap();
    let hosts = [crate::protocol::host_files::Host {
        ip: "10.0.0.9".parse().unwrap(),
        slots: 4,
    }];
    let t = cfg.hostfiles[0].template.as_ref().unwrap();
    assert_eq!(t.render(&hosts), "# workers\n10.0.0.9 slots=4\n");

    let bad = dir.path().join("bad.tmpl");
    std::fs::write(&bad, "# workers\n{ip} slots={slot}\n").unwrap();
    let e = error_of(&with(&bad));
    assert!(
        e.contains("hostfiles[0].template")
            && e.contains("bad.tmpl line 2")
            && e.contains("line 13"),
        "{e}"
    );
    let e = error_of(&with(&dir.path().join("missing.tmpl")));
    assert!(e.contains("cannot read"), "{e}");
    let e = error_of(&GOOD.replace(
        "interval: 1s",
        "interval: 1s\nhostfiles:\n  - { path: /efs/h, format: mpi, template: /x }",
    ));
    assert!(e.contains("exactly one of format"), "{e}");
}

#[test]
fn prepare_timeout_defaults_to_the_agents_limit_plus_a_margin() {
    let cfg = Config::parse(GOOD).unwrap();
    // 1h × 3 attempts + 2 pauses of 10s + the 10m margin.
    let expected = Duration::from_secs(3 * 3600 + 2 * 10 + 600);
    assert_eq!(cfg.workers.prepare_timeout, expected);
    let cfg = Config::parse(&format!(
        "{GOOD}agent:\n  timeout: 20m\n  attempts: 2\n  retry_delay: 1m\n"
    ))
    .unwrap();
    assert_eq!(
        cfg.workers.prepare_timeout,
        Duration::from_secs(41 * 60 + 600)
    );
    let cfg = good_with("  max: 4", "  max: 4\n  prepare_timeout: 5h");
    assert_eq!(cfg.workers.prepare_timeout, Duration::from_secs(5 * 3600));
}

#[test]
fn a_prepare_timeout_the_agent_or_the_hook_cannot_honour_is_refused() {
    let e = error_of(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: 30m"));
    assert!(
        e.contains("workers.prepare_timeout (30m)") && e.contains("3h 20s") && e.contains("line 6"),
        "{e}"
    );
    let e = error_of(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: 3d"));
    assert!(e.contains("prepare_timeout") && e.contains("48h"), "{e}");
    let e = error_of(&GOOD.replace("  max: 4", "  max: 4\n  prepare_timeout: soon"));
    assert!(e.contains("prepare_timeout: bad duration `soon`"), "{e}");
}

#[test]
fn slots_by_type() {
    let cfg = good_with(
        "  max: 4",
        "  max: 4\n  slots: { p3.16xlarge: 8, default: 2 }",
    );
    assert_eq!(cfg.workers.slots.for_type("p3.16xlarge"), 8);
    assert_eq!(cfg.workers.slots.for_type("g5.xlarge"), 2);
}

#[test]
fn resync_defaults_to_a_minute_with_events_and_to_the_interval_without() {
    let cfg = Config::parse(GOOD).unwrap();
    assert_eq!(
        cfg.resync,
        Duration::from_secs(1),
        "no queue: every interval"
    );
    assert_eq!(cfg.shared_poll, Duration::from_millis(200));
    let queue = "interval: 1s\nevents:\n  queue_url: https://sqs.us-east-1.amazonaws.com/1/q";
    assert_eq!(
        good_with("interval: 1s", queue).resync,
        Duration::from_secs(60)
    );
    let set = good_with(
        "interval: 1s",
        "interval: 1s\nresync: 5m\nshared_poll: 50ms",
    );
    assert_eq!(
        (set.resync, set.shared_poll),
        (Duration::from_secs(300), Duration::from_millis(50))
    );
    let e = error_of(&GOOD.replace("interval: 1s", "interval: 1s\nresync: 500ms"));
    assert!(
        e.contains("resync must be at least interval") && e.contains("line 12"),
        "{e}"
    );
    let e = error_of(&GOOD.replace("interval: 1s", "interval: 1s\nshared_poll: 5ms"));
    assert!(e.contains("shared_poll must be within"), "{e}");
}

#[test]
fn metrics_are_off_unless_an_address_is_given() {
    assert_eq!(Config::parse(GOOD).unwrap().metrics.listen, None);
    let cfg = good_with(
        "interval: 1s",
        "interval: 1s\nmetrics: { listen: '127.0.0.1:9464' }",
    );
    assert_eq!(cfg.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
    let e = error_of(&GOOD.replace(
        "interval: 1s",
        "interval: 1s\nmetrics: { listen: 'localhost:9464' }",
    ));
    assert!(e.starts_with("metrics: ") && e.contains("line 12"), "{e}");
    assert!(
        e.contains("`localhost:9464` is not an IP and a port"),
        "{e}"
    );
}

#[test]
fn health_policy_defaults_and_forms() {
    let cfg = Config::parse(GOOD).unwrap();
    assert_eq!(cfg.health.max_unhealthy, MaxUnhealthy::Percent(20));
    assert_eq!(cfg.health.leave, HealthLeave::Drain);
    assert!(!cfg.workers.replace_unhealthy);
    let with = |h: &str| GOOD.replace("interval: 1s", &format!("interval: 1s\nhealth: {h}"));
    let cfg = Config::parse(&with("{ max_unhealthy: 3, leave: immediate }")).unwrap();
    assert_eq!(cfg.health.max_unhealthy, MaxUnhealthy::Count(3));
    assert_eq!(cfg.health.leave, HealthLeave::Immediate);
    let cfg = Config::parse(&with("{ max_unhealthy: 50% }")).unwrap();
    assert_eq!(cfg.health.max_unhealthy, MaxUnhealthy::Percent(50));
    for bad in ["0%", "101%", "half", "-1"] {
        let e = error_of(&with(&format!("{{ max_unhealthy: \"{bad}\" }}")));
        assert!(
            e.contains("max_unhealthy") && e.contains("line 12"),
            "{bad}: {e}"
        );
    }
    let e = error_of(&with("{ leave: later }"));
    assert!(e.contains("leave") && e.contains("line 12"), "{e}");
}

#[test]
fn a_share_allows_at_least_one_unhealthy_worker() {
    assert_eq!(MaxUnhealthy::Percent(20).allowed(3), 1);
    assert_eq!(MaxUnhealthy::Percent(20).allowed(10), 2);
    assert_eq!(MaxUnhealthy::Percent(20).allowed(1000), 200);
    assert_eq!(MaxUnhealthy::Count(0).allowed(10), 0);
}

#[test]
fn replace_unhealthy_needs_a_launch_template() {
    let cfg = Config::parse(&GOOD.replace("  min: 1\n", "  min: 1\n  replace_unhealthy: true\n"));
    assert!(cfg.unwrap().workers.replace_unhealthy);
    let group = GOOD
        .replace("launch_template: lt-0abc", "auto_scaling_group: g")
        .replace("  min: 1\n", "  min: 1\n  replace_unhealthy: true\n");
    let e = error_of(&group);
    assert!(
        e.contains("replace_unhealthy") && e.contains("launch_template"),
        "{e}"
    );
    // A group worker's replacement is its group's: no template needed.
    let interrupted = group.replace("replace_unhealthy", "replace_interrupted");
    assert!(
        Config::parse(&interrupted)
            .unwrap()
            .workers
            .replace_interrupted
    );
    let cfg = Config::parse(&GOOD.replace("  min: 1\n", "  min: 1\n  replace_interrupted: true\n"));
    assert!(cfg.unwrap().workers.replace_interrupted);
}

#[test]
fn prepare_data_defaults_outside_the_shared_directory_and_programs_take_a_pin() {
    let cfg = Config::parse(GOOD).unwrap();
    // Workers write the shared directory and dtd agent runs this as root (docs/shared-directory.md).
    assert_eq!(
        cfg.agent.prepare_data,
        Path::new("/usr/local/libexec/dt/prepare-data")
    );
    assert_eq!(cfg.agent.prepare_data_sha256, None);
    let pin = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    let cfg = Config::parse(&format!(
        "{GOOD}agent:\n  prepare_data: /opt/p\n  prepare_data_sha256: {pin}\n  health:\n    \
         command: [/opt/check]\n    sha256: {}\n",
        pin.to_uppercase()
    ))
    .unwrap();
    assert_eq!(cfg.agent.prepare_data_sha256.unwrap().to_string(), pin);
    assert_eq!(cfg.agent.health.unwrap().sha256.unwrap().to_string(), pin);
}

#[test]
fn a_pin_that_is_not_a_sha256_is_named_with_its_key_and_line() {
    let e = error_of(&format!("{GOOD}agent:\n  prepare_data_sha256: abc\n"));
    assert!(
        e.contains("prepare_data_sha256")
            && e.contains("`abc` is not a SHA-256 digest")
            && e.contains("line 13"),
        "{e}"
    );
    let e = error_of(&format!(
        "{GOOD}agent:\n  health:\n    command: [/opt/check]\n    sha256: sha256:abc\n"
    ));
    // serde places an error inside `health` at the section's first key, as for its timeout.
    assert!(
        e.contains("agent.health.sha256: `sha256:abc` is not") && e.contains("line 14"),
        "{e}"
    );
}

#[test]
fn the_journal_limits_take_sizes_with_units_and_refuse_what_cannot_work() {
    let with = |journal: &str| Config::parse(&format!("{GOOD}{journal}\n"));
    let cfg = with("").unwrap();
    assert_eq!((cfg.journal.max_size, cfg.journal.keep), (64 << 20, 4));
    let cfg = with("journal: { max_size: 512KiB, keep: 2 }").unwrap();
    assert_eq!((cfg.journal.max_size, cfg.journal.keep), (512 << 10, 2));
    assert_eq!(
        with("journal: { max_size: 1G }").unwrap().journal.max_size,
        1 << 30
    );
    assert_eq!(
        with("journal: { max_size: 100000 }")
            .unwrap()
            .journal
            .max_size,
        100_000
    );
    for (bad, says) in [
        ("journal: { max_size: 1KiB }", "at least 64KiB"),
        ("journal: { max_size: 10 parsecs }", "bad size `10 parsecs`"),
        ("journal: { max_size: 99999999999999999999G }", "bad size"),
        ("journal: { keep: 0 }", "keep: 0 is not between 1 and 100"),
        ("journal: { rotate: daily }", "unknown field `rotate`"),
    ] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

mod alerts;
mod capacity;
mod job;
mod launcher;

#[test]
fn join_batch_defaults_to_none_and_refuses_an_hour_or_more() {
    let with = |join: &str| format!("{GOOD}{join}\n");
    assert_eq!(Config::parse(GOOD).unwrap().join.batch, Duration::ZERO);
    let cfg = Config::parse(&with("join: { batch: 30s }")).unwrap();
    assert_eq!(cfg.join.batch, Duration::from_secs(30));
    let e = error_of(&with("join: { batch: 2h }"));
    assert!(e.contains("batch: 2h is longer than an hour"), "{e}");
    let e = error_of(&with("join: { batch: soon }"));
    assert!(e.contains("batch:"), "{e}");
}

#[test]
fn join_at_checkpoint_waits_at_most_half_an_hour_and_sizes_ascend_within_max() {
    let with = |join: &str| format!("{GOOD}{join}\n");
    let join = Config::parse(GOOD).unwrap().join;
    assert_eq!(
        (join.at_checkpoint, join.max_wait),
        (false, Duration::from_secs(1800))
    );
    assert!(join.sizes.is_empty());
    let cfg = Config::parse(&with(
        "join: { at_checkpoint: true, max_wait: 5m, sizes: [2, 4] }",
    ));
    let join = cfg.unwrap().join;
    assert_eq!(
        (join.at_checkpoint, join.max_wait),
        (true, Duration::from_secs(300))
    );
    assert_eq!(join.sizes, [2, 4]);
    for (bad, says) in [
        (
            "join: { sizes: [4, 2] }",
            "sizes: list the allowed world sizes",
        ),
        (
            "join: { sizes: [0, 2] }",
            "sizes: list the allowed world sizes",
        ),
        ("join: { sizes: [] }", "sizes: list the allowed world sizes"),
        (
            "join: { sizes: [2, 8] }",
            "join.sizes names 8 workers, more than workers.max (4)",
        ),
        ("join: { max_wait: soon }", "max_wait:"),
        ("join: { at_checkpoint: maybe }", "at_checkpoint"),
    ] {
        let e = error_of(&with(bad));
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn disruption_budget_is_a_number_or_a_share_and_unlimited_by_default() {
    let with = |d: &str| format!("{GOOD}{d}\n");
    let budget = |d: &str| Config::parse(&with(d)).unwrap().disruption.budget;
    assert_eq!(
        Config::parse(GOOD).unwrap().disruption.budget,
        Budget::Unlimited
    );
    assert_eq!(budget("disruption: { budget: 1 }"), Budget::Workers(1));
    assert_eq!(
        budget("disruption: { budget: \"10%\" }"),
        Budget::Percent(10)
    );
    assert_eq!(budget("disruption: { budget: 0 }"), Budget::Workers(0));
    for bad in ["-1", "\"101%\"", "lots", "\"1.5\""] {
        let e = error_of(&with(&format!("disruption: {{ budget: {bad} }}")));
        assert!(e.contains("is not a number of workers"), "{bad}: {e}");
    }
    assert!(Config::parse(GOOD).unwrap().disruption.windows.is_empty());
    let w = "disruption: { windows: [ { schedule: \"0 22 * * SAT\", duration: 6h } ] }";
    let windows = Config::parse(&with(w)).unwrap().disruption.windows;
    assert_eq!(windows[0].schedule.text, "0 22 * * SAT");
    assert_eq!(windows[0].duration, Duration::from_secs(6 * 3600));
    for (bad, says) in [
        (
            "{ schedule: \"0 22 * *\", duration: 1h }",
            "is not a cron schedule of five fields",
        ),
        (
            "{ schedule: \"0 0 22 * * *\", duration: 1h }",
            "is not a cron schedule",
        ),
        (
            "{ schedule: \"61 * * * *\", duration: 1h }",
            "is not a cron schedule",
        ),
        (
            "{ schedule: \"0 22 * * *\", duration: 8d }",
            "duration: at most 7 days",
        ),
        ("{ schedule: \"0 22 * * *\" }", "missing field `duration`"),
    ] {
        let e = error_of(&with(&format!("disruption: {{ windows: [ {bad} ] }}")));
        assert!(e.contains(says), "{bad}: {e}");
    }
    assert_eq!(Budget::Percent(10).allowed(5), Some(1), "rounded up");
    assert_eq!(Budget::Percent(50).allowed(4), Some(2));
    assert_eq!(Budget::Unlimited.allowed(4), None);
}
