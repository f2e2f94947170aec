//! Interruptions end to end: EventBridge events put into the emulator (moto) reach dtd through
//! the SQS queue a rule delivers to, as on AWS. moto has no Spot market, so the events are the
//! handwritten ones EC2 would send (like the AWS Node Termination Handler's own tests do).

use std::time::{Duration, SystemTime};

use crate::support::imds::ImdsStandIn;
use crate::support::*;
use serde_json::json;

const SPOT: &str = "EC2 Spot Instance Interruption Warning";

struct Training {
    c: Cluster,
    queue: String,
    workers: Vec<(String, String)>,
    /// Where dtd serves /metrics.
    metrics: std::net::SocketAddr,
    _job: Job,
}

/// A base host and two workers in the job, the example job training on them, and the event
/// queue configured. `interval` is long in tests that show the queue wakes dtd by itself.
fn training(interval: &str) -> Training {
    training_with(interval, "10")
}

/// With `steps_per_epoch` steps of 20 ms between the example job's own checkpoints.
fn training_with(interval: &str, steps_per_epoch: &str) -> Training {
    let mut c = Cluster::new();
    let queue = create_event_queue(&c);
    let (_, base_ip) = c.launch(1).remove(0);
    // Spot workers: dtd believes an agent's Spot warning only for an instance EC2 says is Spot.
    let workers = c.launch_spot(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    let efs = c.efs().display().to_string();
    let job = format!(
        "  notify: {{ signal: SIGUSR1, pidfile: {efs}/job.pid }}\n  ack: {{ host_worker_log: {efs}/host_worker_log, timeout: 10m }}"
    );
    let metrics = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    c.extra = format!("events:\n  queue_url: {queue}\nmetrics: {{ listen: '{metrics}' }}\n");
    let config = c.config(1, 8, &[&base_ip], &job);
    c.write_config(&config.replace("interval: 300ms", &format!("interval: {interval}")));
    c.start_dtd();
    let mut all = vec![base_ip.clone(), workers[0].1.clone(), workers[1].1.clone()];
    all.sort();
    c.wait_hosts("the base host and both workers", |h| {
        let mut h = h.to_vec();
        h.sort();
        h == all
    });
    let job = start_example_job_with(&c, steps_per_epoch);
    wait_until(
        "the job to start on three workers",
        Duration::from_secs(20),
        || job_log(&c).contains("start: 3 workers"),
    );
    Training {
        c,
        queue,
        workers,
        metrics,
        _job: job,
    }
}

fn spot_warning(id: &str) -> serde_json::Value {
    json!({ "instance-id": id, "instance-action": "terminate" })
}

#[test]
fn a_spot_warning_rescales_the_job_at_once_and_it_checkpoints() {
    // A minute between passes: only the queue can make dtd act within the wait below. The
    // job's epochs take 200 s: its next checkpoint would come after the two-minute deadline.
    let t = training_with("60s", "10000");
    let (id, ip) = &t.workers[0];
    put_ec2_event(&t.c, SPOT, spot_warning(id));

    t.c.wait_hosts("the interrupted worker to leave", |h| !h.contains(ip));
    wait_until(
        "the job to rescale and checkpoint before the deadline",
        Duration::from_secs(10),
        || {
            let log = job_log(&t.c);
            log.contains(&format!("-[{ip}]"))
                && log.contains(&format!("before the deadline: interruption of {ip} in "))
        },
    );
    // Before the signal, the job's `notices` file says why the worker left and by when: two
    // minutes after the warning (PutEvents without a time: the warning's time is now).
    let notices = std::fs::read_to_string(t.c.efs().join("notices")).expect("the notices file");
    let notices: serde_json::Value = serde_json::from_str(&notices).expect("JSON");
    let generation = std::fs::read_to_string(t.c.efs().join("generation")).unwrap();
    assert_eq!(
        notices["generation"].to_string(),
        generation.trim(),
        "{notices}"
    );
    let [one] = notices["notices"].as_array().expect("notices").as_slice() else {
        panic!("one notice: {notices}");
    };
    assert_eq!(
        (one["ip"].as_str(), one["kind"].as_str()),
        (Some(ip.as_str()), Some("interruption"))
    );
    let deadline = (one["deadline"].as_str())
        .and_then(|d| humantime::parse_rfc3339(d).ok())
        .expect("an RFC 3339 deadline");
    let left = deadline
        .duration_since(SystemTime::now())
        .expect("a deadline ahead");
    assert!(
        left > Duration::from_secs(60) && left <= Duration::from_secs(120),
        "{left:?}"
    );
    let checkpoint = std::fs::read_to_string(t.c.efs().join("checkpoint.json")).unwrap();
    let checkpoint: serde_json::Value = serde_json::from_str(&checkpoint).unwrap();
    assert!(
        !checkpoint["workers"].to_string().contains(ip.as_str()),
        "{checkpoint}"
    );

    t.c.wait_tag(id, "INTERRUPTED");
    assert_eq!(t.c.events_of("interrupted", id), 1);
    wait_until("the message to be deleted", Duration::from_secs(10), || {
        queue_depth(&t.c, &t.queue) == 0
    });
    assert_eq!(t.c.state_of(id), "running", "AWS reclaims it, not dtd");
    assert_eq!(t.c.events_of("terminated", id), 0);

    // The queue message is deleted just before the pass writes its status report.
    let text = t.c.wait_status_text("1 interruption(s) survived");
    let row = text.lines().find(|l| l.contains(id.as_str())).unwrap();
    assert!(row.contains("INTERRUPTED") && row.contains("Spot"), "{row}");
}

#[test]
fn duplicate_late_and_foreign_events_change_nothing_more() {
    let t = training("60s");
    let c = &t.c;
    let (id1, ip1) = &t.workers[0];
    let (id2, ip2) = &t.workers[1];
    let (foreign, _) = c.launch_from(&c.foreign_template(), 1).remove(0);

    // At-least-once delivery: the same event (same id) twice, straight into the queue.
    let event = json!({
        "version": "0", "id": "dup-1", "detail-type": SPOT, "source": "aws.ec2",
        "time": "2026-11-23T10:00:00Z", "region": "us-east-1", "resources": [],
        "detail": spot_warning(id1),
    });
    for _ in 0..2 {
        c.aws(&[
            "sqs",
            "send-message",
            "--queue-url",
            &t.queue,
            "--message-body",
            &event.to_string(),
        ]);
    }
    // Out of order: a rebalance recommendation after the interruption it preceded.
    put_ec2_event(
        c,
        "EC2 Instance Rebalance Recommendation",
        json!({ "instance-id": id1 }),
    );
    put_ec2_event(c, SPOT, spot_warning(&foreign));
    c.wait_hosts("the interrupted worker to leave", |h| !h.contains(ip1));

    // Out of order the other way: EC2 already took w2; its warning arrives late.
    c.aws(&["ec2", "terminate-instances", "--instance-ids", id2]);
    let stopped = json!({ "instance-id": id2, "state": "shutting-down" });
    put_ec2_event(c, "EC2 Instance State-change Notification", stopped);
    c.wait_hosts("the reclaimed worker to leave", |h| !h.contains(ip2));
    put_ec2_event(c, SPOT, spot_warning(id2));

    wait_until(
        "every message to be deleted",
        Duration::from_secs(20),
        || queue_depth(c, &t.queue) == 0,
    );
    assert_eq!(c.events_of("interrupted", id1), 1);
    assert_eq!(
        c.events_of("removal_queued", id1),
        0,
        "no drain after the interruption"
    );
    assert_eq!(
        c.events_of("interrupted", id2),
        0,
        "already gone when its warning came"
    );
    assert_eq!(c.events_of("gone", id2), 1);
    assert!(c
        .journal()
        .iter()
        .all(|e| e["instance"] != foreign.as_str()));
    assert_eq!(c.tag(&foreign, STATUS), None);
    assert_eq!(c.state_of(&foreign), "running");
    c.wait_status("1 interruption", |s| s["interruptions"] == 1);
}

#[test]
fn a_rebalance_recommendation_drains_the_worker_gracefully() {
    let t = training("300ms");
    let (id, ip) = &t.workers[0];
    put_ec2_event(
        &t.c,
        "EC2 Instance Rebalance Recommendation",
        json!({ "instance-id": id }),
    );
    t.c.wait_hosts("the worker to be drained", |h| !h.contains(ip));
    // The job applies the change and writes REMOVED to host_worker_log; then it is terminated.
    wait_until(
        "termination after the job's acknowledgement",
        Duration::from_secs(30),
        || t.c.events_of("terminated", id) == 1,
    );
    assert_eq!(t.c.events_of("acknowledged", id), 1);
    assert!(job_log(&t.c).contains(&format!("-[{ip}]")));
    assert_eq!(t.c.status_json()["interruptions"], 0);
}

/// AWS's EC2 Health sample (tests/fixtures/events/) for this worker with `startTime` set, as
/// AWS writes it (RFC 1123, GMT).
fn put_scheduled_change(t: &Training, id: &str, arn: &str, starts: SystemTime) {
    let mut event = crate::support::fixtures::filled("aws-health-ec2-scheduled-change.json");
    let instance_arn = format!("arn:aws:ec2:us-east-1:123456789012:instance/{id}");
    event["detail"]["affectedEntities"][0]["entityValue"] = json!(instance_arn);
    event["detail"]["eventArn"] = json!(arn);
    event["detail"]["startTime"] = json!(gmt(starts));
    let entry = json!([crate::support::fixtures::put_events_entry(&event)]);
    t.c.aws(&["events", "put-events", "--entries", &entry.to_string()]);
}

/// `2026-11-23T10:00:00Z` as `23 Nov 2026 10:00:00 GMT`.
fn gmt(at: SystemTime) -> String {
    let rfc = humantime::format_rfc3339_seconds(at).to_string();
    let (y, m, d) = (&rfc[0..4], &rfc[5..7], &rfc[8..10]);
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months[m.parse::<usize>().unwrap() - 1];
    format!("{d} {month} {y} {} GMT", &rfc[11..19])
}

/// A retirement weeks away waits (the GPUs keep training, the status says until when); one within
/// `events.scheduled_change_lead` (default 1h) drains the worker gracefully, due at its start.
#[test]
fn an_aws_health_scheduled_change_drains_the_worker_by_its_start_time() {
    let t = training("300ms");
    let (id, ip) = &t.workers[0];
    let weeks = SystemTime::now() + Duration::from_secs(14 * 24 * 3600);
    put_scheduled_change(&t, id, "arn:aws:health:us-east-1::event/EC2/far", weeks);
    let s = t.c.wait_status("the far scheduled change held", |s| {
        s["holds"]
            .to_string()
            .contains(&format!("{id}: drains from"))
    });
    assert!(t.c.hosts().contains(ip), "{s}");
    t.c.wait_passes(3);
    assert!(t.c.hosts().contains(ip));
    assert_eq!(t.c.events_of("removal_queued", id), 0);

    let soon = SystemTime::now() + Duration::from_secs(30 * 60);
    put_scheduled_change(&t, id, "arn:aws:health:us-east-1::event/EC2/soon", soon);
    t.c.wait_hosts("the worker to be drained", |h| !h.contains(ip));
    wait_until(
        "the worker to be REMOVAL_QUEUED",
        Duration::from_secs(20),
        || {
            t.c.tag(id, STATUS).as_deref() == Some("REMOVAL_QUEUED")
                || t.c.events_of("terminated", id) == 1
        },
    );
    let queued: Vec<_> = (t.c.journal().into_iter())
        .filter(|e| e["kind"] == "removal_queued" && e["instance"] == id.as_str())
        .collect();
    assert_eq!(queued.len(), 1, "{queued:?}");
    let msg = queued[0]["message"].as_str().unwrap_or_default();
    let starts = humantime::format_rfc3339_seconds(soon).to_string();
    assert!(
        msg.contains(&format!(
            "EC2 scheduled change from the queue (starts {starts})"
        )),
        "{msg}"
    );
    assert_eq!(t.c.status_json()["interruptions"], 0);
}

#[test]
fn the_agent_and_the_queue_reporting_one_interruption_make_one_rescale() {
    let t = training("300ms");
    let (id, ip) = &t.workers[0];
    let generation: u64 = t.c.written_generation().trim().parse().unwrap();
    // The worker's own agent, reading a local IMDS stand-in (moto has no instance metadata).
    let imds = ImdsStandIn::with_identity(ip, id);
    let agent_log = std::fs::File::create(t.c.dir.path().join("agent.log")).unwrap();
    let mut agent = (t.c)
        .agent_command(&t.c.config_path(), ip, id, &imds)
        .stderr(agent_log)
        .spawn()
        .expect("dtd agent");
    imds.set(
        "spot/instance-action",
        r#"{"action":"terminate","time":"2026-11-23T10:02:00Z"}"#,
    );
    put_ec2_event(&t.c, SPOT, spot_warning(id));
    let own = t.c.dir.path().join("reports").join(id);
    wait_until("the agent's notice", Duration::from_secs(10), || {
        own.join(format!("interruption_{ip}")).exists()
    });
    t.c.wait_tag(id, "INTERRUPTED");
    wait_until("the queue to be drained", Duration::from_secs(10), || {
        queue_depth(&t.c, &t.queue) == 0
    });
    // dtd heard the agent too (the tag may be the queue's doing alone).
    let heard = "dt_notices_total{kind=\"interruption\",source=\"agent\"} 1";
    wait_until(
        "dtd to count the agent's notice",
        Duration::from_secs(30),
        || {
            crate::support::prometheus::get(t.metrics, "/metrics")
                .is_ok_and(|(_, text)| text.lines().any(|l| l == heard))
        },
    );
    // A few more passes, which hear the agent's notice again (it is sent on every connection).
    t.c.wait_passes(3);
    let _ = agent.kill();
    let _ = agent.wait();
    assert_eq!(t.c.events_of("interrupted", id), 1);
    let status = t.c.status_json();
    assert_eq!(status["generation"].as_u64().unwrap(), generation + 1);
    assert_eq!(status["interruptions"], 1);
    // Each notice is counted once by its source; the worker is counted once as survived.
    let (_, scraped) = crate::support::prometheus::get(t.metrics, "/metrics").expect("scraped");
    for line in [
        "dt_notices_total{kind=\"interruption\",source=\"queue\"} 1",
        "dt_notices_total{kind=\"interruption\",source=\"agent\"} 1",
        "dt_interruptions_survived_total 1",
    ] {
        assert!(
            scraped.lines().any(|l| l == line),
            "no `{line}` in:\n{scraped}"
        );
    }
}

/// A job notified by a hook hears why a worker left and by when, in its environment.
#[test]
fn a_hook_hears_the_reason_and_the_deadline_of_an_interruption() {
    let mut c = Cluster::new();
    let queue = create_event_queue(&c);
    let workers = c.launch(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    let efs = c.efs().display().to_string();
    // The test's own hook: it keeps the environment of each notification.
    let job = format!(
        "  notify: {{ command: [/bin/bash, -c, 'env > {efs}/hook-env.$DT_GENERATION'] }}\n  ack: {{ timeout: 10m }}"
    );
    c.extra = format!("events:\n  queue_url: {queue}\n");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    c.wait_hosts("both workers", |h| h.len() == 2);
    let (id, ip) = &workers[0];
    put_ec2_event(&c, SPOT, spot_warning(id));
    c.wait_hosts("the interrupted worker to leave", |h| !h.contains(ip));
    let generation = c.written_generation();
    let path = c.efs().join(format!("hook-env.{}", generation.trim()));
    let env = wait_for(
        "the hook of the interruption's generation",
        Duration::from_secs(10),
        || std::fs::read_to_string(&path).unwrap_or_default(),
        |e| e.contains("DT_REMOVED="),
    );
    let var = |name: &str| {
        (env.lines())
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in:\n{env}"))
            .to_string()
    };
    assert_eq!(var("DT_REMOVED"), *ip);
    assert_eq!(var("DT_REASON"), "interruption");
    let deadline = humantime::parse_rfc3339(&var("DT_DEADLINE")).expect("RFC 3339");
    let left = deadline.duration_since(SystemTime::now()).expect("ahead");
    assert!(
        left > Duration::from_secs(60) && left <= Duration::from_secs(120),
        "{left:?}"
    );
    let notices: serde_json::Value = serde_json::from_str(&var("DT_NOTICES")).expect("JSON");
    assert_eq!(notices[0]["ip"], json!(ip), "{notices}");
}

/// `workers.replace_interrupted`: the replacement is launched at the warning, while the
/// interrupted worker still runs (AWS takes it two minutes later), and joins once its data is
/// ready; one launch however often the warning comes.
#[test]
fn with_replace_interrupted_the_replacement_is_launched_at_the_warning_and_joins() {
    let mut c = Cluster::new();
    let queue = create_event_queue(&c);
    c.worker_extra = "  replace_interrupted: true\n".into();
    c.extra = format!("events:\n  queue_url: {queue}\n");
    let workers = c.launch_spot(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    c.write_config(&c.config(0, 4, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    c.wait_hosts("both workers", |h| h.len() == 2);
    let ((id, ip), (kept, kept_ip)) = (&workers[0], &workers[1]);

    put_ec2_event(&c, SPOT, spot_warning(id));
    let fresh = wait_for(
        "a replacement launched from the template",
        Duration::from_secs(30),
        || crate::health::running_from_template(&c, &[id, kept]),
        |r| !r.is_empty(),
    );
    c.wait_events("replacement_launched", &fresh[0].0, 1);
    assert_eq!(c.state_of(id), "running", "launched before the loss");
    assert!(
        c.hosts().iter().all(|h| h != ip),
        "the warned one left at once"
    );
    let launched = c
        .journal()
        .into_iter()
        .find(|e| e["kind"] == "replacement_launched");
    let said = launched.expect("journaled")["message"].to_string();
    assert!(
        said.contains(&format!("to replace interrupted {id}")),
        "{said}"
    );

    // Sent again (EventBridge delivers at least once): still one replacement.
    put_ec2_event(&c, SPOT, spot_warning(id));
    let (new_id, new_ip) = &fresh[0];
    c.marker(new_ip);
    c.wait_hosts("the replacement to join", |h| {
        h.len() == 2 && h.contains(new_ip) && h.contains(kept_ip)
    });
    wait_until(
        "the second warning to be taken",
        Duration::from_secs(10),
        || queue_depth(&c, &queue) == 0,
    );
    c.wait_passes(3);
    let all = crate::health::running_from_template(&c, &[id, kept]);
    assert_eq!(
        all,
        [(new_id.clone(), new_ip.clone())],
        "no second replacement"
    );
    // The ledger charges the replacement's preparing (its launch to its marker) to the change
    // the interrupted worker left with, and the first workers' to none.
    c.stop_dtd();
    let out = c.dtctl(&["goodput", "-o", "json"]);
    assert!(out.status.success(), "dtctl goodput: {}", stderr(&out));
    let g: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let changes = g["changes"].as_array().expect("changes");
    let replacing = |c: &serde_json::Value| c["replacing_node_seconds"].as_f64().unwrap_or(0.0);
    let left = format!("{ip} left (");
    let (with, without): (Vec<_>, Vec<_>) =
        (changes.iter()).partition(|c| c["what"].as_str().is_some_and(|w| w.starts_with(&left)));
    assert_eq!(with.len(), 1, "{g}");
    assert!(replacing(with[0]) > 0.0, "{g}");
    assert!(without.iter().all(|c| replacing(c) == 0.0), "{g}");
    let preparing = (g["buckets"].as_array().expect("buckets").iter())
        .find(|b| b["bucket"] == "preparing")
        .and_then(|b| b["node_seconds"].as_f64())
        .expect("preparing");
    assert!(replacing(with[0]) <= preparing, "{g}");
}

/// `workers.replace_interrupted` for a group worker: at AWS's Spot warning it is detached from
/// its group without lowering the desired capacity, so the group launches its replacement at
/// once while the warned worker still runs; the replacement joins once prepared, and a warning
/// sent again detaches nothing more.
#[test]
fn with_replace_interrupted_a_group_workers_replacement_is_its_groups_launch_at_the_warning() {
    use crate::groups::{create_group, desired_capacity, group_instances, prepare_new, GROUP};
    let mut c = Cluster::new();
    let queue = create_event_queue(&c);
    create_group(&c, 2);
    c.worker_extra = format!("  auto_scaling_group: {GROUP}\n  replace_interrupted: true\n");
    c.extra = format!("events:\n  queue_url: {queue}\n");
    c.write_config(&c.config(0, 4, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    prepare_new(&c, true);
    c.wait_hosts("both group workers", |h| h.len() == 2);
    let before = group_instances(&c);
    let (id, ip) = before.iter().next().expect("a group worker");

    put_ec2_event(&c, SPOT, spot_warning(id));
    let after = wait_for(
        "the group's replacement",
        Duration::from_secs(30),
        || group_instances(&c),
        |g| g.len() == 2 && !g.contains_key(id),
    );
    assert_eq!(c.state_of(id), "running", "replaced before the loss");
    assert_eq!(
        desired_capacity(&c).trim(),
        "2",
        "the desired capacity kept"
    );
    c.wait_events("replacement_launched", id, 1);
    let said = (c.journal_of(id).into_iter())
        .find(|e| e["kind"] == "replacement_launched")
        .expect("journaled")["message"]
        .to_string();
    assert!(
        said.contains(&format!("detached interrupted {id} from {GROUP}")),
        "{said}"
    );
    let (new_id, new_ip) = (after.iter())
        .find(|(k, _)| !before.contains_key(*k))
        .expect("a new group instance");
    prepare_new(&c, true);
    c.wait_hosts("the replacement to join", |h| {
        h.len() == 2 && h.contains(new_ip) && !h.contains(ip)
    });

    // Sent again (EventBridge delivers at least once): nothing more is detached or launched.
    put_ec2_event(&c, SPOT, spot_warning(id));
    wait_until(
        "the second warning to be taken",
        Duration::from_secs(10),
        || queue_depth(&c, &queue) == 0,
    );
    c.wait_passes(3);
    let now = group_instances(&c);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(now.contains_key(new_id), "{now:?}");
    assert_eq!(desired_capacity(&c).trim(), "2");
}
