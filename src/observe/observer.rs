//! The whole snapshot of one pass, from every source: the shared directory first (for the marker
//! IPs no known worker has), then the instances to read again, the worker group and the capacity
//! reservations at the same time, the launch template once, and the mount-target zones when
//! due. The daemon's loop asks for it and decides on it; what a source keeps between passes (the
//! EC2 view, the event queue's inbox, the group as last read, the reservations) lives here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::acks::{AckReader, KnownIps};
use super::agents::ListenError;
use super::asg::{self, GroupError};
use super::ec2::{resolve_launch_template, Ec2Error, Ec2Observer};
use super::ec2_view::Ec2View;
use super::efs::{MountTargetError, MountTargetWatch};
use super::inbox::{Heeded, Inbox};
use super::markers::book;
use super::markers::MarkerScanner;
use super::progress::ProgressReader;
use super::queue::ReceiveError;
use super::reports::{Judged, Reports};
use super::reservations::{self, ReservationWatch};
use super::shared::{self, SharedReaders};
use super::shared_changes::{self, Watched};
use super::sources;
use super::spot_prices::SpotPriceWatch;
use crate::aws::Clients;
use crate::clock::{millis, SharedClock};
use crate::config::{Config, Reports as Mode};
use crate::deadline::Deadline;
use crate::model::*;
use crate::store::Paths;

/// How long after a failed read of the capacity choices' subnets it is tried again.
const SUBNETS_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

pub struct Observer {
    clients: Clients,
    /// Messages from the event queue, and those received but not yet heeded by a pass.
    inbox: Inbox,
    ec2: Ec2View,
    /// The worker group as last read, and whether it is to be read again on the next pass (an
    /// event came, a group action was taken, a listing finished): not on every pass.
    group: Option<Result<Group, GroupError>>,
    group_due: bool,
    /// The shared file system's mount-target zones, when `shared_fs_id` is configured.
    mount_targets: Option<MountTargetWatch>,
    /// Read on a thread of their own, with the shared directory's deadline.
    readers: Arc<Mutex<SharedReaders>>,
    launch_template_id: Option<String>,
    /// The zones of the subnets `workers.capacity` names, once read (only with mount targets
    /// to compare them with), and the subnets still to read.
    subnet_zones: BTreeMap<String, String>,
    subnets_unread: Vec<String>,
    /// When the subnets were last asked for: a failed read is tried again a minute later, not
    /// on every pass.
    subnets_asked: Option<Millis>,
    /// The reservations `workers.capacity` names by id, when it names any.
    reservations: Option<ReservationWatch>,
    /// The Spot workers' prices, with `workers.spot_price_history`.
    spot_prices: Option<SpotPriceWatch>,
    /// What the workers' reports say, and what of it is believed.
    reports: Reports,
    clock: SharedClock,
    /// The workers the job's log may speak of (see `acks::KnownIps`).
    known: KnownIps,
}

/// What one observation found.
pub struct Observed {
    pub snap: Snapshot,
    /// The shared directory is not answering: nothing is decided on this snapshot.
    pub stalled: bool,
    pub ec2_calls: u32,
    /// Why the mount-target zones could not be read, when they could not.
    pub mount_targets_error: Option<MountTargetError>,
}

