//! What the benches share: a fleet of launch-template workers on 10.x addresses, and the rules
//! a cluster of them runs under.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use dt::config::Slots;
use dt::decide::Rules;
use dt::model::*;

pub const ELASTIC: &str = "demo-aws-dl-cfn-elastic-worker";
pub const NOW: Millis = 1_700_000_000_000;
pub const PREPARE_TIMEOUT: u64 = 3_600_000;

pub fn ip(n: usize) -> IpAddr {
    let n = n as u32 + 256;
    IpAddr::V4(Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8))
}

pub fn instance(n: usize, status: Option<WorkerStatus>, elastic: bool) -> Instance {
    let mut tags = Tags::from([
        ("NodeType".to_string(), "Worker".to_string()),
        ("aws:ec2launchtemplate:id".to_string(), "lt-1".to_string()),
        ("Name".to_string(), format!("worker-{n}")),
    ]);
    if elastic {
        tags.insert(ELASTIC.into(), "true".into());
    }
    if let Some(s) = status {
        tags.insert(STATUS_TAG.into(), s.as_tag().into());
    }
    Instance {
        id: format!("i-{n:017x}"),
        ip: ip(n),
        instance_type: "p4d.24xlarge".into(),
        az: "us-east-1a".into(),
        market: "spot".into(),
        launched_at: NOW - 3_600_000 + n as u64,
        tags,
        capacity_reservation: None,
        subnet: None,
    }
}

/// `base` base hosts, at most `max` workers, 8 slots each.
pub fn rules(base: usize, max: usize) -> Rules {
    Rules {
        elastic_tag: ELASTIC.into(),
        worker_tags: BTreeMap::from([("NodeType".into(), "Worker".into())]),
        launch_template_id: Some("lt-1".into()),
        auto_scaling_group: None,
        min: 1,
        max,
        base_hosts: (0..base).map(|n| ip(1_000_000 + n)).collect(),
        master: Some(ip(2_000_000)),
        slots: Slots::All(8),
        ack_timeout_ms: 600_000,
        rebalance: dt::config::Rebalance::Drain,
        max_prepare_failures: 5,
        prepare_timeout_ms: PREPARE_TIMEOUT,
        scheduled_change_lead_ms: 3_600_000,
        max_unhealthy: dt::config::MaxUnhealthy::default(),
        health_leave: dt::config::HealthLeave::default(),
        replace_unhealthy: false,
        replace_interrupted: false,
        stall_after_ms: None,
        stall_action: dt::config::StallAction::Alert,
        stragglers: dt::config::Stragglers::default(),
        launcher_silent_ms: None,
        launcher_silent_share: 1.0 / 3.0,
        ack_by_launcher: false,
        join_batch_ms: 0,
        join_at_checkpoint: false,
        join_max_wait_ms: 0,
        join_sizes: Vec::new(),
        disruption_budget: dt::config::Budget::Unlimited,
        disruption_windows: Vec::new(),
        capacity: Vec::new(),
        capacity_cool_down_ms: 0,
        reports_signed: true,
        health_checked: true,
        leave_before_loss_ms: None,
    }
}
