//! Well-formed lies a worker's user code can write in the shared directory, against the real
//! `dtd` and moto: an interruption notice about another worker (unsigned, or signed with a key of
//! its own), a Spot warning for an on-demand instance, an acknowledgement of generation 2^64-1,
//! the job's files created by another user first, a success marker about another instance. Each
//! is refused, the victim keeps training, the refusal is journaled once and shown by `dtctl
//! status` (docs/shared-directory.md, "What a worker can put there").

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use dt::protocol::interruption::{InterruptionMarker, NoticeKind};
use dt::protocol::markers::MarkerName;
use dt::protocol::signed::SigningKey;

use crate::support::*;

/// The user a worker's files on EFS belong to in these tests: not the job's (root here).
const WORKER_UID: u32 = 65534;

fn job_config(efs: &Path) -> String {
    let efs = efs.display();
    format!("  ack: {{ file: {efs}/ack, timeout: 10m }}")
}

/// Two Spot workers in the job, acknowledged.
fn two_in_the_job() -> (Cluster, Vec<(String, String)>) {
    let mut c = Cluster::new();
    let workers = c.launch_spot(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    let job = job_config(&c.efs());
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    c.wait_hosts("both workers", |h| h.len() == 2);
    assert!(c
        .dtctl(&["ack", c.written_generation().trim()])
        .status
        .success());
    for (id, _) in &workers {
        c.wait_tag(id, "ADDED");
    }
    (c, workers)
}

/// A well-formed notice naming `instance`, as its agent would render it (unsigned).
fn notice(at: &str, instance: &str, kind: NoticeKind) -> Vec<u8> {
    InterruptionMarker {
        id: format!("imds:{}:2026-11-25T10:00:00Z", kind.as_str()),
        kind,
        instance_id: instance.into(),
        ip: at.parse().expect("an IP"),
        detail: r#"{"action":"terminate","time":"2026-11-25T10:02:00Z"}"#.into(),
        action_time: Some("2026-11-25T10:02:00Z".into()),
        noticed_at: "2026-11-25T10:00:00Z".into(),
    }
    .render()
}

/// What user code on any worker can write in `interruption_<at>`: a notice naming `instance`,
/// unsigned or signed with a key of its own making.
fn write_notice(c: &Cluster, at: &str, instance: &str, kind: NoticeKind, own_key: bool) {
    let body = notice(at, instance, kind);
    let name = MarkerName::new(MarkerKind::Interruption, at.parse().unwrap());
    let bytes = match own_key {
        false => body,
        true => {
            let key = SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap();
            key.sign(&name, &body, dt::clock::now_millis())
        }
    };
    // Replaced whole (a new inode), as a file is read again only when replaced.
    dt::fsutil::write_atomic(&name.path_in(&c.efs()), &bytes).expect("writing the notice");
}

fn count(c: &Cluster, kind: &str) -> usize {
    c.journal().iter().filter(|e| e["kind"] == kind).count()
}

fn chown(path: &Path, uid: u32) {
    nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), None).expect("chown (root)");
}

