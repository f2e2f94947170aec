//! Property tests of the safety rules of ARCHITECTURE.md over random worlds, random remembered states
//! and random clocks, fed through several passes the way the daemon runs decide: the plan's state
//! comes back as the next pass's memory, while people, the job and AWS change the world between
//! passes (tags deleted, markers appearing, acks advancing, instances vanishing, sources failing).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use dt::decide::{decide, Rules};
use dt::model::*;
use dt::observe::fleet::{Fleet, Targets};

use crate::support::world::ELASTIC;

const TIMEOUT: u64 = 60_000;
const START: Millis = 1_000_000;
/// Elastic worker slots: each may hold one instance at a time (a new one gets a new id).
const WORKERS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Worker,
    Base,
    Master,
    /// Right launch template, wrong NodeType.
    ForeignRole,
    /// Right NodeType, another launch template.
    ForeignTemplate,
}

/// Slots 0..8 are elastic workers, then two base hosts, the master, and two foreign instances.
fn slot_kind(slot: usize) -> Kind {
    match slot {
        s if s < WORKERS => Kind::Worker,
        8 | 9 => Kind::Base,
        10 => Kind::Master,
        11 => Kind::ForeignRole,
        _ => Kind::ForeignTemplate,
    }
}

const SLOTS: usize = 13;

fn slot_ip(slot: usize) -> IpAddr {
    match slot_kind(slot) {
        Kind::Worker => format!("10.0.1.{}", slot + 10),
        Kind::Base => format!("10.0.0.{}", 13 - slot), // 10.0.0.5, 10.0.0.4: config order
        Kind::Master => "10.0.0.2".into(),
        _ => format!("10.0.2.{slot}"),
    }
    .parse()
    .unwrap()
}

/// The rule tests' rules (support/world.rs) over this test's slots, with a shorter ack timeout
/// and the launcher's silence watched.
fn rules(min: usize, max: usize) -> Rules {
    Rules {
        min,
        max,
        base_hosts: vec![slot_ip(8), slot_ip(9)],
        master: Some(slot_ip(10)),
        ack_timeout_ms: TIMEOUT,
        launcher_silent_ms: Some(30_000),
        ack_by_launcher: false,
        ..crate::support::world::rules()
    }
}

fn id_of(slot: usize, incarnation: u32) -> String {
    format!("i-{slot:02}-{incarnation}")
}

fn make_instance(
    slot: usize,
    incarnation: u32,
    elastic: bool,
    status: Option<WorkerStatus>,
) -> Instance {
    let mut tags = Tags::from([
        ("NodeType".to_string(), "Worker".to_string()),
        ("aws:ec2launchtemplate:id".to_string(), "lt-1".to_string()),
    ]);
    match slot_kind(slot) {
        Kind::ForeignRole => drop(tags.insert("NodeType".into(), "Master".into())),
        Kind::ForeignTemplate => {
            drop(tags.insert("aws:ec2launchtemplate:id".into(), "lt-2".into()))
        }
        _ => {}
    }
    if elastic {
        tags.insert(ELASTIC.into(), "true".into());
    }
    if let Some(s) = status {
        tags.insert(STATUS_TAG.into(), s.as_tag().into());
    }
    Instance {
        id: id_of(slot, incarnation),
        ip: slot_ip(slot),
        instance_type: "p3.2xlarge".into(),
        // Two zones, so that some workers are where the file system may have no mount target.
        az: ["us-east-1a", "us-east-1b"][slot % 2].into(),
        market: "spot".into(),
        launched_at: START + slot as u64 * 7 + incarnation as u64 * 1000,
        tags,
        capacity_reservation: None,
        subnet: None,
    }
}

/// Written independently of `Rules::is_cluster_worker`, so a bug there is caught here.
fn has_cluster_tags(i: &Instance) -> bool {
    i.tags.get("NodeType") == Some("Worker")
        && i.tags.get("aws:ec2launchtemplate:id") == Some("lt-1")
}

// ---- random scenarios ----

#[derive(Debug, Clone)]
struct InstSpec {
    present: bool,
    elastic: bool,
    status: Option<WorkerStatus>,
    ready: bool,
    failed: bool,
    log_added: u64,
    log_removed: u64,
}

#[derive(Debug, Clone)]
enum Role {
    None,
    Member {
        acked: bool,
        gen_back: u64,
        mark: u64,
    },
    Removal {
        t: Stage,
        gen_back: u64,
        deadline_off: i64,
        mark: u64,
    },
}

#[derive(Debug, Clone)]
enum Op {
    DeleteElastic(usize),
    AddElastic(usize),
    Ready(usize),
    Failed(usize),
    /// The ack file now holds the current generation plus this offset (the job applies a
    /// generation; a person may also type `dtctl ack G` with any G).
    AckFile(i64),
    /// The ack file holds any number at all: what a worker or a typo can put there, u64::MAX
    /// included (a `max(..) + 1` on it once wrapped to 0).
    AckFileRaw(u64),
    LogAdded(usize),
    LogRemoved(usize),
    Vanish(usize),
    /// A new instance (new id) in an empty slot, with the elastic tag.
    Launch(usize),
    /// A notice for the slot's instance (by id or IP), with an event id from a small pool so
    /// that duplicates happen: (slot, rebalance rather than interruption, by IP, event id).
    Notice(usize, bool, bool, u8),
    /// The slot's agent reports its health: (slot, ok, GPUs gone, for the current instance
    /// rather than one that had the IP before).
    Health(usize, bool, bool, bool),
    /// The slot's agent reports its launcher: (slot, state, for the current instance, heard
    /// long ago rather than just now: a silent node, or a worker writing a silent report).
    Launcher(usize, u8, bool, bool),
}

