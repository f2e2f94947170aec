//! `dtd run`: the control loop on the master node, observe -> decide -> act, every `interval`.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::act;
use crate::aws::Clients;
use crate::config::{Config, Notify};
use crate::deadline::Deadline;
use crate::decide::{decide_from, worker_views, Rules};
use crate::fsutil::now_millis;
use crate::model::*;
use crate::observe::acks::AckReader;
use crate::observe::ec2::{resolve_launch_template, Ec2Observer};
use crate::observe::efs::MountTargetWatch;
use crate::observe::eventbridge::Parsed;
use crate::observe::markers::MarkerScanner;
use crate::observe::queue::{self, QueueUpdate, Received};
use crate::status::{SourceStatus, StatusReport};
use crate::store::{load_state, require_mounted, save_json, Paths, StoreError};
use crate::untrusted::{self, libc_flags};

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
}

pub struct Daemon {
    cfg: Config,
    paths: Paths,
    clients: Clients,
    /// Messages from the event queue, and those received but not yet heeded by a pass.
    queue: Option<mpsc::Receiver<QueueUpdate>>,
    inbox: Vec<Received>,
    queue_error: Option<String>,
    ec2: Ec2Observer,
    /// The shared file system's mount-target zones, when `shared_fs_id` is configured.
    mount_targets: Option<MountTargetWatch>,
    /// Read on a thread of their own, with `shared_fs`'s deadline.
    readers: Arc<Mutex<SharedReaders>>,
    /// Deadlines for work on the shared directory, and on the state directory.
    shared_fs: Deadline,
    state_fs: Deadline,
    /// Journal events of this pass, appended at the next write of the state directory.
    unjournaled: Vec<Event>,
    launch_template_id: Option<String>,
    state: State,
    /// What state.json holds, so an unchanged state is not rewritten (and fsynced) every pass.
    saved: Option<State>,
    /// Last failure per source or action, so a lasting failure is logged once, not every pass.
    failures: BTreeMap<&'static str, String>,
    errors: Vec<String>,
}

/// Held for the daemon's lifetime: a second `dtd` on the same state directory refuses to start.
pub type Lock = nix::fcntl::Flock<std::fs::File>;

/// Checks the state directory is on the shared file system, creates it, and locks it.
pub fn lock_state_dir(cfg: &Config) -> Result<Lock, DaemonError> {
    let paths = Paths::new(&cfg.state_dir);
    require_mounted(&paths.dir, &cfg.shared_dir, cfg.allow_local_state_dir)?;
    std::fs::create_dir_all(&paths.dir).map_err(|source| DaemonError::StateDir {
        path: paths.dir.display().to_string(),
        source,
    })?;
    let lock_path = paths.lock();
    let state_dir_error = |source| DaemonError::StateDir {
        path: lock_path.display().to_string(),
        source,
    };
    // Neither a FIFO (an open that blocks) nor a link planted where the lock goes.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc_flags::NONBLOCK | libc_flags::NOFOLLOW)
        .open(&lock_path)
        .map_err(state_dir_error)?;
    if !file.metadata().map_err(state_dir_error)?.is_file() {
        return Err(DaemonError::LockNotAFile(lock_path.display().to_string()));
    }
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| DaemonError::Locked(lock_path.display().to_string()))
}

/// What the pass reads from the shared directory, all on one thread with one deadline.
struct SharedReaders {
    markers: MarkerScanner,
    acks: AckReader,
    resume: PathBuf,
}

struct SharedView {
    markers: Result<Markers, String>,
    acks: Result<Acks, String>,
    resume_requested: Option<Millis>,
}

impl SharedReaders {
    fn read(&mut self) -> SharedView {
        SharedView {
            markers: self.markers.scan(),
            acks: self.acks.read(),
            resume_requested: resume_requested(&self.resume),
        }
    }
}

/// `dtctl resume` writes the time it was asked; anything unreadable is no request.
fn resume_requested(path: &std::path::Path) -> Option<Millis> {
    let bytes = untrusted::read(path, 32).ok()??;
    String::from_utf8_lossy(&bytes).trim().parse().ok()
}

