//! The event queue and what feeds it: the queue exists, EventBridge rules that are enabled send it
//! EC2's interruption warnings, and the queue's policy lets EventBridge deliver (without it,
//! EventBridge's deliveries fail and nothing says so but a metric).

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use super::policy::{one_of, statements};
use super::{Check, Context, ReadFailed};
use crate::aws::describe_error;

const QUEUE: &str = "event queue";
const RULES: &str = "queue: EventBridge rules";
const POLICY: &str = "queue: EventBridge may send";

/// The event a rule must at least match: the two-minute warning (EC2 User Guide, "Spot Instance
/// interruption notices"); the others dtd handles are listed in the detail when missing.
const SPOT_WARNING: &str = "EC2 Spot Instance Interruption Warning";
const ALSO_HANDLED: [&str; 4] = [
    "EC2 Instance Rebalance Recommendation",
    "EC2 Instance State-change Notification",
    "AWS Health Event",
    TAG_CHANGE,
];
/// Without it a deleted elastic tag is seen at the next complete listing (`resync`), not at once.
const TAG_CHANGE: &str = "Tag Change on Resource";

pub async fn checks(cx: &Context<'_>) -> Vec<Check> {
    let Some(url) = cx.cfg.events.queue_url.as_deref() else {
        return vec![Check::skip(
            "queue.exists",
            QUEUE,
            "none configured (events.queue_url)",
        )];
    };
    let sqs = aws_sdk_sqs::Client::new(&cx.sdk);
    let attrs = (sqs.get_queue_attributes().queue_url(url))
        .attribute_names(QueueAttributeName::QueueArn)
        .attribute_names(QueueAttributeName::Policy)
        .send()
        .await;
    let attrs = match attrs {
        Ok(a) => a.attributes().cloned().unwrap_or_default(),
        Err(e) => {
            let needs = "needs the queue";
            return vec![
                Check::fail(
                    "queue.exists",
                    QUEUE,
                    format!("GetQueueAttributes {url} failed: {}", describe_error(&e)),
                    "create it (the stack does) or fix events.queue_url; the role needs sqs:GetQueueAttributes",
                ),
                Check::skip("queue.rules", RULES, needs),
                Check::skip("queue.policy", POLICY, needs),
            ];
        }
    };
    let arn = attrs
        .get(&QueueAttributeName::QueueArn)
        .cloned()
        .unwrap_or_default();
    let policy = attrs.get(&QueueAttributeName::Policy).cloned();
    vec![
        Check::pass("queue.exists", QUEUE, arn.clone()),
        rules(cx, &arn).await,
        policy_check(&arn, policy.as_deref()),
    ]
}

async fn rules(cx: &Context<'_>, queue_arn: &str) -> Check {
    let events = aws_sdk_eventbridge::Client::new(&cx.sdk);
    let names = match rule_names(&events, queue_arn).await {
        Ok(n) => n,
        Err(e) => {
            return Check::fail(
                "queue.rules",
                RULES,
                e.to_string(),
                "let the role call events:ListRuleNamesByTarget",
            )
        }
    };
    let mut matched: Vec<String> = Vec::new();
    let mut enabled = Vec::new();
    for name in &names {
        let rule = match events.describe_rule().name(name).send().await {
            Ok(r) => r,
            Err(e) => {
                return Check::fail(
                    "queue.rules",
                    RULES,
                    format!("DescribeRule {name}: {}", describe_error(&e)),
                    "let the role call events:DescribeRule",
                )
            }
        };
        if rule.state().map(|s| s.as_str()) != Some("ENABLED") {
            continue;
        }
        enabled.push(name.clone());
        let pattern = rule
            .event_pattern()
            .and_then(|p| serde_json::from_str::<Value>(p).ok());
        matched.extend(pattern.iter().flat_map(detail_types));
    }
    let fix = || {
        format!(
            "aws events put-rule --name CLUSTER-instance-events --event-pattern \
             '{{\"source\":[\"aws.ec2\"],\"detail-type\":[\"{SPOT_WARNING}\"]}}' and \
             aws events put-targets --rule CLUSTER-instance-events --targets Id=queue,Arn={queue_arn}"
        )
    };
    if enabled.is_empty() {
        let detail = format!("no enabled EventBridge rule sends to {queue_arn}: dtd hears of a Spot interruption only from the worker's own agent, if at all");
        return Check::fail("queue.rules", RULES, detail, fix());
    }
    if !matched.iter().any(|d| d == SPOT_WARNING) {
        let detail = format!(
            "rules {} send to the queue, but none matches \"{SPOT_WARNING}\"",
            enabled.join(", ")
        );
        return Check::fail("queue.rules", RULES, detail, fix());
    }
    let missing: Vec<&str> = ALSO_HANDLED
        .iter()
        .copied()
        .filter(|d| !matched.iter().any(|m| m == d))
        .collect();
    let mut detail = format!("{} matching Spot warnings", enabled.join(", "));
    if !missing.is_empty() {
        detail.push_str(&format!(" (not routed, optional: {})", missing.join(", ")));
    }
    if missing.contains(&TAG_CHANGE) {
        let every = humantime::format_duration(cx.cfg.resync);
        detail.push_str(&format!(
            "; without tag changes a deleted elastic tag waits for the next listing (resync: {every})"
        ));
    }
    Check::pass("queue.rules", RULES, detail)
}

