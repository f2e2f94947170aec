//! Capacity choices (`workers.capacity`): a replacement launch tries them in order, without
//! those EC2 refused within their cool-down, whose zone has no mount target, or whose
//! reservation cannot take a launch now; a Capacity Block's workers drain before its end.

use crate::support::world::*;

fn choice(instance_type: &str, subnet: Option<&str>) -> Choice {
    Choice {
        instance_type: instance_type.into(),
        gpus: 8,
        subnet: subnet.map(str::to_string),
        reservation: None,
    }
}

/// Two members with `replace_unhealthy`, and three choices: p5 in subnet a, p4d in a, p4d in b.
fn setup() -> (Rules, World, State) {
    let (mut r, w, state) = two_members();
    r.replace_unhealthy = true;
    r.capacity = vec![
        choice("p5.48xlarge", Some("subnet-0000000a")),
        choice("p4d.24xlarge", Some("subnet-0000000a")),
        choice("p4d.24xlarge", Some("subnet-0000000b")),
    ];
    r.capacity_cool_down_ms = 600_000;
    (r, w, state)
}

fn tried(plan: &Plan) -> Vec<Vec<String>> {
    (plan.outcome.launches().into_iter())
        .map(|(_, _, choices)| choices.iter().map(|c| c.choice.name()).collect())
        .collect()
}

fn no_capacity(until: Millis) -> Unavailable {
    Unavailable {
        until,
        code: "InsufficientInstanceCapacity".into(),
        message: "We currently do not have sufficient capacity".into(),
    }
}

#[test]
fn a_replacement_tries_every_choice_in_order_then_skips_one_ec2_refused_until_its_cool_down_ends() {
    let (r, mut w, state) = setup();
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let plan = pass(&r, &mut w, &state, 10_000);
    let all = [
        "p5.48xlarge in subnet-0000000a",
        "p4d.24xlarge in subnet-0000000a",
        "p4d.24xlarge in subnet-0000000b",
    ];
    assert_eq!(tried(&plan), [all.to_vec()]);
    // Act reported p5 refused; settle skipped it until 10 minutes from then.
    let mut state = plan.state;
    state
        .no_capacity
        .insert(all[0].into(), no_capacity(610_000));
    let plan = pass(&r, &mut w, &state, 11_000);
    assert_eq!(tried(&plan), [all[1..].to_vec()]);
    let shown = &plan.outcome.capacity;
    assert_eq!(shown[0].choice, all[0]);
    let why = shown[0].skipped.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("InsufficientInstanceCapacity until "),
        "{why}"
    );
    assert_eq!(
        (shown[1].choice.as_str(), shown[1].skipped.as_deref()),
        (all[1], None)
    );
    // Its cool-down over, it is first again and forgotten.
    let plan = pass(&r, &mut w, &plan.state, 610_000);
    assert_eq!(tried(&plan), [all.to_vec()]);
    assert!(plan.state.no_capacity.is_empty());
}

#[test]
fn with_every_choice_refused_nothing_is_sent_and_the_wait_is_shown() {
    let (r, mut w, state) = setup();
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let mut state = pass(&r, &mut w, &state, 10_000).state;
    for (n, c) in r.capacity.iter().enumerate() {
        state
            .no_capacity
            .insert(c.name(), no_capacity(600_000 + n as u64 * 1000));
    }
    let plan = pass(&r, &mut w, &state, 11_000);
    assert!(tried(&plan).is_empty(), "nothing to try");
    let held = plan.outcome.holds.join("\n");
    assert!(
        held.contains("replacement launch for unhealthy i-1: no capacity choice is usable")
            && held.contains("1970-01-01T00:10:00Z"),
        "the first back is named: {held}"
    );
    assert_eq!(plan.state.replacements.len(), 1, "still owed");
}

#[test]
fn a_choice_whose_subnet_is_in_a_zone_without_a_mount_target_is_never_tried() {
    let (r, mut w, state) = setup();
    w.mount_targets = Some(MountTargets {
        fs_id: "fs-0123abcd".into(),
        zones: ["us-east-1b".to_string()].into(),
    });
    w.subnet_zones = [
        ("subnet-0000000a".to_string(), "us-east-1a".to_string()),
        ("subnet-0000000b".to_string(), "us-east-1b".to_string()),
    ]
    .into();
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        tried(&plan),
        [vec!["p4d.24xlarge in subnet-0000000b".to_string()]]
    );
    let why = plan.outcome.capacity[0]
        .skipped
        .as_deref()
        .unwrap_or_default();
    assert_eq!(
        why,
        "subnet-0000000a is in us-east-1a, where fs-0123abcd has no mount target"
    );
    // Unknown zones conclude nothing: every choice is tried.
    w.mount_targets = None;
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(tried(&plan)[0].len(), 3);
}

