//! EventBridge events as delivered to SQS, read leniently: a missing or unknown field never fails
//! parsing (the emulator omits `account`; AWS adds fields over time), only a missing meaning does.

use serde::Deserialize;

use crate::model::{
    is_ec2_instance_id, Millis, Notice, NoticeKind, NoticeTarget, CAPACITY_BLOCK_TERMINATES_MS,
};
use crate::time::{parse_gmt_date, parse_rfc3339};

/// An AWS Health event names the instances it affects; more than this is not a worker notice.
const MAX_AFFECTED_ENTITIES: usize = 1000;

/// A tag change event names the resource it is about (AWS's sample names one); the ids it
/// yields are read from EC2 by id on the hot path, so a message naming more is read only this
/// far (the periodic full read still finds the rest).
const MAX_TAGGED_RESOURCES: usize = 100;

/// What one message asks of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// One per worker it names (an AWS Health event may name several instances).
    Notices(Vec<Notice>),
    /// Worth a pass now (a state change, a lifecycle action, the elastic tag deleted or put
    /// back) but carries no rule of its own: the pass reads the instance and group state itself.
    Wake {
        why: String,
        /// The instances the event names, each a well-formed EC2 instance id (anything else
        /// the message holds is dropped), so the pass can re-read just those; may be empty.
        instances: Vec<String>,
    },
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
    /// ARNs of the resources the event is about (a list; tolerated as anything else).
    #[serde(default)]
    resources: serde_json::Value,
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
                    let at = match detail("instance-termination-time") {
                        Some(end) => parse_rfc3339(end),
                        None => spot_deadline(kind, env.time.as_deref()),
                    };
                    notice(NoticeKind::Interruption, t, at)
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
                    let end = detail("end-date").and_then(parse_rfc3339);
                    let deadline = end.map(|e| e.saturating_sub(CAPACITY_BLOCK_TERMINATES_MS));
                    let target = NoticeTarget::CapacityReservation(cr.to_string());
                    notice(NoticeKind::CapacityBlockExpiring, target, deadline)
                }
                None => Parsed::Ignored(format!("{kind} without a capacity-reservation-id")),
            }
        }
        "EC2 Instance State-change Notification" => {
            let instances = valid_instance(detail("instance-id"));
            let why = format!(
                "{} is {}",
                instances.first().map_or("an instance", String::as_str),
                detail("state").unwrap_or("changing state")
            );
            Parsed::Wake { why, instances }
        }
        // "Amazon EC2 Auto Scaling event reference", "Lifecycle action events" (Amazon EC2 Auto
        // Scaling User Guide): the instance is `detail.EC2InstanceId`.
        "EC2 Instance-terminate Lifecycle Action" | "EC2 Instance-launch Lifecycle Action" => {
            let instances = valid_instance(detail("EC2InstanceId"));
            let why = format!(
                "{kind} for {}",
                instances.first().map_or("an instance", String::as_str)
            );
            Parsed::Wake { why, instances }
        }
        "Tag Change on Resource" if env.source.as_deref() == Some("aws.tag") => {
            tag_change(&env.detail, &env.resources)
        }
        "AWS Health Event" if env.source.as_deref() == Some("aws.health") => {
            health(&env.detail, &id)
        }
        other => Parsed::Ignored(format!("detail-type `{other}` is not handled")),
    }
}

