//! The EC2 side of a pass: the fleet as last read, the background listing that resyncs it, and
//! the targeted reads that keep it current for what events and markers name.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::clock::SharedClock;
use crate::model::fleet::{Fleet, ReadSeq, Targets};
use crate::model::{Instance, Markers, Millis, WorkerStatus, STATUS_TAG};
use crate::observe::ec2::{Ec2Observer, Listing};

/// The first wait before asking again about a marker whose IP no worker has.
const ABSENT_FIRST_RETRY: Duration = Duration::from_secs(1);

pub struct Ec2View {
    observer: Ec2Observer,
    /// When a listing began, by the daemon's clock (it orders the listing against events).
    clock: SharedClock,
    fleet: Fleet,
    resync_every: Duration,
    next_resync: Instant,
    listing: Option<Running>,
    /// Why the last listing failed: until one succeeds the view is not trusted to be complete.
    listing_error: Option<String>,
    /// What a failed targeted read still has to read.
    owed: Targets,
    /// Marker IPs no worker had when last read, and when to ask again (each miss doubles the
    /// wait, up to `resync_every`): a stale marker does not cost a call every pass.
    absent: HashMap<IpAddr, (Instant, Duration)>,
}

struct Running {
    seq: ReadSeq,
    at: Millis,
    task: JoinHandle<Result<Listing, String>>,
}

/// What a pass's reads of EC2 cost and found.
pub struct Refreshed {
    pub calls: u32,
    pub error: Option<String>,
}

impl Ec2View {
    pub fn new(observer: Ec2Observer, resync_every: Duration, clock: SharedClock) -> Self {
        Ec2View {
            observer,
            clock,
            fleet: Fleet::default(),
            resync_every,
            next_resync: Instant::now(),
            listing: None,
            listing_error: None,
            owed: Targets::default(),
            absent: HashMap::new(),
        }
    }

    pub fn listed_at(&self) -> Option<Millis> {
        self.fleet.listed_at()
    }

    /// Starts a complete listing in the background when one is due and none is running.
    pub fn start_resync(&mut self, now: Instant) {
        if self.listing.is_some() || now < self.next_resync {
            return;
        }
        let observer = self.observer.clone();
        self.listing = Some(Running {
            seq: self.fleet.begin(),
            at: self.clock.now(),
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
        let started = Instant::now();
        let result = joined.unwrap_or_else(|e| Err(format!("the listing task failed: {e}")));
        match result {
            Ok(listing) => {
                self.fleet.apply_listing(seq, at, listing.instances);
                self.listing_error = None;
                self.next_resync = started + self.resync_every;
                listing.calls
            }
            Err(e) => {
                self.listing_error = Some(e);
                // Sooner than a resync: removals wait for a complete view.
                self.next_resync = started + self.resync_every.min(Duration::from_secs(5));
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
        self.next_resync = Instant::now();
        self.start_resync(Instant::now());
        self.finish_resync().await
    }

    /// Reads again what `named` names and the marker IPs no known worker has.
    pub async fn refresh(
        &mut self,
        named: BTreeSet<String>,
        markers: Option<&Markers>,
    ) -> Refreshed {
        let now = Instant::now();
        let mut targets = std::mem::take(&mut self.owed);
        targets.ids.extend(named);
        if let Some(m) = markers {
            targets.ips.extend(self.unknown_marker_ips(m, now));
        }
        if targets.is_empty() {
            return Refreshed {
                calls: 0,
                error: None,
            };
        }
        let seq = self.fleet.begin();
        match self.observer.read(&targets).await {
            Ok(read) => {
                self.note_absent(&targets, &read.instances, now);
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

    fn unknown_marker_ips(&mut self, m: &Markers, now: Instant) -> Vec<IpAddr> {
        let marked: BTreeSet<IpAddr> = m.success.iter().chain(m.failed.keys()).copied().collect();
        self.absent.retain(|ip, _| marked.contains(ip));
        let mut unknown = self.fleet.unknown_ips(marked);
        unknown.retain(|ip| self.absent.get(ip).is_none_or(|(due, _)| *due <= now));
        unknown
    }

    fn note_absent(&mut self, targets: &Targets, found: &[Instance], now: Instant) {
        for ip in &targets.ips {
            if found.iter().any(|i| i.ip == *ip) {
                self.absent.remove(ip);
                continue;
            }
            let wait = match self.absent.get(ip) {
                Some((_, last)) => (*last * 2).min(self.resync_every),
                None => ABSENT_FIRST_RETRY,
            };
            self.absent.insert(*ip, (now + wait, wait));
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
    pub fn lend(&mut self, read_error: Option<String>) -> Result<Vec<Instance>, String> {
        if self.fleet.listed_at().is_none() {
            let why = self.listing_error.clone();
            return Err(why.unwrap_or_else(|| "no complete listing yet".into()));
        }
        if let Some(e) = read_error.or_else(|| self.listing_error.clone()) {
            return Err(e);
        }
        Ok(self.fleet.take())
    }

    pub fn restore(&mut self, lent: Result<Vec<Instance>, String>) {
        if let Ok(instances) = lent {
            self.fleet.restore(instances);
        }
    }
}
