//! The worker group's actions: scale-in protection, terminating a drained worker, detaching a
//! warned one so that the group replaces it at once, completing and heartbeating lifecycle
//! actions.

use aws_sdk_autoscaling::Client;

use crate::aws::AwsError;
use crate::model::{HookAction, HookResult};

/// SetInstanceProtection takes at most 50 instances per call.
const PROTECT_BATCH: usize = 50;

/// Which call to the group failed, for which instance, and AWS's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupActionError {
    #[error("SetInstanceProtection: {0}")]
    Protect(AwsError),
    #[error("TerminateInstanceInAutoScalingGroup {id}: {why}")]
    Terminate { id: String, why: AwsError },
    #[error("DetachInstances {id}: {why}")]
    Detach { id: String, why: AwsError },
    #[error("SetInstanceHealth {id} Unhealthy: {why}")]
    SetUnhealthy { id: String, why: AwsError },
    #[error("CompleteLifecycleAction {id} {result}: {why}")]
    Complete {
        id: String,
        result: HookResult,
        why: AwsError,
    },
    #[error("RecordLifecycleActionHeartbeat {id}: {why}")]
    Heartbeat { id: String, why: AwsError },
}

pub async fn protect(client: &Client, group: &str, ids: &[String]) -> Result<(), GroupActionError> {
    for chunk in ids.chunks(PROTECT_BATCH) {
        client
            .set_instance_protection()
            .auto_scaling_group_name(group)
            .set_instance_ids(Some(chunk.to_vec()))
            .protected_from_scale_in(true)
            .send()
            .await
            .map_err(|e| GroupActionError::Protect(AwsError::of(&e)))?;
    }
    Ok(())
}

pub async fn terminate(client: &Client, id: &str, decrement: bool) -> Result<(), GroupActionError> {
    client
        .terminate_instance_in_auto_scaling_group()
        .instance_id(id)
        .should_decrement_desired_capacity(decrement)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| GroupActionError::Terminate {
            id: id.to_string(),
            why: AwsError::of(&e),
        })
}

/// DetachInstances without lowering the desired capacity: the group launches a replacement at
/// once, and the detached instance runs on outside it ("Detach or attach instances from your
/// Auto Scaling group", Amazon EC2 Auto Scaling User Guide).
pub async fn detach(client: &Client, group: &str, id: &str) -> Result<(), GroupActionError> {
    client
        .detach_instances()
        .auto_scaling_group_name(group)
        .instance_ids(id)
        .should_decrement_desired_capacity(false)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| GroupActionError::Detach {
            id: id.to_string(),
            why: AwsError::of(&e),
        })
}

/// SetInstanceHealth Unhealthy, without the health check grace period: the group terminates
/// the instance and launches a replacement ("Set the health status of an instance", Amazon EC2
/// Auto Scaling User Guide).
pub async fn set_unhealthy(client: &Client, id: &str) -> Result<(), GroupActionError> {
    client
        .set_instance_health()
        .instance_id(id)
        .health_status("Unhealthy")
        .should_respect_grace_period(false)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| GroupActionError::SetUnhealthy {
            id: id.to_string(),
            why: AwsError::of(&e),
        })
}

pub async fn complete(
    client: &Client,
    group: &str,
    a: &HookAction,
) -> Result<(), GroupActionError> {
    client
        .complete_lifecycle_action()
        .auto_scaling_group_name(group)
        .lifecycle_hook_name(&a.hook)
        .instance_id(&a.instance)
        .lifecycle_action_result(a.result.as_str())
        .send()
        .await
        .map(|_| ())
        .map_err(|e| GroupActionError::Complete {
            id: a.instance.clone(),
            result: a.result,
            why: AwsError::of(&e),
        })
}

pub async fn heartbeat(
    client: &Client,
    group: &str,
    id: &str,
    hook: &str,
) -> Result<(), GroupActionError> {
    client
        .record_lifecycle_action_heartbeat()
        .auto_scaling_group_name(group)
        .lifecycle_hook_name(hook)
        .instance_id(id)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| GroupActionError::Heartbeat {
            id: id.to_string(),
            why: AwsError::of(&e),
        })
}

/// Completes the plan's lifecycle actions, then records its heartbeats. Returns the instances
/// whose completion the group accepted, and the errors.
pub async fn apply_hooks(
    client: &Client,
    group: &str,
    complete_hooks: &[HookAction],
    heartbeats: &[(String, String)],
) -> (Vec<String>, Vec<GroupActionError>) {
    let (mut done, mut errors) = (Vec::new(), Vec::new());
    for a in complete_hooks {
        match complete(client, group, a).await {
            Ok(()) => {
                tracing::info!(instance = %a.instance, hook = %a.hook, "lifecycle action completed: {}", a.result);
                done.push(a.instance.clone());
            }
            Err(e) => errors.push(e),
        }
    }
    for (id, hook) in heartbeats {
        if let Err(e) = heartbeat(client, group, id, hook).await {
            errors.push(e);
        }
    }
    (done, errors)
}
