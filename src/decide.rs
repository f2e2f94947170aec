//! The rules, as one pure function: (rules, snapshot, remembered state, now) -> plan.
//!
//! No I/O, no clock, no randomness. Everything that can terminate or remove an instance is here,
//! so that the safety rules of DESIGN.md can be tested exhaustively (see the property tests).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::config::{Config, Slots};
use crate::hostfile::Host;
use crate::model::*;

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
}

impl Rules {
    pub fn from_config(cfg: &Config, launch_template_id: Option<String>) -> Rules {
        Rules {
            elastic_tag: cfg.elastic_tag().to_string(),
            worker_tags: cfg.workers.tags.clone(),
            launch_template_id,
            auto_scaling_group: cfg.workers.auto_scaling_group.clone(),
            min: cfg.workers.min,
            max: cfg.workers.max,
            base_hosts: cfg.workers.base_hosts.clone(),
            master: cfg.master,
            slots: cfg.workers.slots.clone(),
            ack_timeout_ms: cfg.job.ack.timeout.as_millis() as u64,
        }
    }

    /// Carries the worker tags and comes from this cluster's launch template or group.
    pub fn is_cluster_worker(&self, i: &Instance) -> bool {
        let tagged = self
            .worker_tags
            .iter()
            .all(|(k, v)| i.tags.get(k) == Some(v));
        let from_template = self.launch_template_id.is_some()
            && i.tags.get("aws:ec2launchtemplate:id") == self.launch_template_id.as_ref();
        let from_group = self.auto_scaling_group.is_some()
            && i.tags.get("aws:autoscaling:groupName") == self.auto_scaling_group.as_ref();
        tagged && (from_template || from_group)
    }

    pub fn is_protected(&self, ip: IpAddr) -> bool {
        self.base_hosts.contains(&ip) || self.master == Some(ip)
    }
}

pub fn decide(rules: &Rules, snap: &Snapshot, prev: &State, now: Millis) -> Plan {
    let mut d = Decider::new(rules, snap, prev, now);
    d.drop_gone_members();
    let (joins, leaves) = d.classify();
    d.join(joins);
    d.leave(leaves);
    d.advance_removals();
    d.finish()
}

struct Decider<'a> {
    rules: &'a Rules,
    now: Millis,
    instances: BTreeMap<&'a str, &'a Instance>,
    ec2_ok: bool,
    markers: Option<&'a Markers>,
    acks: Option<&'a Acks>,
    st: State,
    next_gen: u64,
    added: Vec<IpAddr>,
    removed: Vec<IpAddr>,
    terminate: Vec<String>,
    events: Vec<Event>,
    /// Instance id to (desired status, what it waits for); `None` status means "leave the tag".
    views: BTreeMap<String, (Option<WorkerStatus>, Option<String>)>,
    holds: Vec<String>,
}

impl<'a> Decider<'a> {
    fn new(rules: &'a Rules, snap: &'a Snapshot, prev: &State, now: Millis) -> Self {
        let mut holds = Vec::new();
        let mut note = |name: &str, r: Result<(), &String>| {
            if let Err(e) = r {
                holds.push(format!("{name}: {e}"));
            }
        };
        note("EC2 instances", snap.instances.as_ref().map(|_| ()));
        note("prepare-data markers", snap.markers.as_ref().map(|_| ()));
        note("acknowledgements", snap.acks.as_ref().map(|_| ()));
        let instances = snap
            .instances
            .as_ref()
            .map(|v| {
                v.iter()
                    .filter(|i| rules.is_cluster_worker(i))
                    .map(|i| (i.id.as_str(), i))
                    .collect()
            })
            .unwrap_or_default();
        let acked = snap.acks.as_ref().ok().and_then(|a| a.generation);
        Decider {
            rules,
            now,
            instances,
            ec2_ok: snap.instances.is_ok(),
            markers: snap.markers.as_ref().ok(),
            acks: snap.acks.as_ref().ok(),
            // Never reuse a generation the ack file already holds (state file lost, or a
            // `dtctl ack` ahead of the daemon): a removal numbered at or below it would count as
            // acknowledged at once, and the worker be terminated before the job saw it leave.
            next_gen: prev.generation.max(acked.unwrap_or(0)) + 1,
            st: prev.clone(),
            added: Vec::new(),
            removed: Vec::new(),
            terminate: Vec::new(),
            events: Vec::new(),
            views: BTreeMap::new(),
            holds,
        }
    }

