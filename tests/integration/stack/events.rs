//! The stack's EventBridge rules and their queue: each rule's pattern and target, the detail
//! types they take together, then what they deliver (delivery.rs), and the queue's policy, which
//! moto's CloudFormation does not create.

use std::collections::BTreeMap;

use super::delivery::{check_delivery, check_published_events, check_tag_changes};
use super::support::{aws, aws_json, elastic_tag, resource, template, untag, STACK};
use crate::support::Moto;
use serde_json::Value as Json;

pub fn check_events(moto: &Moto, out: &BTreeMap<String, String>) {
    let queue_arn = queue_arn(moto, out);
    let mut detail_types = Vec::new();
    for (rule, source) in [
        ("instance-events", "aws.ec2"),
        ("lifecycle-events", "aws.autoscaling"),
        ("health-events", "aws.health"),
        ("tag-events", "aws.tag"),
    ] {
        let name = format!("{STACK}-{rule}");
        let described = aws_json(moto, &["events", "describe-rule", "--name", &name]);
        assert_eq!(described["State"], "ENABLED");
        let pattern: Json =
            serde_json::from_str(described["EventPattern"].as_str().unwrap()).unwrap();
        assert_eq!(pattern["source"], serde_json::json!([source]));
        detail_types.extend(
            pattern["detail-type"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap().to_string()),
        );
        check_pattern(out, source, &pattern);
        let targets = aws_json(moto, &["events", "list-targets-by-rule", "--rule", &name]);
        assert_eq!(targets["Targets"][0]["Arn"], queue_arn.as_str(), "{name}");
    }
    detail_types.sort();
    assert_eq!(
        detail_types,
        [
            "AWS Health Event",
            "Capacity Block Expiration Warning",
            "Capacity Block Reservation Expiration Warning",
            "EC2 Capacity Reservation Instance Interruption Warning",
            "EC2 Instance Rebalance Recommendation",
            "EC2 Instance State-change Notification",
            "EC2 Instance-launch Lifecycle Action",
            "EC2 Instance-terminate Lifecycle Action",
            "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
            "EC2 Spot Instance Interruption Warning",
            "Tag Change on Resource",
        ]
    );

    check_delivery(moto, out);
    check_published_events(moto, out);
    check_tag_changes(moto, out);
    check_queue_policy(moto, out, &queue_arn);
}

fn queue_arn(moto: &Moto, out: &BTreeMap<String, String>) -> String {
    // The CLI sends SQS calls to the queue URL's host unless told otherwise.
    let endpoint = moto.endpoint();
    aws_json(
        moto,
        &[
            "--endpoint-url",
            &endpoint,
            "sqs",
            "get-queue-attributes",
            "--queue-url",
            &out["EventQueueUrl"],
            "--attribute-names",
            "QueueArn",
        ],
    )["Attributes"]["QueueArn"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What a rule takes of its source, beyond the detail types.
fn check_pattern(out: &BTreeMap<String, String>, source: &str, pattern: &Json) {
    if source == "aws.health" {
        // Only EC2 scheduled changes: not issues, not other services.
        assert_eq!(pattern["detail"]["service"], serde_json::json!(["EC2"]));
        assert_eq!(
            pattern["detail"]["eventTypeCategory"],
            serde_json::json!(["scheduledChange"])
        );
    }
    if source == "aws.autoscaling" {
        assert_eq!(
            pattern["detail"]["AutoScalingGroupName"],
            serde_json::json!([out["WorkerGroup"]])
        );
    }
    if source == "aws.tag" {
        // Changes of the elastic tag on instances: not the status tag dtd writes itself.
        assert_eq!(
            pattern["detail"],
            serde_json::json!({
                "service": ["ec2"],
                "resource-type": ["instance"],
                "changed-tag-keys": [elastic_tag()],
            })
        );
    }
}

/// Not created by moto's CloudFormation: the queue policy, read from the template. Only
/// EventBridge may send, and only on behalf of this stack's four rules.
fn check_queue_policy(moto: &Moto, out: &BTreeMap<String, String>, queue_arn: &str) {
    let t = template();
    let policy = resource(&t, "EventQueuePolicy");
    let statement = &policy["PolicyDocument"]["Statement"][0];
    assert_eq!(
        statement["Principal"]["Service"].as_str(),
        Some("events.amazonaws.com")
    );
    assert_eq!(statement["Action"].as_str(), Some("sqs:SendMessage"));
    let sources: Vec<&str> = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| untag(s).as_str().unwrap())
        .collect();
    assert_eq!(
        sources,
        [
            "InstanceEventsRule.Arn",
            "LifecycleEventsRule.Arn",
            "HealthEventsRule.Arn",
            "TagEventsRule.Arn"
        ]
    );
    // Stand-in for CloudFormation: that policy on the queue, with the rules' ARNs, so the
    // queue looks as it does on AWS to `dtctl doctor`.
    let rules = [
        "instance-events",
        "lifecycle-events",
        "health-events",
        "tag-events",
    ];
    let rule_arns: Vec<String> = rules
        .iter()
        .map(|r| {
            let name = format!("{STACK}-{r}");
            aws_json(moto, &["events", "describe-rule", "--name", &name])["Arn"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let document = serde_json::json!({"Version": "2012-10-17", "Statement": [{
        "Sid": statement["Sid"].as_str(), "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
        "Resource": queue_arn, "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}}}]});
    let attributes = serde_json::json!({ "Policy": document.to_string() }).to_string();
    aws(
        moto,
        &[
            "sqs",
            "set-queue-attributes",
            "--queue-url",
            &out["EventQueueUrl"],
            "--attributes",
            &attributes,
        ],
    );
}
