//! The rules, as one pure function: (rules, snapshot, remembered state, now) -> plan.
//!
//! No I/O, no clock, no randomness. Everything that can terminate or remove an instance is here,
//! so that the safety rules of DESIGN.md can be tested exhaustively (see the property tests).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::net::IpAddr;

mod group;
mod mount_targets;
mod notices;

use crate::config::{Config, Rebalance, Slots};
use crate::hostfile::Host;
use crate::model::*;

/// The tags AWS puts on instances launched from a template or by a group.
pub const TEMPLATE_TAG: &str = "aws:ec2launchtemplate:id";
pub const GROUP_TAG: &str = "aws:autoscaling:groupName";

/// The part of the configuration decide needs, with the launch template resolved to its id.
#[derive(Debug, Clone)]
pub struct Rules {
    pub elastic_tag: String,
    pub worker_tags: BTreeMap<String, String>,
    pub launch_template_id: Option<String>,
    pub auto_scaling_group: Option<String>,
    pub min: usize,
    pub max: usize,
    pub base_hosts: Vec<IpAddr>,
    pub master: Option<IpAddr>,
    pub slots: Slots,
    pub ack_timeout_ms: u64,
    pub rebalance: Rebalance,
    pub max_prepare_failures: u32,
    /// How long a worker held by the launching hook may go without a prepare-data marker.
    pub prepare_timeout_ms: u64,
    /// How long before an EC2 scheduled change starts its worker is drained.
    pub scheduled_change_lead_ms: u64,
}

impl Rules {
    pub fn from_config(cfg: &Config, launch_template_id: Option<String>) -> Rules {
        Rules {
            elastic_tag: cfg.workers.elastic_tag.clone(),
            worker_tags: cfg.workers.tags.clone(),
            launch_template_id,
            auto_scaling_group: cfg.workers.auto_scaling_group.clone(),
            min: cfg.workers.min,
            max: cfg.workers.max,
            base_hosts: cfg.workers.base_hosts.clone(),
            master: cfg.master,
            slots: cfg.workers.slots.clone(),
            ack_timeout_ms: cfg.job.ack.timeout.as_millis() as u64,
            rebalance: cfg.events.rebalance,
            max_prepare_failures: cfg.workers.max_prepare_failures,
            prepare_timeout_ms: cfg.workers.prepare_timeout.as_millis() as u64,
            scheduled_change_lead_ms: cfg.events.scheduled_change_lead.as_millis() as u64,
        }
    }

    /// Carries the worker tags and comes from this cluster's launch template or group.
    pub fn is_cluster_worker(&self, i: &Instance) -> bool {
        self.facts(i).cluster
    }

    /// Everything the rules read from an instance's tags, in one walk over them (a pass reads
    /// them for every instance; separate look-ups cost several times more at 10,000 workers).
    fn facts(&self, i: &Instance) -> Facts {
        let mut f = Facts::default();
        let mut source = false;
        for (k, v) in i.tags.iter() {
            if k == self.elastic_tag {
                f.elastic = true;
            } else if k == STATUS_TAG {
                f.status = WorkerStatus::from_tag(v);
            } else if k == TEMPLATE_TAG {
                source |= self.launch_template_id.as_deref() == Some(v);
            } else if k == GROUP_TAG {
                source |= self.auto_scaling_group.as_deref() == Some(v);
            }
        }
        let tagged = (self.worker_tags.iter()).all(|(k, v)| i.tags.get(k) == Some(v.as_str()));
        f.cluster = source && tagged;
        f
    }

    pub fn is_protected(&self, ip: IpAddr) -> bool {
        self.base_hosts.contains(&ip) || self.master == Some(ip)
    }
}

/// Decides from a borrowed state (tests, tools); the daemon hands its state over with
/// [`decide_from`] and saves the copy.
pub fn decide(rules: &Rules, snap: &Snapshot, prev: &State, now: Millis) -> Plan {
    decide_from(rules, snap, prev.clone(), now)
}

