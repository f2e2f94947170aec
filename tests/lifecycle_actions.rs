//! CompleteLifecycleAction and RecordLifecycleActionHeartbeat, which moto does not implement:
//! tested at the client boundary with the SDK's own mocking crate (aws-smithy-mocks) standing in
//! for the Auto Scaling API. Everything else about groups runs against moto (tests/groups.rs).

use aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionOutput;
use aws_sdk_autoscaling::operation::record_lifecycle_action_heartbeat::RecordLifecycleActionHeartbeatOutput;
use aws_sdk_autoscaling::Client;
use aws_smithy_mocks::{mock, mock_client};

use dt::act::asg;
use dt::model::HookAction;

fn action(result: &'static str) -> HookAction {
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
    asg::complete(&client, "demo-workers", &action("CONTINUE"))
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
    let err = asg::complete(&client, "demo-workers", &action("ABANDON"))
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
