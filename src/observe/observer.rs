//! The whole snapshot of one pass, from every source: the shared directory first (for the marker
//! IPs no known worker has), then the instances to read again, the worker group and the capacity
//! reservations at the same time, the launch template once, and the mount-target zones when
//! due. The daemon's loop asks for it and decides on it; what a source keeps between passes (the
//! EC2 view, the event queue's inbox, the group as last read, the reservations) lives here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::acks::{AckReader, KnownIps};
use super::agents::{Agents, Heard, ListenError, Proof};
use super::asg::{self, GroupError};
use super::ec2::{resolve_launch_template, Ec2Error, Ec2Observer};
use super::ec2_view::Ec2View;
use super::efs::{MountTargetError, MountTargetWatch};
use super::inbox::{Heeded, Inbox};
use super::markers::book::{self, Book, Judging, Keys};
use super::markers::{MarkerScanner, Scan};
use super::progress::ProgressReader;
use super::queue::ReceiveError;
use super::reservations::{self, ReservationWatch};
use super::shared::{self, SharedReaders};
use super::shared_changes::{self, Watched};
use super::sources;
use crate::aws::Clients;
use crate::clock::{millis, SharedClock};
use crate::config::Config;
use crate::config::Reports;
use crate::deadline::Deadline;
use crate::model::*;
use crate::protocol::markers::MarkerName;
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
    /// The reports believed so far, and what a new one must be to be believed.
    book: Book,
    /// The agents' port, with signed reports (`take_reports`).
    agents: Option<Agents>,
    /// The keys `dtd` keeps changed (or may have): the agents' port is told before the next pass.
    pins_stale: bool,
    /// The complete listing the agents' port last forgot gone instances by.
    forgot_by: Option<Millis>,
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
            markers: (cfg.workers.reports == Reports::Unsigned)
                .then(|| MarkerScanner::new(&cfg.shared_dir)),
            strays: (cfg.workers.reports == Reports::Signed)
                .then(|| super::strays::Strays::new(&cfg.shared_dir)),
            acks: AckReader::new(&ack.file, log, owner, known.clone()),
            resume: paths.resume(),
            capacity_refusals: paths.capacity_refusals(),
            progress: sources::reads_progress(cfg)
                .then(|| ProgressReader::new(&cfg.job.progress, owner)),
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
            book: Book::default(),
            agents: None,
            pins_stale: false,
            forgot_by: None,
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
        let agents = Agents::start(cfg, self.clock.clone(), pins.keys()).await?;
        let bound = agents.bound;
        self.agents = Some(agents);
        Ok(bound)
    }

    /// Before the first pass: waits until the agents of `known` (the instances whose keys dtd
    /// kept) have proved themselves again, or `most`, but at least `least` (agents retry every
    /// 100 ms at first), so that a restarted dtd does not decide on what it has not yet heard.
    /// Returns how many of `known` were heard.
    pub async fn await_agents(&self, known: &[String], least: Duration, most: Duration) -> usize {
        let Some(agents) = &self.agents else {
            return 0;
        };
        let started = tokio::time::Instant::now();
        loop {
            let proved = agents.board().proved(known);
            let waited = started.elapsed();
            if waited >= most || (waited >= least && proved == known.len()) {
                return proved;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for news worth a pass before the clock asks for one: the event queue's messages
    /// (or its failure), an agent's report, or a complete listing finished, whose view may hold
    /// what an event missed, and after which the group is read again. Cancel-safe, as every
    /// wait is.
    pub async fn news(&mut self) {
        let agents = async {
            match &self.agents {
                Some(a) => a.board().news().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(update) = self.inbox.recv() => self.inbox.take(update),
            _ = self.ec2.finish_resync() => self.group_due = true,
            () = agents => {}
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
        let shared = shared::read(&self.readers, shared_fs, sources::reads_progress(cfg)).await;
        let stalled = shared.acks.is_err() && shared_fs.is_stuck();
        let template = self.resolve_launch_template(cfg).await;
        let named = self.inbox.instances();
        let now = self.clock.now();
        let heard = self.hear(pins, now);
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
            (Some(heard), _) => Ok(self.judge_heard(&heard, &shared.strays, &instances, pins, now)),
            (None, Some(scan)) => scan.map(|scan| self.judge_files(cfg, &scan, now)),
            (None, None) => Ok(Markers::default()),
        };
        let (mount_targets, mount_targets_error) = self.mount_targets(&instances).await;
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

    /// What the agents' port has heard since the last pass (signed reports), once it knows the
    /// keys dtd keeps now.
    fn hear(&mut self, pins: Pins<'_>, now: Millis) -> Option<Heard> {
        let board = self.agents.as_ref()?.board();
        if std::mem::take(&mut self.pins_stale) {
            board.set_pins(pins.keys());
        }
        Some(board.take(now))
    }

    /// What of the agents' reports is believed, against EC2's view just read: the instance at
    /// each report's IP, the key dtd pinned for it, else the one its agent proved (which decide
    /// pins on this same pass from `Markers::key_proofs`).
    fn judge_heard(
        &mut self,
        heard: &Heard,
        strays: &[MarkerName],
        instances: &Result<Vec<Instance>, Ec2Error>,
        pins: Pins<'_>,
        now: Millis,
    ) -> Markers {
        let proofs: HashMap<IpAddr, &Proof> = heard.proofs.iter().map(|p| (p.ip, p)).collect();
        let ips: HashSet<IpAddr> = (heard.scan.files.keys().map(|n| n.ip))
            .chain(heard.refused.iter().map(|r| r.ip))
            .chain(strays.iter().map(|n| n.ip))
            .chain(proofs.keys().copied())
            .collect();
        let mut keys = Keys::default();
        let mut key_proofs = Vec::new();
        if let Ok(list) = instances {
            keys.complete = true;
            for i in list.iter().filter(|i| ips.contains(&i.ip)) {
                let proved = proofs
                    .get(&i.ip)
                    .filter(|p| p.instance_id == i.id)
                    .map(|p| &p.key);
                let pinned = pins.get(&i.id);
                if let Some(k) = proved.filter(|k| Some(*k) != pinned) {
                    key_proofs.push((i.id.clone(), k.clone()));
                }
                let key = pinned.or(proved).cloned();
                keys.by_ip.insert(i.ip, (i.id.clone(), key));
            }
            self.forget_gone(list, heard, now);
        }
        self.pins_stale |= !key_proofs.is_empty();
        let floor = |id: &str, kind| pins.floor(id, kind);
        let judging = Judging {
            keys: &keys,
            mode: Reports::Signed,
            now,
            heard: &heard.heard,
            floor: &floor,
        };
        let mut markers = self.book.judge(&heard.scan, &judging);
        self.book
            .refused_on_arrival(&heard.refused, &keys, &mut markers);
        self.book.strays(strays, &keys, &mut markers);
        markers.key_proofs = key_proofs;
        markers
    }

    /// Once per complete listing: the agents' port forgets what it heard of instances gone (EC2
    /// lists another at their IP, or none), unless heard in the last minute (new, not listed
    /// yet). An agent forgotten while still connected is disconnected: it says it all again.
    fn forget_gone(&mut self, list: &[Instance], heard: &Heard, now: Millis) {
        let (Some(agents), Some(listed_at)) = (&self.agents, self.ec2.listed_at()) else {
            return;
        };
        if self.forgot_by == Some(listed_at) {
            return;
        }
        self.forgot_by = Some(listed_at);
        self.pins_stale = true;
        let at: HashMap<IpAddr, &str> = list.iter().map(|i| (i.ip, i.id.as_str())).collect();
        let lately = |id: &str| {
            heard
                .heard
                .get(id)
                .is_some_and(|h| now.saturating_sub(*h) < 60_000)
        };
        agents
            .board()
            .forget(|id, ip| at.get(&ip) == Some(&id) || lately(id));
    }

    /// The 2018 protocol's files (`workers.reports: unsigned`): the prepare-data markers as
    /// they are.
    fn judge_files(&mut self, cfg: &Config, scan: &Scan, now: Millis) -> Markers {
        let keys = Keys::default();
        let nothing = |_: &str, _| None;
        let judging = Judging {
            keys: &keys,
            mode: cfg.workers.reports,
            now,
            heard: &HashMap::new(),
            floor: &nothing,
        };
        self.book.judge(scan, &judging)
    }

    /// The workers the job's acknowledgements may be about: the members and the leaving workers
    /// of `st`, as decided (before acting, so a line the job writes about them is read).
    pub fn know(&self, st: &State) {
        let ips = (st.members.iter().map(|m| m.ip)).chain(st.removals.iter().map(|r| r.ip));
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        *known = ips.collect();
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
