//! Reacting without listing the fleet: with the event queue configured and the complete listing
//! an hour away, a deleted elastic tag (through its Tag Change event), a new marker and the job's
//! acknowledgement are each acted on through a read of just that instance, or of none; and a
//! change whose event never comes is caught by the resync.

use std::time::Duration;

use crate::support::fixtures::tag_deleted_entry;
use crate::support::*;

struct Running {
    c: Cluster,
    workers: Vec<(String, String)>,
}

/// Two joined workers; the job acknowledges in the ack-file form; `resync` as given.
fn running(resync: &str) -> Running {
    let mut c = Cluster::new();
    let queue = create_event_queue(&c);
    let workers = c.launch(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    c.extra = format!("events:\n  queue_url: {queue}\nresync: {resync}\n");
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    c.write_config(&config);
    c.start_dtd();
    c.wait_hosts("both workers", |h| h.len() == 2);
    Running { c, workers }
}

fn listed_at(c: &Cluster) -> u64 {
    c.status_json()["instances_listed_at"]
        .as_u64()
        .expect("instances_listed_at in the status")
}

fn generation(c: &Cluster) -> String {
    c.written_generation()
}

#[test]
fn join_leave_and_release_need_no_listing() {
    let Running { c, workers } = running("1h");
    let listed = listed_at(&c);

    // Join: a worker launched after the listing, found by its marker's IP.
    let (new_id, new_ip) = c.launch(1).remove(0);
    c.marker(&new_ip);
    c.wait_hosts("the new worker to join", |h| h.contains(&new_ip));
    c.wait_tag(&new_id, "ADD_QUEUED");

    // Leave: the elastic tag deleted in the console; AWS tells the queue.
    let (id, ip) = &workers[0];
    c.delete_elastic_tag(id);
    let left = [("NodeType", "Worker")];
    put_entries(&c, &[tag_deleted_entry(id, ELASTIC, &left)]);
    c.wait_hosts("the worker to leave", |h| !h.contains(ip));
    assert_eq!(c.state_of(id), "running", "not before the job acknowledges");

    // Release: the job acknowledges the generation without the worker; nothing is listed.
    std::fs::write(c.efs().join("ack"), generation(&c)).unwrap();
    wait_until(
        "the worker to be terminated",
        Duration::from_secs(20),
        || matches!(c.state_of(id).as_str(), "shutting-down" | "terminated"),
    );
    // The status of a pass after the termination, not one written before it.
    c.wait_passes(2);
    assert_eq!(
        listed_at(&c),
        listed,
        "a complete listing ran: {}",
        c.dtd_log()
    );
    assert_eq!(c.state_of(&workers[1].0), "running");
}

#[test]
fn the_resync_catches_a_deleted_tag_whose_event_never_came() {
    let Running { c, workers } = running("1s");
    let listed = listed_at(&c);
    let (id, ip) = &workers[1];
    c.delete_elastic_tag(id);
    c.wait_hosts("the worker to leave", |h| !h.contains(ip));
    // The host file is written before the status of the same pass: wait for that status.
    wait_until(
        "the status of a later listing",
        Duration::from_secs(20),
        || listed_at(&c) > listed,
    );
    assert!(c.hosts().contains(&workers[0].1));
}

#[test]
fn a_marker_whose_ip_no_worker_has_is_not_read_again_every_pass() {
    let Running { c, .. } = running("1h");
    // The host files are written before the status of the same pass: without this wait the
    // first listing's status (a read) could be counted as one of the marker's.
    wait_until(
        "a pass that reads nothing from EC2",
        Duration::from_secs(20),
        || c.status_json()["ec2_calls_last_pass"].as_u64() == Some(0),
    );
    // What any worker can write: a marker for an address in the workers' subnet no worker has.
    std::fs::write(c.efs().join("prepare_data_success_10.0.200.9"), "{}").unwrap();
    let start = std::time::Instant::now();
    // Passes come every 300 ms; each status says whether its pass read EC2. Asked again after
    // 1 s, 2 s, 4 s..., the IP is read at 0, 1, 3, 7... s: within t seconds at most
    // 1 + log2(t + 1) times, where a read every pass would be one per status.
    let (mut passes, mut reads) = (std::collections::BTreeSet::new(), 0);
    while passes.len() < 12 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} passes",
            passes.len()
        );
        let text = std::fs::read_to_string(c.state_dir().join("status.json")).unwrap_or_default();
        let s: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if let Some(at) = s["updated_at"].as_u64() {
            if passes.insert(at) && s["ec2_calls_last_pass"].as_u64().unwrap_or(0) > 0 {
                reads += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let allowed = 1 + (start.elapsed().as_secs_f64() + 1.0).log2().floor() as usize;
    assert!(
        reads <= allowed,
        "{reads} of {} passes read EC2 (allowed {allowed})",
        passes.len()
    );
}
