//! CompleteLifecycleAction and RecordLifecycleActionHeartbeat, which moto does not implement:
//! tested with the real Auto Scaling client against a stand-in for those two calls
//! (`support::autoscaling::AutoScalingStandIn`, a small Query-API server on a loopback port).
//! Everything else about groups runs against moto (tests/groups.rs).

use std::collections::BTreeMap;

use crate::support::autoscaling::{AutoScalingStandIn, Fields};
use dt::act::asg;
use dt::decide::{decide, Rules};
use dt::model::*;

const COMPLETE: &str = "CompleteLifecycleAction";
const HEARTBEAT_ACTION: &str = "RecordLifecycleActionHeartbeat";

fn action(result: HookResult) -> HookAction {
    HookAction {
        instance: "i-0abc".into(),
        hook: "demo-terminating".into(),
        result,
    }
}

/// The form of a request for `action` with exactly these fields.
fn request(action: &str, fields: &[(&str, &str)]) -> Fields {
    let mut form: Fields = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    form.insert("Action".into(), action.into());
    form.insert("Version".into(), "2011-01-01".into());
    form
}

#[tokio::test]
async fn completing_a_hook_names_the_group_hook_instance_and_result() {
    let aws = AutoScalingStandIn::start();
    asg::complete(&aws.client(), "demo-workers", &action(HookResult::Continue))
        .await
        .expect("completed");
    // Exactly these fields: no LifecycleActionToken.
    let expected = request(
        COMPLETE,
        &[
            ("AutoScalingGroupName", "demo-workers"),
            ("LifecycleHookName", "demo-terminating"),
            ("InstanceId", "i-0abc"),
            ("LifecycleActionResult", "CONTINUE"),
        ],
    );
    assert_eq!(aws.calls(COMPLETE), [expected]);
}

#[tokio::test]
async fn a_failed_completion_says_which_instance_and_why() {
    let aws = AutoScalingStandIn::start();
    aws.fail_with(
        COMPLETE,
        "ValidationError",
        "No active Lifecycle Action found with instance ID i-0abc",
    );
    let err = asg::complete(&aws.client(), "demo-workers", &action(HookResult::Abandon))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("i-0abc") && err.contains("ABANDON"), "{err}");
    assert!(err.contains("No active Lifecycle Action"), "{err}");
}

#[tokio::test]
async fn a_heartbeat_names_the_group_hook_and_instance() {
    let aws = AutoScalingStandIn::start();
    asg::heartbeat(&aws.client(), "demo-workers", "i-0abc", "demo-terminating")
        .await
        .expect("heartbeat");
    let expected = request(
        HEARTBEAT_ACTION,
        &[
            ("AutoScalingGroupName", "demo-workers"),
            ("LifecycleHookName", "demo-terminating"),
            ("InstanceId", "i-0abc"),
        ],
    );
    assert_eq!(aws.calls(HEARTBEAT_ACTION), [expected]);
}

const ELASTIC: &str = "demo-aws-dl-cfn-elastic-worker";
const HEARTBEAT: Millis = 60_000;
const PREPARE_TIMEOUT: Millis = 600_000;

/// The rule tests' rules (support/world.rs) for a group's workers, with no base hosts.
fn group_rules() -> Rules {
    Rules {
        launch_template_id: None,
        auto_scaling_group: Some("demo-workers".into()),
        min: 0,
        max: 4,
        base_hosts: Vec::new(),
        master: None,
        ack_timeout_ms: 600_000,
        prepare_timeout_ms: PREPARE_TIMEOUT,
        ..crate::support::world::rules()
    }
}