#[derive(Debug, Clone)]
struct Step {
    ops: Vec<Op>,
    ec2_err: bool,
    markers_err: bool,
    acks_err: bool,
    dt: u64,
    /// TerminateInstances succeeds (the daemon marks the removals Sent).
    terminate_ok: bool,
    /// Terminated instances stop showing up as running.
    shutdown: bool,
    /// The job notification is delivered (the daemon clears it).
    delivered: bool,
    /// The file system's mount-target zones: unknown, none, or us-east-1a only.
    mount_targets: u8,
    /// Read targeted: this step's events never arrive (only a listing will show its changes).
    lost: bool,
    /// Read targeted: a complete listing lands this pass.
    resync: bool,
}

#[derive(Debug, Clone)]
struct Scenario {
    min: usize,
    max: usize,
    generation: u64,
    log_lines: u64,
    ack: Option<i64>,
    insts: Vec<InstSpec>,
    roles: Vec<Role>,
    pending: bool,
    steps: Vec<Step>,
    /// How the daemon reads EC2: a complete listing every pass, or the fleet as a listing left
    /// it, kept current by targeted reads of what events and markers name.
    targeted: bool,
}

fn any_status() -> impl Strategy<Value = WorkerStatus> {
    prop::sample::select(WorkerStatus::ALL.to_vec())
}

fn inst_spec() -> impl Strategy<Value = InstSpec> {
    (
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.7),
        prop::option::of(any_status()),
        any::<bool>(),
        prop::bool::weighted(0.2),
        0u64..12,
        0u64..12,
    )
        .prop_map(
            |(present, elastic, status, ready, failed, log_added, log_removed)| InstSpec {
                present,
                elastic,
                status,
                ready,
                failed,
                log_added,
                log_removed,
            },
        )
}

fn role() -> impl Strategy<Value = Role> {
    let termination = prop::sample::select(vec![
        Stage::AwaitingAck {
            cause: Cause::ElasticTag,
            then: Some(Ending::Terminate),
            heartbeat_at: None,
        },
        Stage::Ending(Ending::Terminate),
        Stage::Ended,
    ]);
    prop_oneof![
        2 => Just(Role::None),
        2 => (any::<bool>(), 0u64..4, 0u64..12)
            .prop_map(|(acked, gen_back, mark)| Role::Member { acked, gen_back, mark }),
        1 => (termination, 0u64..4, -(TIMEOUT as i64)..TIMEOUT as i64, 0u64..12).prop_map(
            |(t, gen_back, deadline_off, mark)| Role::Removal { t, gen_back, deadline_off, mark }
        ),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    prop_oneof![
        3 => slot.clone().prop_map(Op::DeleteElastic),
        1 => slot.clone().prop_map(Op::AddElastic),
        3 => slot.clone().prop_map(Op::Ready),
        1 => slot.clone().prop_map(Op::Failed),
        3 => (-2i64..=1).prop_map(Op::AckFile),
        1 => prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()].prop_map(Op::AckFileRaw),
        1 => slot.clone().prop_map(Op::LogAdded),
        2 => slot.clone().prop_map(Op::LogRemoved),
        2 => slot.clone().prop_map(Op::Vanish),
        2 => slot.clone().prop_map(Op::Launch),
        2 => (slot.clone(), any::<bool>(), any::<bool>(), 0u8..4).prop_map(|(s, r, b, e)| Op::Notice(s, r, b, e)),
        2 => (slot.clone(), any::<bool>(), any::<bool>(), prop::bool::weighted(0.8))
            .prop_map(|(s, ok, lost, own)| Op::Health(s, ok, lost, own)),
        2 => (slot, 0u8..6, prop::bool::weighted(0.8), any::<bool>())
            .prop_map(|(s, state, own, silent)| Op::Launcher(s, state, own, silent)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec(op(), 0..5),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        0u64..(TIMEOUT * 3 / 2),
        prop::bool::weighted(0.7),
        any::<bool>(),
        prop::bool::weighted(0.7),
        0u8..3,
        (prop::bool::weighted(0.25), prop::bool::weighted(0.2)),
    )
        .prop_map(
            |(
                ops,
                ec2_err,
                markers_err,
                acks_err,
                dt,
                terminate_ok,
                shutdown,
                delivered,
                mt,
                (lost, resync),
            )| {
                Step {
                    lost,
                    resync,
                    ops,
                    ec2_err,
                    markers_err,
                    acks_err,
                    dt,
                    terminate_ok,
                    shutdown,
                    delivered,
                    mount_targets: mt,
                }
            },
        )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (0usize..=5, 2usize..=7),
        (0u64..6, 0u64..12, prop::option::of(-3i64..=1)),
        prop::collection::vec(inst_spec(), SLOTS),
        // Base hosts and the master get roles too: only removals are kept for them, as if
        // queued before the config made them base hosts.
        prop::collection::vec(role(), WORKERS + 3),
        (any::<bool>(), any::<bool>()),
        prop::collection::vec(step(), 1..7),
    )
        .prop_map(
            |(
                (min, max),
                (generation, log_lines, ack),
                insts,
                roles,
                (pending, targeted),
                steps,
            )| Scenario {
                targeted,
                min: min.min(max),
                max,
                generation,
                log_lines,
                ack,
                insts,
                roles,
                pending,
                steps,
            },
        )
}

// ---- the world and the simulated daemon ----

struct World {
    /// Slot to the instance running in it.
    instances: BTreeMap<usize, Instance>,
    incarnation: [u32; SLOTS],
    markers: Markers,
    acks: Acks,
    /// Notices delivered on the coming pass.
    notices: Vec<Notice>,
}

