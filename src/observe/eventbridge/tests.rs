use super::*;

fn notice(p: Parsed) -> Notice {
    match p {
        Parsed::Notices(mut n) if n.len() == 1 => n.remove(0),
        other => panic!("expected a notice, got {other:?}"),
    }
}

#[test]
fn spot_warning_without_account_parses() {
    let body = r#"{"version":"0","id":"e-1","detail-type":"EC2 Spot Instance Interruption Warning",
        "source":"aws.ec2","time":"2026-11-23T10:00:00Z","region":"us-east-1",
        "resources":["arn:aws:ec2:us-east-1:123:instance/i-1"],
        "detail":{"instance-id":"i-1","instance-action":"terminate","extra":{"x":1}}}"#;
    let n = notice(parse(body));
    assert_eq!(n.id, "e-1");
    assert_eq!(n.kind, NoticeKind::Interruption);
    assert_eq!(n.target, NoticeTarget::Instance("i-1".into()));
    // Emitted two minutes before the interruption: that is the job's deadline.
    assert_eq!(n.deadline, parse_rfc3339("2026-11-23T10:02:00Z"));
}

#[test]
fn capacity_block_targets_its_reservation_before_the_end() {
    let body = r#"{"customer_event_id":"cr-9-approaching-expiry","detail_type":"Capacity Block Expiration Warning",
        "source":"aws.ec2","detail":{"capacity-reservation-id":"cr-9","end-date":"2026-11-23T11:30:00Z"}}"#;
    let n = notice(parse(body));
    assert_eq!(n.id, "cr-9-approaching-expiry");
    assert_eq!(n.target, NoticeTarget::CapacityReservation("cr-9".into()));
    assert_eq!(n.deadline, parse_rfc3339("2026-11-23T11:00:00Z"));
}

#[test]
fn state_changes_wake_and_strangers_are_ignored() {
    let wake = r#"{"id":"e-2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0","state":"shutting-down"}}"#;
    assert_eq!(
        parse(wake),
        Parsed::Wake {
            why: "i-0123456789abcdef0 is shutting-down".into(),
            instances: vec!["i-0123456789abcdef0".into()]
        }
    );
    assert!(matches!(parse("{]"), Parsed::Ignored(_)));
    assert!(matches!(
        parse(r#"{"detail-type":"AWS API Call via CloudTrail"}"#),
        Parsed::Ignored(_)
    ));
    let no_id =
        r#"{"id":"e-3","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#;
    assert!(matches!(parse(no_id), Parsed::Ignored(_)));
}

fn wake(body: &str) -> (String, Vec<String>) {
    match parse(body) {
        Parsed::Wake { why, instances } => (why, instances),
        other => panic!("expected a wake, got {other:?}"),
    }
}

#[test]
fn wakes_name_only_well_formed_instance_ids() {
    let state = |id: &str| {
        format!(
            r#"{{"detail-type":"EC2 Instance State-change Notification","detail":{{"instance-id":"{id}","state":"running"}}}}"#
        )
    };
    // The old 8-digit form and the 17-digit form.
    assert_eq!(wake(&state("i-abcd1111")).1, ["i-abcd1111"]);
    assert_eq!(
        wake(&state("i-1234567890abcdef0")).1,
        ["i-1234567890abcdef0"]
    );
    // Anything else still wakes a pass, but names no instance, not even in the log line.
    for bad in [
        "i-1",
        "i-ABCD1111",
        "i-abcd111g",
        "i-1234567890abcdef",
        "i-1234567890abcdef01",
        "x-abcd1111",
        "i-abcd1111 ",
        "../i-abcd1111",
    ] {
        let (why, instances) = wake(&state(bad));
        assert!(instances.is_empty(), "{bad}");
        assert_eq!(why, "an instance is running", "{bad}");
    }
    let no_id = r#"{"detail-type":"EC2 Instance State-change Notification","detail":{}}"#;
    assert_eq!(wake(no_id).1, Vec::<String>::new());
}

#[test]
fn lifecycle_actions_name_their_instance() {
    // "Amazon EC2 Auto Scaling event reference", "Scale-in lifecycle action" (its sample's
    // placeholder time left in: not read).
    let body = r#"{"version":"0","id":"12345678-1234-1234-1234-123456789012",
        "detail-type":"EC2 Instance-terminate Lifecycle Action","source":"aws.autoscaling",
        "account":"123456789012","time":"yyyy-mm-ddThh:mm:ssZ","region":"us-west-2",
        "resources":["auto-scaling-group-arn"],
        "detail":{"LifecycleActionToken":"87654321-4321-4321-4321-210987654321",
        "AutoScalingGroupName":"my-asg","LifecycleHookName":"my-lifecycle-hook",
        "EC2InstanceId":"i-1234567890abcdef0","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}}"#;
    let (why, instances) = wake(body);
    assert_eq!(instances, ["i-1234567890abcdef0"]);
    assert_eq!(
        why,
        "EC2 Instance-terminate Lifecycle Action for i-1234567890abcdef0"
    );
    let launch = body
        .replace("terminate", "launch")
        .replace("i-1234567890abcdef0", "i-nope");
    assert_eq!(wake(&launch).1, Vec::<String>::new());
}

/// AWS's sample from "Monitor tag changes with serverless workflows and Amazon EventBridge"
/// (Tagging AWS Resources and Tag Editor User Guide), with `resources` as given.
fn tag_change(resources: &str, service: &str, resource_type: &str) -> String {
    format!(
        r#"{{"version":"0","id":"bddcf1d6-0251-35a1-aab0-adc1fb47c11c",
        "detail-type":"Tag Change on Resource","source":"aws.tag","account":"123456789012",
        "time":"2018-09-18T20:41:38Z","region":"us-east-1","resources":{resources},
        "detail":{{"changed-tag-keys":["a-new-key","an-updated-key","a-deleted-key"],
        "tags":{{"a-new-key":"tag-value-on-new-key-just-added","an-updated-key":"tag-value-was-just-changed",
        "an-unchanged-key":"tag-value-still-the-same"}},
        "service":"{service}","resource-type":"{resource_type}","version":3}}}}"#
    )
}

