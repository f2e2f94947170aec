//! Unhealthy workers, end to end against moto with the real `dtd`: a worker whose own `dtd agent`
//! finds 7 of 8 GPUs (the default check over stand-ins) never joins and is replaced; a worker
//! whose health report (`health_<ip>`, in the agent's own format) fails leaves the job and is
//! replaced, from the launch template or by its Auto Scaling group; and too many unhealthy at
//! once stop it all until health returns.

use std::time::Duration;

use dt::protocol::health::HealthReport;

use crate::groups::{create_group, group_instances, prepare_new, GROUP};
use crate::support::imds::ImdsStandIn;
use crate::support::webhook::WebhookReceiver;
use crate::support::*;

pub(crate) fn log_ack_job(c: &Cluster) -> String {
    format!(
        "  notify: none\n  ack: {{ host_worker_log: {}/host_worker_log, timeout: 10m }}",
        c.efs().display()
    )
}

/// What a worker's agent writes after its health check.
pub(crate) fn report(c: &Cluster, id: &str, ip: &str, ok: bool, gpus_lost: bool, reason: &str) {
    let body = HealthReport {
        instance_id: id.into(),
        ok,
        gpus_lost,
        reason: reason.into(),
        when: "2026-11-24T10:00:00Z".into(),
        output_tail: vec![reason.into()],
    }
    .render();
    c.report(ip, MarkerKind::Health, &body);
}

/// Launch-template instances running, besides `but`.
pub(crate) fn running_from_template(c: &Cluster, but: &[&str]) -> Vec<(String, String)> {
    let out = c.aws(&[
        "ec2",
        "describe-instances",
        "--filters",
        &format!("Name=tag:aws:ec2launchtemplate:id,Values={}", c.template_id),
        "Name=instance-state-name,Values=pending,running",
        "--query",
        "Reservations[].Instances[].[InstanceId,PrivateIpAddress]",
        "--output",
        "text",
    ]);
    (out.lines())
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .filter(|(id, _)| !but.contains(&id.as_str()))
        .collect()
}

/// A worker's real `dtd agent` on this machine for an instance moto launched: prepare-data is
/// `true`, the health check is the default one (templates/health/gpu_health.py) over the
/// STAND-IN `nvidia-smi` and `dmesg` of tests/standins/bin, which describe the node from a JSON
/// file; the instance metadata is the IMDS stand-in.
struct Agent {
    child: std::process::Child,
    _imds: ImdsStandIn,
}

