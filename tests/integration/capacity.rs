//! Capacity fallback (`workers.capacity`) with the real `dtd` and `dtctl` against moto, their EC2
//! calls through the capacity STAND-IN (support::ec2_capacity), which answers RunInstances of a
//! type it is told has no capacity as EC2 does and passes everything else to moto.

use std::time::Duration;

use crate::health::{log_ack_job, report, running_from_template};
use crate::support::ec2_capacity::Ec2CapacityStandIn;
use crate::support::*;

const ICE: &str = "InsufficientInstanceCapacity";

/// p5.48xlarge first, then p4d.24xlarge in `subnet`; refused choices skipped for 10 minutes.
fn capacity(subnet: &str) -> String {
    format!(
        "  capacity:\n    cool_down: 10m\n    choices:\n      - {{ instance_type: p5.48xlarge, gpus: 8 }}\n      - {{ instance_type: p4d.24xlarge, gpus: 8, subnet: {subnet} }}\n"
    )
}

/// A cluster whose dtd and dtctl reach EC2 through the stand-in, which has no p5.48xlarge.
fn cluster(extra_workers: &str) -> (Cluster, Ec2CapacityStandIn, String) {
    let mut c = Cluster::new();
    let stand_in = Ec2CapacityStandIn::start(c.moto.port);
    stand_in.refuse("p5.48xlarge", ICE);
    let (_, subnets) = c.vpc_with_subnets("10.7.0.0/16", &[("10.7.1.0/24", "us-east-1b")]);
    let subnet = subnets[0].clone();
    c.worker_extra = format!("{}{extra_workers}", capacity(&subnet));
    c.ec2_endpoint = Some(stand_in.endpoint());
    (c, stand_in, subnet)
}

/// An instance's type and subnet, as EC2 (moto) says.
fn type_and_subnet(c: &Cluster, id: &str) -> (String, String) {
    let out = c.aws(&[
        "ec2",
        "describe-instances",
        "--instance-ids",
        id,
        "--query",
        "Reservations[0].Instances[0].[InstanceType,SubnetId]",
        "--output",
        "text",
    ]);
    let mut f = out.split_whitespace().map(str::to_string);
    (f.next().unwrap_or_default(), f.next().unwrap_or_default())
}

fn journal_of_kind(c: &Cluster, kind: &str) -> Vec<String> {
    (c.journal().iter())
        .filter(|e| e["kind"] == kind)
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_replacement_falls_over_to_the_next_type_and_the_refused_one_waits_out_its_cool_down() {
    let (mut c, stand_in, subnet) = cluster("  replace_unhealthy: true\n");
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    let launched = c.launch(2);
    for (_, ip) in &launched {
        c.marker(ip);
    }
    c.wait_hosts("both to join", |h| h.len() == 2);
    let ids: Vec<&str> = launched.iter().map(|(id, _)| id.as_str()).collect();

    let (sick, sick_ip) = &launched[0];
    report(&c, sick, sick_ip, false, true, "7 of 8 GPUs visible");
    let fresh = wait_for(
        "a replacement launched",
        Duration::from_secs(30),
        || running_from_template(&c, &ids),
        |r| r.len() == 1,
    );
    assert_eq!(
        type_and_subnet(&c, &fresh[0].0),
        ("p4d.24xlarge".into(), subnet.clone())
    );
    assert_eq!(
        stand_in.run_instances_types(),
        ["p5.48xlarge", "p4d.24xlarge"],
        "each once"
    );
    let refused = journal_of_kind(&c, "capacity_unavailable");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].starts_with(&format!("no capacity for p5.48xlarge: {ICE} (We currently"))
            && refused[0].contains("skipped until"),
        "{}",
        refused[0]
    );
    let replaced = c.journal_of(&fresh[0].0);
    let line = replaced
        .iter()
        .find(|e| e["kind"] == "replacement_launched")
        .unwrap();
    let said = line["message"].as_str().unwrap_or_default();
    assert!(
        said.contains(&format!(
            "as p4d.24xlarge in {subnet} to replace unhealthy {sick}"
        )),
        "{said}"
    );
    let status = c.wait_status_text(
        "Capacity:    1. p5.48xlarge skipped: InsufficientInstanceCapacity until",
    );
    assert!(
        status.contains(&format!("Capacity:    2. p4d.24xlarge in {subnet} tried")),
        "{status}"
    );

    // Within the cool-down the next replacement goes straight to the second choice, even with
    // capacity back: the refused type is not asked again before its time.
    stand_in.allow("p5.48xlarge");
    let (other, other_ip) = &launched[1];
    report(&c, other, other_ip, false, true, "7 of 8 GPUs visible");
    let mut known = ids.clone();
    known.push(&fresh[0].0);
    let second = wait_for(
        "the second replacement launched",
        Duration::from_secs(30),
        || running_from_template(&c, &known),
        |r| r.len() == 1,
    );
    assert_eq!(type_and_subnet(&c, &second[0].0).0, "p4d.24xlarge");
    assert_eq!(
        stand_in.run_instances_types(),
        ["p5.48xlarge", "p4d.24xlarge", "p4d.24xlarge"]
    );
    assert_eq!(journal_of_kind(&c, "capacity_unavailable").len(), 1);
}

#[test]
fn dtctl_add_falls_over_and_another_refusal_stops_it_with_ec2s_words() {
    let (c, stand_in, subnet) = cluster("");
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    let out = c.dtctl(&["add", "--count", "2"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("no capacity for p5.48xlarge: {ICE} (We currently")),
        "{text}"
    );
    let launched: Vec<&str> = (text.lines())
        .filter(|l| {
            l.starts_with("launched ") && l.contains(&format!("as p4d.24xlarge in {subnet}"))
        })
        .collect();
    assert_eq!(launched.len(), 2, "{text}");
    for id in running_from_template(&c, &[]).iter().map(|(id, _)| id) {
        assert_eq!(
            type_and_subnet(&c, id),
            ("p4d.24xlarge".into(), subnet.clone())
        );
    }

    // A refusal that is not about capacity: the next choice would be refused alike.
    stand_in.refuse("p5.48xlarge", "InvalidParameterCombination");
    let before = stand_in.run_instances_types().len();
    let out = c.dtctl(&["add"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("RunInstances from itest-worker-template as p5.48xlarge")
            && err.contains("InvalidParameterCombination"),
        "{err}"
    );
    assert_eq!(
        stand_in.run_instances_types().len(),
        before + 1,
        "p4d not tried"
    );
}
