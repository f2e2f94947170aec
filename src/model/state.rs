//! What the daemon remembers across restarts: only what AWS and EFS cannot tell it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{Millis, Pending, Removal, WorkerRecord};

/// A worker in the host files (base hosts are not stored: they come from the config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: String,
    pub ip: IpAddr,
    pub instance_type: String,
    pub joined_generation: u64,
    pub joined_at: Millis,
    /// `host_worker_log` position when it joined: an `ADDED` line after it acknowledges the join.
    pub log_mark: u64,
    pub acked: bool,
}

/// A change of membership the job has not been told about yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    pub generation: u64,
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
    /// Why removed workers left when AWS said so, and by when they go: the job's time to
    /// checkpoint (`DT_REASON`/`DT_DEADLINE` for a hook, the `notices` file with a signal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<JobNotice>,
}

/// A notice that took a worker out of the job, as the job is told of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNotice {
    pub ip: IpAddr,
    pub kind: crate::protocol::notices::Reason,
    /// When AWS acts (the Spot action time, the Capacity Block's end, the change's start), if
    /// the notice says.
    pub deadline: Option<Millis>,
}

impl Notification {
    /// The notices as the job reads them (the `notices` file, `DT_NOTICES`).
    pub fn job_notices(&self) -> crate::protocol::notices::Notices {
        use crate::protocol::notices::{Notice, Notices};
        let one = |j: &JobNotice| Notice {
            ip: j.ip,
            kind: j.kind,
            deadline: j.deadline.map(|d| super::rfc3339(d).to_string()),
        };
        Notices {
            generation: self.generation,
            notices: self.notices.iter().map(one).collect(),
        }
    }

    /// The notice whose deadline comes first (one without a deadline counts as last).
    pub fn most_urgent(&self) -> Option<&JobNotice> {
        self.notices
            .iter()
            .min_by_key(|n| n.deadline.unwrap_or(Millis::MAX))
    }
}

