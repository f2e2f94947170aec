//! `workers.capacity`: choices in order, one GPU count, checked shapes, a cool-down.

use std::time::Duration;

use super::{error_of, GOOD};
use crate::config::{Config, Slots};

/// GOOD with `capacity` (YAML flow) under `workers`.
fn with(capacity: &str) -> String {
    GOOD.replace("  max: 4\n", &format!("  max: 4\n  capacity: {capacity}\n"))
}

const TWO: &str = "{ choices: [ { instance_type: p5.48xlarge, gpus: 8, subnet: subnet-0a1b2c3d }, \
                   { instance_type: p4d.24xlarge, gpus: 8 } ] }";

#[test]
fn choices_keep_their_order_and_give_the_slots_and_a_ten_minute_cool_down() {
    let cfg = Config::parse(&with(TWO)).unwrap();
    let capacity = cfg.workers.capacity.unwrap();
    let names: Vec<_> = capacity.choices.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["p5.48xlarge in subnet-0a1b2c3d", "p4d.24xlarge"]);
    assert_eq!(capacity.cool_down, Duration::from_secs(600));
    assert!(
        matches!(cfg.workers.slots, Slots::All(8)),
        "one slot per GPU"
    );
    let cfg = Config::parse(&with(TWO).replace("  max: 4\n", "  max: 4\n  slots: 2\n")).unwrap();
    assert!(matches!(cfg.workers.slots, Slots::All(2)), "as configured");
    assert!(matches!(
        Config::parse(GOOD).unwrap().workers.slots,
        Slots::All(1)
    ));
    let quick = TWO.replace(" ] }", " ], cool_down: 90s }");
    let cfg = Config::parse(&with(&quick)).unwrap();
    assert_eq!(
        cfg.workers.capacity.unwrap().cool_down,
        Duration::from_secs(90)
    );
}

#[test]
fn bad_choices_are_named() {
    for (bad, says) in [
        ("{ choices: [] }", "choices must list 1 to 50"),
        (
            "{ choices: [ { instance_type: p5.48xlarge, gpus: 8 }, { instance_type: g5.xlarge, gpus: 1 } ] }",
            "same number of GPUs: p5.48xlarge has 8, g5.xlarge has 1",
        ),
        ("{ choices: [ { instance_type: \"p4d;rm -rf\", gpus: 8 } ] }", "is not an instance type"),
        ("{ choices: [ { instance_type: p4d.24xlarge, gpus: 0 } ] }", "gpus must be at least 1"),
        (
            "{ choices: [ { instance_type: p4d.24xlarge, gpus: 8, subnet: ../etc } ] }",
            "`../etc` is not a subnet id",
        ),
        (
            "{ choices: [ { instance_type: p4d.24xlarge, gpus: 8 }, { instance_type: p4d.24xlarge, gpus: 8 } ] }",
            "lists p4d.24xlarge twice",
        ),
        ("{ choices: [ { instance_type: p4d.24xlarge, gpus: 8, zone: a } ] }", "unknown field `zone`"),
        (
            "{ choices: [ { instance_type: p4d.24xlarge, gpus: 8, reservation: cr-xyz } ] }",
            "`cr-xyz` is not a Capacity Reservation id (cr-...) or the ARN of a resource group",
        ),
        (
            "{ choices: [ { instance_type: p4d.24xlarge, gpus: 8, reservation: \"arn:aws:resource-groups:us-east-1:123:group/x\" } ] }",
            "is not a Capacity Reservation id",
        ),
        (
            "{ choices: [ { instance_type: p4d.24xlarge, gpus: 8, reservation: \"arn:aws:resource-groups:us-east-1:123456789012:group/a/../b\" } ] }",
            "is not a Capacity Reservation id",
        ),
        ("{ choices: [ { instance_type: p4d.24xlarge, gpus: 8 } ], cool_down: 0s }", "cool_down:"),
    ] {
        let e = error_of(&with(bad));
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn capacity_needs_the_launch_template_it_overrides() {
    let group = with(TWO).replace("  launch_template: lt-0abc\n", "  auto_scaling_group: g\n");
    let e = error_of(&group);
    assert!(e.contains("capacity overrides launch_template"), "{e}");
}

#[test]
fn a_choice_may_name_a_reservation_or_a_group_of_them() {
    let group = "arn:aws:resource-groups:us-east-1:123456789012:group/p5-reservations";
    let choices = format!(
        "{{ choices: [ {{ instance_type: p5.48xlarge, gpus: 8, subnet: subnet-0a1b2c3d, \
         reservation: cr-0123456789abcdef0 }}, {{ instance_type: p5.48xlarge, gpus: 8, \
         reservation: \"{group}\" }}, {{ instance_type: p5.48xlarge, gpus: 8 }} ] }}"
    );
    let capacity = Config::parse(&with(&choices))
        .unwrap()
        .workers
        .capacity
        .unwrap();
    let names: Vec<_> = capacity.choices.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "p5.48xlarge in subnet-0a1b2c3d from cr-0123456789abcdef0".to_string(),
            format!("p5.48xlarge from {group}"),
            "p5.48xlarge".into()
        ],
        "the same type from a reservation and without one are different choices"
    );
    let ids: Vec<_> = capacity
        .choices
        .iter()
        .map(|c| c.reservation_id())
        .collect();
    assert_eq!(ids, [Some("cr-0123456789abcdef0"), None, None]);
}
