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

/// Instances as (id, private IP).
type Workers = Vec<(String, String)>;

/// Starts dtd, launches two workers that join, and reports the first unhealthy: returns the
/// two, and its replacement once EC2 runs it.
fn replace_one_of_two(c: &mut Cluster) -> (Workers, Workers) {
    c.checks_health();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(c)));
    c.start_dtd();
    let launched = c.launch(2);
    for (_, ip) in &launched {
        c.marker(ip);
    }
    c.wait_hosts("both to join", |h| h.len() == 2);
    let ids: Vec<&str> = launched.iter().map(|(id, _)| id.as_str()).collect();
    let (sick, sick_ip) = &launched[0];
    report(c, sick, sick_ip, false, true, "7 of 8 GPUs visible");
    let fresh = wait_for(
        "a replacement launched",
        Duration::from_secs(30),
        || running_from_template(c, &ids),
        |r| r.len() == 1,
    );
    // EC2 shows it before dtd has journaled it (and, in the same append, what the launch met).
    c.wait_events("replacement_launched", &fresh[0].0, 1);
    (launched, fresh)
}

/// What the journal says of one instance, line by line.
fn messages_of(c: &Cluster, id: &str) -> Vec<String> {
    (c.journal_of(id).iter())
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
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
    let (launched, fresh) = replace_one_of_two(&mut c);
    let ids: Vec<&str> = launched.iter().map(|(id, _)| id.as_str()).collect();
    let sick = &launched[0].0;
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
            && err.contains("InvalidParameterCombination: We currently do not have sufficient"),
        "{err}"
    );
    // EC2's code and message, not the SDK's dump of the response.
    assert!(
        !err.contains("SdkBody") && !err.contains("raw:") && err.len() < 400,
        "{err}"
    );
    assert_eq!(
        stand_in.run_instances_types().len(),
        before + 1,
        "p4d not tried"
    );
}

const BLOCK: &str = "cr-0b10c0000000000b1";
const RESERVED: &str = "cr-0c00000000000c001";

/// The Capacity Block first, the Capacity Reservation second, then p4d without either.
fn reserved_cluster() -> (Cluster, Ec2CapacityStandIn) {
    let mut c = Cluster::new();
    let stand_in = Ec2CapacityStandIn::start(c.moto.port);
    let hours = |h: u64| Duration::from_secs(h * 3600);
    stand_in.reserve(BLOCK, "p5.48xlarge", 1, hours(3), true);
    stand_in.reserve(RESERVED, "p5.48xlarge", 2, hours(24 * 30), false);
    c.worker_extra = format!(
        "  capacity:\n    choices:\n      - {{ instance_type: p5.48xlarge, gpus: 8, reservation: {BLOCK} }}\n      - {{ instance_type: p5.48xlarge, gpus: 8, reservation: {RESERVED} }}\n      - {{ instance_type: p4d.24xlarge, gpus: 8 }}\n"
    );
    c.ec2_endpoint = Some(stand_in.endpoint());
    (c, stand_in)
}

/// The reservation fields of the `n`th RunInstances: (target, preference, market type).
fn targeting(stand_in: &Ec2CapacityStandIn, n: usize) -> (String, String, String) {
    let calls = stand_in.run_instances();
    let f = |k: &str| calls[n].get(k).cloned().unwrap_or_default();
    let spec = "CapacityReservationSpecification";
    (
        f(&format!(
            "{spec}.CapacityReservationTarget.CapacityReservationId"
        )),
        f(&format!("{spec}.CapacityReservationPreference")),
        f("InstanceMarketOptions.MarketType"),
    )
}

/// The id an `dtctl add` printed it launched.
fn added(text: &str) -> (String, String) {
    let line = (text.lines().find(|l| l.starts_with("launched ")))
        .unwrap_or_else(|| panic!("nothing launched: {text}"));
    let mut f = line.split_whitespace().skip(1);
    let id = f.next().unwrap_or_default().to_string();
    let ip = f
        .next()
        .unwrap_or_default()
        .trim_matches(['(', ')'])
        .to_string();
    (id, ip)
}

