//! GPU time, in GPU-seconds: training (in the job) and ready but idle (prepared, not in it).
//!
//! What users pay for is every second an instance runs; what they get is the seconds its GPUs
//! train. The difference while a worker is ready is the cost of waiting to use it.

use std::collections::HashSet;
use std::net::IpAddr;

use crate::config::Slots;
use crate::model::{Instance, Markers, Millis, State};

/// GPU-seconds between the last pass and this one, split by what each worker was doing.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct GpuSeconds {
    pub training: f64,
    pub idle: f64,
}

/// A worker's GPUs train while the job uses it: from the acknowledgement of its join until the
/// acknowledgement of its removal. They are ready but idle while it runs with its success marker
/// and is not training (waiting to join, joined but not yet picked up, or let go and not yet
/// terminated).
pub struct GpuClock {
    last: Option<Millis>,
}

impl GpuClock {
    pub fn new() -> GpuClock {
        GpuClock { last: None }
    }

    /// The GPU-seconds since the previous call; the first call counts nothing (no interval).
    pub fn tick(&mut self, now: Millis, view: &FleetNow) -> GpuSeconds {
        let secs = match self.last.replace(now) {
            Some(last) => now.saturating_sub(last) as f64 / 1000.0,
            None => return GpuSeconds::default(),
        };
        GpuSeconds {
            training: secs * view.training as f64,
            idle: secs * view.idle as f64,
        }
    }
}

impl Default for GpuClock {
    fn default() -> Self {
        GpuClock::new()
    }
}

/// The GPUs in each state at one pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FleetNow {
    pub training: u64,
    pub idle: u64,
}

impl FleetNow {
    pub fn count(
        instances: &[Instance],
        markers: Option<&Markers>,
        state: &State,
        slots: &Slots,
    ) -> FleetNow {
        let training: HashSet<IpAddr> = (state.members.iter())
            .filter(|m| m.acked)
            .map(|m| m.ip)
            .chain(
                (state.removals.iter())
                    .filter(|r| r.awaits_ack())
                    .map(|r| r.ip),
            )
            .collect();
        let ready = |ip: &IpAddr| markers.is_some_and(|m| m.success.contains(ip));
        let mut now = FleetNow::default();
        for i in instances {
            let gpus = slots.for_type(&i.instance_type) as u64;
            if training.contains(&i.ip) {
                now.training += gpus;
            } else if ready(&i.ip) {
                now.idle += gpus;
            }
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cause, Member, Removal, Stage};

    fn instance(n: u8, kind: &str) -> Instance {
        Instance {
            id: format!("i-{n:017x}"),
            ip: format!("10.0.0.{n}").parse().expect("an IP"),
            instance_type: kind.into(),
            az: "us-east-1a".into(),
            market: "spot".into(),
            launched_at: 0,
            tags: Default::default(),
            capacity_reservation: None,
            subnet: None,
        }
    }

    fn member(i: &Instance, acked: bool) -> Member {
        Member {
            id: i.id.clone(),
            ip: i.ip,
            instance_type: i.instance_type.clone(),
            joined_generation: 1,
            joined_at: 0,
            log_mark: 0,
            acked,
        }
    }

    #[test]
    fn gpus_count_by_what_their_worker_does_with_slots_per_type() {
        let slots: Slots = serde_yaml::from_str("{ p4d.24xlarge: 8, default: 1 }").expect("slots");
        let list: Vec<Instance> = vec![
            instance(1, "p4d.24xlarge"), // acknowledged member: training
            instance(2, "p4d.24xlarge"), // joined, not yet acknowledged, ready: idle
            instance(3, "g5.xlarge"),    // ready, not in the job: idle
            instance(4, "g5.xlarge"),    // preparing: neither
            instance(5, "p4d.24xlarge"), // leaving, removal not yet acknowledged: training
        ];
        let markers = Markers {
            success: [1, 2, 3, 5].map(|n| list[n - 1].ip).into(),
            ..Markers::default()
        };
        let leaving = Removal {
            id: list[4].id.clone(),
            ip: list[4].ip,
            generation: 2,
            queued_at: 0,
            deadline: 1,
            log_mark: 0,
            reason: "elastic tag deleted".into(),
            stage: Stage::AwaitingAck {
                cause: Cause::ElasticTag,
                then: None,
                heartbeat_at: None,
            },
        };
        let state = State {
            members: vec![member(&list[0], true), member(&list[1], false)],
            removals: vec![leaving],
            ..State::default()
        };
        let now = FleetNow::count(&list, Some(&markers), &state, &slots);
        assert_eq!(
            now,
            FleetNow {
                training: 16,
                idle: 9
            }
        );
        let mut clock = GpuClock::new();
        assert_eq!(clock.tick(10_000, &now), GpuSeconds::default());
        let s = clock.tick(12_500, &now);
        assert_eq!((s.training, s.idle), (40.0, 22.5));
    }
}
