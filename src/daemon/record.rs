//! After deciding and acting, what a pass leaves behind: its events logged, offered to the
//! webhooks and appended to the journal; the state they explain; and the status report with
//! the metrics it feeds. Each write of the state directory runs within its deadline.

use std::time::Instant;

use super::error::WriteError;
use super::Daemon;
use crate::act;
use crate::alerts::saved::Saved;
use crate::fsutil;
use crate::metrics::{FleetNow, PassView};
use crate::model::*;
use crate::status::{LighthouseFacts, PassFacts, StatusReport};
use crate::store::{save_json, Paths};

impl Daemon {
    /// Logs events now and queues them for the webhooks that want them (without waiting); they
    /// reach the journal at the next write of the state directory.
    pub(super) fn record(&mut self, events: &[Event]) {
        self.metrics.note_events(events);
        for e in events {
            let instance = e.instance.as_deref().unwrap_or("-");
            match e.kind.is_refusal() {
                true => tracing::warn!(kind = %e.kind, instance, "{}", e.message),
                false => tracing::info!(kind = %e.kind, instance, "{}", e.message),
            }
        }
        self.alerts.offer(events);
        self.unjournaled.extend_from_slice(events);
    }

    /// The alerts still to send (saved first: an event in the journal is in the outbox too),
    /// then the journal.
    pub(super) async fn flush_journal(&mut self) {
        self.save_alerts().await;
        if self.unjournaled.is_empty() {
            return;
        }
        let (path, events) = (self.paths.journal(), self.unjournaled.clone());
        let limits = self.cfg.journal;
        let append = move || act::journal::append(&path, &events, limits).map_err(WriteError::from);
        let r = self
            .state_fs
            .try_run("appending to the journal", append)
            .await;
        if let Ok(rotated) = r {
            self.unjournaled.clear();
            if rotated {
                tracing::info!(keep = limits.keep, "events journal rotated");
            }
        }
        self.ledger
            .note(Step::Journal, r.err().map(|e| e.to_string()));
    }

    /// What waits for the webhooks, when it changed, so that a restarted dtd sends it.
    async fn save_alerts(&mut self) {
        let Some((saved, changes)) = self.alerts.waiting_since(self.alerts_saved) else {
            return;
        };
        let path = self.paths.alerts_outbox();
        let save = move || fsutil::write_atomic(&path, &saved.render()).map_err(WriteError::from);
        let r = self.state_fs.try_run("saving the alert outbox", save).await;
        if r.is_ok() {
            self.alerts_saved = changes;
        }
        self.ledger
            .note(Step::AlertOutbox, r.err().map(|e| e.to_string()));
    }

    /// The journal, then the state it explains.
    pub(super) async fn save_state(&mut self) {
        self.flush_journal().await;
        if self.saved.as_ref() == Some(&self.state) {
            return;
        }
        // The copy written is the one remembered as saved: one clone, not two.
        let (path, state) = (self.paths.state(), self.state.clone());
        let save = move || {
            save_json(&path, &state)
                .map(|_| state)
                .map_err(WriteError::from)
        };
        let r = self.state_fs.try_run("saving the state", save).await;
        let failed = r.as_ref().err().map(ToString::to_string);
        if let Ok(saved) = r {
            self.saved = Some(saved);
        }
        self.ledger.note(Step::StateFile, failed);
    }

    pub(super) async fn write_status(
        &mut self,
        outcome: &Outcome,
        snap: &Snapshot,
        pass: PassStats,
    ) {
        self.flush_journal().await;
        let PassStats {
            calls,
            started,
            now,
        } = pass;
        let took = started.elapsed();
        let slots = &self.cfg.workers.slots;
        let fleet = (snap.instances.as_ref().ok())
            .map(|list| FleetNow::count(list, snap.markers.as_ref().ok(), &self.state, slots));
        self.metrics.count_gpu_time(now, fleet);
        self.account_goodput(snap, now).await;
        let queue_error = self.observer.queue_error().map(|e| e.to_string());
        let facts = PassFacts {
            outcome,
            snap,
            state: &self.state,
            queue_error: queue_error.as_deref(),
            mount_targets: (self.observer.mount_targets_summary())
                .map(|zones| zones.map_err(Unread::from_error)),
            ec2_calls: calls,
            listed_at: self.observer.listed_at(),
            pass_ms: took.as_millis() as u64,
            errors: self.ledger.errors(),
            totals: self.metrics.totals(),
            alerts: self.alerts.status(),
            lighthouse: (self.lighthouse.as_ref()).map(|l| LighthouseFacts {
                address: l.address,
                state: l.describe(),
                refused: l.refused(),
            }),
            now,
        };
        let report = StatusReport::build(&self.cfg, facts);
        let view = PassView {
            report: &report,
            state: &self.state,
            markers: snap.markers.as_ref().ok(),
        };
        self.metrics.after_pass(view, now, took);
        let path = self.paths.status();
        let save = move || save_json(&path, &report).map_err(WriteError::from);
        if let Err(e) = self.state_fs.try_run("writing the status", save).await {
            tracing::warn!("{e}");
        }
    }
}

/// What the status of a pass tells beside its outcome: the EC2 calls its observation took, when
/// it started (for how long it took) and its time.
#[derive(Clone, Copy)]
pub(super) struct PassStats {
    pub calls: u32,
    pub started: Instant,
    pub now: Millis,
}

/// What waited for the webhooks when dtd last stopped; nothing, with a warning, when the file
/// cannot be read (the alerts are lost, not the daemon).
pub(super) fn saved_alerts(paths: &Paths) -> Saved {
    Saved::load(&paths.alerts_outbox(), fsutil::own_uid()).unwrap_or_else(|e| {
        tracing::warn!("{e}; the alerts it held are not sent");
        Saved::default()
    })
}
