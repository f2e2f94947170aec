//! Every event kind dtd handles, as AWS publishes it (`tests/fixtures/events/`, each file naming
//! its page), read by the real parser: the notice it becomes (kind, target, deadline), or that
//! it is no notice. The stack test delivers the same files through the stack's rules.

use crate::support::fixtures::{filled, published};
use dt::model::{Notice, NoticeKind, NoticeTarget};
use dt::observe::eventbridge::{parse, Parsed};
use dt::time::parse_rfc3339;

fn notices(event: &serde_json::Value) -> Vec<Notice> {
    match parse(&event.to_string()) {
        Parsed::Notices(n) => n,
        other => panic!("expected notices from {event}, got {other:?}"),
    }
}

fn one(name: &str) -> Notice {
    let mut n = notices(&filled(name));
    assert_eq!(n.len(), 1, "{name}: {n:?}");
    n.remove(0)
}

fn instance(id: &str) -> NoticeTarget {
    NoticeTarget::Instance(id.to_string())
}

#[test]
fn spot_and_capacity_reservation_warnings_are_interruptions_due_when_aws_acts() {
    let spot = one("spot-interruption-warning.json");
    assert_eq!(spot.kind, NoticeKind::Interruption);
    assert_eq!(spot.target, instance("i-1234567890abcdef0"));
    assert_eq!(spot.id, "12345678-1234-1234-1234-123456789012");
    // The Spot sample has no termination time: the warning is emitted "two minutes prior to the
    // actual interruption" ("Spot Instance interruption notices", EC2 User Guide).
    assert_eq!(spot.deadline, parse_rfc3339("2026-11-23T10:02:00Z"));

    // The interruptible Capacity Reservation warning, under the page's current name and its
    // earlier one.
    for name in [
        "capacity-reservation-instance-interruption-warning.json",
        "interruptible-capacity-reservation-interruption-warning.json",
    ] {
        let icr = one(name);
        assert_eq!(icr.kind, NoticeKind::Interruption, "{name}");
        assert_eq!(icr.target, instance("i-1234567890abcdef0"), "{name}");
        assert_eq!(
            icr.deadline,
            parse_rfc3339("2026-11-23T10:00:00Z"),
            "{name}"
        );
    }
}

#[test]
fn a_rebalance_recommendation_has_no_deadline() {
    let n = one("rebalance-recommendation.json");
    assert_eq!(n.kind, NoticeKind::Rebalance);
    assert_eq!(n.target, instance("i-1234567890abcdef0"));
    assert_eq!(n.deadline, None);
}

#[test]
fn both_capacity_block_names_drain_the_reservation_30_minutes_before_its_end() {
    for name in [
        "capacity-block-expiration-warning.json",
        "capacity-block-reservation-expiration-warning.json",
    ] {
        let n = one(name);
        assert_eq!(n.kind, NoticeKind::CapacityBlockExpiring, "{name}");
        let cr = NoticeTarget::CapacityReservation("cr-0123456789abcdef0".into());
        assert_eq!(n.target, cr, "{name}");
        assert_eq!(n.id, "cr-0123456789abcdef0-approaching-expiry", "{name}");
        assert_eq!(n.deadline, parse_rfc3339("2026-11-23T11:00:00Z"), "{name}");
        // As published, placeholders and all: still the reservation's notice, with no deadline.
        let raw = notices(&published(name));
        assert_eq!(raw[0].kind, NoticeKind::CapacityBlockExpiring, "{name}");
        assert_eq!(raw[0].deadline, None, "{name}");
    }
}

#[test]
fn an_aws_health_ec2_scheduled_change_drains_at_its_start_time() {
    // The schema page's EC2 retirement sample names the instance by its ARN.
    let n = one("aws-health-ec2-scheduled-change.json");
    assert_eq!(n.kind, NoticeKind::ScheduledChange);
    assert_eq!(n.target, instance("i-1234567890abcdef0"));
    assert_eq!(n.deadline, parse_rfc3339("2026-08-27T13:19:03Z"));
    assert_eq!(n.source, "queue");
    assert_eq!(
        n.id,
        "health:arn:aws:health:us-east-1::event/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_90353408594353983:i-1234567890abcdef0"
    );
    // A bare instance id, as AWS's older samples had it, names the instance too.
    let mut bare = filled("aws-health-ec2-scheduled-change.json");
    bare["detail"]["affectedEntities"][0]["entityValue"] = "i-0abcdef1234567890".into();
    assert_eq!(notices(&bare)[0].target, instance("i-0abcdef1234567890"));
}

