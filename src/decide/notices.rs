//! Notices from AWS (queue) and from workers' agents: an interruption takes a worker out of the
//! job at once; a rebalance recommendation, a Capacity Block's end or an EC2 scheduled change
//! (reboot, stop, retirement, maintenance) drains it gracefully.

use std::net::IpAddr;

use super::Decider;
use crate::config::Rebalance;
use crate::model::*;

/// How long a heeded notice id is remembered: longer than any redelivery or agent marker lives.
const NOTICE_MEMORY_MS: Millis = 24 * 3_600_000;

/// A worker a notice is about: an instance seen this pass, or one the state remembers.
struct Target {
    id: String,
    ip: IpAddr,
}

impl Decider<'_> {
    pub(super) fn heed_notices(&mut self, notices: &[Notice]) {
        let now = self.now;
        (self.st.noticed).retain(|_, at| now.saturating_sub(*at) < NOTICE_MEMORY_MS);
        for n in notices {
            if self.st.noticed.contains_key(&n.id) {
                continue;
            }
            let drain = matches!(
                n.kind,
                NoticeKind::Rebalance
                    | NoticeKind::CapacityBlockExpiring
                    | NoticeKind::ScheduledChange
            );
            if drain && !self.can_remove() {
                // A drain is voluntary: never on a partial view. The daemon keeps the notice.
                self.deferred.push(n.id.clone());
                continue;
            }
            if let Some(from) = self.drains_from(n).filter(|from| now < *from) {
                // Kept (the queue's message, the agent's marker) until its time comes.
                self.deferred.push(n.id.clone());
                self.holds.push(format!(
                    "{} from the {} for {}: drains from {} (events.scheduled_change_lead before it starts)",
                    describe(n.kind),
                    n.source,
                    target_text(&n.target),
                    rfc3339(from)
                ));
                continue;
            }
            let targets = self.targets(&n.target);
            if targets.is_empty() {
                // Not this cluster's, or already gone: nothing to do, nothing to remember.
                continue;
            }
            self.st.noticed.insert(n.id.clone(), now);
            for t in targets {
                self.heed(n, t);
            }
        }
    }

    /// When a scheduled change's worker starts to drain: `scheduled_change_lead` before it starts.
    fn drains_from(&self, n: &Notice) -> Option<Millis> {
        match (n.kind, n.deadline) {
            (NoticeKind::ScheduledChange, Some(at)) => {
                Some(at.saturating_sub(self.rules.scheduled_change_lead_ms))
            }
            _ => None,
        }
    }

    fn heed(&mut self, n: &Notice, t: Target) {
        if self.rules.is_protected(t.ip) {
            let msg = format!(
                "{} from the {}: {} is a base host, never removed by dtd; the job will lose it",
                describe(n.kind),
                n.source,
                t.ip
            );
            self.event("notice_ignored", Some((&t.id, t.ip)), None, msg);
            return;
        }
        match n.kind {
            NoticeKind::Interruption => self.interrupt(n, t),
            NoticeKind::GroupTerminating if self.held_by_hook(&t.id) => {}
            NoticeKind::GroupTerminating => self.interrupt(n, t),
            NoticeKind::Rebalance if self.rules.rebalance == Rebalance::Report => {
                let msg = format!(
                    "rebalance recommendation for {} from the {} (reported only: events.rebalance is report)",
                    t.ip, n.source
                );
                self.event("rebalance_recommendation", Some((&t.id, t.ip)), None, msg);
            }
            NoticeKind::Rebalance => self.drain(n, t, Cause::Rebalance),
            NoticeKind::CapacityBlockExpiring => self.drain(n, t, Cause::CapacityBlock),
            NoticeKind::ScheduledChange => self.drain(n, t, Cause::ScheduledChange),
        }
    }

    /// The instance is being taken away: out of the host files now, no acknowledgement awaited,
    /// never terminated by us (AWS does it).
    fn interrupt(&mut self, n: &Notice, t: Target) {
        let reason = format!("{} from the {}", describe(n.kind), n.source);
        if let Some(pos) = self.st.members.iter().position(|m| m.id == t.id) {
            self.st.members.remove(pos);
            self.removed.push(t.ip);
            self.st.interruptions += 1;
        } else if let Some(r) = self.st.removals.iter_mut().find(|r| r.id == t.id) {
            if r.cause == Cause::Interrupted {
                // The same interruption from its other source (agent and queue both report).
                return;
            }
            // Already leaving: stop waiting for an acknowledgement it may not live to see.
            r.cause = Cause::Interrupted;
            if r.termination == Termination::Waiting {
                r.termination = Termination::Sent;
            }
            let msg = format!("{reason}: {} was already leaving; AWS takes it back", t.ip);
            self.event("interrupted", Some((&t.id, t.ip)), None, msg);
            return;
        }
        let mut r = self.new_removal(&t.id, t.ip, Cause::Interrupted, &reason);
        r.termination = Termination::Sent;
        self.queue_removal(r);
    }

    /// Leaves gracefully, like a deleted elastic tag: terminated once the job acknowledges.
    /// A rebalance recommendation respects `min`; a Capacity Block's end and a scheduled change
    /// do not, as the capacity goes away whatever we do.
    fn drain(&mut self, n: &Notice, t: Target, cause: Cause) {
        let mut reason = format!("{} from the {}", describe(n.kind), n.source);
        if let (NoticeKind::ScheduledChange, Some(at)) = (n.kind, n.deadline) {
            // People need the start time to judge it; the journal has no other field for it.
            reason.push_str(&format!(" (starts {})", rfc3339(at)));
        }
        let Some(pos) = self.st.members.iter().position(|m| m.id == t.id) else {
            let msg = format!("{reason}: {} is not in the job; nothing to drain", t.ip);
            self.event("notice", Some((&t.id, t.ip)), None, msg);
            return;
        };
        // Members no longer running leave later this pass: they do not count toward min.
        let running = (self.st.members.iter())
            .filter(|m| self.index.contains_key(m.id.as_str()))
            .count();
        let count = self.rules.base_hosts.len() + running;
        if cause == Cause::Rebalance && count <= self.rules.min {
            let msg = format!(
                "{reason}: {} kept, the job is at min ({})",
                t.ip, self.rules.min
            );
            self.event("removal_held", Some((&t.id, t.ip)), None, msg);
            return;
        }
        self.st.members.remove(pos);
        self.removed.push(t.ip);
        let mut r = self.new_removal(&t.id, t.ip, cause, &reason);
        if self.group.is_some_and(|g| g.instances.contains_key(&t.id)) {
            // Its group replaces it (Capacity Rebalancing may already have).
            r.end = End::GroupTerminate { decrement: false };
        }
        if let Some(deadline) = n.deadline {
            r.deadline = r.deadline.min(deadline);
        }
        self.queue_removal(r);
    }

    fn targets(&self, target: &NoticeTarget) -> Vec<Target> {
        let listed = |at: usize| Target {
            id: self.list[at].id.clone(),
            ip: self.list[at].ip,
        };
        match target {
            NoticeTarget::Instance(id) => {
                if let Some(&at) = self.index.get(id.as_str()) {
                    return vec![listed(at)];
                }
                self.remembered(|id2, _| id2 == id)
            }
            NoticeTarget::Ip(ip) => {
                // The index holds this cluster's workers, each instance once.
                let at = (0..self.list.len()).find(|&at| {
                    self.list[at].ip == *ip
                        && self.index.get(self.list[at].id.as_str()) == Some(&at)
                });
                match at {
                    Some(at) => vec![listed(at)],
                    None => self.remembered(|_, ip2| ip2 == *ip),
                }
            }
            NoticeTarget::CapacityReservation(cr) => (0..self.list.len())
                .filter(|&at| self.facts[at].cluster)
                .filter(|&at| self.list[at].capacity_reservation.as_deref() == Some(cr))
                .map(listed)
                .collect(),
        }
    }

    /// A member the EC2 view did not show this pass (it failed): the state still knows it.
    fn remembered(&self, matches: impl Fn(&str, IpAddr) -> bool) -> Vec<Target> {
        let member = self.st.members.iter().map(|m| (&m.id, m.ip));
        let removal = self.st.removals.iter().map(|r| (&r.id, r.ip));
        member
            .chain(removal)
            .find(|(id, ip)| matches(id, *ip))
            .map(|(id, ip)| Target { id: id.clone(), ip })
            .into_iter()
            .collect()
    }

    /// The group waits on our terminating hook for this instance: the hook path drains it.
    fn held_by_hook(&self, id: &str) -> bool {
        self.group
            .is_some_and(|g| g.terminating_hook.is_some() && g.instances.contains_key(id))
    }

    /// Interrupted workers stay shown as INTERRUPTED until AWS has taken them.
    /// Forgotten once a complete view no longer shows it: like every removal, it is not dropped
    /// on a partial one.
    pub(super) fn await_reclaim(&mut self, r: &Removal) -> bool {
        if self.can_remove() && !self.index.contains_key(r.id.as_str()) {
            return false;
        }
        let why = Some("AWS to reclaim it".to_string());
        self.view_id(&r.id, Some(WorkerStatus::Interrupted), why);
        true
    }
}

fn describe(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Interruption => "interruption warning",
        NoticeKind::Rebalance => "rebalance recommendation",
        NoticeKind::CapacityBlockExpiring => "Capacity Block expiration warning",
        NoticeKind::ScheduledChange => "EC2 scheduled change",
        NoticeKind::GroupTerminating => "Auto Scaling termination",
    }
}

fn rfc3339(at: Millis) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(at))
}

fn target_text(t: &NoticeTarget) -> String {
    match t {
        NoticeTarget::Instance(id) => id.clone(),
        NoticeTarget::Ip(ip) => ip.to_string(),
        NoticeTarget::CapacityReservation(cr) => cr.clone(),
    }
}
