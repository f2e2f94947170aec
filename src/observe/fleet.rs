//! The worker instances as the daemon knows them: a complete listing, kept current between
//! listings by reads of just the instances an event, a marker or a notice names.
//!
//! Every read is complete for what it asked: a listing for every worker, a targeted read for the
//! ids and private IPs it named. So an instance a targeted read asked for and did not get back is
//! no longer a worker (terminated, stopped, or its worker tags changed), while one it did not ask
//! for keeps what the last read of it said. Reads are numbered when they begin; where two reads
//! cover the same instance, the one begun later wins, whichever finished first (a listing of
//! 10,000 instances takes seconds, and the targeted reads begun meanwhile are newer).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use crate::model::{Instance, Millis};

/// The number a read got when it began.
pub type ReadSeq = u64;

/// What a targeted read asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    pub ids: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
}

impl Targets {
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.ips.is_empty()
    }

    fn covers(&self, i: &Instance) -> bool {
        self.ids.contains(&i.id) || self.ips.contains(&i.ip)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Id(String),
    Ip(IpAddr),
}

#[derive(Debug, Default)]
pub struct Fleet {
    /// Sorted by id, one entry per id: the view does not depend on the order AWS pages came in.
    instances: Vec<Instance>,
    /// The complete listing the view rests on: its number and when it began.
    listed: Option<(ReadSeq, Millis)>,
    next: ReadSeq,
    /// Ids and IPs that targeted reads refreshed after the listing began, and by which read.
    fresher: HashMap<Key, ReadSeq>,
}

impl Fleet {
    /// Numbers a read that begins now.
    pub fn begin(&mut self) -> ReadSeq {
        self.next += 1;
        self.next
    }

    /// When the listing the view rests on began; `None` before the first complete listing, when
    /// the view is not a view of the fleet at all.
    pub fn listed_at(&self) -> Option<Millis> {
        self.listed.map(|(_, at)| at)
    }

    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// Those of `ips` that no instance in the view has.
    pub fn unknown_ips(&self, ips: impl IntoIterator<Item = IpAddr>) -> Vec<IpAddr> {
        let known: HashSet<IpAddr> = self.instances.iter().map(|i| i.ip).collect();
        ips.into_iter().filter(|ip| !known.contains(ip)).collect()
    }

    /// Those of `ids` that no instance in the view has (the view is sorted by id).
    pub fn unknown_ids(&self, ids: &[String]) -> Vec<String> {
        let known = |id: &String| {
            (self.instances)
                .binary_search_by(|i| i.id.as_str().cmp(id))
                .is_ok()
        };
        ids.iter().filter(|id| !known(id)).cloned().collect()
    }

    /// The instances at `ips`.
    pub fn at_ips<'a>(
        &'a self,
        ips: &'a std::collections::BTreeSet<IpAddr>,
    ) -> impl Iterator<Item = &'a Instance> + 'a {
        self.instances.iter().filter(|i| ips.contains(&i.ip))
    }

    /// Lends the view to a pass without copying it; `restore` gives it back.
    pub fn take(&mut self) -> Vec<Instance> {
        std::mem::take(&mut self.instances)
    }

    pub fn restore(&mut self, instances: Vec<Instance>) {
        self.instances = instances;
    }

    /// A tag the daemon itself set and EC2 accepted: no read is needed to know it, and without it
    /// every pass until the next listing would set it again.
    pub fn tagged(&mut self, ids: &[String], key: &str, value: &str) {
        for id in ids {
            if let Ok(at) = self.instances.binary_search_by(|i| i.id.as_str().cmp(id)) {
                self.instances[at]
                    .tags
                    .insert(key.to_string(), value.to_string());
            }
        }
    }

    /// A complete listing, begun as read `seq` at `at`, replaces the view, except for the
    /// instances that targeted reads begun after it refreshed.
    pub fn apply_listing(&mut self, seq: ReadSeq, at: Millis, listed: Vec<Instance>) {
        if self.listed.is_some_and(|(s, _)| s > seq) {
            return;
        }
        let newer: HashMap<&Key, ReadSeq> = (self.fresher.iter())
            .filter(|(_, s)| **s > seq)
            .map(|(k, s)| (k, *s))
            .collect();
        let refreshed = |i: &Instance| {
            newer.contains_key(&Key::Id(i.id.clone())) || newer.contains_key(&Key::Ip(i.ip))
        };
        let mut view: Vec<Instance> = listed.into_iter().filter(|i| !refreshed(i)).collect();
        view.extend(self.instances.drain(..).filter(|i| refreshed(i)));
        self.instances = sorted(view);
        self.fresher.retain(|_, s| *s > seq);
        self.listed = Some((seq, at));
    }

    /// A targeted read, begun as read `seq`, that asked for `targets` and found `found`.
    pub fn apply_read(&mut self, seq: ReadSeq, targets: &Targets, found: Vec<Instance>) {
        if self.listed.is_some_and(|(s, _)| s > seq) {
            return;
        }
        let stale = |k: &Key| self.fresher.get(k).is_some_and(|s| *s > seq);
        let asked = Targets {
            ids: (targets.ids.iter())
                .filter(|id| !stale(&Key::Id((*id).clone())))
                .cloned()
                .collect(),
            ips: (targets.ips.iter())
                .filter(|ip| !stale(&Key::Ip(**ip)))
                .copied()
                .collect(),
        };
        let found: Vec<Instance> = (found.into_iter())
            .filter(|i| asked.covers(i) && !stale(&Key::Id(i.id.clone())))
            .collect();
        let found_ids: BTreeSet<&str> = found.iter().map(|i| i.id.as_str()).collect();
        // Gone: asked for and not found. Found again: replaced by what was found.
        self.instances
            .retain(|i| !asked.covers(i) && !found_ids.contains(i.id.as_str()));
        for key in
            (asked.ids.iter().cloned().map(Key::Id)).chain(asked.ips.iter().map(|ip| Key::Ip(*ip)))
        {
            self.fresher.insert(key, seq);
        }
        for i in &found {
            self.fresher.insert(Key::Id(i.id.clone()), seq);
        }
        let mut view = std::mem::take(&mut self.instances);
        view.extend(found);
        self.instances = sorted(view);
    }
}