pub fn decide_from(rules: &Rules, snap: &Snapshot, prev: State, now: Millis) -> Plan {
    let mut d = Decider::new(rules, snap, prev, now);
    // Before members are located: a notice can take a member out of the job.
    d.heed_notices(&snap.notices);
    d.locate_members();
    let (joins, leaves) = d.classify();
    d.join(joins);
    d.leave(leaves);
    d.scale_in();
    d.prune_launch_heartbeats();
    d.advance_removals();
    d.finish()
}

/// What the rules read from one instance's tags.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Facts {
    cluster: bool,
    elastic: bool,
    status: Option<WorkerStatus>,
}

/// What a pass says about one instance: its status (`None`: leave the tag) and what it waits for.
type View = (Option<WorkerStatus>, Option<String>);

/// Works on positions in the snapshot's instance list: ids are hashed once per pass, because
/// comparing and hashing them dominated a pass over 10,000 workers.
struct Decider<'a> {
    rules: &'a Rules,
    now: Millis,
    list: &'a [Instance],
    facts: Vec<Facts>,
    /// Cluster workers only: instance id to its position in `list`.
    index: FxHashMap<&'a str, usize>,
    views: Vec<Option<View>>,
    /// Position in `st.members` of each listed instance that is a member (valid in classify).
    member_of: Vec<Option<usize>>,
    ec2_ok: bool,
    /// The worker group, when configured and read; `group_ok` is false when it could not be.
    group: Option<&'a Group>,
    group_ok: bool,
    resume: Option<Millis>,
    markers: Option<&'a Markers>,
    acks: Option<&'a Acks>,
    mount_targets: Option<&'a MountTargets>,
    st: State,
    next_gen: u64,
    added: Vec<IpAddr>,
    removed: Vec<IpAddr>,
    terminate: Vec<String>,
    group_terminate: Vec<(String, bool)>,
    complete_hooks: Vec<HookAction>,
    heartbeats: Vec<(String, String)>,
    events: Vec<Event>,
    holds: Vec<String>,
    deferred: Vec<String>,
}

impl<'a> Decider<'a> {
    fn new(rules: &'a Rules, snap: &'a Snapshot, prev: State, now: Millis) -> Self {
        let mut holds = Vec::new();
        let mut note = |name: &str, r: Result<(), &String>| {
            if let Err(e) = r {
                holds.push(format!("{name}: {e}"));
            }
        };
        note("EC2 instances", snap.instances.as_ref().map(|_| ()));
        note("prepare-data markers", snap.markers.as_ref().map(|_| ()));
        note("acknowledgements", snap.acks.as_ref().map(|_| ()));
        if let Some(g) = &snap.group {
            note("Auto Scaling group", g.as_ref().map(|_| ()));
        }
        let group = snap.group.as_ref().and_then(|g| g.as_ref().ok());
        let list: &[Instance] = snap.instances.as_deref().unwrap_or_default();
        let mut facts: Vec<Facts> = list.iter().map(|i| rules.facts(i)).collect();
        if let Some(g) = group {
            group::drop_terminating(g, list, &mut facts);
        }
        let mut index = FxHashMap::default();
        index.reserve(list.len());
        for (at, i) in list.iter().enumerate() {
            // An instance listed twice (pages that shifted) is decided once.
            if facts[at].cluster && index.insert(i.id.as_str(), at).is_some() {
                facts[at].cluster = false;
            }
        }
        let acked = snap.acks.as_ref().ok().and_then(|a| a.generation);
        Decider {
            rules,
            now,
            list,
            facts,
            index,
            views: vec![None; list.len()],
            member_of: vec![None; list.len()],
            ec2_ok: snap.instances.is_ok(),
            group,
            group_ok: !matches!(snap.group, Some(Err(_))),
            resume: snap.resume_requested,
            markers: snap.markers.as_ref().ok(),
            acks: snap.acks.as_ref().ok(),
            mount_targets: snap.mount_targets.as_ref(),
            // Never reuse a generation the ack file already holds (state file lost, or a
            // `dtctl ack` ahead of the daemon): a removal numbered at or below it would count as
            // acknowledged at once, and the worker be terminated before the job saw it leave.
            next_gen: prev.generation.max(acked.unwrap_or(0)) + 1,
            st: prev,
            added: Vec::new(),
            removed: Vec::new(),
            terminate: Vec::new(),
            group_terminate: Vec::new(),
            complete_hooks: Vec::new(),
            heartbeats: Vec::new(),
            events: Vec::new(),
            holds,
            deferred: Vec::new(),
        }
    }

