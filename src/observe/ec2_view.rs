//! The EC2 side of a pass: the fleet as last read, the background listing that resyncs it, and
//! the targeted reads that keep it current for what events and markers name.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::lookups::Lookups;
use crate::clock::{millis, SharedClock};
use crate::model::{Instance, Millis, WorkerStatus, STATUS_TAG};
use crate::observe::ec2::{Ec2Error, Ec2Observer, Listing};
use crate::observe::fleet::{Fleet, ReadSeq, Targets};

pub struct Ec2View {
    observer: Ec2Observer,
    /// The daemon's clock: when a listing began (it orders the listing against events), when the
    /// next is due, and when a report's lookups are.
    clock: SharedClock,
    fleet: Fleet,
    resync: Schedule,
    listing: Option<Running>,
    /// Why the last listing failed: until one succeeds the view is not trusted to be complete.
    listing_error: Option<Ec2Error>,
    /// What a failed targeted read still has to read.
    owed: Targets,
    /// What reports may make it read, and within which bounds.
    lookups: Lookups,
}

struct Running {
    seq: ReadSeq,
    at: Millis,
    task: JoinHandle<Result<Listing, Ec2Error>>,
}

/// When the next complete listing is due.
struct Schedule {
    every: Millis,
    next: Millis,
}

impl Schedule {
    fn due(&self, now: Millis) -> bool {
        now >= self.next
    }

    /// A listing ended at `now`; a failed one is tried again sooner than a resync, since
    /// removals wait for a complete view.
    fn ended(&mut self, now: Millis, ok: bool) {
        let wait = match ok {
            true => self.every,
            false => self.every.min(millis(Duration::from_secs(5))),
        };
        self.next = now.saturating_add(wait);
    }
}

/// What a pass's reads of EC2 cost and found.
pub struct Refreshed {
    pub calls: u32,
    pub error: Option<Ec2Error>,
}

impl Ec2View {
    pub fn new(observer: Ec2Observer, resync_every: Duration, clock: SharedClock) -> Self {
        let now = clock.now();
        Ec2View {
            observer,
            clock,
            fleet: Fleet::default(),
            resync: Schedule {
                every: millis(resync_every),
                next: now,
            },
            listing: None,
            listing_error: None,
            owed: Targets::default(),
            lookups: Lookups::new(resync_every, now),
        }
    }

