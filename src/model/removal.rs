//! A worker on its way out, as one state machine (`decide::removal` moves it forward).
//!
//! state.json keeps the flat shape of earlier releases (`termination`, `cause`, `end`,
//! `heartbeat_at`), so a restarted or upgraded `dtd` reads the removals an older one queued.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::Millis;

/// A worker leaving: out of the host files, not yet gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    pub id: String,
    pub ip: IpAddr,
    /// The first generation that no longer lists it.
    pub generation: u64,
    pub queued_at: Millis,
    /// When the job's acknowledgement stops being awaited.
    pub deadline: Millis,
    /// `host_worker_log` position when it was queued: a `REMOVED` line after it acknowledges.
    pub log_mark: u64,
    /// Why, for people: the journal and `dtctl status` show it.
    pub reason: String,
    #[serde(flatten)]
    pub stage: Stage,
}

/// Where a removal is. Each stage holds only what it needs, so no stage can contradict another
/// field (an interrupted worker awaiting an acknowledgement, a "keep running" sent to AWS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Record", into = "Record")]
pub enum Stage {
    /// Out of the host files; waits for the job's acknowledgement of `generation` or the
    /// deadline, then ends as `then` says (`None`: it stays running, outside the job).
    AwaitingAck {
        cause: Cause,
        then: Option<Ending>,
        /// When the terminating hook last got a heartbeat (only with `then: Hook`).
        heartbeat_at: Option<Millis>,
    },
    /// Let go; the ending is sent every pass until a call is confirmed.
    Ending(Ending),
    /// The ending was confirmed: never sent again; shown until the instance stops running.
    Ended,
    /// AWS takes it back (an interruption): out at once, never terminated by us.
    /// `unconfirmed_until`: only a worker's agent said so (no AWS event), so if EC2 still shows
    /// it running at this time the notice was false and the worker may join again.
    Reclaiming { unconfirmed_until: Option<Millis> },
}

/// Why a worker leaves. Only a deleted elastic tag can be taken back by restoring the tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    #[default]
    ElasticTag,
    Rebalance,
    CapacityBlock,
    /// EC2 scheduled a change (reboot, stop, retirement, maintenance) for it.
    ScheduledChange,
    /// Its group is scaling in, or the group's desired capacity is below its protected workers.
    ScaleIn,
    /// Left its group's service (Standby, Detaching, Warmed): out of the job, kept running.
    OutOfService,
    /// Its prepare-data failed; a group worker is replaced.
    PrepareFailed,
    /// Its health check failed; it is replaced.
    Unhealthy,
    /// Its agent's launcher report went silent: out of the job, kept running (nothing confirms
    /// it is gone), and it joins again once heard.
    Silent,
    /// A process of its launcher stopped while the job stalled (`job.stall.action`): it is
    /// replaced, as an unhealthy worker is.
    Hung,
    /// Its compute time per step held the job back (`job.stragglers`): it is replaced, as an
    /// unhealthy worker is.
    Straggler,
}

/// How a leaving worker's instance ends once the job has let it go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// TerminateInstances (launch-template workers).
    Terminate,
    /// TerminateInstanceInAutoScalingGroup; `decrement` lowers the desired capacity with it
    /// (a voluntary removal) or not (the group replaces it).
    GroupTerminate { decrement: bool },
    /// The group is terminating it and waits on our terminating hook: complete it (CONTINUE).
    Hook { name: String },
    /// SetInstanceHealth Unhealthy: the group terminates and replaces it by its own health
    /// replacement.
    MarkUnhealthy,
}

impl Removal {
    /// Waiting for the job, not yet let go.
    pub fn awaits_ack(&self) -> bool {
        matches!(self.stage, Stage::AwaitingAck { .. })
    }

    pub fn is_interrupted(&self) -> bool {
        matches!(self.stage, Stage::Reclaiming { .. })
    }

