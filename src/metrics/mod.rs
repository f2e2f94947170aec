//! What `dtd` exposes to Prometheus, and the running totals `dtctl status` summarises.
//!
//! Every pass updates atomics and a few small maps after it wrote its status; a scrape encodes
//! them on the server's own thread (see [`server`]), so neither waits for the other.

mod aws_calls;
mod gpu;
mod health;
mod labels;
mod latency;
pub mod server;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

pub use aws_calls::AwsCalls;
pub use gpu::{FleetNow, GpuClock, GpuSeconds};
pub use health::DaemonHealth;
use labels::{
    AlertLabel, BucketLabel, GpuLabel, KindLabel, NoticeLabels, SourceLabel, SpotPriceLabel,
    StatusLabel,
};
use latency::Latencies;

use crate::model::{Event, Markers, Millis, Notice, Shown, State, Totals, WorkerStatus};
use crate::status::StatusReport;

type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// The metric handles a pass updates; the registry that encodes them goes to the server.
pub struct Metrics {
    workers: Family<StatusLabel, Gauge>,
    generation: Gauge,
    acked_generation: Gauge,
    pass_duration: Histogram,
    last_pass: FloatGauge,
    notices: Family<NoticeLabels, Counter>,
    interruptions: Counter,
    marker_to_host_file: Histogram,
    ack_to_termination: Histogram,
    quorum_changes: Counter,
    steps_lost: Counter,
    quorum_pause: Histogram,
    gpu_time: Family<GpuLabel, FloatCounter>,
    goodput: Family<BucketLabel, FloatGauge>,
    goodput_usd: Family<BucketLabel, FloatGauge>,
    spot_price: Family<SpotPriceLabel, FloatGauge>,
    awaiting_ack: Gauge,
    source_up: Family<SourceLabel, Gauge>,
    events: Family<KindLabel, Counter>,
    alerts: Family<AlertLabel, Gauge>,
    health: Arc<Mutex<DaemonHealth>>,
    registry: Option<Registry>,
    clock: GpuClock,
    latencies: Latencies,
    totals: Totals,
    interruptions_seen: u64,
}

/// Each STATUS `dtctl status` can show (an unmanaged instance shows `-`), with the label of
/// its series: every one has a series, at 0 when no worker has it.
fn status_series() -> impl Iterator<Item = (&'static str, &'static str)> {
    let tags = WorkerStatus::ALL
        .into_iter()
        .map(|s| (s.as_tag(), s.as_tag()));
    tags.chain([
        (Shown::Base.label(), "BASE"),
        (Shown::Unmanaged.label(), "UNMANAGED"),
    ])
}

impl Metrics {
    /// `totals`: what an earlier `dtd` counted (from its last status), if anything.
    pub fn new(aws: &AwsCalls, totals: Option<Totals>, now: Millis, interval: Duration) -> Self {
        let totals = totals.unwrap_or(Totals {
            since: now,
            ..Totals::default()
        });
        let m = Metrics {
            workers: Family::default(),
            generation: Gauge::default(),
            acked_generation: Gauge::default(),
            pass_duration: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            last_pass: FloatGauge::default(),
            notices: Family::default(),
            interruptions: Counter::default(),
            marker_to_host_file: Histogram::new([
                0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
            ]),
            ack_to_termination: Histogram::new([
                0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
            ]),
            quorum_changes: Counter::default(),
            steps_lost: Counter::default(),
            quorum_pause: Histogram::new([0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0]),
            gpu_time: Family::default(),
            goodput: Family::default(),
            goodput_usd: Family::default(),
            spot_price: Family::default(),
            awaiting_ack: Gauge::default(),
            source_up: Family::default(),
            events: Family::default(),
            alerts: Family::default(),
            health: Arc::new(Mutex::new(DaemonHealth::new(
                Instant::now(),
                StatusReport::stale_after(interval),
            ))),
            registry: None,
            clock: GpuClock::new(),
            latencies: Latencies::default(),
            interruptions_seen: 0,
            totals,
        };
        m.gpu_counter("training")
            .inc_by(m.totals.gpu_seconds_training);
        m.gpu_counter("idle").inc_by(m.totals.gpu_seconds_idle);
        let registry = m.register(aws);
        Metrics {
            registry: Some(registry),
            ..m
        }
    }

    fn gpu_counter(&self, state: &'static str) -> FloatCounter {
        self.gpu_time.get_or_create(&GpuLabel { state }).clone()
    }

    /// The registry to encode, once (for the server); the handles stay here.
    pub fn take_registry(&mut self) -> Option<Registry> {
        self.registry.take()
    }

