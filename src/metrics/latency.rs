//! Latencies measured between journal events (and a marker's time): from a prepare-data success
//! marker to the host files, and from a removal's acknowledgement to the termination.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::model::{Event, EventKind, Markers, Millis};

/// Acknowledgements waiting for their termination; more than this is a leak, not a fleet.
const MAX_WAITING: usize = 100_000;

#[derive(Default)]
pub struct Latencies {
    acked_at: HashMap<String, Millis>,
    joined: Vec<IpAddr>,
}

impl Latencies {
    /// Takes in recorded events; returns the acknowledgement-to-termination seconds they end.
    pub fn note(&mut self, events: &[Event]) -> Vec<f64> {
        let mut ended = Vec::new();
        for e in events {
            match (&e.kind, e.instance.as_deref()) {
                (EventKind::Joined, _) => self.joined.extend(e.ip),
                (EventKind::Acknowledged, Some(id)) => {
                    if self.acked_at.len() >= MAX_WAITING {
                        self.acked_at.clear();
                    }
                    self.acked_at.insert(id.to_string(), e.time);
                }
                (EventKind::Terminated, Some(id)) => {
                    if let Some(at) = self.acked_at.remove(id) {
                        ended.push(seconds(e.time.saturating_sub(at)));
                    }
                }
                (EventKind::Gone | EventKind::Interrupted, Some(id)) => {
                    self.acked_at.remove(id);
                }
                _ => {}
            }
        }
        ended
    }

    /// The seconds from each joined worker's success marker to `now`, when the host files that
    /// list it have been written (the end of its pass). A marker time in the future (a clock
    /// apart from ours) counts as no wait.
    pub fn joined(&mut self, markers: Option<&Markers>, now: Millis) -> Vec<f64> {
        let ready_at = |ip: &IpAddr| markers.and_then(|m| m.ready_at.get(ip).copied());
        let waits = (self.joined.iter())
            .filter_map(ready_at)
            .map(|at| seconds(now.saturating_sub(at)))
            .collect();
        self.joined.clear();
        waits
    }
}

fn seconds(ms: Millis) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(time: Millis, kind: EventKind, id: &str, ip: &str) -> Event {
        Event {
            instance: Some(id.into()),
            ip: Some(ip.parse().expect("an IP")),
            ..Event::new(time, kind, String::new())
        }
    }

    #[test]
    fn acknowledgement_to_termination_and_marker_to_host_file() {
        let mut l = Latencies::default();
        let ack = event(1_000, EventKind::Acknowledged, "i-1", "10.0.0.1");
        let gone = event(2_000, EventKind::Acknowledged, "i-2", "10.0.0.2");
        assert!(l.note(&[ack, gone]).is_empty());
        let ended = l.note(&[
            event(3_500, EventKind::Terminated, "i-1", "10.0.0.1"),
            event(3_600, EventKind::Gone, "i-2", "10.0.0.2"),
            event(3_700, EventKind::Terminated, "i-2", "10.0.0.2"),
        ]);
        assert_eq!(
            ended,
            [2.5],
            "i-2 stopped on its own: no termination latency"
        );
        l.note(&[
            event(5_000, EventKind::Joined, "i-3", "10.0.0.3"),
            event(5_000, EventKind::Joined, "i-4", "10.0.0.4"),
        ]);
        let mut markers = Markers::default();
        markers
            .ready_at
            .insert("10.0.0.3".parse().expect("an IP"), 4_000);
        markers
            .ready_at
            .insert("10.0.0.4".parse().expect("an IP"), 9_000);
        assert_eq!(l.joined(Some(&markers), 5_250), [1.25, 0.0]);
        assert!(l.joined(Some(&markers), 6_000).is_empty(), "each join once");
    }
}