/// The page's Lambda planned lifecycle sample as an EC2 one (service, type code and the
/// entities' values changed; the shape, times, statuses and paging are the page's): each
/// PENDING instance is a notice, the RESOLVED one is done and none.
#[test]
fn an_ec2_planned_lifecycle_event_drains_its_pending_instances_only() {
    let lambda = filled("aws-health-planned-lifecycle-event.json");
    assert!(
        matches!(parse(&lambda.to_string()), Parsed::Ignored(_)),
        "not EC2"
    );
    let mut ec2 = lambda.clone();
    let code = "AWS_EC2_PLANNED_LIFECYCLE_EVENT";
    ec2["detail"]["service"] = "EC2".into();
    ec2["detail"]["eventTypeCode"] = code.into();
    ec2["detail"]["eventArn"] = format!("arn:aws:health:us-west-2::event/{code}_1").into();
    let ids = [
        "i-0000000000000000a",
        "i-0000000000000000b",
        "i-0000000000000000c",
        "i-0000000000000000d",
    ];
    for (entity, id) in ec2["detail"]["affectedEntities"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip(ids)
    {
        entity["entityValue"] = format!("arn:aws:ec2:us-west-2:123456789012:instance/{id}").into();
    }
    let got = notices(&ec2);
    let targets: Vec<&NoticeTarget> = got.iter().map(|n| &n.target).collect();
    assert_eq!(
        targets,
        [&instance(ids[0]), &instance(ids[1]), &instance(ids[2])]
    );
    assert!(got.iter().all(|n| n.kind == NoticeKind::ScheduledChange
        && n.deadline == parse_rfc3339("2026-08-27T13:19:03Z")));
}

#[test]
fn a_closed_scheduled_change_or_another_health_event_is_no_notice() {
    let mut closed = filled("aws-health-ec2-scheduled-change.json");
    closed["detail"]["statusCode"] = "closed".into();
    assert!(matches!(parse(&closed.to_string()), Parsed::Ignored(_)));
    let mut upcoming = filled("aws-health-ec2-scheduled-change.json");
    upcoming["detail"]["statusCode"] = "upcoming".into();
    assert_eq!(notices(&upcoming).len(), 1);
    let mut resolved = filled("aws-health-ec2-scheduled-change.json");
    resolved["detail"]["affectedEntities"][0]["status"] = "RESOLVED".into();
    assert!(matches!(parse(&resolved.to_string()), Parsed::Ignored(_)));
    // An ARN of something else than an instance is not one.
    let mut volume = filled("aws-health-ec2-scheduled-change.json");
    volume["detail"]["affectedEntities"][0]["entityValue"] =
        "arn:aws:ec2:us-east-1:123456789012:volume/vol-1234567890abcdef0".into();
    assert!(matches!(parse(&volume.to_string()), Parsed::Ignored(_)));
    let issue = filled("aws-health-ec2-issue.json");
    assert!(matches!(parse(&issue.to_string()), Parsed::Ignored(_)));
    let mut not_health = filled("aws-health-ec2-scheduled-change.json");
    not_health["source"] = "my.app".into();
    assert!(matches!(parse(&not_health.to_string()), Parsed::Ignored(_)));
}

#[test]
fn state_changes_wake_and_reclamation_reports_are_ignored() {
    let state = filled("instance-state-change.json");
    assert_eq!(
        parse(&state.to_string()),
        Parsed::Wake {
            why: "i-1234567890abcdef0 is pending".into(),
            instances: vec!["i-1234567890abcdef0".into()],
        }
    );
    let reclaimed = filled("interruptible-capacity-reservation-reclamation-complete.json");
    assert!(matches!(parse(&reclaimed.to_string()), Parsed::Ignored(_)));
}

#[test]
fn a_tag_change_on_an_instance_wakes_for_that_instance_only() {
    // AWS's sample: the instance is named by its ARN in `resources`.
    let sample = filled("tag-change-on-resource.json");
    assert_eq!(
        parse(&sample.to_string()),
        Parsed::Wake {
            why: "the tags of i-0000000aaaaaaaaaa changed".into(),
            instances: vec!["i-0000000aaaaaaaaaa".into()],
        }
    );
    // The same change on a volume, or an ARN that is not an instance's: no pass for it.
    let mut volume = sample.clone();
    volume["detail"]["resource-type"] = "volume".into();
    volume["resources"] =
        serde_json::json!(["arn:aws:ec2:us-east-1:123456789012:volume/vol-0000000aaaaaaaaaa"]);
    assert!(matches!(parse(&volume.to_string()), Parsed::Ignored(_)));
    let mut mangled = sample;
    mangled["resources"] = serde_json::json!(["arn:aws:ec2:us-east-1:123456789012:instance/"]);
    assert!(matches!(parse(&mangled.to_string()), Parsed::Ignored(_)));
}
