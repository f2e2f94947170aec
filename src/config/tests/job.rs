//! `job.stall`, `job.stragglers` and `agent.health`.

use super::*;

/// The good file with lines added under `job:` (after its `ack`).
fn with_job(lines: &str) -> String {
    GOOD.replace(
        "  ack: { host_worker_log: /efs/host_worker_log, timeout: 10m }\n",
        &format!("  ack: {{ host_worker_log: /efs/host_worker_log, timeout: 10m }}\n{lines}"),
    )
}

#[test]
fn stall_detection_is_off_unless_configured_and_the_progress_file_defaults_to_the_shared_dir() {
    let cfg = Config::parse(GOOD).unwrap();
    assert_eq!(cfg.job.stall, None);
    assert_eq!(cfg.job.stall_command(), None);
    assert_eq!(cfg.job.progress, Path::new("/efs/progress"));
    let cfg = Config::parse(&with_job(
        "  progress: /efs/job/progress.json\n  stall: { after: 10m }\n",
    ))
    .unwrap();
    let stall = cfg.job.stall.as_ref().unwrap();
    assert_eq!(stall.after, Duration::from_secs(600));
    assert_eq!(cfg.job.progress, Path::new("/efs/job/progress.json"));
    // Signal mode has no command to run: the stall is journaled, shown and alerted only.
    assert_eq!(cfg.job.stall_command(), None);
}

#[test]
fn the_stall_command_is_its_own_or_the_notify_command() {
    let cfg = Config::parse(&with_job(
        "  stall: { after: 3s, command: [/usr/local/bin/page, --team, ml] }\n",
    ))
    .unwrap();
    let own: &[String] = &["/usr/local/bin/page".into(), "--team".into(), "ml".into()];
    assert_eq!(cfg.job.stall_command(), Some(own));
    let hook = with_job("  stall: { after: 3s }\n").replace(
        "{ signal: SIGUSR1, pidfile: /efs/job.pid }",
        "{ command: [/bin/echo, hi] }",
    );
    let cfg = Config::parse(&hook).unwrap();
    let notify: &[String] = &["/bin/echo".into(), "hi".into()];
    assert_eq!(cfg.job.stall_command(), Some(notify));
}

#[test]
fn a_bad_stall_is_named_with_its_line() {
    let e = error_of(&with_job("  stall: { after: soon }\n"));
    assert!(
        e.contains("job.stall: after: bad duration `soon`") && e.contains("line 11"),
        "{e}"
    );
    let e = error_of(&with_job("  stall: { after: 0s }\n"));
    assert!(
        e.contains("greater than zero") && e.contains("line 11"),
        "{e}"
    );
    let e = error_of(&with_job("  stall: { command: [x] }\n"));
    assert!(e.contains("after") && e.contains("line 11"), "{e}");
    let e = error_of(&with_job("  stall: { after: 10m, every: 1m }\n"));
    assert!(e.contains("every") && e.contains("line 11"), "{e}");
    let e = error_of(&with_job("  stall: { after: 10m, command: [] }\n"));
    assert!(
        e.contains("command must be") && e.contains("line 11"),
        "{e}"
    );
    let e = error_of(&with_job("  progress: progress\n"));
    assert!(e.contains("job.progress") && e.contains("line 11"), "{e}");
}

#[test]
fn stragglers_take_the_ratio_and_steps_as_written_and_refuse_nonsense_naming_the_key() {
    let cfg = Config::parse(&with_job(
        "  stragglers: { action: drain, ratio: 1.5, steps: 20 }\n",
    ))
    .unwrap();
    let s = cfg.job.stragglers;
    assert_eq!(
        (s.action, s.ratio, s.steps),
        (StragglerAction::Drain, 1.5, 20)
    );
    for (bad, said) in [
        ("{ ratio: 1.0 }", "ratio: 1 is not above 1"),
        ("{ ratio: .nan }", "is not above 1"),
        ("{ steps: 0 }", "steps: 0 would call"),
        ("{ action: kill }", "unknown variant `kill`"),
        ("{ ratios: 2 }", "unknown field `ratios`"),
    ] {
        let e = error_of(&with_job(&format!("  stragglers: {bad}\n")));
        assert!(e.contains(said) && e.contains("line 11"), "{bad}: {e}");
    }
}

