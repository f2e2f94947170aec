//! Polls the instance metadata for interruption notices and writes `interruption_<ip>` once per
//! notice.

use std::collections::HashMap;
use std::time::Duration;

use super::imds::{Imds, ImdsFailure};
use super::notice::{self, Notice};
use super::reports::Reports;
use super::Identity;
use crate::protocol::interruption::InterruptionMarker;
use crate::protocol::markers::MarkerKind;

pub struct Watcher {
    imds: Imds,
    identity: Identity,
    reports: Reports,
    interval: Duration,
    /// What the marker on disk holds (for this instance): a notice already written is not again.
    held: Option<InterruptionMarker>,
    failures: FailureLog,
}

impl Watcher {
    pub fn new(imds: Imds, identity: Identity, reports: Reports, interval: Duration) -> Self {
        let held = load_held(&reports, &identity.instance_id);
        Watcher {
            imds,
            identity,
            reports,
            interval,
            held,
            failures: FailureLog::default(),
        }
    }

    /// Polls until the agent stops (the future is dropped).
    pub async fn run(mut self) {
        loop {
            self.poll().await;
            tokio::time::sleep(self.interval).await;
        }
    }

    async fn poll(&mut self) {
        let mut notices = Vec::new();
        if let Some(body) = self.read(notice::SPOT_PATH).await {
            notices.push(notice::spot(&body));
        }
        if let Some(body) = self.read(notice::REBALANCE_PATH).await {
            notices.push(notice::rebalance(&body));
        }
        if let Some(body) = self.read(notice::SCHEDULED_PATH).await {
            notices.extend(notice::scheduled(&body));
        }
        if let Some(body) = self.read(notice::LIFECYCLE_PATH).await {
            notices.extend(notice::lifecycle(&body, &self.identity.instance_id));
        }
        let Some(strongest) = notices.into_iter().max_by_key(|n| n.kind) else {
            return;
        };
        if notice::replaces(&strongest, self.held.as_ref()) {
            self.write(strongest);
        }
    }

    async fn read(&mut self, path: &'static str) -> Option<String> {
        match self.imds.get(path).await {
            Ok(body) => {
                self.failures.ok(path);
                body
            }
            Err(e) => {
                self.failures.failed(path, &e);
                None
            }
        }
    }

    fn write(&mut self, n: Notice) {
        let marker = InterruptionMarker {
            id: n.id,
            kind: n.kind,
            instance_id: self.identity.instance_id.clone(),
            ip: self.identity.ip,
            detail: n.detail,
            action_time: n.action_time,
            noticed_at: crate::time::rfc3339(crate::clock::now_millis()).to_string(),
        };
        let json = marker.render();
        let path = self.reports.path(MarkerKind::Interruption);
        // A failed write is tried again at the next poll: `held` only changes once it is on disk.
        match self.reports.write(MarkerKind::Interruption, &json) {
            Ok(()) => {
                tracing::warn!(kind = marker.kind.as_str(), id = %marker.id, action_time = marker.action_time.as_deref().unwrap_or("-"),
                    path = %path.display(), "interruption notice: wrote the marker");
                self.held = Some(marker);
            }
            Err(e) => self.failures.failed(
                "marker",
                &ImdsFailure {
                    path: path.display().to_string(),
                    class: format!("write {:?}", e.kind()),
                    message: format!("cannot write the interruption marker: {e}"),
                },
            ),
        }
    }
}

/// The marker this agent wrote for this instance before a restart. Anything else under its name
/// (an earlier owner's of the IP, one another worker put there to pass for a notice already
/// written) is removed, so the next notice is written.
fn load_held(reports: &Reports, instance_id: &str) -> Option<InterruptionMarker> {
    let path = reports.path(MarkerKind::Interruption);
    let body = match reports.read_own(MarkerKind::Interruption) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(why) => {
            tracing::info!("{why}: removed, not taken for this instance's notice");
            reports.remove(MarkerKind::Interruption);
            return None;
        }
    };
    match InterruptionMarker::parse(&body) {
        Ok(m) if m.instance_id == instance_id => {
            tracing::info!(id = %m.id, path = %path.display(), "interruption marker already written for this instance");
            Some(m)
        }
        Ok(m) => {
            tracing::info!(other = %m.instance_id, path = %path.display(), "removing the interruption marker of another instance");
            reports.remove(MarkerKind::Interruption);
            None
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), "interruption marker does not parse ({e}); it will be replaced by the next notice");
            None
        }
    }
}

/// Logs a failure when it starts or changes, and the recovery, rather than at every poll.
#[derive(Default)]
pub struct FailureLog {
    current: HashMap<&'static str, String>,
}

impl FailureLog {
    pub fn failed(&mut self, what: &'static str, e: &ImdsFailure) {
        if self.current.get(what) != Some(&e.class) {
            tracing::warn!(path = %e.path, "{} (retrying; logged again only if it changes)", e.message);
            self.current.insert(what, e.class.clone());
        }
    }

    pub fn ok(&mut self, what: &'static str) {
        if self.current.remove(what).is_some() {
            tracing::info!(what, "IMDS answers again");
        }
    }
}
