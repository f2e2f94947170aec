//! One test (or more) per rule of `decide`, each asserting what a user would see: the host file's
//! lines, the status tags written, the instances terminated, the job notification, the journal.

use std::collections::BTreeMap;
use std::net::IpAddr;

use dt::config::Slots;
use dt::decide::{decide, worker_views, Rules};
use dt::model::*;

pub(crate) const ELASTIC: &str = "demo-aws-dl-cfn-elastic-worker";
pub(crate) const TIMEOUT: u64 = 600_000;
/// How long a worker held by the launching hook may go without a marker.
const PREPARE_TIMEOUT: u64 = 3_600_000;
/// Base hosts, deliberately not in sorted order: the host file keeps the config's order.
const BASE: [&str; 2] = ["10.0.0.5", "10.0.0.4"];
const MASTER: &str = "10.0.0.2";

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// min 2 (the two base hosts), max 6.
pub(crate) fn rules() -> Rules {
    Rules {
        elastic_tag: ELASTIC.into(),
        worker_tags: BTreeMap::from([("NodeType".into(), "Worker".into())]),
        launch_template_id: Some("lt-1".into()),
        auto_scaling_group: None,
        min: 2,
        max: 6,
        base_hosts: BASE.iter().map(|s| ip(s)).collect(),
        master: Some(ip(MASTER)),
        slots: Slots::All(1),
        ack_timeout_ms: TIMEOUT,
        rebalance: dt::config::Rebalance::Drain,
        max_prepare_failures: 5,
        prepare_timeout_ms: PREPARE_TIMEOUT,
        scheduled_change_lead_ms: 3_600_000,
        stall_after_ms: None,
        launcher_silent_ms: None,
        max_unhealthy: dt::config::MaxUnhealthy::default(),
        health_leave: dt::config::HealthLeave::default(),
        replace_unhealthy: false,
    }
}

/// A worker launched from the cluster's template, carrying the elastic tag.
pub(crate) fn instance(id: &str, addr: &str, launched_at: Millis) -> Instance {
    let tags = [
        ("NodeType", "Worker"),
        ("aws:ec2launchtemplate:id", "lt-1"),
        (ELASTIC, "true"),
    ];
    Instance {
        id: id.into(),
        ip: ip(addr),
        instance_type: "p3.2xlarge".into(),
        az: "us-east-1a".into(),
        market: "on-demand".into(),
        launched_at,
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        capacity_reservation: None,
    }
}

/// The observed world, mutated between passes the way people and the job would.
#[derive(Default)]
pub(crate) struct World {
    pub(crate) instances: Vec<Instance>,
    pub(crate) markers: Markers,
    pub(crate) acks: Acks,
    pub(crate) notices: Vec<Notice>,
    pub(crate) group: Option<Result<Group, String>>,
    pub(crate) resume: Option<Millis>,
    pub(crate) mount_targets: Option<MountTargets>,
    pub(crate) progress: Option<Result<Progress, String>>,
}

impl World {
    pub(crate) fn with(instances: Vec<Instance>) -> World {
        World {
            instances,
            ..World::default()
        }
    }

    pub(crate) fn snap(&self) -> Snapshot {
        Snapshot {
            instances: Ok(self.instances.clone()),
            markers: Ok(self.markers.clone()),
            acks: Ok(self.acks.clone()),
            notices: self.notices.clone(),
            group: self.group.clone(),
            resume_requested: self.resume,
            mount_targets: self.mount_targets.clone(),
            progress: self.progress.clone(),
        }
    }

    pub(crate) fn ready(&mut self, addr: &str) {
        self.markers.success.insert(ip(addr));
    }

    pub(crate) fn inst(&mut self, id: &str) -> &mut Instance {
        self.instances.iter_mut().find(|i| i.id == id).unwrap()
    }

    /// What a person does in the EC2 console to ask for a worker's removal.
    pub(crate) fn delete_elastic_tag(&mut self, id: &str) {
        self.inst(id).tags.remove(ELASTIC);
    }

    pub(crate) fn vanish(&mut self, id: &str) {
        self.instances.retain(|i| i.id != id);
    }

    /// The job appends a `host_worker_log` line; returns its line number.
    pub(crate) fn log(&mut self, added: bool, addr: &str) -> u64 {
        self.acks.log_lines += 1;
        let map = if added {
            &mut self.acks.log_added
        } else {
            &mut self.acks.log_removed
        };
        map.insert(ip(addr), self.acks.log_lines);
        self.acks.log_lines
    }

    /// What `act` does with the plan's tags, so the next pass sees them.
    pub(crate) fn apply_tags(&mut self, plan: &Plan) {
        for (status, ids) in &plan.outcome.tags() {
            for id in ids {
                self.inst(id)
                    .tags
                    .insert(STATUS_TAG.into(), status.as_tag().into());
            }
        }
    }
}

/// One pass of the daemon: decide, then the tags are written. The caller keeps `plan.state`.
pub(crate) fn pass(rules: &Rules, world: &mut World, state: &State, now: Millis) -> Plan {
    let plan = decide(rules, &world.snap(), state, now);
    world.apply_tags(&plan);
    plan
}

pub(crate) fn hosts(plan: &Plan) -> Vec<String> {
    plan.outcome
        .hosts
        .iter()
        .map(|h| h.ip.to_string())
        .collect()
}

pub(crate) fn with_base(extra: &[&str]) -> Vec<String> {
    BASE.iter().chain(extra).map(|s| s.to_string()).collect()
}

pub(crate) fn tagged(plan: &Plan, status: WorkerStatus) -> Vec<String> {
    plan.outcome.tags().remove(&status).unwrap_or_default()
}

pub(crate) fn kinds(plan: &Plan) -> Vec<&str> {
    plan.outcome
        .events
        .iter()
        .map(|e| e.kind.as_str())
        .collect()
}

/// The status row of instance `id`; rows point into the snapshot `w` gave this pass.
pub(crate) fn worker<'p>(plan: &'p Plan, w: &World, id: &str) -> &'p Row {
    let row_id = |row: &Row| match row.source {
        RowSource::Instance(at) => w.instances[at].id.clone(),
        RowSource::Member(i) => plan.state.members[i].id.clone(),
    };
    plan.outcome
        .rows
        .iter()
        .find(|row| row_id(row) == id)
        .unwrap_or_else(|| panic!("{id} not in the status rows: {:?}", plan.outcome.rows))
}

pub(crate) fn waiting_for(plan: &Plan, w: &World, id: &str) -> String {
    worker(plan, w, id).waiting_for.clone().unwrap_or_default()
}

/// A world where i-1 (10.0.1.1) has joined (generation 1) and the job acknowledged it,
/// with one more member i-2 (10.0.1.2) so that a removal does not hit min.
pub(crate) fn two_members() -> (Rules, World, State) {
    let r = rules();
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
    ]);
    w.ready("10.0.1.1");
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    w.acks.generation = Some(1);
    let mut state = pass(&r, &mut w, &plan.state, 2_000).state;
    // The daemon delivered the notification.
    state.pending_notification = None;
    (r, w, state)
}

// ---- joining ----

#[test]
fn without_marker_the_worker_is_preparing() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), ["i-1"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "PREPARING");
    assert!(waiting_for(&plan, &w, "i-1").contains("prepare_data_success_10.0.1.1"));
    assert_eq!(plan.state.generation, 0);
    assert!(plan.outcome.notify.is_none());
    assert_eq!(kinds(&plan), ["preparing"]);

    // The tag is already there on the next pass: it is not written again.
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert!(plan.outcome.tags().is_empty(), "{:?}", plan.outcome.tags());
}

#[test]
fn a_new_worker_is_journaled_as_preparing_once_with_its_launch_time() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100_000)]);
    w.inst("i-1").market = "spot".into();
    let first = pass(&r, &mut w, &State::default(), 101_000);
    let e = &first.outcome.events[0];
    assert_eq!(e.kind, "preparing");
    assert_eq!(
        (e.instance.as_deref(), e.ip, e.launched_at),
        (Some("i-1"), Some(ip("10.0.1.1")), Some(100_000))
    );
    assert_eq!(
        e.message,
        "10.0.1.1 (p3.2xlarge, spot, launched 1970-01-01T00:01:40Z) is preparing: waiting for its \
         prepare-data marker prepare_data_success_10.0.1.1"
    );

    // Not on later passes, nor after a restart from the saved state.
    let second = pass(&r, &mut w, &first.state, 102_000);
    let restarted = pass(&r, &mut w, &reloaded(&second.state), 103_000);
    for plan in [&second, &restarted] {
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    }
}

#[test]
fn a_failed_tag_write_does_not_journal_preparing_again_but_a_reused_ip_does() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    // Decided without applying its tags: the tag write failed, the state remembers the status.
    let first = decide(&r, &w.snap(), &State::default(), 1_000);
    assert_eq!(kinds(&first), ["preparing"]);
    let retried = decide(&r, &w.snap(), &reloaded(&first.state), 2_000);
    assert_eq!(tagged(&retried, WorkerStatus::Preparing), ["i-1"]);
    assert!(
        retried.outcome.events.is_empty(),
        "{:?}",
        retried.outcome.events
    );

    // Another instance with the same IP begins a story of its own.
    w.vanish("i-1");
    w.instances.push(instance("i-9", "10.0.1.1", 3_000));
    let reused = pass(&r, &mut w, &retried.state, 4_000);
    assert_eq!(kinds(&reused), ["preparing"]);
    assert_eq!(reused.outcome.events[0].instance.as_deref(), Some("i-9"));
}

#[test]
fn a_worker_ready_when_first_seen_begins_with_joined_and_its_launch_time() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(kinds(&plan), ["joined", "generation"]);
    assert_eq!(plan.outcome.events[0].launched_at, Some(100));
}

#[test]
fn failed_marker_shows_prepare_failed_and_why() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.markers
        .failed
        .insert(ip("10.0.1.1"), "exit 3: disk full".into());
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(tagged(&plan, WorkerStatus::PrepareFailed), ["i-1"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "PREPARE_FAILED");
    assert!(waiting_for(&plan, &w, "i-1").contains("exit 3: disk full"));
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn a_failed_launch_template_worker_is_journaled_once_until_it_is_gone() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.markers
        .failed
        .insert(ip("10.0.1.1"), "exit 3: disk full".into());
    let first = pass(&r, &mut w, &State::default(), 1_000);
    let failed: Vec<&Event> = (first.outcome.events.iter())
        .filter(|e| e.kind == "prepare_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", first.outcome.events);
    assert_eq!(
        (failed[0].instance.as_deref(), failed[0].ip),
        (Some("i-1"), Some(ip("10.0.1.1")))
    );
    assert_eq!(
        failed[0].message,
        "10.0.1.1 (i-1): prepare-data failed (exit 3: disk full); it waits for a person \
         (a launch-template worker is not replaced)"
    );

    // The marker is read again on every pass, and by a restarted dtd: journaled once.
    let second = pass(&r, &mut w, &first.state, 2_000);
    let restarted = pass(&r, &mut w, &reloaded(&second.state), 3_000);
    for plan in [&second, &restarted] {
        assert_eq!(worker(plan, &w, "i-1").label(), "PREPARE_FAILED");
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    }
    // Forgotten once the instance is gone.
    w.vanish("i-1");
    let gone = pass(&r, &mut w, &restarted.state, 4_000);
    assert!(gone.state.prepare_failed.is_empty());
}