    fn can_join(&self) -> bool {
        self.ec2_ok && self.markers.is_some() && self.group_ok
    }

    /// Removing or terminating needs every source: a partial view never takes anything away.
    fn can_remove(&self) -> bool {
        self.can_join() && self.acks.is_some()
    }

    fn event(&mut self, kind: &str, inst: Option<(&str, IpAddr)>, gen: Option<u64>, msg: String) {
        self.events.push(Event {
            instance: inst.map(|(id, _)| id.to_string()),
            ip: inst.map(|(_, ip)| ip),
            generation: gen,
            ..Event::new(self.now, kind, msg)
        });
    }

    fn view(&mut self, at: usize, status: Option<WorkerStatus>, waiting: Option<String>) {
        self.views[at] = Some((status, waiting));
    }

    /// Only observed instances are shown.
    fn view_id(&mut self, id: &str, status: Option<WorkerStatus>, waiting: Option<String>) {
        if let Some(&at) = self.index.get(id) {
            self.view(at, status, waiting);
        }
    }

    fn worker_count(&self) -> usize {
        self.rules.base_hosts.len() + self.st.members.len()
    }

    /// Finds each member's instance; members whose instance is no longer running leave at
    /// once, as there is nothing to drain.
    fn locate_members(&mut self) {
        let can_remove = self.can_remove();
        // Room for this pass's joins: growing a vector of 10,000 members copies all of them.
        let mut kept = Vec::with_capacity(self.st.members.len() + self.list.len().min(64));
        for m in std::mem::take(&mut self.st.members) {
            match self.index.get(m.id.as_str()) {
                Some(&at) => {
                    self.member_of[at] = Some(kept.len());
                    kept.push(m);
                }
                None if can_remove => {
                    self.removed.push(m.ip);
                    let msg = format!("{} is no longer running; removed from the host files", m.ip);
                    self.event("gone", Some((&m.id, m.ip)), Some(self.next_gen), msg);
                }
                None => kept.push(m),
            }
        }
        self.st.members = kept;
    }

    /// Sorts every cluster instance into: ready to join, asked to leave, or just a view.
    fn classify(&mut self) -> (Vec<usize>, Vec<usize>) {
        let list = self.list;
        let mut leaving = vec![false; list.len()];
        for r in &self.st.removals {
            if let Some(&at) = self.index.get(r.id.as_str()) {
                leaving[at] = true;
            }
        }
        // Members that stay are the bulk of a pass and their order does not matter; everything
        // else is decided in launch order, so that joins under max and holds at min are fair.
        let mut others = Vec::new();
        for at in 0..list.len() {
            if !self.facts[at].cluster {
                continue;
            }
            let staying = self.facts[at].elastic
                && !leaving[at]
                && !self.rules.is_protected(list[at].ip)
                && self.serving(at);
            match self.member_of[at] {
                Some(pos) if staying => self.stay(pos, at),
                _ => others.push(at),
            }
        }
        others.sort_unstable_by(|&a, &b| {
            (list[a].launched_at, &list[a].id).cmp(&(list[b].launched_at, &list[b].id))
        });
        let (mut joins, mut leaves) = (Vec::new(), Vec::new());
        for at in others {
            let inst = &list[at];
            let elastic = self.facts[at].elastic;
            if self.rules.is_protected(inst.ip) {
                self.protected(at, elastic);
            } else if leaving[at] && self.reconsider_removal(inst, elastic) {
                continue;
            } else if let Some(pos) = self.member_of[at] {
                if elastic && self.serving(at) {
                    self.stay(pos, at);
                } else {
                    leaves.push(at);
                }
            } else if !elastic {
                self.retire_unjoined(at);
            } else {
                self.candidate(at, &mut joins);
            }
        }
        (joins, leaves)
    }

