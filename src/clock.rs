//! The daemon's one clock. `dtd run` is handed one at its start and every stage that reads the
//! time of day reads this one: observe (when a listing began, when report files were statted),
//! the pass's `now` that decide and settle work at and act stamps its events with, the ledger,
//! the status and the alert senders. A test hands in a [`ManualClock`] and moves it, so a
//! timeout or a retry a minute away is a call, not a minute of waiting.
//!
//! Durations that only schedule work (the next listing, a deadline on a file system) use
//! `Instant`, which no one sets: they are never compared with a time from a file or from AWS.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::model::Millis;

pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> Millis;
}

/// The clock every stage shares.
pub type SharedClock = Arc<dyn Clock>;

/// The machine's time of day.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        now_millis()
    }
}

/// A clock that stands still until it is moved.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn starting_at(at: Millis) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicU64::new(at)))
    }

    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// The machine's time of day in milliseconds since the Unix epoch (0 before 1970). For the
/// daemon, through [`SystemClock`]; `dtctl` and the agent read it directly.
pub fn now_millis() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_moved() {
        let clock = ManualClock::starting_at(1_000);
        let shared: SharedClock = clock.clone();
        assert_eq!(shared.now(), 1_000);
        clock.advance(60_000);
        assert_eq!(shared.now(), 61_000);
    }
}
