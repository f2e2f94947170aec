//! The world a scenario describes (its instances, markers, acks and notices), what each step does
//! to it, the snapshot a pass reads of it, and the remembered state the daemon starts with.

use std::collections::BTreeMap;
use std::net::IpAddr;

use dt::model::*;

use super::scenario::{Op, Role, Scenario, Step};
use super::slots::{id_of, make_instance, slot_ip, SLOTS, START, WORKERS};
use crate::support::world::ELASTIC;

pub struct World {
    /// Slot to the instance running in it.
    pub instances: BTreeMap<usize, Instance>,
    pub incarnation: [u32; SLOTS],
    pub markers: Markers,
    pub acks: Acks,
    /// Notices delivered on the coming pass.
    pub notices: Vec<Notice>,
}

impl World {
    pub fn snapshot(&self, step: &Step) -> Snapshot {
        let fail = |bad: bool, what: &str| {
            if bad {
                Err(Unread(format!("{what} failed")))
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

    pub fn log(&mut self, added: bool, ip: IpAddr) {
        self.acks.log_lines += 1;
        let map = if added {
            &mut self.acks.log_added
        } else {
            &mut self.acks.log_removed
        };
        map.insert(ip, self.acks.log_lines);
    }

    pub fn apply(&mut self, op: &Op, generation: u64) {
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
                let h = HealthSeen {
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
                let l = LauncherSeen {
                    instance_id: id_of(s, n),
                    state: states[usize::from(state) % states.len()],
                    generation: None,
                    restarts: 0,
                    reason: "report".into(),
                    stopped: None,
                    compute: None,
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

pub fn build(sc: &Scenario) -> (World, State) {
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