#[test]
fn joiners_follow_base_hosts_in_join_order_with_one_generation_per_pass() {
    let r = rules();
    // Launch time decides the order within a pass, not the instance id or the IP.
    let mut w = World::with(vec![
        instance("i-a", "10.0.1.9", 200),
        instance("i-b", "10.0.1.1", 100),
    ]);
    w.ready("10.0.1.9");
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.9"]));
    assert_eq!(plan.state.generation, 1, "two joins, one generation");
    let n = plan.outcome.notify.clone().expect("the job is notified");
    assert_eq!(n.generation, 1);
    assert_eq!(n.added, [ip("10.0.1.1"), ip("10.0.1.9")]);
    assert!(n.removed.is_empty());
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-a", "i-b"]);
    assert_eq!(kinds(&plan), ["joined", "joined", "generation"]);
    assert!(waiting_for(&plan, &w, "i-a").contains("acknowledge generation 1"));

    // A worker launched earlier but ready later goes after them: join order, not launch order.
    w.instances.push(instance("i-c", "10.0.1.5", 50));
    w.ready("10.0.1.5");
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.1", "10.0.1.9", "10.0.1.5"])
    );
    assert_eq!(plan.state.generation, 2);
}

#[test]
fn join_is_acknowledged_by_the_ack_file() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-1"]);

    // An older generation does not acknowledge the join.
    w.acks.generation = Some(0);
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert!(plan.outcome.tags().is_empty());
    assert_eq!(worker(&plan, &w, "i-1").label(), "ADD_QUEUED");

    w.acks.generation = Some(1);
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(tagged(&plan, WorkerStatus::Added), ["i-1"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "ADDED");
    assert_eq!(worker(&plan, &w, "i-1").waiting_for, None);
    assert_eq!(
        plan.state.generation, 1,
        "acknowledging changes no membership"
    );
    // From now on it trains: journaled once, not on later passes nor after a restart.
    assert_eq!(kinds(&plan), ["join_acknowledged"]);
    let e = &plan.outcome.events[0];
    assert_eq!(
        (e.instance.as_deref(), e.generation),
        (Some("i-1"), Some(1))
    );
    assert_eq!(
        e.message,
        "job acknowledged generation 1, which lists 10.0.1.1 (ack file): it trains"
    );
    // The job goes on acknowledging it (the ack file read again at every pass).
    w.acks.generation = Some(1);
    let later = pass(&r, &mut w, &plan.state, 4_000);
    let restarted = pass(&r, &mut w, &reloaded(&later.state), 5_000);
    for plan in [&later, &restarted] {
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    }
}

#[test]
fn join_is_acknowledged_by_an_added_line_after_the_mark() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    // The job already logged 10.0.1.1 as added in an earlier life of the cluster.
    w.log(true, "10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(plan.state.members[0].log_mark, 1);
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-1"]);

    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(
        worker(&plan, &w, "i-1").label(),
        "ADD_QUEUED",
        "old line counted"
    );

    w.log(true, "10.0.1.1");
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(tagged(&plan, WorkerStatus::Added), ["i-1"]);
    assert_eq!(kinds(&plan), ["join_acknowledged"]);
    assert!(plan.outcome.events[0].message.contains("(host_worker_log)"));
}

#[test]
fn joins_stop_at_max() {
    let r = Rules { max: 3, ..rules() };
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
        instance("i-3", "10.0.1.3", 300),
    ]);
    for a in ["10.0.1.1", "10.0.1.2", "10.0.1.3"] {
        w.ready(a);
    }
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert_eq!(
        plan.outcome.notify.as_ref().unwrap().added,
        [ip("10.0.1.1")]
    );
    assert_eq!(
        tagged(&plan, WorkerStatus::AddQueued),
        ["i-1", "i-2", "i-3"]
    );
    for id in ["i-2", "i-3"] {
        assert_eq!(waiting_for(&plan, &w, id), "room under max (3)");
    }

    // Still full on the next pass: nothing changes.
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert_eq!(plan.state.generation, 1);
    assert_eq!(waiting_for(&plan, &w, "i-2"), "room under max (3)");
}

// ---- leaving on purpose ----

#[test]
fn removal_waits_for_the_ack_file_then_terminates() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(
        hosts(&plan),
        with_base(&["10.0.1.2"]),
        "out of the host file at once"
    );
    assert_eq!(plan.state.generation, 2);
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!((n.generation, n.removed), (2, vec![ip("10.0.1.1")]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert!(
        plan.outcome.terminate().is_empty(),
        "not before the job acknowledges"
    );
    assert_eq!(kinds(&plan), ["removal_queued", "generation"]);
    assert_eq!(plan.outcome.events[0].cause, Some(Cause::ElasticTag));
    assert!(waiting_for(&plan, &w, "i-1").contains("acknowledge generation 2"));

    // The job still runs generation 1: keep waiting.
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);

    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
    assert_eq!(kinds(&plan), ["acknowledged"]);
    assert!(matches!(plan.state.removals[0].stage, Stage::Ending(_)));
    assert_eq!(plan.state.generation, 2);
}

#[test]
fn removal_is_acknowledged_by_a_removed_line_after_its_mark_only() {
    let (r, mut w, state) = two_members();
    // The job once removed this IP, long ago: that line predates this removal.
    w.log(false, "10.0.1.1");
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.removals[0].log_mark, 1);

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "a line before the mark counted"
    );

    // A REMOVED line for another IP is not an acknowledgement either.
    w.log(false, "10.0.1.2");
    let plan = pass(&r, &mut w, &plan.state, 25_000);
    assert!(plan.outcome.terminate().is_empty());

    w.log(false, "10.0.1.1");
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
    assert_eq!(kinds(&plan), ["acknowledged"]);
}

#[test]
fn removal_terminates_at_the_ack_timeout() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    let deadline = plan.state.removals[0].deadline;
    assert_eq!(deadline, 10_000 + TIMEOUT);

    let plan = pass(&r, &mut w, &plan.state, deadline - 1);
    assert!(plan.outcome.terminate().is_empty());
    assert!(waiting_for(&plan, &w, "i-1").contains("timeout in 1s"));

    let plan = pass(&r, &mut w, &plan.state, deadline);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(kinds(&plan), ["ack_timeout"]);
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
}

#[test]
fn removal_is_held_at_min_and_journaled_once() {
    let (_, mut w, state) = two_members();
    // Two base hosts + two members = 4 = min: nobody may leave.
    let r = Rules { min: 4, ..rules() };
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.notify.is_none());
    assert_eq!(plan.state.generation, 1);
    assert_eq!(kinds(&plan), ["removal_held"]);
    assert_eq!(worker(&plan, &w, "i-1").label(), "ADDED");
    assert_eq!(waiting_for(&plan, &w, "i-1"), "worker count above min (4)");

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(
        plan.outcome.events.is_empty(),
        "held twice: {:?}",
        plan.outcome.events
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));

    // A third worker joins: now there is room above min and the removal goes ahead.
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert!(plan.state.held.is_empty());
}

#[test]
fn base_hosts_and_master_are_never_removed_or_terminated() {
    let r = rules();
    // 10.0.0.5 (base) and the master run as cluster workers without the elastic tag;
    // 10.0.0.4 (base) has no instance at all and is listed anyway.
    let mut base = instance("i-base", "10.0.0.5", 100);
    let mut master = instance("i-master", MASTER, 100);
    base.tags.remove(ELASTIC);
    master.tags.remove(ELASTIC);
    base.tags.insert(STATUS_TAG.into(), "ADDED".into());
    let mut w = World::with(vec![base, master]);
    w.ready("10.0.0.5");
    w.ready(MASTER);
    w.acks.generation = Some(99);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        hosts(&plan),
        with_base(&[]),
        "master listed or base host lost"
    );
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.tags().is_empty(), "{:?}", plan.outcome.tags());
    // 99 is no generation this (new) dtd wrote: refused, and changes nothing.
    assert_eq!(
        kinds(&plan),
        ["ack_refused", "removal_refused", "removal_refused"]
    );
    assert_eq!(worker(&plan, &w, "i-base").label(), "BASE");
    assert_eq!(worker(&plan, &w, "i-master").label(), "BASE");

    // Refused once, not on every pass; still not terminated long after any timeout.
    let plan = pass(&r, &mut w, &plan.state, 1_000 + 10 * TIMEOUT);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(hosts(&plan), with_base(&[]));
}

#[test]
fn instances_without_the_cluster_tags_are_ignored() {
    let r = rules();
    let mut other_role = instance("i-role", "10.0.2.1", 100);
    other_role.tags.insert("NodeType".into(), "Master".into());
    let mut other_template = instance("i-lt", "10.0.2.2", 100);
    other_template
        .tags
        .insert("aws:ec2launchtemplate:id".into(), "lt-2".into());
    // Also tempting: managed-looking status tag and no elastic tag (would be terminated if ours).
    let mut no_role = instance("i-norole", "10.0.2.3", 100);
    no_role.tags.remove("NodeType");
    no_role.tags.remove(ELASTIC);
    no_role.tags.insert(STATUS_TAG.into(), "PREPARING".into());
    let mut w = World::with(vec![other_role, other_template, no_role]);
    for a in ["10.0.2.1", "10.0.2.2", "10.0.2.3"] {
        w.ready(a);
    }
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.tags().is_empty(), "{:?}", plan.outcome.tags());
    assert!(plan.outcome.rows.is_empty(), "{:?}", plan.outcome.rows);
    assert!(plan.outcome.events.is_empty());
}

#[test]
fn unjoined_managed_instance_losing_its_elastic_tag_is_terminated_at_once() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), ["i-1"]);

    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(
        plan.outcome.terminate(),
        ["i-1"],
        "terminated once, right away"
    );
    assert_eq!(tagged(&plan, WorkerStatus::Removed), ["i-1"]);
    assert_eq!(kinds(&plan), ["removal_queued"]);
    assert_eq!(
        plan.outcome.events[0].cause,
        Some(Cause::ElasticTag),
        "ending at once, it still says why"
    );
    assert_eq!(plan.state.generation, 0, "it never was in the host file");
    assert!(plan.outcome.notify.is_none());
    assert!(matches!(plan.state.removals[0].stage, Stage::Ending(_)));
}

