//! The outcome of a pass while the rules write it, with what each instance shows.

use std::collections::HashSet;
use std::net::IpAddr;

use super::inputs::Inputs;
use crate::model::*;

/// What a pass says about one instance: its status (`None`: leave the tag) and what it waits for.
pub(super) type View = (Option<WorkerStatus>, Option<String>);

/// The outcome in the making: actions, events and holds, the views `report` turns into rows
/// and tags, and the IPs that joined or left (the next generation).
pub(super) struct Draft {
    pub outcome: Outcome,
    pub views: Vec<Option<View>>,
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
    /// Why some of `removed` left, for the job (see `Notification::notices`).
    pub notices: Vec<JobNotice>,
    /// The refusals this pass saw (keys of `State::refused`): the others are forgotten.
    pub refused_keys: HashSet<RefusalKey>,
    /// A new generation even without a join or a leave (`job.stall.action: restart`).
    pub restart: bool,
}

impl Draft {
    pub fn new(snap: &Snapshot, listed: usize) -> Draft {
        let mut holds = Vec::new();
        let mut note = |source: Source, unread: Option<String>| {
            if let Some(e) = unread {
                holds.push(format!("{source}: {e}"));
            }
        };
        let why = |e: &_| ToString::to_string(e);
        note(Source::Instances, snap.instances.as_ref().err().map(why));
        note(Source::Markers, snap.markers.as_ref().err().map(why));
        note(Source::Acks, snap.acks.as_ref().err().map(why));
        if let Some(g) = &snap.group {
            note(Source::Group, g.as_ref().err().map(why));
        }
        Draft {
            outcome: Outcome {
                holds,
                ..Outcome::default()
            },
            views: vec![None; listed],
            added: Vec::new(),
            removed: Vec::new(),
            notices: Vec::new(),
            refused_keys: HashSet::new(),
            restart: false,
        }
    }

    /// Journals an event; returns it for the fields only some events carry.
    pub fn event(
        &mut self,
        p: &Inputs,
        kind: EventKind,
        who: Who,
        gen: Option<u64>,
        msg: String,
    ) -> &mut Event {
        let events = &mut self.outcome.events;
        events.push(Event {
            instance: who.map(|(id, _)| id.to_string()),
            ip: who.map(|(_, ip)| ip),
            generation: gen,
            ..Event::new(p.now, kind, msg)
        });
        let at = events.len() - 1;
        &mut events[at]
    }

    pub fn view(&mut self, at: usize, status: Option<WorkerStatus>, waiting: Option<String>) {
        self.views[at] = Some((status, waiting));
    }

    /// Only observed instances are shown.
    pub fn view_id(&mut self, p: &Inputs, id: &str, status: WorkerStatus, waiting: Option<String>) {
        if let Some(at) = p.at(id) {
            self.view(at, Some(status), waiting);
        }
    }

    pub fn act(&mut self, a: Action) {
        self.outcome.actions.push(a);
    }

    /// Completes a lifecycle action once per pass, however many rules ask.
    pub fn complete(&mut self, instance: &str, hook: &str, result: HookResult) {
        let action = Action::CompleteHook(HookAction {
            instance: instance.to_string(),
            hook: hook.to_string(),
            result,
        });
        if !self.outcome.actions.contains(&action) {
            self.act(action);
        }
    }

    pub fn heartbeat(&mut self, instance: &str, hook: &str) {
        self.act(Action::Heartbeat {
            instance: instance.to_string(),
            hook: hook.to_string(),
        });
    }
}

/// The instance (id and IP) an event is about, if any.
pub(super) type Who<'a> = Option<(&'a str, IpAddr)>;