    pub fn health(&self) -> Arc<Mutex<DaemonHealth>> {
        Arc::clone(&self.health)
    }

    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    fn register(&self, aws: &AwsCalls) -> Registry {
        let mut r = Registry::default();
        r.register(
            "dt_workers",
            "Worker instances by the status dtctl status shows (BASE: base hosts)",
            self.workers.clone(),
        );
        r.register(
            "dt_generation",
            "The host files' generation",
            self.generation.clone(),
        );
        r.register(
            "dt_acknowledged_generation",
            "The newest generation the job acknowledged",
            self.acked_generation.clone(),
        );
        r.register_with_unit(
            "dt_pass_duration",
            "How long a pass took: observe, decide, act, status",
            Unit::Seconds,
            self.pass_duration.clone(),
        );
        r.register_with_unit(
            "dt_last_pass_timestamp",
            "When the last pass ended, Unix time",
            Unit::Seconds,
            self.last_pass.clone(),
        );
        r.register(
            "dt_notices",
            "Notices heeded (each once), by kind and by source (queue: EventBridge; agent: instance metadata)",
            self.notices.clone(),
        );
        r.register(
            "dt_interruptions_survived",
            "Workers the job lost to interruptions and kept training without, since dtd first managed the cluster",
            self.interruptions.clone(),
        );
        r.register_with_unit(
            "dt_marker_to_host_file",
            "From a worker's prepare-data success marker (its modification time) to the host files listing it",
            Unit::Seconds,
            self.marker_to_host_file.clone(),
        );
        r.register_with_unit(
            "dt_ack_to_termination",
            "From the job's acknowledgement of a removal to AWS accepting the worker's termination",
            Unit::Seconds,
            self.ack_to_termination.clone(),
        );
        r.register(
            "dt_quorum_changes",
            "Changes of torchft's quorum the job reported (in-place strategy)",
            self.quorum_changes.clone(),
        );
        r.register(
            "dt_steps_lost",
            "Training steps discarded because a node was lost mid-step (in-place strategy: each ran again)",
            self.steps_lost.clone(),
        );
        r.register_with_unit(
            "dt_quorum_pause",
            "From the last step committed before a quorum change to the first after it (in-place strategy)",
            Unit::Seconds,
            self.quorum_pause.clone(),
        );
        r.register_with_unit(
            "dt_gpu_time",
            "GPU-seconds (seconds times the worker's slots) by state: training (in the job, acknowledged) or idle (ready, with its success marker, but not training), since dtd first managed the cluster",
            Unit::Seconds,
            self.gpu_time.clone(),
        );
        r.register_with_unit(
            "dt_goodput_gpu",
            "The goodput ledger: GPU-seconds of the worker instances since the ledger began, by where they went (training, preparing, waiting_to_join, paused, redone, leaving, idle); they sum to the time paid for. A gauge: a restart from a checkpoint moves training time to redone",
            Unit::Seconds,
            self.goodput.clone(),
        );
        r.register(
            "dt_goodput_dollars",
            "The goodput ledger's dollars at workers.prices since it began, by bucket as dt_goodput_gpu_seconds; shown once a worker's type has a price",
            self.goodput_usd.clone(),
        );
        r.register(
            "dt_spot_price_dollars_per_hour",
            "The Spot price history's price an hour of each Spot worker's instance type in its zone, as last read (workers.spot_price_history)",
            self.spot_price.clone(),
        );
        r.register(
            "dt_removals_awaiting_ack",
            "Workers out of the host files whose removal the job has not acknowledged yet",
            self.awaiting_ack.clone(),
        );
        r.register(
            "dt_source_up",
            "Whether each source was read completely on the last pass (1) or not (0)",
            self.source_up.clone(),
        );
        r.register(
            "dt_events",
            "Events journaled, by kind as dtctl events names them (refusals among them: marker_refused, file_refused, ack_refused, notice_refused, notice_unconfirmed)",
            self.events.clone(),
        );
        r.register(
            "dt_alerts",
            "Events for the alerts' webhooks, summed over them: sent (taken), pending (queued or being retried), dropped (given up on), since dtd started",
            self.alerts.clone(),
        );
        aws.register(&mut r);
        r
    }

    /// Journal events as they are recorded: the ends of the latencies measured.
    pub fn note_events(&mut self, events: &[Event]) {
        for e in events {
            let kind = e.kind.as_str().to_string();
            self.events.get_or_create(&KindLabel { kind }).inc();
        }
        for seconds in self.latencies.note(events) {
            self.ack_to_termination.observe(seconds);
        }
        for q in events.iter().filter_map(|e| e.quorum.as_ref()) {
            self.quorum_changes.inc();
            self.steps_lost.inc_by(q.lost_steps);
            self.quorum_pause.observe(q.paused_ms as f64 / 1000.0);
        }
    }

