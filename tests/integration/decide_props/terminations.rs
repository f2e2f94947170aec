//! What dtd terminates: only instances of this cluster it observed, never a base host or the
//! master, a worker the job may use only once acknowledged or timed out, nothing twice, and
//! never an instance AWS is reclaiming.

use std::collections::BTreeSet;
use std::net::IpAddr;

use proptest::prelude::*;

use super::support::{acknowledged, config, has_cluster_tags, interrupted_ids, run, scenario};

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
}
