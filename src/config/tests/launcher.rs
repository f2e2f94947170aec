//! `job.launcher`: torchrun, its strategies, and what it refuses.

use super::*;

/// GOOD with a `job.launcher` whose lines (after `torchrun` and `script`) are `more`.
fn with_launcher(more: &str) -> String {
    GOOD.replace(
        "  ack: {",
        &format!(
            "  launcher:\n    torchrun: [/opt/venv/bin/torchrun]\n    script: [/efs/train.py,--epochs,90]\n{more}  ack: {{"
        ),
    )
}

#[test]
fn a_launcher_gets_its_defaults() {
    let cfg = Config::parse(&with_launcher("")).unwrap();
    let l = cfg.job.launcher.unwrap();
    assert_eq!(l.torchrun, ["/opt/venv/bin/torchrun"]);
    assert_eq!(l.script, ["/efs/train.py", "--epochs", "90"]);
    assert_eq!(l.nproc_per_node.to_string(), "gpu");
    assert_eq!(l.rdzv.port, 29400);
    assert_eq!(l.max_restarts(), 0);
    assert_eq!(l.stop.signal, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(l.stop.grace, Duration::from_secs(30));
    assert_eq!(l.backoff, Duration::from_secs(5));
    assert_eq!(l.silent_after, Duration::from_secs(30));
    assert!(Config::parse(GOOD).unwrap().job.launcher.is_none());
    let more = "    nproc_per_node: 8\n    rdzv: { port: 29500 }\n    stop: { signal: SIGINT, grace: 2m }\n    env: { NCCL_DEBUG: WARN }\n";
    let l = Config::parse(&with_launcher(more))
        .unwrap()
        .job
        .launcher
        .unwrap();
    assert_eq!(l.nproc_per_node.to_string(), "8");
    assert_eq!(
        (l.rdzv.port, l.stop.grace),
        (29500, Duration::from_secs(120))
    );
    assert_eq!(l.stop.signal, nix::sys::signal::Signal::SIGINT);
    assert_eq!(l.env["NCCL_DEBUG"], "WARN");
}

#[test]
fn the_elastic_strategy_gets_its_defaults_and_a_large_restart_budget() {
    let launcher = |more: &str| {
        Config::parse(&with_launcher(more))
            .unwrap()
            .job
            .launcher
            .unwrap()
    };
    let generation = launcher("");
    assert_eq!(generation.strategy, crate::config::Strategy::Generation);
    assert_eq!((generation.elastic(), generation.max_restarts()), (None, 0));
    let l = launcher("    strategy: elastic\n");
    let e = l.elastic().unwrap();
    assert_eq!(
        (e.min_nodes, e.max_nodes, e.last_call),
        (1, 1024, Duration::from_secs(3))
    );
    assert_eq!(l.max_restarts(), 1000);
    let more = "    strategy: elastic\n    elastic: { min_nodes: 2, last_call: 10s }\n    max_restarts: 50\n";
    let l = launcher(more);
    let e = l.elastic().unwrap();
    assert_eq!(
        (e.min_nodes, e.max_nodes, e.last_call.as_secs()),
        (2, 1024, 10)
    );
    assert_eq!(l.max_restarts(), 50);
}

#[test]
fn a_bad_launcher_is_refused_naming_its_key() {
    for (more, key) in [
        ("    nproc_per_node: 0\n", "job.launcher.nproc_per_node"),
        ("    nproc_per_node: many\n", "job.launcher.nproc_per_node"),
        (
            "    rdzv: { port: 22 }\n",
            "job.launcher.rdzv.port: 22 is a privileged port",
        ),
        (
            "    stop: { signal: SIGNOPE }\n",
            "unknown signal `SIGNOPE`",
        ),
        (
            "    silent_after: 2s\n",
            "job.launcher.silent_after: at least 10s",
        ),
        (
            "    env: { DT_GENERATION: \"7\" }\n",
            "DT_* variables are the agent's own",
        ),
        ("    env: { \"LD PRELOAD\": x }\n", "is not a variable name"),
        ("    strategy: rolling\n", "unknown variant `rolling`"),
        (
            "    elastic: { min_nodes: 2 }\n",
            "job.launcher.elastic: only with `strategy: elastic`",
        ),
        (
            "    strategy: elastic\n    elastic: { min_nodes: 4, max_nodes: 2 }\n",
            "min_nodes (4) must be at least 1 and at most max_nodes (2)",
        ),
        (
            "    strategy: elastic\n    elastic: { min_nodes: 0 }\n",
            "min_nodes (0) must be at least 1",
        ),
        (
            "    strategy: elastic\n    elastic: { last_call: 1500ms }\n",
            "job.launcher.elastic.last_call: whole seconds",
        ),
        (
            "    strategy: elastic\n    elastic: { min: 2 }\n",
            "unknown field `min`",
        ),
    ] {
        let e = error_of(&with_launcher(more));
        assert!(e.contains(key), "{more:?}: {e}");
    }
    let e = error_of(&GOOD.replace(
        "  ack: {",
        "  launcher:\n    torchrun: []\n    script: [/t.py]\n  ack: {",
    ));
    assert!(e.contains("job.launcher.torchrun: a list"), "{e}");
    let e = error_of(&GOOD.replace(
        "  ack: {",
        "  launcher:\n    torchrun: [/t]\n    script: [/t.py, {a: 1}]\n  ack: {",
    ));
    assert!(e.contains("is not a word of a command line"), "{e}");
}

#[test]
fn the_in_place_strategy_needs_its_lighthouse_and_gets_its_defaults() {
    let l = Config::parse(&with_launcher(
        "    strategy: in_place\n    in_place: { lighthouse: '10.0.0.5:29510' }\n",
    ))
    .unwrap()
    .job
    .launcher
    .unwrap();
    let ip = l.in_place().unwrap();
    assert_eq!(ip.url(), "http://10.0.0.5:29510");
    assert_eq!(
        ip.local().to_string(),
        "127.0.0.1:29510",
        "torchft's, behind dtd's front"
    );
    assert_eq!(
        (
            ip.join_timeout,
            ip.heartbeat_timeout,
            ip.collective_timeout,
            ip.min_nodes
        ),
        (
            Duration::from_millis(500),
            Duration::from_secs(2),
            Duration::from_secs(10),
            1
        )
    );
    assert_eq!(
        ip.program("/opt/venv/bin/torchrun"),
        std::path::Path::new("/opt/venv/bin/torchft_lighthouse")
    );
    assert_eq!(l.max_restarts(), 10);
    assert_eq!(ip.leave_before_loss, Duration::from_secs(30));
    for (more, key) in [
        ("    strategy: in_place\n", "job.launcher.in_place: required with `strategy: in_place`"),
        (
            "    in_place: { lighthouse: '10.0.0.5:29510' }\n",
            "job.launcher.in_place: only with `strategy: in_place` (the strategy is generation)",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: master:29510 }\n",
            "`master:29510` is not an IP and a port",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: '0.0.0.0:29510' }\n",
            "an address the workers can dial",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: '127.0.0.1:29510' }\n",
            "not 127.0.0.1, where torchft's own Lighthouse listens",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: '10.0.0.5:29510', collective_timeout: 1500ms }\n",
            "collective_timeout: whole seconds",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: '10.0.0.5:29510', leave_before_loss: 3m }\n",
            "leave_before_loss: 100ms to 2m",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: '10.0.0.5:29510', leave_before_loss: 50ms }\n",
            "leave_before_loss: 100ms to 2m",
        ),
        (
            "    strategy: in_place\n    in_place: { lighthouse: '10.0.0.5:29510', program: bin/lh }\n",
            "in_place.program: an absolute path",
        ),
        ("    workdir: run\n", "job.launcher.workdir: an absolute path"),
    ] {
        let e = error_of(&with_launcher(more));
        assert!(e.contains(key), "{more:?}: {e}");
    }
}

