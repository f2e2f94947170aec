//! `dtd run`: the control loop on the master node, observe -> decide -> act, on every change
//! it hears of (an event, a marker, an acknowledgement, a finished listing), at the next
//! deadline decide named (an ack timeout, a cool-down, a window opening), and at least every
//! `interval`.

mod address;
mod error;
mod goodput;
mod ledger;
mod lighthouse;
mod lock;
mod record;
mod recover;

use std::collections::BTreeMap;
use std::time::Instant;

use tokio::signal::unix::{signal, SignalKind};

use crate::act;
use crate::act::apply::Actuators;
use crate::alerts::Alerts;
use crate::aws::Clients;
use crate::clock::SharedClock;
use crate::config::{Config, Reports};
use crate::deadline::Deadline;
use crate::decide::{decide_from, Rules};
use crate::metrics::Metrics;
use crate::model::*;
use crate::observe::observer::{Observed, Observer};
use crate::observe::shared_changes;
use crate::store::{load_state_resuming, Paths};
pub use error::DaemonError;
use ledger::Ledger;
pub use lock::{lock_state_dir, Lock};
use record::PassStats;

/// Before its first pass, a `dtd` with signed reports waits this long for its agents, and
/// longer (up to [`AGENTS_MOST`]) for those it knew before a restart: what it decides before
/// hearing them (a leaver's launcher still running, a member's health) it would decide blind.
const AGENTS_LEAST: std::time::Duration = std::time::Duration::from_millis(500);
const AGENTS_MOST: std::time::Duration = std::time::Duration::from_secs(3);

pub struct Daemon {
    cfg: Config,
    /// The one clock every stage reads (see `crate::clock`).
    clock: SharedClock,
    paths: Paths,
    /// Every source, and what each keeps between passes.
    observer: Observer,
    /// Deadlines for work on the shared directory, and on the state directory.
    shared_fs: Deadline,
    state_fs: Deadline,
    /// Journal events of this pass, appended at the next write of the state directory.
    unjournaled: Vec<Event>,
    /// Webhooks the events of their kinds are handed to as they are recorded.
    alerts: Alerts,
    /// The count of the alert outboxes' changes last saved (`Alerts::waiting_since`).
    alerts_saved: u64,
    /// What applying an outcome acts on.
    actuators: Actuators,
    state: State,
    /// What state.json holds, so an unchanged state is not rewritten (and fsynced) every pass.
    saved: Option<State>,
    /// Each source's and step's failure, so a lasting one is logged once, not every pass.
    ledger: Ledger,
    /// Updated after every pass; served at `metrics.listen`, if configured.
    metrics: Metrics,
    /// torchft's Lighthouse, supervised while `dtd run` runs, and dtd's front for it (the
    /// in-place strategy).
    lighthouse: Option<lighthouse::Lighthouse>,
    /// The part of the configuration decide reads, built once: again only when the worker
    /// launch template's id is first resolved.
    rules: Rules,
    /// When the last plan's next deadline falls (decide's `next_pass_at`).
    next_pass_at: Option<Millis>,
    /// The address the agents dial (signed reports), and whether the shared directory has it.
    address: Option<(std::net::SocketAddr, bool)>,
    /// Where every worker's paid time went, and when it was last written.
    goodput: crate::model::Goodput,
    goodput_saved_at: Millis,
}