/// Sorted by id, the last of each id kept (a listing whose pages shifted may name one twice).
fn sorted(mut view: Vec<Instance>) -> Vec<Instance> {
    view.reverse();
    view.sort_by(|a, b| a.id.cmp(&b.id));
    view.dedup_by(|later, kept| later.id == kept.id);
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(id: &str, ip: &str, tag: &str) -> Instance {
        Instance {
            id: id.into(),
            ip: ip.parse().unwrap(),
            instance_type: "p3.2xlarge".into(),
            az: "us-east-1a".into(),
            market: "spot".into(),
            launched_at: 0,
            tags: crate::model::Tags::from([("t".to_string(), tag.to_string())]),
            capacity_reservation: None,
            subnet: None,
        }
    }

    fn ids(f: &Fleet) -> Vec<String> {
        let tag = |i: &Instance| i.tags.get("t").unwrap_or_default().to_string();
        f.instances()
            .iter()
            .map(|i| format!("{}={}", i.id, tag(i)))
            .collect()
    }

    fn targets(ids: &[&str], ips: &[&str]) -> Targets {
        Targets {
            ids: ids.iter().map(|s| s.to_string()).collect(),
            ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_listing_is_sorted_and_counts_each_instance_once() {
        let mut f = Fleet::default();
        assert_eq!(f.listed_at(), None);
        let s = f.begin();
        let listed = vec![
            inst("i-2", "10.0.0.2", "a"),
            inst("i-1", "10.0.0.1", "a"),
            inst("i-2", "10.0.0.2", "b"),
        ];
        f.apply_listing(s, 7, listed);
        assert_eq!(ids(&f), ["i-1=a", "i-2=b"]);
        assert_eq!(f.listed_at(), Some(7));
    }

    #[test]
    fn a_targeted_read_changes_only_what_it_asked_for() {
        let mut f = Fleet::default();
        let s = f.begin();
        f.apply_listing(
            s,
            0,
            vec![
                inst("i-1", "10.0.0.1", "a"),
                inst("i-2", "10.0.0.2", "a"),
                inst("i-3", "10.0.0.3", "a"),
            ],
        );
        let s = f.begin();
        // i-1 changed, i-2 is gone, i-3 was not asked for, 10.0.0.9 is a new worker.
        f.apply_read(
            s,
            &targets(&["i-1", "i-2"], &["10.0.0.9"]),
            vec![
                inst("i-1", "10.0.0.1", "b"),
                inst("i-9", "10.0.0.9", "new"),
                inst("i-3", "10.0.0.3", "unasked"),
            ],
        );
        assert_eq!(ids(&f), ["i-1=b", "i-3=a", "i-9=new"]);
    }

    #[test]
    fn an_ip_no_worker_has_any_more_takes_its_old_instance_out() {
        let mut f = Fleet::default();
        let s = f.begin();
        f.apply_listing(s, 0, vec![inst("i-1", "10.0.0.1", "a")]);
        let s = f.begin();
        f.apply_read(s, &targets(&[], &["10.0.0.1"]), vec![]);
        assert!(f.instances().is_empty());
    }

    #[test]
    fn a_listing_begun_before_a_targeted_read_keeps_what_the_read_said() {
        let mut f = Fleet::default();
        let s = f.begin();
        f.apply_listing(
            s,
            0,
            vec![inst("i-1", "10.0.0.1", "a"), inst("i-2", "10.0.0.2", "a")],
        );
        let listing = f.begin();
        let read = f.begin();
        // The read (begun later) says i-1 is gone and i-2 changed; the listing saw them before.
        f.apply_read(
            read,
            &targets(&["i-1", "i-2"], &[]),
            vec![inst("i-2", "10.0.0.2", "b")],
        );
        f.apply_listing(
            listing,
            5,
            vec![
                inst("i-1", "10.0.0.1", "a"),
                inst("i-2", "10.0.0.2", "a"),
                inst("i-3", "10.0.0.3", "a"),
            ],
        );
        assert_eq!(ids(&f), ["i-2=b", "i-3=a"]);
        // A later listing owns everything again.
        let s = f.begin();
        f.apply_listing(s, 9, vec![inst("i-1", "10.0.0.1", "c")]);
        assert_eq!(ids(&f), ["i-1=c"]);
    }

    #[test]
    fn a_read_older_than_the_listing_applied_is_ignored() {
        let mut f = Fleet::default();
        let read = f.begin();
        let listing = f.begin();
        f.apply_listing(listing, 3, vec![inst("i-1", "10.0.0.1", "a")]);
        f.apply_read(read, &targets(&["i-1"], &[]), vec![]);
        assert_eq!(ids(&f), ["i-1=a"]);
        let older = f.begin();
        let newer = f.begin();
        f.apply_listing(newer, 4, vec![inst("i-1", "10.0.0.1", "b")]);
        f.apply_listing(older, 2, vec![]);
        assert_eq!(ids(&f), ["i-1=b"]);
    }
}
