//! Random scenarios: the world's instances and markers, what dtd remembers at the start, and
//! the steps between passes (what people, the job and AWS change, and which sources fail).

use proptest::prelude::*;

use dt::model::*;

use super::slots::{SLOTS, TIMEOUT, WORKERS};

#[derive(Debug, Clone)]
pub struct InstSpec {
    pub present: bool,
    pub elastic: bool,
    pub status: Option<WorkerStatus>,
    pub ready: bool,
    pub failed: bool,
    pub log_added: u64,
    pub log_removed: u64,
}

#[derive(Debug, Clone)]
pub enum Role {
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
pub enum Op {
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
pub struct Step {
    pub ops: Vec<Op>,
    pub ec2_err: bool,
    pub markers_err: bool,
    pub acks_err: bool,
    pub dt: u64,
    /// TerminateInstances succeeds (the daemon marks the removals Sent).
    pub terminate_ok: bool,
    /// Terminated instances stop showing up as running.
    pub shutdown: bool,
    /// The job notification is delivered (the daemon clears it).
    pub delivered: bool,
    /// The file system's mount-target zones: unknown, none, or us-east-1a only.
    pub mount_targets: u8,
    /// Read targeted: this step's events never arrive (only a listing will show its changes).
    pub lost: bool,
    /// Read targeted: a complete listing lands this pass.
    pub resync: bool,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub min: usize,
    pub max: usize,
    pub generation: u64,
    pub log_lines: u64,
    pub ack: Option<i64>,
    pub insts: Vec<InstSpec>,
    pub roles: Vec<Role>,
    pub pending: bool,
    pub steps: Vec<Step>,
    /// How the daemon reads EC2: a complete listing every pass, or the fleet as a listing left
    /// it, kept current by targeted reads of what events and markers name.
    pub targeted: bool,
    /// `in_place` with `workers.replace_interrupted`: a rebalance-recommended member trains on
    /// until its replacement (never launched here) is in the job.
    pub in_place: bool,
}

pub fn any_status() -> impl Strategy<Value = WorkerStatus> {
    prop::sample::select(WorkerStatus::ALL.to_vec())
}

pub fn inst_spec() -> impl Strategy<Value = InstSpec> {
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

pub fn role() -> impl Strategy<Value = Role> {
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

pub fn op() -> impl Strategy<Value = Op> {
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

pub fn step() -> impl Strategy<Value = Step> {
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

pub fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (0usize..=5, 2usize..=7),
        (0u64..6, 0u64..12, prop::option::of(-3i64..=1)),
        prop::collection::vec(inst_spec(), SLOTS),
        // Base hosts and the master get roles too: only removals are kept for them, as if
        // queued before the config made them base hosts.
        prop::collection::vec(role(), WORKERS + 3),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop::collection::vec(step(), 1..7),
    )
        .prop_map(
            |(
                (min, max),
                (generation, log_lines, ack),
                insts,
                roles,
                (pending, targeted, in_place),
                steps,
            )| Scenario {
                targeted,
                in_place,
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
