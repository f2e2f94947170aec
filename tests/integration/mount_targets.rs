//! A worker in an Availability Zone where the shared file system has no mount target, end to
//! end: moto over HTTP (EC2 and EFS), the AWS CLI as the person at the console creating the VPC,
//! the file system and its mount targets, and the real `dtd` / `dtctl` binaries.

use crate::support::*;

const ZONE_A: &str = "us-east-1a";
const ZONE_B: &str = "us-east-1b";

/// What the person built: a VPC with one subnet in each of two zones, and an EFS file system.
struct Network {
    subnet_a: String,
    subnet_b: String,
    fs_id: String,
}

fn build_network(c: &Cluster) -> Network {
    let text = ["--output", "text"];
    let zones = [("10.1.1.0/24", ZONE_A), ("10.1.2.0/24", ZONE_B)];
    let (_, subnets) = c.vpc_with_subnets("10.1.0.0/16", &zones);
    let [subnet_a, subnet_b] = [subnets[0].clone(), subnets[1].clone()];
    let fs_id = c.aws(
        &[
            &[
                "efs",
                "create-file-system",
                "--creation-token",
                "itest-shared",
            ][..],
            &["--query", "FileSystemId"],
            &text,
        ]
        .concat(),
    );
    Network {
        subnet_a,
        subnet_b,
        fs_id,
    }
}

fn create_mount_target(c: &Cluster, fs_id: &str, subnet: &str) {
    let args = [
        "efs",
        "create-mount-target",
        "--file-system-id",
        fs_id,
        "--subnet-id",
        subnet,
    ];
    c.aws(&args);
}

/// Launches one worker from the cluster's template into `subnet`, as from the console.
fn launch_in(c: &Cluster, subnet: &str) -> (String, String) {
    let template = format!("LaunchTemplateId={}", c.template_id);
    let out = c.aws(&[
        "ec2",
        "run-instances",
        "--launch-template",
        &template,
        "--subnet-id",
        subnet,
        "--query",
        "Instances[0].[InstanceId,PrivateIpAddress]",
        "--output",
        "text",
    ]);
    let mut words = out.split_whitespace().map(str::to_string);
    let id = words.next().expect("an instance id");
    let ip = words.next().expect("a private IP");
    (id, ip)
}

fn start(c: &mut Cluster, fs_id: &str) {
    // A short refresh period: a mount target a person adds is noticed within it.
    c.extra = format!("shared_fs_id: {fs_id}\nshared_fs_refresh: 1s\n");
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
}

fn waiting_for(status: &serde_json::Value, id: &str) -> Option<String> {
    let workers = status["workers"].as_array()?;
    let w = workers.iter().find(|w| w["id"] == id)?;
    w["waiting_for"].as_str().map(str::to_string)
}

fn no_target_wait(zone: &str, fs_id: &str) -> String {
    format!(
        "an EFS mount target in {zone}: {fs_id} has none there, so it cannot mount the shared directory"
    )
}

