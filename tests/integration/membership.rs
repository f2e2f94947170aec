//! Joining and leaving, end to end: moto over HTTP, the AWS CLI as the person at the console,
//! the real `dtd` binary, and files on a temporary "EFS" directory.

use std::time::Duration;

use crate::support::*;

fn log_ack_job(c: &Cluster, timeout: &str) -> String {
    format!(
        "  notify: none\n  ack: {{ host_worker_log: {}/host_worker_log, timeout: {timeout} }}",
        c.efs().display()
    )
}

/// Starts a cluster whose one launched worker has joined; returns (id, ip).
fn cluster_with_member(c: &mut Cluster, min: usize, job: &str) -> (String, String) {
    c.write_config(&c.config(min, 8, &[], job));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));
    (id, ip)
}

#[test]
fn a_worker_joins_once_its_marker_appears() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "10m");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let launched = c.launch(2);
    let (id, ip) = &launched[0];
    c.wait_tag(id, "PREPARING");
    assert!(c.hosts().is_empty(), "nobody is listed before its marker");

    c.marker(ip);
    c.wait_hosts("the worker to join", |h| h == [ip.clone()]);
    // The host files are rewritten one after the other; the generation file comes last.
    wait_until("the generation file", Duration::from_secs(10), || {
        std::fs::read_to_string(c.efs().join("generation")).is_ok_and(|g| g.trim() == "1")
    });
    let mpi = std::fs::read_to_string(c.efs().join("hosts.mpi")).unwrap();
    assert_eq!(mpi, format!("{ip} slots=1\n"));
    assert_eq!(
        std::fs::read_to_string(c.efs().join("generation")).unwrap(),
        "1\n"
    );
    c.wait_tag(id, "ADD_QUEUED");
    // Without its marker the other is PREPARING (a join would tag it ADD_QUEUED at once).
    // Waited for: a listing that ran while moto was still adding the two instances of one
    // RunInstances saw only the first, and dtd tags the second at its next listing.
    c.wait_tag(&launched[1].0, "PREPARING");

    // The job acknowledges in the 2018 form: the worker is then ADDED.
    c.append_log(&format!("1 ADDED {ip} 2026-11-22 10:00:00\n"));
    c.wait_tag(id, "ADDED");
    let status = c.status_json();
    assert_eq!(status["generation"], 1);
    assert_eq!(status["current"], 1);
    assert_eq!(
        status["desired"], 2,
        "the preparing worker is on its way in"
    );
    assert_eq!(c.events_of("joined", id), 1);
    assert_eq!(
        stdout(&c.dtctl(&["hosts", "--format", "horovod"])),
        format!("{ip}:1\n")
    );
    assert_eq!(stdout(&c.dtctl(&["hosts"])), format!("{ip}\n"));
    let events = stdout(&c.dtctl(&["events", "--since", "10m"]));
    assert!(
        events.contains("joined") && events.contains(&format!("{ip} is ready")),
        "{events}"
    );
    let text = stdout(&c.dtctl(&["status"]));
    assert!(
        text.contains("1 in the job, desired 2 (min 0, max 8)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("prepare_data_success_{}", launched[1].1)),
        "{text}"
    );
}

/// `join.batch: 5s`: three workers whose markers appear half a second apart join in one
/// generation once the first has waited the batch, the status saying why until then.
#[test]
fn workers_ready_within_the_join_batch_join_in_one_generation() {
    let mut c = Cluster::new();
    c.extra = "join: { batch: 5s }\n".into();
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    let launched = c.launch(3);
    c.wait_passes(2);
    for (_, ip) in &launched {
        c.marker(ip);
        std::thread::sleep(Duration::from_millis(500));
    }
    let printed = c.wait_status_text("the join batch: 3 ready worker(s) join together");
    assert!(
        c.hosts().is_empty(),
        "joined before the batch ended: {printed}"
    );
    c.wait_hosts("the three to join", |h| h.len() == 3);
    let generations = joined_generations(&c, &launched);
    assert_eq!(generations.len(), 1, "{generations:?}");
    assert_eq!(c.written_generation().trim(), "1", "one new generation");
}

