//! The worker Auto Scaling group: capacity, each instance's lifecycle state and scale-in
//! protection (DescribeAutoScalingGroups), and the hooks dtd completes (DescribeLifecycleHooks).

use aws_sdk_autoscaling::Client;

use crate::aws::AwsError;
use crate::model::{Group, GroupMember, Hook, LifecycleState};

const LAUNCHING: &str = "autoscaling:EC2_INSTANCE_LAUNCHING";
const TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";
/// AWS's default when a hook does not say.
const DEFAULT_HEARTBEAT_S: i32 = 3600;

/// Why the worker group could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("DescribeAutoScalingGroups {name}: {why}")]
    Describe { name: String, why: AwsError },
    #[error("Auto Scaling group {0} not found")]
    NotFound(String),
    #[error("DescribeLifecycleHooks {name}: {why}")]
    Hooks { name: String, why: AwsError },
}

pub async fn read_group(client: &Client, name: &str) -> Result<Group, GroupError> {
    let out = client
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
        .map_err(|e| GroupError::Describe {
            name: name.to_string(),
            why: AwsError::of(&e),
        })?;
    let g = (out.auto_scaling_groups().first())
        .ok_or_else(|| GroupError::NotFound(name.to_string()))?;
    let size = |n: Option<i32>| n.unwrap_or(0).max(0) as usize;
    let mut group = Group {
        name: name.to_string(),
        min: size(g.min_size()),
        desired: size(g.desired_capacity()),
        max: size(g.max_size()),
        ..Group::default()
    };
    for i in g.instances() {
        let Some(id) = i.instance_id() else { continue };
        let member = GroupMember {
            lifecycle_state: i
                .lifecycle_state()
                .cloned()
                .unwrap_or(LifecycleState::from("")),
            protected: i.protected_from_scale_in().unwrap_or(false),
        };
        group.instances.insert(id.to_string(), member);
    }
    read_hooks(client, &mut group).await?;
    Ok(group)
}

async fn read_hooks(client: &Client, group: &mut Group) -> Result<(), GroupError> {
    let out = client
        .describe_lifecycle_hooks()
        .auto_scaling_group_name(&group.name)
        .send()
        .await
        .map_err(|e| GroupError::Hooks {
            name: group.name.clone(),
            why: AwsError::of(&e),
        })?;
    for h in out.lifecycle_hooks() {
        let Some(name) = h.lifecycle_hook_name() else {
            continue;
        };
        let beat = h.heartbeat_timeout().unwrap_or(DEFAULT_HEARTBEAT_S).max(1);
        let hook = Hook {
            name: name.to_string(),
            heartbeat_timeout_ms: beat as u64 * 1000,
        };
        match h.lifecycle_transition() {
            Some(LAUNCHING) => group.launching_hook = Some(hook),
            Some(TERMINATING) => group.terminating_hook = Some(hook),
            _ => {}
        }
    }
    Ok(())
}

/// Reads the worker group when it is due, or when the last read failed.
pub async fn read_when_due(
    group: &mut Option<Result<Group, GroupError>>,
    due: &mut bool,
    cfg: &crate::config::Config,
    clients: &crate::aws::Clients,
) {
    let wanted = *due || matches!(group, Some(Err(_)));
    let name = cfg.workers.auto_scaling_group.as_deref();
    if let (true, Some((name, client))) = (wanted, name.zip(clients.autoscaling.as_ref())) {
        *group = Some(read_group(client, name).await);
        *due = false;
    }
}
