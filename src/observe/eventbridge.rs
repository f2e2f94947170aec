//! EventBridge events as delivered to SQS, read leniently: a missing or unknown field never fails
//! parsing (the emulator omits `account`; AWS adds fields over time), only a missing meaning does.

use serde::Deserialize;

use crate::fsutil::{millis_from_gmt_date, millis_from_rfc3339};
use crate::model::{Millis, Notice, NoticeKind, NoticeTarget};

/// How long before a Capacity Block ends its instances start terminating: the warning comes
/// 40 minutes before the end, terminations begin 10 minutes after it.
const CAPACITY_BLOCK_GRACE_MS: Millis = 30 * 60_000;

/// An AWS Health event names the instances it affects; more than this is not a worker notice.
const MAX_AFFECTED_ENTITIES: usize = 1000;

/// What one message asks of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// One per worker it names (an AWS Health event may name several instances).
    Notices(Vec<Notice>),
    /// Worth a pass now (a state change, a lifecycle action) but carries no rule of its own:
    /// the pass reads the instance and group state itself.
    Wake(String),
    /// Not an event dtd handles; the message is deleted.
    Ignored(String),
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<String>,
    #[serde(rename = "detail-type", alias = "detail_type", default)]
    detail_type: Option<String>,
    #[serde(default)]
    customer_event_id: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

pub fn parse(body: &str) -> Parsed {
    let env: Envelope = match serde_json::from_str(body) {
        Ok(e) => e,
        Err(e) => return Parsed::Ignored(format!("not an EventBridge event: {e}")),
    };
    let Some(kind) = env.detail_type.as_deref() else {
        return Parsed::Ignored("event without a detail-type".into());
    };
    let detail = |key: &str| env.detail.get(key).and_then(|v| v.as_str());
    let id = env
        .id
        .clone()
        .or_else(|| env.customer_event_id.clone())
        .unwrap_or_else(|| format!("{kind}:{}", env.detail));
    let notice = |kind: NoticeKind, target: NoticeTarget, deadline: Option<Millis>| {
        Parsed::Notices(vec![Notice {
            id: id.clone(),
            kind,
            target,
            deadline,
            source: "queue",
        }])
    };
    let instance = || detail("instance-id").map(|i| NoticeTarget::Instance(i.to_string()));
    // Names as AWS documents them: "Spot Instance interruption notices", "Monitor Capacity Blocks
    // using EventBridge" (which names the expiration warning both ways across its versions, and
    // the Capacity Reservation interruption warning), "Monitor interruptible Capacity
    // Reservations with EventBridge and CloudTrail" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/).
    match kind {
        "EC2 Spot Instance Interruption Warning"
        | "EC2 Capacity Reservation Instance Interruption Warning"
        | "EC2 Interruptible Capacity Reservation Instance Interruption Warning" => {
            match instance() {
                Some(t) => {
                    let at = detail("instance-termination-time").or(env.time.as_deref());
                    notice(
                        NoticeKind::Interruption,
                        t,
                        at.and_then(millis_from_rfc3339),
                    )
                }
                None => Parsed::Ignored(format!("{kind} without an instance-id")),
            }
        }
        "EC2 Instance Rebalance Recommendation" => match instance() {
            Some(t) => notice(NoticeKind::Rebalance, t, None),
            None => Parsed::Ignored(format!("{kind} without an instance-id")),
        },
        "Capacity Block Expiration Warning" | "Capacity Block Reservation Expiration Warning" => {
            match detail("capacity-reservation-id") {
                Some(cr) => {
                    let end = detail("end-date").and_then(millis_from_rfc3339);
                    let deadline = end.map(|e| e.saturating_sub(CAPACITY_BLOCK_GRACE_MS));
                    let target = NoticeTarget::CapacityReservation(cr.to_string());
                    notice(NoticeKind::CapacityBlockExpiring, target, deadline)
                }
                None => Parsed::Ignored(format!("{kind} without a capacity-reservation-id")),
            }
        }
        "EC2 Instance State-change Notification" => Parsed::Wake(format!(
            "{} is {}",
            detail("instance-id").unwrap_or("an instance"),
            detail("state").unwrap_or("changing state")
        )),
        "EC2 Instance-terminate Lifecycle Action" | "EC2 Instance-launch Lifecycle Action" => {
            Parsed::Wake(format!(
                "{kind} for {}",
                detail("EC2InstanceId").unwrap_or("an instance")
            ))
        }
        "AWS Health Event" if env.source.as_deref() == Some("aws.health") => {
            health(&env.detail, &id)
        }
        other => Parsed::Ignored(format!("detail-type `{other}` is not handled")),
    }
}

