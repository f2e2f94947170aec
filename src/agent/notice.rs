//! Interruption notices read from the instance metadata, and which of them is worth the marker
//! `dtd agent` writes (`<shared_dir>/interruption_<ip>`, an [`InterruptionMarker`]).

use serde::Deserialize;

use crate::protocol::interruption::{InterruptionMarker, NoticeKind};
use crate::time::parse_gmt_date;

/// IMDS paths (under `/latest/meta-data/`) that carry notices.
pub const SPOT_PATH: &str = "spot/instance-action";
pub const REBALANCE_PATH: &str = "events/recommendations/rebalance";
pub const LIFECYCLE_PATH: &str = "autoscaling/target-lifecycle-state";
/// Active EC2 scheduled events (reboot, stop, retirement, maintenance): "Scheduled events for your
/// instances", section "View scheduled events" (Amazon EC2 User Guide).
pub const SCHEDULED_PATH: &str = "events/maintenance/scheduled";

/// A notice as read from IMDS, before it is stamped with who and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub id: String,
    pub detail: String,
    pub action_time: Option<String>,
}

/// `spot/instance-action`: `{"action": "terminate", "time": "2026-11-23T10:00:00Z"}`.
pub fn spot(body: &str) -> Notice {
    let time = json_field(body, "time");
    notice(NoticeKind::SpotInterruption, body, time)
}

/// `events/recommendations/rebalance`: `{"noticeTime": "2026-11-23T09:50:00Z"}`.
pub fn rebalance(body: &str) -> Notice {
    let time = json_field(body, "noticeTime");
    let mut n = notice(NoticeKind::RebalanceRecommendation, body, time);
    // A recommendation's time is when it was issued, not when anything will happen.
    n.action_time = None;
    n
}

/// `autoscaling/target-lifecycle-state`: a notice only when it reads `Terminated`.
pub fn lifecycle(body: &str, instance_id: &str) -> Option<Notice> {
    if body.trim() != "Terminated" {
        return None;
    }
    // The state carries no time; an instance is terminated once, so its id names the notice.
    Some(Notice {
        kind: NoticeKind::LifecycleTerminate,
        id: format!(
            "imds:{}:{instance_id}",
            NoticeKind::LifecycleTerminate.as_str()
        ),
        detail: body.trim().to_string(),
        action_time: None,
    })
}

/// One entry of `events/maintenance/scheduled`, as documented:
/// `{"NotBefore": "21 Jan 2019 09:00:43 GMT", "Code": "system-reboot", "Description": "scheduled
/// reboot", "EventId": "instance-event-0d59937288b749b32", "NotAfter": "...", "State": "active"}`.
/// Unknown fields are ignored.
#[derive(Deserialize)]
struct ScheduledEvent {
    #[serde(rename = "NotBefore", default)]
    not_before: Option<String>,
    #[serde(rename = "Code", default)]
    code: Option<String>,
    #[serde(rename = "Description", default)]
    description: Option<String>,
    #[serde(rename = "EventId", default)]
    event_id: Option<String>,
    #[serde(rename = "State", default)]
    state: Option<String>,
}

/// More entries than this is not a real instance's schedule; the rest are not looked at.
const MAX_SCHEDULED_EVENTS: usize = 32;

/// `events/maintenance/scheduled`: the earliest event that is still to happen. A `completed` or
/// `canceled` one (the documented states besides `active`; the EC2 API also marks them by a
/// `[Completed]`/`[Canceled]` description) is no notice.
pub fn scheduled(body: &str) -> Option<Notice> {
    let events: Vec<serde_json::Value> = serde_json::from_str(body).ok()?;
    let pending = events
        .into_iter()
        .take(MAX_SCHEDULED_EVENTS)
        .filter_map(|v| serde_json::from_value::<ScheduledEvent>(v).ok())
        .filter(|e| !is_over(e))
        .filter_map(|e| {
            let at = e.not_before.as_deref().and_then(parse_gmt_date)?;
            Some((at, e))
        });
    let (at, event) = pending.min_by_key(|(at, _)| *at)?;
    let time = crate::time::rfc3339(at).to_string();
    let name = event
        .event_id
        .as_deref()
        .filter(|id| is_plain_id(id))
        .unwrap_or(&time);
    Some(Notice {
        kind: NoticeKind::ScheduledMaintenance,
        id: format!("imds:{}:{name}", NoticeKind::ScheduledMaintenance.as_str()),
        detail: format!(
            "{} at {time}: {}",
            event.code.as_deref().unwrap_or("scheduled event"),
            event.description.as_deref().unwrap_or("")
        )
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_DETAIL_CHARS)
        .collect(),
        action_time: Some(time),
    })
}

fn is_over(e: &ScheduledEvent) -> bool {
    let state = e.state.as_deref().unwrap_or("").to_ascii_lowercase();
    let description = e.description.as_deref().unwrap_or("");
    matches!(state.as_str(), "completed" | "canceled" | "cancelled")
        || description.starts_with("[Completed]")
        || description.starts_with("[Canceled]")
}

