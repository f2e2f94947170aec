//! The body of `interruption_<ip>`: the notice `dtd agent` saw in its instance's metadata, which
//! the master acts on as it would on the same event from EventBridge.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Ordered by strength: a marker is only ever replaced by a notice at least as strong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeKind {
    /// A recommendation: the instance is at elevated risk of interruption.
    RebalanceRecommendation,
    /// EC2 scheduled a reboot, stop, retirement or maintenance starting at `action_time`.
    ScheduledMaintenance,
    /// The Auto Scaling group is terminating the instance (lifecycle hooks may hold it a while).
    LifecycleTerminate,
    /// The two-minute warning: the instance will be stopped or terminated at `action_time`.
    SpotInterruption,
}

impl NoticeKind {
    /// The name in the marker's JSON and in its `id`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::RebalanceRecommendation => "rebalance-recommendation",
            NoticeKind::ScheduledMaintenance => "scheduled-maintenance",
            NoticeKind::LifecycleTerminate => "lifecycle-terminate",
            NoticeKind::SpotInterruption => "spot-interruption",
        }
    }
}

/// The body of `<shared_dir>/interruption_<ip>`: one line of JSON.
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

impl InterruptionMarker {
    pub fn render(&self) -> Vec<u8> {
        // Serializing this plain struct cannot fail.
        let mut json = serde_json::to_vec(self).unwrap_or_default();
        json.push(b'\n');
        json
    }

    pub fn parse(body: &[u8]) -> Result<InterruptionMarker, serde_json::Error> {
        serde_json::from_slice(body)
    }
}

/// A marker of instance `i-1` at 10.0.0.1, for the crate's unit tests.
#[cfg(test)]
pub(crate) fn sample(kind: NoticeKind, id: &str) -> InterruptionMarker {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn marker() -> InterruptionMarker {
        sample(NoticeKind::SpotInterruption, "imds:x")
    }

    #[test]
    fn marker_json_shape() {
        let m = marker();
        let v: serde_json::Value = serde_json::to_value(&m).unwrap();
        assert_eq!(v["kind"], "spot-interruption");
        assert_eq!(v["ip"], "10.0.0.1");
        assert!(v.get("action_time").is_none());
        let back: InterruptionMarker = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn a_marker_round_trips_as_one_line() {
        let mut m = marker();
        m.action_time = Some("2026-11-23T10:02:00Z".into());
        let body = m.render();
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            "{\"id\":\"imds:x\",\"kind\":\"spot-interruption\",\"instance_id\":\"i-1\",\
             \"ip\":\"10.0.0.1\",\"detail\":\"\",\"action_time\":\"2026-11-23T10:02:00Z\",\
             \"noticed_at\":\"2026-11-23T10:00:00Z\"}\n"
        );
        assert_eq!(InterruptionMarker::parse(&body).unwrap(), m);
    }

    #[test]
    fn malformed_markers_are_rejected() {
        let good = String::from_utf8(marker().render()).unwrap();
        for bad in [
            String::new(),
            "{truncated".to_string(),
            good.replace("spot-interruption", "meteor"),
            good.replace("10.0.0.1", "10.0.0.300"),
            good.replace(",\"noticed_at\":\"2026-11-23T10:00:00Z\"", ""),
        ] {
            assert!(InterruptionMarker::parse(bad.as_bytes()).is_err(), "{bad}");
        }
        for kind in [
            NoticeKind::RebalanceRecommendation,
            NoticeKind::ScheduledMaintenance,
            NoticeKind::LifecycleTerminate,
            NoticeKind::SpotInterruption,
        ] {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.as_str());
        }
    }
}