#[test]
fn a_worker_in_a_zone_without_a_mount_target_waits_for_one_until_it_is_created() {
    let mut c = Cluster::new();
    let net = build_network(&c);
    create_mount_target(&c, &net.fs_id, &net.subnet_a);
    start(&mut c, &net.fs_id);
    let (id_b, ip_b) = launch_in(&c, &net.subnet_b);
    let (id_a, ip_a) = launch_in(&c, &net.subnet_a);

    let expected = no_target_wait(ZONE_B, &net.fs_id);
    let marker_a = format!("prepare-data marker prepare_data_success_{ip_a}");
    c.wait_status("the zone-B worker waiting for a mount target", |s| {
        waiting_for(s, &id_b).as_deref() == Some(expected.as_str())
            && waiting_for(s, &id_a).as_deref() == Some(marker_a.as_str())
    });
    let text = c.wait_status_text(&expected);
    let line = text.lines().find(|l| l.contains(&id_b)).unwrap_or_default();
    assert!(
        line.contains(ZONE_B) && line.contains("PREPARING"),
        "{text}"
    );
    c.wait_events("no_mount_target", &id_b, 1);
    let event = c
        .journal_of(&id_b)
        .into_iter()
        .find(|e| e["kind"] == "no_mount_target");
    let event = event.unwrap_or_default();
    assert_eq!(event["ip"], ip_b.as_str());
    assert_eq!(event["az"], ZONE_B);
    assert_eq!(event["fs_id"], net.fs_id.as_str());
    assert_eq!(c.events_of("no_mount_target", &id_a), 0);

    // More passes, then a restarted dtd: still the one line.
    c.wait_passes(3);
    let old_pid = c.status_json()["pid"].clone();
    c.kill_dtd();
    c.start_dtd();
    c.wait_status("a pass by the restarted dtd", |s| s["pid"] != old_pid);
    c.wait_passes(3);
    assert_eq!(c.events_of("no_mount_target", &id_b), 1);
    assert_eq!(
        waiting_for(&c.status_json(), &id_b).as_deref(),
        Some(expected.as_str())
    );
    assert_eq!(
        c.state_of(&id_b),
        "running",
        "the check only explains a wait"
    );

    // The worker in the covered zone joins as usual.
    c.marker(&ip_a);
    c.wait_hosts("the zone-A worker to join", |h| h == [ip_a.clone()]);

    // The person adds a mount target in zone B: the usual wait comes back.
    create_mount_target(&c, &net.fs_id, &net.subnet_b);
    let marker_b = format!("prepare-data marker prepare_data_success_{ip_b}");
    c.wait_status("the zone-B worker waiting for its marker again", |s| {
        waiting_for(s, &id_b).as_deref() == Some(marker_b.as_str())
    });
    c.marker(&ip_b);
    c.wait_hosts("the zone-B worker to join", |h| h.contains(&ip_b));
    assert_eq!(c.events_of("no_mount_target", &id_b), 1);
}

#[test]
fn an_unreadable_file_system_claims_nothing() {
    let mut c = Cluster::new();
    let net = build_network(&c);
    // An id the account does not have: DescribeMountTargets fails, so the zones are unknown.
    start(&mut c, "fs-00000000");
    let (id_b, ip_b) = launch_in(&c, &net.subnet_b);
    let marker_b = format!("prepare-data marker prepare_data_success_{ip_b}");
    let status = c.wait_status("the usual wait and the EFS source failed", |s| {
        let efs_failed = (s["sources"].as_array().into_iter().flatten())
            .any(|src| src["name"] == "EFS mount targets" && src["ok"] == false);
        efs_failed && waiting_for(s, &id_b).as_deref() == Some(marker_b.as_str())
    });
    assert_eq!(
        status["holds"].as_array().map(Vec::len),
        Some(0),
        "an unknown answer holds nothing: {status:#}"
    );
    c.wait_passes(2);
    assert_eq!(c.events_of("no_mount_target", &id_b), 0);
    c.marker(&ip_b);
    c.wait_hosts("the worker to join", |h| h == [ip_b.clone()]);
}

#[test]
fn a_capacity_choice_in_a_zone_without_a_mount_target_is_skipped_by_dtd_and_dtctl_add() {
    let mut c = Cluster::new();
    let n = build_network(&c);
    create_mount_target(&c, &n.fs_id, &n.subnet_b);
    c.worker_extra = format!(
        "  capacity:\n    choices:\n      - {{ instance_type: p5.48xlarge, gpus: 8, subnet: {} }}\n      - {{ instance_type: p4d.24xlarge, gpus: 8, subnet: {} }}\n",
        n.subnet_a, n.subnet_b
    );
    start(&mut c, &n.fs_id);
    let first = format!(
        "Capacity:    1. p5.48xlarge in {a} skipped: {a} is in {ZONE_A}, where {} has no mount target",
        n.fs_id,
        a = n.subnet_a
    );
    let status = c.wait_status_text(&first);
    let second = format!("Capacity:    2. p4d.24xlarge in {} tried", n.subnet_b);
    assert!(status.contains(&second), "{status}");

    // dtctl add reads what dtd skips and launches the second choice only.
    let out = c.dtctl(&["add"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("skipping p5.48xlarge in {}:", n.subnet_a)),
        "{text}"
    );
    let launched = text
        .lines()
        .find(|l| l.starts_with("launched "))
        .unwrap_or_default();
    assert!(
        launched.ends_with(&format!("as p4d.24xlarge in {}", n.subnet_b)),
        "{text}"
    );
}