/// An id that can go into the marker's id: `instance-event-0d59937288b749b32`.
fn is_plain_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Notices are a few dozen bytes; anything longer is cut, so a marker stays a marker.
const MAX_DETAIL_CHARS: usize = 2048;

fn notice(kind: NoticeKind, body: &str, time: Option<String>) -> Notice {
    let stamp = time.clone().unwrap_or_else(|| "unknown-time".to_string());
    Notice {
        kind,
        id: format!("imds:{}:{stamp}", kind.as_str()),
        detail: body.trim().chars().take(MAX_DETAIL_CHARS).collect(),
        action_time: time,
    }
}

/// A time string from the notice, kept only if it is a plain RFC 3339 timestamp (it ends up in
/// the marker's id, which people and the master compare).
fn json_field(body: &str, key: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let text = v.get(key)?.as_str()?;
    crate::time::parse_rfc3339(text)?;
    Some(text.to_string())
}

/// Whether a marker for `new` should replace the one holding `old`: never the same notice twice,
/// never a weaker notice over a stronger one.
pub fn replaces(new: &Notice, old: Option<&InterruptionMarker>) -> bool {
    match old {
        None => true,
        Some(old) => new.id != old.id && new.kind >= old.kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::interruption::sample as marker;

    #[test]
    fn spot_notice_id_comes_from_its_time() {
        let n = spot(r#"{"action":"terminate","time":"2026-11-23T10:00:00Z"}"#);
        assert_eq!(n.id, "imds:spot-interruption:2026-11-23T10:00:00Z");
        assert_eq!(n.action_time.as_deref(), Some("2026-11-23T10:00:00Z"));
        let garbled = spot(r#"{"time":"$(reboot)"}"#);
        assert_eq!(garbled.id, "imds:spot-interruption:unknown-time");
        assert_eq!(garbled.action_time, None);
    }

    #[test]
    fn lifecycle_only_when_terminated() {
        assert!(lifecycle("InService", "i-1").is_none());
        let n = lifecycle("Terminated\n", "i-1").unwrap();
        assert_eq!(n.id, "imds:lifecycle-terminate:i-1");
    }

    /// The documented sample: "Scheduled events for your instances", "View scheduled events"
    /// (Amazon EC2 User Guide).
    const SCHEDULED_SAMPLE: &str = r#"[
  {
    "NotBefore" : "21 Jan 2019 09:00:43 GMT",
    "Code" : "system-reboot",
    "Description" : "scheduled reboot",
    "EventId" : "instance-event-0d59937288b749b32",
    "NotAfter" : "21 Jan 2019 09:17:23 GMT",
    "State" : "active"
  }
]"#;

    #[test]
    fn scheduled_maintenance_is_due_at_not_before() {
        let n = scheduled(SCHEDULED_SAMPLE).unwrap();
        assert_eq!(n.kind, NoticeKind::ScheduledMaintenance);
        assert_eq!(
            n.id,
            "imds:scheduled-maintenance:instance-event-0d59937288b749b32"
        );
        assert_eq!(n.action_time.as_deref(), Some("2019-01-21T09:00:43Z"));
        assert!(n
            .detail
            .starts_with("system-reboot at 2019-01-21T09:00:43Z"));
    }

    #[test]
    fn scheduled_events_that_are_over_or_garbled_are_no_notice() {
        let canceled = SCHEDULED_SAMPLE.replace("\"active\"", "\"canceled\"");
        assert!(scheduled(&canceled).is_none());
        let completed = SCHEDULED_SAMPLE.replace("\"active\"", "\"completed\"");
        assert!(scheduled(&completed).is_none());
        assert!(scheduled("[]").is_none());
        assert!(scheduled("{]").is_none());
        assert!(scheduled(r#"[{"NotBefore":"soon","State":"active"}]"#).is_none());
        let odd_id = SCHEDULED_SAMPLE.replace("instance-event-0d59937288b749b32", "$(reboot)");
        let n = scheduled(&odd_id).unwrap();
        assert_eq!(n.id, "imds:scheduled-maintenance:2019-01-21T09:00:43Z");
    }

    #[test]
    fn strength_orders_replacement() {
        let spot_n = spot(r#"{"time":"2026-11-23T10:00:00Z"}"#);
        let reb = rebalance(r#"{"noticeTime":"2026-11-23T09:00:00Z"}"#);
        assert!(replaces(&spot_n, None));
        let held_spot = marker(NoticeKind::SpotInterruption, &spot_n.id);
        assert!(!replaces(&spot_n, Some(&held_spot)));
        assert!(!replaces(&reb, Some(&held_spot)));
        let held_reb = marker(NoticeKind::RebalanceRecommendation, &reb.id);
        assert!(replaces(&spot_n, Some(&held_reb)));
    }
}