#[test]
fn without_choices_the_template_is_launched_as_it_is() {
    let (mut r, mut w, state) = setup();
    r.capacity.clear();
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(tried(&plan), [Vec::<String>::new()]);
    assert!(plan.outcome.capacity.is_empty());
}

const BLOCK: &str = "cr-0000000000000000b";
const RESERVED: &str = "cr-0000000000000000c";

fn reservation(id: &str, available: u32, end: Option<Millis>, capacity_block: bool) -> Reservation {
    Reservation {
        id: id.into(),
        instance_type: "p5.48xlarge".into(),
        zone: "us-east-1a".into(),
        total: 2,
        available,
        state: "active".into(),
        end,
        capacity_block,
    }
}

/// A Capacity Block first, a Capacity Reservation second, then p5 without either.
fn reserved_setup() -> (Rules, World, State) {
    let (mut r, mut w, state) = setup();
    let from = |id: &str| Choice {
        reservation: Some(id.into()),
        ..choice("p5.48xlarge", None)
    };
    r.capacity = vec![from(BLOCK), from(RESERVED), choice("p5.48xlarge", None)];
    let end = Some(10_000_000);
    w.reservations = Some(Ok([
        (BLOCK.to_string(), reservation(BLOCK, 1, end, true)),
        (RESERVED.to_string(), reservation(RESERVED, 2, None, false)),
    ]
    .into()));
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    (r, w, state)
}

fn launched_as(plan: &Plan) -> Vec<(String, bool)> {
    let (_, _, choices) = plan.outcome.launches().pop().expect("a launch");
    (choices.iter())
        .map(|c| (c.choice.name(), c.capacity_block))
        .collect()
}

#[test]
fn a_capacity_block_is_launched_with_its_market_and_a_full_or_ending_one_is_skipped() {
    let (r, mut w, state) = reserved_setup();
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        launched_as(&plan),
        [
            (format!("p5.48xlarge from {BLOCK}"), true),
            (format!("p5.48xlarge from {RESERVED}"), false),
            ("p5.48xlarge".into(), false),
        ]
    );
    let shown = &plan.outcome.capacity[0];
    assert_eq!(
        shown.reservation.as_deref(),
        Some("Capacity Block, 1 of 2 left, ends 1970-01-01T02:46:40Z")
    );
    assert_eq!(
        plan.outcome.capacity[1].reservation.as_deref(),
        Some("Capacity Reservation, 2 of 2 left")
    );

    // The block full: skipped, and said why.
    let mut full = w.reservations.clone().unwrap().unwrap();
    full.get_mut(BLOCK).unwrap().available = 0;
    w.reservations = Some(Ok(full));
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(launched_as(&plan).len(), 2);
    assert_eq!(
        plan.outcome.capacity[0].skipped.as_deref(),
        Some(format!("{BLOCK} has no instance left").as_str())
    );

    // 40 minutes before its end: not launched into, even with room.
    let (r, mut w, state) = reserved_setup();
    let plan = pass(&r, &mut w, &state, 10_000_000 - 40 * 60_000);
    assert_eq!(
        launched_as(&plan)[0].0,
        format!("p5.48xlarge from {RESERVED}")
    );
    let why = plan.outcome.capacity[0].skipped.clone().unwrap_or_default();
    assert!(why.contains("no launch into its last 40 minutes"), "{why}");
}

#[test]
fn a_reservation_not_read_or_not_active_or_of_another_type_is_not_launched_into() {
    let (r, mut w, state) = reserved_setup();
    let mut read = w.reservations.clone().unwrap().unwrap();
    read.get_mut(BLOCK).unwrap().state = "payment-pending".into();
    read.get_mut(RESERVED).unwrap().instance_type = "p4d.24xlarge".into();
    w.reservations = Some(Ok(read));
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(launched_as(&plan), [("p5.48xlarge".to_string(), false)]);
    let why: Vec<_> = (plan.outcome.capacity.iter())
        .map(|c| c.skipped.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        why,
        [
            format!("{BLOCK} is payment-pending, not active"),
            format!("{RESERVED} reserves p4d.24xlarge"),
            String::new()
        ]
    );
    // Not read: nothing is launched into them (a Capacity Block needs its market type).
    w.reservations = Some(Err("DescribeCapacityReservations: throttled".into()));
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(launched_as(&plan).len(), 1);
    let why = plan.outcome.capacity[1].skipped.clone().unwrap_or_default();
    assert_eq!(
        why,
        format!("{RESERVED} not read: DescribeCapacityReservations: throttled")
    );
}