    fn can_join(&self) -> bool {
        self.ec2_ok && self.markers.is_some()
    }

    /// Removing or terminating needs every source: a partial view never takes anything away.
    fn can_remove(&self) -> bool {
        self.can_join() && self.acks.is_some()
    }

    fn event(&mut self, kind: &str, inst: Option<(&str, IpAddr)>, gen: Option<u64>, msg: String) {
        self.events.push(Event {
            time: self.now,
            kind: kind.to_string(),
            instance: inst.map(|(id, _)| id.to_string()),
            ip: inst.map(|(_, ip)| ip),
            generation: gen,
            message: msg,
        });
    }

    fn view(&mut self, id: &str, status: Option<WorkerStatus>, waiting: Option<String>) {
        self.views.insert(id.to_string(), (status, waiting));
    }

    fn worker_count(&self) -> usize {
        self.rules.base_hosts.len() + self.st.members.len()
    }

    /// Members whose instance is no longer running leave at once: there is nothing to drain.
    fn drop_gone_members(&mut self) {
        if !self.can_remove() {
            return;
        }
        let (gone, kept): (Vec<Member>, Vec<Member>) = std::mem::take(&mut self.st.members)
            .into_iter()
            .partition(|m| !self.instances.contains_key(m.id.as_str()));
        self.st.members = kept;
        for m in gone {
            self.removed.push(m.ip);
            let msg = format!("{} is no longer running; removed from the host files", m.ip);
            self.event("gone", Some((&m.id, m.ip)), Some(self.next_gen), msg);
        }
    }

    /// Sorts every cluster instance into: ready to join, asked to leave, or just a view.
    fn classify(&mut self) -> (Vec<&'a Instance>, Vec<&'a Instance>) {
        let mut order: Vec<&'a Instance> = self.instances.values().copied().collect();
        order.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
        let (mut joins, mut leaves) = (Vec::new(), Vec::new());
        // Where each observed member sits in `members`, which does not change order during
        // classify: a linear search per instance made a pass quadratic in the cluster size.
        let member_at: BTreeMap<&'a str, usize> = (self.st.members.iter().enumerate())
            .filter_map(|(pos, m)| Some((*self.instances.get_key_value(m.id.as_str())?.0, pos)))
            .collect();
        for inst in order {
            let elastic = inst.tags.contains_key(&self.rules.elastic_tag);
            if self.rules.is_protected(inst.ip) {
                self.protected(inst, elastic);
            } else if self.reconsider_removal(inst, elastic) {
                continue;
            } else if let Some(&pos) = member_at.get(inst.id.as_str()) {
                if elastic {
                    self.member_view_at(pos, inst);
                } else {
                    leaves.push(inst);
                }
            } else if !elastic {
                self.retire_unjoined(inst);
            } else {
                self.candidate(inst, &mut joins);
            }
        }
        (joins, leaves)
    }

    fn protected(&mut self, inst: &Instance, elastic: bool) {
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
        self.view(&inst.id, None, None);
    }

    /// An instance already leaving stays on its way out, unless its elastic tag came back
    /// before anything irreversible happened. Returns true when the instance is handled.
    fn reconsider_removal(&mut self, inst: &Instance, elastic: bool) -> bool {
        let Some(pos) = self.st.removals.iter().position(|r| r.id == inst.id) else {
            return false;
        };
        let cancellable = self.st.removals[pos].termination == Termination::Waiting;
        if elastic && cancellable && self.can_join() {
            let r = self.st.removals.remove(pos);
            let msg = format!("elastic tag is back on {}: removal cancelled", r.ip);
            self.event("removal_cancelled", Some((&r.id, r.ip)), None, msg);
            return false;
        }
        true
    }

    fn member_view(&mut self, inst: &Instance) {
        if let Some(pos) = self.st.members.iter().position(|m| m.id == inst.id) {
            self.member_view_at(pos, inst);
        }
    }

    fn member_view_at(&mut self, pos: usize, inst: &Instance) {
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
        self.view(&inst.id, Some(status), waiting);
    }

