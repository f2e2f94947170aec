//! The worker Auto Scaling group's rules: only `InService` instances train; lifecycle hooks hold
//! new workers until they are ready and leaving ones until the job lets them go; workers in the
//! job are protected from scale-in, so the group shrinks through dtd, drained first.

use super::Decider;
use crate::model::*;

const IN_SERVICE: &str = "InService";

/// Instances the group is terminating without waiting for us are as good as gone.
pub(super) fn drop_terminating(g: &Group, list: &[Instance], facts: &mut [super::Facts]) {
    for (at, inst) in list.iter().enumerate() {
        let state = g
            .instances
            .get(&inst.id)
            .map(|m| m.lifecycle_state.as_str());
        if matches!(
            state,
            Some("Terminating" | "Terminating:Proceed" | "Terminated")
        ) {
            facts[at].cluster = false;
        }
    }
}

impl<'a> Decider<'a> {
    fn lifecycle(&self, at: usize) -> Option<&'a GroupMember> {
        let group: &'a Group = self.group?;
        let list: &'a [Instance] = self.list;
        group.instances.get(&list[at].id)
    }

    pub(super) fn in_group(&self, at: usize) -> bool {
        self.lifecycle(at).is_some()
    }

    /// May train: not in the group (a launch-template worker) or in service in it.
    pub(super) fn serving(&self, at: usize) -> bool {
        self.lifecycle(at)
            .is_none_or(|m| m.lifecycle_state == IN_SERVICE)
    }

    /// How a voluntarily removed worker ends: its group shrinks with it.
    pub(super) fn voluntary_end(&self, at: usize) -> End {
        match self.in_group(at) {
            true => End::GroupTerminate { decrement: true },
            false => End::Terminate,
        }
    }

    /// Why a member leaves, and how it ends once the job has let it go.
    pub(super) fn departure(&self, at: usize) -> Removal {
        let inst = &self.list[at];
        let state = self.lifecycle(at).map(|m| m.lifecycle_state.as_str());
        let hook = self.group.and_then(|g| g.terminating_hook.as_ref());
        let (cause, end, reason) = match (state, hook) {
            (Some("Terminating:Wait"), Some(h)) => (
                Cause::ScaleIn,
                End::Hook {
                    name: h.name.clone(),
                },
                "its Auto Scaling group is terminating it".to_string(),
            ),
            (Some(s), _) if s != IN_SERVICE => (
                Cause::OutOfService,
                End::Keep,
                format!("lifecycle state {s}"),
            ),
            _ => (
                Cause::ElasticTag,
                self.voluntary_end(at),
                "elastic tag deleted".to_string(),
            ),
        };
        let mut r = self.new_removal(&inst.id, inst.ip, cause, &reason);
        r.end = end;
        r
    }

    /// A group instance not in service: never in the host files. A new one held by the
    /// launching hook waits for its prepare-data (see `held_at_launch`).
    pub(super) fn outside_service(&mut self, at: usize, ready: bool, failed: Option<&String>) {
        let state = self
            .lifecycle(at)
            .map_or("", |m| m.lifecycle_state.as_str());
        let hook = self.group.and_then(|g| g.launching_hook.as_ref());
        match (state, hook) {
            ("Pending:Wait", Some(hook)) => self.held_at_launch(at, hook, ready, failed),
            _ => {
                let why = format!("lifecycle state {state}: not in the job");
                let status = failed.map(|_| WorkerStatus::PrepareFailed);
                self.view(at, status.or(Some(WorkerStatus::Preparing)), Some(why));
            }
        }
    }

    /// Let in once its data is ready; abandoned (the group replaces it) when prepare-data failed
    /// or never reported within the prepare timeout; kept alive by heartbeats meanwhile.
    ///
    /// The timeout runs from the first pass that saw the instance in `Pending:Wait`, remembered
    /// in the state, not from its launch time: the hook's own timeout starts when the instance
    /// enters the wait state ("How lifecycle hooks work", Amazon EC2 Auto Scaling User Guide),
    /// which can be long after launch (an instance from a warm pool, or attached to the group).
    fn held_at_launch(&mut self, at: usize, hook: &Hook, ready: bool, failed: Option<&String>) {
        let id = self.list[at].id.clone();
        let now = self.now;
        let wait = (self.st.launch_waits.entry(id.clone()))
            .or_insert_with(|| LaunchWait {
                since: now,
                ..LaunchWait::default()
            })
            .clone();
        let why = match failed {
            Some(f) => format!("prepare-data failed ({f})"),
            None => self.never_reported_why(at),
        };
        if wait.abandoned {
            // Resent until the group moves it on: a completion that failed is retried.
            self.complete(&id, &hook.name, "ABANDON");
            let why = format!("the group to replace it: {why}");
            self.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
        } else if ready && self.can_join() {
            self.complete(&id, &hook.name, "CONTINUE");
            let why = Some("the group to put it in service".to_string());
            self.view(at, Some(WorkerStatus::Preparing), why);
        } else if failed.is_some() {
            self.abandon_or_hold(at, hook, &why);
        } else if now.saturating_sub(wait.since) >= self.rules.prepare_timeout_ms
            && self.can_remove()
        {
            self.never_reported(at, hook, &why, wait.timed_out);
        } else {
            self.launch_heartbeat(&id, hook);
            let left = (wait.since + self.rules.prepare_timeout_ms).saturating_sub(now);
            let marker = format!(
                "prepare-data marker prepare_data_success_{}",
                self.list[at].ip
            );
            let why = format!(
                "{} (held in Pending:Wait by {}; abandoned if none within {})",
                self.missing_mount_target(at).unwrap_or(marker),
                hook.name,
                show_ms(left)
            );
            self.view(at, Some(WorkerStatus::Preparing), Some(why));
        }
    }

    fn never_reported_why(&self, at: usize) -> String {
        let limit = show_ms(self.rules.prepare_timeout_ms);
        format!(
            "prepare-data never reported within {limit} (no marker from {})",
            self.list[at].ip
        )
    }

    /// Journaled once, then treated like a prepare-data failure: the user data died before the
    /// agent could write a marker, and would die the same way on every replacement.
    fn never_reported(&mut self, at: usize, hook: &Hook, why: &str, journaled: bool) {
        let inst = &self.list[at];
        let (id, ip) = (inst.id.clone(), inst.ip);
        if let Some(w) = self.st.launch_waits.get_mut(&id) {
            w.timed_out = true;
        }
        let abandoning = self.replacing();
        if !journaled {
            let then = match abandoning {
                true => "abandoned; the group replaces it",
                false => "held for a person: replacing failed workers has stopped",
            };
            let msg = format!("{ip} held in Pending:Wait by {}: {why}; {then}", hook.name);
            self.event("prepare_never_reported", Some((&id, ip)), None, msg);
        }
        self.abandon_or_hold(at, hook, why);
    }

    /// Abandons a worker that failed, counted once; past `max_prepare_failures` in a row it is
    /// held (heartbeats go on) for a person, like any failed group worker.
    fn abandon_or_hold(&mut self, at: usize, hook: &Hook, why: &str) {
        let id = self.list[at].id.clone();
        if !self.can_remove() {
            self.launch_heartbeat(&id, hook);
            let why = format!("a complete view to replace it: {why}");
            self.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
            return;
        }
        if !self.replacing() {
            self.launch_heartbeat(&id, hook);
            let limit = self.rules.max_prepare_failures;
            let why = format!("a person: {why}; replacing stopped after {limit} failures in a row, `dtctl resume` re-arms it");
            self.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
            return;
        }
        self.count_failure(at, why);
        if let Some(w) = self.st.launch_waits.get_mut(&id) {
            w.abandoned = true;
        }
        self.complete(&id, &hook.name, "ABANDON");
        let why = format!("the group to replace it: {why}");
        self.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
    }

    /// Keeps a long prepare-data from running into the launching hook's timeout (ABANDON).
    fn launch_heartbeat(&mut self, id: &str, hook: &Hook) {
        let since = *self
            .st
            .launch_heartbeats
            .entry(id.to_string())
            .or_insert(self.now);
        if self.now.saturating_sub(since) >= hook.heartbeat_timeout_ms / 2 {
            self.heartbeats.push((id.to_string(), hook.name.clone()));
            self.st.launch_heartbeats.insert(id.to_string(), self.now);
        }
    }

    /// Forgets heartbeat times of instances no longer held by the launching hook.
    pub(super) fn prune_launch_heartbeats(&mut self) {
        let Some(g) = self.group else { return };
        let held = |id: &String| {
            g.instances
                .get(id)
                .is_some_and(|m| m.lifecycle_state == "Pending:Wait")
        };
        self.st.launch_heartbeats.retain(|id, _| held(id));
        self.st.launch_waits.retain(|id, _| held(id));
    }

    fn complete(&mut self, instance: &str, hook: &str, result: &'static str) {
        let action = HookAction {
            instance: instance.to_string(),
            hook: hook.to_string(),
            result,
        };
        if !self.complete_hooks.contains(&action) {
            self.complete_hooks.push(action);
        }
    }

    /// Replacing stops after `max_prepare_failures` in a row, until `dtctl resume`.
    fn replacing(&mut self) -> bool {
        if let Some(at) = self.resume.filter(|t| Some(*t) > self.st.resumed_at) {
            self.st.resumed_at = Some(at);
            if self.st.prepare_failures > 0 {
                let msg = format!(
                    "replacing failed workers re-armed by dtctl resume after {} failures",
                    self.st.prepare_failures
                );
                self.event("resumed", None, None, msg);
            }
            self.st.prepare_failures = 0;
        }
        self.st.prepare_failures < self.rules.max_prepare_failures
    }

    /// `why` is the whole reason, e.g. "prepare-data failed (exit 3)", shown by `dtctl status`
    /// once replacing stops.
    fn count_failure(&mut self, at: usize, why: &str) {
        let ip = self.list[at].ip;
        self.st.prepare_failures += 1;
        self.st.last_prepare_failure = Some(format!("{ip}: {why}"));
    }

    /// A group worker whose prepare-data failed is terminated and the group replaces it,
    /// unless too many failed in a row: then it is left for a person.
    pub(super) fn replace_failed(&mut self, at: usize, why: &str) {
        let limit = self.rules.max_prepare_failures;
        let held = if !self.can_remove() {
            Some(format!(
                "a complete view to replace it: prepare-data failed ({why})"
            ))
        } else if !self.replacing() {
            Some(format!("a person: prepare-data failed ({why}); replacing stopped after {limit} failures in a row, `dtctl resume` re-arms it"))
        } else {
            None
        };
        if let Some(wait) = held {
            self.view(at, Some(WorkerStatus::PrepareFailed), Some(wait));
            return;
        }
        self.count_failure(at, &format!("prepare-data failed ({why})"));
        let inst = &self.list[at];
        let reason = format!("prepare-data failed ({why}); the group replaces it");
        let mut r = self.new_removal(&inst.id, inst.ip, Cause::PrepareFailed, &reason);
        r.termination = Termination::Requested;
        r.end = End::GroupTerminate { decrement: false };
        self.queue_removal(r);
    }

    /// The group's desired capacity is below its workers in service, and the ones left are
    /// protected members: drain the newest, then terminate them without replacement.
    pub(super) fn scale_in(&mut self) {
        let Some(g) = self.group else { return };
        if !self.can_remove() {
            return;
        }
        let leaving: rustc_hash::FxHashSet<&str> =
            self.st.removals.iter().map(|r| r.id.as_str()).collect();
        let protected = (g.instances.iter())
            .filter(|(_, m)| m.lifecycle_state == IN_SERVICE && m.protected)
            .filter(|(id, _)| !leaving.contains(id.as_str()))
            .count();
        let excess = protected.saturating_sub(g.desired);
        let mut newest: Vec<usize> = (self.st.members.iter())
            .filter_map(|m| self.index.get(m.id.as_str()).copied())
            .filter(|&at| {
                g.instances
                    .get(&self.list[at].id)
                    .is_some_and(|m| m.protected)
            })
            .collect();
        newest.sort_by_key(|&at| std::cmp::Reverse(self.list[at].launched_at));
        for at in newest.into_iter().take(excess) {
            self.drain_for_scale_in(at, g.desired);
        }
    }

    fn drain_for_scale_in(&mut self, at: usize, desired: usize) {
        let inst = &self.list[at];
        if self.worker_count() <= self.rules.min {
            let msg = format!("scale-in to {desired} held at min ({})", self.rules.min);
            if self.st.held.insert(inst.id.clone(), msg.clone()).is_none() {
                self.event("removal_held", Some((&inst.id, inst.ip)), None, msg);
            }
            return;
        }
        let reason = format!("the group's desired capacity is {desired}");
        let mut r = self.new_removal(&inst.id, inst.ip, Cause::ScaleIn, &reason);
        r.end = End::GroupTerminate { decrement: false };
        let id = inst.id.clone();
        self.removed.push(inst.ip);
        self.st.members.retain(|m| m.id != id);
        self.queue_removal(r);
    }

    /// Sends what ends a removal whose job side is done.
    pub(super) fn send_end(&mut self, r: &Removal) {
        match &r.end {
            End::Terminate => self.terminate.push(r.id.clone()),
            End::GroupTerminate { decrement } => {
                self.group_terminate.push((r.id.clone(), *decrement))
            }
            End::Hook { name } => self.complete(&r.id, &name.clone(), "CONTINUE"),
            End::Keep => {}
        }
    }

    /// Keeps the terminating hook from timing out while the job finishes with the worker.
    pub(super) fn heartbeat(&mut self, r: &mut Removal) {
        let End::Hook { name } = &r.end else { return };
        let Some(h) = self.group.and_then(|g| g.terminating_hook.as_ref()) else {
            return;
        };
        let last = r.heartbeat_at.unwrap_or(r.queued_at);
        if self.now.saturating_sub(last) >= h.heartbeat_timeout_ms / 2 {
            self.heartbeats.push((r.id.clone(), name.clone()));
            r.heartbeat_at = Some(self.now);
        }
    }

    /// Group workers in the job, not yet protected from scale-in.
    pub(super) fn to_protect(&self) -> Vec<String> {
        let Some(g) = self.group else {
            return Vec::new();
        };
        let mut ids: Vec<String> = (self.st.members.iter())
            .filter(|m| g.instances.get(&m.id).is_some_and(|x| !x.protected))
            .map(|m| m.id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// A duration for people, to the second: `3h 10m 20s`.
fn show_ms(ms: Millis) -> String {
    let secs = std::time::Duration::from_secs(ms.div_ceil(1000));
    humantime::format_duration(secs).to_string()
}