const SAMPLE_ARN: &str = r#"["arn:aws:ec2:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa"]"#;

#[test]
fn a_tag_change_on_an_instance_wakes_for_that_instance() {
    let (why, instances) = wake(&tag_change(SAMPLE_ARN, "ec2", "instance"));
    assert_eq!(instances, ["i-0000000aaaaaaaaaa"]);
    assert_eq!(why, "the tags of i-0000000aaaaaaaaaa changed");
    // Another partition (aws-cn, as the page's China version shows it), one instance twice.
    let twice = r#"["arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0000000aaaaaaaaaa",
        "arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111",
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa"]"#;
    let (why, instances) = wake(&tag_change(twice, "ec2", "instance"));
    assert_eq!(instances, ["i-0000000aaaaaaaaaa", "i-abcd1111"]);
    assert_eq!(why, "the tags of 2 instances changed");
}

#[test]
fn a_tag_change_without_a_well_formed_instance_arn_is_ignored() {
    for resources in [
        r#"[]"#,
        r#""arn:aws:ec2:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa""#,
        r#"[42, null, {"arn":"x"}]"#,
        r#"["i-0000000aaaaaaaaaa"]"#,
        r#"["arn:aws:ec2:us-east-1:123456789012:instance/i-0000000AAAAAAAAAA"]"#,
        r#"["arn:aws:ec2:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa/x"]"#,
        r#"["arn:aws:ec2:us-east-1:123456789012:volume/vol-0000000aaaaaaaaaa"]"#,
        r#"["arn:aws:s3:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa"]"#,
        r#"["arn:aws:ec2:us-east-1:instance/i-0000000aaaaaaaaaa"]"#,
        r#"["nra:aws:ec2:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa"]"#,
    ] {
        let parsed = parse(&tag_change(resources, "ec2", "instance"));
        assert!(
            matches!(parsed, Parsed::Ignored(_)),
            "{resources}: {parsed:?}"
        );
    }
    // A malformed ARN beside a good one: only the good one is named.
    let mixed = r#"["arn:aws:ec2:us-east-1:123456789012:instance/i-0000000aaaaaaaaaa;rm",
        "arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"]"#;
    assert_eq!(
        wake(&tag_change(mixed, "ec2", "instance")).1,
        ["i-abcd1111"]
    );
}

#[test]
fn a_tag_change_on_another_resource_or_from_another_source_is_ignored() {
    for (service, kind) in [("ec2", "volume"), ("ec2", "subnet"), ("s3", "instance")] {
        let parsed = parse(&tag_change(SAMPLE_ARN, service, kind));
        assert!(matches!(parsed, Parsed::Ignored(_)), "{service} {kind}");
    }
    let forged = tag_change(SAMPLE_ARN, "ec2", "instance").replace("aws.tag", "my.app");
    assert!(matches!(parse(&forged), Parsed::Ignored(_)));
}

#[test]
fn a_tag_change_naming_too_many_resources_yields_only_the_first() {
    let arns: Vec<String> = (0..MAX_TAGGED_RESOURCES + 50)
        .map(|n| format!("arn:aws:ec2:us-east-1:123456789012:instance/i-{n:017x}"))
        .collect();
    let resources = serde_json::to_string(&arns).unwrap();
    let (_, instances) = wake(&tag_change(&resources, "ec2", "instance"));
    assert_eq!(instances.len(), MAX_TAGGED_RESOURCES);
    assert_eq!(instances[0], "i-00000000000000000");
    assert_eq!(
        instances.last().map(String::as_str),
        Some(format!("i-{:017x}", MAX_TAGGED_RESOURCES - 1).as_str())
    );
}