#[test]
fn a_reservation_in_a_zone_without_a_mount_target_is_skipped() {
    let (r, mut w, state) = reserved_setup();
    w.mount_targets = Some(MountTargets {
        fs_id: "fs-0123abcd".into(),
        zones: ["us-east-1b".to_string()].into(),
    });
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(launched_as(&plan), [("p5.48xlarge".to_string(), false)]);
    assert_eq!(
        plan.outcome.capacity[0].skipped.as_deref(),
        Some(format!("{BLOCK} is in us-east-1a, where fs-0123abcd has no mount target").as_str())
    );
}

#[test]
fn a_capacity_blocks_workers_drain_when_its_end_is_forty_minutes_away() {
    let (r, mut w, state) = reserved_setup();
    w.inst("i-2").capacity_reservation = Some(BLOCK.into());
    w.inst("i-2").market = "capacity-block".into();
    let end: Millis = 10_000_000;
    let plan = pass(&r, &mut w, &state, end - 41 * 60_000);
    let drains = |plan: &Plan| plan.state.removals.iter().filter(|r| r.id == "i-2").count();
    assert_eq!(drains(&plan), 0, "not yet");
    let plan = pass(&r, &mut w, &plan.state, end - 40 * 60_000);
    assert!(
        !hosts(&plan).contains(&"10.0.1.2".to_string()),
        "drained at once"
    );
    let drain = (plan.state.removals.iter())
        .find(|r| r.id == "i-2")
        .expect("its drain began");
    assert_eq!(
        drain.deadline,
        end - 30 * 60_000,
        "terminated before EC2 does"
    );
    let said: Vec<&str> = plan
        .outcome
        .events
        .iter()
        .map(|e| e.message.as_str())
        .collect();
    let said = said.join("\n");
    assert!(
        said.contains("Capacity Block expiration warning from the reservation"),
        "{said}"
    );
    let heeded: Vec<_> = (plan.outcome.heeded_notices.iter())
        .map(|n| (n.kind, n.source))
        .collect();
    assert_eq!(
        heeded,
        [(NoticeKind::CapacityBlockExpiring, "reservation")],
        "counted in dt_notices_total"
    );
    // Heeded once: the next pass begins no other drain.
    let again = pass(&r, &mut w, &plan.state, end - 39 * 60_000);
    assert_eq!(drains(&again), 1);
    assert!(again.outcome.heeded_notices.is_empty());
}

#[test]
fn a_reservation_in_another_zone_than_its_subnet_is_skipped_without_a_shared_file_system() {
    let (mut r, mut w, state) = reserved_setup();
    r.capacity[0].subnet = Some("subnet-0000000b".into());
    w.subnet_zones = [("subnet-0000000b".to_string(), "us-east-1b".to_string())].into();
    assert!(w.mount_targets.is_none(), "no shared_fs_id");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        plan.outcome.capacity[0].skipped.as_deref(),
        Some(format!("{BLOCK} is in us-east-1a, its subnet in us-east-1b").as_str())
    );
    let tried: Vec<String> = launched_as(&plan)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        tried,
        [format!("p5.48xlarge from {RESERVED}"), "p5.48xlarge".into()]
    );
}

fn refusal(at: Millis, choice: &str) -> dt::protocol::capacity_refusals::CapacityRefusal {
    dt::protocol::capacity_refusals::CapacityRefusal {
        at,
        choice: choice.into(),
        code: "InsufficientInstanceCapacity".into(),
        message: "We currently do not have sufficient capacity".into(),
    }
}

#[test]
fn a_refusal_dtctl_add_met_starts_the_cool_down_once_and_only_for_the_configs_choices() {
    let (r, mut w, state) = setup();
    let p5 = "p5.48xlarge in subnet-0000000a";
    w.add_refusals = vec![
        refusal(9_000, p5),
        refusal(9_000, "m5.large in subnet-0000000z"),
    ];
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        plan.outcome.capacity[0].skipped.as_deref(),
        Some("InsufficientInstanceCapacity until 1970-01-01T00:10:09Z")
    );
    let said: Vec<&str> = (plan.outcome.events.iter())
        .filter(|e| e.kind == EventKind::CapacityUnavailable)
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        said,
        [format!(
            "dtctl add found no capacity for {p5}: InsufficientInstanceCapacity (We currently do \
             not have sufficient capacity); skipped until 1970-01-01T00:10:09Z, the next choice \
             is tried"
        )]
    );
    assert!(!plan
        .state
        .no_capacity
        .contains_key("m5.large in subnet-0000000z"));
    // Read again on the next pass: heeded once.
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(plan
        .outcome
        .events
        .iter()
        .all(|e| e.kind != EventKind::CapacityUnavailable));
    // A refusal older than the cool-down is over already: nothing to skip.
    w.add_refusals
        .push(refusal(12_000, "p4d.24xlarge in subnet-0000000b"));
    let plan = pass(&r, &mut w, &plan.state, 700_000);
    assert!(
        plan.outcome.capacity.iter().all(|c| c.skipped.is_none()),
        "{:?}",
        plan.outcome.capacity
    );
}
