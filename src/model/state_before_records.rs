//! Reading a state.json: today's, or one a dtd wrote before [`WorkerRecord`], which kept what it
//! remembered of a worker in nine maps of its own. Those are folded into the records; they are
//! never written.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Deserialize;

use super::{LaunchWait, Millis, State, StatusSince, WorkerStatus};
use crate::protocol::launcher::LauncherState;
use crate::protocol::signed::AgentKey;

#[derive(Deserialize)]
pub(super) struct Read {
    #[serde(flatten, with = "State")]
    state: State,
    #[serde(flatten)]
    before: Before,
}

/// The maps, as they were named in state.json.
#[derive(Default, Deserialize)]
struct Before {
    #[serde(default)]
    since: BTreeMap<IpAddr, Since>,
    #[serde(default)]
    held: BTreeMap<String, String>,
    #[serde(default)]
    launch_heartbeats: BTreeMap<String, Millis>,
    #[serde(default)]
    launch_waits: BTreeMap<String, LaunchWait>,
    #[serde(default)]
    ready_since: BTreeMap<String, Millis>,
    #[serde(default)]
    no_mount_target: BTreeSet<String>,
    #[serde(default)]
    prepare_failed: BTreeSet<String>,
    #[serde(default)]
    unhealthy: BTreeMap<String, String>,
    #[serde(default)]
    launchers: BTreeMap<String, (LauncherState, Option<u64>)>,
    #[serde(default)]
    agent_keys: BTreeMap<String, AgentKey>,
}

/// `since` was keyed by IP, with the instance id beside it.
#[derive(Deserialize)]
struct Since {
    id: String,
    status: WorkerStatus,
    at: Millis,
}

impl Read {
    pub(super) fn into_state(self) -> State {
        let Read { mut state, before } = self;
        let b = before;
        for s in b.since.into_values() {
            state.worker_mut(&s.id).status = Some(StatusSince {
                status: s.status,
                at: s.at,
            });
        }
        for (id, why) in b.held {
            state.pending_mut(&id).held = Some(why);
        }
        for (id, at) in b.launch_heartbeats {
            state.pending_mut(&id).heartbeat_at = Some(at);
        }
        for (id, wait) in b.launch_waits {
            state.pending_mut(&id).launch_wait = Some(wait);
        }
        for (id, at) in b.ready_since {
            state.pending_mut(&id).ready_since = Some(at);
        }
        for id in b.no_mount_target {
            state.pending_mut(&id).no_mount_target = true;
        }
        for id in b.prepare_failed {
            state.pending_mut(&id).prepare_failed = true;
        }
        for (id, why) in b.unhealthy {
            state.pending_mut(&id).unhealthy = Some(why);
        }
        for (id, seen) in b.launchers {
            state.worker_mut(&id).launcher = Some(seen);
        }
        for (id, key) in b.agent_keys {
            state.worker_mut(&id).agent_key = Some(key);
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_from_before_the_worker_records_reads_into_them() {
        let key = "A".repeat(43) + "=";
        let old = format!(
            r#"{{"generation": 7, "members": [], "removals": [],
            "since": {{"10.0.0.5": {{"id": "i-5", "status": "ADDED", "at": 100}}}},
            "held": {{"i-1": "a base host"}},
            "launch_heartbeats": {{"i-2": 300}},
            "launch_waits": {{"i-2": {{"since": 200, "timed_out": true}}}},
            "ready_since": {{"i-3": 400}},
            "no_mount_target": ["i-2"],
            "prepare_failed": ["i-4"],
            "unhealthy": {{"i-5": "gpu 3 gone"}},
            "launchers": {{"i-5": ["running", 6]}},
            "agent_keys": {{"i-5": "{key}"}}}}"#
        );
        let st: State = serde_json::from_str(&old).unwrap();
        assert_eq!(st.generation, 7);
        assert_eq!(st.workers.len(), 1);
        assert_eq!(st.pending.len(), 5);
        let w5 = &st.workers["i-5"];
        let added = StatusSince {
            status: WorkerStatus::Added,
            at: 100,
        };
        assert_eq!(w5.status, Some(added));
        assert_eq!(w5.launcher, Some((LauncherState::Running, Some(6))));
        assert_eq!(w5.agent_key.as_ref().map(|k| k.to_string()), Some(key));
        let pending = |id: &str| st.pending(id).unwrap();
        assert_eq!(pending("i-5").unhealthy.as_deref(), Some("gpu 3 gone"));
        assert_eq!(pending("i-1").held.as_deref(), Some("a base host"));
        let w2 = pending("i-2");
        assert_eq!(w2.heartbeat_at, Some(300));
        let wait = w2.launch_wait.as_ref();
        assert!(wait.is_some_and(|w| w.since == 200 && w.timed_out));
        assert!(w2.no_mount_target && !w2.prepare_failed);
        assert_eq!(pending("i-3").ready_since, Some(400));
        assert!(pending("i-4").prepare_failed);
    }

    #[test]
    fn a_state_file_round_trips_with_its_records_and_without_the_old_maps() {
        let mut st = State {
            generation: 3,
            ..State::default()
        };
        st.pending_mut("i-9").hold("min");
        st.worker_mut("i-9").set_status(WorkerStatus::Added, 5);
        let text = serde_json::to_string(&st).unwrap();
        let top: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert!(top["pending"]["i-9"]["held"] == "min", "{text}");
        assert!(
            !top.contains_key("held") && !top.contains_key("since"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<State>(&text).unwrap(), st);
    }
}
