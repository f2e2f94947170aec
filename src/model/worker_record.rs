//! What dtd remembers about one worker between passes and across restarts: only what EC2's tags
//! and the worker's own files cannot tell it. Per instance id, a [`WorkerRecord`] of what every
//! worker has (`State::workers`) and, for the few that have one, its [`Pending`] passing states
//! (`State::pending`): every pass looks through the passing states, so they are kept apart from
//! the 10,000 records that do not have any. `State::forget_gone` forgets both.
//!
//! A worker's place in the job is not here: the host files' members and the removals are lists
//! of their own, because their order is the host files' order and a removal has its own stages
//! (`model::removal`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Millis, WorkerStatus};
use crate::protocol::launcher::LauncherState;
use crate::protocol::markers::MarkerKind;
use crate::protocol::signed::AgentKey;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// Its status as decide last set it, and since when (`dtctl status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusSince>,
    /// Its launcher's state and generation as last journaled (`job.launcher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<(LauncherState, Option<u64>)>,
    /// Its agent key, as its agent first proved it with the instance's identity document (or,
    /// in a state written before, as its `dt:agent-key` tag first said): a report is believed
    /// only when signed with it, and no later hello changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_key: Option<AgentKey>,
    /// The signing time of the newest report of each kind believed from its agent: a restarted
    /// `dtd` believes nothing older.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub newest: BTreeMap<MarkerKind, u64>,
}

/// A worker's passing states: a held removal, a launch wait, a join batch, a failure journaled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// A requested removal that is held (base host, `min`, removing stopped), as journaled: it is
    /// journaled once, and again only after the worker was asked to stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Held in `Pending:Wait` by the launching hook: since when, and how the wait ended. A
    /// restarted dtd neither resets the prepare timeout nor counts an abandoned worker twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_wait: Option<LaunchWait>,
    /// When the launching hook holding it last got a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<Millis>,
    /// Ready and waiting for `join.batch` to end, since: a restarted dtd neither restarts the
    /// window nor lets the batch join one by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_since: Option<Millis>,
    /// Journaled as waiting in a zone without a mount target.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_mount_target: bool,
    /// Journaled as `prepare_failed`: its failure marker, read again, is not journaled again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prepare_failed: bool,
    /// Journaled `unhealthy`, with the reason; `healthy` is journaled when it recovers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
}

/// A worker's status and when it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusSince {
    pub status: WorkerStatus,
    pub at: Millis,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchWait {
    /// The first pass that saw it in `Pending:Wait`.
    pub since: Millis,
    /// No marker within the prepare timeout: `prepare_never_reported` is journaled.
    #[serde(default)]
    pub timed_out: bool,
    /// ABANDON decided: counted as one prepare-data failure, and resent until the group acts.
    #[serde(default)]
    pub abandoned: bool,
}

/// What pinning an agent key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned<'a> {
    /// The first key seen: it is the worker's from now on.
    First,
    Same,
    /// A proof now says another key than the one pinned.
    Changed(&'a AgentKey),
}

impl WorkerRecord {
    /// Its status from now: true when it changed (and its time began).
    pub fn set_status(&mut self, status: WorkerStatus, now: Millis) -> bool {
        if self.status.is_some_and(|s| s.status == status) {
            return false;
        }
        self.status = Some(StatusSince { status, at: now });
        true
    }

    /// Its launcher was seen in `now`: true when that differs from what was journaled last.
    pub fn launcher_seen(&mut self, now: (LauncherState, Option<u64>)) -> bool {
        self.launcher.replace(now) != Some(now)
    }

    /// A report of `kind` signed at `signed_at` was believed: the newest is remembered.
    pub fn believed(&mut self, kind: MarkerKind, signed_at: u64) {
        let newest = self.newest.entry(kind).or_default();
        *newest = (*newest).max(signed_at);
    }

    /// Pins the first agent key proved for it; later keys are compared with that one.
    pub fn pin_key(&mut self, key: &AgentKey) -> Pinned<'_> {
        if self.agent_key.is_none() {
            self.agent_key = Some(key.clone());
            return Pinned::First;
        }
        match &self.agent_key {
            Some(pinned) if pinned != key => Pinned::Changed(pinned),
            _ => Pinned::Same,
        }
    }
}

impl Pending {
    /// Nothing left pending: the entry can go.
    pub fn is_empty(&self) -> bool {
        *self == Pending::default()
    }

    /// Holds a requested removal; true the first time, when it is journaled.
    pub fn hold(&mut self, why: &str) -> bool {
        let first = self.held.is_none();
        if first {
            self.held = Some(why.to_string());
        }
        first
    }

    /// Asked to stay after all: a later removal is held (and journaled) anew. An unhealthy
    /// worker whose removal is held stays held.
    pub fn stays(&mut self) {
        if self.unhealthy.is_none() {
            self.held = None;
        }
    }

    /// Its launch wait, begun now if it had none.
    pub fn wait_at_launch(&mut self, now: Millis) -> &mut LaunchWait {
        self.launch_wait.get_or_insert(LaunchWait {
            since: now,
            ..LaunchWait::default()
        })
    }

    /// A heartbeat is due (and taken as sent) when `every` has passed since the last one; the
    /// first call only starts the count.
    pub fn heartbeat_due(&mut self, now: Millis, every: Millis) -> bool {
        let since = *self.heartbeat_at.get_or_insert(now);
        let due = now.saturating_sub(since) >= every;
        if due {
            self.heartbeat_at = Some(now);
        }
        due
    }

    /// No longer held by the launching hook.
    pub fn launch_ended(&mut self) {
        self.launch_wait = None;
        self.heartbeat_at = None;
    }

    /// Journals a `prepare_failed` once: true the first time.
    pub fn prepare_failed_once(&mut self) -> bool {
        !std::mem::replace(&mut self.prepare_failed, true)
    }

    /// Journals a missing mount target once: true the first time.
    pub fn no_mount_target_once(&mut self) -> bool {
        !std::mem::replace(&mut self.no_mount_target, true)
    }

    /// Unhealthy for `why`: true the first time, when it is journaled.
    pub fn fell_ill(&mut self, why: &str) -> bool {
        let first = self.unhealthy.is_none();
        if first {
            self.unhealthy = Some(why.to_string());
        }
        first
    }
}

/// The agent keys dtd keeps, by instance id, as observe asks for them: it checks each report
/// against its worker's key, and against the newest report of its kind dtd believed before.
#[derive(Debug, Clone, Copy)]
pub struct Pins<'a>(pub &'a BTreeMap<String, WorkerRecord>);

impl Pins<'_> {
    pub fn get(&self, id: &str) -> Option<&AgentKey> {
        self.0.get(id)?.agent_key.as_ref()
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// The signing time of the newest report of `kind` from `id`'s agent believed so far.
    pub fn floor(&self, id: &str, kind: MarkerKind) -> Option<u64> {
        self.0.get(id)?.newest.get(&kind).copied()
    }

    /// Every key kept, for the agents' port (a hello with another key is refused).
    pub fn keys(&self) -> std::collections::HashMap<String, AgentKey> {
        let keyed = self
            .0
            .iter()
            .filter_map(|(id, w)| Some((id.clone(), w.agent_key.clone()?)));
        keyed.collect()
    }
}