impl World {
    fn snapshot(&self, step: &Step) -> Snapshot {
        let fail = |bad: bool, what: &str| {
            if bad {
                Err(format!("{what} failed"))
            } else {
                Ok(())
            }
        };
        Snapshot {
            reservations: None,
            instances: fail(step.ec2_err, "DescribeInstances")
                .map(|_| self.instances.values().cloned().collect()),
            markers: fail(step.markers_err, "EFS").map(|_| self.markers.clone()),
            acks: fail(step.acks_err, "ack").map(|_| self.acks.clone()),
            notices: self.notices.clone(),
            group: None,
            resume_requested: None,
            subnet_zones: Default::default(),
            capacity_refusals: Vec::new(),
            mount_targets: match step.mount_targets {
                0 => None,
                n => Some(MountTargets {
                    fs_id: "fs-0123abcd".into(),
                    zones: (n == 2)
                        .then(|| "us-east-1a".to_string())
                        .into_iter()
                        .collect(),
                }),
            },
            progress: None,
        }
    }

    fn log(&mut self, added: bool, ip: IpAddr) {
        self.acks.log_lines += 1;
        let map = if added {
            &mut self.acks.log_added
        } else {
            &mut self.acks.log_removed
        };
        map.insert(ip, self.acks.log_lines);
    }

    fn apply(&mut self, op: &Op, generation: u64) {
        match *op {
            Op::DeleteElastic(s) => {
                if let Some(i) = self.instances.get_mut(&s) {
                    i.tags.remove(ELASTIC);
                }
            }
            Op::AddElastic(s) => {
                if let Some(i) = self.instances.get_mut(&s) {
                    i.tags.insert(ELASTIC.into(), "back".into());
                }
            }
            Op::Ready(s) => drop(self.markers.success.insert(slot_ip(s))),
            Op::Failed(s) => drop(self.markers.failed.insert(slot_ip(s), "exit 1".into())),
            Op::AckFile(off) => {
                self.acks.generation = Some((generation as i64 + off).max(0) as u64)
            }
            Op::AckFileRaw(g) => self.acks.generation = Some(g),
            Op::LogAdded(s) => self.log(true, slot_ip(s)),
            Op::LogRemoved(s) => self.log(false, slot_ip(s)),
            Op::Vanish(s) => drop(self.instances.remove(&s)),
            Op::Notice(s, rebalance, by_ip, event) => {
                let target = match by_ip {
                    true => NoticeTarget::Ip(slot_ip(s)),
                    false => NoticeTarget::Instance(id_of(s, self.incarnation[s])),
                };
                let kind = match rebalance {
                    true => NoticeKind::Rebalance,
                    false => NoticeKind::Interruption,
                };
                self.notices.push(Notice {
                    id: format!("e-{event}"),
                    kind,
                    target,
                    deadline: None,
                    source: "queue",
                });
            }
            Op::Health(s, ok, gpus_lost, own) => {
                let n = self.incarnation[s] + u32::from(!own);
                let h = Health {
                    instance_id: id_of(s, n),
                    ok,
                    gpus_lost,
                    reason: "check".into(),
                    when: None,
                };
                self.markers.health.insert(slot_ip(s), h);
            }
            Op::Launcher(s, state, own, silent) => {
                use dt::protocol::launcher::LauncherState as L;
                let states = [
                    L::Idle,
                    L::Running,
                    L::Stopping,
                    L::Stopped,
                    L::Finished,
                    L::Failed,
                ];
                let n = self.incarnation[s] + u32::from(!own);
                let l = Launcher {
                    instance_id: id_of(s, n),
                    state: states[usize::from(state) % states.len()],
                    generation: None,
                    restarts: 0,
                    reason: "report".into(),
                    heard_at: if silent { 0 } else { u64::MAX / 2 },
                };
                self.markers.launchers.insert(slot_ip(s), l);
            }
            Op::Launch(s) => {
                if !self.instances.contains_key(&s) {
                    self.incarnation[s] += 1;
                    let i = make_instance(s, self.incarnation[s], true, None);
                    self.instances.insert(s, i);
                    // A new instance has not prepared its data yet.
                    self.markers.success.remove(&slot_ip(s));
                    self.markers.failed.remove(&slot_ip(s));
                    self.markers.health.remove(&slot_ip(s));
                }
            }
        }
    }
}