/// A notification's added or removed IPs as the job (`DT_ADDED`, `DT_REMOVED`) and the journal
/// read them: `10.0.0.5,10.0.0.6`.
pub fn join_ips(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(|ip| ip.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// What the daemon remembers across restarts: only what AWS and EFS cannot tell it.
///
/// Read through [`State::deserialize`]'s wrapper below, so a state.json written before the
/// worker records still reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct State {
    pub generation: u64,
    pub members: Vec<Member>,
    pub removals: Vec<Removal>,
    #[serde(default)]
    pub pending_notification: Option<Notification>,
    /// Notice ids already heeded, with when: the queue delivers at least once, agents' markers
    /// stay on disk, and a restart must not act on either twice.
    #[serde(default)]
    pub noticed: BTreeMap<String, Millis>,
    /// Workers the job lost to interruptions and kept training without.
    #[serde(default)]
    pub interruptions: u64,
    /// Group workers whose prepare-data failed in a row; replacing stops at the limit.
    #[serde(default)]
    pub prepare_failures: u32,
    /// The last of those failures, for `dtctl status`.
    #[serde(default)]
    pub last_prepare_failure: Option<String>,
    /// With `join.at_checkpoint`, since when ready workers wait for the job's next checkpoint,
    /// the checkpoint step then, and whether it has passed (they join at the next chance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_wait: Option<CheckpointWait>,
    /// The `dtctl resume` request already honoured.
    #[serde(default)]
    pub resumed_at: Option<Millis>,
    /// The newest capacity refusal of `dtctl add` already heeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_refusals_seen: Option<Millis>,
    /// Since when removing and replacing unhealthy workers is stopped (`health.max_unhealthy`).
    #[serde(default)]
    pub health_stopped: Option<Millis>,
    /// Since when too many members are silent at once for any to be taken out for it
    /// (`job.launcher.silent_share`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_held: Option<Millis>,
    /// Launches owed for launch-template workers that are unhealthy or warned of their loss,
    /// resent until RunInstances succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<Replacement>,
    /// The instances those launches made, while listed, each with the one it replaces: the
    /// goodput ledger charges a replacement's preparing to the change its predecessor left with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub launched_for: BTreeMap<String, LaunchedFor>,
    /// Capacity choices EC2 refused, by [`Choice::name`]: skipped until their cool-down ends.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub no_capacity: BTreeMap<String, super::Unavailable>,
    /// What a worker wrote that dtd refused to believe, already journaled (`notice_refused`,
    /// `ack_refused`, ...), each under a key naming the file and the lie; forgotten once the
    /// file no longer says it, so it is journaled again if it comes back.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub refused: BTreeSet<super::RefusalKey>,
    /// When each worker IP's agent last took a worker out with an interruption notice: agent
    /// notices are heeded at most once an hour per IP (see `decide::trust`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_notices: BTreeMap<IpAddr, Millis>,
    /// Spot warnings whose member trains on under `in_place` (`leave_before_loss`), by notice
    /// id: who leaves, and when.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trains_until: BTreeMap<String, TrainsOn>,
    /// Rebalance recommendations whose member trains on until its replacement is in the job
    /// (`in_place`, `workers.replace_interrupted`), by notice id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replaced_first: BTreeMap<String, ReplacedFirst>,
    /// The job's step as last read from its progress file, with `job.stall` configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<JobProgress>,
    /// The generation whose every launcher finished (exit code 0): `job_finished` journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<u64>,
    /// The newest quorum change journaled (in-place strategy), as (its step, when the job saw
    /// it): the progress file repeats the last changes, each is journaled once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_seen: Option<(u64, String)>,
    /// The newest generation every member's launcher reported running (`job.ack.by: launcher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_acked: Option<u64>,
    /// Members slower than `job.stragglers` allows, by instance id: since which of the job's
    /// steps, and whether `straggler` was journaled.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stragglers: BTreeMap<String, Slow>,
    /// What dtd remembers of each worker, by instance id (see [`WorkerRecord`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workers: BTreeMap<String, WorkerRecord>,
    /// The passing states of the few workers that have one, by instance id (see [`Pending`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending: BTreeMap<String, Pending>,
}

impl Serialize for State {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        State::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for State {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<State, D::Error> {
        let read = super::state_before_records::Read::deserialize(d)?;
        Ok(read.into_state())
    }
}

impl State {
    /// Whether a removal for `ip` is under way (an interruption or a drain is one).
    pub fn is_removing(&self, ip: IpAddr) -> bool {
        self.removals.iter().any(|r| r.ip == ip)
    }

    pub fn worker(&self, id: &str) -> Option<&WorkerRecord> {
        self.workers.get(id)
    }

    /// The worker's record, begun empty if it had none.
    pub fn worker_mut(&mut self, id: &str) -> &mut WorkerRecord {
        self.workers.entry(id.to_string()).or_default()
    }

    /// `change` applied to the worker's record, begun empty if it had none. For a rule that
    /// visits every worker each pass: a record it has is found without copying its id.
    pub fn with_worker<T>(&mut self, id: &str, change: impl FnOnce(&mut WorkerRecord) -> T) -> T {
        match self.workers.get_mut(id) {
            Some(w) => change(w),
            None => change(self.worker_mut(id)),
        }
    }

    pub fn pending(&self, id: &str) -> Option<&Pending> {
        self.pending.get(id)
    }

    /// The worker's passing states, begun empty if it had none.
    pub fn pending_mut(&mut self, id: &str) -> &mut Pending {
        self.pending.entry(id.to_string()).or_default()
    }

    /// Forgets every worker `listed` no longer shows, and passing states that have passed. Only
    /// on a complete listing of EC2: an instance a partial one missed may still run. The records
    /// are looked through only when they outnumber the listed workers: there are 10,000 of them.
    pub fn forget_gone(&mut self, listed: impl Fn(&str) -> bool, listed_count: usize, now: Millis) {
        self.pending.retain(|id, p| !p.is_empty() && listed(id));
        let young = |l: &LaunchedFor| now < l.at.saturating_add(LISTED_WITHIN);
        self.launched_for.retain(|id, l| listed(id) || young(l));
        if self.workers.len() > listed_count {
            self.workers.retain(|id, _| listed(id));
        }
    }
}

/// Ready workers waiting for the job's next checkpoint (`join.at_checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointWait {
    pub since: Millis,
    /// `checkpoint_step` when the wait began (`None`: the job had said none).
    pub checkpoint: Option<u64>,
    /// The checkpoint came, or `join.max_wait` ran out: they join once they can.
    pub passed: bool,
}

/// A launch owed for a worker that is unhealthy or about to be lost: from the template, or for a
/// group worker warned of its loss, its group's own launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replacement {
    /// The instance it replaces.
    pub replaces: String,
    /// Its group, for a group worker: the replacement is the group's launch, made at once by
    /// detaching the warned worker without lowering the desired capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Why (a state saved before there was a reason knew only unhealthy workers).
    #[serde(default)]
    pub because: Replaced,
    /// RunInstances' ClientToken: the same launch however often it is sent.
    pub token: String,
    pub queued_at: Millis,
    /// Not sent again before this: a launch AWS refused (no capacity, a limit) is retried once a
    /// minute, not at every pass.
    #[serde(default)]
    pub retry_at: Millis,
    /// Why AWS refused it last, for `dtctl status` until it is launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A Spot-warned member training on through its warning (`decide::trains_on`): its notice is
/// heeded when first seen, and its leave comes from here, whatever becomes of the notice's
/// queue message or marker (deleted, put back) or of dtd (restarted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainsOn {
    /// The warned instance: a second notice of the same loss (the queue's and its agent's)
    /// leaves with the first.
    pub instance: String,
    /// When it leaves the job.
    pub leaves: Millis,
    /// When AWS takes it, as the notice said (an agent's, at most two minutes after it came).
    pub loss: Millis,
    /// Only its agent said so: the leave is an unconfirmed interruption, like one heeded at once.
    #[serde(default)]
    pub from_agent: bool,
}

