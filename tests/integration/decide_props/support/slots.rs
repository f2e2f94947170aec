//! The slots of a random world: which kind of instance each holds (elastic workers, base hosts,
//! the master, foreign instances), its IP and id, the instance itself, and the rules over them.

use std::net::IpAddr;

use dt::decide::Rules;
use dt::model::*;

use crate::support::world::ELASTIC;

pub const TIMEOUT: u64 = 60_000;
pub const START: Millis = 1_000_000;
/// Elastic worker slots: each may hold one instance at a time (a new one gets a new id).
pub const WORKERS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Worker,
    Base,
    Master,
    /// Right launch template, wrong NodeType.
    ForeignRole,
    /// Right NodeType, another launch template.
    ForeignTemplate,
}

/// Slots 0..8 are elastic workers, then two base hosts, the master, and two foreign instances.
pub fn slot_kind(slot: usize) -> Kind {
    match slot {
        s if s < WORKERS => Kind::Worker,
        8 | 9 => Kind::Base,
        10 => Kind::Master,
        11 => Kind::ForeignRole,
        _ => Kind::ForeignTemplate,
    }
}

pub const SLOTS: usize = 13;

pub fn slot_ip(slot: usize) -> IpAddr {
    match slot_kind(slot) {
        Kind::Worker => format!("10.0.1.{}", slot + 10),
        Kind::Base => format!("10.0.0.{}", 13 - slot), // 10.0.0.5, 10.0.0.4: config order
        Kind::Master => "10.0.0.2".into(),
        _ => format!("10.0.2.{slot}"),
    }
    .parse()
    .unwrap()
}

/// The rule tests' rules (support/world.rs) over this test's slots, with a shorter ack timeout
/// and the launcher's silence watched.
pub fn rules(min: usize, max: usize) -> Rules {
    Rules {
        min,
        max,
        base_hosts: vec![slot_ip(8), slot_ip(9)],
        master: Some(slot_ip(10)),
        ack_timeout_ms: TIMEOUT,
        launcher_silent_ms: Some(30_000),
        ack_by_launcher: false,
        ..crate::support::world::rules()
    }
}

pub fn id_of(slot: usize, incarnation: u32) -> String {
    format!("i-{slot:02}-{incarnation}")
}

pub fn make_instance(
    slot: usize,
    incarnation: u32,
    elastic: bool,
    status: Option<WorkerStatus>,
) -> Instance {
    let mut tags = Tags::from([
        ("NodeType".to_string(), "Worker".to_string()),
        ("aws:ec2launchtemplate:id".to_string(), "lt-1".to_string()),
    ]);
    match slot_kind(slot) {
        Kind::ForeignRole => drop(tags.insert("NodeType".into(), "Master".into())),
        Kind::ForeignTemplate => {
            drop(tags.insert("aws:ec2launchtemplate:id".into(), "lt-2".into()))
        }
        _ => {}
    }
    if elastic {
        tags.insert(ELASTIC.into(), "true".into());
    }
    if let Some(s) = status {
        tags.insert(STATUS_TAG.into(), s.as_tag().into());
    }
    Instance {
        id: id_of(slot, incarnation),
        ip: slot_ip(slot),
        instance_type: "p3.2xlarge".into(),
        // Two zones, so that some workers are where the file system may have no mount target.
        az: ["us-east-1a", "us-east-1b"][slot % 2].into(),
        market: "spot".into(),
        launched_at: START + slot as u64 * 7 + incarnation as u64 * 1000,
        tags,
        capacity_reservation: None,
        subnet: None,
    }
}

/// Written independently of `Rules::is_cluster_worker`, so a bug there is caught here.
pub fn has_cluster_tags(i: &Instance) -> bool {
    i.tags.get("NodeType") == Some("Worker")
        && i.tags.get("aws:ec2launchtemplate:id") == Some("lt-1")
}