    /// Why it left, while that still decides anything (until it is let go).
    pub fn cause(&self) -> Option<Cause> {
        match self.stage {
            Stage::AwaitingAck { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// A stage's on-disk shape: the fields of every stage, as earlier releases wrote them.
#[derive(Serialize, Deserialize)]
struct Record {
    termination: Termination,
    /// `None` is written `interrupted`: the cause earlier releases gave a reclaimed worker.
    #[serde(default = "elastic_tag", with = "interrupted_or")]
    cause: Option<Cause>,
    #[serde(default)]
    end: End,
    #[serde(default)]
    heartbeat_at: Option<Millis>,
    /// An interruption only a worker's agent reported: released when still running past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unconfirmed_until: Option<Millis>,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Termination {
    Waiting,
    Requested,
    Sent,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum End {
    #[default]
    Terminate,
    GroupTerminate {
        decrement: bool,
    },
    Hook {
        name: String,
    },
    MarkUnhealthy,
    Keep,
}

/// Every move of a removal's stage; decide chooses when, these say what each move is.
impl Stage {
    /// Let go: the ending is sent every pass until a call is confirmed.
    pub fn end(&mut self, how: Ending) {
        *self = Stage::Ending(how);
    }

    /// The job's side is done (acknowledged, or its deadline passed): the ending `then` names
    /// begins, and is returned to be sent. `None`: it stays running outside the job, and the
    /// stage stays as it is.
    pub fn job_done(&mut self) -> Option<Ending> {
        let Stage::AwaitingAck {
            then: Some(end), ..
        } = self
        else {
            return None;
        };
        let end = end.clone();
        self.end(end.clone());
        Some(end)
    }

    /// A call ending it was confirmed: an ending in progress is never sent again. Returns
    /// whether it moved (only an ending in progress does).
    pub fn confirm(&mut self) -> bool {
        let ending = matches!(self, Stage::Ending(_));
        if ending {
            *self = Stage::Ended;
        }
        ending
    }

    /// AWS takes it back. Already reclaiming, this is the same interruption from its other
    /// source (an agent and the queue both report), and AWS's own word confirms an agent's.
    /// Returns whether it is news.
    pub fn reclaim(&mut self, unconfirmed_until: Option<Millis>) -> bool {
        if let Stage::Reclaiming {
            unconfirmed_until: until,
        } = self
        {
            if unconfirmed_until.is_none() {
                *until = None;
            }
            return false;
        }
        *self = Stage::Reclaiming { unconfirmed_until };
        true
    }
}

impl From<Record> for Stage {
    fn from(r: Record) -> Stage {
        let ending = match r.end {
            End::Terminate => Some(Ending::Terminate),
            End::GroupTerminate { decrement } => Some(Ending::GroupTerminate { decrement }),
            End::Hook { name } => Some(Ending::Hook { name }),
            End::MarkUnhealthy => Some(Ending::MarkUnhealthy),
            End::Keep => None,
        };
        match (r.cause, r.termination, ending) {
            (None, _, _) => Stage::Reclaiming {
                unconfirmed_until: r.unconfirmed_until,
            },
            (Some(cause), Termination::Waiting, then) => Stage::AwaitingAck {
                cause,
                then,
                heartbeat_at: r.heartbeat_at,
            },
            (_, Termination::Requested, Some(e)) => Stage::Ending(e),
            // Nothing left to send: a kept worker is done once the job let it go.
            (_, Termination::Requested, None) | (_, Termination::Sent, _) => Stage::Ended,
        }
    }
}

impl From<Stage> for Record {
    fn from(stage: Stage) -> Record {
        let end = |e: Option<Ending>| match e {
            Some(Ending::Terminate) => End::Terminate,
            Some(Ending::GroupTerminate { decrement }) => End::GroupTerminate { decrement },
            Some(Ending::Hook { name }) => End::Hook { name },
            Some(Ending::MarkUnhealthy) => End::MarkUnhealthy,
            None => End::Keep,
        };
        // Past the acknowledgement the cause decides nothing, and is not kept.
        let mut unconfirmed = None;
        let (termination, cause, end, heartbeat_at) = match stage {
            Stage::AwaitingAck {
                cause,
                then,
                heartbeat_at,
            } => (Termination::Waiting, Some(cause), end(then), heartbeat_at),
            Stage::Ending(e) => (Termination::Requested, elastic_tag(), end(Some(e)), None),
            Stage::Ended => (Termination::Sent, elastic_tag(), End::Keep, None),
            Stage::Reclaiming { unconfirmed_until } => {
                unconfirmed = unconfirmed_until;
                (Termination::Sent, None, End::Keep, None)
            }
        };
        Record {
            termination,
            cause,
            end,
            heartbeat_at,
            unconfirmed_until: unconfirmed,
        }
    }
}

fn elastic_tag() -> Option<Cause> {
    Some(Cause::ElasticTag)
}

mod interrupted_or {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Cause;

    const INTERRUPTED: &str = "interrupted";

    pub fn serialize<S: Serializer>(cause: &Option<Cause>, s: S) -> Result<S::Ok, S::Error> {
        match cause {
            Some(c) => c.serialize(s),
            None => s.serialize_str(INTERRUPTED),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cause>, D::Error> {
        let text = String::deserialize(d)?;
        if text == INTERRUPTED {
            return Ok(None);
        }
        let value = serde::de::value::StrDeserializer::<D::Error>::new(&text);
        Cause::deserialize(value).map(Some)
    }
}

#[cfg(test)]
mod tests;
