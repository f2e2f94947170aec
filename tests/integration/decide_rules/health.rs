//! Health: a failed check, GPUs gone, max_unhealthy, replacements.

use crate::support::world::*;

impl World {
    /// What a worker's agent writes after its health check.
    pub(crate) fn health(&mut self, id: &str, ok: bool, gpus_lost: bool, reason: &str) {
        let ip = self.inst(id).ip;
        let h = HealthSeen {
            instance_id: id.into(),
            ok,
            gpus_lost,
            reason: reason.into(),
            when: Some(1_000),
        };
        self.markers.health.insert(ip, h);
    }
}

/// (replaced instance, token) of each launch; the capacity choices are tested in capacity.rs.
fn launches(plan: &Plan) -> Vec<(String, String)> {
    (plan.outcome.launches().into_iter())
        .map(|((replaces, _), token, _)| (replaces, token))
        .collect()
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
    assert_eq!(n.notices[0].kind.as_str(), "unhealthy");
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
