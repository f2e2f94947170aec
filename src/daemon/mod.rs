//! `dtd run`: the control loop on the master node, observe -> decide -> act, on every change
//! it hears of (an event, a marker, an acknowledgement, a finished listing) and at least every
//! `interval`.

mod ec2_view;
mod inbox;
mod lock;
mod shared;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::act;
use crate::act::apply::Actuators;
use crate::alerts::Alerts;
use crate::aws::Clients;
use crate::config::Config;
use crate::deadline::Deadline;
use crate::decide::{decide_from, Rules};
use crate::fsutil::now_millis;
use crate::metrics::server::ServeError;
use crate::metrics::{FleetNow, Metrics, PassView};
use crate::model::*;
use crate::observe::acks::AckReader;
use crate::observe::ec2::{resolve_launch_template, Ec2Observer};
use crate::observe::efs::MountTargetWatch;
use crate::observe::markers::MarkerScanner;
use crate::observe::progress::ProgressReader;
use crate::observe::shared_changes::{self, Watched};
use crate::status::{PassFacts, StatusReport};
use crate::store::{load_state_resuming, save_json, Paths, StoreError};
use ec2_view::Ec2View;
use inbox::Inbox;
pub use lock::{lock_state_dir, Lock};
use shared::SharedReaders;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("creating state directory {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("another dtd holds {0}; only one daemon may manage a cluster")]
    Locked(String),
    #[error("{0} is not a regular file; move it aside (a worker may have put it there)")]
    LockNotAFile(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("installing signal handler: {0}")]
    Signal(std::io::Error),
    #[error(transparent)]
    Metrics(#[from] ServeError),
    #[error("{0}")]
    JobOwner(String),
    #[error("alerts: {0}")]
    Alerts(String),
}

pub struct Daemon {
    cfg: Config,
    paths: Paths,
    clients: Clients,
    /// Messages from the event queue, and those received but not yet heeded by a pass.
    inbox: Inbox,
    ec2: Ec2View,
    /// The worker group as last read, and whether it is to be read again on the next pass (an
    /// event came, a group action was taken, a listing finished): not on every pass.
    group: Option<Result<Group, String>>,
    group_due: bool,
    /// The shared file system's mount-target zones, when `shared_fs_id` is configured.
    mount_targets: Option<MountTargetWatch>,
    /// Read on a thread of their own, with `shared_fs`'s deadline.
    readers: Arc<Mutex<SharedReaders>>,
    /// Deadlines for work on the shared directory, and on the state directory.
    shared_fs: Deadline,
    state_fs: Deadline,
    /// Journal events of this pass, appended at the next write of the state directory.
    unjournaled: Vec<Event>,
    /// Webhooks the events of their kinds are handed to as they are recorded.
    alerts: Alerts,
    launch_template_id: Option<String>,
    /// What applying an outcome acts on.
    actuators: Actuators,
    state: State,
    /// What state.json holds, so an unchanged state is not rewritten (and fsynced) every pass.
    saved: Option<State>,
    /// Last failure per source or action, so a lasting failure is logged once, not every pass.
    failures: BTreeMap<&'static str, String>,
    errors: Vec<String>,
    /// Updated after every pass; served at `metrics.listen`, if configured.
    metrics: Metrics,
}

impl Daemon {
    pub fn new(cfg: Config, clients: Clients) -> Result<Daemon, DaemonError> {
        let paths = Paths::new(&cfg.state_dir);
        let state = load_state_resuming(&paths.state(), &cfg.generation_file)?;
        let mut metrics = Metrics::new(
            &clients.calls,
            crate::status::read_totals(&paths.status()),
            now_millis(),
            cfg.interval,
        );
        if let (Some(addr), Some(registry)) = (cfg.metrics.listen, metrics.take_registry()) {
            let bound = crate::metrics::server::spawn(addr, registry, metrics.health())?;
            tracing::info!("serving http://{bound}/metrics and /healthz");
        }
        let owner = Some(cfg.job.owner_uid().map_err(DaemonError::JobOwner)?);
        tracing::info!(
            uid = owner,
            "the job's files are believed when this user owns them"
        );
        let readers = SharedReaders {
            markers: MarkerScanner::new(&cfg.shared_dir),
            acks: AckReader::new(
                &cfg.job.ack.file,
                cfg.job.ack.host_worker_log.as_deref(),
                owner,
            ),
            resume: paths.resume(),
            progress: (cfg.job.stall.as_ref())
                .map(|_| ProgressReader::new(&cfg.job.progress, owner)),
        };
        let actuators = Actuators::new(
            &cfg,
            clients.ec2.clone(),
            clients.autoscaling.clone(),
            owner,
        );
        let deadline = |what: &str, dir: &std::path::Path| {
            Deadline::new(format!("{what} {}", dir.display()), cfg.fs_timeout)
        };
        Ok(Daemon {
            shared_fs: deadline("shared directory", &cfg.shared_dir),
            state_fs: deadline("state directory", &paths.dir),
            readers: Arc::new(Mutex::new(readers)),
            unjournaled: Vec::new(),
            alerts: Alerts::new(&cfg).map_err(DaemonError::Alerts)?,
            ec2: Ec2View::new(
                Ec2Observer::new(
                    clients.ec2.clone(),
                    &cfg.workers.tags,
                    cfg.workers.page_size,
                ),
                cfg.resync,
            ),
            group: None,
            group_due: true,
            mount_targets: (cfg.shared_fs_id.as_deref().zip(clients.efs.clone()))
                .map(|(fs, efs)| MountTargetWatch::new(efs, fs, cfg.shared_fs_refresh)),
            actuators,
            clients,
            inbox: Inbox::default(),
            launch_template_id: None,
            failures: BTreeMap::new(),
            saved: None,
            errors: Vec::new(),
            metrics,
            state,
            paths,
            cfg,
        })
    }

    /// Runs passes until SIGTERM or SIGINT; a pass in progress is finished first.
    pub async fn run(mut self) -> Result<(), DaemonError> {
        let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signal)?;
        let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?;
        tracing::info!(cluster = %self.cfg.cluster, generation = self.state.generation, state = %self.paths.dir.display(), "dtd started");
        let queue = self
            .clients
            .sqs
            .clone()
            .zip(self.cfg.events.queue_url.clone());
        if let Some((sqs, url)) = queue {
            tracing::info!(queue = %url, "listening for interruption and lifecycle events");
            self.inbox.listen(sqs, url, self.cfg.events.wait);
        }
        self.alerts.start();
        let mut changes = self.watch_shared_dir();
        loop {
            self.pass().await;
            self.ec2.start_resync(Instant::now());
            let sleep = tokio::time::sleep(self.cfg.interval);
            tokio::select! {
                _ = sleep => {}
                Some(update) = self.inbox.recv() => self.inbox.take(update),
                Some(()) = next_change(&mut changes) => {}
                // What the listing found is decided on at once: it may be what an event missed.
                _ = self.ec2.finish_resync() => self.group_due = true,
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
            // Everything else already waiting joins this pass.
            self.inbox.take_waiting();
            self.group_due |= self.inbox.take_fresh();
        }
        tracing::info!("dtd stopping");
        Ok(())
    }

    pub async fn pass(&mut self) {
        let started = Instant::now();
        self.errors.clear();
        let (snap, stalled, calls) = self.observe().await;
        let events = self.source_events(&snap);
        self.record(&events);
        let tagged = match stalled {
            true => self.hold(&snap, calls, started).await,
            false => self.decide_and_act(&snap, calls, started).await,
        };
        self.ec2.restore(snap.instances);
        self.ec2.tagged(&tagged);
    }

    /// Reads every source: the shared directory first, for the marker IPs no known worker has,
    /// then the instances to read again and the group at the same time. Returns the snapshot,
    /// whether the shared directory is stuck, and the EC2 calls made.
    async fn observe(&mut self) -> (Snapshot, bool, u32) {
        let listing_calls = self.ec2.first_listing().await;
        let reads_progress = self.cfg.job.stall.is_some();
        let shared = shared::read(&self.readers, &mut self.shared_fs, reads_progress).await;
        let stalled = shared.markers.is_err() && self.shared_fs.is_stuck();
        let template = self.resolve_launch_template().await;
        let named = self.inbox.instances();
        let read_group = self.group_due || matches!(self.group, Some(Err(_)));
        let group_name = self.cfg.workers.auto_scaling_group.as_deref();
        let group_client = self.clients.autoscaling.as_ref();
        let (refreshed, group) = tokio::join!(
            self.ec2.refresh(named, shared.markers.as_ref().ok()),
            async {
                match (read_group, group_name.zip(group_client)) {
                    (true, Some((name, client))) => {
                        Some(crate::observe::asg::read_group(client, name).await)
                    }
                    _ => None,
                }
            }
        );
        if let Some(g) = group {
            self.group = Some(g);
            self.group_due = false;
        }
        let instances = match template {
            Ok(()) => self.ec2.lend(refreshed.error),
            Err(e) => Err(e),
        };
        let mount_targets = self.observe_mount_targets(&instances).await;
        let snap = Snapshot {
            instances,
            notices: self.inbox.notices(&shared.markers),
            markers: shared.markers,
            acks: shared.acks,
            group: self.group.clone(),
            resume_requested: shared.resume_requested,
            mount_targets,
            progress: shared.progress,
        };
        (snap, stalled, listing_calls + refreshed.calls)
    }

    /// Returns the status tags EC2 accepted.
    async fn decide_and_act(
        &mut self,
        snap: &Snapshot,
        calls: u32,
        started: Instant,
    ) -> BTreeMap<WorkerStatus, Vec<String>> {
        let unheeded: Vec<&Notice> = (snap.notices.iter())
            .filter(|n| !self.state.noticed.contains_key(&n.id))
            .collect();
        let mut plan = decide_from(
            &self.rules(),
            snap,
            std::mem::take(&mut self.state),
            now_millis(),
        );
        let heeded = unheeded
            .into_iter()
            .filter(|n| plan.state.noticed.contains_key(&n.id));
        self.metrics.note_notices(heeded);
        let decided = std::mem::take(&mut plan.outcome.events);
        self.record(&decided);
        // Remembered before acting: a daemon killed mid-act finds the decision and re-applies it.
        self.state = std::mem::take(&mut plan.state);
        self.save_state().await;
        let tagged = self.apply(&plan.outcome).await;
        self.save_state().await;
        let (read, deleted) = self.inbox.settle(&plan.outcome.deferred_notices).await;
        self.note_failure("event queue", read);
        self.note_failure("event queue deletes", deleted);
        self.write_status(&plan.outcome, snap, calls, started.elapsed())
            .await;
        tagged
    }

    /// The shared directory is not answering: nothing decided, nothing acted on, no queue
    /// message deleted; the status says so (the plan is only for the report).
    async fn hold(
        &mut self,
        snap: &Snapshot,
        calls: u32,
        started: Instant,
    ) -> BTreeMap<WorkerStatus, Vec<String>> {
        let plan = decide_from(&self.rules(), snap, self.state.clone(), now_millis());
        self.flush_journal().await;
        self.write_status(&plan.outcome, snap, calls, started.elapsed())
            .await;
        BTreeMap::new()
    }

    /// Markers and acknowledgements checked every `shared_poll` on a thread of their own.
    fn watch_shared_dir(&self) -> Option<mpsc::Receiver<()>> {
        let ack = &self.cfg.job.ack;
        let files = std::iter::once(ack.file.clone()).chain(ack.host_worker_log.clone());
        let watched = Watched {
            dir: self.cfg.shared_dir.clone(),
            files: files.chain([self.paths.resume()]).collect(),
        };
        match shared_changes::spawn(watched, self.cfg.shared_poll) {
            Ok(rx) => Some(rx),
            Err(e) => {
                tracing::warn!(
                    "cannot watch the shared directory ({e}); a pass every interval only"
                );
                None
            }
        }
    }

    /// The mount-target zones, re-read when due (see `MountTargetCache::due`).
    async fn observe_mount_targets(
        &mut self,
        instances: &Result<Vec<Instance>, String>,
    ) -> Option<MountTargets> {
        let watch = self.mount_targets.as_mut()?;
        let zones = (instances.iter().flatten()).map(|i| i.az.as_str());
        let view = watch
            .poll(Instant::now(), zones.filter(|z| !z.is_empty()))
            .await;
        let error = watch.cache().error().map(str::to_string);
        self.note_failure("EFS mount targets", error);
        view
    }

    fn rules(&self) -> Rules {
        Rules::from_config(&self.cfg, self.launch_template_id.clone())
    }

    async fn resolve_launch_template(&mut self) -> Result<(), String> {
        let Some(wanted) = self.cfg.workers.launch_template.as_deref() else {
            return Ok(());
        };
        if self.launch_template_id.is_none() {
            let id = resolve_launch_template(&self.clients.ec2, wanted).await?;
            tracing::info!(launch_template = %wanted, id, "worker launch template resolved");
            self.launch_template_id = Some(id);
        }
        Ok(())
    }

    /// Journals a source failing or recovering once per change, not once per pass.
    fn source_events(&mut self, snap: &Snapshot) -> Vec<Event> {
        let sources: [(&'static str, Option<&String>); 3] = [
            ("EC2 instances", snap.instances.as_ref().err()),
            ("prepare-data markers", snap.markers.as_ref().err()),
            ("acknowledgements", snap.acks.as_ref().err()),
        ];
        let mut events = Vec::new();
        for (name, err) in sources {
            if let Some(kind) = self.note_failure(name, err.cloned()) {
                let message = match err {
                    Some(e) => format!("{name} could not be read completely: {e}; holding"),
                    None => format!("{name} readable again"),
                };
                events.push(Event::new(now_millis(), kind, message));
            }
        }
        events
    }

    /// Records the outcome of a source or action; returns the event kind when it changed.
    fn note_failure(&mut self, what: &'static str, err: Option<String>) -> Option<EventKind> {
        match err {
            Some(e) => {
                self.errors.push(format!("{what}: {e}"));
                let first = !self.failures.contains_key(what);
                if self.failures.get(what) != Some(&e) {
                    tracing::warn!("{what}: {e}");
                    self.failures.insert(what, e);
                }
                first.then_some(EventKind::SourceFailed)
            }
            None => self.failures.remove(what).map(|_| {
                tracing::info!("{what}: recovered");
                EventKind::SourceRecovered
            }),
        }
    }

    /// Applies the outcome (see `act::apply`), then records what it did.
    /// Returns the status tags EC2 accepted.
    async fn apply(&mut self, outcome: &Outcome) -> BTreeMap<WorkerStatus, Vec<String>> {
        // What the group looks like after this is worth reading on the next pass.
        let group_changes = |a: &Action| {
            !matches!(
                a,
                Action::Tag { .. } | Action::Terminate { .. } | Action::Launch { .. }
            )
        };
        self.group_due |= outcome.actions.iter().any(group_changes);
        let applied = act::apply::apply(
            &self.actuators,
            outcome,
            &mut self.state,
            &mut self.shared_fs,
            &self.failures,
        )
        .await;
        let mut tagged = BTreeMap::new();
        for (what, err) in applied.results {
            if what == act::apply::STATUS_TAGS && err.is_none() {
                tagged = outcome.tags();
            }
            self.note_failure(what, err);
        }
        self.record(&applied.events);
        tagged
    }

    /// Logs events now and queues them for the webhooks that want them (without waiting); they
    /// reach the journal at the next write of the state directory.
    fn record(&mut self, events: &[Event]) {
        self.metrics.note_events(events);
        for e in events {
            let instance = e.instance.as_deref().unwrap_or("-");
            match e.kind.is_refusal() {
                true => tracing::warn!(kind = %e.kind, instance, "{}", e.message),
                false => tracing::info!(kind = %e.kind, instance, "{}", e.message),
            }
        }
        self.alerts.offer(events);
        self.unjournaled.extend_from_slice(events);
    }

    async fn flush_journal(&mut self) {
        if self.unjournaled.is_empty() {
            return;
        }
        let (path, events) = (self.paths.journal(), self.unjournaled.clone());
        let limits = self.cfg.journal;
        let append = move || act::journal::append(&path, &events, limits);
        let r = self
            .state_fs
            .try_run("appending to the journal", append)
            .await;
        if let Ok(rotated) = r {
            self.unjournaled.clear();
            if rotated {
                tracing::info!(keep = limits.keep, "events journal rotated");
            }
        }
        self.note_failure("events journal", r.err());
    }

    /// The journal, then the state it explains.
    async fn save_state(&mut self) {
        self.flush_journal().await;
        if self.saved.as_ref() == Some(&self.state) {
            return;
        }
        // The copy written is the one remembered as saved: one clone, not two.
        let (path, state) = (self.paths.state(), self.state.clone());
        let save = move || {
            save_json(&path, &state)
                .map(|_| state)
                .map_err(|e| e.to_string())
        };
        let r = self.state_fs.try_run("saving the state", save).await;
        let failed = r.as_ref().err().cloned();
        if let Ok(saved) = r {
            self.saved = Some(saved);
        }
        self.note_failure("state file", failed);
    }

    async fn write_status(
        &mut self,
        outcome: &Outcome,
        snap: &Snapshot,
        calls: u32,
        took: Duration,
    ) {
        self.flush_journal().await;
        let now = now_millis();
        let slots = &self.cfg.workers.slots;
        let fleet = (snap.instances.as_ref().ok())
            .map(|list| FleetNow::count(list, snap.markers.as_ref().ok(), &self.state, slots));
        self.metrics.count_gpu_time(now, fleet);
        let facts = PassFacts {
            outcome,
            snap,
            state: &self.state,
            queue_error: self.inbox.error(),
            mount_targets: (self.mount_targets.as_ref()).map(|w| w.cache().summary()),
            ec2_calls: calls,
            listed_at: self.ec2.listed_at(),
            pass_ms: took.as_millis() as u64,
            errors: &self.errors,
            totals: self.metrics.totals(),
            alerts: self.alerts.status(),
            now,
        };
        let report = StatusReport::build(&self.cfg, facts);
        let view = PassView {
            report: &report,
            state: &self.state,
            markers: snap.markers.as_ref().ok(),
        };
        self.metrics.after_pass(view, now, took);
        let path = self.paths.status();
        let save = move || save_json(&path, &report).map_err(|e| e.to_string());
        if let Err(e) = self.state_fs.try_run("writing the status", save).await {
            tracing::warn!("{e}");
        }
    }
}

/// The next change in the shared directory; never, when it is not watched.
async fn next_change(changes: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match changes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