    /// Subnets whose workers' IPs may be looked up (the capacity choices').
    pub fn note_subnets<'a>(&mut self, subnets: impl IntoIterator<Item = &'a str>) {
        self.lookups.subnets.note(subnets);
    }

    pub fn listed_at(&self) -> Option<Millis> {
        self.fleet.listed_at()
    }

    /// Starts a complete listing in the background when one is due and none is running.
    pub fn start_resync(&mut self) {
        let now = self.clock.now();
        if self.listing.is_some() || !self.resync.due(now) {
            return;
        }
        let observer = self.observer.clone();
        self.listing = Some(Running {
            seq: self.fleet.begin(),
            at: now,
            task: tokio::spawn(async move { observer.list().await }),
        });
    }

    /// Waits for the running listing (forever, when none runs) and applies it, or remembers why
    /// it failed; returns the calls it took. Cancel-safe: a listing not yet finished keeps running.
    pub async fn finish_resync(&mut self) -> u32 {
        let Some(running) = self.listing.as_mut() else {
            return std::future::pending().await;
        };
        let joined = (&mut running.task).await;
        let (seq, at) = (running.seq, running.at);
        self.listing = None;
        let ended = self.clock.now();
        let result = joined.unwrap_or_else(|e| Err(Ec2Error::ListingTask(e.to_string())));
        match result {
            Ok(listing) => {
                let subnets = listing.instances.iter().filter_map(|i| i.subnet.as_deref());
                self.lookups.subnets.note(subnets);
                self.fleet.apply_listing(seq, at, listing.instances);
                self.listing_error = None;
                self.resync.ended(ended, true);
                listing.calls
            }
            Err(e) => {
                self.listing_error = Some(e);
                self.resync.ended(ended, false);
                0
            }
        }
    }

    /// The first complete listing, before the first pass decides anything.
    pub async fn first_listing(&mut self) -> u32 {
        if self.fleet.listed_at().is_some() {
            return 0;
        }
        // Even one that failed a moment ago: nothing is decided without it.
        self.resync.next = self.clock.now();
        self.start_resync();
        self.finish_resync().await
    }

    /// Reads again what `named` names, and what reports make worth a read within [`Lookups`]'
    /// bounds: the IPs report files name (`reported`, unsigned reports) that no known worker
    /// has, and the instances whose agents proved them (`proved`) that the view lacks.
    pub async fn refresh(
        &mut self,
        named: BTreeSet<String>,
        reported: Option<&BTreeSet<IpAddr>>,
        proved: &[String],
    ) -> Refreshed {
        let now = self.clock.now();
        self.read_subnets(now).await;
        let mut targets = std::mem::take(&mut self.owed);
        targets.ids.extend(named);
        let unknown =
            reported.map_or_else(Vec::new, |ips| self.fleet.unknown_ips(ips.iter().copied()));
        let proved = self.fleet.unknown_ids(proved);
        let wanted = self.lookups.wanted(&unknown, &proved, now);
        targets.ips.extend(wanted.ips.iter().copied());
        targets.ids.extend(wanted.ids.iter().cloned());
        if targets.is_empty() {
            return Refreshed {
                calls: 0,
                error: None,
            };
        }
        let seq = self.fleet.begin();
        match self.observer.read(&targets).await {
            Ok(read) => {
                let found: Vec<IpAddr> = read.instances.iter().map(|i| i.ip).collect();
                let ids: Vec<String> = read.instances.iter().map(|i| i.id.clone()).collect();
                self.lookups.found(&wanted, &found, &ids, now);
                let subnets = read.instances.iter().filter_map(|i| i.subnet.as_deref());
                self.lookups.subnets.note(subnets);
                self.fleet.apply_read(seq, &targets, read.instances);
                Refreshed {
                    calls: read.calls,
                    error: None,
                }
            }
            Err(e) => {
                self.owed = targets;
                Refreshed {
                    calls: 0,
                    error: Some(e),
                }
            }
        }
    }

    /// Reads the ranges of subnets not read yet (a failed read is tried a minute later).
    async fn read_subnets(&mut self, now: Millis) {
        let Some(wanted) = self.lookups.subnets.due(now) else {
            return;
        };
        match super::ec2::subnet_cidrs(self.observer.client(), wanted).await {
            Ok(cidrs) => {
                tracing::info!(
                    ?cidrs,
                    "workers' subnets read: a report's IP is looked up within them"
                );
                self.lookups.subnets.read(cidrs);
            }
            Err(e) => tracing::warn!("the workers' subnets are unknown: {e}"),
        }
    }

    /// The status tags EC2 accepted, so that the view does not ask for them again.
    pub fn tagged(&mut self, tags: &BTreeMap<WorkerStatus, Vec<String>>) {
        for (status, ids) in tags {
            self.fleet.tagged(ids, STATUS_TAG, status.as_tag());
        }
    }

    /// The view for a pass, lent without a copy; `restore` takes it back. `Err` until a
    /// complete listing succeeded, and after a read that failed.
    pub fn lend(&mut self, read_error: Option<Ec2Error>) -> Result<Vec<Instance>, Ec2Error> {
        if self.fleet.listed_at().is_none() {
            let why = self.listing_error.clone();
            return Err(why.unwrap_or(Ec2Error::NotListed));
        }
        if let Some(e) = read_error.or_else(|| self.listing_error.clone()) {
            return Err(e);
        }
        Ok(self.fleet.take())
    }

    /// Takes back what [`lend`](Self::lend) lent, whatever the snapshot made of its error.
    pub fn restore<E>(&mut self, lent: Result<Vec<Instance>, E>) {
        if let Ok(instances) = lent {
            self.fleet.restore(instances);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    /// A resync every minute, whose first listing ended at the clock's time.
    fn listed(clock: &ManualClock, ok: bool) -> Schedule {
        let mut resync = Schedule {
            every: 60_000,
            next: clock.now(),
        };
        assert!(resync.due(clock.now()), "the first listing is due at once");
        resync.ended(clock.now(), ok);
        resync
    }

    #[test]
    fn a_resync_is_due_once_the_clock_passes_its_period_and_not_before() {
        let clock = ManualClock::starting_at(1_000_000);
        let resync = listed(&clock, true);
        clock.advance(59_999);
        assert!(!resync.due(clock.now()));
        clock.advance(1);
        assert!(resync.due(clock.now()));
    }

    #[test]
    fn a_failed_listing_is_due_again_after_five_seconds() {
        let clock = ManualClock::starting_at(1_000_000);
        let resync = listed(&clock, false);
        clock.advance(4_999);
        assert!(!resync.due(clock.now()));
        clock.advance(1);
        assert!(resync.due(clock.now()));
    }
}