impl Observer {
    /// `owner`: the uid whose job files are believed.
    pub fn new(
        cfg: &Config,
        clients: Clients,
        paths: &Paths,
        owner: Option<u32>,
        clock: SharedClock,
    ) -> Observer {
        let ack = &cfg.job.ack;
        let known = KnownIps::default();
        let log = ack.host_worker_log.as_deref();
        let readers = SharedReaders {
            markers: (cfg.workers.reports == Mode::Unsigned)
                .then(|| MarkerScanner::new(&cfg.shared_dir)),
            strays: (cfg.workers.reports == Mode::Signed)
                .then(|| super::strays::Strays::new(&cfg.shared_dir)),
            acks: AckReader::new(&ack.file, log, owner, known.clone()),
            resume: paths.resume(),
            capacity_refusals: paths.capacity_refusals(),
            // Every pass: the goodput ledger follows the job's step (redone time), besides
            // stall detection, joins at checkpoints and the in-place strategy's quorum.
            progress: ProgressReader::new(&cfg.job.progress, owner),
        };
        let tags = &cfg.workers.tags;
        let listing = Ec2Observer::new(clients.ec2.clone(), tags, cfg.workers.page_size);
        let mut ec2 = Ec2View::new(listing, cfg.resync, clock.clone());
        ec2.note_subnets(sources::choices(cfg).filter_map(|c| c.subnet.as_deref()));
        Observer {
            inbox: Inbox::default(),
            ec2,
            group: None,
            group_due: true,
            mount_targets: (cfg.shared_fs_id.as_deref().zip(clients.efs.clone()))
                .map(|(fs, efs)| MountTargetWatch::new(efs, fs, cfg.shared_fs_refresh)),
            readers: Arc::new(Mutex::new(readers)),
            launch_template_id: None,
            subnet_zones: BTreeMap::new(),
            subnets_asked: None,
            subnets_unread: sources::capacity_subnets(cfg),
            reservations: ReservationWatch::new(
                clients.ec2.clone(),
                reservations::ids(sources::choices(cfg)),
            ),
            spot_prices: (cfg.workers.spot_price_history)
                .then(|| SpotPriceWatch::new(clients.ec2.clone())),
            reports: Reports::default(),
            clock,
            known,
            clients,
        }
    }

    /// Starts listening to the event queue, when one is configured.
    pub fn listen(&mut self, cfg: &Config) {
        let queue = self.clients.sqs.clone().zip(cfg.events.queue_url.clone());
        if let Some((sqs, url)) = queue {
            tracing::info!(queue = %url, "listening for interruption and lifecycle events");
            self.inbox.listen(sqs, url, cfg.events.wait);
        }
    }

    /// Starts a complete listing in the background, when one is due.
    pub fn start_resync(&mut self) {
        self.ec2.start_resync();
    }

    /// Starts taking the agents' reports on `workers.listen` (signed reports); `pins`: the
    /// keys dtd keeps. Returns the address bound.
    pub async fn take_reports(
        &mut self,
        cfg: &Config,
        pins: Pins<'_>,
    ) -> Result<std::net::SocketAddr, ListenError> {
        self.reports.take(cfg, self.clock.clone(), pins).await
    }

    /// See [`Reports::await_agents`].
    pub async fn await_agents(&self, known: &[String], least: Duration, most: Duration) -> usize {
        self.reports.await_agents(known, least, most).await
    }

    /// Waits for news worth a pass before the clock asks for one: the event queue's messages
    /// (or its failure), an agent's report, or a complete listing finished, whose view may hold
    /// what an event missed, and after which the group is read again. Cancel-safe, as every
    /// wait is.
    pub async fn news(&mut self) {
        tokio::select! {
            Some(update) = self.inbox.recv() => self.inbox.take(update),
            _ = self.ec2.finish_resync() => self.group_due = true,
            () = self.reports.news() => {}
        }
    }

    /// Takes in the queue's updates already waiting, so they join this pass; messages that
    /// arrived since the last pass make it read the group again.
    pub fn take_waiting_news(&mut self) {
        self.inbox.take_waiting();
        self.group_due |= self.inbox.take_fresh();
    }

    /// A pass acted on the worker group: what it looks like now is read on the next pass.
    pub fn group_changed(&mut self) {
        self.group_due = true;
    }

    /// Takes out the queue messages a pass heeded, to be deleted once what they said is
    /// recorded; those it deferred (by notice id) stay for the next pass.
    pub fn heeded(&mut self, deferred: &[String]) -> Heeded {
        self.inbox.heeded(deferred)
    }

