//! The job contract end to end: a real job process receives the signal, rescales and
//! acknowledges; a hook command receives the change in its environment.

use std::time::Duration;

use crate::support::*;

#[test]
fn the_example_job_is_signalled_rescales_and_acknowledges() {
    let mut c = Cluster::new();
    let (base_id, base_ip) = c.launch(1).remove(0);
    let efs = c.efs().display().to_string();
    let job = format!(
        "  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}\n  ack: {{ host_worker_log: {efs}/host_worker_log, timeout: 10m }}"
    );
    c.write_config(&c.config(1, 8, &[&base_ip], &job));
    c.start_dtd();
    c.wait_hosts("the base host to be listed", |h| h == [base_ip.clone()]);
    let _job = start_example_job(&c);
    wait_until("the job's pidfile", Duration::from_secs(20), || {
        c.efs().join("job.pid").exists()
    });

    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    wait_until("the job to apply the join", Duration::from_secs(20), || {
        job_log(&c).contains(&format!("rescale: +[{ip}]"))
    });
    c.wait_tag(&id, "ADDED");

    c.delete_elastic_tag(&id);
    wait_until(
        "the job to apply the removal",
        Duration::from_secs(20),
        || job_log(&c).contains(&format!("-[{ip}]")),
    );
    wait_until(
        "termination after the job's ack",
        Duration::from_secs(20),
        || c.state_of(&id) != "running",
    );
    let log = std::fs::read_to_string(c.efs().join("host_worker_log")).unwrap();
    assert!(log.contains(&format!("REMOVED {ip}")), "{log}");
    assert_eq!(
        c.events_of("acknowledged", &id),
        1,
        "acknowledged, not timed out"
    );
    // The job acknowledged in the 2018 form, which names IPs: status derives the generation.
    wait_until(
        "status to show generation 2 applied",
        Duration::from_secs(10),
        || {
            let status = c.try_status();
            status["generation"] == 2 && status["acked_generation"] == 2
        },
    );
    assert_eq!(c.state_of(&base_id), "running");
    assert!(
        job_log(&c).contains("loss"),
        "the job trains: {}",
        job_log(&c)
    );
}

#[test]
fn a_hook_command_gets_the_change_in_its_environment_and_is_retried() {
    let mut c = Cluster::new();
    let efs = c.efs().display().to_string();
    // The hook fails until the file `ok` exists, to show a failed notification is retried.
    let job = format!(
        "  notify: {{ command: [/bin/bash, -c, 'test -e \"$1/ok\" && env > \"$1/hook-$DT_GENERATION\"', hook, {efs}] }}\n  ack: {{ timeout: 10m }}"
    );
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let (_id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));
    wait_until(
        "the failed hook to show in status",
        Duration::from_secs(10),
        || c.try_status()["pending_notification"] == 1,
    );
    assert!(!c.efs().join("hook-1").exists());

    std::fs::write(c.efs().join("ok"), "").unwrap();
    // Delivered means the hook exited, so its file is whole (`env >` creates it before writing).
    wait_until("delivery recorded", Duration::from_secs(10), || {
        let s = c.try_status();
        s.is_object() && s["pending_notification"].is_null()
    });
    let env = std::fs::read_to_string(c.efs().join("hook-1")).unwrap();
    for line in [
        // A hook that also gets stalls tells a membership change by it.
        "DT_EVENT=membership".to_string(),
        "DT_GENERATION=1".to_string(),
        format!("DT_ADDED={ip}"),
        "DT_REMOVED=".to_string(),
        format!("DT_HOSTFILE={efs}/host_worker"),
    ] {
        assert!(env.lines().any(|l| l == line), "missing {line} in {env}");
    }
    assert!(c
        .journal()
        .iter()
        .any(|e| e["kind"] == "notified" && e["generation"] == 1));
}

/// `dtd run` runs the hook as root on the master: a hook anyone else could have put in place or
/// changed (its directory writable by others) is checked as `dtd agent` checks what it runs,
/// and not run. The refusal is journaled once however many passes retry it, shown in `dtctl
/// status`, and once the directory is the owner's alone the hook runs and the generation is
/// delivered.
#[test]
fn a_hook_others_could_change_is_refused_until_it_is_safe() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Cluster::new();
    let efs = c.efs().display().to_string();
    let hooks = c.dir.path().join("hooks");
    std::fs::create_dir(&hooks).unwrap();
    let hook = hooks.join("notify.sh");
    std::fs::write(&hook, "#!/bin/bash\nenv > \"$1/hook-$DT_GENERATION\"\n").unwrap();
    let chmod = |p: &std::path::Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    chmod(&hook, 0o755);
    chmod(&hooks, 0o777);
    let job = format!(
        "  notify: {{ command: [{}, {efs}] }}\n  ack: {{ timeout: 10m }}",
        hook.display()
    );
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let (_id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));

    let why = format!(
        "hook refused {}: {} is writable by its group or others and not sticky (mode 0777)",
        hook.display(),
        hooks.display()
    );
    let refused = wait_for(
        "notify_refused in the journal",
        Duration::from_secs(20),
        || c.journal(),
        |j| j.iter().any(|e| e["kind"] == "notify_refused"),
    );
    let line = refused
        .iter()
        .find(|e| e["kind"] == "notify_refused")
        .unwrap();
    let message = line["message"].as_str().unwrap();
    assert!(message.starts_with(&why), "{message}");
    assert!(message.ends_with("(retried next pass)"), "{message}");
    assert_eq!(line["generation"], 1);
    let printed = c.wait_status_text(&format!("Error:       job notification: {why}"));
    assert!(
        printed.contains("generation 1 not yet delivered to the job"),
        "{printed}"
    );
    // Retried at every pass, journaled once, and never run.
    c.wait_passes(3);
    let refusals = (c.journal().iter())
        .filter(|e| e["kind"] == "notify_refused")
        .count();
    assert_eq!(refusals, 1);
    assert!(!c.efs().join("hook-1").exists(), "a refused hook ran");

    chmod(&hooks, 0o755);
    wait_until("delivery recorded", Duration::from_secs(20), || {
        let s = c.try_status();
        s.is_object() && s["pending_notification"].is_null()
    });
    let env = std::fs::read_to_string(c.efs().join("hook-1")).unwrap();
    assert!(env.lines().any(|l| l == "DT_GENERATION=1"), "{env}");
    // What ran is the checked descriptor; the path it was found at is in its environment.
    assert!(
        env.lines()
            .any(|l| l == format!("DT_PROGRAM={}", hook.display())),
        "{env}"
    );
    assert!(c
        .journal()
        .iter()
        .any(|e| e["kind"] == "notified" && e["generation"] == 1));
}