#[test]
fn dtctl_add_fills_the_capacity_block_then_the_reservation_and_the_blocks_worker_drains_before_its_end(
) {
    let (mut c, stand_in) = reserved_cluster();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    let status = c.wait_status_text(&format!(
        "Capacity:    1. p5.48xlarge from {BLOCK} (Capacity Block, 1 of 1 left, ends "
    ));
    assert!(
        status.contains(&format!(
            "Capacity:    2. p5.48xlarge from {RESERVED} (Capacity Reservation, 2 of 2 left, ends "
        )),
        "{status}"
    );

    let out = c.dtctl(&["add"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("as p5.48xlarge from {BLOCK}")),
        "{text}"
    );
    let (in_block, block_ip) = added(&text);
    assert_eq!(
        targeting(&stand_in, 0),
        (
            BLOCK.into(),
            "capacity-reservations-only".into(),
            "capacity-block".into()
        )
    );
    assert_eq!(stand_in.available(BLOCK), 0);

    // dtd reads the block full (within its 20 s re-read), and dtctl add skips it as dtd does.
    let full = format!("1. p5.48xlarge from {BLOCK} (Capacity Block, 0 of 1 left, ends ");
    let status = wait_for(
        "the block read full",
        Duration::from_secs(60),
        || stdout(&c.dtctl(&["status"])),
        |s| s.contains(&full),
    );
    assert!(
        status.contains(&format!("skipped: {BLOCK} has no instance left")),
        "{status}"
    );
    let out = c.dtctl(&["add"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!(
            "skipping p5.48xlarge from {BLOCK}: {BLOCK} has no instance left"
        )) && text.contains(&format!("as p5.48xlarge from {RESERVED}")),
        "{text}"
    );
    assert_eq!(
        targeting(&stand_in, 1),
        (
            RESERVED.into(),
            "capacity-reservations-only".into(),
            String::new()
        ),
        "a Capacity Reservation is launched On-Demand"
    );
    assert_eq!(stand_in.run_instances().len(), 2, "the block not asked");

    // The block's worker joins, and shows as a Capacity Block worker.
    c.marker(&block_ip);
    c.wait_hosts("the block's worker to join", |h| {
        h.iter().any(|l| l.starts_with(&block_ip))
    });
    // The block now ends in 35 minutes: its instances go in 5. dtd drains it from the end
    // date EC2 lists, with no EventBridge warning configured.
    stand_in.ends_in(BLOCK, Duration::from_secs(35 * 60));
    c.wait_hosts("the block's worker to leave", |h| {
        !h.iter().any(|l| l.starts_with(&block_ip))
    });
    let said = messages_of(&c, &in_block);
    assert!(
        said.iter()
            .any(|m| m.contains("Capacity Block expiration warning from the reservation")),
        "{said:#?}"
    );
    c.append_log(&format!("2 REMOVED {block_ip} 2026-11-26 10:00:00\n"));
    wait_for(
        "the block's worker terminated once the job let it go",
        Duration::from_secs(30),
        || c.state_of(&in_block),
        |s| s == "terminated" || s == "shutting-down",
    );
}

#[test]
fn a_replacement_is_launched_into_the_capacity_block_with_its_market_type() {
    let (mut c, stand_in) = reserved_cluster();
    c.worker_extra.push_str("  replace_unhealthy: true\n");
    let (launched, fresh) = replace_one_of_two(&mut c);
    let sick = &launched[0].0;
    assert_eq!(
        targeting(&stand_in, 0),
        (
            BLOCK.into(),
            "capacity-reservations-only".into(),
            "capacity-block".into()
        )
    );
    let said = messages_of(&c, &fresh[0].0);
    assert!(
        said.iter().any(|m| m.contains(&format!(
            "as p5.48xlarge from {BLOCK} to replace unhealthy {sick}"
        ))),
        "{said:#?}"
    );
    // dtd's own view of the new worker: in the block, on the Capacity Block market.
    let status = c.wait_status("the replacement listed", |s| {
        s["workers"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["id"] == fresh[0].0.as_str()))
    });
    let row = (status["workers"].as_array().unwrap().iter())
        .find(|w| w["id"] == fresh[0].0.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["market"], "capacity-block", "{row}");
}