fn build(sc: &Scenario) -> (World, State) {
    let mut w = World {
        instances: BTreeMap::new(),
        incarnation: [0; SLOTS],
        markers: Markers::default(),
        notices: Vec::new(),
        acks: Acks {
            generation: sc.ack.map(|off| (sc.generation as i64 + off).max(0) as u64),
            log_lines: sc.log_lines,
            ..Acks::default()
        },
    };
    for (slot, spec) in sc.insts.iter().enumerate() {
        let ip = slot_ip(slot);
        if spec.present {
            w.instances
                .insert(slot, make_instance(slot, 0, spec.elastic, spec.status));
        }
        if spec.ready {
            w.markers.success.insert(ip);
        }
        if spec.failed {
            w.markers.failed.insert(ip, "exit 2".into());
        }
        // Log lines can only point inside the log.
        if spec.log_added > 0 && spec.log_added <= sc.log_lines {
            w.acks.log_added.insert(ip, spec.log_added);
        }
        if spec.log_removed > 0 && spec.log_removed <= sc.log_lines {
            w.acks.log_removed.insert(ip, spec.log_removed);
        }
    }
    // A remembered state decide could have produced: members of elastic workers only, generations
    // not ahead of the counter, no more members than max allows.
    let mut st = State {
        generation: sc.generation,
        ..State::default()
    };
    let room = sc.max - 2;
    for (slot, role) in sc.roles.iter().enumerate() {
        let (id, ip) = (id_of(slot, 0), slot_ip(slot));
        let mark = |m: u64| m.min(sc.log_lines);
        match role.clone() {
            Role::Member {
                acked,
                gen_back,
                mark: m,
            } if sc.generation > 0 && st.members.len() < room && slot < WORKERS => {
                st.members.push(Member {
                    id,
                    ip,
                    instance_type: "p3.2xlarge".into(),
                    joined_generation: sc.generation.saturating_sub(gen_back).max(1),
                    joined_at: START - 1000,
                    log_mark: mark(m),
                    acked,
                });
            }
            Role::Removal {
                t,
                gen_back,
                deadline_off,
                mark: m,
            } => st.removals.push(Removal {
                id,
                ip,
                generation: sc.generation.saturating_sub(gen_back),
                queued_at: START - 1000,
                deadline: (START as i64 + deadline_off) as u64,
                log_mark: mark(m),
                reason: "elastic tag deleted".into(),
                stage: t.clone(),
            }),
            _ => {}
        }
    }
    if sc.pending {
        st.pending_notification = Some(Notification {
            generation: sc.generation,
            added: st.members.iter().map(|m| m.ip).collect(),
            removed: st.removals.iter().map(|r| r.ip).collect(),
            notices: Vec::new(),
        });
    }
    (w, st)
}

/// The daemon's EC2 view in a targeted scenario: the fleet as the first listing left it, kept
/// current by reads of what events and markers name, and by the listings the steps bring.
struct Reader {
    fleet: Fleet,
    /// Instances the last pass terminated: EC2 announces their state change.
    announced: BTreeSet<String>,
    /// What a read that failed still has to read.
    owed: Targets,
}

impl Reader {
    fn new(world: &World) -> Reader {
        let mut fleet = Fleet::default();
        let seq = fleet.begin();
        fleet.apply_listing(seq, 0, world.instances.values().cloned().collect());
        Reader {
            fleet,
            announced: BTreeSet::new(),
            owed: Targets::default(),
        }
    }

    /// What the daemon decides on this pass: `named` (the instances this step's events name,
    /// unless they are lost) and the marker IPs no known worker has, read from the world.
    fn view(
        &mut self,
        w: &World,
        step: &Step,
        named: BTreeSet<String>,
    ) -> Result<Vec<Instance>, String> {
        let mut t = std::mem::take(&mut self.owed);
        let announced = std::mem::take(&mut self.announced);
        if !step.lost {
            t.ids.extend(named.into_iter().chain(announced));
        }
        if step.ec2_err {
            self.owed = t;
            return Err("DescribeInstances failed".into());
        }
        if !step.markers_err {
            let marked = w.markers.success.iter().chain(w.markers.failed.keys());
            t.ips.extend(self.fleet.unknown_ips(marked.copied()));
        }
        let covered = |i: &&Instance| t.ids.contains(&i.id) || t.ips.contains(&i.ip);
        let found = w.instances.values().filter(covered).cloned().collect();
        let seq = self.fleet.begin();
        self.fleet.apply_read(seq, &t, found);
        if step.resync {
            let seq = self.fleet.begin();
            self.fleet
                .apply_listing(seq, 0, w.instances.values().cloned().collect());
        }
        Ok(self.fleet.instances().to_vec())
    }
}

/// The instances in the slots `ops` changes, before and after.
fn named(ops: &[Op], before: &BTreeMap<usize, String>, w: &World) -> BTreeSet<String> {
    let slots = ops.iter().filter_map(|op| match *op {
        Op::DeleteElastic(s) | Op::AddElastic(s) | Op::Vanish(s) | Op::Launch(s) => Some(s),
        _ => None,
    });
    let ids = slots.flat_map(|s| {
        [
            before.get(&s).cloned(),
            w.instances.get(&s).map(|i| i.id.clone()),
        ]
    });
    ids.flatten().collect()
}

/// Everything a property may look at for one pass.
struct Pass<'a> {
    index: usize,
    rules: &'a Rules,
    prev: &'a State,
    snap: &'a Snapshot,
    /// What a complete listing would have shown this pass (the same as `snap` unless the
    /// scenario reads targeted).
    complete: &'a Snapshot,
    step: &'a Step,
    plan: &'a Plan,
    now: Millis,
    /// IPs that had a success marker in some snapshot fed so far, or were members at the start.
    ever_ready: &'a BTreeSet<IpAddr>,
    /// Instance ids whose TerminateInstances call succeeded on an earlier pass.
    sent: &'a BTreeSet<String>,
}

