//! Who is in the host file: never below min through a voluntary removal nor above max, nobody
//! without a success marker, and removals for health only of the unhealthy, within the limit.

use std::collections::BTreeSet;
use std::net::IpAddr;

use proptest::prelude::*;

use dt::model::*;

use super::support::{config, has_cluster_tags, interrupted_ids, run, scenario};

proptest! {
    #![proptest_config(config())]

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
}