#[test]
fn instance_never_managed_without_elastic_tag_is_left_alone() {
    let r = rules();
    let mut i = instance("i-1", "10.0.1.1", 100);
    i.tags.remove(ELASTIC);
    let mut w = World::with(vec![i]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.outcome.tags().is_empty());
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(worker(&plan, &w, "i-1").label(), "-");
    assert_eq!(waiting_for(&plan, &w, "i-1"), "no elastic tag: not managed");
}

#[test]
fn requested_termination_is_resent_sent_is_not_and_gone_is_forgotten() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);

    // The TerminateInstances call failed (state still Requested): asked again.
    let plan = pass(&r, &mut w, &plan.state, 30_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);

    // It succeeded: the daemon marks it Sent, and it is never sent again.
    let mut state = plan.state;
    state.removals[0].stage = Stage::Ended;
    let plan = pass(&r, &mut w, &state, 40_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(worker(&plan, &w, "i-1").label(), "REMOVED");
    assert_eq!(waiting_for(&plan, &w, "i-1"), "the instance to shut down");

    // Once the instance is gone the removal is forgotten, quietly.
    w.vanish("i-1");
    let plan = pass(&r, &mut w, &plan.state, 50_000);
    assert!(plan.state.removals.is_empty());
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn member_whose_instance_is_gone_leaves_the_host_file() {
    let (r, mut w, state) = two_members();
    w.vanish("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(kinds(&plan), ["gone", "generation"]);
    assert_eq!(plan.state.generation, 2);
    assert_eq!(
        plan.outcome.notify.clone().unwrap().removed,
        [ip("10.0.1.1")]
    );
    assert!(plan.outcome.terminate().is_empty());
    assert!(plan.state.removals.is_empty());
}

// ---- partial views ----

#[test]
fn ec2_failure_holds_everything() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let queued = pass(&r, &mut w, &state, 10_000).state;
    w.acks.generation = Some(2);
    let mut snap = w.snap();
    snap.instances = Err("DescribeInstances: throttled".into());
    // Past the deadline too: still nothing is terminated on a partial view.
    let plan = decide(&r, &snap, &queued, 10_000 + 2 * TIMEOUT);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]), "host file changed");
    assert!(plan.outcome.terminate().is_empty());
    assert!(
        plan.outcome.holds[0].contains("EC2 instances"),
        "{:?}",
        plan.outcome.holds
    );
    assert_eq!(plan.state.generation, 2);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    // The member it cannot see is still shown, with what it waits for.
    assert_eq!(waiting_for(&plan, &w, "i-2"), "a complete EC2 view");

    // EC2 answers again: the acknowledged removal goes ahead.
    let plan = pass(&r, &mut w, &plan.state, 10_000 + 2 * TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(plan.outcome.holds.is_empty());
}

#[test]
fn ec2_failure_does_not_drop_members_it_cannot_see() {
    let (r, w, state) = two_members();
    let snap = Snapshot {
        instances: Err("timeout".into()),
        ..w.snap()
    };
    let plan = decide(&r, &snap, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.notify.is_none());
    assert_eq!(plan.state.members, state.members);
}

#[test]
fn marker_failure_blocks_joins_and_removals() {
    let (r, mut w, state) = two_members();
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    w.delete_elastic_tag("i-1");
    let mut snap = w.snap();
    snap.markers = Err("EFS: stale file handle".into());
    let plan = decide(&r, &snap, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(plan.state.generation, 1);
    assert!(plan.outcome.holds[0].contains("prepare-data markers"));
    assert_eq!(
        waiting_for(&plan, &w, "i-1"),
        "a complete view to remove it"
    );

    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert_eq!(plan.state.generation, 2);
}

#[test]
fn ack_failure_blocks_removals_and_terminations() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let queued = pass(&r, &mut w, &state, 10_000).state;
    w.delete_elastic_tag("i-2");
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    let mut snap = w.snap();
    snap.acks = Err("ack: permission denied".into());
    let plan = decide(&r, &snap, &queued, 10_000 + 2 * TIMEOUT);
    assert!(
        plan.outcome.terminate().is_empty(),
        "i-1 terminated past its deadline"
    );
    assert!(plan.outcome.holds[0].contains("acknowledgements"));
    // i-2 stays; joins do not need the acks, so i-3 joins.
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.3"]));
    assert_eq!(plan.state.removals.len(), 1);
    assert_eq!(waiting_for(&plan, &w, "i-1"), "a complete view");

    let plan = pass(&r, &mut w, &plan.state, 10_000 + 2 * TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.3"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-2"]);
}

// ---- second thoughts and notifications ----

#[test]
fn removal_is_cancelled_when_the_elastic_tag_returns() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));

    w.inst("i-1").tags.insert(ELASTIC.into(), "yes".into());
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(plan.state.removals.is_empty());
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(kinds(&plan), ["removal_cancelled", "joined", "generation"]);
    // Its marker is still there, so it is back in training, after the others.
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2", "10.0.1.1"]));
    assert_eq!(tagged(&plan, WorkerStatus::AddQueued), ["i-1"]);
}

#[test]
fn requested_termination_is_not_cancelled_by_the_elastic_tag() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    let plan = pass(&r, &mut w, &plan.state, 10_000 + TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);

    w.inst("i-1").tags.insert(ELASTIC.into(), "yes".into());
    let plan = pass(&r, &mut w, &plan.state, 20_000 + TIMEOUT);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
}

#[test]
fn undelivered_notification_survives_and_merges() {
    let r = rules();
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
    ]);
    w.ready("10.0.1.1");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    let first = Notification {
        generation: 1,
        added: vec![ip("10.0.1.1")],
        removed: vec![],
        notices: vec![],
    };
    assert_eq!(plan.outcome.notify.as_ref(), Some(&first));

    // Not delivered (the job's pidfile is missing): the same notification is offered again.
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(plan.outcome.notify.as_ref(), Some(&first));

    // Another join before delivery: one notification carrying both.
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &plan.state, 3_000);
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!(n.generation, 2);
    assert_eq!(n.added, [ip("10.0.1.1"), ip("10.0.1.2")]);

    // 10.0.1.1 leaves again before the job heard it came: the two cancel out.
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &plan.state, 4_000);
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!(n.generation, 3);
    assert_eq!(n.added, [ip("10.0.1.2")]);
    assert!(n.removed.is_empty(), "{n:?}");

    // Delivered: the daemon clears it, and nothing is offered any more.
    let mut state = plan.state;
    state.pending_notification = None;
    let plan = pass(&r, &mut w, &state, 5_000);
    assert!(plan.outcome.notify.is_none());
}

#[test]
fn same_inputs_give_the_same_plan() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.instances.push(instance("i-4", "10.0.1.4", 300));
    w.ready("10.0.1.3");
    w.markers.failed.insert(ip("10.0.1.4"), "exit 1".into());
    w.instances.reverse();
    let snap = w.snap();
    let a = decide(&r, &snap, &state, 10_000);
    let b = decide(&r, &snap, &state, 10_000);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // Observation order does not matter either: EC2 pages come in any order. Only the rows'
    // positions into the snapshot differ, so the rows are compared as the status table shows them.
    w.instances.reverse();
    let snap_c = w.snap();
    let mut c = decide(&r, &snap_c, &state, 10_000);
    assert_eq!(
        worker_views(&a.outcome.rows, &snap, &a.state),
        worker_views(&c.outcome.rows, &snap_c, &c.state)
    );
    let mut a = a;
    a.outcome.rows.clear();
    c.outcome.rows.clear();
    assert_eq!(format!("{a:?}"), format!("{c:?}"));
}

#[test]
fn an_ack_file_ahead_of_the_daemon_does_not_acknowledge_an_unseen_removal() {
    let (r, mut w, state) = two_members();
    // A worker wrote it, or someone typed `dtctl ack 7`: dtd never wrote generations 2..7.
    w.acks.generation = Some(7);
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "terminated before the job saw it leave"
    );
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(
        plan.state.generation, 2,
        "numbered from what dtd wrote, not from what the ack file claims"
    );
    assert_eq!(plan.outcome.notify.as_ref().unwrap().generation, 2);
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert_eq!(
        kinds(&plan),
        ["ack_refused", "removal_queued", "generation"]
    );
    assert!(
        plan.outcome.refused[0].contains("holds generation 7, but dtd has written only up to 1"),
        "{:?}",
        plan.outcome.refused
    );

    // Still above what dtd wrote: refused, and journaled only once.
    w.acks.generation = Some(8);
    let plan = pass(&r, &mut w, &plan.state, 20_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(kinds(&plan), ["ack_refused"]);
    let plan = pass(&r, &mut w, &plan.state, 21_000);
    assert!(kinds(&plan).is_empty(), "{:?}", kinds(&plan));
    assert_eq!(plan.outcome.refused.len(), 1, "shown on every pass");

    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 22_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    assert!(plan.outcome.refused.is_empty());
}

#[test]
fn an_ack_of_the_largest_number_wraps_nothing() {
    let (r, mut w, state) = two_members();
    w.acks.generation = Some(u64::MAX);
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.generation, 2);
    let mut st = plan.state;
    for now in [20_000, 30_000, 10_000 + TIMEOUT - 1] {
        let plan = pass(&r, &mut w, &st, now);
        assert!(
            plan.outcome.terminate().is_empty(),
            "acknowledged by a wrapped number"
        );
        st = plan.state;
    }
    // A state file at the limit (edited by hand) holds the membership rather than wrap to 0.
    let mut full = st.clone();
    full.generation = u64::MAX;
    w.acks.generation = Some(u64::MAX);
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.ready("10.0.1.3");
    let plan = pass(&r, &mut w, &full, 40_000);
    assert_eq!(plan.state.generation, u64::MAX);
    assert!(
        plan.outcome
            .holds
            .iter()
            .any(|h| h.contains("at its limit")),
        "{:?}",
        plan.outcome.holds
    );
}

#[test]
fn a_worker_made_a_base_host_while_leaving_is_not_terminated() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);

    // The operator keeps 10.0.1.1 by listing it in base_hosts and restarting dtd; then the job
    // acknowledges the generation that dropped it, and the ack timeout passes too.
    let mut kept = r.clone();
    kept.base_hosts.push(ip("10.0.1.1"));
    w.acks.generation = Some(2);
    let plan = pass(&kept, &mut w, &plan.state, 10_000 + 2 * TIMEOUT);
    assert!(
        plan.outcome.terminate().is_empty(),
        "terminated a base host"
    );
    assert!(plan.state.removals.is_empty(), "{:?}", plan.state.removals);
    assert_eq!(
        hosts(&plan),
        ["10.0.0.5", "10.0.0.4", "10.0.1.1", "10.0.1.2"]
    );
}