/// i-0abc, launched by the group and held in `Pending:Wait` by its launching hook; its user data
/// died before `dtd agent` started, so no marker ever appears.
fn held_worker() -> Snapshot {
    let tags = [
        ("NodeType", "Worker"),
        ("aws:autoscaling:groupName", "demo-workers"),
        (ELASTIC, "true"),
    ];
    let instance = Instance {
        id: "i-0abc".into(),
        ip: "10.0.1.7".parse().unwrap(),
        instance_type: "p4d.24xlarge".into(),
        az: "us-east-1a".into(),
        market: "on-demand".into(),
        launched_at: 0,
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        capacity_reservation: None,
        subnet: None,
    };
    let member = GroupMember {
        lifecycle_state: "Pending:Wait".into(),
        protected: false,
    };
    let group = Group {
        name: "demo-workers".into(),
        min: 0,
        desired: 1,
        max: 4,
        instances: BTreeMap::from([("i-0abc".to_string(), member)]),
        launching_hook: Some(Hook {
            name: "demo-launching".into(),
            heartbeat_timeout_ms: HEARTBEAT,
        }),
        terminating_hook: None,
    };
    Snapshot {
        reservations: None,
        instances: Ok(vec![instance]),
        markers: Ok(Markers::default()),
        acks: Ok(Acks::default()),
        notices: Vec::new(),
        group: Some(Ok(group)),
        resume_requested: None,
        subnet_zones: Default::default(),
        capacity_refusals: Vec::new(),
        mount_targets: None,
        progress: None,
    }
}

/// The daemon's passes, decide then act, against the stand-in group API: the held worker's hook
/// is heartbeated until the prepare timeout, then completed with ABANDON and never heartbeated
/// again.
#[tokio::test]
async fn a_worker_that_never_reports_is_abandoned_at_the_prepare_timeout_and_heartbeats_stop() {
    let aws = AutoScalingStandIn::start();
    let client = aws.client();
    let hook = [
        ("AutoScalingGroupName", "demo-workers"),
        ("LifecycleHookName", "demo-launching"),
        ("InstanceId", "i-0abc"),
    ];
    let beat = request(HEARTBEAT_ACTION, &hook);
    let abandon = request(
        COMPLETE,
        &[hook.as_slice(), &[("LifecycleActionResult", "ABANDON")]].concat(),
    );
    let beats = || {
        let calls = aws.calls(HEARTBEAT_ACTION);
        assert!(
            calls.iter().all(|c| *c == beat),
            "another heartbeat: {calls:?}"
        );
        calls.len()
    };
    let abandons = || {
        aws.calls(COMPLETE)
            .iter()
            .filter(|c| **c == abandon)
            .count()
    };
    let other_completions = || {
        aws.calls(COMPLETE)
            .iter()
            .filter(|c| **c != abandon)
            .count()
    };
    let (rules, snap) = (group_rules(), held_worker());
    let mut state = State::default();
    let mut beats_before = None;
    // One pass every 10 s, up to a minute past the timeout.
    for now in (0..=PREPARE_TIMEOUT + HEARTBEAT).step_by(10_000) {
        let plan = decide(&rules, &snap, &state, now);
        let (_, errors) = asg::apply_hooks(
            &client,
            "demo-workers",
            &plan.outcome.complete_hooks(),
            &plan.outcome.heartbeats(),
        )
        .await;
        assert!(errors.is_empty(), "{errors:?}");
        if now < PREPARE_TIMEOUT {
            assert_eq!(abandons(), 0, "abandoned early, at {now} ms");
        } else if beats_before.is_none() {
            assert_eq!(abandons(), 1, "not abandoned at the timeout");
            let kinds: Vec<&str> = plan
                .outcome
                .events
                .iter()
                .map(|e| e.kind.as_str())
                .collect();
            assert_eq!(kinds, ["prepare_never_reported"]);
            beats_before = Some(beats());
        }
        state = plan.state;
    }
    // Half a heartbeat timeout apart over the 10 minutes before the timeout.
    assert_eq!(
        beats_before,
        Some((PREPARE_TIMEOUT / (HEARTBEAT / 2) - 1) as usize)
    );
    assert_eq!(
        Some(beats()),
        beats_before,
        "RecordLifecycleActionHeartbeat after ABANDON"
    );
    assert_eq!(
        other_completions(),
        0,
        "completed otherwise than with ABANDON"
    );
    assert!(abandons() >= 1);
}
