//! What a pass decided (the actions for act, the journal's events, the status rows) and what
//! act did with it.

use std::collections::BTreeMap;
use std::fmt;

use super::{
    Choice, Event, EventKind, LaunchChoice, Millis, Notification, Replaced, Row, State, Step,
    WorkerStatus,
};
use crate::protocol::host_files::Host;

/// What decide returns: the state to remember, the outcome to apply, and when it next needs a
/// pass if nothing new is heard before.
#[derive(Debug, Clone)]
pub struct Plan {
    pub state: State,
    pub outcome: Outcome,
    /// The earliest deadline the state holds (an ack timeout, a cool-down, a window opening...).
    pub next_pass_at: Option<Millis>,
}

/// Everything a pass wants done, plus what it says about it.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Host-file lines: base hosts first in config order, then workers in join order.
    pub hosts: Vec<Host>,
    /// The membership change the job has not been told about yet.
    pub notify: Option<Notification>,
    /// Calls to AWS, in the order decided.
    pub actions: Vec<Action>,
    pub events: Vec<Event>,
    /// One row per worker for the status report, cheap to produce; `decide::worker_views`
    /// turns them into [`super::WorkerView`]s.
    pub rows: Vec<Row>,
    /// Why this pass held its ground (a source failed), empty when it did not.
    pub holds: Vec<String>,
    /// Each `workers.capacity` choice in order, and why it is skipped now.
    pub capacity: Vec<super::CapacityStatus>,
    /// What a worker wrote that this pass did not believe, one line each for `dtctl status`
    /// (each is journaled once, when first refused).
    pub refused: Vec<String>,
    /// Notices this pass could not heed (a drain on a partial view): keep them for the next.
    pub deferred_notices: Vec<String>,
    /// Notices this pass heeded, each once (for the metrics).
    pub heeded_notices: Vec<super::Notice>,
    /// A stall journaled or cleared this pass: the stall command is run for it.
    pub stall: Option<StallChange>,
}

/// A change of the job's stall, for its command (`DT_EVENT`, `DT_STEP`, `DT_STALLED_SINCE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallChange {
    /// `true`: `stalled`; `false`: `stall_cleared`.
    pub stalled: bool,
    /// The step that stopped advancing, or the step it advanced to.
    pub step: u64,
    /// When dtd first read the step that stopped advancing.
    pub since: Millis,
}

impl StallChange {
    /// The journal's kind, which `DT_EVENT` names.
    pub fn kind(&self) -> EventKind {
        match self.stalled {
            true => EventKind::Stalled,
            false => EventKind::StallCleared,
        }
    }
}

/// One call to AWS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// CreateTags: the status tag on instances whose tag differs.
    Tag {
        status: WorkerStatus,
        instances: Vec<String>,
    },
    /// SetInstanceProtection: group workers in the job, protected from scale-in.
    Protect { instances: Vec<String> },
    /// TerminateInstances (a launch-template worker the job let go).
    Terminate { instance: String },
    /// TerminateInstanceInAutoScalingGroup; `decrement` lowers the desired capacity with it.
    GroupTerminate { instance: String, decrement: bool },
    /// CompleteLifecycleAction.
    CompleteHook(HookAction),
    /// RecordLifecycleActionHeartbeat.
    Heartbeat { instance: String, hook: String },
    /// SetInstanceHealth Unhealthy: the group replaces the instance.
    SetUnhealthy { instance: String },
    /// DetachInstances of a group worker warned of its loss, without lowering the desired
    /// capacity: the group launches its replacement at once while it finishes ("Detach or attach
    /// instances from your Auto Scaling group", Amazon EC2 Auto Scaling User Guide). Reported by
    /// `token` as a launch is.
    Detach {
        instance: String,
        because: Replaced,
        token: String,
    },
    /// RunInstances of one worker from the launch template, replacing `replaces`; the token
    /// (ClientToken) makes a resent launch the same launch. `choices`: the overrides to try in
    /// order until one has capacity (empty: the template as it is).
    Launch {
        replaces: String,
        because: Replaced,
        token: String,
        choices: Vec<LaunchChoice>,
    },
}

/// A lifecycle action to complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAction {
    pub instance: String,
    pub hook: String,
    pub result: HookResult,
}