impl Daemon {
    pub fn new(cfg: Config, clients: Clients) -> Result<Daemon, DaemonError> {
        let paths = Paths::new(&cfg.state_dir);
        let state = load_state(&paths.state())?;
        let readers = SharedReaders {
            markers: MarkerScanner::new(&cfg.shared_dir),
            acks: AckReader::new(&cfg.job.ack.file, cfg.job.ack.host_worker_log.as_deref()),
            resume: paths.resume(),
        };
        let deadline = |what: &str, dir: &std::path::Path| {
            Deadline::new(format!("{what} {}", dir.display()), cfg.fs_timeout)
        };
        Ok(Daemon {
            shared_fs: deadline("shared directory", &cfg.shared_dir),
            state_fs: deadline("state directory", &paths.dir),
            readers: Arc::new(Mutex::new(readers)),
            unjournaled: Vec::new(),
            ec2: Ec2Observer::new(
                clients.ec2.clone(),
                &cfg.workers.tags,
                cfg.workers.page_size,
            ),
            mount_targets: (cfg.shared_fs_id.as_deref().zip(clients.efs.clone()))
                .map(|(fs, efs)| MountTargetWatch::new(efs, fs, cfg.shared_fs_refresh)),
            clients,
            queue: None,
            inbox: Vec::new(),
            queue_error: None,
            launch_template_id: None,
            failures: BTreeMap::new(),
            saved: None,
            errors: Vec::new(),
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
        self.start_queue();
        loop {
            self.pass().await;
            let sleep = tokio::time::sleep(self.cfg.interval);
            tokio::select! {
                _ = sleep => {}
                Some(update) = recv(&mut self.queue) => self.take(update),
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
            // Everything else already waiting joins this pass.
            while let Some(Ok(update)) = self.queue.as_mut().map(|q| q.try_recv()) {
                self.take(update);
            }
        }
        tracing::info!("dtd stopping");
        Ok(())
    }

    fn start_queue(&mut self) {
        if let (Some(sqs), Some(url)) = (&self.clients.sqs, &self.cfg.events.queue_url) {
            tracing::info!(queue = %url, "listening for interruption and lifecycle events");
            self.queue = Some(queue::spawn(sqs.clone(), url.clone(), self.cfg.events.wait));
        }
    }

    fn take(&mut self, update: QueueUpdate) {
        match update {
            QueueUpdate::Messages(m) => {
                self.queue_error = None;
                keep(&mut self.inbox, m);
            }
            QueueUpdate::Failed(e) => self.queue_error = Some(e),
        }
    }

    /// This pass's notices: the queue's and the agents' markers'.
    fn notices(&self, markers: &Result<Markers, String>) -> Vec<Notice> {
        let from_queue = self.inbox.iter().flat_map(|r| match &r.parsed {
            Parsed::Notices(n) => n.clone(),
            Parsed::Wake(why) => {
                tracing::info!("event: {why}");
                Vec::new()
            }
            Parsed::Ignored(why) => {
                tracing::debug!("event ignored: {why}");
                Vec::new()
            }
        });
        let from_agents = markers.iter().flat_map(|m| m.notices.iter().cloned());
        from_queue.chain(from_agents).collect()
    }

    pub async fn pass(&mut self) {
        let started = Instant::now();
        self.errors.clear();
        let (instances, calls) = self.observe_ec2().await;
        let mount_targets = self.observe_mount_targets(&instances).await;
        let shared = self.read_shared().await;
        let stalled = shared.markers.is_err() && self.shared_fs.is_stuck();
        let snap = Snapshot {
            instances,
            notices: self.notices(&shared.markers),
            markers: shared.markers,
            acks: shared.acks,
            group: self.observe_group().await,
            resume_requested: shared.resume_requested,
            mount_targets,
        };
        let events = self.source_events(&snap);
        self.record(&events);
        if stalled {
            return self.hold(&snap, calls, started).await;
        }
        let mut plan = decide_from(
            &self.rules(),
            &snap,
            std::mem::take(&mut self.state),
            now_millis(),
        );
        let decided = std::mem::take(&mut plan.events);
        self.record(&decided);
        // Remembered before acting: a daemon killed mid-act finds the decision and re-applies it.
        self.state = std::mem::take(&mut plan.state);
        self.save_state().await;
        self.apply(&plan).await;
        self.save_state().await;
        self.settle_inbox(&plan.deferred_notices).await;
        self.write_status(&plan, &snap, calls, started.elapsed())
            .await;
    }

    /// The shared directory is not answering: nothing decided, nothing acted on, no queue
    /// message deleted; the status says so (the plan is only for the report).
    async fn hold(&mut self, snap: &Snapshot, calls: u32, started: Instant) {
        let plan = decide_from(&self.rules(), snap, self.state.clone(), now_millis());
        self.flush_journal().await;
        self.write_status(&plan, snap, calls, started.elapsed())
            .await;
    }

    /// Markers, acknowledgements and `dtctl resume`, read within the shared directory's deadline.
    async fn read_shared(&mut self) -> SharedView {
        let readers = Arc::clone(&self.readers);
        let read = move || {
            let mut r = readers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            r.read()
        };
        match self
            .shared_fs
            .run("reading markers and acknowledgements", read)
            .await
        {
            Ok(view) => view,
            Err(stalled) => SharedView {
                markers: Err(stalled.clone()),
                acks: Err(stalled),
                resume_requested: None,
            },
        }
    }

    /// Deletes the messages this pass heeded; kept for the next pass if deleting failed or the
    /// pass deferred them.
    async fn settle_inbox(&mut self, deferred: &[String]) {
        let queue_error = self.queue_error.clone();
        self.note_failure("event queue", queue_error);
        let (Some(sqs), Some(url)) = (&self.clients.sqs, &self.cfg.events.queue_url) else {
            return;
        };
        let is_deferred = |r: &Received| matches!(&r.parsed, Parsed::Notices(n) if n.iter().any(|n| deferred.contains(&n.id)));
        let (keep, heeded): (Vec<Received>, Vec<Received>) = std::mem::take(&mut self.inbox)
            .into_iter()
            .partition(is_deferred);
        self.inbox = keep;
        if heeded.is_empty() {
            return;
        }
        let receipts: Vec<String> = heeded.iter().map(|r| r.receipt.clone()).collect();
        let (deleted, err) = act::queue::delete(sqs, url, &receipts).await;
        if deleted < receipts.len() {
            self.inbox.extend(heeded);
        }
        self.note_failure("event queue deletes", err);
    }

    async fn observe_group(&self) -> Option<Result<Group, String>> {
        let name = self.cfg.workers.auto_scaling_group.as_deref()?;
        let client = self.clients.autoscaling.as_ref()?;
        Some(crate::observe::asg::read_group(client, name).await)
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

    async fn observe_ec2(&mut self) -> (Result<Vec<Instance>, String>, u32) {
        if let Err(e) = self.resolve_launch_template().await {
            return (Err(e), 1);
        }
        match self.ec2.list().await {
            Ok(l) => (Ok(l.instances), l.calls),
            Err(e) => (Err(e), 0),
        }
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
    fn note_failure(&mut self, what: &'static str, err: Option<String>) -> Option<&'static str> {
        match err {
            Some(e) => {
                self.errors.push(format!("{what}: {e}"));
                let first = !self.failures.contains_key(what);
                if self.failures.get(what) != Some(&e) {
                    tracing::warn!("{what}: {e}");
                    self.failures.insert(what, e);
                }
                first.then_some("source_failed")
            }
            None => self.failures.remove(what).map(|_| {
                tracing::info!("{what}: recovered");
                "source_recovered"
            }),
        }
    }

    async fn apply(&mut self, plan: &Plan) {
        let hostfiles_ok = self.write_hostfiles(plan).await;
        if hostfiles_ok {
            if let Some(n) = &plan.notify {
                self.notify(n).await;
            }
        }
        let tagged = act::ec2::set_status_tags(&self.clients.ec2, &plan.tags).await;
        self.note_failure("status tags", tagged.err());
        if !plan.terminate.is_empty() {
            self.terminate(&plan.terminate).await;
        }
        self.apply_group(plan).await;
    }

    /// The host files, then the generation file; whether the host files are as planned.
    async fn write_hostfiles(&mut self, plan: &Plan) -> bool {
        let (specs, hosts) = (self.cfg.hostfiles.clone(), plan.hosts.clone());
        let (gen_file, generation) = (self.cfg.generation_file.clone(), self.state.generation);
        let write = move || {
            let written = act::hostfiles::ensure(&specs, &hosts)?;
            act::hostfiles::write_generation(&gen_file, generation)?;
            Ok::<bool, String>(written)
        };
        let written = self.shared_fs.try_run("writing host files", write).await;
        if let Ok(true) = written {
            tracing::info!(
                generation,
                workers = plan.hosts.len(),
                "host files rewritten"
            );
        }
        let ok = written.is_ok();
        self.note_failure("host files", written.err());
        ok
    }

    async fn apply_group(&mut self, plan: &Plan) {
        let (Some(client), Some(group)) = (
            self.clients.autoscaling.clone(),
            self.cfg.workers.auto_scaling_group.clone(),
        ) else {
            return;
        };
        if !plan.protect.is_empty() {
            let r = act::asg::protect(&client, &group, &plan.protect).await;
            self.note_failure("scale-in protection", r.err());
        }
        let mut done = Vec::new();
        let mut errors = Vec::new();
        for (id, decrement) in &plan.group_terminate {
            match act::asg::terminate(&client, id, *decrement).await {
                Ok(()) => done.push(id.clone()),
                Err(e) => errors.push(e),
            }
        }
        let (completed, failed) =
            act::asg::apply_hooks(&client, &group, &plan.complete_hooks, &plan.heartbeats).await;
        done.extend(completed);
        errors.extend(failed);
        self.mark_sent(&done, "Auto Scaling group accepted the end of");
        self.note_failure("group actions", errors.into_iter().next());
    }

    async fn notify(&mut self, n: &Notification) {
        let hostfile = self
            .cfg
            .hostfiles
            .first()
            .map(|h| h.path.clone())
            .unwrap_or_default();
        let sent = match self.cfg.job.notify.clone() {
            // Reading the pidfile touches the shared directory: within its deadline.
            Notify::Signal {
                signal,
                pidfile,
                expect,
            } => {
                let send = move || act::notify::signal_job(signal, &pidfile, expect.as_deref());
                let sent = self.shared_fs.run("signalling the job", send).await;
                sent.unwrap_or_else(|e| Err(act::notify::NotifyError::Failed(e)))
            }
            how => act::notify::send(&how, n, &hostfile).await,
        };
        match sent {
            Ok(how) => {
                self.note_failure("job notification", None);
                tracing::info!(generation = n.generation, "job notified: {how}");
                if self.state.pending_notification.as_ref() == Some(n) {
                    self.state.pending_notification = None;
                }
                let message = format!("generation {} delivered: {how}", n.generation);
                self.record(&[Event {
                    generation: Some(n.generation),
                    ..Event::new(now_millis(), "notified", message)
                }]);
            }
            Err(e) => {
                let message = format!("{e} (retried next pass)");
                let changed = self.failures.get("job notification") != Some(&message);
                let refused = matches!(e, act::notify::NotifyError::Refused(_));
                self.note_failure("job notification", Some(message.clone()));
                if changed && refused {
                    self.record(&[Event {
                        generation: Some(n.generation),
                        ..Event::new(now_millis(), "notify_refused", message)
                    }]);
                }
            }
        }
    }

    async fn terminate(&mut self, ids: &[String]) {
        let (done, err) = act::ec2::terminate(&self.clients.ec2, ids).await;
        self.mark_sent(&done, "TerminateInstances accepted for");
        if !done.is_empty() {
            tracing::info!(instances = ?done, "terminated");
        }
        self.note_failure("terminations", err);
    }

    /// Removals whose ending call succeeded are never sent again.
    fn mark_sent(&mut self, done: &[String], what: &str) {
        let mut events = Vec::new();
        for r in self
            .state
            .removals
            .iter_mut()
            .filter(|r| done.contains(&r.id))
        {
            if r.termination != Termination::Requested {
                continue;
            }
            r.termination = Termination::Sent;
            let message = format!("{what} {} ({})", r.id, r.ip);
            events.push(Event {
                instance: Some(r.id.clone()),
                ip: Some(r.ip),
                generation: Some(r.generation),
                ..Event::new(now_millis(), "terminated", message)
            });
        }
        self.record(&events);
    }

    /// Logs events now; they reach the journal at the next write of the state directory.
    fn record(&mut self, events: &[Event]) {
        for e in events {
            tracing::info!(kind = %e.kind, instance = e.instance.as_deref().unwrap_or("-"), "{}", e.message);
        }
        self.unjournaled.extend_from_slice(events);
    }

    async fn flush_journal(&mut self) {
        if self.unjournaled.is_empty() {
            return;
        }
        let (path, events) = (self.paths.journal(), self.unjournaled.clone());
        let append = move || act::journal::append(&path, &events);
        let r = self
            .state_fs
            .try_run("appending to the journal", append)
            .await;
        if r.is_ok() {
            self.unjournaled.clear();
        }
        self.note_failure("events journal", r.err());
    }

    fn replacing_stopped(&self) -> Option<String> {
        let limit = self.cfg.workers.max_prepare_failures;
        (self.state.prepare_failures >= limit).then(|| {
            let last = self.state.last_prepare_failure.as_deref().unwrap_or("-");
            format!("stopped after {limit} prepare-data failures in a row (last: {last}); `dtctl resume` re-arms it")
        })
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

    async fn write_status(&mut self, plan: &Plan, snap: &Snapshot, calls: u32, took: Duration) {
        self.flush_journal().await;
        let report = self.status_report(plan, snap, calls, took);
        let path = self.paths.status();
        let save = move || save_json(&path, &report).map_err(|e| e.to_string());
        if let Err(e) = self.state_fs.try_run("writing the status", save).await {
            tracing::warn!("{e}");
        }
    }

    fn status_report(
        &self,
        plan: &Plan,
        snap: &Snapshot,
        calls: u32,
        took: Duration,
    ) -> StatusReport {
        let detail = |r: Result<String, &String>| match r {
            Ok(s) => (true, s),
            Err(e) => (false, e.clone()),
        };
        let sources = [
            (
                "EC2 instances",
                detail(
                    snap.instances
                        .as_ref()
                        .map(|v| format!("{} instances with the worker tags", v.len())),
                ),
            ),
            (
                "prepare-data markers",
                detail(
                    snap.markers
                        .as_ref()
                        .map(|m| format!("{} ready, {} failed", m.success.len(), m.failed.len())),
                ),
            ),
            (
                "acknowledgements",
                detail(snap.acks.as_ref().map(|a| {
                    format!(
                        "ack file: {}, host_worker_log: {} lines",
                        a.generation.map_or("-".into(), |g| g.to_string()),
                        a.log_lines
                    )
                })),
            ),
        ];
        let queue = self.cfg.events.queue_url.as_ref().map(|url| {
            let detail = match &self.queue_error {
                Some(e) => (false, e.clone()),
                None => (
                    true,
                    format!("{url} (notices this pass: {})", snap.notices.len()),
                ),
            };
            ("event queue", detail)
        });
        // Unknown zones hold nothing: a failed read is a source shown as failed, not a hold.
        let efs = (self.mount_targets.as_ref()).map(|c| {
            let detail = match c.cache().summary() {
                Ok(zones) => (true, zones),
                Err(e) => (false, e),
            };
            ("EFS mount targets", detail)
        });
        let group = snap.group.as_ref().and_then(|g| g.as_ref().ok());
        StatusReport {
            cluster: self.cfg.cluster.clone(),
            updated_at: now_millis(),
            pid: std::process::id(),
            interval_ms: self.cfg.interval.as_millis() as u64,
            min: group.map_or(self.cfg.workers.min, |g| g.min),
            max: group.map_or(self.cfg.workers.max, |g| g.max),
            current: plan.hosts.len(),
            desired: group.map_or_else(|| desired(&self.cfg, plan), |g| g.desired),
            group: group.map(|g| g.name.clone()),
            replacing_stopped: self.replacing_stopped(),
            generation: self.state.generation,
            acked_generation: acknowledged(
                &self.state,
                snap,
                self.cfg.job.ack.host_worker_log.is_some(),
            ),
            pending_notification: self
                .state
                .pending_notification
                .as_ref()
                .map(|n| n.generation),
            ec2_calls_last_pass: calls,
            pass_ms: took.as_millis() as u64,
            interruptions: self.state.interruptions,
            sources: sources
                .into_iter()
                .chain(queue)
                .chain(efs)
                .map(|(name, (ok, detail))| SourceStatus {
                    name: name.into(),
                    ok,
                    detail,
                })
                .collect(),
            holds: plan.holds.clone(),
            errors: self.errors.clone(),
            hosts: plan.hosts.clone(),
            workers: worker_views(&plan.rows, snap, &self.state),
        }
    }
}

/// Adds received messages to the inbox. One redelivered while kept (a stall, a deferral) keeps
/// one copy with its newest receipt: SQS deletes a message only by the receipt of its latest
/// delivery ("DeleteMessage", Amazon SQS API Reference), and a long stall must not grow the inbox
/// by a copy every visibility timeout.
fn keep(inbox: &mut Vec<Received>, received: Vec<Received>) {
    for r in received {
        match inbox.iter_mut().find(|kept| kept.parsed == r.parsed) {
            Some(kept) => kept.receipt = r.receipt,
            None => inbox.push(r),
        }
    }
}

async fn recv(queue: &mut Option<mpsc::Receiver<QueueUpdate>>) -> Option<QueueUpdate> {
    match queue {
        Some(q) => q.recv().await,
        None => std::future::pending().await,
    }
}

/// Base hosts plus every worker joined or on its way in (preparing, queued), capped at max.
fn desired(cfg: &Config, plan: &Plan) -> usize {
    let coming = [
        WorkerStatus::Preparing,
        WorkerStatus::AddQueued,
        WorkerStatus::Added,
    ];
    let managed = plan
        .rows
        .iter()
        .filter(|r| matches!(r.shown, Shown::Status(s) if coming.contains(&s)))
        .count();
    (cfg.workers.base_hosts.len() + managed).min(cfg.workers.max)
}

/// The newest generation the job is known to have applied: the ack file's, or with the
/// `host_worker_log` form (which names IPs, not generations) the newest generation whose every
/// join and removal the log has confirmed.
fn acknowledged(state: &State, snap: &Snapshot, log_form: bool) -> Option<u64> {
    let acks = snap.acks.as_ref().ok()?;
    let from_log = log_form.then(|| {
        let unconfirmed_joins = state
            .members
            .iter()
            .filter(|m| !m.acked)
            .map(|m| m.joined_generation);
        let waiting = state
            .removals
            .iter()
            .filter(|r| r.termination == Termination::Waiting);
        let oldest_unconfirmed = unconfirmed_joins.chain(waiting.map(|r| r.generation)).min();
        oldest_unconfirmed.map_or(state.generation, |g| g.saturating_sub(1))
    });
    acks.generation.max(from_log.filter(|g| *g > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(receipt: &str, body: &str) -> Received {
        Received {
            receipt: receipt.into(),
            parsed: crate::observe::eventbridge::parse(body),
        }
    }

    #[test]
    fn a_redelivered_message_is_kept_once_with_its_newest_receipt() {
        let warning = r#"{"id":"e-1","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-1"}}"#;
        let other = r#"{"id":"e-2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-2"}}"#;
        let mut inbox = Vec::new();
        keep(
            &mut inbox,
            vec![received("r1", warning), received("r2", other)],
        );
        for n in 3..10 {
            keep(&mut inbox, vec![received(&format!("r{n}"), warning)]);
        }
        let receipts: Vec<&str> = inbox.iter().map(|r| r.receipt.as_str()).collect();
        assert_eq!(receipts, ["r9", "r2"]);
    }
}