impl Daemon {
    pub fn new(cfg: Config, clients: Clients, clock: SharedClock) -> Result<Daemon, DaemonError> {
        let paths = Paths::new(&cfg.state_dir);
        let (paths_goodput, now) = (paths.goodput(), clock.now());
        let mut state = load_state_resuming(&paths.state(), &cfg.generation_file)?;
        recover::confirm_journaled_endings(&mut state, &paths.journal());
        let mut metrics = Metrics::new(
            &clients.calls,
            crate::status::read_totals(&paths.status()),
            now,
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
        let actuators = Actuators::new(
            &cfg,
            clients.ec2.clone(),
            clients.autoscaling.clone(),
            clients.sqs.clone(),
            owner,
        );
        let deadline = |what: &str, dir: &std::path::Path| {
            Deadline::new(format!("{what} {}", dir.display()), cfg.fs_timeout)
        };
        let observer = Observer::new(&cfg, clients, &paths, owner, clock.clone());
        observer.know(&state);
        let rules = Rules::from_config(&cfg, observer.launch_template_id());
        Ok(Daemon {
            shared_fs: deadline("shared directory", &cfg.shared_dir),
            state_fs: deadline("state directory", &paths.dir),
            unjournaled: Vec::new(),
            alerts: Alerts::new(&cfg, clock.clone(), record::saved_alerts(&paths))
                .map_err(DaemonError::Alerts)?,
            alerts_saved: 0,
            observer,
            clock,
            actuators,
            ledger: Ledger::default(),
            saved: None,
            metrics,
            state,
            paths,
            cfg,
            lighthouse: None,
            rules,
            next_pass_at: None,
            address: None,
            goodput: goodput::load(&paths_goodput, now),
            // Written at the first pass: a dtd killed before the next write still leaves
            // its ledger's start and every worker's mark for its successor.
            goodput_saved_at: 0,
        })
    }

    /// Runs passes until SIGTERM or SIGINT; a pass in progress is finished first.
    pub async fn run(mut self) -> Result<(), DaemonError> {
        let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signal)?;
        let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?;
        tracing::info!(cluster = %self.cfg.cluster, generation = self.state.generation, state = %self.paths.dir.display(), "dtd started");
        self.observer.listen(&self.cfg);
        self.take_reports().await?;
        self.alerts.start();
        self.lighthouse = lighthouse::Lighthouse::start(&self.cfg, &self.state);
        let mut changes = Observer::watch_shared_dir(&self.cfg, &self.paths);
        loop {
            self.pass().await;
            let wake_at = self.wake_at();
            let o = &mut self.observer;
            o.start_resync();
            let sleep = self.clock.sleep_until(wake_at);
            tokio::select! {
                _ = sleep => {}
                () = o.news() => {}
                Some(()) = shared_changes::next(&mut changes) => {}
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
            o.take_waiting_news();
        }
        self.save_goodput(self.clock.now()).await;
        tracing::info!("dtd stopping");
        Ok(())
    }

    /// With signed reports: listens on `workers.listen` for the agents (and, at its next pass,
    /// tells them where in the shared directory). `run` does this; a test driving passes itself
    /// calls it first.
    pub async fn take_reports(&mut self) -> Result<(), DaemonError> {
        if self.cfg.workers.reports == Reports::Signed {
            let pins = Pins(&self.state.workers);
            let known: Vec<String> = pins.keys().into_keys().collect();
            let bound = self.observer.take_reports(&self.cfg, pins).await?;
            self.address = Some((address::advertised(bound).await?, false));
            self.publish_address().await;
            let o = &self.observer;
            let heard = o.await_agents(&known, AGENTS_LEAST, AGENTS_MOST).await;
            tracing::info!(
                "{heard} of the {} agents dtd knew proved themselves before its first pass",
                known.len()
            );
        }
        Ok(())
    }

    /// The next pass without news: at the plan's next deadline, at `interval` at the latest.
    fn wake_at(&self) -> Millis {
        let every = self.clock.now() + self.cfg.interval.as_millis() as u64;
        self.next_pass_at.map_or(every, |at| at.min(every))
    }

    pub async fn pass(&mut self) {
        let started = Instant::now();
        self.ledger.begin_pass();
        self.publish_address().await;
        let pins = Pins(&self.state.workers);
        let observed = (self.observer)
            .observe(&self.cfg, &mut self.shared_fs, pins)
            .await;
        let Observed {
            snap,
            stalled,
            ec2_calls: calls,
            mount_targets_error,
        } = observed;
        // The pass's one time: what decide works at, act stamps and the status shows.
        let now = self.clock.now();
        self.refresh_rules();
        let mount_targets_error = mount_targets_error.map(|e| e.to_string());
        self.ledger.note(Source::MountTargets, mount_targets_error);
        let events = self.ledger.sources(&snap, now);
        self.record(&events);
        self.record_lighthouse(now);
        let pass = PassStats {
            calls,
            started,
            now,
        };
        let tagged = match stalled {
            true => self.hold(&snap, pass).await,
            false => self.decide_and_act(&snap, pass).await,
        };
        self.observer.pass_ended(snap.instances, &tagged);
    }

    /// Returns the status tags EC2 accepted.
    async fn decide_and_act(
        &mut self,
        snap: &Snapshot,
        pass: PassStats,
    ) -> BTreeMap<WorkerStatus, Vec<String>> {
        let mut plan = decide_from(&self.rules, snap, std::mem::take(&mut self.state), pass.now);
        self.next_pass_at = plan.next_pass_at;
        self.metrics
            .note_notices(plan.outcome.heeded_notices.iter());
        let decided = std::mem::take(&mut plan.outcome.events);
        self.record(&decided);
        // Remembered before acting: a daemon killed mid-act finds the decision and re-applies it.
        self.state = std::mem::take(&mut plan.state);
        self.observer.know(&self.state);
        if let Some(l) = &self.lighthouse {
            let hosts = plan.outcome.hosts.iter().map(|h| h.ip);
            l.admit(lighthouse::nodes(&self.state, hosts));
        }
        self.save_state().await;
        let tagged = self.apply(&plan.outcome, pass.now).await;
        self.save_state().await;
        // Deleted now that what they said is journaled and settled in the state.
        let heeded = self.observer.heeded(&plan.outcome.deferred_notices);
        let deleted = act::queue::delete(self.actuators.queue.as_ref(), &heeded.receipts()).await;
        if deleted.is_err() {
            self.observer.undeleted(heeded);
        }
        let read = self.observer.queue_error().map(|e| e.to_string());
        self.ledger.note(Source::EventQueue, read);
        self.ledger
            .note(Step::QueueDeletes, deleted.err().map(|e| e.to_string()));
        self.write_status(&plan.outcome, snap, pass).await;
        tagged
    }

    /// The shared directory is not answering: nothing decided, nothing acted on, no queue
    /// message deleted; the status says so (the plan is only for the report).
    async fn hold(
        &mut self,
        snap: &Snapshot,
        pass: PassStats,
    ) -> BTreeMap<WorkerStatus, Vec<String>> {
        let plan = decide_from(&self.rules, snap, self.state.clone(), pass.now);
        self.flush_journal().await;
        self.write_status(&plan.outcome, snap, pass).await;
        BTreeMap::new()
    }

    /// Until it is written: the address the agents dial, in the shared directory.
    async fn publish_address(&mut self) {
        let Some((addr, false)) = self.address else {
            return;
        };
        let dir = self.cfg.shared_dir.clone();
        let written = (self.shared_fs)
            .run("publishing dtd's address", move || {
                address::publish(&dir, addr)
            })
            .await;
        let err = match written {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if err.is_none() {
            tracing::info!(%addr, "published the address the agents send their reports to");
            self.address = Some((addr, true));
        }
        self.ledger.note(Step::PublishAddress, err);
    }

    /// What the Lighthouse's front refused since the last pass, journaled once.
    fn record_lighthouse(&mut self, now: Millis) {
        let refused = (self.lighthouse.as_ref()).map(|l| l.journal(now, &self.state));
        self.record(&refused.unwrap_or_default());
    }

    fn refresh_rules(&mut self) {
        let resolved = self.observer.launch_template_id();
        if self.rules.launch_template_id != resolved {
            self.rules = Rules::from_config(&self.cfg, resolved);
        }
    }

    /// Applies the outcome (see `act::apply`), then records what it did.
    /// Returns the status tags EC2 accepted.
    async fn apply(
        &mut self,
        outcome: &Outcome,
        now: Millis,
    ) -> BTreeMap<WorkerStatus, Vec<String>> {
        // What the group looks like after this is worth reading on the next pass.
        let group_changes = |a: &Action| {
            !matches!(
                a,
                Action::Tag { .. } | Action::Terminate { .. } | Action::Launch { .. }
            )
        };
        if outcome.actions.iter().any(group_changes) {
            self.observer.group_changed();
        }
        let generation = self.state.generation;
        let notify_failing = self.ledger.failing(Step::JobNotification);
        let (a, shared_fs) = (&self.actuators, &mut self.shared_fs);
        let applied =
            act::apply::apply(a, outcome, generation, shared_fs, notify_failing, now).await;
        let settled = crate::decide::settle(&self.rules, &mut self.state, &applied, now);
        let mut tagged = BTreeMap::new();
        for (step, err) in applied.results {
            if step == Step::StatusTags && err.is_none() {
                tagged = outcome.tags();
            }
            self.ledger.note(step, err);
        }
        self.record(&applied.events);
        self.record(&settled);
        tagged
    }
}
