//! What the stack's rules deliver to its queue: events as AWS sends them (its published samples
//! among them) arrive, parsed into what dtd makes of them; the others do not.

use std::collections::BTreeMap;

use super::support::{aws, elastic_tag, put_events};
use crate::support::{fixtures, Moto};
use serde_json::Value as Json;

/// Events as AWS would send them go through the rules to the queue; others do not.
pub fn check_delivery(moto: &Moto, out: &BTreeMap<String, String>) {
    let group = out["WorkerGroup"].as_str();
    let entry = |source: &str, detail_type: &str, detail: Json| {
        serde_json::json!({
            "Source": source,
            "DetailType": detail_type,
            "Detail": detail.to_string(),
        })
    };
    let instance = serde_json::json!({ "instance-id": "i-0123456789abcdef0" });
    let lifecycle = |g: &str| serde_json::json!({ "AutoScalingGroupName": g });
    let mut entries = vec![
        entry(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            instance.clone(),
        ),
        entry(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            instance.clone(),
        ),
        entry(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            instance.clone(),
        ),
        entry(
            "aws.ec2",
            "Capacity Block Expiration Warning",
            instance.clone(),
        ),
        entry(
            "aws.autoscaling",
            "EC2 Instance-launch Lifecycle Action",
            lifecycle(group),
        ),
        entry(
            "aws.autoscaling",
            "EC2 Instance-terminate Lifecycle Action",
            lifecycle(group),
        ),
    ];
    // Not for dtd: another group's lifecycle action, and an event type it does not handle.
    let others = [
        entry(
            "aws.autoscaling",
            "EC2 Instance-launch Lifecycle Action",
            lifecycle("other"),
        ),
        entry("aws.ec2", "EC2 AMI State Change", instance),
    ];
    let expected: Vec<String> = entries
        .iter()
        .map(|e| e["DetailType"].as_str().unwrap().to_string())
        .collect();
    entries.extend(others);
    put_events(moto, &entries);
    let mut delivered: Vec<String> = drain_queue(moto, out)
        .iter()
        .map(|b| {
            let body: Json = serde_json::from_str(b).unwrap();
            body["detail-type"].as_str().unwrap().to_string()
        })
        .collect();
    delivered.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(delivered, expected);
}