    fn stay(&mut self, pos: usize, at: usize) {
        if !self.st.held.is_empty() {
            // Asked to stay after all: a later removal is journaled again.
            self.st.held.remove(&self.list[at].id);
        }
        self.member_view_at(pos, at);
    }

    fn protected(&mut self, at: usize, elastic: bool) {
        let inst = &self.list[at];
        let what = if self.rules.master == Some(inst.ip) {
            "master"
        } else {
            "base host"
        };
        if !elastic && !self.st.held.contains_key(&inst.id) {
            let msg = format!("{} is a {what}: never removed or terminated", inst.ip);
            self.event(
                "removal_refused",
                Some((&inst.id, inst.ip)),
                None,
                msg.clone(),
            );
            self.st.held.insert(inst.id.clone(), msg);
        }
        self.view(at, None, None);
    }

    /// An instance already leaving stays on its way out, unless its elastic tag came back
    /// before anything irreversible happened. Returns true when the instance is handled.
    fn reconsider_removal(&mut self, inst: &Instance, elastic: bool) -> bool {
        let Some(pos) = self.st.removals.iter().position(|r| r.id == inst.id) else {
            return false;
        };
        let r = &self.st.removals[pos];
        let cancellable = r.termination == Termination::Waiting && r.cause == Cause::ElasticTag;
        if elastic && cancellable && self.can_join() {
            let r = self.st.removals.remove(pos);
            let msg = format!("elastic tag is back on {}: removal cancelled", r.ip);
            self.event("removal_cancelled", Some((&r.id, r.ip)), None, msg);
            return false;
        }
        true
    }

    fn member_view_at(&mut self, pos: usize, at: usize) {
        let acks = self.acks;
        let m = &mut self.st.members[pos];
        if let Some(a) = acks {
            let by_log = a
                .log_added
                .get(&m.ip)
                .is_some_and(|line| *line > m.log_mark);
            m.acked |= by_log || a.generation.is_some_and(|g| g >= m.joined_generation);
        }
        let (status, waiting) = if m.acked {
            (WorkerStatus::Added, None)
        } else {
            let gen = m.joined_generation;
            (
                WorkerStatus::AddQueued,
                Some(format!("job to acknowledge generation {gen}")),
            )
        };
        self.view(at, Some(status), waiting);
    }

    /// A managed instance that lost its elastic tag before or without joining: nothing to drain.
    fn retire_unjoined(&mut self, at: usize) {
        let Some(tag) = self.facts[at].status else {
            self.view(at, None, Some("no elastic tag: not managed".into()));
            return;
        };
        if !self.can_remove() {
            self.view(at, Some(tag), Some("a complete view to retire it".into()));
            return;
        }
        // Only ADDED / REMOVAL_QUEUED can still be training (state lost): those wait for an ack.
        let may_train = matches!(tag, WorkerStatus::Added | WorkerStatus::RemovalQueued);
        let termination = if may_train {
            Termination::Waiting
        } else {
            Termination::Requested
        };
        // advance_removals sends the termination on this same pass: pushing it here too
        // listed the instance twice in plan.terminate.
        // Numbered above anything acknowledged: with the state lost, only an acknowledgement
        // given after this pass (or the timeout) may let a possibly training worker go.
        self.push_removal(at, self.next_gen, termination, "elastic tag deleted");
    }