/// The loop wakes at the deadline decide names (here the join batch's end), not at its
/// `interval`: with `interval: 60s`, a worker whose marker appears joins two seconds later
/// (`wait_hosts` gives up after 30).
#[test]
fn a_join_batch_ends_on_time_however_long_the_interval() {
    let mut c = Cluster::new();
    c.extra = "join: { batch: 2s }\n".into();
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    c.write_config(&config.replace("interval: 300ms", "interval: 60s"));
    let launched = c.launch(1);
    c.start_dtd();
    c.wait_status("a first pass", |_| true);
    c.marker(&launched[0].1);
    c.wait_status_text("the join batch: 1 ready worker(s) join together");
    c.wait_hosts("the worker to join when the batch ends", |h| h.len() == 1);
}

/// The generations the workers' `joined` lines name.
fn joined_generations(
    c: &Cluster,
    workers: &[(String, String)],
) -> std::collections::BTreeSet<u64> {
    (workers.iter())
        .map(|(id, _)| {
            let lines = c.journal_of(id);
            let joined = lines
                .iter()
                .find(|e| e["kind"] == "joined")
                .expect("joined");
            joined["generation"].as_u64().expect("a generation")
        })
        .collect()
}

/// `disruption.windows` with a window that opens twelve hours from now: a deleted elastic tag
/// is held and journaled, `dtctl status` saying when the next window opens; the worker trains on.
#[test]
fn a_voluntary_leave_outside_the_disruption_window_is_held_until_it_opens() {
    let hour = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        + 12)
        % 24;
    let mut c = Cluster::new();
    c.extra = format!(
        "disruption: {{ windows: [ {{ schedule: \"0 {hour} * * *\", duration: 1h }} ] }}\n"
    );
    let job = log_ack_job(&c, "10m");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.len() == 1);
    c.delete_elastic_tag(&id);
    c.wait_events("removal_held", &id, 1);
    let shown = format!("the disruption windows (0 {hour} * * * for 1h; UTC): the next opens at ");
    c.wait_status_text(&shown);
    c.wait_passes(3);
    assert_eq!(c.hosts(), [ip], "it trains on");
    assert_eq!(c.state_of(&id), "running");
}

/// The job's progress file as the job writes it (temp file and rename).
fn job_progress(c: &Cluster, step: u64, checkpoint_step: u64) {
    let path = c.efs().join("progress");
    let line = format!("{{\"step\": {step}, \"checkpoint_step\": {checkpoint_step}}}\n");
    std::fs::write(path.with_extension("tmp"), line).unwrap();
    std::fs::rename(path.with_extension("tmp"), path).unwrap();
}

/// `join.at_checkpoint` and `join.sizes: [1, 3]`: the first worker joins at once (no job yet
/// to checkpoint); a second waits as a spare (2 is not an allowed size); with a third the two
/// wait for the job's next checkpoint and join together when its progress file says one.
#[test]
fn ready_workers_join_at_the_jobs_next_checkpoint_and_only_to_allowed_sizes() {
    let mut c = Cluster::new();
    c.extra = "join: { at_checkpoint: true, max_wait: 10m, sizes: [1, 3] }\n".into();
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    let launched = c.launch(3);
    c.marker(&launched[0].1);
    c.wait_hosts("the first worker, at once", |h| h.len() == 1);
    job_progress(&c, 40, 20);
    c.marker(&launched[1].1);
    c.wait_status_text("a spare: join.sizes lets the job grow from 1 to 3 workers, 1 ready");
    let out = c.dtctl(&["explain", &launched[1].0]);
    let told = stdout(&out);
    assert!(
        told.contains("waiting for a spare: join.sizes"),
        "{told}{}",
        stderr(&out)
    );
    c.marker(&launched[2].1);
    c.wait_status_text("the job's next checkpoint: 2 ready worker(s) join at one after step 20");
    job_progress(&c, 50, 20);
    c.wait_passes(3);
    assert_eq!(
        c.hosts().len(),
        1,
        "not at a progress line with the same checkpoint"
    );
    job_progress(&c, 60, 60);
    c.wait_hosts("the two to join at the checkpoint", |h| h.len() == 3);
    let generations = joined_generations(&c, &launched[1..]);
    assert_eq!(generations.len(), 1, "one generation: {generations:?}");
}