    /// Notices this pass heeded for the first time.
    pub fn note_notices<'a>(&self, heeded: impl Iterator<Item = &'a Notice>) {
        for n in heeded {
            let labels = NoticeLabels {
                kind: n.kind.as_str(),
                source: n.source,
            };
            self.notices.get_or_create(&labels).inc();
        }
    }

    /// After a pass wrote its status: everything it shows, and the GPU time since the last one.
    pub fn after_pass(&mut self, pass: PassView, now: Millis, took: Duration) {
        let r = pass.report;
        let mut shown: HashMap<&str, i64> = HashMap::new();
        for w in &r.workers {
            *shown.entry(w.status.as_str()).or_default() += 1;
        }
        for (label, status) in status_series() {
            let n = shown.get(label).copied().unwrap_or(0);
            self.workers.get_or_create(&StatusLabel { status }).set(n);
        }
        self.generation.set(r.generation as i64);
        self.acked_generation
            .set(r.acked_generation.unwrap_or(0) as i64);
        self.pass_duration.observe(took.as_secs_f64());
        self.last_pass.set(now as f64 / 1000.0);
        let awaiting = pass
            .state
            .removals
            .iter()
            .filter(|r| r.awaits_ack())
            .count();
        self.awaiting_ack.set(awaiting as i64);
        for s in &r.sources {
            let labels = SourceLabel {
                source: s.name.clone(),
            };
            self.source_up.get_or_create(&labels).set(s.ok as i64);
        }
        self.count_alerts(&r.alerts);
        self.count_interruptions(pass.state.interruptions);
        for seconds in self.latencies.joined(pass.markers, now) {
            self.marker_to_host_file.observe(seconds);
        }
        if let Ok(mut h) = self.health.lock() {
            h.passed(Instant::now(), r);
        }
    }

    /// Every state has its series, at 0 without webhooks.
    fn count_alerts(&self, hooks: &[crate::alerts::AlertStatus]) {
        let sum = |f: fn(&crate::alerts::AlertStatus) -> u64| hooks.iter().map(f).sum::<u64>();
        for (state, n) in [
            ("sent", sum(|h| h.sent)),
            ("pending", sum(|h| h.pending)),
            ("dropped", sum(|h| h.dropped)),
        ] {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            self.alerts.get_or_create(&AlertLabel { state }).set(n);
        }
    }

    fn count_interruptions(&mut self, total: u64) {
        let new = total.saturating_sub(self.interruptions_seen);
        self.interruptions.inc_by(new);
        self.interruptions_seen = total;
    }

    /// The goodput ledger's totals, as its gauges.
    pub fn show_goodput(&self, ledger: &crate::model::Goodput) {
        // Zero dollars in every bucket would say "free", not "no price given".
        let priced = ledger.paid().micro_usd > 0;
        for (bucket, spent) in ledger.totals() {
            let label = BucketLabel {
                bucket: bucket.as_str(),
            };
            let seconds = spent.gpu_ms as f64 / 1000.0;
            self.goodput.get_or_create(&label).set(seconds);
            if priced {
                self.goodput_usd.get_or_create(&label).set(spent.usd());
            }
        }
    }

    /// The Spot prices the ledger prices Spot workers at, as last read: dollars an hour by
    /// instance type, then zone.
    pub fn show_spot_prices(&self, prices: &BTreeMap<String, BTreeMap<String, f64>>) {
        for (kind, zones) in prices {
            for (zone, price) in zones {
                let label = SpotPriceLabel {
                    instance_type: kind.clone(),
                    zone: zone.clone(),
                };
                self.spot_price.get_or_create(&label).set(*price);
            }
        }
    }

    /// The GPU time since the last pass, counted before the status that shows the totals.
    /// `None` (the instances could not be read) counts as neither state for this interval.
    pub fn count_gpu_time(&mut self, now: Millis, fleet: Option<FleetNow>) {
        let fleet = fleet.unwrap_or_default();
        let s = self.clock.tick(now, &fleet);
        self.gpu_counter("training").inc_by(s.training);
        self.gpu_counter("idle").inc_by(s.idle);
        self.totals.gpu_seconds_training += s.training;
        self.totals.gpu_seconds_idle += s.idle;
    }
}

/// What a pass hands the metrics once its status is written.
pub struct PassView<'a> {
    pub report: &'a StatusReport,
    pub state: &'a State,
    pub markers: Option<&'a Markers>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, QuorumCost};

    /// A `quorum_changed` event counts once: the change, its lost steps, the others' pause.
    #[test]
    fn a_quorum_change_counts_its_lost_steps_and_pause() {
        let mut m = Metrics::new(&AwsCalls::default(), None, 0, Duration::from_secs(2));
        let registry = m.take_registry().expect("a registry");
        let mut e = Event::new(1_000, EventKind::QuorumChanged, "quorum 4".into());
        e.quorum = Some(QuorumCost {
            quorum: 4,
            step: 300,
            nodes: 2,
            lost_steps: 1,
            paused_ms: 2_000,
        });
        m.note_events(&[e, Event::new(1_000, EventKind::Joined, String::new())]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        for line in [
            "dt_events_total{kind=\"quorum_changed\"} 1",
            "dt_events_total{kind=\"joined\"} 1",
            "dt_quorum_changes_total 1",
            "dt_steps_lost_total 1",
            "dt_quorum_pause_seconds_sum 2.0",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