    fn push_removal(&mut self, at: usize, generation: u64, t: Termination, reason: &str) {
        let inst = &self.list[at];
        let mut r = self.new_removal(&inst.id, inst.ip, Cause::ElasticTag, reason);
        r.generation = generation;
        r.termination = t;
        r.end = self.voluntary_end(at);
        self.queue_removal(r);
    }

    /// A removal waiting for the job's acknowledgement of the next generation.
    fn new_removal(&self, id: &str, ip: IpAddr, cause: Cause, reason: &str) -> Removal {
        Removal {
            id: id.to_string(),
            ip,
            generation: self.next_gen,
            queued_at: self.now,
            deadline: self.now + self.rules.ack_timeout_ms,
            log_mark: self.acks.map_or(0, |a| a.log_lines),
            reason: reason.to_string(),
            termination: Termination::Waiting,
            cause,
            end: End::Terminate,
            heartbeat_at: None,
        }
    }

    fn queue_removal(&mut self, r: Removal) {
        let (ip, generation, reason) = (r.ip, r.generation, &r.reason);
        let (kind, msg) = match (r.cause, r.termination) {
            (Cause::Interrupted, _) => (
                "interrupted",
                format!("{reason}: {ip} left the job at once; the job keeps training without it"),
            ),
            (_, Termination::Waiting) => (
                "removal_queued",
                format!("{reason}: {ip} leaves the job; terminated after the job acknowledges generation {generation}"),
            ),
            _ => (
                "removal_queued",
                format!("{reason}: {ip} never joined the job; terminating"),
            ),
        };
        let id = r.id.clone();
        self.st.removals.push(r);
        self.event(kind, Some((&id, ip)), Some(generation), msg);
    }

    fn candidate(&mut self, at: usize, joins: &mut Vec<usize>) {
        let ip = self.list[at].ip;
        let markers = self.markers;
        let success = markers.is_some_and(|m| m.success.contains(&ip));
        let failed = markers.and_then(|m| m.failed.get(&ip));
        if !self.serving(at) {
            self.outside_service(at, success, failed);
        } else if success {
            joins.push(at);
        } else if let (Some(why), true) = (failed, self.in_group(at)) {
            self.replace_failed(at, why);
        } else if let Some(why) = failed {
            let why = format!("a person: prepare-data failed ({why})");
            self.view(at, Some(WorkerStatus::PrepareFailed), Some(why));
        } else {
            let why = (self.missing_mount_target(at))
                .unwrap_or_else(|| format!("prepare-data marker prepare_data_success_{ip}"));
            self.view(at, Some(WorkerStatus::Preparing), Some(why));
        }
    }

    fn join(&mut self, joins: Vec<usize>) {
        for at in joins {
            let inst = &self.list[at];
            let listed = self.st.members.iter().any(|m| m.ip == inst.ip);
            if !self.can_join() || listed {
                let why = if listed {
                    "its IP to leave the host files"
                } else {
                    "a complete view"
                };
                self.view(at, Some(WorkerStatus::AddQueued), Some(why.into()));
                continue;
            }
            if self.worker_count() >= self.rules.max {
                let why = format!("room under max ({})", self.rules.max);
                self.view(at, Some(WorkerStatus::AddQueued), Some(why));
                continue;
            }
            self.st.members.push(Member {
                id: inst.id.clone(),
                ip: inst.ip,
                instance_type: inst.instance_type.clone(),
                joined_generation: self.next_gen,
                joined_at: self.now,
                log_mark: self.acks.map_or(0, |a| a.log_lines),
                acked: false,
            });
            self.added.push(inst.ip);
            if self.in_group(at) {
                self.st.prepare_failures = 0;
            }
            let inst = &self.list[at];
            let msg = format!(
                "{} is ready (prepare-data marker) and joins the job",
                inst.ip
            );
            self.event(
                "joined",
                Some((&inst.id, inst.ip)),
                Some(self.next_gen),
                msg,
            );
            self.member_view_at(self.st.members.len() - 1, at);
        }
    }