/// `disruption.budget: 1`: two elastic tags deleted at once; one worker leaves, the other
/// keeps training (held, journaled, shown why) until the first is acknowledged and terminated.
#[test]
fn a_disruption_budget_of_one_holds_the_second_removal_until_the_first_ends() {
    let mut c = Cluster::new();
    c.extra = "disruption: { budget: 1 }\n".into();
    let job = log_ack_job(&c, "10m");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let launched = c.launch(2);
    for (_, ip) in &launched {
        c.marker(ip);
    }
    c.wait_hosts("both workers to join", |h| h.len() == 2);
    for (id, _) in &launched {
        c.delete_elastic_tag(id);
    }
    let one = c.wait_hosts("one worker to leave", |h| h.len() == 1);
    let stays = launched
        .iter()
        .position(|(_, ip)| *ip == one[0])
        .expect("a worker");
    let ((held, _), (leaving, leaving_ip)) = (&launched[stays], &launched[1 - stays]);
    c.wait_events("removal_held", held, 1);
    let printed = c.wait_status_text("the disruption budget: 1 may be leaving at once, 1 are");
    assert!(printed.contains(leaving_ip.as_str()), "{printed}");
    assert_eq!(c.state_of(held), "running");
    assert_ne!(c.tag(held, STATUS).as_deref(), Some("REMOVAL_QUEUED"));

    c.append_log(&format!("1 REMOVED {leaving_ip} 2026-11-22 10:00:00\n"));
    c.wait_events("terminated", leaving, 1);
    c.wait_hosts("the held worker to leave in turn", |h| h.is_empty());
    c.wait_tag(held, "REMOVAL_QUEUED");
    assert_eq!(c.events_of("removal_held", held), 1, "journaled once");
}

#[test]
fn removal_waits_for_the_host_worker_log_acknowledgement() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "10m");
    let (id, ip) = cluster_with_member(&mut c, 0, &job);
    // An old REMOVED line for the same IP, written before the removal, must not count.
    c.append_log(&format!("1 REMOVED {ip} 2026-11-22 09:00:00\n"));
    // Read by a pass before the removal, so the removal's mark lies after it.
    c.wait_passes(2);

    c.delete_elastic_tag(&id);
    c.wait_hosts("the worker to leave the host file", |h| h.is_empty());
    c.wait_tag(&id, "REMOVAL_QUEUED");
    c.wait_passes(3);
    assert_eq!(
        c.state_of(&id),
        "running",
        "not terminated before the job acknowledges"
    );
    let status = c.status_json();
    let waiting = status["workers"][0]["waiting_for"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(waiting.contains("acknowledge generation 2"), "{waiting}");

    c.append_log(&format!("2 REMOVED {ip} 2026-11-22 10:00:00\n"));
    // dtd journals a termination just after EC2 accepts it, so wait for the journal line:
    // the instance state alone can change a moment before it is written.
    wait_until(
        "the termination in the journal",
        Duration::from_secs(20),
        || c.events_of("terminated", &id) > 0,
    );
    assert_ne!(c.state_of(&id), "running");
    assert_eq!(c.tag(&id, STATUS).as_deref(), Some("REMOVED"));
    assert_eq!(c.events_of("acknowledged", &id), 1);
    assert_eq!(c.events_of("terminated", &id), 1);
    // The host files shrank: rewriting them is no refusal (it once warned "holds N bytes").
    let log = c.dtd_log();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert!(warned.is_empty(), "a leave warned: {warned:#?}");
}