#[test]
fn a_notice_about_another_worker_is_refused_and_the_victims_own_still_counts() {
    let (c, w) = two_in_the_job();
    let ((attacker, attacker_ip), (victim, victim_ip)) = (&w[0], &w[1]);
    // Under the victim's name in the shared directory, with its real id: not read at all.
    write_notice(&c, victim_ip, victim, NoticeKind::SpotInterruption, false);
    c.wait_events("marker_refused", victim, 1);
    c.wait_status_text(&format!(
        "Refused:     interruption_{victim_ip} is in the shared directory, where dtd reads no report"
    ));
    // On dtd's port, claiming the victim's instance: with a document of its own making...
    let mut a = attacker::Attacker::connect(&c, "127.0.0.2").unwrap();
    let answer = a.claim_with_forged_document(victim_ip, victim).unwrap();
    assert!(!answer.ok, "{answer:?}");
    c.wait_events("marker_refused", victim, 2);
    c.wait_status_text("does not verify with AWS's certificate");
    // ...and with the document EC2 signed for its own instance (were the metadata open to it).
    let mut a = attacker::Attacker::connect(&c, "127.0.0.2").unwrap();
    let answer = a
        .claim_with_own_document(victim_ip, victim, attacker, attacker_ip)
        .unwrap();
    assert!(!answer.ok, "{answer:?}");
    c.wait_events("marker_refused", victim, 3);
    c.wait_status_text("a document proves only its own instance");
    // As its own instance, with a key of its own: its instance speaks with its agent's key.
    let mut a = attacker::Attacker::connect(&c, "127.0.0.2").unwrap();
    let answer = a
        .claim_with_own_document(attacker_ip, attacker, attacker, attacker_ip)
        .unwrap();
    assert!(answer.refused.unwrap_or_default().contains("dtd keeps"));
    c.wait_events("marker_refused", attacker, 1);
    c.wait_passes(3);
    assert_eq!(
        c.events_of("marker_refused", victim),
        3,
        "journaled once each"
    );
    assert_eq!(count(&c, "interrupted"), 0);
    let mut hosts = c.hosts();
    hosts.sort();
    let mut both = vec![attacker_ip.clone(), victim_ip.clone()];
    both.sort();
    assert_eq!(hosts, both, "the victim keeps training");
    assert_eq!(c.tag(victim, STATUS).as_deref(), Some("ADDED"));
    assert_eq!(c.tag(attacker, STATUS).as_deref(), Some("ADDED"));
    assert!(c.dtd_log().contains("WARN"), "refusal logged as a warning");
    // The victim's own agent's Spot warning is believed at once, forged ones notwithstanding.
    let real = notice(victim_ip, victim, NoticeKind::SpotInterruption);
    c.report(victim_ip, MarkerKind::Interruption, &real);
    c.wait_tag(victim, "INTERRUPTED");
    c.wait_hosts("the victim out on its own notice", |h| {
        h == [attacker_ip.clone()]
    });
}

#[test]
fn a_spot_warning_for_an_on_demand_worker_is_refused() {
    let mut c = Cluster::new();
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    let job = job_config(&c.efs());
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    c.wait_hosts("the worker", |h| h.contains(&ip));
    // Its own agent's (signed): a notice EC2 contradicts is refused all the same.
    let body = notice(&ip, &id, NoticeKind::SpotInterruption);
    c.report(&ip, MarkerKind::Interruption, &body);
    c.wait_events("notice_refused", &id, 1);
    c.wait_status_text(&format!("EC2 says {id} is on-demand"));
    c.wait_passes(2);
    assert!(c.hosts().contains(&ip));
    assert_eq!(c.events_of("interrupted", &id), 0);
}