/// A member AWS recommends rebalancing, training on until its replacement is in the job
/// (`decide::replaced_first`): heeded when first seen, drained from here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacedFirst {
    pub instance: String,
}

/// An instance `dtd` launched to replace another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedFor {
    /// The instance it replaces.
    pub replaces: String,
    /// When RunInstances returned it.
    pub at: Millis,
}

/// A launched instance not yet in EC2's listing is kept this long: the listing a pass reads may
/// predate the launch, and EC2 lists a new instance within a minute (eventual consistency).
const LISTED_WITHIN: Millis = 600_000;

/// Why a worker is replaced: its health, or a warning that its capacity goes away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Replaced {
    #[default]
    Unhealthy,
    /// A Spot interruption warning.
    Interrupted,
    /// A rebalance recommendation (it drains, at once or once its replacement is in the job).
    Rebalance,
    /// Its Capacity Block ends.
    CapacityBlock,
}

impl Replaced {
    /// The replaced worker as the journal and `dtctl status` name it: "unhealthy i-0abc".
    pub fn words(self) -> &'static str {
        match self {
            Replaced::Unhealthy => "unhealthy",
            Replaced::Interrupted => "interrupted",
            Replaced::Rebalance => "rebalance-recommended",
            Replaced::CapacityBlock => "Capacity-Block-ending",
        }
    }
}

/// A member slower than the others (`job.stragglers`), as a pass last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slow {
    /// The step of its first report over the ratio, in this run of slowness.
    pub since_step: u64,
    /// Its compute time and the others' median, in microseconds, at the last report.
    pub micros: u64,
    pub median: u64,
    /// `straggler` was journaled.
    #[serde(default)]
    pub found: bool,
}

/// What stall detection remembers: a restarted dtd goes on timing the same step, and does not
/// journal a stall twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    pub step: u64,
    /// When dtd first read this step (its own clock): the stall is timed from here.
    pub advanced_at: Millis,
    /// `stalled` was journaled for this step, and `stall_cleared` not yet.
    #[serde(default)]
    pub stalled: bool,
    /// Which nodes held the stalled job back and what `job.stall.action` did, for the status.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub held_back: String,
    /// The run of the job's processes that wrote it, when the job says: a new one is a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::protocol::progress::RunLine>,
    /// The generation of the processes that wrote it, when the job says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch the listing does not show yet is kept (the listing may predate it); one long
    /// unlisted is gone, and one listed is kept however old.
    #[test]
    fn a_replacement_is_remembered_until_it_is_gone_from_a_listing_that_postdates_it() {
        let l = |at| LaunchedFor {
            replaces: "i-0old".into(),
            at,
        };
        let mut st = State {
            launched_for: [("i-0new".into(), l(0)), ("i-0listed".into(), l(0))].into(),
            ..State::default()
        };
        let back: State = serde_json::from_str(&serde_json::to_string(&st).expect("JSON"))
            .expect("state.json read back");
        assert_eq!(back.launched_for, st.launched_for, "kept across a restart");
        let listed = |id: &str| id == "i-0listed";
        st.forget_gone(listed, 1, LISTED_WITHIN - 1);
        assert_eq!(st.launched_for.len(), 2);
        st.forget_gone(listed, 1, LISTED_WITHIN);
        assert_eq!(
            st.launched_for.keys().collect::<Vec<_>>(),
            ["i-0listed"],
            "{:?}",
            st.launched_for
        );
    }
}
