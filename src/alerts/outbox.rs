//! One webhook's queue and counts, shared by the pass, which adds events and reads the counts, and
//! the webhook's sender task, which takes the events one at a time and records how each went.
//! The lock is held only to push, pop or copy a few fields, never across an await, so a pass never
//! waits on a webhook.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::model::{Event, Millis};

/// Events waiting for a webhook beyond this are dropped, oldest first: a webhook down for a day
/// must not grow `dtd` without bound, and the newest events say most about the cluster now.
pub const CAPACITY: usize = 1_000;

pub struct Outbox {
    inner: Mutex<Inner>,
    wake: Notify,
    capacity: usize,
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Event>,
    /// The event taken by the sender and not yet delivered or given up.
    in_flight: Option<Event>,
    /// Counts every change of what waits, so the daemon saves the outbox only when it changed.
    changes: u64,
    sent: u64,
    dropped: u64,
    /// The last attempt's error and when the failures began; `None` once an attempt succeeds.
    failing: Option<(String, Millis)>,
}

/// The counts as of one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub pending: u64,
    pub dropped: u64,
    pub failing: Option<(String, Millis)>,
}

impl Outbox {
    pub fn new(capacity: usize) -> Outbox {
        Outbox {
            inner: Mutex::new(Inner::default()),
            wake: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    /// Never waits: a full queue loses its oldest event (counted as dropped).
    pub fn push(&self, event: Event) {
        {
            let mut inner = self.lock();
            if inner.queue.len() >= self.capacity {
                inner.queue.pop_front();
                inner.dropped += 1;
            }
            inner.queue.push_back(event);
            inner.changes += 1;
        }
        self.wake.notify_one();
    }

    /// The oldest event, once there is one; it counts as pending until [`Outbox::delivered`] or
    /// [`Outbox::gave_up`].
    pub async fn next(&self) -> Event {
        loop {
            if let Some(e) = self.take() {
                return e;
            }
            // A push between `take` and here leaves a permit, so this cannot miss it.
            self.wake.notified().await;
        }
    }

    fn take(&self) -> Option<Event> {
        let mut inner = self.lock();
        let e = inner.queue.pop_front();
        inner.in_flight.clone_from(&e);
        e
    }

    /// Returns whether the webhook was failing until now.
    pub fn delivered(&self) -> bool {
        let mut inner = self.lock();
        inner.sent += 1;
        inner.in_flight = None;
        inner.changes += 1;
        inner.failing.take().is_some()
    }

    /// An attempt failed; returns whether it is the first of a run of failures.
    pub fn failed(&self, error: String, now: Millis) -> bool {
        let mut inner = self.lock();
        let since = inner.failing.as_ref().map(|(_, since)| *since);
        inner.failing = Some((error, since.unwrap_or(now)));
        since.is_none()
    }

    /// The event in flight is abandoned (refused, or retried too long).
    pub fn gave_up(&self) {
        let mut inner = self.lock();
        inner.dropped += 1;
        inner.in_flight = None;
        inner.changes += 1;
    }

    pub fn counts(&self) -> Counts {
        let inner = self.lock();
        Counts {
            sent: inner.sent,
            pending: inner.queue.len() as u64 + u64::from(inner.in_flight.is_some()),
            dropped: inner.dropped,
            failing: inner.failing.clone(),
        }
    }

    /// What has not been delivered or given up, in the order it is sent (the event in flight
    /// first), and the count of changes it is as of.
    pub fn waiting(&self) -> (Vec<Event>, u64) {
        let inner = self.lock();
        let events = inner
            .in_flight
            .iter()
            .chain(&inner.queue)
            .cloned()
            .collect();
        (events, inner.changes)
    }

    /// How many changes of what waits there have been (see [`Outbox::waiting`]).
    pub fn changes(&self) -> u64 {
        self.lock().changes
    }

    /// A panic elsewhere while holding the lock leaves plain counts behind, still usable.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;

    fn event(n: u64) -> Event {
        Event::new(n, EventKind::Joined, format!("event {n}"))
    }

    #[tokio::test]
    async fn a_full_queue_drops_its_oldest_event_and_counts_it() {
        let outbox = Outbox::new(2);
        for n in 1..=3 {
            outbox.push(event(n));
        }
        let counts = outbox.counts();
        assert_eq!((counts.pending, counts.dropped), (2, 1));
        assert_eq!(outbox.next().await.time, 2, "event 1 was dropped");
        assert_eq!(
            outbox.counts().pending,
            2,
            "the event in flight is still pending"
        );
        assert!(!outbox.delivered());
        assert_eq!(outbox.next().await.time, 3);
        outbox.gave_up();
        let counts = outbox.counts();
        assert_eq!((counts.sent, counts.pending, counts.dropped), (1, 0, 2));
    }

    #[test]
    fn failures_keep_when_they_began_until_a_delivery() {
        let outbox = Outbox::new(10);
        assert!(outbox.failed("refused".into(), 1_000));
        assert!(!outbox.failed("timed out".into(), 2_000));
        assert_eq!(outbox.counts().failing, Some(("timed out".into(), 1_000)));
        assert!(outbox.delivered(), "it was failing");
        assert_eq!(outbox.counts().failing, None);
    }

    #[tokio::test]
    async fn what_waits_is_the_event_in_flight_then_the_queue_and_each_change_counts() {
        let outbox = Outbox::new(10);
        let (none, at_start) = outbox.waiting();
        assert!(none.is_empty());
        outbox.push(event(1));
        outbox.push(event(2));
        assert_eq!(outbox.next().await.time, 1);
        let (waiting, changes) = outbox.waiting();
        let times: Vec<u64> = waiting.iter().map(|e| e.time).collect();
        assert_eq!(times, [1, 2], "the event in flight is still to be sent");
        assert_eq!(
            changes,
            at_start + 2,
            "taking an event changes nothing that waits"
        );
        outbox.delivered();
        assert_eq!(outbox.waiting().0.len(), 1);
        assert_eq!(outbox.changes(), at_start + 3);
    }
}