    fn leave(&mut self, leaves: Vec<usize>) {
        let mut gone = rustc_hash::FxHashSet::default();
        for at in leaves {
            if !self.can_remove() {
                let why = "a complete view to remove it".to_string();
                self.view(at, Some(WorkerStatus::Added), Some(why));
                continue;
            }
            let r = self.departure(at);
            let voluntary = r.cause == Cause::ElasticTag;
            if voluntary && self.worker_count() - gone.len() <= self.rules.min {
                self.hold_at_min(at);
                continue;
            }
            let inst = &self.list[at];
            self.st.held.remove(&inst.id);
            gone.insert(inst.id.as_str());
            self.removed.push(inst.ip);
            self.queue_removal(r);
        }
        // One sweep for every leaver: a sweep each made leaving quadratic.
        if !gone.is_empty() {
            self.st.members.retain(|m| !gone.contains(m.id.as_str()));
        }
    }

    fn hold_at_min(&mut self, at: usize) {
        let inst = &self.list[at];
        let why = format!("worker count above min ({})", self.rules.min);
        if !self.st.held.contains_key(&inst.id) {
            let msg = format!(
                "removal of {} held: the job is at min ({})",
                inst.ip, self.rules.min
            );
            self.event("removal_held", Some((&inst.id, inst.ip)), None, msg.clone());
            self.st.held.insert(inst.id.clone(), msg);
        }
        if let Some(pos) = self.st.members.iter().position(|m| m.id == inst.id) {
            self.member_view_at(pos, at);
        }
        if let Some(v) = self.views[at].as_mut() {
            v.1 = Some(why);
        }
    }

    fn advance_removals(&mut self) {
        let removals = std::mem::take(&mut self.st.removals);
        for mut r in removals {
            if self.advance(&mut r) {
                self.st.removals.push(r);
            }
        }
    }

    /// Moves one removal forward; returns false when it is finished and can be forgotten.
    fn advance(&mut self, r: &mut Removal) -> bool {
        if self.rules.is_protected(r.ip) {
            // Made a base host (or the master) since it was queued: never terminated.
            return false;
        }
        if r.cause == Cause::Interrupted {
            return self.await_reclaim(r);
        }
        if !self.can_remove() {
            let status = match r.termination {
                Termination::Waiting => WorkerStatus::RemovalQueued,
                _ => WorkerStatus::Removed,
            };
            self.view_id(&r.id, Some(status), Some("a complete view".into()));
            return true;
        }
        if !self.index.contains_key(r.id.as_str()) {
            if r.termination == Termination::Waiting {
                let msg = format!("{} stopped running before it was terminated", r.ip);
                self.event("gone", Some((&r.id, r.ip)), Some(r.generation), msg);
            }
            return false;
        }
        match r.termination {
            Termination::Waiting => return self.wait_or_terminate(r),
            Termination::Requested => {
                // The last request was never confirmed (call failed or daemon died): send it.
                self.send_end(r);
                self.view_id(&r.id, Some(WorkerStatus::Removed), None);
            }
            Termination::Sent => {
                let why = Some("the instance to shut down".to_string());
                self.view_id(&r.id, Some(WorkerStatus::Removed), why);
            }
        }
        true
    }