#[test]
fn an_acknowledgement_by_the_launchers_needs_a_launcher() {
    let e = error_of(&GOOD.replace("  ack: {", "  ack: { by: launcher, "));
    assert!(e.contains("job.ack.by: launcher needs job.launcher"), "{e}");
    let cfg =
        Config::parse(&with_launcher("").replace("  ack: {", "  ack: { by: launcher, ")).unwrap();
    assert_eq!(cfg.job.ack.by, crate::config::AckBy::Launcher);
}

#[test]
fn the_jobs_user_is_a_uid_a_name_or_exactly_uid_and_gid() {
    let user = |form: &str| with_launcher(&format!("    user: {form}\n"));
    let ids = |form: &str| Config::parse(&user(form)).map(|c| c.job.launcher.map(|l| l.user));
    assert!(ids("1000").is_ok());
    assert!(ids("alice").is_ok());
    assert!(ids("{ uid: 1000, gid: 1001 }").is_ok());
    for (form, said) in [
        // The groups would be silently dropped: the job runs with none.
        (
            "{ uid: 1000, gid: 1000, groups: [27] }",
            "job.launcher.user: unknown field `groups`",
        ),
        ("{ uid: 1000 }", "job.launcher.user: missing field `gid`"),
        (
            "[1000]",
            "job.launcher.user: a list is not a uid, a user name or { uid, gid }",
        ),
        ("-5", "job.launcher.user: -5 is not a uid"),
        (
            "\"al ice\"",
            "job.launcher.user: `al ice` is neither a uid nor a user name",
        ),
        ("0", "never runs as root"),
    ] {
        let e = error_of(&user(form));
        assert!(e.contains(said), "{form}: {e}");
        assert!(!e.contains("did not match any variant"), "{form}: {e}");
    }
}
