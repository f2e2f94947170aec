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
        "  notify: {{ command: [/bin/sh, -c, 'test -e \"$1/ok\" && env > \"$1/hook-$DT_GENERATION\"', hook, {efs}] }}\n  ack: {{ timeout: 10m }}"
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