#[test]
fn a_member_made_a_base_host_is_listed_once() {
    let (mut r, mut w, state) = two_members();
    r.base_hosts.push(ip("10.0.1.1"));
    let plan = pass(&r, &mut w, &state, 10_000);
    let mut expected = with_base(&[]);
    expected.push("10.0.1.1".into());
    expected.push("10.0.1.2".into());
    assert_eq!(hosts(&plan), expected);
}

#[test]
fn with_the_state_lost_an_added_worker_leaving_waits_for_a_new_acknowledgement() {
    let (r, mut w, _) = two_members();
    w.delete_elastic_tag("i-1");
    w.acks.generation = Some(5);
    // A new master with an empty state directory: i-1 still says ADDED and may be training.
    // dtd numbers on from the `generation` file it wrote (`store::load_state_resuming`).
    let lost = State {
        generation: 5,
        ..State::default()
    };
    let plan = pass(&r, &mut w, &lost, 10_000);
    assert!(
        plan.outcome.terminate().is_empty(),
        "{:?}",
        plan.outcome.terminate()
    );
    assert_eq!(worker(&plan, &w, "i-1").label(), "REMOVAL_QUEUED");
    w.acks.generation = Some(6);
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert_eq!(plan.outcome.terminate(), vec!["i-1".to_string()]);
}

#[test]
fn a_held_removal_is_journaled_again_after_the_tag_came_back() {
    let r = Rules { min: 4, ..rules() };
    let (_, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(kinds(&plan), vec!["removal_held"]);
    w.inst("i-1").tags.insert(ELASTIC.into(), "true".into());
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(plan.state.held.is_empty());
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(kinds(&plan), vec!["removal_held"]);
    w.vanish("i-1");
    let plan = pass(&r, &mut w, &plan.state, 13_000);
    assert!(plan.state.held.is_empty(), "forgotten with the instance");
}

// ---- notices: interruptions, rebalance recommendations, Capacity Blocks ----

pub(crate) fn notice(id: &str, kind: NoticeKind, target: NoticeTarget) -> Notice {
    Notice {
        id: id.into(),
        kind,
        target,
        deadline: None,
        source: "queue",
    }
}

pub(crate) fn spot(event: &str, instance: &str) -> Notice {
    let target = NoticeTarget::Instance(instance.into());
    notice(event, NoticeKind::Interruption, target)
}

#[test]
fn an_interruption_takes_the_worker_out_at_once_and_never_terminates_it() {
    let (r, mut w, state) = two_members();
    w.notices = vec![Notice {
        deadline: Some(123_000),
        ..spot("e-1", "i-1")
    }];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(plan.state.generation, 2);
    let n = plan.outcome.notify.clone().expect("the job is notified");
    assert_eq!(n.removed, [ip("10.0.1.1")]);
    // The job hears why and by when, for the worker that left.
    let told = JobNotice {
        ip: ip("10.0.1.1"),
        kind: "interruption".into(),
        deadline: Some(123_000),
    };
    assert_eq!(n.notices, [told]);
    assert_eq!(tagged(&plan, WorkerStatus::Interrupted), ["i-1"]);
    assert!(kinds(&plan).contains(&"interrupted"), "{:?}", kinds(&plan));
    assert!(
        plan.outcome.terminate().is_empty(),
        "AWS reclaims it, not dtd"
    );
    assert_eq!(plan.state.interruptions, 1);

    // No acknowledgement, no timeout: it stays INTERRUPTED, untouched, until AWS takes it.
    w.notices.clear();
    let later = pass(&r, &mut w, &plan.state, 3_000 + 2 * TIMEOUT);
    assert!(later.outcome.terminate().is_empty());
    assert_eq!(worker(&later, &w, "i-1").label(), "INTERRUPTED");
    w.vanish("i-1");
    let gone = pass(&r, &mut w, &later.state, 3_000 + 3 * TIMEOUT);
    assert!(gone.state.removals.is_empty());
    assert_eq!(gone.state.interruptions, 1);
}

#[test]
fn a_duplicate_notice_is_heeded_once() {
    let (r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-1"), spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    let interrupted = kinds(&plan).iter().filter(|k| **k == "interrupted").count();
    assert_eq!(interrupted, 1);
    // Redelivered after a restart: the state remembers the event id.
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
    assert_eq!(again.state.generation, 2);
    assert_eq!(again.state.interruptions, 1);
}

#[test]
fn the_agent_and_the_queue_reporting_one_interruption_count_once() {
    let (r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &state, 3_000);
    let mut agent = spot("agent:i-1:imds:spot-interruption:t", "i-1");
    agent.source = "agent";
    w.notices = vec![agent];
    let again = pass(&r, &mut w, &plan.state, 4_000);
    assert!(
        again.outcome.events.is_empty(),
        "{:?}",
        again.outcome.events
    );
    assert_eq!(again.state.generation, 2, "no second generation");
    assert_eq!(again.state.interruptions, 1);
    assert!(again.outcome.terminate().is_empty());
}

#[test]
fn a_notice_for_a_foreign_or_unknown_instance_changes_nothing() {
    let (r, mut w, state) = two_members();
    let mut foreign = instance("i-9", "10.0.9.9", 300);
    foreign.tags.remove("NodeType");
    w.instances.push(foreign);
    w.notices = vec![
        spot("e-1", "i-9"),
        spot("e-2", "i-404"),
        notice(
            "e-3",
            NoticeKind::Interruption,
            NoticeTarget::Ip(ip("10.0.9.9")),
        ),
    ];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(plan.state.noticed.is_empty());
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn an_interruption_ends_the_wait_of_a_worker_already_leaving() {
    let (r, mut w, state) = two_members();
    w.delete_elastic_tag("i-1");
    let queued = pass(&r, &mut w, &state, 3_000);
    assert_eq!(tagged(&queued, WorkerStatus::RemovalQueued), ["i-1"]);
    w.notices = vec![spot("e-1", "i-1")];
    let plan = pass(&r, &mut w, &queued.state, 4_000);
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(tagged(&plan, WorkerStatus::Interrupted), ["i-1"]);
    w.notices.clear();
    let after_timeout = pass(&r, &mut w, &plan.state, 4_000 + TIMEOUT);
    assert!(
        after_timeout.outcome.terminate().is_empty(),
        "never terminated by dtd"
    );
}

#[test]
fn an_interruption_is_heeded_even_when_ec2_cannot_be_read() {
    let (r, mut w, state) = two_members();
    w.notices = vec![spot("e-1", "i-2")];
    let snap = Snapshot {
        instances: Err("timeout".into()),
        ..w.snap()
    };
    let plan = decide(&r, &snap, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(plan.outcome.terminate().is_empty());
}

#[test]
fn an_interrupted_worker_that_never_joined_never_joins() {
    let (r, mut w, state) = two_members();
    w.instances.push(instance("i-3", "10.0.1.3", 300));
    w.notices = vec![notice(
        "m-1",
        NoticeKind::Interruption,
        NoticeTarget::Ip(ip("10.0.1.3")),
    )];
    let plan = pass(&r, &mut w, &state, 3_000);
    w.ready("10.0.1.3");
    w.notices.clear();
    let later = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(hosts(&later), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(worker(&later, &w, "i-3").label(), "INTERRUPTED");
}

#[test]
fn a_base_host_interruption_is_journaled_but_it_stays() {
    let r = rules();
    let mut w = World::with(vec![instance("i-b", BASE[0], 50)]);
    w.notices = vec![spot("e-1", "i-b")];
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert_eq!(kinds(&plan), ["notice_ignored"]);
}

#[test]
fn a_rebalance_recommendation_drains_gracefully() {
    let (r, mut w, state) = two_members();
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(tagged(&plan, WorkerStatus::RemovalQueued), ["i-1"]);
    assert!(plan.outcome.terminate().is_empty(), "waits for the job");
    assert!(waiting_for(&plan, &w, "i-1").contains("acknowledge generation 2"));
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::Rebalance));
    w.notices.clear();
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(acked.outcome.terminate(), ["i-1"]);
    assert_eq!(
        acked.state.interruptions, 0,
        "a drain is not an interruption"
    );
    // The elastic tag is still there: a drain is not cancelled by it.
    assert!(w.inst("i-1").tags.get(ELASTIC).is_some());
}

#[test]
fn a_rebalance_recommendation_in_report_mode_only_journals() {
    let (mut r, mut w, state) = two_members();
    r.rebalance = dt::config::Rebalance::Report;
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["rebalance_recommendation"]);
}

#[test]
fn a_rebalance_recommendation_holds_at_min() {
    let (mut r, mut w, state) = two_members();
    r.min = 4;
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(kinds(&plan), ["removal_held"]);
}

#[test]
fn a_capacity_block_ending_drains_its_workers_below_min_and_before_the_end() {
    let (mut r, mut w, state) = two_members();
    r.min = 4;
    w.inst("i-1").capacity_reservation = Some("cr-1".into());
    w.inst("i-2").capacity_reservation = Some("cr-1".into());
    let mut n = notice(
        "e-1",
        NoticeKind::CapacityBlockExpiring,
        NoticeTarget::CapacityReservation("cr-1".into()),
    );
    n.deadline = Some(3_000 + 60_000);
    w.notices = vec![n];
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&[]));
    assert!(plan.state.removals.iter().all(|x| x.deadline == 63_000));
    w.notices.clear();
    let deadline = pass(&r, &mut w, &plan.state, 63_000);
    let mut terminated = deadline.outcome.terminate().clone();
    terminated.sort();
    assert_eq!(terminated, ["i-1", "i-2"]);
}

#[test]
fn a_scheduled_change_weeks_away_drains_only_its_lead_before_it_starts() {
    let (r, mut w, state) = two_members();
    let starts = 3_000 + 14 * 24 * 3_600_000;
    let mut n = notice(
        "health:arn:i-1",
        NoticeKind::ScheduledChange,
        NoticeTarget::Instance("i-1".into()),
    );
    n.deadline = Some(starts);
    w.notices = vec![n];
    // Two weeks ahead: the GPUs keep training; the notice is kept and the hold says until when.
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(plan.outcome.deferred_notices, ["health:arn:i-1"]);
    assert!(
        plan.outcome
            .holds
            .iter()
            .any(|h| h.contains("i-1: drains from")),
        "{:?}",
        plan.outcome.holds
    );
    assert!(kinds(&plan).is_empty(), "{:?}", kinds(&plan));
    // An hour (the default lead) before it starts, it drains, terminated by the start at the latest.
    let from = starts - r.scheduled_change_lead_ms;
    let plan = pass(&r, &mut w, &plan.state, from);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert!(plan.outcome.deferred_notices.is_empty());
    assert_eq!(kinds(&plan), ["removal_queued", "generation"]);
    assert!(plan.state.removals.iter().all(|x| x.deadline <= starts));
}

