//! Capacity choices (`workers.capacity`): a replacement launch tries them in order, without
//! those EC2 refused within their cool-down or whose subnet's zone has no mount target.

use crate::support::world::*;

fn choice(instance_type: &str, subnet: Option<&str>) -> Choice {
    Choice {
        instance_type: instance_type.into(),
        gpus: 8,
        subnet: subnet.map(str::to_string),
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
        .map(|(_, _, choices)| choices.iter().map(Choice::name).collect())
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
    assert_eq!(shown[0].0, all[0]);
    let why = shown[0].1.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("InsufficientInstanceCapacity until "),
        "{why}"
    );
    assert_eq!(shown[1], (all[1].to_string(), None));
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
        subnet_zones: [
            ("subnet-0000000a".to_string(), "us-east-1a".to_string()),
            ("subnet-0000000b".to_string(), "us-east-1b".to_string()),
        ]
        .into(),
    });
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        tried(&plan),
        [vec!["p4d.24xlarge in subnet-0000000b".to_string()]]
    );
    let why = plan.outcome.capacity[0].1.as_deref().unwrap_or_default();
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
