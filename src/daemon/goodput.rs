//! The goodput ledger's file, `goodput.json` in the state directory: read at start, accounted
//! every pass, written every [`SAVE_EVERY`] and when `dtd` stops.
//!
//! The buckets and the time each instance is accounted up to are written together, so a `dtd`
//! killed between two writes loses nothing: its successor gives the unwritten time again, to
//! the bucket each worker is then in. The sum stays the time paid for.

use crate::config::Strategy;
use crate::fsutil::write_atomic;
use crate::model::{Goodput, Millis, Seen, Snapshot};
use crate::untrusted;

use super::error::WriteError;
use super::Daemon;

/// How often the ledger is written: every pass would rewrite 40 bytes per worker each second.
pub(super) const SAVE_EVERY: Millis = 10_000;

/// Far above a ledger of 100,000 workers.
const LIMIT: u64 = 64 << 20;

/// The saved ledger, or a new one from `now` (none yet, or unreadable: said once).
pub(super) fn load(path: &std::path::Path, now: Millis) -> Goodput {
    let read = untrusted::read(path, LIMIT).map_err(|e| e.to_string());
    let parsed = read.and_then(|bytes| match bytes {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| e.to_string()),
    });
    match parsed {
        Ok(Some(g)) => g,
        Ok(None) => Goodput::new(now),
        Err(e) => {
            tracing::warn!(
                "{}: {e}; the goodput ledger starts again from now",
                path.display()
            );
            Goodput::new(now)
        }
    }
}

impl Daemon {
    /// The time since the last pass, into the ledger; written when due.
    pub(super) async fn account_goodput(&mut self, snap: &Snapshot, now: Millis) {
        if let Ok(list) = snap.instances.as_ref() {
            let (slots, prices) = (&self.cfg.workers.slots, &self.cfg.workers.prices);
            self.goodput.account(&Seen {
                now,
                instances: list,
                markers: snap.markers.as_ref().ok(),
                state: &self.state,
                gpus: &|kind| slots.for_type(kind) as u64,
                price: &|i| {
                    (prices.get(&i.instance_type).copied()).or_else(|| self.observer.spot_price(i))
                },
                restarts: (self.cfg.job.launcher.as_ref())
                    .is_none_or(|l| l.strategy != Strategy::InPlace),
            });
        }
        self.metrics.show_goodput(&self.goodput);
        if let Some(prices) = self.observer.spot_prices() {
            self.metrics.show_spot_prices(prices);
        }
        if now >= self.goodput_saved_at.saturating_add(SAVE_EVERY) {
            self.save_goodput(now).await;
        }
    }

    /// Writes the ledger as the last pass left it (also when `dtd` stops).
    pub(super) async fn save_goodput(&mut self, now: Millis) {
        let path = self.paths.goodput();
        let body = match serde_json::to_vec(&self.goodput) {
            Ok(b) => b,
            Err(e) => return tracing::error!("the goodput ledger: {e}"),
        };
        let save = move || write_atomic(&path, &body).map_err(WriteError::from);
        if let Err(e) = self
            .state_fs
            .try_run("saving the goodput ledger", save)
            .await
        {
            tracing::warn!("{e}");
            return;
        }
        self.goodput_saved_at = now;
    }
}