impl Pass<'_> {
    fn all_sources_ok(&self) -> bool {
        self.snap.instances.is_ok() && self.snap.markers.is_ok() && self.snap.acks.is_ok()
    }

    fn observed(&self, id: &str) -> Option<&Instance> {
        self.snap
            .instances
            .as_ref()
            .ok()?
            .iter()
            .find(|i| i.id == id)
    }

    /// The instance's own health report in this pass's snapshot says it is unhealthy.
    fn unhealthy(&self, id: &str) -> Option<&Health> {
        let inst = self.observed(id)?;
        let h = self.snap.markers.as_ref().ok()?.health.get(&inst.ip)?;
        (!h.ok && h.instance_id == id).then_some(h)
    }

    /// A member whose own launcher report says it trains and was last heard at least
    /// `silent_after` ago: the node stopped answering, and it leaves at once.
    fn silent(&self, id: &str) -> bool {
        let (Some(inst), Some(after)) = (self.observed(id), self.rules.launcher_silent_ms) else {
            return false;
        };
        let Some(l) = (self.snap.markers.as_ref().ok()).and_then(|m| m.launchers.get(&inst.ip))
        else {
            return false;
        };
        let member = self.prev.members.iter().any(|m| m.id == id);
        member
            && l.instance_id == id
            && l.state.is_active()
            && self.now.saturating_sub(l.heard_at) >= after
    }

    fn fail(&self, what: String) -> Result<(), String> {
        Err(format!(
            "pass {} at now={}: {what}\nprevious state: {:?}\nplan.outcome.terminate(): {:?}\nplan.outcome.hosts: {:?}\nplan.outcome.events: {:?}",
            self.index, self.now, self.prev, self.plan.outcome.terminate(), self.plan.outcome.hosts, self.plan.outcome.events
        ))
    }
}

/// Runs the scenario's passes like the daemon would, checking `check` after every decide.
fn run(
    sc: &Scenario,
    mut check: impl FnMut(&Pass) -> Result<(), String>,
) -> Result<(), TestCaseError> {
    let r = rules(sc.min, sc.max);
    let (mut world, mut state) = build(sc);
    let mut ever_ready: BTreeSet<IpAddr> = state.members.iter().map(|m| m.ip).collect();
    let mut sent: BTreeSet<String> = state
        .removals
        .iter()
        .filter(|r| r.stage == Stage::Ended)
        .map(|r| r.id.clone())
        .collect();
    let mut now = START;
    let mut reader = sc.targeted.then(|| Reader::new(&world));
    for (index, step) in sc.steps.iter().enumerate() {
        let before: BTreeMap<usize, String> = (world.instances.iter())
            .map(|(s, i)| (*s, i.id.clone()))
            .collect();
        for op in &step.ops {
            world.apply(op, state.generation);
        }
        now += step.dt;
        let complete = world.snapshot(step);
        let snap = match &mut reader {
            None => complete.clone(),
            Some(r) => Snapshot {
                instances: r.view(&world, step, named(&step.ops, &before, &world)),
                ..complete.clone()
            },
        };
        if let Ok(m) = &snap.markers {
            ever_ready.extend(m.success.iter().copied());
        }
        let plan = decide(&r, &snap, &state, now);
        let pass = Pass {
            index,
            rules: &r,
            prev: &state,
            snap: &snap,
            complete: &complete,
            step,
            plan: &plan,
            now,
            ever_ready: &ever_ready,
            sent: &sent,
        };
        check(&pass).map_err(TestCaseError::fail)?;

        // What act and the daemon do with the plan.
        state = plan.state.clone();
        for (status, ids) in &plan.outcome.tags() {
            for i in world.instances.values_mut().filter(|i| ids.contains(&i.id)) {
                i.tags.insert(STATUS_TAG.into(), status.as_tag().into());
            }
            if let Some(r) = &mut reader {
                r.fleet.tagged(ids, STATUS_TAG, status.as_tag());
            }
        }
        if step.terminate_ok {
            let accepted = plan.outcome.terminate();
            let call = "TerminateInstances accepted for";
            let applied = dt::model::Applied {
                ended: accepted.into_iter().map(|id| (id, call)).collect(),
                ..Default::default()
            };
            dt::decide::settle(&r, &mut state, &applied, now);
            sent.extend(plan.outcome.terminate().iter().cloned());
            if step.shutdown {
                world
                    .instances
                    .retain(|_, i| !plan.outcome.terminate().contains(&i.id));
                if let Some(r) = &mut reader {
                    r.announced.extend(plan.outcome.terminate());
                }
            }
        }
        world.notices.clear();
        if step.delivered && state.pending_notification == plan.outcome.notify {
            state.pending_notification = None;
        }
    }
    Ok(())
}

fn interrupted_ids(st: &State) -> BTreeSet<String> {
    let interrupted = st.removals.iter().filter(|r| r.is_interrupted());
    interrupted.map(|r| r.id.clone()).collect()
}

/// Acknowledged by the job: a generation dtd wrote (at most `written`) that no longer lists it.
fn acknowledged(r: &Removal, acks: &Acks, written: u64) -> bool {
    acks.generation
        .is_some_and(|g| g >= r.generation && g <= written)
        || acks
            .log_removed
            .get(&r.ip)
            .is_some_and(|line| *line > r.log_mark)
}

// ---- the properties ----

fn by_id(list: &[Instance]) -> Vec<Instance> {
    let mut list = list.to_vec();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    list
}

/// What a plan takes away and keeps, whatever order the instances were listed in.
fn decisions(
    plan: &Plan,
) -> (
    BTreeSet<String>,
    BTreeSet<IpAddr>,
    BTreeSet<String>,
    BTreeSet<String>,
) {
    let ids = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    (
        ids(plan.outcome.terminate()),
        plan.outcome.hosts.iter().map(|h| h.ip).collect(),
        ids(plan.state.members.iter().map(|m| m.id.clone()).collect()),
        ids(plan.state.removals.iter().map(|r| r.id.clone()).collect()),
    )
}