    /// A managed instance that lost its elastic tag before or without joining: nothing to drain.
    fn retire_unjoined(&mut self, inst: &Instance) {
        let Some(tag) = inst.status_tag().and_then(WorkerStatus::from_tag) else {
            self.view(&inst.id, None, Some("no elastic tag: not managed".into()));
            return;
        };
        if !self.can_remove() {
            self.view(
                &inst.id,
                Some(tag),
                Some("a complete view to retire it".into()),
            );
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
        self.push_removal(inst, self.st.generation, termination, "elastic tag deleted");
    }

    fn push_removal(&mut self, inst: &Instance, generation: u64, t: Termination, reason: &str) {
        let log_mark = self.acks.map_or(0, |a| a.log_lines);
        self.st.removals.push(Removal {
            id: inst.id.clone(),
            ip: inst.ip,
            generation,
            queued_at: self.now,
            deadline: self.now + self.rules.ack_timeout_ms,
            log_mark,
            reason: reason.to_string(),
            termination: t,
        });
        let msg = match t {
            Termination::Waiting => format!(
                "{}: {} leaves the job; terminated after the job acknowledges generation {generation}",
                reason, inst.ip
            ),
            _ => format!("{reason}: {} never joined the job; terminating", inst.ip),
        };
        self.event(
            "removal_queued",
            Some((&inst.id, inst.ip)),
            Some(generation),
            msg,
        );
    }

    fn candidate(&mut self, inst: &'a Instance, joins: &mut Vec<&'a Instance>) {
        let markers = self.markers;
        let success = markers.is_some_and(|m| m.success.contains(&inst.ip));
        let failed = markers.and_then(|m| m.failed.get(&inst.ip));
        if success {
            joins.push(inst);
        } else if let Some(why) = failed {
            let why = format!("a person: prepare-data failed ({why})");
            self.view(&inst.id, Some(WorkerStatus::PrepareFailed), Some(why));
        } else {
            let why = format!("prepare-data marker prepare_data_success_{}", inst.ip);
            self.view(&inst.id, Some(WorkerStatus::Preparing), Some(why));
        }
    }

    fn join(&mut self, joins: Vec<&Instance>) {
        for inst in joins {
            let listed = self.st.members.iter().any(|m| m.ip == inst.ip);
            if !self.can_join() || listed {
                let why = if listed {
                    "its IP to leave the host files"
                } else {
                    "a complete view"
                };
                self.view(&inst.id, Some(WorkerStatus::AddQueued), Some(why.into()));
                continue;
            }
            if self.worker_count() >= self.rules.max {
                let why = format!("room under max ({})", self.rules.max);
                self.view(&inst.id, Some(WorkerStatus::AddQueued), Some(why));
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
            self.member_view_at(self.st.members.len() - 1, inst);
        }
    }

    fn leave(&mut self, leaves: Vec<&Instance>) {
        for inst in leaves {
            if !self.can_remove() {
                let why = "a complete view to remove it".to_string();
                self.view(&inst.id, Some(WorkerStatus::Added), Some(why));
                continue;
            }
            if self.worker_count() <= self.rules.min {
                self.hold_at_min(inst);
                continue;
            }
            self.st.held.remove(&inst.id);
            self.st.members.retain(|m| m.id != inst.id);
            self.removed.push(inst.ip);
            self.push_removal(
                inst,
                self.next_gen,
                Termination::Waiting,
                "elastic tag deleted",
            );
        }
    }

    fn hold_at_min(&mut self, inst: &Instance) {
        let why = format!("worker count above min ({})", self.rules.min);
        if !self.st.held.contains_key(&inst.id) {
            let msg = format!(
                "removal of {} held: the job is at min ({})",
                inst.ip, self.rules.min
            );
            self.event("removal_held", Some((&inst.id, inst.ip)), None, msg.clone());
            self.st.held.insert(inst.id.clone(), msg);
        }
        self.member_view(inst);
        if let Some(v) = self.views.get_mut(&inst.id) {
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
        if !self.can_remove() {
            let status = match r.termination {
                Termination::Waiting => WorkerStatus::RemovalQueued,
                _ => WorkerStatus::Removed,
            };
            self.view(&r.id, Some(status), Some("a complete view".into()));
            return true;
        }
        let present = self.instances.contains_key(r.id.as_str());
        if !present {
            if r.termination == Termination::Waiting {
                let msg = format!("{} stopped running before it was terminated", r.ip);
                self.event("gone", Some((&r.id, r.ip)), Some(r.generation), msg);
            }
            return false;
        }
        match r.termination {
            Termination::Waiting => self.wait_or_terminate(r),
            Termination::Requested => {
                // The last request was never confirmed (call failed or daemon died): send it.
                self.terminate.push(r.id.clone());
                self.view(&r.id, Some(WorkerStatus::Removed), None);
            }
            Termination::Sent => {
                let why = Some("the instance to shut down".to_string());
                self.view(&r.id, Some(WorkerStatus::Removed), why);
            }
        }
        true
    }

    fn wait_or_terminate(&mut self, r: &mut Removal) {
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
            (
                "acknowledged",
                format!(
                    "job acknowledged the removal of {} ({how}); terminating",
                    r.ip
                ),
            )
        } else if self.now >= r.deadline {
            (
                "ack_timeout",
                format!(
                    "no acknowledgement for {} before the ack timeout; terminating",
                    r.ip
                ),
            )
        } else {
            let secs = (r.deadline - self.now).div_ceil(1000);
            let why = format!(
                "job to acknowledge generation {} (timeout in {secs}s)",
                r.generation
            );
            self.view(&r.id, Some(WorkerStatus::RemovalQueued), Some(why));
            return;
        };
        self.event(kind, Some((&r.id, r.ip)), Some(r.generation), msg);
        r.termination = Termination::Requested;
        self.terminate.push(r.id.clone());
        self.view(&r.id, Some(WorkerStatus::Removed), None);
    }

    fn finish(mut self) -> Plan {
        if !self.added.is_empty() || !self.removed.is_empty() {
            self.bump_generation();
        }
        let tags = self.tags();
        let workers = self.worker_views();
        self.track_since();
        let hosts = self.hosts();
        Plan {
            notify: self.st.pending_notification.clone(),
            state: self.st,
            hosts,
            tags,
            terminate: self.terminate,
            events: self.events,
            workers,
            holds: self.holds,
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
        let members = self.st.members.iter().map(|m| Host {
            ip: m.ip,
            slots: self.rules.slots.for_type(&m.instance_type),
        });
        base.chain(members).collect()
    }

    fn tags(&self) -> BTreeMap<WorkerStatus, Vec<String>> {
        let mut tags: BTreeMap<WorkerStatus, Vec<String>> = BTreeMap::new();
        for (id, (status, _)) in &self.views {
            let (Some(status), Some(inst)) = (status, self.instances.get(id.as_str())) else {
                continue;
            };
            if inst.status_tag() != Some(status.as_tag()) {
                tags.entry(*status).or_default().push(id.clone());
            }
        }
        tags
    }

    fn worker_views(&self) -> Vec<WorkerView> {
        let mut out: Vec<WorkerView> = Vec::new();
        for (id, (status, waiting)) in &self.views {
            let Some(inst) = self.instances.get(id.as_str()) else {
                continue;
            };
            let shown = match status {
                Some(s) => s.as_tag().to_string(),
                None if self.rules.is_protected(inst.ip) => "BASE".to_string(),
                None => "-".to_string(),
            };
            out.push(WorkerView {
                id: id.clone(),
                ip: inst.ip,
                instance_type: inst.instance_type.clone(),
                az: inst.az.clone(),
                market: inst.market.clone(),
                since: status.and_then(|s| since_of(&self.st, id, s, self.now)),
                status: shown,
                waiting_for: waiting.clone(),
            });
        }
        if !self.ec2_ok {
            out.extend(self.st.members.iter().map(|m| unseen_member(m, &self.st)));
        }
        out.sort_by_key(|v| (v.status != "BASE", v.ip));
        out
    }

    fn track_since(&mut self) {
        for (id, (status, _)) in &self.views {
            if let Some(s) = status {
                let entry = self.st.since.entry(id.clone()).or_insert((*s, self.now));
                if entry.0 != *s {
                    *entry = (*s, self.now);
                }
            }
        }
        if self.ec2_ok {
            let views = &self.views;
            self.st.since.retain(|id, _| views.contains_key(id));
        }
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

fn since_of(st: &State, id: &str, status: WorkerStatus, now: Millis) -> Option<Millis> {
    match st.since.get(id) {
        Some((s, t)) if *s == status => Some(*t),
        _ => Some(now),
    }
}

fn unseen_member(m: &Member, st: &State) -> WorkerView {
    WorkerView {
        id: m.id.clone(),
        ip: m.ip,
        instance_type: m.instance_type.clone(),
        az: "?".into(),
        market: "?".into(),
        status: if m.acked { "ADDED" } else { "ADD_QUEUED" }.into(),
        since: st.since.get(&m.id).map(|(_, t)| *t),
        waiting_for: Some("a complete EC2 view".into()),
    }
}

/// The IPs a plan lists in its host files.
pub fn listed_ips(plan: &Plan) -> BTreeSet<IpAddr> {
    plan.hosts.iter().map(|h| h.ip).collect()
}