    /// Returns false when the removal is finished and can be forgotten.
    fn wait_or_terminate(&mut self, r: &mut Removal) -> bool {
        let acks = self.acks;
        let by_file = acks
            .and_then(|a| a.generation)
            .is_some_and(|g| g >= r.generation);
        let by_log = acks
            .and_then(|a| a.log_removed.get(&r.ip))
            .is_some_and(|line| *line > r.log_mark);
        let (kind, msg) = if by_file || by_log {
            let how = if by_file {
                "ack file"
            } else {
                "host_worker_log"
            };
            let msg = format!(
                "job acknowledged the removal of {} ({how}); terminating",
                r.ip
            );
            ("acknowledged", msg)
        } else if self.now >= r.deadline {
            let msg = format!(
                "no acknowledgement for {} before the ack timeout; terminating",
                r.ip
            );
            ("ack_timeout", msg)
        } else {
            let secs = (r.deadline - self.now).div_ceil(1000);
            let why = format!(
                "job to acknowledge generation {} (timeout in {secs}s)",
                r.generation
            );
            self.view_id(&r.id, Some(WorkerStatus::RemovalQueued), Some(why));
            self.heartbeat(r);
            return true;
        };
        self.event(kind, Some((&r.id, r.ip)), Some(r.generation), msg);
        if r.end == End::Keep {
            // Out of the job and acknowledged; it stays running and may come back.
            return false;
        }
        r.termination = Termination::Requested;
        self.send_end(r);
        self.view_id(&r.id, Some(WorkerStatus::Removed), None);
        true
    }

    fn finish(mut self) -> Plan {
        if !self.added.is_empty() || !self.removed.is_empty() {
            self.bump_generation();
        }
        if self.ec2_ok {
            let index = &self.index;
            self.st.held.retain(|id, _| index.contains_key(id.as_str()));
            (self.st.no_mount_target).retain(|id| index.contains_key(id.as_str()));
        }
        let tags = self.tags();
        let rows = self.rows();
        let hosts = self.hosts();
        let protect = self.to_protect();
        Plan {
            notify: self.st.pending_notification.clone(),
            state: self.st,
            hosts,
            tags,
            terminate: self.terminate,
            group_terminate: self.group_terminate,
            complete_hooks: self.complete_hooks,
            heartbeats: self.heartbeats,
            protect,
            events: self.events,
            rows,
            holds: self.holds,
            deferred_notices: self.deferred,
        }
    }

    /// Folds this pass's changes into any notification the job has not received yet.
    fn bump_generation(&mut self) {
        self.st.generation = self.next_gen;
        let mut n = self.st.pending_notification.take().unwrap_or_default();
        n.generation = self.next_gen;
        for ip in std::mem::take(&mut self.added) {
            toggle(&mut n.removed, &mut n.added, ip);
        }
        for ip in std::mem::take(&mut self.removed) {
            toggle(&mut n.added, &mut n.removed, ip);
        }
        let msg = format!(
            "generation {}: +[{}] -[{}]",
            n.generation,
            join_ips(&n.added),
            join_ips(&n.removed)
        );
        self.event("generation", None, Some(n.generation), msg);
        self.st.pending_notification = Some(n);
    }

    fn hosts(&self) -> Vec<Host> {
        let base = self.rules.base_hosts.iter().map(|ip| Host {
            ip: *ip,
            slots: self.rules.slots.for_type("default"),
        });
        // A member whose IP became a base host (config changed) is listed once, as a base host.
        let members = self
            .st
            .members
            .iter()
            .filter(|m| !self.rules.is_protected(m.ip));
        let members = members.map(|m| Host {
            ip: m.ip,
            slots: self.rules.slots.for_type(&m.instance_type),
        });
        base.chain(members).collect()
    }

    /// Status tags to write: every viewed instance whose tag differs, in list order.
    fn tags(&self) -> BTreeMap<WorkerStatus, Vec<String>> {
        let mut tags: BTreeMap<WorkerStatus, Vec<String>> = BTreeMap::new();
        for ((inst, view), facts) in self.list.iter().zip(&self.views).zip(&self.facts) {
            let Some((Some(status), _)) = view else {
                continue;
            };
            if facts.status != Some(*status) {
                tags.entry(*status).or_default().push(inst.id.clone());
            }
        }
        tags.values_mut().for_each(|ids| ids.sort_unstable());
        tags
    }