fn config() -> ProptestConfig {
    ProptestConfig {
        // PROPTEST_CASES=100000 searches harder (a rare interleaving slipped past 256 once).
        cases: (std::env::var("PROPTEST_CASES").ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Base hosts and the master are never terminated, never leave the host file, and the
    /// master is never listed as a worker.
    #[test]
    fn never_terminates_or_unlists_base_hosts_or_the_master(sc in scenario()) {
        run(&sc, |p| {
            for id in &p.plan.outcome.terminate() {
                let ip = p.observed(id).map(|i| i.ip);
                if ip.is_some_and(|ip| p.rules.is_protected(ip)) {
                    return p.fail(format!("terminated {id}, a base host or the master ({ip:?})"));
                }
            }
            let listed: Vec<IpAddr> = p.plan.outcome.hosts.iter().map(|h| h.ip).collect();
            if !listed.starts_with(&p.rules.base_hosts) {
                return p.fail("base hosts are not first, in config order, in the host file".into());
            }
            if p.rules.master.is_some_and(|m| listed.contains(&m)) {
                return p.fail("the master is listed as a worker".into());
            }
            Ok(())
        })?;
    }

    /// Only instances of this cluster, observed on this pass, are ever terminated.
    #[test]
    fn never_terminates_an_instance_without_the_cluster_tags(sc in scenario()) {
        run(&sc, |p| {
            for id in &p.plan.outcome.terminate() {
                match p.observed(id) {
                    None => return p.fail(format!("terminated {id}, which this pass did not observe")),
                    Some(i) if !has_cluster_tags(i) => {
                        return p.fail(format!("terminated {id} without the cluster tags: {:?}", i.tags))
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
    }

    /// A worker that is (or may be) training is terminated only after the job acknowledged a
    /// generation without it, or after the ack timeout.
    #[test]
    fn never_terminates_before_acknowledgement_or_timeout(sc in scenario()) {
        run(&sc, |p| {
            let Ok(acks) = &p.snap.acks else { return Ok(()) };
            for id in &p.plan.outcome.terminate() {
                // Its own check said its GPUs are gone, or its node stopped answering: no job can
                // use it, it leaves at once.
                if p.unhealthy(id).is_some_and(|h| h.gpus_lost) || p.silent(id) {
                    continue;
                }
                if p.prev.members.iter().any(|m| &m.id == id) {
                    return p.fail(format!("terminated {id}, listed in the host file the job runs"));
                }
                if let Some(r) = p.prev.removals.iter().find(|r| &r.id == id) {
                    if r.awaits_ack() && !acknowledged(r, acks, p.prev.generation) && p.now < r.deadline {
                        return p.fail(format!(
                            "terminated {id} (removal generation {}, mark {}, deadline {}) without ack {acks:?}",
                            r.generation, r.log_mark, r.deadline
                        ));
                    }
                } else {
                    // Not remembered at all: if its tag says it may be training, the job must have
                    // applied the current generation (which does not list it).
                    let tag = p.observed(id).and_then(|i| i.status_tag());
                    let may_train = matches!(tag, Some("ADDED") | Some("REMOVAL_QUEUED"));
                    let applied = acks.generation.filter(|g| *g <= p.prev.generation);
                    if may_train && applied.is_none_or(|g| g < p.prev.generation) {
                        return p.fail(format!("terminated {id} (tag {tag:?}) the job may still use"));
                    }
                }
            }
            Ok(())
        })?;
    }

    /// A voluntary removal never takes the worker count below min (members whose instance
    /// vanished from a complete view do not count: nothing could keep them).
    #[test]
    fn never_goes_below_min_through_a_voluntary_removal(sc in scenario()) {
        run(&sc, |p| {
            let Ok(instances) = &p.snap.instances else { return Ok(()) };
            let running = |id: &str| instances.iter().any(|i| i.id == id && has_cluster_tags(i));
            let kept: BTreeSet<&str> = p.plan.state.members.iter().map(|m| m.id.as_str()).collect();
            // An interruption is not voluntary: AWS takes the worker whatever min says.
            let interrupted = interrupted_ids(&p.plan.state);
            let voluntary: Vec<&str> = p.prev.members.iter()
                .map(|m| m.id.as_str())
                .filter(|id| !kept.contains(id) && running(id) && !interrupted.contains(*id))
                // A broken worker trains nobody: health removals ignore min.
                .filter(|id| p.unhealthy(id).is_none() && !p.silent(id))
                .collect();
            let after = p.rules.base_hosts.len() + p.plan.state.members.len();
            if !voluntary.is_empty() && after < p.rules.min {
                return p.fail(format!("removed {voluntary:?}, leaving {after} workers under min {}", p.rules.min));
            }
            Ok(())
        })?;
    }

    /// Only a worker whose own report says it is unhealthy (or a member whose launcher went
    /// silent) is removed for its health, never a base host or the master, and none while more
    /// than `max_unhealthy` are unhealthy.
    #[test]
    fn health_removes_only_the_unhealthy_and_never_past_the_limit(sc in scenario()) {
        run(&sc, |p| {
            let queued = p.plan.outcome.events.iter()
                .filter(|e| e.kind == "removal_queued" && e.cause == Some(Cause::Unhealthy));
            for e in queued {
                let id = e.instance.as_deref().unwrap_or("");
                if p.unhealthy(id).is_none() && !p.silent(id) {
                    return p.fail(format!("removed {id} for its health without its own failed report or a silent launcher"));
                }
                if e.ip.is_some_and(|ip| p.rules.is_protected(ip)) {
                    return p.fail(format!("removed protected {id} for its health"));
                }
                if p.plan.state.health_stopped.is_some() {
                    return p.fail(format!("removed {id} while stopped at max_unhealthy"));
                }
            }
            Ok(())
        })?;
    }

    /// The host file never lists more than max workers, nor any IP twice.
    #[test]
    fn never_goes_above_max(sc in scenario()) {
        run(&sc, |p| {
            if p.plan.outcome.hosts.len() > p.rules.max {
                return p.fail(format!("{} workers listed, max {}", p.plan.outcome.hosts.len(), p.rules.max));
            }
            let distinct: BTreeSet<IpAddr> = p.plan.outcome.hosts.iter().map(|h| h.ip).collect();
            if distinct.len() != p.plan.outcome.hosts.len() {
                return p.fail("an IP is listed twice in the host file".into());
            }
            Ok(())
        })?;
    }

    /// Nobody trains without having prepared its data: every elastic worker in the host file
    /// had a success marker at some point (or was already a member when the daemon started).
    #[test]
    fn never_lists_a_worker_without_a_success_marker(sc in scenario()) {
        run(&sc, |p| {
            for h in &p.plan.outcome.hosts {
                if !p.rules.base_hosts.contains(&h.ip) && !p.ever_ready.contains(&h.ip) {
                    return p.fail(format!("{} listed without ever having a success marker", h.ip));
                }
            }
            Ok(())
        })?;
    }

    /// A pass with any source unreadable removes nobody, queues no removal and terminates nothing.
    #[test]
    fn a_partial_view_removes_and_terminates_nothing(sc in scenario()) {
        run(&sc, |p| {
            if p.all_sources_ok() {
                return Ok(());
            }
            if !p.plan.outcome.terminate().is_empty() {
                return p.fail(format!("terminated {:?} on a partial view", p.plan.outcome.terminate()));
            }
            if p.plan.outcome.holds.is_empty() {
                return p.fail("a source failed but plan.outcome.holds is empty".into());
            }
            let listed: BTreeSet<IpAddr> = p.plan.outcome.hosts.iter().map(|h| h.ip).collect();
            // Interruptions are heeded on any view: the worker goes away whatever we see.
            let interrupted = interrupted_ids(&p.plan.state);
            for m in p.prev.members.iter().filter(|m| !interrupted.contains(&m.id)) {
                if !p.plan.state.members.iter().any(|k| k.id == m.id) || !listed.contains(&m.ip) {
                    return p.fail(format!("member {} ({}) removed on a partial view", m.id, m.ip));
                }
            }
            for r in p.plan.state.removals.iter().filter(|r| !r.is_interrupted()) {
                if !p.prev.removals.iter().any(|q| q.id == r.id) {
                    return p.fail(format!("removal of {} queued on a partial view", r.id));
                }
            }
            Ok(())
        })?;
    }

    /// Whatever the ack file holds, the generation only ever grows by one per pass that changes
    /// the membership (never wraps, never jumps to what a worker wrote), and the ack file counts
    /// only up to what dtd wrote.
    #[test]
    fn the_generation_grows_by_one_whatever_the_ack_file_says(sc in scenario()) {
        run(&sc, |p| {
            let (before, after) = (p.prev.generation, p.plan.state.generation);
            if after != before && after != before + 1 {
                return p.fail(format!("generation {before} became {after}"));
            }
            let claimed = p.snap.acks.as_ref().ok().and_then(|a| a.generation);
            let refused = p.plan.outcome.events.iter().any(|e| e.kind == EventKind::AckRefused);
            if claimed.is_some_and(|g| g > before) && p.plan.outcome.refused.is_empty() {
                return p.fail(format!("ack {claimed:?} above generation {before} not shown as refused"));
            }
            if refused && claimed.is_none_or(|g| g <= before) {
                return p.fail(format!("ack {claimed:?} refused at generation {before}"));
            }
            Ok(())
        })?;
    }

    /// TerminateInstances is asked once per pass per instance, and never again once it succeeded.
    #[test]
    fn never_terminates_twice_once_sent(sc in scenario()) {
        run(&sc, |p| {
            let mut seen = BTreeSet::new();
            for id in &p.plan.outcome.terminate() {
                if p.sent.contains(id) {
                    return p.fail(format!("terminated {id} again after its termination was sent"));
                }
                if !seen.insert(id) {
                    return p.fail(format!("{id} listed twice in plan.outcome.terminate()"));
                }
            }
            Ok(())
        })?;
    }

    /// AWS reclaims an interrupted instance: dtd never terminates it, and it never rejoins.
    #[test]
    fn never_terminates_or_relists_an_interrupted_instance(sc in scenario()) {
        run(&sc, |p| {
            let before = interrupted_ids(p.prev);
            for id in &p.plan.outcome.terminate() {
                if before.contains(id) {
                    return p.fail(format!("terminated {id}, which AWS is reclaiming"));
                }
            }
            for id in interrupted_ids(&p.plan.state) {
                if p.plan.state.members.iter().any(|m| m.id == id) {
                    return p.fail(format!("{id} is interrupted and still (or again) a member"));
                }
            }
            Ok(())
        })?;
    }

    /// What the file system's mount targets say only explains a wait: without them the pass
    /// decides the same membership, tags, terminations and hook actions, and journals the same
    /// events but `no_mount_target`.
    #[test]
    fn mount_targets_change_nothing_but_what_a_worker_waits_for(sc in scenario()) {
        run(&sc, |p| {
            let blind = Snapshot { mount_targets: None, ..p.snap.clone() };
            let other = decide(p.rules, &blind, p.prev, p.now);
            let (a, b) = (p.plan, &other);
            let same = a.outcome.hosts == b.outcome.hosts
                && a.outcome.tags() == b.outcome.tags()
                && a.outcome.terminate() == b.outcome.terminate()
                && a.outcome.group_terminate() == b.outcome.group_terminate()
                && a.outcome.complete_hooks() == b.outcome.complete_hooks()
                && a.outcome.heartbeats() == b.outcome.heartbeats()
                && a.outcome.protect() == b.outcome.protect()
                && a.outcome.notify == b.outcome.notify
                && a.outcome.holds == b.outcome.holds
                && a.outcome.deferred_notices == b.outcome.deferred_notices;
            if !same {
                return p.fail(format!("the mount targets changed the plan; without them: {other:?}"));
            }
            let mut state = a.state.clone();
            state.no_mount_target = b.state.no_mount_target.clone();
            if state != b.state {
                return p.fail(format!("the mount targets changed the state: {:?}", a.state));
            }
            let events = |plan: &Plan| -> Vec<Event> {
                let kept = plan.outcome.events.iter().filter(|e| e.kind != "no_mount_target");
                kept.cloned().collect()
            };
            if events(a) != events(b) {
                return p.fail("the mount targets changed the journal beyond no_mount_target".into());
            }
            Ok(())
        })?;
    }

    /// A worker's beginning (`preparing`) and its prepare-data failure (`prepare_failed`) are
    /// journaled at most once per instance, however many passes read the same tags and markers;
    /// the job's acknowledgement of a join (`join_acknowledged`) once per join: only for a
    /// member not yet acknowledged.
    #[test]
    fn beginnings_failures_and_join_acknowledgements_are_journaled_once(sc in scenario()) {
        let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
        run(&sc, |p| {
            for e in &p.plan.outcome.events {
                let id = e.instance.clone().unwrap_or_default();
                if e.kind == "join_acknowledged" {
                    let waiting = p.prev.members.iter().any(|m| m.id == id && !m.acked);
                    if !waiting {
                        return p.fail(format!("`join_acknowledged` for {id}, not a member waiting for it"));
                    }
                } else if (e.kind == "preparing" || e.kind == "prepare_failed")
                    && !seen.insert((e.kind.to_string(), id.clone()))
                {
                    return p.fail(format!("`{}` journaled again for {id}", e.kind));
                }
            }
            Ok(())
        })?;
    }

    /// Read targeted with every event arriving, the view is exactly the complete listing's (in id
    /// order), and the plan removes, terminates and lists what a complete listing's would.
    #[test]
    fn a_targeted_view_with_every_event_is_the_complete_view(sc in scenario()) {
        let steps = sc.steps.iter().map(|s| Step { lost: false, ..s.clone() }).collect();
        let sc = Scenario { targeted: true, steps, ..sc };
        run(&sc, |p| {
            let (Ok(view), Ok(all)) = (&p.snap.instances, &p.complete.instances) else {
                return Ok(());
            };
            if *view != by_id(all) {
                return p.fail(format!("the view {view:?} is not the listing {all:?}"));
            }
            let listed = decide(p.rules, p.complete, p.prev, p.now);
            if decisions(&listed) != decisions(p.plan) {
                return p.fail(format!("a complete listing decides {:?}", decisions(&listed)));
            }
            Ok(())
        })?;
    }

    /// Read targeted with events lost, nothing is terminated that a complete listing would not
    /// terminate, but the instances whose view is out of date; and a listing brings back the
    /// complete view, whatever was lost before it.
    #[test]
    fn a_targeted_view_terminates_nothing_a_complete_view_would_not(sc in scenario()) {
        let sc = Scenario { targeted: true, ..sc };
        run(&sc, |p| {
            let (Ok(view), Ok(all)) = (&p.snap.instances, &p.complete.instances) else {
                return Ok(());
            };
            if p.step.resync && *view != by_id(all) {
                return p.fail(format!("after a listing the view {view:?} is not {all:?}"));
            }
            let seen = |list: &[Instance], id: &str| list.iter().find(|i| i.id == id).cloned();
            let listed = decide(p.rules, p.complete, p.prev, p.now).outcome.terminate();
            for id in p.plan.outcome.terminate() {
                if seen(view, &id) == seen(all, &id) && !listed.contains(&id) {
                    return p.fail(format!("terminated {id}, which a complete listing would not"));
                }
            }
            Ok(())
        })?;
    }
}

/// The properties only mean something if the random runs reach the rules they guard: over a
/// fixed sample of scenarios, every kind of decision must happen a fair number of times.
#[test]
fn the_random_runs_reach_every_rule() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    for _ in 0..256 {
        let sc = scenario().new_tree(&mut runner).unwrap().current();
        run(&sc, |p| {
            let mut count =
                |what: &'static str, yes: bool| *seen.entry(what).or_default() += yes as usize;
            count("pass", true);
            count("terminated", !p.plan.outcome.terminate().is_empty());
            count("partial view", !p.all_sources_ok());
            count("targeted view", sc.targeted && p.snap.instances.is_ok());
            if let (Ok(view), Ok(all)) = (&p.snap.instances, &p.complete.instances) {
                count("out-of-date view", *view != by_id(all));
            }
            count(
                "at max",
                p.plan.outcome.rows.iter().any(|w| {
                    w.waiting_for
                        .as_deref()
                        .is_some_and(|s| s.starts_with("room under max"))
                }),
            );
            for kind in [
                "preparing",
                "prepare_failed",
                "joined",
                "join_acknowledged",
                "removal_queued",
                "acknowledged",
                "ack_timeout",
                "removal_held",
                "removal_refused",
                "removal_cancelled",
                "gone",
                "interrupted",
                "no_mount_target",
                "unhealthy",
            ] {
                count(kind, p.plan.outcome.events.iter().any(|e| e.kind == kind));
            }
            Ok(())
        })
        .unwrap();
    }
    println!("passes reaching each decision: {seen:?}");
    for (what, n) in &seen {
        assert!(*n >= 10, "only {n} passes reached `{what}`: {seen:?}");
    }
}
