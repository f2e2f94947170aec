//! CompleteLifecycleAction and RecordLifecycleActionHeartbeat, which moto does not implement:
//! tested at the client boundary with the SDK's own mocking crate (aws-smithy-mocks) standing in
//! for the Auto Scaling API. Everything else about groups runs against moto (tests/groups.rs).

use aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionOutput;
use aws_sdk_autoscaling::operation::record_lifecycle_action_heartbeat::RecordLifecycleActionHeartbeatOutput;
use aws_sdk_autoscaling::Client;
use aws_smithy_mocks::{mock, mock_client, RuleMode};

use std::collections::BTreeMap;

use dt::act::asg;
use dt::config::Slots;
use dt::decide::{decide, Rules};
use dt::model::*;

fn action(result: HookResult) -> HookAction {
    HookAction {
        instance: "i-0abc".into(),
        hook: "demo-terminating".into(),
        result,
    }
}

#[tokio::test]
async fn completing_a_hook_names_the_group_hook_instance_and_result() {
    let rule = mock!(Client::complete_lifecycle_action)
        .match_requests(|r| {
            r.auto_scaling_group_name() == Some("demo-workers")
                && r.lifecycle_hook_name() == Some("demo-terminating")
                && r.instance_id() == Some("i-0abc")
                && r.lifecycle_action_result() == Some("CONTINUE")
                && r.lifecycle_action_token().is_none()
        })
        .then_output(|| CompleteLifecycleActionOutput::builder().build());
    let client = mock_client!(aws_sdk_autoscaling, [&rule]);
    asg::complete(&client, "demo-workers", &action(HookResult::Continue))
        .await
        .expect("completed");
    assert_eq!(rule.num_calls(), 1);
}

#[tokio::test]
async fn a_failed_completion_says_which_instance_and_why() {
    let rule = mock!(Client::complete_lifecycle_action)
        .then_error(|| {
            aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionError::unhandled(
                "No active Lifecycle Action found with instance ID i-0abc",
            )
        });
    let client = mock_client!(aws_sdk_autoscaling, [&rule]);
    let err = asg::complete(&client, "demo-workers", &action(HookResult::Abandon))
        .await
        .unwrap_err();
    assert!(err.contains("i-0abc") && err.contains("ABANDON"), "{err}");
    assert!(err.contains("No active Lifecycle Action"), "{err}");
}

#[tokio::test]
async fn a_heartbeat_names_the_group_hook_and_instance() {
    let rule = mock!(Client::record_lifecycle_action_heartbeat)
        .match_requests(|r| {
            r.auto_scaling_group_name() == Some("demo-workers")
                && r.lifecycle_hook_name() == Some("demo-terminating")
                && r.instance_id() == Some("i-0abc")
        })
        .then_output(|| RecordLifecycleActionHeartbeatOutput::builder().build());
    let client = mock_client!(aws_sdk_autoscaling, [&rule]);
    asg::heartbeat(&client, "demo-workers", "i-0abc", "demo-terminating")
        .await
        .expect("heartbeat");
    assert_eq!(rule.num_calls(), 1);
}

const ELASTIC: &str = "demo-aws-dl-cfn-elastic-worker";
const HEARTBEAT: Millis = 60_000;
const PREPARE_TIMEOUT: Millis = 600_000;

fn group_rules() -> Rules {
    Rules {
        elastic_tag: ELASTIC.into(),
        worker_tags: BTreeMap::from([("NodeType".into(), "Worker".into())]),
        launch_template_id: None,
        auto_scaling_group: Some("demo-workers".into()),
        min: 0,
        max: 4,
        base_hosts: Vec::new(),
        master: None,
        slots: Slots::All(1),
        ack_timeout_ms: 600_000,
        rebalance: dt::config::Rebalance::Drain,
        max_prepare_failures: 5,
        prepare_timeout_ms: PREPARE_TIMEOUT,
        scheduled_change_lead_ms: 3_600_000,
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
        instances: Ok(vec![instance]),
        markers: Ok(Markers::default()),
        acks: Ok(Acks::default()),
        notices: Vec::new(),
        group: Some(Ok(group)),
        resume_requested: None,
        mount_targets: None,
    }
}

/// The daemon's passes, decide then act, against a mocked group API: the held worker's hook is
/// heartbeated until the prepare timeout, then completed with ABANDON and never heartbeated again.
#[tokio::test]
async fn a_worker_that_never_reports_is_abandoned_at_the_prepare_timeout_and_heartbeats_stop() {
    let beat = mock!(Client::record_lifecycle_action_heartbeat)
        .match_requests(|r| {
            r.auto_scaling_group_name() == Some("demo-workers")
                && r.lifecycle_hook_name() == Some("demo-launching")
                && r.instance_id() == Some("i-0abc")
        })
        .then_output(|| RecordLifecycleActionHeartbeatOutput::builder().build());
    let abandon = mock!(Client::complete_lifecycle_action)
        .match_requests(|r| {
            r.auto_scaling_group_name() == Some("demo-workers")
                && r.lifecycle_hook_name() == Some("demo-launching")
                && r.instance_id() == Some("i-0abc")
                && r.lifecycle_action_result() == Some("ABANDON")
        })
        .then_output(|| CompleteLifecycleActionOutput::builder().build());
    let other_completion = mock!(Client::complete_lifecycle_action)
        .then_output(|| CompleteLifecycleActionOutput::builder().build());
    let client = mock_client!(
        aws_sdk_autoscaling,
        RuleMode::MatchAny,
        [&beat, &abandon, &other_completion]
    );
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
            assert_eq!(abandon.num_calls(), 0, "abandoned early, at {now} ms");
        } else if beats_before.is_none() {
            assert_eq!(abandon.num_calls(), 1, "not abandoned at the timeout");
            let kinds: Vec<&str> = plan
                .outcome
                .events
                .iter()
                .map(|e| e.kind.as_str())
                .collect();
            assert_eq!(kinds, ["prepare_never_reported"]);
            beats_before = Some(beat.num_calls());
        }
        state = plan.state;
    }
    // Half a heartbeat timeout apart over the 10 minutes before the timeout.
    assert_eq!(
        beats_before,
        Some((PREPARE_TIMEOUT / (HEARTBEAT / 2) - 1) as usize)
    );
    assert_eq!(
        Some(beat.num_calls()),
        beats_before,
        "RecordLifecycleActionHeartbeat after ABANDON"
    );
    assert_eq!(
        other_completion.num_calls(),
        0,
        "completed otherwise than with ABANDON"
    );
    assert!(abandon.num_calls() >= 1);
}