async fn rule_names(
    events: &aws_sdk_eventbridge::Client,
    target: &str,
) -> Result<Vec<String>, ReadFailed> {
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = (events.list_rule_names_by_target().target_arn(target))
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| ReadFailed::RuleNames {
                target: target.into(),
                said: describe_error(&e),
            })?;
        names.extend(out.rule_names().iter().cloned());
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(names);
        }
    }
}

/// The `detail-type` values an event pattern matches (exact strings only).
fn detail_types(pattern: &Value) -> Vec<String> {
    match &pattern["detail-type"] {
        Value::Array(list) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Value::String(s) => vec![s.clone()],
        _ => Vec::new(),
    }
}

fn policy_check(queue_arn: &str, policy: Option<&str>) -> Check {
    let ok = policy
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .is_some_and(|p| lets_eventbridge_send(&p));
    let detail = if ok {
        "its policy allows events.amazonaws.com to sqs:SendMessage".to_string()
    } else {
        format!("the policy of {queue_arn} does not let EventBridge send: every delivery fails")
    };
    Check::verdict("queue.policy", POLICY, ok, detail, || {
        "allow Principal {\"Service\": \"events.amazonaws.com\"} sqs:SendMessage on the queue, \
         with aws:SourceArn the rules' ARNs (EventBridge User Guide, \"Permissions for Amazon \
         SQS\"; the stack's EventQueuePolicy)"
            .into()
    })
}

/// A statement that allows EventBridge's service principal to send (EventBridge User Guide,
/// "Using resource-based policies for Amazon EventBridge", Amazon SQS permissions).
fn lets_eventbridge_send(policy: &Value) -> bool {
    statements(policy).iter().any(|s| {
        let by_service = one_of(&s["Principal"]["Service"], "events.amazonaws.com");
        let sends = (["sqs:SendMessage", "sqs:*", "*"].iter()).any(|a| one_of(&s["Action"], a));
        s["Effect"] == "Allow" && by_service && sends
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stacks_queue_policy_lets_eventbridge_send() {
        let stack = serde_json::json!({"Version": "2012-10-17", "Statement": [{
            "Sid": "EventBridgeRulesOfThisStack", "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
            "Resource": "arn:aws:sqs:us-east-1:123456789012:demo-events",
            "Condition": {"ArnEquals": {"aws:SourceArn": ["arn:aws:events:us-east-1:123456789012:rule/r"]}}}]});
        assert!(lets_eventbridge_send(&stack));
        let sns_only = serde_json::json!({"Statement": {"Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"}, "Action": "sqs:SendMessage"}});
        assert!(!lets_eventbridge_send(&sns_only));
        assert!(policy_check("arn", None).fix.is_some());
    }

    #[test]
    fn detail_types_of_a_pattern() {
        let p = serde_json::json!({"source": ["aws.ec2"], "detail-type": [SPOT_WARNING, "EC2 Instance Rebalance Recommendation"]});
        assert_eq!(detail_types(&p).len(), 2);
        assert!(detail_types(&serde_json::json!({"source": ["aws.ec2"]})).is_empty());
    }
}
