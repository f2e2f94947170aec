//! Interruption notices read from the instance metadata, and the marker `dtd agent` writes for
//! them: `<shared_dir>/interruption_<ip>`, which the master reads with [`InterruptionMarker`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const INTERRUPTION_PREFIX: &str = "interruption_";

/// IMDS paths (under `/latest/meta-data/`) that carry notices.
pub const SPOT_PATH: &str = "spot/instance-action";
pub const REBALANCE_PATH: &str = "events/recommendations/rebalance";
pub const LIFECYCLE_PATH: &str = "autoscaling/target-lifecycle-state";

/// Ordered by strength: a marker is only ever replaced by a notice at least as strong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeKind {
    /// A recommendation: the instance is at elevated risk of interruption.
    RebalanceRecommendation,
    /// The Auto Scaling group is terminating the instance (lifecycle hooks may hold it a while).
    LifecycleTerminate,
    /// The two-minute warning: the instance will be stopped or terminated at `action_time`.
    SpotInterruption,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::RebalanceRecommendation => "rebalance-recommendation",
            NoticeKind::LifecycleTerminate => "lifecycle-terminate",
            NoticeKind::SpotInterruption => "spot-interruption",
        }
    }
}

/// The body of `<shared_dir>/interruption_<ip>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptionMarker {
    /// Stable for one notice (`imds:<kind>:<time in the notice>`): a notice seen again, by a later
    /// poll or a restarted agent, has the same id and is not written again.
    pub id: String,
    pub kind: NoticeKind,
    pub instance_id: String,
    pub ip: IpAddr,
    /// The metadata's raw body, for people.
    pub detail: String,
    /// When the instance will be acted on (RFC 3339), when the notice says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_time: Option<String>,
    /// When the agent saw the notice (RFC 3339).
    pub noticed_at: String,
}

/// A notice as read from IMDS, before it is stamped with who and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub id: String,
    pub detail: String,
    pub action_time: Option<String>,
}

pub fn marker_path(shared_dir: &Path, ip: IpAddr) -> PathBuf {
    shared_dir.join(format!("{INTERRUPTION_PREFIX}{ip}"))
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
    humantime::parse_rfc3339_weak(text).ok()?;
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

    fn marker(kind: NoticeKind, id: &str) -> InterruptionMarker {
        InterruptionMarker {
            id: id.into(),
            kind,
            instance_id: "i-1".into(),
            ip: "10.0.0.1".parse().unwrap(),
            detail: String::new(),
            action_time: None,
            noticed_at: "2026-11-23T10:00:00Z".into(),
        }
    }

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

    #[test]
    fn marker_json_shape() {
        let m = marker(NoticeKind::SpotInterruption, "imds:x");
        let v: serde_json::Value = serde_json::to_value(&m).unwrap();
        assert_eq!(v["kind"], "spot-interruption");
        assert_eq!(v["ip"], "10.0.0.1");
        assert!(v.get("action_time").is_none());
        let back: InterruptionMarker = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }
}