/// How a lifecycle action is completed ("CompleteLifecycleAction", Amazon EC2 Auto Scaling API
/// Reference: `LifecycleActionResult` is `CONTINUE` or `ABANDON`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookResult {
    Continue,
    Abandon,
}

impl HookResult {
    pub fn as_str(self) -> &'static str {
        match self {
            HookResult::Continue => "CONTINUE",
            HookResult::Abandon => "ABANDON",
        }
    }
}

impl fmt::Display for HookResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for HookResult {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The actions of each kind, as lists: how tests and the status read an outcome.
impl Outcome {
    pub fn terminate(&self) -> Vec<String> {
        self.each(|a| match a {
            Action::Terminate { instance } => Some(instance.clone()),
            _ => None,
        })
    }

    /// (instance, decrement the desired capacity).
    pub fn group_terminate(&self) -> Vec<(String, bool)> {
        self.each(|a| match a {
            Action::GroupTerminate {
                instance,
                decrement,
            } => Some((instance.clone(), *decrement)),
            _ => None,
        })
    }

    pub fn complete_hooks(&self) -> Vec<HookAction> {
        self.each(|a| match a {
            Action::CompleteHook(h) => Some(h.clone()),
            _ => None,
        })
    }

    /// (instance, hook).
    pub fn heartbeats(&self) -> Vec<(String, String)> {
        self.each(|a| match a {
            Action::Heartbeat { instance, hook } => Some((instance.clone(), hook.clone())),
            _ => None,
        })
    }

    pub fn set_unhealthy(&self) -> Vec<String> {
        self.each(|a| match a {
            Action::SetUnhealthy { instance } => Some(instance.clone()),
            _ => None,
        })
    }

    /// (replaced instance and why, token, choices in order).
    pub fn launches(&self) -> Vec<((String, Replaced), String, Vec<LaunchChoice>)> {
        self.each(|a| match a {
            Action::Launch {
                replaces,
                because,
                token,
                choices,
            } => Some(((replaces.clone(), *because), token.clone(), choices.clone())),
            _ => None,
        })
    }

    /// (instance and why, token).
    pub fn detaches(&self) -> Vec<((String, Replaced), String)> {
        self.each(|a| match a {
            Action::Detach {
                instance,
                because,
                token,
            } => Some(((instance.clone(), *because), token.clone())),
            _ => None,
        })
    }

    pub fn protect(&self) -> Vec<String> {
        let lists = self.each(|a| match a {
            Action::Protect { instances } => Some(instances.clone()),
            _ => None,
        });
        lists.concat()
    }

    /// Status tag value to the instances that need it.
    pub fn tags(&self) -> BTreeMap<WorkerStatus, Vec<String>> {
        let lists = self.each(|a| match a {
            Action::Tag { status, instances } => Some((*status, instances.clone())),
            _ => None,
        });
        lists.into_iter().collect()
    }

    fn each<T>(&self, pick: impl Fn(&Action) -> Option<T>) -> Vec<T> {
        self.actions.iter().filter_map(pick).collect()
    }
}

/// How long a refused replacement launch waits before it is sent again (decide sets it, act
/// says it).
pub const LAUNCH_RETRY_MS: Millis = 60_000;

/// Why a replacement launch sent has no instance. Act's own error (`act::capacity::LaunchError`)
/// lives above the model, so it comes as its words, made once where the launch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchFailed {
    #[error("RunInstances launched nothing")]
    NothingLaunched,
    #[error("{0}")]
    Refused(String),
}

/// What acting on an outcome did. Act changes no state: decide settles this report in it
/// (`decide::settle`), owning every transition and retry time.
#[derive(Debug, Default)]
pub struct Applied {
    pub events: Vec<Event>,
    /// Each step's result (`None`: it worked).
    pub results: Vec<(Step, Option<String>)>,
    /// The notification the job got.
    pub delivered: Option<Notification>,
    /// Instances whose ending AWS accepted, with the words for the call that did it.
    pub ended: Vec<(String, &'static str)>,
    /// Each replacement launch sent, by its token: the instance launched, or why not.
    pub launches: Vec<(String, Result<String, LaunchFailed>)>,
    /// Each choice EC2 refused for lack of capacity: the choice, its error code and message.
    pub no_capacity: Vec<(Choice, String, String)>,
}