#[test]
fn removal_waits_for_the_ack_file_written_by_dtctl_ack() {
    let mut c = Cluster::new();
    let job = "  notify: none\n  ack: { timeout: 10m }".to_string();
    let (id, _ip) = cluster_with_member(&mut c, 0, &job);
    let out = c.dtctl(&["remove", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_tag(&id, "REMOVAL_QUEUED");
    // The tag is written mid-pass, the status report at its end.
    c.wait_status("generation 2", |s| s["generation"] == 2);

    // Acknowledging the join's generation is not enough: generation 2 no longer lists it.
    assert!(c.dtctl(&["ack", "1"]).status.success());
    c.wait_passes(3);
    assert_eq!(c.state_of(&id), "running");

    let out = c.dtctl(&["ack", "2"]);
    assert!(
        stdout(&out).contains("acknowledged generation 2"),
        "{}",
        stdout(&out)
    );
    wait_until("termination", Duration::from_secs(20), || {
        c.state_of(&id) != "running"
    });
    assert_eq!(c.tag(&id, STATUS).as_deref(), Some("REMOVED"));
}

#[test]
fn without_acknowledgement_the_ack_timeout_terminates() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "3s");
    let (id, _ip) = cluster_with_member(&mut c, 0, &job);
    // The removal is queued after the tag is gone: its 3 s count from no earlier than this.
    let untagged = std::time::Instant::now();
    c.delete_elastic_tag(&id);
    c.wait_tag(&id, "REMOVAL_QUEUED");
    wait_until(
        "termination after the timeout",
        Duration::from_secs(20),
        || c.state_of(&id) != "running",
    );
    assert!(
        untagged.elapsed() >= Duration::from_secs(3),
        "terminated before the ack timeout"
    );
    assert_eq!(c.events_of("ack_timeout", &id), 1);
}

#[test]
fn base_hosts_are_never_removed_or_terminated() {
    let mut c = Cluster::new();
    let (base_id, base_ip) = c.launch(1).remove(0);
    let job = log_ack_job(&c, "1s");
    c.write_config(&c.config(0, 8, &[&base_ip], &job));
    c.start_dtd();
    c.wait_hosts("the base host to be listed", |h| h == [base_ip.clone()]);

    let out = c.dtctl(&["remove", &base_ip]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("never removed"), "{}", stderr(&out));

    c.delete_elastic_tag(&base_id);
    wait_until(
        "the refusal in the journal",
        Duration::from_secs(10),
        || c.events_of("removal_refused", &base_id) == 1,
    );
    c.wait_passes(5);
    assert_eq!(c.hosts(), vec![base_ip.clone()]);
    assert_eq!(c.state_of(&base_id), "running");
    assert_eq!(
        c.tag(&base_id, STATUS),
        None,
        "dtd does not manage a base host's tag"
    );
    assert_eq!(
        c.events_of("removal_refused", &base_id),
        1,
        "refused once, not every pass"
    );
}

#[test]
fn voluntary_removal_stops_at_min() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "1s");
    let (id, ip) = cluster_with_member(&mut c, 1, &job);
    c.delete_elastic_tag(&id);
    wait_until("the hold in the journal", Duration::from_secs(10), || {
        c.events_of("removal_held", &id) == 1
    });
    c.wait_passes(3);
    assert_eq!(c.hosts(), vec![ip]);
    assert_eq!(c.state_of(&id), "running");
    let text = stdout(&c.dtctl(&["status"]));
    assert!(text.contains("worker count above min (1)"), "{text}");
}