/// p5 from the Capacity Block (us-east-1a) in a subnet of us-east-1b, then p4d as the template
/// has it; no `shared_fs_id`.
fn cross_zone_cluster() -> (Cluster, Ec2CapacityStandIn, String) {
    let mut c = Cluster::new();
    let stand_in = Ec2CapacityStandIn::start(c.moto.port);
    stand_in.reserve(BLOCK, "p5.48xlarge", 1, Duration::from_secs(3 * 3600), true);
    let (_, subnets) = c.vpc_with_subnets("10.8.0.0/16", &[("10.8.1.0/24", "us-east-1b")]);
    let subnet = subnets[0].clone();
    stand_in.subnet_in(&subnet, "us-east-1b");
    c.worker_extra = format!(
        "  capacity:\n    choices:\n      - {{ instance_type: p5.48xlarge, gpus: 8, reservation: {BLOCK}, subnet: {subnet} }}\n      - {{ instance_type: p4d.24xlarge, gpus: 8 }}\n"
    );
    c.ec2_endpoint = Some(stand_in.endpoint());
    (c, stand_in, subnet)
}

#[test]
fn a_reservation_in_another_zone_than_its_subnet_is_skipped_by_dtctl_add_and_dtd_without_a_shared_file_system(
) {
    let (mut c, stand_in, subnet) = cross_zone_cluster();
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    let why = format!("{BLOCK} is in us-east-1a, its subnet in us-east-1b");
    // No dtd yet: dtctl reads the reservation and the subnet itself.
    let out = c.dtctl(&["add"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!(
            "skipping p5.48xlarge in {subnet} from {BLOCK}: {why}"
        )) && text.contains("as p4d.24xlarge"),
        "{text}"
    );
    assert_eq!(
        stand_in.run_instances_types(),
        ["p4d.24xlarge"],
        "p5 not sent"
    );

    c.start_dtd();
    let status = c.wait_status_text(&format!("skipped: {why}"));
    assert!(status.contains("2. p4d.24xlarge"), "{status}");
}

#[test]
fn a_choice_refused_to_dtctl_add_is_skipped_by_dtd_for_its_cool_down_and_journaled_once() {
    let (mut c, stand_in, _) = cluster("");
    c.write_config(&c.config(0, 4, &[], &log_ack_job(&c)));
    c.start_dtd();
    c.wait_status_text("Capacity:    1. p5.48xlarge");
    let out = c.dtctl(&["add"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("no capacity for p5.48xlarge: {ICE}"))
            && text.contains("dtd skips the refused choices for their cool-down too"),
        "{text}"
    );
    let status = c.wait_status_text(&format!("skipped: {ICE} until "));
    assert!(status.contains("1. p5.48xlarge"), "{status}");
    let said = journal_of_kind(&c, "capacity_unavailable");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(
        said[0].starts_with(&format!(
            "dtctl add found no capacity for p5.48xlarge: {ICE} ("
        )),
        "{said:#?}"
    );

    // The next add skips it, as dtd does, and nothing more is journaled.
    let p5 = |s: &Ec2CapacityStandIn| {
        (s.run_instances_types().iter())
            .filter(|t| *t == "p5.48xlarge")
            .count()
    };
    let before = p5(&stand_in);
    let out = c.dtctl(&["add"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("skipping p5.48xlarge: {ICE} until ")),
        "{text}"
    );
    assert_eq!(p5(&stand_in), before, "p5 not asked again");
    c.wait_status_text("ok 2 instances with the worker tags");
    assert_eq!(journal_of_kind(&c, "capacity_unavailable").len(), 1);
}