// ---- the worker Auto Scaling group ----

const HEARTBEAT: u64 = 60_000;

/// A group "grp" (min 0, desired 2, max 6) with both hooks; instances launched by it.
fn group_rules() -> Rules {
    Rules {
        launch_template_id: None,
        auto_scaling_group: Some("grp".into()),
        ..rules()
    }
}

fn group_instance(id: &str, addr: &str, launched_at: Millis) -> Instance {
    let mut i = instance(id, addr, launched_at);
    i.tags.remove("aws:ec2launchtemplate:id");
    i.tags
        .insert("aws:autoscaling:groupName".into(), "grp".into());
    i
}

fn group_of(w: &World, desired: usize) -> Group {
    let members = w.instances.iter().map(|i| {
        let m = GroupMember {
            lifecycle_state: "InService".into(),
            protected: false,
        };
        (i.id.clone(), m)
    });
    Group {
        name: "grp".into(),
        min: 0,
        desired,
        max: 6,
        instances: members.collect(),
        launching_hook: Some(Hook {
            name: "grp-launching".into(),
            heartbeat_timeout_ms: HEARTBEAT,
        }),
        terminating_hook: Some(Hook {
            name: "grp-terminating".into(),
            heartbeat_timeout_ms: HEARTBEAT,
        }),
    }
}

impl World {
    fn lifecycle(&mut self, id: &str, state: &str) {
        if let Some(Ok(g)) = &mut self.group {
            g.instances.get_mut(id).unwrap().lifecycle_state = state.into();
        }
    }

    fn group_mut(&mut self) -> &mut Group {
        self.group.as_mut().unwrap().as_mut().unwrap()
    }

    /// What act does with the plan's protection list.
    fn apply_protect(&mut self, plan: &Plan) {
        for id in &plan.outcome.protect() {
            self.group_mut().instances.get_mut(id).unwrap().protected = true;
        }
    }
}

/// Two group workers in the job, acknowledged and protected.
fn two_group_members() -> (Rules, World, State) {
    let r = group_rules();
    let mut w = World::with(vec![
        group_instance("i-1", "10.0.1.1", 100),
        group_instance("i-2", "10.0.1.2", 200),
    ]);
    w.group = Some(Ok(group_of(&w, 2)));
    w.ready("10.0.1.1");
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert_eq!(
        plan.outcome.protect(),
        ["i-1", "i-2"],
        "members are protected from scale-in"
    );
    w.apply_protect(&plan);
    w.acks.generation = Some(1);
    let mut state = pass(&r, &mut w, &plan.state, 2_000).state;
    state.pending_notification = None;
    (r, w, state)
}

fn hook(plan: &Plan) -> Vec<(String, String, &'static str)> {
    (plan.outcome.complete_hooks().iter())
        .map(|a| (a.instance.clone(), a.hook.clone(), a.result.as_str()))
        .collect()
}

#[test]
fn a_new_group_worker_is_held_by_the_launching_hook_until_its_marker_appears() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    let waiting = pass(&r, &mut w, &State::default(), 1_000);
    assert!(waiting.outcome.complete_hooks().is_empty());
    assert_eq!(worker(&waiting, &w, "i-1").label(), "PREPARING");
    // A long prepare-data keeps the hook alive.
    let long = pass(&r, &mut w, &waiting.state, 1_000 + HEARTBEAT / 2);
    assert_eq!(
        long.outcome.heartbeats(),
        [("i-1".to_string(), "grp-launching".to_string())]
    );
    w.ready("10.0.1.1");
    let ready = pass(&r, &mut w, &long.state, 2_000 + HEARTBEAT / 2);
    assert_eq!(
        hook(&ready),
        [("i-1".into(), "grp-launching".into(), "CONTINUE")]
    );
    assert_eq!(
        hosts(&ready),
        with_base(&[]),
        "not in the job before InService"
    );
    w.lifecycle("i-1", "InService");
    let joined = pass(&r, &mut w, &ready.state, 3_000 + HEARTBEAT / 2);
    assert!(joined.state.launch_heartbeats.is_empty());
    assert_eq!(hosts(&joined), with_base(&["10.0.1.1"]));
}

#[test]
fn a_new_group_worker_whose_prepare_data_failed_is_abandoned_and_counted() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    w.markers
        .failed
        .insert(ip("10.0.1.1"), "exit 3 after 3 attempt(s): no space".into());
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        hook(&plan),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(plan.state.prepare_failures, 1);
    assert!(plan
        .state
        .last_prepare_failure
        .as_deref()
        .unwrap()
        .contains("no space"));
    // The group has not moved it on yet: the completion is resent, the failure not recounted.
    let again = pass(&r, &mut w, &plan.state, 3_000);
    assert_eq!(
        hook(&again),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(again.state.prepare_failures, 1, "one worker, one failure");
    assert_eq!(count_kind(&plan, "prepare_failed"), 1, "{:?}", kinds(&plan));
    let e = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "prepare_failed");
    assert!(
        e.is_some_and(|e| e.message.contains("no space")
            && e.message
                .ends_with("abandoned in Pending:Wait by grp-launching; the group replaces it")),
        "{e:?}"
    );
    let restarted = pass(&r, &mut w, &reloaded(&again.state), 4_000);
    for plan in [&again, &restarted] {
        assert_eq!(count_kind(plan, "prepare_failed"), 0, "{:?}", kinds(plan));
    }
}

/// One group worker i-1 (10.0.1.1) held in `Pending:Wait` by the launching hook, first seen at
/// `HELD_AT`, with no marker of either kind (its user data died before `dtd agent` started).
const HELD_AT: Millis = 1_000;

fn held_at_launch(r: &Rules) -> (World, Plan) {
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    let plan = pass(r, &mut w, &State::default(), HELD_AT);
    (w, plan)
}

fn beats(plan: &Plan) -> usize {
    plan.outcome.heartbeats().len()
}

fn count_kind(plan: &Plan, kind: &str) -> usize {
    kinds(plan).iter().filter(|k| **k == kind).count()
}

/// What dtd does across a restart: the state goes through state.json and back.
fn reloaded(state: &State) -> State {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    dt::store::save_json(&path, state).unwrap();
    dt::store::load_state(&path).unwrap()
}

#[test]
fn a_held_worker_that_never_reports_is_heartbeated_until_the_prepare_timeout_then_abandoned() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    assert_eq!(worker(&first, &w, "i-1").label(), "PREPARING");
    assert!(
        waiting_for(&first, &w, "i-1").contains("abandoned if none within 1h"),
        "{}",
        waiting_for(&first, &w, "i-1")
    );
    // Before the timeout: a heartbeat every half heartbeat timeout, nothing completed.
    let mut state = first.state;
    let mut now = HELD_AT;
    let mut sent = 0;
    while now + HEARTBEAT / 2 < HELD_AT + PREPARE_TIMEOUT {
        now += HEARTBEAT / 2;
        let plan = pass(&r, &mut w, &state, now);
        assert!(
            plan.outcome.complete_hooks().is_empty(),
            "completed at {now}"
        );
        assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
        sent += beats(&plan);
        state = plan.state;
    }
    assert_eq!(sent as u64, PREPARE_TIMEOUT / (HEARTBEAT / 2) - 1);
    let last = pass(&r, &mut w, &state, HELD_AT + PREPARE_TIMEOUT - 1);
    assert!(
        last.outcome.complete_hooks().is_empty(),
        "one millisecond early"
    );

    // At the timeout: ABANDON, journaled, counted, and no more heartbeats.
    let over = pass(&r, &mut w, &last.state, HELD_AT + PREPARE_TIMEOUT);
    assert_eq!(
        hook(&over),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(beats(&over), 0);
    assert_eq!(count_kind(&over, "prepare_never_reported"), 1);
    let event = over
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "prepare_never_reported");
    let event = event.unwrap();
    assert_eq!(event.instance.as_deref(), Some("i-1"));
    assert!(
        event.message.contains("never reported within 1h"),
        "{}",
        event.message
    );
    assert_eq!(tagged(&over, WorkerStatus::PrepareFailed), ["i-1"]);
    assert!(waiting_for(&over, &w, "i-1").contains("the group to replace it"));
    assert_eq!(over.state.prepare_failures, 1);

    // The group is slow to act: ABANDON is resent, nothing journaled or counted again, and
    // still no heartbeat however long it takes.
    let abandon = hook(&over);
    let mut state = over.state;
    for n in 1..=4 {
        let plan = pass(
            &r,
            &mut w,
            &state,
            HELD_AT + PREPARE_TIMEOUT + n * HEARTBEAT,
        );
        assert_eq!(hook(&plan), abandon);
        assert_eq!(beats(&plan), 0, "heartbeat after ABANDON");
        assert_eq!(count_kind(&plan, "prepare_never_reported"), 0);
        assert_eq!(plan.state.prepare_failures, 1);
        state = plan.state;
    }
    w.lifecycle("i-1", "Terminating");
    let gone = pass(
        &r,
        &mut w,
        &state,
        HELD_AT + PREPARE_TIMEOUT + 10 * HEARTBEAT,
    );
    assert!(gone.outcome.complete_hooks().is_empty() && gone.outcome.heartbeats().is_empty());
    assert!(gone.state.launch_waits.is_empty() && gone.state.launch_heartbeats.is_empty());
}

#[test]
fn a_marker_just_before_the_prepare_timeout_still_joins() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    w.ready("10.0.1.1");
    let ready = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT - 1);
    let cont = [("i-1".into(), "grp-launching".into(), "CONTINUE")];
    assert_eq!(hook(&ready), cont);
    // The group has not put it in service by the time the timeout passes: still CONTINUE.
    let late = pass(&r, &mut w, &ready.state, HELD_AT + PREPARE_TIMEOUT + 1_000);
    assert_eq!(hook(&late), cont);
    assert_eq!(count_kind(&late, "prepare_never_reported"), 0);
    assert_eq!(late.state.prepare_failures, 0);
    w.lifecycle("i-1", "InService");
    let joined = pass(&r, &mut w, &late.state, HELD_AT + PREPARE_TIMEOUT + 2_000);
    assert_eq!(hosts(&joined), with_base(&["10.0.1.1"]));
}

#[test]
fn a_restarted_dtd_keeps_the_prepare_clock_and_journals_once() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    let halfway = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT / 2);
    // dtd restarts: the wait is measured from when it was first seen, not from the restart.
    let over = pass(
        &r,
        &mut w,
        &reloaded(&halfway.state),
        HELD_AT + PREPARE_TIMEOUT,
    );
    assert_eq!(
        hook(&over),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(count_kind(&over, "prepare_never_reported"), 1);
    // Restarting again before the group acted neither journals nor counts it a second time.
    let again = pass(
        &r,
        &mut w,
        &reloaded(&over.state),
        HELD_AT + PREPARE_TIMEOUT + 2_000,
    );
    assert_eq!(hook(&again), hook(&over));
    assert_eq!(count_kind(&again, "prepare_never_reported"), 0);
    assert_eq!(again.state.prepare_failures, 1);
    assert_eq!(beats(&again), 0);
}

