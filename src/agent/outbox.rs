//! The agent's current report of each kind, waiting to reach `dtd`: the sender (`channel`) sends
//! what changed since it last sent, and everything again on a new connection (a restarted `dtd`
//! remembers none of it). Each report is signed when it is sent, so a report sent again is a
//! new signature, never an old one put back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::protocol::markers::MarkerKind;

#[derive(Clone, Default)]
pub struct Outbox(Arc<Inner>);

#[derive(Default)]
struct Inner {
    /// Each kind's report (one rendered line) and its version.
    reports: Mutex<Current>,
    changed: Notify,
}

#[derive(Default)]
struct Current {
    by_kind: BTreeMap<MarkerKind, (u64, Vec<u8>)>,
    versions: u64,
}

/// A report to send: its kind, its version, its line.
pub type Waiting = (MarkerKind, u64, Vec<u8>);

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, Current> {
        self.0.reports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `line` is already the report of `kind`.
    pub fn holds(&self, kind: MarkerKind, line: &[u8]) -> bool {
        self.lock()
            .by_kind
            .get(&kind)
            .is_some_and(|(_, l)| l == line)
    }

    /// `line` is now the report of `kind`.
    pub fn put(&self, kind: MarkerKind, line: &[u8]) {
        let mut g = self.lock();
        g.versions += 1;
        let v = g.versions;
        g.by_kind.insert(kind, (v, line.to_vec()));
        drop(g);
        self.0.changed.notify_one();
    }

    /// No report of `kind` any more (not sent again on the next connection).
    pub fn remove(&self, kind: MarkerKind) {
        self.lock().by_kind.remove(&kind);
    }

    /// The reports whose version differs from what `sent` says was sent.
    pub fn waiting(&self, sent: &BTreeMap<MarkerKind, u64>) -> Vec<Waiting> {
        let g = self.lock();
        let changed = g
            .by_kind
            .iter()
            .filter(|(k, (v, _))| sent.get(k) != Some(v));
        changed.map(|(k, (v, l))| (*k, *v, l.clone())).collect()
    }

    /// Waits until a report is put after the last call (a put before it is not lost).
    pub async fn changed(&self) {
        self.0.changed.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_changed_since_it_was_sent_is_waiting() {
        let o = Outbox::default();
        o.put(MarkerKind::Success, b"{\"a\":1}\n");
        o.put(MarkerKind::Health, b"{\"ok\":true}\n");
        let mut sent = BTreeMap::new();
        let all = o.waiting(&sent);
        assert_eq!(all.len(), 2);
        for (k, v, _) in all {
            sent.insert(k, v);
        }
        assert!(o.waiting(&sent).is_empty());
        assert!(o.holds(MarkerKind::Health, b"{\"ok\":true}\n"));
        o.put(MarkerKind::Health, b"{\"ok\":false}\n");
        let again = o.waiting(&sent);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0, MarkerKind::Health);
        o.remove(MarkerKind::Success);
        assert!(o
            .waiting(&BTreeMap::new())
            .iter()
            .all(|(k, _, _)| *k != MarkerKind::Success));
    }
}