/// AWS's published samples (tests/fixtures/events/) put on the bus as the services would: the
/// deployed rules deliver exactly those dtd handles, and what arrives parses into the notice
/// the sample stands for.
pub fn check_published_events(moto: &Moto, out: &BTreeMap<String, String>) {
    use dt::model::NoticeKind;
    use dt::observe::eventbridge::{parse, Parsed};
    let taken = [
        (
            "spot-interruption-warning.json",
            Some(NoticeKind::Interruption),
        ),
        ("rebalance-recommendation.json", Some(NoticeKind::Rebalance)),
        ("instance-state-change.json", None),
        (
            "capacity-block-expiration-warning.json",
            Some(NoticeKind::CapacityBlockExpiring),
        ),
        (
            "capacity-block-reservation-expiration-warning.json",
            Some(NoticeKind::CapacityBlockExpiring),
        ),
        (
            "capacity-reservation-instance-interruption-warning.json",
            Some(NoticeKind::Interruption),
        ),
        (
            "interruptible-capacity-reservation-interruption-warning.json",
            Some(NoticeKind::Interruption),
        ),
        (
            "aws-health-ec2-scheduled-change.json",
            Some(NoticeKind::ScheduledChange),
        ),
    ];
    // Not for dtd: an EC2 Health issue, and the reservation owner's reclamation report.
    let foreign = [
        "aws-health-ec2-issue.json",
        "aws-health-planned-lifecycle-event.json",
        "interruptible-capacity-reservation-reclamation-complete.json",
    ];
    let names = taken.iter().map(|(n, _)| *n).chain(foreign);
    let entries: Vec<Json> = names
        .map(|n| fixtures::put_events_entry(&fixtures::filled(n)))
        .collect();
    put_events(moto, &entries);
    let mut got: Vec<(String, Option<NoticeKind>)> = drain_queue(moto, out)
        .iter()
        .map(|body| {
            let v: Json = serde_json::from_str(body).unwrap();
            let kind = match parse(body) {
                Parsed::Notices(n) => Some(n[0].kind),
                Parsed::Wake { .. } => None,
                Parsed::Ignored(why) => panic!("delivered but ignored ({why}): {body}"),
            };
            (fixtures::detail_type(&v), kind)
        })
        .collect();
    let mut expected: Vec<(String, Option<NoticeKind>)> = taken
        .iter()
        .map(|(n, k)| (fixtures::detail_type(&fixtures::filled(n)), *k))
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

/// AWS's Tag Change on Resource sample, put on the bus as the tagging service would: through
/// the stack's rule when the elastic tag was deleted (or put back), becoming a wake for that
/// instance; not for another tag of the instance (the status tag dtd writes among them), nor
/// for the elastic tag's key on a volume.
pub fn check_tag_changes(moto: &Moto, out: &BTreeMap<String, String>) {
    use dt::observe::eventbridge::{parse, Parsed};
    let sample = fixtures::filled("tag-change-on-resource.json");
    let with_keys = |keys: &[&str]| {
        let mut event = sample.clone();
        event["detail"]["changed-tag-keys"] = serde_json::json!(keys);
        event
    };
    // Deleted: the key changed and is no longer among the instance's tags.
    let deleted = with_keys(&[&elastic_tag()]);
    let mut on_volume = deleted.clone();
    on_volume["detail"]["resource-type"] = "volume".into();
    on_volume["resources"] =
        serde_json::json!(["arn:aws:ec2:us-east-1:123456789012:volume/vol-0000000aaaaaaaaaa"]);
    let entries: Vec<Json> = [
        deleted,
        with_keys(&["elastic_worker_status"]),
        with_keys(&["a-new-key", "an-updated-key", "a-deleted-key"]),
        on_volume,
    ]
    .iter()
    .map(fixtures::put_events_entry)
    .collect();
    put_events(moto, &entries);
    let delivered = drain_queue(moto, out);
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    let body: Json = serde_json::from_str(&delivered[0]).unwrap();
    assert_eq!(
        body["detail"]["changed-tag-keys"],
        serde_json::json!([elastic_tag()])
    );
    match parse(&delivered[0]) {
        Parsed::Wake { instances, .. } => assert_eq!(instances, ["i-0000000aaaaaaaaaa"]),
        other => panic!("expected a wake, got {other:?}: {}", delivered[0]),
    }
}

/// Every message the stack's queue holds now, deleted as read.
fn drain_queue(moto: &Moto, out: &BTreeMap<String, String>) -> Vec<String> {
    let endpoint = moto.endpoint();
    let url = out["EventQueueUrl"].as_str();
    let mut bodies = Vec::new();
    loop {
        let text = aws(
            moto,
            &[
                "--endpoint-url",
                &endpoint,
                "sqs",
                "receive-message",
                "--queue-url",
                url,
                "--max-number-of-messages",
                "10",
                "--wait-time-seconds",
                "1",
                "--output",
                "json",
            ],
        );
        let got: Json = serde_json::from_str(&text).unwrap_or(Json::Null);
        let Some(messages) = got["Messages"].as_array().filter(|m| !m.is_empty()) else {
            return bodies;
        };
        for m in messages {
            bodies.push(m["Body"].as_str().unwrap().to_string());
            let receipt = m["ReceiptHandle"].as_str().unwrap();
            let delete = [
                "--endpoint-url",
                &endpoint,
                "sqs",
                "delete-message",
                "--queue-url",
                url,
                "--receipt-handle",
                receipt,
            ];
            aws(moto, &delete);
        }
    }
}