/// A tag of an EC2 instance was added, changed or deleted (the stack's rule passes only changes
/// of the elastic tag): the instances are the `resources` ARNs, `arn:<partition>:ec2:<region>:
/// <account>:instance/<id>`. Shape: "Monitor tag changes with serverless workflows and Amazon
/// EventBridge" (Tagging AWS Resources and Tag Editor User Guide,
/// docs.aws.amazon.com/tag-editor/latest/userguide/tag-monitor.html); detail-type and source:
/// "Tags events" (EventBridge events reference,
/// docs.aws.amazon.com/eventbridge/latest/ref/events-ref-tag.html).
fn tag_change(detail: &serde_json::Value, resources: &serde_json::Value) -> Parsed {
    let field = |key: &str| detail.get(key).and_then(|v| v.as_str());
    let (service, kind) = (field("service"), field("resource-type"));
    if service != Some("ec2") || kind != Some("instance") {
        return Parsed::Ignored(format!(
            "tag change on {} {} is not about an EC2 instance",
            service.unwrap_or("no service"),
            kind.unwrap_or("resource")
        ));
    }
    let mut instances: Vec<String> = Vec::new();
    let arns = resources.as_array().into_iter().flatten();
    for id in arns.take(MAX_TAGGED_RESOURCES).filter_map(instance_of_arn) {
        if !instances.iter().any(|i| i == id) {
            instances.push(id.to_string());
        }
    }
    match instances.as_slice() {
        [] => Parsed::Ignored("tag change names no EC2 instance".into()),
        [one] => Parsed::Wake {
            why: format!("the tags of {one} changed"),
            instances,
        },
        many => Parsed::Wake {
            why: format!("the tags of {} instances changed", many.len()),
            instances,
        },
    }
}

/// The instance id of an EC2 instance ARN; `None` for any other ARN or string.
fn instance_of_arn(arn: &serde_json::Value) -> Option<&str> {
    let mut parts = arn.as_str()?.splitn(6, ':');
    let (arn, _partition, service) = (parts.next()?, parts.next()?, parts.next()?);
    let (_region, _account, resource) = (parts.next()?, parts.next()?, parts.next()?);
    let id = resource.strip_prefix("instance/")?;
    (arn == "arn" && service == "ec2" && is_ec2_instance_id(id)).then_some(id)
}

/// The id, if it is one, as the only instance an event names.
fn valid_instance(id: Option<&str>) -> Vec<String> {
    id.filter(|i| is_ec2_instance_id(i))
        .map(str::to_string)
        .into_iter()
        .collect()
}

/// An AWS Health event: only an EC2 scheduled change (reboot, stop, retirement, maintenance,
/// and the `AWS_EC2_PLANNED_LIFECYCLE_EVENT` of the newer codes) that is not closed is a notice,
/// one per instance it names, due at its `startTime`. Shape and samples: "Reference: AWS Health
/// events Amazon EventBridge schema" (AWS Health User Guide); `statusCode` `open | closed |
/// upcoming`. A large event comes in pages, each naming some of the entities; every page is
/// taken, and a backup copy (`backupEvent`) is one already heeded.
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
    let deadline = start.and_then(|t| parse_gmt_date(t).or_else(|| parse_rfc3339(t)));
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

/// The instances in `affectedEntities[].entityValue`, each an instance id or, as the schema
/// page's EC2 sample has it, an instance ARN. Other entities (Dedicated Hosts, volumes) are
/// skipped, and so is one whose `status` is `RESOLVED`: the change is done for it ("AWS Health
/// planned lifecycle events": an entity is `PENDING` until then).
fn affected_instances(detail: &serde_json::Value) -> impl Iterator<Item = &str> {
    let entities = detail.get("affectedEntities").and_then(|v| v.as_array());
    entities
        .into_iter()
        .flatten()
        .take(MAX_AFFECTED_ENTITIES)
        .filter(|e| e.get("status").and_then(|s| s.as_str()) != Some("RESOLVED"))
        .filter_map(|e| e.get("entityValue"))
        .filter_map(|v| match v.as_str() {
            Some(id) if is_ec2_instance_id(id) => Some(id),
            _ => instance_of_arn(v),
        })
}

/// When AWS acts on an interruption warning without a termination time: the Spot warning is
/// emitted "two minutes prior to the actual interruption" ("Spot Instance interruption notices",
/// EC2 User Guide), so its deadline is the event's time plus two minutes. For the Capacity
/// Reservation warnings no lead time is documented: the event's time, the earliest it can be.
fn spot_deadline(kind: &str, time: Option<&str>) -> Option<Millis> {
    let at = parse_rfc3339(time?)?;
    let lead = match kind {
        "EC2 Spot Instance Interruption Warning" => SPOT_WARNING_LEAD_MS,
        _ => 0,
    };
    Some(at + lead)
}

const SPOT_WARNING_LEAD_MS: Millis = 120_000;

#[cfg(test)]
mod tests;