#[test]
fn instances_outside_the_cluster_are_left_alone() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "1s");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let foreign = c.foreign_template();
    let (fid, fip) = c.launch_from(&foreign, 1).remove(0);
    c.marker(&fip);
    let (_id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the cluster's worker to join", |h| h.contains(&ip));
    c.delete_elastic_tag(&fid);
    c.wait_passes(3);
    assert!(!c.hosts().contains(&fip), "a foreign instance never joins");
    assert_eq!(c.tag(&fid, STATUS), None);
    assert_eq!(c.state_of(&fid), "running");
    let out = c.dtctl(&["remove", &fip]);
    assert!(
        stderr(&out).contains("does not come from this cluster"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_worker_whose_prepare_data_failed_says_why() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "1s");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    let report = r#"{"exit_code": 2, "attempts": 3, "duration_s": 4.2, "output_tail": ["downloading", "checksum mismatch"]}"#;
    c.report_json(&ip, MarkerKind::Failed, report);
    c.wait_tag(&id, "PREPARE_FAILED");
    // The tag is written mid-pass; the report that explains it at the pass's end.
    c.wait_status_text("exit 2 after 3 attempt(s): checksum mismatch");
    assert!(c.hosts().is_empty());
}

#[test]
fn dtctl_add_launches_from_the_worker_template_and_they_prepare() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "10m");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let out = c.dtctl(&["add", "--count", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ids: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| {
            l.strip_prefix("launched ")?
                .split_whitespace()
                .next()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(ids.len(), 2, "{}", stdout(&out));
    for id in &ids {
        assert_eq!(
            c.tag(id, "aws:ec2launchtemplate:id"),
            Some(c.template_id.clone())
        );
        c.wait_tag(id, "PREPARING");
    }
    let out = c.dtctl(&["add", "--count", "0"]);
    assert!(!out.status.success(), "a count of 0 is refused");
}

/// The ids `dtctl` printed a line starting with `prefix` for, then the id.
fn ids_after(out: &std::process::Output, prefix: &str) -> Vec<String> {
    (stdout(out).lines())
        .filter_map(|l| l.strip_prefix(prefix)?.split_whitespace().next())
        .map(|id| id.trim_end_matches(':').to_string())
        .collect()
}

#[test]
fn dtctl_scale_launches_template_workers_and_lets_the_least_trained_go_first() {
    let mut c = Cluster::new();
    let job = log_ack_job(&c, "10m");
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    let out = c.dtctl(&["scale", "--replicas", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("itest-worker-template: 0 workers -> 3\n"),
        "{}",
        stdout(&out)
    );
    let launched = ids_after(&out, "launched ");
    assert_eq!(launched.len(), 3, "{}", stdout(&out));

    // Two join; the third is still preparing when the job shrinks to two: it leaves, not a
    // worker that trains.
    let ip = |id: &str| {
        c.aws(&[
            "ec2",
            "describe-instances",
            "--instance-ids",
            id,
            "--query",
            "Reservations[0].Instances[0].PrivateIpAddress",
            "--output",
            "text",
        ])
        .trim()
        .to_string()
    };
    for id in &launched[..2] {
        c.marker(&ip(id));
    }
    for id in &launched[..2] {
        c.wait_tag(id, "ADD_QUEUED");
    }
    let generation = c.written_generation().trim().to_string();
    for id in &launched[..2] {
        c.append_log(&format!(
            "{generation} ADDED {} 2026-11-26 10:00:00\n",
            ip(id)
        ));
    }
    for id in &launched[..2] {
        c.wait_tag(id, "ADDED");
    }
    c.wait_tag(&launched[2], "PREPARING");
    let out = c.dtctl(&["scale", "--replicas", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("3 workers -> 2"), "{}", stdout(&out));
    let gone: Vec<String> = (stdout(&out).lines())
        .filter(|l| l.contains("elastic tag deleted"))
        .filter_map(|l| l.split(':').next().map(str::to_string))
        .collect();
    assert_eq!(gone, [launched[2].clone()], "{}", stdout(&out));
    assert_eq!(c.tag(&launched[2], ELASTIC), None);

    // Already two: nothing to do, and --wait sees the job train on them.
    let out = c.dtctl(&["scale", "--replicas", "2", "--wait", "--timeout", "60s"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains("nothing to do") && text.contains("done: the job trains on 2 workers"),
        "{text}"
    );

    let out = c.dtctl(&["scale", "--replicas", "9"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("the config's workers.max is 8"),
        "{}",
        stderr(&out)
    );
}

/// A worker whose marker is there before dtd first sees it, held as a spare: its story begins
/// with `ready`, and `dtctl explain` tells it.
#[test]
fn dtctl_explain_tells_a_spare_that_was_ready_when_first_seen() {
    let mut c = Cluster::new();
    c.extra = "join: { sizes: [2] }\n".into();
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.start_dtd();
    c.wait_events("ready", &id, 1);
    let out = c.dtctl(&["explain", &ip]);
    let told = stdout(&out);
    assert!(out.status.success(), "{told}{}", stderr(&out));
    assert!(
        told.contains("is ready (prepare-data marker) and waits to join: a spare: join.sizes")
            && told.contains("still ready and waiting to join"),
        "{told}"
    );
    assert!(c.hosts().is_empty(), "a spare until a second is ready");
}