impl Agent {
    fn start(c: &Cluster, id: &str, ip: &str, node: serde_json::Value) -> Agent {
        let imds = ImdsStandIn::with_identity(ip, id);
        imds.set("instance-type", "p4d.24xlarge");
        let dir = c.dir.path();
        let description = dir.join(format!("node-{id}.json"));
        std::fs::write(&description, node.to_string()).expect("node description");
        let check = install("templates/health/gpu_health.py", dir, 0o755);
        let config = dir.join(format!("agent-{id}.yaml"));
        let body = format!(
            "cluster: {CLUSTER}\nworkers: {{ launch_template: itest-worker-template, max: 4 }}\n\
             shared_dir: {}\nagent:\n  prepare_data: /bin/true\n  imds_interval: 200ms\n  \
             health: {{ command: [{}], interval: 5s, timeout: 4s }}\n",
            c.efs().display(),
            check.display()
        );
        std::fs::write(&config, body).expect("agent config");
        let path = format!(
            "{}:{}",
            repo().join("tests/standins/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let log = std::fs::File::create(dir.join(format!("agent-{id}.log"))).expect("log");
        let child = c
            .agent_command(&config, ip, id, &imds)
            .env("PATH", path)
            .env("DT_STANDIN_NODE", &description)
            .stderr(log)
            .spawn()
            .expect("dtd agent");
        Agent { child, _imds: imds }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_worker_whose_own_check_finds_7_of_8_gpus_never_joins_and_is_replaced() {
    let mut c = Cluster::new();
    c.worker_extra = "  replace_unhealthy: true\n".into();
    c.checks_health();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    let _agent = Agent::start(&c, &id, &ip, serde_json::json!({ "gpus": 7 }));
    c.wait_events("unhealthy", &id, 1);
    let unhealthy = c.journal_of(&id);
    let line = unhealthy.iter().find(|e| e["kind"] == "unhealthy").unwrap();
    let msg = line["message"].as_str().unwrap();
    assert!(
        msg.contains("its GPUs are gone") && msg.contains("7 of 8"),
        "{msg}"
    );
    assert!(
        !c.efs().join(format!("prepare_data_success_{ip}")).exists(),
        "a worker that fails its check never writes its success marker"
    );
    wait_for(
        "the worker terminated",
        Duration::from_secs(30),
        || c.state_of(&id),
        |s| s == "terminated" || s == "shutting-down",
    );
    assert_eq!(c.events_of("joined", &id), 0, "it never joined");
    let fresh = wait_for(
        "its replacement launched from the template",
        Duration::from_secs(30),
        || running_from_template(&c, &[&id]),
        |r| r.len() == 1,
    );
    // The replacement's own agent finds 8 of 8: it joins.
    let (new_id, new_ip) = fresh[0].clone();
    let _healthy = Agent::start(&c, &new_id, &new_ip, serde_json::json!({ "gpus": 8 }));
    c.wait_hosts("the healthy replacement to join", |h| h == [new_ip.clone()]);
}

#[test]
fn a_template_worker_whose_gpus_are_gone_leaves_at_once_and_a_replacement_joins() {
    let mut c = Cluster::new();
    c.worker_extra = "  replace_unhealthy: true\n".into();
    c.checks_health();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    let launched = c.launch(2);
    for (_, ip) in &launched {
        c.marker(ip);
    }
    let ((sick, sick_ip), (_, well_ip)) = (&launched[0], &launched[1]);
    c.wait_hosts("both to join", |h| h.len() == 2);

    report(
        &c,
        sick,
        sick_ip,
        false,
        true,
        "7 of 8 GPUs visible (p4d.24xlarge has 8)",
    );
    c.wait_hosts("the sick worker to leave", |h| h == [well_ip.clone()]);
    wait_for(
        "the sick worker terminated without an acknowledgement",
        Duration::from_secs(30),
        || c.state_of(sick),
        |s| s == "terminated" || s == "shutting-down",
    );
    c.wait_events("terminated", sick, 1);
    let unhealthy = c.journal_of(sick);
    let kinds: Vec<_> = unhealthy
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or(""))
        .collect();
    // `preparing` comes first only when a pass saw it before its marker.
    let story: Vec<_> = kinds
        .iter()
        .filter(|k| **k != "preparing")
        .copied()
        .collect();
    assert_eq!(
        story,
        ["joined", "unhealthy", "removal_queued", "terminated"]
    );
    let queued = unhealthy
        .iter()
        .find(|e| e["kind"] == "removal_queued")
        .unwrap();
    assert_eq!(queued["cause"], "unhealthy");
    assert!(
        queued["message"]
            .as_str()
            .unwrap()
            .contains("its GPUs are gone"),
        "{queued}"
    );

    // The replacement was launched from the template and joins once its data is ready.
    let fresh = wait_for(
        "a replacement launched from the template",
        Duration::from_secs(30),
        || running_from_template(&c, &[sick, &launched[1].0]),
        |r| !r.is_empty(),
    );
    assert_eq!(
        fresh.len(),
        1,
        "one replacement, however many passes: {fresh:?}"
    );
    let (new_id, new_ip) = &fresh[0];
    let journal = c.journal();
    let launched_event = journal
        .iter()
        .find(|e| e["kind"] == "replacement_launched")
        .unwrap();
    assert_eq!(launched_event["instance"], new_id.as_str());
    assert!(launched_event["message"]
        .as_str()
        .unwrap()
        .contains(sick.as_str()));
    c.marker(new_ip);
    c.wait_hosts("the replacement to join", |h| {
        h.len() == 2 && h.contains(new_ip)
    });
    c.wait_passes(3);
    assert_eq!(
        running_from_template(&c, &[sick]).len(),
        2,
        "no second replacement"
    );
}

#[test]
fn an_unhealthy_group_worker_drains_then_is_marked_unhealthy_and_the_group_replaces_it() {
    let mut c = Cluster::new();
    create_group(&c, 2);
    c.worker_extra = format!("  auto_scaling_group: {GROUP}\n");
    c.checks_health();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    prepare_new(&c, true);
    c.wait_hosts("both group workers to join", |h| h.len() == 2);
    let first = group_instances(&c);
    let (sick, sick_ip) = first
        .iter()
        .next()
        .map(|(i, p)| (i.clone(), p.clone()))
        .unwrap();

    report(
        &c,
        &sick,
        &sick_ip,
        false,
        false,
        "Xid 48 (double-bit ECC error) on GPU 2",
    );
    c.wait_hosts("the sick worker to leave", |h| {
        h.len() == 1 && !h.contains(&sick_ip)
    });
    c.wait_events("removal_queued", &sick, 1);
    c.wait_passes(2);
    assert_eq!(
        health_status(&c, &sick),
        "HEALTHY",
        "it drains: nothing before the ack"
    );
    assert!(c
        .wait_status_text(&sick_ip)
        .contains("health check failed (Xid 48"));

    c.append_log(&format!("2 REMOVED {sick_ip} 2026-11-24 10:00:00\n"));
    wait_for(
        "SetInstanceHealth Unhealthy, as the emulator's group sees it",
        Duration::from_secs(30),
        || health_status(&c, &sick),
        |h| h.eq_ignore_ascii_case("unhealthy"),
    );
    c.wait_events("terminated", &sick, 1);
    let ended = c.journal_of(&sick);
    let terminated = ended.iter().find(|e| e["kind"] == "terminated").unwrap();
    assert!(terminated["message"]
        .as_str()
        .unwrap()
        .contains("Auto Scaling group accepted"));

    // moto records the health but has no health replacement: the test does what the group does
    // with an Unhealthy InService instance, "terminates and replaces" it keeping the desired
    // capacity ("Health checks for instances in an Auto Scaling group", Amazon EC2 Auto Scaling
    // User Guide; SetInstanceHealth, Amazon EC2 Auto Scaling API Reference).
    c.aws(&[
        "autoscaling",
        "terminate-instance-in-auto-scaling-group",
        "--instance-id",
        &sick,
        "--no-should-decrement-desired-capacity",
    ]);
    let fresh = wait_for(
        "the group's replacement",
        Duration::from_secs(30),
        || group_instances(&c),
        |g| g.len() == 2 && !g.contains_key(&sick),
    );
    prepare_new(&c, true);
    let (_, new_ip) = fresh
        .iter()
        .find(|(id, _)| !first.contains_key(*id))
        .unwrap();
    c.wait_hosts("the replacement to join", |h| {
        h.len() == 2 && h.contains(new_ip)
    });
}

/// The health status the group holds for an instance (`HEALTHY` / `UNHEALTHY`, as the AWS
/// CLI prints moto's answer).
fn health_status(c: &Cluster, id: &str) -> String {
    c.aws(&[
        "autoscaling",
        "describe-auto-scaling-instances",
        "--instance-ids",
        id,
        "--query",
        "AutoScalingInstances[0].HealthStatus",
        "--output",
        "text",
    ])
    .trim()
    .to_ascii_uppercase()
}

#[test]
fn too_many_unhealthy_at_once_stop_everything_alert_and_resume_when_health_returns() {
    let hook = WebhookReceiver::start();
    let mut c = Cluster::new();
    c.extra = format!(
        "health: {{ max_unhealthy: 1 }}\nalerts:\n  - {{ webhook: '{}', events: [health_stopped, health_resumed], allow_http: true }}\n",
        hook.url("/hooks/health")
    );
    c.checks_health();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    let launched = c.launch(3);
    for (_, ip) in &launched {
        c.marker(ip);
    }
    c.wait_hosts("three to join", |h| h.len() == 3);
    // Both checks fail at once: dtd is frozen while the two reports are written, so one pass
    // reads both (on a busy machine a pass between the two took the first out alone).
    let dtd = c.dtd.as_ref().expect("dtd running").id() as i32;
    signal(dtd, "STOP");
    for (id, ip) in &launched[..2] {
        report(
            &c,
            id,
            ip,
            false,
            false,
            "Xid 79 (GPU has fallen off the bus)",
        );
    }
    signal(dtd, "CONT");
    let text = c.wait_status_text("2 of 3 workers unhealthy (health.max_unhealthy 1)");
    assert!(text.contains("none removed or replaced"), "{text}");
    assert!(
        text.contains("kept, health.max_unhealthy reached"),
        "{text}"
    );
    c.wait_passes(3);
    assert_eq!(c.hosts().len(), 3, "nothing removed while stopped");
    for (id, _) in &launched {
        assert_eq!(c.state_of(id), "running");
    }
    let stopped = c
        .journal()
        .into_iter()
        .filter(|e| e["kind"] == "health_stopped")
        .count();
    assert_eq!(stopped, 1, "journaled once");
    wait_until("the health_stopped alert", Duration::from_secs(30), || {
        hook.received()
            .iter()
            .any(|r| r.json()["kind"] == "health_stopped")
    });

    // One recovers: the other is within the limit again, and removed.
    let (healed, healed_ip) = &launched[0];
    report(&c, healed, healed_ip, true, false, "ok");
    let (sick, sick_ip) = &launched[1];
    c.wait_hosts("the one still unhealthy to leave", |h| {
        h.len() == 2 && !h.contains(sick_ip)
    });
    c.wait_events("healthy", healed, 1);
    c.wait_events("removal_queued", sick, 1);
    assert!(c.journal().iter().any(|e| e["kind"] == "health_resumed"));
    wait_until("the health_resumed alert", Duration::from_secs(30), || {
        hook.received()
            .iter()
            .any(|r| r.json()["kind"] == "health_resumed")
    });
    wait_for(
        "the stop gone from dtctl status",
        Duration::from_secs(30),
        || stdout(&c.dtctl(&["status"])),
        |text| !text.contains("workers unhealthy"),
    );
}

#[test]
fn a_refused_replacement_launch_is_shown_and_sent_again_only_once_a_minute() {
    let mut c = Cluster::new();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    c.worker_extra = "  replace_unhealthy: true\n".into();
    c.extra = format!("metrics: {{ listen: '{addr}' }}\n");
    c.checks_health();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h == [ip.clone()]);
    // The template is gone (deleted by a person): RunInstances from it fails.
    c.aws(&[
        "ec2",
        "delete-launch-template",
        "--launch-template-name",
        "itest-worker-template",
    ]);
    report(&c, &id, &ip, false, true, "7 of 8 GPUs visible");
    c.wait_events("terminated", &id, 1);
    // Shown for as long as it is owed, not only on the pass that sent it.
    let text = c.wait_status_text(&format!("replacement launch for unhealthy {id}"));
    assert!(
        text.contains("RunInstances") && text.contains("sent again from"),
        "{text}"
    );
    let launches = || {
        let (_, body) = crate::support::prometheus::get(addr, "/metrics").expect("scrape");
        let line = body
            .lines()
            .find(|l| {
                l.starts_with("dt_aws_calls_total") && l.contains("operation=\"RunInstances\"")
            })
            .map(str::to_string);
        line.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(launches(), 1);
    c.wait_passes(5);
    assert_eq!(launches(), 1, "not sent again at every pass");
    let text = stdout(&c.dtctl(&["status"]));
    assert!(text.contains("InvalidLaunchTemplateName"), "{text}");
    let journal = c.journal();
    assert!(!journal.iter().any(|e| e["kind"] == "replacement_launched"));
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(c.state_dir().join("state.json")).unwrap()).unwrap();
    assert_eq!(
        state["replacements"][0]["token"],
        format!("dt-replace-{id}"),
        "still owed"
    );
}