#[test]
fn a_state_file_from_before_the_prepare_timeout_starts_the_clock_at_the_first_pass() {
    let r = group_rules();
    let (mut w, _) = held_at_launch(&r);
    // Written by a dtd without launch_waits: the key is absent.
    let old: State = serde_json::from_str(
        r#"{"generation": 0, "members": [], "removals": [], "launch_heartbeats": {"i-1": 500}}"#,
    )
    .unwrap();
    let seen = pass(&r, &mut w, &old, 2_000);
    assert!(seen.outcome.complete_hooks().is_empty());
    let early = pass(&r, &mut w, &seen.state, 2_000 + PREPARE_TIMEOUT - 1);
    assert!(early.outcome.complete_hooks().is_empty());
    let over = pass(&r, &mut w, &early.state, 2_000 + PREPARE_TIMEOUT);
    assert_eq!(hook(&over).len(), 1);
}

#[test]
fn a_partial_view_never_abandons_a_held_worker() {
    let r = group_rules();
    let (mut w, first) = held_at_launch(&r);
    for (markers, acks) in [(false, true), (true, false)] {
        let snap = Snapshot {
            markers: if markers {
                Ok(w.markers.clone())
            } else {
                Err("EFS unreachable".into())
            },
            acks: if acks {
                Ok(w.acks.clone())
            } else {
                Err("ack file unreadable".into())
            },
            ..w.snap()
        };
        let plan = decide(&r, &snap, &first.state, HELD_AT + PREPARE_TIMEOUT + 1);
        assert!(
            plan.outcome.complete_hooks().is_empty(),
            "{:?}",
            plan.outcome.complete_hooks()
        );
        assert_eq!(beats(&plan), 1, "kept alive until the view is complete");
        assert_eq!(count_kind(&plan, "prepare_never_reported"), 0);
    }
    let complete = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT + 2);
    assert_eq!(hook(&complete).len(), 1);
}

#[test]
fn never_reporting_counts_toward_max_prepare_failures_and_resume_rearms_it() {
    let r = Rules {
        max_prepare_failures: 1,
        ..group_rules()
    };
    let (mut w, first) = held_at_launch(&r);
    let abandoned = pass(&r, &mut w, &first.state, HELD_AT + PREPARE_TIMEOUT);
    assert_eq!(abandoned.state.prepare_failures, 1);
    // The group replaced it with i-2, whose user data dies the same way.
    w.vanish("i-1");
    w.instances.push(group_instance("i-2", "10.0.1.2", 200));
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-2", "Pending:Wait");
    let t2 = HELD_AT + PREPARE_TIMEOUT + 1_000;
    let seen = pass(&r, &mut w, &abandoned.state, t2);
    let held = pass(&r, &mut w, &seen.state, t2 + PREPARE_TIMEOUT);
    assert!(
        held.outcome.complete_hooks().is_empty(),
        "replacing has stopped"
    );
    assert_eq!(count_kind(&held, "prepare_never_reported"), 1);
    assert_eq!(tagged(&held, WorkerStatus::PrepareFailed), ["i-2"]);
    let why = waiting_for(&held, &w, "i-2");
    assert!(
        why.contains("a person") && why.contains("dtctl resume"),
        "{why}"
    );
    // Held for a person: the hook is kept alive, the event not journaled again.
    let later = pass(&r, &mut w, &held.state, t2 + PREPARE_TIMEOUT + HEARTBEAT);
    assert_eq!(beats(&later), 1);
    assert_eq!(count_kind(&later, "prepare_never_reported"), 0);
    w.resume = Some(t2 + PREPARE_TIMEOUT + HEARTBEAT);
    let resumed = pass(
        &r,
        &mut w,
        &later.state,
        t2 + PREPARE_TIMEOUT + 2 * HEARTBEAT,
    );
    assert_eq!(
        hook(&resumed),
        [("i-2".into(), "grp-launching".into(), "ABANDON")]
    );
    assert_eq!(resumed.state.prepare_failures, 1);
    assert_eq!(beats(&resumed), 0);
}

#[test]
fn instances_outside_service_are_never_in_the_host_files() {
    let (r, mut w, state) = two_group_members();
    w.lifecycle("i-2", "Standby");
    w.instances.push(group_instance("i-3", "10.0.1.3", 300));
    w.group_mut().instances.insert(
        "i-3".into(),
        GroupMember {
            lifecycle_state: "Warmed:Stopped".into(),
            protected: false,
        },
    );
    w.ready("10.0.1.3");
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(waiting_for(&plan, &w, "i-3").contains("Warmed:Stopped"));
    // Standby is a person's choice: drained, acknowledged, then left running.
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert!(acked.outcome.terminate().is_empty() && acked.outcome.group_terminate().is_empty());
    assert!(acked.state.removals.is_empty());
    // Back in service, it joins again.
    w.lifecycle("i-2", "InService");
    let back = pass(&r, &mut w, &acked.state, 5_000);
    assert_eq!(hosts(&back), with_base(&["10.0.1.1", "10.0.1.2"]));
}

#[test]
fn a_scale_in_by_the_group_drains_through_the_terminating_hook_with_heartbeats() {
    let (r, mut w, state) = two_group_members();
    w.lifecycle("i-2", "Terminating:Wait");
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert!(
        plan.outcome.complete_hooks().is_empty(),
        "held until the job lets it go"
    );
    let beat = pass(&r, &mut w, &plan.state, 3_000 + HEARTBEAT / 2);
    assert_eq!(
        beat.outcome.heartbeats(),
        [("i-2".to_string(), "grp-terminating".to_string())]
    );
    let quiet = pass(&r, &mut w, &beat.state, 3_000 + HEARTBEAT / 2 + 1_000);
    assert!(
        quiet.outcome.heartbeats().is_empty(),
        "one heartbeat per half timeout"
    );
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &quiet.state, 3_000 + HEARTBEAT);
    assert_eq!(
        hook(&acked),
        [("i-2".into(), "grp-terminating".into(), "CONTINUE")]
    );
    assert!(acked.outcome.terminate().is_empty() && acked.outcome.group_terminate().is_empty());
}

#[test]
fn a_lower_desired_capacity_drains_the_newest_protected_worker_first() {
    let (r, mut w, state) = two_group_members();
    w.group_mut().desired = 1;
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]), "i-2 launched last");
    assert!(plan.outcome.group_terminate().is_empty());
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued");
    assert_eq!(queued.and_then(|e| e.cause), Some(Cause::ScaleIn));
    let again = pass(&r, &mut w, &plan.state, 3_500);
    assert_eq!(
        hosts(&again),
        with_base(&["10.0.1.1"]),
        "drained once, not twice"
    );
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &again.state, 4_000);
    assert_eq!(
        acked.outcome.group_terminate(),
        [("i-2".to_string(), false)]
    );
}

#[test]
fn a_removed_group_worker_shrinks_its_group() {
    let (r, mut w, state) = two_group_members();
    w.delete_elastic_tag("i-1");
    let plan = pass(&r, &mut w, &state, 3_000);
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(acked.outcome.group_terminate(), [("i-1".to_string(), true)]);
    assert!(acked.outcome.terminate().is_empty());
}

#[test]
fn failing_group_workers_are_replaced_until_the_limit_then_resume_rearms() {
    let r = Rules {
        max_prepare_failures: 2,
        ..group_rules()
    };
    let mut w = World::with(vec![]);
    w.group = Some(Ok(group_of(&w, 3)));
    let mut state = State::default();
    let mut now = 1_000;
    for n in 1..=3 {
        let (id, addr) = (format!("i-{n}"), format!("10.0.1.{n}"));
        w.instances.push(group_instance(&id, &addr, now));
        w.group = Some(Ok(group_of(&w, 3)));
        w.markers.failed.insert(ip(&addr), format!("exit {n}"));
        let plan = pass(&r, &mut w, &state, now);
        let replaced = plan
            .outcome
            .group_terminate()
            .iter()
            .any(|(i, d)| i == &id && !d);
        assert_eq!(
            replaced,
            n <= 2,
            "failure {n}: {:?}",
            plan.outcome.group_terminate()
        );
        // Each failure is journaled, and so is reaching the limit, once: at the second.
        let failed = (plan.outcome.events.iter()).find(|e| e.kind == "prepare_failed");
        let then = match n <= 2 {
            true => "the group replaces it",
            false => "held for a person: replacing failed workers has stopped (`dtctl resume` re-arms it)",
        };
        assert!(
            failed.is_some_and(|e| e.instance.as_deref() == Some(id.as_str())
                && e.message
                    .contains(&format!("prepare-data failed (exit {n})"))
                && e.message.ends_with(then)),
            "failure {n}: {:?}",
            plan.outcome.events
        );
        if n <= 2 {
            let queued = plan
                .outcome
                .events
                .iter()
                .find(|e| e.kind == "removal_queued");
            assert_eq!(queued.and_then(|e| e.cause), Some(Cause::PrepareFailed));
        }
        let stopped = (plan.outcome.events.iter()).filter(|e| e.kind == "replacing_stopped");
        let stopped: Vec<&Event> = stopped.collect();
        assert_eq!(stopped.len(), (n == 2) as usize, "failure {n}: {stopped:?}");
        if n == 2 {
            assert_eq!(
                stopped[0].message,
                "replacing failed group workers stopped after 2 prepare-data failures in a row \
                 (the last: 10.0.1.2: prepare-data failed (exit 2)); `dtctl resume` re-arms it"
            );
            assert_eq!(
                kinds(&plan)[..2],
                ["prepare_failed", "replacing_stopped"],
                "the failure, then what it stopped"
            );
        }
        state = plan.state;
        now += 1_000;
    }
    assert_eq!(state.prepare_failures, 2);
    let waiting = pass(&r, &mut w, &reloaded(&state), now);
    assert!(waiting_for(&waiting, &w, "i-3").contains("dtctl resume"));
    assert!(
        waiting.outcome.events.is_empty(),
        "{:?}",
        waiting.outcome.events
    );
    w.resume = Some(now);
    let resumed = pass(&r, &mut w, &state, now + 1_000);
    assert!(resumed
        .outcome
        .group_terminate()
        .contains(&("i-3".to_string(), false)));
    assert!(kinds(&resumed).contains(&"resumed"));
    assert_eq!(
        count_kind(&resumed, "prepare_failed"),
        0,
        "i-3's failure was journaled when it was held"
    );
    assert_eq!(resumed.state.prepare_failures, 1);
}