/// An AWS Health event: only an EC2 scheduled change (reboot, stop, retirement, maintenance)
/// that is not closed is a notice, one per instance it names, due at its `startTime`.
/// Shape: "Reference: AWS Health events Amazon EventBridge schema" (AWS Health User Guide) and
/// `statusCode` `open | closed | upcoming` from the AWS Health API reference's `Event`.
fn health(detail: &serde_json::Value, id: &str) -> Parsed {
    let field = |key: &str| detail.get(key).and_then(|v| v.as_str());
    let (service, category) = (field("service"), field("eventTypeCategory"));
    if service != Some("EC2") || category != Some("scheduledChange") {
        return Parsed::Ignored(format!(
            "AWS Health event for {} ({}) is not an EC2 scheduled change",
            service.unwrap_or("no service"),
            category.unwrap_or("no category")
        ));
    }
    let code = field("eventTypeCode").unwrap_or("an EC2 scheduled change");
    if field("statusCode") == Some("closed") {
        return Parsed::Ignored(format!("{code} is closed"));
    }
    let start = field("startTime");
    let deadline = start.and_then(|t| millis_from_gmt_date(t).or_else(|| millis_from_rfc3339(t)));
    // Updates of one change come as new events with the same ARN: heeded once.
    let key = field("eventArn").unwrap_or(id);
    let notices: Vec<Notice> = affected_instances(detail)
        .map(|instance| Notice {
            id: format!("health:{key}:{instance}"),
            kind: NoticeKind::ScheduledChange,
            target: NoticeTarget::Instance(instance.to_string()),
            deadline,
            source: "queue",
        })
        .collect();
    match notices.is_empty() {
        true => Parsed::Ignored(format!("{code} names no instance")),
        false => Parsed::Notices(notices),
    }
}

/// The instance ids in `affectedEntities[].entityValue` (other entities, e.g. Dedicated Hosts,
/// are skipped).
fn affected_instances(detail: &serde_json::Value) -> impl Iterator<Item = &str> {
    let entities = detail.get("affectedEntities").and_then(|v| v.as_array());
    entities
        .into_iter()
        .flatten()
        .take(MAX_AFFECTED_ENTITIES)
        .filter_map(|e| e.get("entityValue").and_then(|v| v.as_str()))
        .filter(|v| is_instance_id(v))
}

fn is_instance_id(v: &str) -> bool {
    v.len() <= 32
        && v.strip_prefix("i-")
            .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(n.deadline, millis_from_rfc3339("2026-11-23T10:00:00Z"));
    }

    #[test]
    fn capacity_block_targets_its_reservation_before_the_end() {
        let body = r#"{"customer_event_id":"cr-9-approaching-expiry","detail_type":"Capacity Block Expiration Warning",
            "source":"aws.ec2","detail":{"capacity-reservation-id":"cr-9","end-date":"2026-11-23T11:30:00Z"}}"#;
        let n = notice(parse(body));
        assert_eq!(n.id, "cr-9-approaching-expiry");
        assert_eq!(n.target, NoticeTarget::CapacityReservation("cr-9".into()));
        assert_eq!(n.deadline, millis_from_rfc3339("2026-11-23T11:00:00Z"));
    }

    #[test]
    fn state_changes_wake_and_strangers_are_ignored() {
        let wake = r#"{"id":"e-2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-2","state":"shutting-down"}}"#;
        assert_eq!(parse(wake), Parsed::Wake("i-2 is shutting-down".into()));
        assert!(matches!(parse("{]"), Parsed::Ignored(_)));
        assert!(matches!(
            parse(r#"{"detail-type":"AWS API Call via CloudTrail"}"#),
            Parsed::Ignored(_)
        ));
        let no_id =
            r#"{"id":"e-3","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#;
        assert!(matches!(parse(no_id), Parsed::Ignored(_)));
    }
}