    /// Heeded messages that could not all be deleted: heeded again (once, by their ids) and
    /// deleted on the next pass.
    pub fn undeleted(&mut self, heeded: Heeded) {
        self.inbox.undeleted(heeded);
    }

    /// Why the event queue could not be read, while it cannot.
    pub fn queue_error(&self) -> Option<&ReceiveError> {
        self.inbox.error()
    }

    /// When EC2's instances were last listed completely.
    pub fn listed_at(&self) -> Option<Millis> {
        self.ec2.listed_at()
    }

    /// A pass is over: takes back the instances its snapshot was lent, and the status tags EC2
    /// accepted, so that they are not asked for again.
    pub fn pass_ended<E>(
        &mut self,
        lent: Result<Vec<Instance>, E>,
        tagged: &BTreeMap<WorkerStatus, Vec<String>>,
    ) {
        self.ec2.restore(lent);
        self.ec2.tagged(tagged);
    }

    /// Reads every source (see the module's comment). `pins`: the agent keys dtd keeps, by
    /// instance, which a report must be signed with.
    pub async fn observe(
        &mut self,
        cfg: &Config,
        shared_fs: &mut Deadline,
        pins: Pins<'_>,
    ) -> Observed {
        let listing_calls = self.ec2.first_listing().await;
        let shared = shared::read(&self.readers, shared_fs).await;
        let stalled = shared.acks.is_err() && shared_fs.is_stuck();
        let template = self.resolve_launch_template(cfg).await;
        let named = self.inbox.instances();
        let now = self.clock.now();
        let heard = self.reports.hear(pins, now);
        let scanned = shared.markers.as_ref().and_then(|m| m.as_ref().ok());
        let reported = scanned.map(book::reported_ips);
        let proved: Vec<String> = (heard.iter().flat_map(|h| &h.proofs))
            .map(|p| p.instance_id.clone())
            .collect();
        let (refreshed, (), reservations) = tokio::join!(
            self.ec2.refresh(named, reported.as_ref(), &proved),
            asg::read_when_due(&mut self.group, &mut self.group_due, cfg, &self.clients),
            reservations::read_when_due(self.reservations.as_mut(), now)
        );
        let instances = match template {
            Ok(()) => self.ec2.lend(refreshed.error),
            Err(e) => Err(e),
        };
        let markers = match (heard, shared.markers) {
            (Some(heard), _) => {
                let listed_at = self.ec2.listed_at();
                let on = Judged {
                    instances: &instances,
                    listed_at,
                    pins,
                    now,
                };
                Ok(self.reports.judge_heard(&heard, &shared.strays, on))
            }
            (None, Some(scan)) => scan.map(|scan| self.reports.judge_files(cfg, &scan, now)),
            (None, None) => Ok(Markers::default()),
        };
        let (mount_targets, mount_targets_error) = self.mount_targets(&instances).await;
        if let (Some(w), Ok(list)) = (self.spot_prices.as_mut(), instances.as_ref()) {
            w.poll(list, now).await;
        }
        let subnet_zones = self.subnet_zones().await;
        let snap = Snapshot {
            instances: worded(instances),
            notices: self.inbox.notices(&markers),
            markers: worded(markers),
            acks: worded(shared.acks),
            group: self.group.clone().map(worded),
            resume_requested: shared.resume_requested,
            capacity_refusals: shared.capacity_refusals,
            mount_targets,
            subnet_zones,
            progress: shared.progress.map(worded),
            reservations: reservations.map(worded),
        };
        Observed {
            snap,
            stalled,
            ec2_calls: listing_calls + refreshed.calls,
            mount_targets_error,
        }
    }

    /// The workers the job's acknowledgements may be about: the members and the leaving workers
    /// of `st`, as decided (before acting, so a line the job writes about them is read).
    pub fn know(&self, st: &State) {
        let ips = (st.members.iter().map(|m| m.ip)).chain(st.removals.iter().map(|r| r.ip));
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        *known = ips.collect();
    }