#[test]
fn health_is_off_unless_configured_and_takes_defaults() {
    assert!(Config::parse(GOOD).unwrap().agent.health.is_none());
    let cfg = Config::parse(&format!(
        "{GOOD}agent:\n  health:\n    command: [/opt/dt/gpu_health.py, --no-xid]\n"
    ))
    .unwrap();
    let h = cfg.agent.health.unwrap();
    assert_eq!(h.command, ["/opt/dt/gpu_health.py", "--no-xid"]);
    assert_eq!(h.interval, Duration::from_secs(300));
    assert_eq!(h.timeout, Duration::from_secs(120));
    // The success marker waits for the first check: its timeout is part of the agent's limit.
    let expected = Duration::from_secs(3 * 3600 + 2 * 10 + 120 + 600);
    assert_eq!(cfg.workers.prepare_timeout, expected);
}

#[test]
fn a_bad_health_check_is_named_with_its_key_and_line() {
    let with = |body: &str| format!("{GOOD}agent:\n  timeout: 5m\n  health:\n{body}");
    let e = error_of(&with("    command: []\n"));
    assert!(
        e.contains("agent.health.command must name a program") && e.contains("line 15"),
        "{e}"
    );
    let e = error_of(&with("    command: ['']\n"));
    assert!(e.contains("agent.health.command"), "{e}");
    let e = error_of(&with("    interval: 1m\n"));
    assert!(e.contains("command"), "{e}");
    let e = error_of(&with(
        "    command: [check]\n    interval: 1m\n    timeout: 1m\n",
    ));
    assert!(
        e.contains("agent.health.timeout (1m) must be shorter than agent.health.interval (1m)")
            && e.contains("line 17"),
        "{e}"
    );
    // `timeout` is also a key of `agent`: the message names the one inside `health`.
    let e = error_of(&with("    command: [check]\n    timeout: soon\n"));
    assert!(
        e.contains("agent.health.timeout: bad duration `soon`") && e.contains("line 15"),
        "{e}"
    );
    let e = error_of(&with("    command: [check]\n    every: 1m\n"));
    assert!(e.contains("every") && e.contains("line 16"), "{e}");
}

#[test]
fn a_mistake_in_notify_or_owner_names_its_key_and_what_is_wrong() {
    let signal = "notify: { signal: SIGUSR1, pidfile: /efs/job.pid }";
    for (from, to, said) in [
        (
            signal,
            "notify: { signl: SIGUSR1, pidfile: /efs/job.pid }",
            "job.notify: unknown field `signl`",
        ),
        (
            signal,
            "notify: sometimes",
            "job.notify: unknown notify `sometimes`",
        ),
        (signal, "notify: [a]", "job.notify: a list is not a notify"),
        (
            signal,
            "notify: { signal: SIGUSR1 }",
            "job.notify needs exactly",
        ),
        (
            "  notify:",
            "  owner: { name: bob }\n  notify:",
            "job.owner: a mapping is neither a uid nor a user name",
        ),
        (
            "  notify:",
            "  owner: -3\n  notify:",
            "job.owner: -3 is not a uid",
        ),
        (
            "  notify:",
            "  owner: \"b b\"\n  notify:",
            "job.owner: `b b` is neither",
        ),
    ] {
        let e = error_of(&GOOD.replace(from, to));
        assert!(e.contains(said), "{to}: {e}");
        assert!(!e.contains("did not match any variant"), "{to}: {e}");
    }
    let owned = Config::parse(&GOOD.replace("  notify:", "  owner: 1000\n  notify:"));
    assert!(owned.is_ok(), "{owned:?}");
    let named = Config::parse(&GOOD.replace("  notify:", "  owner: alice\n  notify:"));
    assert!(named.is_ok(), "{named:?}");
}