    /// The rows of `dtctl status` in IP order, remembering when each status began.
    fn rows(&mut self) -> Vec<Row> {
        if !self.ec2_ok {
            let members = self.st.members.iter().enumerate();
            return members.map(|(i, m)| unseen_member(i, m)).collect();
        }
        let list = self.list;
        let mut rows = Vec::with_capacity(list.len());
        let mut with_status = 0;
        for (at, view) in self.views.iter_mut().enumerate() {
            let Some((status, waiting_for)) = view.take() else {
                continue;
            };
            let inst = &list[at];
            let shown = match status {
                Some(s) => Shown::Status(s),
                None if self.rules.is_protected(inst.ip) => Shown::Base,
                None => Shown::Unmanaged,
            };
            with_status += status.is_some() as usize;
            // The tag holds the previous status: only a change needs remembering.
            if let Some(s) = status.filter(|s| self.facts[at].status != Some(*s)) {
                let since = Since {
                    id: inst.id.clone(),
                    status: s,
                    at: self.now,
                };
                self.st.since.insert(inst.ip, since);
            }
            rows.push(Row {
                source: RowSource::Instance(at),
                shown,
                waiting_for,
            });
        }
        // More remembered than shown: some instances left or lost their status.
        if self.st.since.len() > with_status {
            let shown: rustc_hash::FxHashSet<IpAddr> = (rows.iter())
                .filter(|r| matches!(r.shown, Shown::Status(_)))
                .filter_map(|r| match r.source {
                    RowSource::Instance(at) => Some(list[at].ip),
                    RowSource::Member(_) => None,
                })
                .collect();
            self.st.since.retain(|ip, _| shown.contains(ip));
        }
        rows
    }
}

/// Moves `ip` out of `from` if it is there (a change undone), else records it in `to`.
fn toggle(from: &mut Vec<IpAddr>, to: &mut Vec<IpAddr>, ip: IpAddr) {
    if let Some(pos) = from.iter().position(|x| *x == ip) {
        from.remove(pos);
    } else if !to.contains(&ip) {
        to.push(ip);
    }
}

pub fn join_ips(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(|ip| ip.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn unseen_member(index: usize, m: &Member) -> Row {
    let status = if m.acked {
        WorkerStatus::Added
    } else {
        WorkerStatus::AddQueued
    };
    Row {
        source: RowSource::Member(index),
        shown: Shown::Status(status),
        waiting_for: Some("a complete EC2 view".into()),
    }
}

/// The status report's table: base hosts first, then by IP.
/// `state` is the one the rows were decided with: its members and when each status began.
pub fn worker_views(rows: &[Row], snap: &Snapshot, state: &State) -> Vec<WorkerView> {
    let members = &state.members;
    let instances = snap.instances.as_deref().unwrap_or_default();
    let mut out: Vec<WorkerView> = rows
        .iter()
        .filter_map(|row| {
            let (id, ip, instance_type, az, market) = match row.source {
                RowSource::Instance(i) => {
                    let inst = instances.get(i)?;
                    let (az, market) = (inst.az.as_str(), inst.market.as_str());
                    (&inst.id, inst.ip, &inst.instance_type, az, market)
                }
                RowSource::Member(i) => {
                    let m = members.get(i)?;
                    (&m.id, m.ip, &m.instance_type, "?", "?")
                }
            };
            Some(WorkerView {
                id: id.clone(),
                ip,
                instance_type: instance_type.clone(),
                az: az.to_string(),
                market: market.to_string(),
                status: row.label().to_string(),
                since: state
                    .since
                    .get(&ip)
                    .filter(|s| s.id == *id && Shown::Status(s.status) == row.shown)
                    .map(|s| s.at),
                waiting_for: row.waiting_for.clone(),
            })
        })
        .collect();
    out.sort_by_key(|v| (v.status != "BASE", v.ip));
    out
}