#[test]
fn an_unreadable_group_holds_every_removal() {
    let (r, mut w, state) = two_group_members();
    w.delete_elastic_tag("i-1");
    w.group = Some(Err("throttled".into()));
    let plan = pass(&r, &mut w, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(plan.outcome.holds.iter().any(|h| h.contains("throttled")));
}

#[test]
fn a_drained_group_worker_is_replaced_by_its_group() {
    let (r, mut w, state) = two_group_members();
    let target = NoticeTarget::Instance("i-1".into());
    w.notices = vec![notice("e-1", NoticeKind::Rebalance, target)];
    let plan = pass(&r, &mut w, &state, 3_000);
    w.notices.clear();
    w.acks.generation = Some(2);
    let acked = pass(&r, &mut w, &plan.state, 4_000);
    assert_eq!(
        acked.outcome.group_terminate(),
        [("i-1".to_string(), false)]
    );
    assert!(acked.outcome.terminate().is_empty());
}

#[test]
fn an_interruption_on_a_partial_view_is_remembered_until_the_view_is_complete() {
    let (r, mut w, state) = two_members();
    w.vanish("i-2");
    w.notices = vec![spot("e-1", "i-2")];
    let snap = Snapshot {
        markers: Err("EFS unreachable".into()),
        ..w.snap()
    };
    let plan = decide(&r, &snap, &state, 3_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    let kept = plan
        .state
        .removals
        .iter()
        .any(|x| x.id == "i-2" && x.is_interrupted());
    assert!(kept, "{:?}", plan.state.removals);
    w.notices.clear();
    let complete = pass(&r, &mut w, &plan.state, 4_000);
    assert!(complete.state.removals.is_empty());
}

const FS: &str = "fs-0123abcd";
const NO_TARGET_IN_1C: &str =
    "an EFS mount target in us-east-1c: fs-0123abcd has none there, so it cannot mount the shared directory";

fn mount_targets_in(zones: &[&str]) -> Option<MountTargets> {
    Some(MountTargets {
        fs_id: FS.into(),
        zones: zones.iter().map(|z| z.to_string()).collect(),
    })
}

/// i-1 (10.0.1.1) in us-east-1a, which has a mount target; i-2 (10.0.1.2) in us-east-1c, which
/// has none. Neither has a marker yet.
fn split_across_zones() -> World {
    let mut w = World::with(vec![
        instance("i-1", "10.0.1.1", 100),
        instance("i-2", "10.0.1.2", 200),
    ]);
    w.inst("i-2").az = "us-east-1c".into();
    w.mount_targets = mount_targets_in(&["us-east-1a"]);
    w
}

#[test]
fn a_worker_in_a_zone_without_a_mount_target_waits_for_one_and_is_journaled_once() {
    let r = rules();
    let mut w = split_across_zones();
    let first = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(waiting_for(&first, &w, "i-2"), NO_TARGET_IN_1C);
    assert_eq!(
        waiting_for(&first, &w, "i-1"),
        "prepare-data marker prepare_data_success_10.0.1.1"
    );
    assert_eq!(worker(&first, &w, "i-2").label(), "PREPARING");
    let journaled: Vec<&Event> = (first.outcome.events.iter())
        .filter(|e| e.kind == "no_mount_target")
        .collect();
    assert_eq!(journaled.len(), 1, "{:?}", first.outcome.events);
    let e = journaled[0];
    assert_eq!(e.instance.as_deref(), Some("i-2"));
    assert_eq!(e.ip, Some(ip("10.0.1.2")));
    assert_eq!(e.az.as_deref(), Some("us-east-1c"));
    assert_eq!(e.fs_id.as_deref(), Some(FS));
    assert!(e.message.contains("us-east-1c") && e.message.contains(FS));

    // Later passes, and a restarted dtd, say the same without journaling it again.
    let second = pass(&r, &mut w, &first.state, 2_000);
    let restarted = pass(&r, &mut w, &reloaded(&second.state), 3_000);
    for plan in [&second, &restarted] {
        assert_eq!(waiting_for(plan, &w, "i-2"), NO_TARGET_IN_1C);
        assert_eq!(
            count_kind(plan, "no_mount_target"),
            0,
            "{:?}",
            plan.outcome.events
        );
    }
}

#[test]
fn the_check_only_explains_a_wait_it_never_removes_terminates_or_holds() {
    let r = rules();
    let mut w = split_across_zones();
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert!(plan.outcome.terminate().is_empty() && plan.state.removals.is_empty());
    assert!(plan.outcome.holds.is_empty(), "{:?}", plan.outcome.holds);
    assert_eq!(tagged(&plan, WorkerStatus::Preparing), ["i-1", "i-2"]);
    // A marker that does appear (the agent found another way) still joins.
    w.ready("10.0.1.2");
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
}

#[test]
fn once_the_zone_has_a_mount_target_the_marker_wait_comes_back() {
    let r = rules();
    let mut w = split_across_zones();
    let first = pass(&r, &mut w, &State::default(), 1_000);
    w.mount_targets = mount_targets_in(&["us-east-1a", "us-east-1c"]);
    let covered = pass(&r, &mut w, &first.state, 2_000);
    assert_eq!(
        waiting_for(&covered, &w, "i-2"),
        "prepare-data marker prepare_data_success_10.0.1.2"
    );
    assert_eq!(count_kind(&covered, "no_mount_target"), 0);
    w.ready("10.0.1.2");
    let joined = pass(&r, &mut w, &covered.state, 3_000);
    assert_eq!(hosts(&joined), with_base(&["10.0.1.2"]));
}

#[test]
fn unknown_zones_claim_nothing() {
    let r = rules();
    let mut w = split_across_zones();
    // Not configured, or the last read failed: the usual wait, nothing journaled.
    w.mount_targets = None;
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        waiting_for(&plan, &w, "i-2"),
        "prepare-data marker prepare_data_success_10.0.1.2"
    );
    assert_eq!(count_kind(&plan, "no_mount_target"), 0);
    assert!(plan.state.no_mount_target.is_empty());
    // An instance whose zone EC2 did not give is not judged either.
    w.mount_targets = mount_targets_in(&["us-east-1a"]);
    w.inst("i-2").az = String::new();
    let plan = pass(&r, &mut w, &plan.state, 2_000);
    assert_eq!(count_kind(&plan, "no_mount_target"), 0);
}

#[test]
fn an_instance_that_is_gone_is_forgotten() {
    let r = rules();
    let mut w = split_across_zones();
    let first = pass(&r, &mut w, &State::default(), 1_000);
    assert!(first.state.no_mount_target.contains("i-2"));
    w.vanish("i-2");
    let after = pass(&r, &mut w, &first.state, 2_000);
    assert!(after.state.no_mount_target.is_empty());
}

#[test]
fn a_group_worker_held_at_launch_in_a_zone_without_a_mount_target_says_so() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    w.inst("i-1").az = "us-east-1c".into();
    w.mount_targets = mount_targets_in(&["us-east-1a"]);
    let plan = pass(&r, &mut w, &State::default(), HELD_AT);
    let why = waiting_for(&plan, &w, "i-1");
    assert!(
        why.starts_with(NO_TARGET_IN_1C) && why.contains("abandoned if none within 1h"),
        "{why}"
    );
    assert_eq!(count_kind(&plan, "no_mount_target"), 1);
    assert!(
        plan.outcome.complete_hooks().is_empty(),
        "held, not abandoned early"
    );
}

// ---- health ----

impl World {
    /// What a worker's agent writes after its health check.
    fn health(&mut self, id: &str, ok: bool, gpus_lost: bool, reason: &str) {
        let ip = self.inst(id).ip;
        let h = Health {
            instance_id: id.into(),
            ok,
            gpus_lost,
            vanished: false,
            reason: reason.into(),
            when: Some(1_000),
        };
        self.markers.health.insert(ip, h);
    }
}

fn launches(plan: &Plan) -> Vec<(String, String)> {
    plan.outcome.launches()
}

#[test]
fn an_unhealthy_member_drains_and_is_terminated_after_the_ack() {
    let (r, mut w, state) = two_members();
    w.health("i-1", false, false, "Xid 13 (graphics engine exception)");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]), "out of the job");
    assert_eq!(kinds(&plan), ["unhealthy", "removal_queued", "generation"]);
    assert!(plan.outcome.events[0].message.contains("Xid 13"));
    assert_eq!(plan.outcome.events[1].cause, Some(Cause::Unhealthy));
    assert!(plan.outcome.terminate().is_empty(), "it drains first");
    let n = plan.outcome.notify.clone().unwrap();
    assert_eq!(n.notices[0].kind, "unhealthy");
    assert!(waiting_for(&plan, &w, "i-1").contains("acknowledge generation 2"));
    assert!(launches(&plan).is_empty(), "replace_unhealthy is off");
    // Journaled once.
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    w.acks.generation = Some(2);
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
}

#[test]
fn a_member_whose_gpus_are_gone_leaves_at_once_and_is_replaced_from_the_template() {
    let (mut r, mut w, state) = two_members();
    r.replace_unhealthy = true;
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.2"]));
    assert_eq!(plan.outcome.terminate(), ["i-1"], "no ack awaited");
    let token = "dt-replace-i-1".to_string();
    assert_eq!(launches(&plan), [("i-1".to_string(), token.clone())]);
    let queued = &plan.outcome.events[1];
    assert!(
        queued.message.contains("at once (its GPUs are gone)"),
        "{}",
        queued.message
    );
    // Not confirmed by act: the launch is sent again, with the same token.
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert_eq!(launches(&plan), [("i-1".to_string(), token.clone())]);
    // AWS refused it: act put it off for a minute.
    let mut state = plan.state;
    state.replacements[0].retry_at = 71_000;
    let plan = pass(&r, &mut w, &state, 12_000);
    assert!(launches(&plan).is_empty(), "not before its retry time");
    let plan = pass(&r, &mut w, &plan.state, 71_000);
    assert_eq!(launches(&plan), [("i-1".to_string(), token)]);
    let mut state = plan.state;
    state.replacements.clear();
    let plan = pass(&r, &mut w, &state, 72_000);
    assert!(launches(&plan).is_empty(), "launched: not owed any more");
}

#[test]
fn an_unhealthy_group_member_is_marked_unhealthy_for_its_group_to_replace() {
    let (mut r, mut w, state) = two_group_members();
    r.health_leave = dt::config::HealthLeave::Immediate;
    w.health("i-2", false, false, "uncorrectable ECC errors on GPU 3");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1"]));
    assert_eq!(plan.outcome.set_unhealthy(), ["i-2"]);
    assert!(plan.outcome.group_terminate().is_empty());
    assert!(plan.outcome.events[1]
        .message
        .contains("health.leave is immediate"));
}