    /// What a Spot worker is paid an hour, from the Spot price history when it is read.
    pub fn spot_price(&self, i: &crate::model::Instance) -> Option<f64> {
        self.spot_prices.as_ref()?.price(i)
    }

    /// The Spot prices as last read, with `workers.spot_price_history`.
    pub fn spot_prices(&self) -> Option<&super::spot_prices::SpotPrices> {
        self.spot_prices.as_ref().map(SpotPriceWatch::prices)
    }

    /// Markers and acknowledgements checked every `shared_poll` on a thread of their own.
    pub fn watch_shared_dir(cfg: &Config, paths: &Paths) -> Option<mpsc::Receiver<()>> {
        let ack = &cfg.job.ack;
        let files = std::iter::once(ack.file.clone()).chain(ack.host_worker_log.clone());
        let watched = Watched {
            dir: cfg.shared_dir.clone(),
            files: (files.chain([paths.resume(), paths.capacity_refusals()])).collect(),
        };
        match shared_changes::spawn(watched, cfg.shared_poll) {
            Ok(rx) => Some(rx),
            Err(e) => {
                tracing::warn!(
                    "cannot watch the shared directory ({e}); a pass every interval only"
                );
                None
            }
        }
    }

    pub fn launch_template_id(&self) -> Option<String> {
        self.launch_template_id.clone()
    }

    /// The mount-target zones' summary for the status, or why they are unknown; `None` when
    /// not configured.
    pub fn mount_targets_summary(&self) -> Option<Result<String, MountTargetError>> {
        (self.mount_targets.as_ref()).map(|w| w.cache().summary())
    }

    /// The mount-target zones, re-read when due (see `MountTargetCache::due`), and why they
    /// could not be read.
    async fn mount_targets(
        &mut self,
        instances: &Result<Vec<Instance>, Ec2Error>,
    ) -> (Option<MountTargets>, Option<MountTargetError>) {
        let Some(watch) = self.mount_targets.as_mut() else {
            return (None, None);
        };
        let zones = (instances.iter().flatten()).map(|i| i.az.as_str());
        let now = self.clock.now();
        let view = watch.poll(now, zones.filter(|z| !z.is_empty())).await;
        (view, watch.cache().error().cloned())
    }

    /// The capacity choices' subnets' zones, read until EC2 gave them (a failure is tried again
    /// a minute later): a subnet never moves.
    async fn subnet_zones(&mut self) -> BTreeMap<String, String> {
        let now = self.clock.now();
        let due =
            (self.subnets_asked).is_none_or(|at| now.saturating_sub(at) >= millis(SUBNETS_RETRY));
        if !self.subnets_unread.is_empty() && due {
            self.subnets_asked = Some(now);
            let wanted = self.subnets_unread.clone();
            match super::ec2::subnet_zones(&self.clients.ec2, wanted).await {
                Ok(zones) => {
                    tracing::info!(?zones, "capacity choices' subnets read");
                    self.subnets_unread.clear();
                    self.subnet_zones = zones;
                }
                Err(e) => tracing::warn!("capacity choices' zones unknown: {e}"),
            }
        }
        self.subnet_zones.clone()
    }

    async fn resolve_launch_template(&mut self, cfg: &Config) -> Result<(), Ec2Error> {
        let Some(wanted) = cfg.workers.launch_template.as_ref() else {
            return Ok(());
        };
        if self.launch_template_id.is_none() {
            let id = resolve_launch_template(&self.clients.ec2, wanted).await?;
            tracing::info!(launch_template = %wanted, id, "worker launch template resolved");
            self.launch_template_id = Some(id);
        }
        Ok(())
    }
}

/// A source's failure as the snapshot carries it: the words a person reads (`Snapshot`).
fn worded<T, E: std::fmt::Display>(read: Result<T, E>) -> Read<T> {
    read.map_err(Unread::from_error)
}
