//! The daemon's one clock. `dtd run` is handed one at its start and every stage that reads the
//! time of day reads this one: observe (when a listing began, when report files were statted),
//! the pass's `now` that decide and settle work at and act stamps its events with, the ledger,
//! the status and the alert senders. A test hands in a [`ManualClock`] and moves it, so a
//! timeout or a retry a minute away is a call, not a minute of waiting.
//!
//! The loop sleeps on it too (until the next pass decide asked for, or `interval`), so a test's
//! clock moved past a deadline wakes the loop as the time of day would.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::model::Millis;

pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> Millis;

    /// Resolves once the clock reads `at` or later.
    fn sleep_until(&self, at: Millis) -> Sleep<'_>;
}

/// A clock's sleep, as the loop's `select!` holds it.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The clock every stage shares.
pub type SharedClock = Arc<dyn Clock>;

/// The machine's time of day.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        now_millis()
    }

    fn sleep_until(&self, at: Millis) -> Sleep<'_> {
        let left = Duration::from_millis(at.saturating_sub(now_millis()));
        Box::pin(tokio::time::sleep(left))
    }
}

/// A clock that stands still until it is moved; what sleeps on it wakes when it is moved past.
#[derive(Debug, Default)]
pub struct ManualClock {
    at: AtomicU64,
    moved: Notify,
}

impl ManualClock {
    pub fn starting_at(at: Millis) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            at: AtomicU64::new(at),
            moved: Notify::new(),
        })
    }

    pub fn advance(&self, ms: Millis) {
        self.at.fetch_add(ms, Ordering::SeqCst);
        self.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.at.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, at: Millis) -> Sleep<'_> {
        Box::pin(async move {
            loop {
                // Made before the time is read, so a move in between still wakes it.
                let moved = self.moved.notified();
                if self.now() >= at {
                    return;
                }
                moved.await;
            }
        })
    }
}

/// A duration on the clock's scale, for deadlines counted from a [`Clock::now`] (saturating: a
/// configured period too long for a `u64` of milliseconds is "never").
pub fn millis(d: Duration) -> Millis {
    u64::try_from(d.as_millis()).unwrap_or(Millis::MAX)
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

    #[test]
    fn a_sleep_on_a_manual_clock_ends_when_the_clock_is_moved_past_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let clock = ManualClock::starting_at(1_000);
        let sleeper = clock.clone();
        rt.block_on(async {
            let woke = tokio::spawn(async move { sleeper.sleep_until(31_000).await });
            tokio::task::yield_now().await;
            clock.advance(20_000);
            tokio::task::yield_now().await;
            assert!(!woke.is_finished(), "woke at 21,000, before 31,000");
            clock.advance(10_000);
            let done = tokio::time::timeout(Duration::from_secs(5), woke).await;
            assert!(done.is_ok(), "still asleep at 31,000");
        });
    }
}
