//! The language of decide's rule and property tests: a pass's world (instances, markers, acks,
//! notices, the group) as plain data, the default rules, and what a plan shows (host file
//! lines, tags, journal kinds, a worker's row). Every test module imports it whole.

pub(crate) use std::collections::BTreeMap;
pub(crate) use std::net::IpAddr;

pub(crate) use dt::config::Slots;
pub(crate) use dt::decide::{decide, worker_views, Rules};
pub(crate) use dt::model::*;

pub(crate) const ELASTIC: &str = "demo-aws-dl-cfn-elastic-worker";
pub(crate) const TIMEOUT: u64 = 600_000;
/// How long a worker held by the launching hook may go without a marker.
pub(crate) const PREPARE_TIMEOUT: u64 = 3_600_000;
/// Base hosts, deliberately not in sorted order: the host file keeps the config's order.
pub(crate) const BASE: [&str; 2] = ["10.0.0.5", "10.0.0.4"];
pub(crate) const MASTER: &str = "10.0.0.2";

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
        stall_action: dt::config::StallAction::Alert,
        stragglers: dt::config::Stragglers::default(),
        launcher_silent_ms: None,
        launcher_silent_share: 1.0 / 3.0,
        ack_by_launcher: false,
        join_batch_ms: 0,
        join_at_checkpoint: false,
        join_max_wait_ms: 0,
        join_sizes: Vec::new(),
        disruption_budget: dt::config::Budget::Unlimited,
        disruption_windows: Vec::new(),
        capacity: Vec::new(),
        capacity_cool_down_ms: 0,
        reports_signed: true,
        health_checked: true,
        leave_before_loss_ms: None,
        max_unhealthy: dt::config::MaxUnhealthy::default(),
        health_leave: dt::config::HealthLeave::default(),
        replace_unhealthy: false,
        replace_interrupted: false,
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
        subnet: None,
    }
}

/// The observed world, mutated between passes the way people and the job would.
#[derive(Default)]
pub(crate) struct World {
    pub(crate) instances: Vec<Instance>,
    pub(crate) markers: Markers,
    pub(crate) acks: Acks,
    pub(crate) notices: Vec<Notice>,
    pub(crate) group: Option<Read<Group>>,
    pub(crate) resume: Option<Millis>,
    pub(crate) mount_targets: Option<MountTargets>,
    pub(crate) subnet_zones: BTreeMap<String, String>,
    pub(crate) add_refusals: Vec<dt::protocol::capacity_refusals::CapacityRefusal>,
    pub(crate) progress: Option<Read<Progress>>,
    pub(crate) reservations: Option<Read<BTreeMap<String, Reservation>>>,
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
            subnet_zones: self.subnet_zones.clone(),
            capacity_refusals: self.add_refusals.clone(),
            mount_targets: self.mount_targets.clone(),
            progress: self.progress.clone(),
            reservations: self.reservations.clone(),
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

// The worker Auto Scaling group's world.

pub(crate) const HEARTBEAT: u64 = 60_000;

/// A group "grp" (min 0, desired 2, max 6) with both hooks; instances launched by it.
pub(crate) fn group_rules() -> Rules {
    Rules {
        launch_template_id: None,
        auto_scaling_group: Some("grp".into()),
        ..rules()
    }
}

pub(crate) fn group_instance(id: &str, addr: &str, launched_at: Millis) -> Instance {
    let mut i = instance(id, addr, launched_at);
    i.tags.remove("aws:ec2launchtemplate:id");
    i.tags
        .insert("aws:autoscaling:groupName".into(), "grp".into());
    i
}

pub(crate) fn group_of(w: &World, desired: usize) -> Group {
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

/// Two group workers in the job, acknowledged and protected.
pub(crate) fn two_group_members() -> (Rules, World, State) {
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

pub(crate) fn hook(plan: &Plan) -> Vec<(String, String, &'static str)> {
    (plan.outcome.complete_hooks().iter())
        .map(|a| (a.instance.clone(), a.hook.clone(), a.result.as_str()))
        .collect()
}

/// One group worker i-1 (10.0.1.1) held in `Pending:Wait` by the launching hook, first seen at
/// `HELD_AT`, with no marker of either kind (its user data died before `dtd agent` started).
pub(crate) const HELD_AT: Millis = 1_000;

pub(crate) fn held_at_launch(r: &Rules) -> (World, Plan) {
    let mut w = World::with(vec![group_instance("i-1", "10.0.1.1", 100)]);
    w.group = Some(Ok(group_of(&w, 1)));
    w.lifecycle("i-1", "Pending:Wait");
    let plan = pass(r, &mut w, &State::default(), HELD_AT);
    (w, plan)
}

pub(crate) fn beats(plan: &Plan) -> usize {
    plan.outcome.heartbeats().len()
}

pub(crate) fn count_kind(plan: &Plan, kind: &str) -> usize {
    kinds(plan).iter().filter(|k| **k == kind).count()
}

/// What dtd does across a restart: the state goes through state.json and back.
pub(crate) fn reloaded(state: &State) -> State {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    dt::store::save_json(&path, state).unwrap();
    dt::store::load_state(&path).unwrap()
}

impl World {
    pub(crate) fn lifecycle(&mut self, id: &str, state: &str) {
        if let Some(Ok(g)) = &mut self.group {
            g.instances.get_mut(id).unwrap().lifecycle_state = state.into();
        }
    }

    pub(crate) fn group_mut(&mut self) -> &mut Group {
        self.group.as_mut().unwrap().as_mut().unwrap()
    }

    /// What act does with the plan's protection list.
    pub(crate) fn apply_protect(&mut self, plan: &Plan) {
        for id in &plan.outcome.protect() {
            self.group_mut().instances.get_mut(id).unwrap().protected = true;
        }
    }
}

/// The workers whose passing states in dtd's memory `has` something: what a test asserts it
/// remembers.
pub(crate) fn remembered(st: &State, has: impl Fn(&Pending) -> bool) -> Vec<&str> {
    (st.pending.iter())
        .filter(|(_, w)| has(w))
        .map(|(id, _)| id.as_str())
        .collect()
}

/// The job's progress file says `step`.
pub(crate) fn at_step(w: &mut World, step: u64) {
    w.progress = Some(Ok(Progress {
        step,
        time: None,
        checkpoint_step: None,
        quorum: None,
        run: None,
        generation: None,
    }));
}