#[test]
fn an_ack_of_the_largest_generation_is_refused_and_terminates_nothing() {
    let (c, w) = two_in_the_job();
    let (leaving, leaving_ip) = &w[0];
    std::fs::write(c.efs().join("ack"), format!("{}\n", u64::MAX)).unwrap();
    c.delete_elastic_tag(leaving);
    c.wait_tag(leaving, "REMOVAL_QUEUED");
    c.wait_status_text(&format!(
        "Refused:     the ack file holds generation {}, but dtd has written only up to 2",
        u64::MAX
    ));
    c.wait_passes(3);
    assert_eq!(count(&c, "ack_refused"), 1, "journaled once");
    assert_eq!(c.state_of(leaving), "running", "terminated on a lie");
    assert!(!c.hosts().contains(leaving_ip));
    let status = c.status_json();
    assert_eq!(status["generation"], 2, "the counter did not wrap or jump");
    // The job acknowledges the generation it got: the worker goes.
    assert!(c.dtctl(&["ack", "2"]).status.success());
    c.wait_events("terminated", leaving, 1);
    // dtctl ack refuses what does not exist yet.
    let out = c.dtctl(&["ack", "7"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("generation 7 does not exist yet: dtd has written up to 2"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn job_files_another_user_created_are_refused_and_dtds_own_are_taken_back() {
    let mut c = Cluster::new();
    let efs = c.efs();
    // A worker got there first: a generation file and a host file of its own, with plausible
    // content, which it could rewrite in place later.
    for (name, body) in [("generation", "1\n"), ("hosts.mpi", "")] {
        std::fs::write(efs.join(name), body).unwrap();
        chown(&efs.join(name), WORKER_UID);
    }
    let workers = c.launch(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    let job = job_config(&efs);
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    c.wait_hosts("both workers", |h| h.len() == 2);
    // The generation file is written after the host files: wait for what is asserted.
    for name in ["generation", "hosts.mpi", "host_worker"] {
        wait_for(
            &format!("{name} owned by dtd's user (root), not the worker's"),
            Duration::from_secs(30),
            || std::fs::metadata(efs.join(name)).map(|m| m.uid()).ok(),
            |uid| *uid == Some(0),
        );
    }
    // The ack file, created by a worker with the right number: not the job's word.
    let (leaving, _) = &workers[0];
    c.delete_elastic_tag(leaving);
    c.wait_tag(leaving, "REMOVAL_QUEUED");
    let ack = efs.join("ack");
    // Created already the worker's: written as root then given away, a pass between the two
    // would read the job's (uid 0) acknowledgement.
    let body = format!("{}\n", c.written_generation().trim());
    dt::fsutil::write_atomic_owned(&ack, body.as_bytes(), Some(WORKER_UID)).unwrap();
    c.wait_status_text(&format!(
        "Refused:     {} is owned by uid {WORKER_UID}, not the job's user (uid 0): ignored",
        ack.display()
    ));
    c.wait_passes(3);
    assert_eq!(count(&c, "file_refused"), 1, "journaled once");
    assert_eq!(c.state_of(leaving), "running");
    // The job's own acknowledgement.
    chown(&ack, 0);
    c.wait_events("terminated", leaving, 1);
}

#[test]
fn a_success_marker_another_worker_wrote_does_not_join_the_worker() {
    let (c, w) = two_in_the_job();
    let (id, ip) = c.launch(1).remove(0);
    // Its agent started: its key is on its instance, its data not ready yet.
    c.agent_key(&id);
    // Written for the new worker by someone else in the shared directory: not read.
    let marker = c.efs().join(format!("prepare_data_success_{ip}"));
    std::fs::write(&marker, format!("{{\"instance_id\": \"{id}\"}}\n")).unwrap();
    c.wait_events("marker_refused", &id, 1);
    c.wait_status_text(&format!(
        "prepare_data_success_{ip} is in the shared directory, where dtd reads no report"
    ));
    // Said on another worker's own connection, with that agent's key and its instance's
    // document (what someone holding both could do): an agent speaks for its instance only.
    let (other, other_ip) = (&w[0].0, &w[0].1);
    let mut a = attacker::Attacker::connect(&c, "127.0.0.2")
        .unwrap()
        .with_key(c.agent_key(other));
    assert!(
        a.claim_with_own_document(other_ip, other, other, other_ip)
            .unwrap()
            .ok
    );
    let line = format!("{{\"instance_id\": \"{id}\"}}\n");
    let name = MarkerName::new(MarkerKind::Success, ip.parse().unwrap());
    let answer = a
        .report(name, line.as_bytes(), dt::clock::now_millis())
        .unwrap();
    assert!(!answer.ok, "{answer:?}");
    c.wait_events("marker_refused", other, 1);
    c.wait_status_text("an agent speaks only for its own instance");
    c.wait_passes(3);
    assert_eq!(c.tag(&id, STATUS).as_deref(), Some("PREPARING"));
    assert!(!c.hosts().contains(&ip));
    assert_eq!(c.events_of("marker_refused", &id), 1);
    // Its own agent's marker, replacing it: it joins.
    c.marker(&ip);
    c.wait_hosts("the worker to join on its own marker", |h| h.contains(&ip));
}

#[test]
fn a_pidfile_or_a_process_of_another_user_is_never_signalled() {
    use std::os::unix::process::CommandExt;
    let mut c = Cluster::new();
    let efs = c.efs();
    // A process of another user (a worker's, say), and a pidfile naming it.
    let mut stranger = std::process::Command::new("sleep")
        .arg("600")
        .uid(WORKER_UID)
        .spawn()
        .expect("sleep as another user");
    let pidfile = efs.join("job.pid");
    std::fs::write(&pidfile, format!("{}\n", stranger.id())).unwrap();
    let (_, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    let job = format!(
        "  notify: {{ signal: SIGTERM, pidfile: {} }}\n  ack: {{ timeout: 10m }}",
        pidfile.display()
    );
    c.write_config(&c.config(0, 8, &[], &job));
    c.start_dtd();
    c.wait_hosts("the worker", |h| h.contains(&ip));
    let pid = stranger.id();
    c.wait_status_text(&format!(
        "PID {pid} runs as uid {WORKER_UID}, not the job's user (uid 0)"
    ));
    // The pidfile itself given to another user: refused before the PID is even read.
    chown(&pidfile, WORKER_UID);
    c.wait_status_text(&format!(
        "{} is owned by uid {WORKER_UID}, not the job's user (uid 0)",
        pidfile.display()
    ));
    c.wait_passes(2);
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "the stranger got the job's SIGTERM"
    );
    let _ = stranger.kill();
    let _ = stranger.wait();
}