#[test]
fn an_unhealthy_worker_never_joins_and_is_replaced() {
    let r = rules();
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    w.health(
        "i-1",
        false,
        false,
        "GPU 0 at 91 C, over its slowdown temperature (88 C)",
    );
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(hosts(&plan), with_base(&[]), "never joins");
    assert_eq!(plan.outcome.terminate(), ["i-1"]);
    let queued = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "removal_queued")
        .unwrap();
    assert!(queued.message.contains("never joins"), "{}", queued.message);
}

#[test]
fn a_report_left_by_an_earlier_owner_of_the_ip_or_on_a_base_host_is_ignored() {
    let (r, mut w, state) = two_members();
    w.health("i-1", false, true, "old");
    let ip1 = ip("10.0.1.1");
    w.markers.health.get_mut(&ip1).unwrap().instance_id = "i-0ld".into();
    let mut base = instance("i-9", BASE[0], 50);
    base.tags.insert(ELASTIC.into(), "true".into());
    w.instances.push(base);
    w.health("i-9", false, true, "base host");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(hosts(&plan), with_base(&["10.0.1.1", "10.0.1.2"]));
    assert!(!kinds(&plan).contains(&"unhealthy"), "{:?}", kinds(&plan));
}

#[test]
fn too_many_unhealthy_at_once_stops_removing_until_health_returns() {
    // Five workers: 20% allows one unhealthy; two stop everything.
    let r = rules();
    let ids = ["i-1", "i-2", "i-3", "i-4", "i-5"];
    let mut w = World::with(
        (ids.iter().enumerate())
            .map(|(n, id)| instance(id, &format!("10.0.1.{}", n + 1), 100 + n as u64))
            .collect(),
    );
    for n in 1..=5 {
        w.ready(&format!("10.0.1.{n}"));
    }
    let mut r = r;
    r.max = 8;
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(plan.state.members.len(), 5);
    w.acks.generation = Some(1);
    let mut state = pass(&r, &mut w, &plan.state, 2_000).state;
    state.pending_notification = None;

    w.health("i-1", false, false, "Xid 48");
    w.health("i-2", false, false, "Xid 48");
    let plan = pass(&r, &mut w, &state, 10_000);
    assert_eq!(plan.state.members.len(), 5, "nothing removed");
    assert!(plan.outcome.terminate().is_empty());
    assert_eq!(kinds(&plan), ["unhealthy", "unhealthy", "health_stopped"]);
    assert!(plan
        .outcome
        .holds
        .iter()
        .any(|h| h.contains("2 of 5 workers unhealthy")));
    assert!(waiting_for(&plan, &w, "i-1").contains("health.max_unhealthy reached"));
    // Still stopped: journaled once, held every pass.
    let plan = pass(&r, &mut w, &plan.state, 11_000);
    assert!(plan.outcome.events.is_empty(), "{:?}", plan.outcome.events);
    assert!(!plan.outcome.holds.is_empty());

    // One recovers: within the limit, the other is removed.
    w.health("i-2", true, false, "ok");
    let plan = pass(&r, &mut w, &plan.state, 12_000);
    assert_eq!(
        kinds(&plan),
        ["healthy", "health_resumed", "removal_queued", "generation"]
    );
    assert!(plan.outcome.holds.is_empty());
    assert_eq!(plan.state.members.len(), 4);
    assert!(plan.state.health_stopped.is_none());
}

#[test]
fn a_held_group_worker_that_fails_its_check_is_abandoned() {
    let r = group_rules();
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    w.health("i-1", false, true, "7 of 8 GPUs visible");
    let plan = pass(&r, &mut w, &State::default(), 1_000);
    assert_eq!(
        hook(&plan),
        [("i-1".into(), "grp-launching".into(), "ABANDON")]
    );
    let failed = plan
        .outcome
        .events
        .iter()
        .find(|e| e.kind == "prepare_failed")
        .unwrap();
    assert!(
        failed
            .message
            .contains("health check failed (7 of 8 GPUs visible)"),
        "{}",
        failed.message
    );
}

// Stalled jobs: the job's step, from its progress file, standing still for `job.stall.after`.

const STALL_AFTER: Millis = 600_000;

fn stall_rules() -> Rules {
    Rules {
        stall_after_ms: Some(STALL_AFTER),
        ..rules()
    }
}

fn at_step(w: &mut World, step: u64) {
    w.progress = Some(Ok(Progress { step, time: None }));
}

/// A pass whose state goes through its JSON form, as a restarted dtd would read it.
fn pass_restarted(r: &Rules, w: &mut World, state: &State, now: Millis) -> Plan {
    let mut plan = pass(r, w, state, now);
    let json = serde_json::to_string(&plan.state).unwrap();
    plan.state = serde_json::from_str(&json).unwrap();
    plan
}

#[test]
fn a_step_standing_still_is_stalled_once_and_cleared_when_it_moves() {
    let r = stall_rules();
    let mut w = World::default();
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &State::default(), 0);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER - 1);
    assert!(
        kinds(&plan).is_empty(),
        "not yet: {:?}",
        plan.outcome.events
    );

    let plan = pass_restarted(&r, &mut w, &plan.state, STALL_AFTER + 3_000);
    assert_eq!(kinds(&plan), ["stalled"]);
    let msg = &plan.outcome.events[0].message;
    assert_eq!(
        msg,
        "the job's step 5 has not advanced for 10m 3s (since 1970-01-01T00:00:00Z): stalled"
    );
    let stalled = StallChange {
        stalled: true,
        step: 5,
        since: 0,
    };
    assert_eq!(plan.outcome.stall, Some(stalled));
    assert!(plan.state.progress.as_ref().unwrap().stalled);
    // Journaled once, also across a restart (the state remembers it).
    let plan = pass_restarted(&r, &mut w, &plan.state, STALL_AFTER * 2);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());

    at_step(&mut w, 6);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 3);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
    assert_eq!(
        plan.outcome.events[0].message,
        "the job's step advanced to 6; it was stalled at step 5 for 30m: stall cleared"
    );
    let cleared = StallChange {
        stalled: false,
        step: 6,
        since: 0,
    };
    assert_eq!(plan.outcome.stall, Some(cleared));
    // Timed again from the step that moved: a second stall is a new one.
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 4 - 1);
    assert!(kinds(&plan).is_empty());
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 4);
    assert_eq!(kinds(&plan), ["stalled"]);
    assert_eq!(plan.outcome.stall.map(|s| s.since), Some(STALL_AFTER * 3));
}

#[test]
fn a_step_that_goes_back_is_progress() {
    // A job restarted from its checkpoint reports a lower step: it trains.
    let r = stall_rules();
    let mut w = World::default();
    at_step(&mut w, 500);
    let plan = pass(&r, &mut w, &State::default(), 0);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER);
    assert_eq!(kinds(&plan), ["stalled"]);
    at_step(&mut w, 480);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER + 1);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
}

#[test]
fn a_job_that_writes_no_progress_file_never_stalls() {
    let r = stall_rules();
    let mut w = World::default();
    let mut state = State::default();
    for now in [0, STALL_AFTER, STALL_AFTER * 10] {
        let plan = pass(&r, &mut w, &state, now);
        assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
        assert_eq!(plan.state.progress, None);
        state = plan.state;
    }
    // A stalled job whose file disappears stopped reporting: nothing is known, the stall clears.
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &state, 0);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER);
    assert_eq!(kinds(&plan), ["stalled"]);
    w.progress = None;
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER + 1);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
    assert!(plan.outcome.events[0]
        .message
        .starts_with("the job no longer writes its progress file"));
    assert_eq!(plan.state.progress, None);
}

#[test]
fn an_unreadable_progress_file_neither_stalls_nor_clears() {
    let r = stall_rules();
    let mut w = World::default();
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &State::default(), 0);
    w.progress = Some(Err("/efs/progress is a FIFO, not a regular file".into()));
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 2);
    assert!(kinds(&plan).is_empty(), "nothing concluded from it");
    // The clock kept running on the last step read: readable again and unchanged, it stalled.
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 2 + 1);
    assert_eq!(kinds(&plan), ["stalled"]);
    w.progress = Some(Err("unreadable".into()));
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER * 3);
    assert!(kinds(&plan).is_empty(), "a stall shown stays shown");
    assert!(plan.state.progress.as_ref().unwrap().stalled);
}

#[test]
fn a_job_without_workers_is_not_stalled() {
    let without = Rules {
        base_hosts: Vec::new(),
        min: 0,
        ..stall_rules()
    };
    let mut w = World::default();
    at_step(&mut w, 5);
    let mut state = State::default();
    for now in [0, STALL_AFTER, STALL_AFTER * 5] {
        let plan = pass(&without, &mut w, &state, now);
        assert!(kinds(&plan).is_empty(), "{:?}", plan.outcome.events);
        state = plan.state;
    }
    // The clock starts when workers come back, not when the step last moved.
    let with = stall_rules();
    let plan = pass(&with, &mut w, &state, STALL_AFTER * 6 - 1);
    assert!(kinds(&plan).is_empty());
    let plan = pass(&with, &mut w, &plan.state, STALL_AFTER * 6);
    assert_eq!(kinds(&plan), ["stalled"]);
    // A stalled job that loses its workers is no longer stalled: it waits for them.
    let plan = pass(&without, &mut w, &plan.state, STALL_AFTER * 7);
    assert_eq!(kinds(&plan), ["stall_cleared"]);
    assert!(plan.outcome.events[0]
        .message
        .starts_with("the job has no workers to train on"));
}

#[test]
fn members_are_workers_enough() {
    let r = Rules {
        base_hosts: Vec::new(),
        min: 0,
        ..stall_rules()
    };
    let mut w = World::with(vec![instance("i-1", "10.0.1.1", 100)]);
    w.ready("10.0.1.1");
    at_step(&mut w, 5);
    let plan = pass(&r, &mut w, &State::default(), 0);
    assert_eq!(hosts(&plan), ["10.0.1.1"]);
    let plan = pass(&r, &mut w, &plan.state, STALL_AFTER);
    assert_eq!(kinds(&plan), ["stalled"]);
}

#[test]
fn without_stall_detection_nothing_is_timed() {
    let r = rules();
    let mut w = World::default();
    at_step(&mut w, 5);
    let stalled = State {
        progress: Some(JobProgress {
            step: 5,
            advanced_at: 0,
            stalled: true,
        }),
        ..State::default()
    };
    let plan = pass(&r, &mut w, &stalled, STALL_AFTER * 10);
    assert!(kinds(&plan).is_empty() && plan.outcome.stall.is_none());
    assert_eq!(plan.state.progress, None, "forgotten with the config");
}

#[test]
fn a_state_written_before_stall_detection_still_reads() {
    let state: State = serde_json::from_str(r#"{"generation": 3, "members": [], "removals": []}"#)
        .expect("an older state file");
    assert_eq!((state.generation, state.progress), (3, None));
}
