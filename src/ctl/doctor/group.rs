//! The worker Auto Scaling group: it exists, it has both lifecycle hooks dtd completes (a new
//! worker waits in `Pending:Wait` until it joins; a leaving one in `Terminating:Wait` until the job
//! lets go), with timeouts dtd can keep alive, and Capacity Rebalance (a Spot worker at risk is
//! replaced before it is interrupted).

use std::time::Duration;

use aws_sdk_autoscaling::types::{AutoScalingGroup, LifecycleHook};

use super::template::Workers;
use super::{Check, Context, ReadFailed};
use crate::aws::describe_error;

const LAUNCHING: &str = "autoscaling:EC2_INSTANCE_LAUNCHING";
const TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";

const EXISTS: &str = "worker group";
const LAUNCH_HOOK: &str = "group: launching hook";
const TERMINATE_HOOK: &str = "group: terminating hook";
const REBALANCE: &str = "group: Capacity Rebalance";

pub struct GroupChecks {
    pub checks: Vec<Check>,
    pub workers: Workers,
}

pub async fn checks(cx: &Context<'_>) -> GroupChecks {
    let Some(name) = cx.cfg.workers.auto_scaling_group.as_deref() else {
        let none = "none configured (workers.auto_scaling_group)";
        return GroupChecks {
            checks: vec![Check::skip("group.exists", EXISTS, none)],
            workers: Workers::default(),
        };
    };
    let client = aws_sdk_autoscaling::Client::new(&cx.sdk);
    let group = match client
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
    {
        Ok(out) => out.auto_scaling_groups().first().cloned(),
        Err(e) => {
            return missing(
                name,
                format!("DescribeAutoScalingGroups failed: {}", describe_error(&e)),
            )
        }
    };
    let Some(group) = group else {
        return missing(name, format!("no Auto Scaling group named {name}"));
    };
    let hooks = match client
        .describe_lifecycle_hooks()
        .auto_scaling_group_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.lifecycle_hooks().to_vec()),
        Err(e) => Err(ReadFailed::LifecycleHooks(describe_error(&e))),
    };
    let detail = format!(
        "{name}: min {}, desired {}, max {}",
        group.min_size().unwrap_or(0),
        group.desired_capacity().unwrap_or(0),
        group.max_size().unwrap_or(0)
    );
    let least = least_heartbeat(cx);
    GroupChecks {
        checks: vec![
            Check::pass("group.exists", EXISTS, detail),
            hook(name, &hooks, LAUNCHING, least),
            hook(name, &hooks, TERMINATING, least),
            rebalance(name, &group),
        ],
        workers: Workers {
            subnets: subnets(&group),
            instance_types: override_types(&group),
            ..Workers::default()
        },
    }
}

fn missing(name: &str, detail: String) -> GroupChecks {
    let needs = "needs the worker group";
    GroupChecks {
        checks: vec![
            Check::fail(
                "group.exists",
                EXISTS,
                detail,
                format!("create {name} (the stack does) or fix workers.auto_scaling_group"),
            ),
            Check::skip("group.launching_hook", LAUNCH_HOOK, needs),
            Check::skip("group.terminating_hook", TERMINATE_HOOK, needs),
            Check::skip("group.capacity_rebalance", REBALANCE, needs),
        ],
        workers: Workers::default(),
    }
}

/// dtd sends a heartbeat when half a hook's timeout has passed; a timeout shorter than a few
/// passes (and AWS's retries) lets the hook expire between two passes.
fn least_heartbeat(cx: &Context<'_>) -> Duration {
    (cx.cfg.interval * 10).max(Duration::from_secs(60))
}

fn hook(
    group: &str,
    hooks: &Result<Vec<LifecycleHook>, ReadFailed>,
    transition: &str,
    least: Duration,
) -> Check {
    let (id, title, result) = match transition {
        LAUNCHING => ("group.launching_hook", LAUNCH_HOOK, "ABANDON"),
        _ => ("group.terminating_hook", TERMINATE_HOOK, "CONTINUE"),
    };
    let hooks = match hooks {
        Ok(h) => h,
        Err(e) => {
            return Check::fail(
                id,
                title,
                e.to_string(),
                "let dtd's role call autoscaling:DescribeLifecycleHooks",
            )
        }
    };
    let Some(h) = hooks
        .iter()
        .find(|h| h.lifecycle_transition() == Some(transition))
    else {
        return Check::fail(
            id,
            title,
            format!("{group} has no {transition} hook"),
            format!(
                "aws autoscaling put-lifecycle-hook --auto-scaling-group-name {group} \
                 --lifecycle-hook-name {group}-{} --lifecycle-transition {transition} \
                 --heartbeat-timeout {} --default-result {result}",
                if transition == LAUNCHING {
                    "launching"
                } else {
                    "terminating"
                },
                least.as_secs().max(600)
            ),
        );
    };
    let name = h.lifecycle_hook_name().unwrap_or("?");
    // AWS's default heartbeat timeout when a hook does not set one (API reference, PutLifecycleHook).
    let beat = Duration::from_secs(h.heartbeat_timeout().unwrap_or(3600).max(0) as u64);
    let detail = format!(
        "{name}: heartbeat timeout {}, default result {}",
        humantime::format_duration(beat),
        h.default_result().unwrap_or("?")
    );
    if beat < least {
        let fix = format!(
            "raise its heartbeat timeout to at least {} s (10 passes of `interval`, at least a \
             minute): aws autoscaling put-lifecycle-hook … --heartbeat-timeout",
            least.as_secs()
        );
        return Check::fail(id, title, format!("{detail}: too short"), fix);
    }
    if transition == LAUNCHING && h.default_result() != Some("ABANDON") {
        let fix = "set its default result to ABANDON, so a worker dtd never let join is not put \
                   in service by the timeout";
        return Check::fail(id, title, detail, fix);
    }
    Check::pass(id, title, detail)
}

fn rebalance(name: &str, group: &AutoScalingGroup) -> Check {
    let on = group.capacity_rebalance().unwrap_or(false);
    Check::verdict(
        "group.capacity_rebalance",
        REBALANCE,
        on,
        if on { "on" } else { "off" },
        || {
            format!(
                "aws autoscaling update-auto-scaling-group --auto-scaling-group-name {name} \
                 --capacity-rebalance (a Spot worker at elevated risk is replaced before its \
                 interruption)"
            )
        },
    )
}

/// The instance types a mixed instances policy may launch (its launch template's overrides).
fn override_types(group: &AutoScalingGroup) -> std::collections::BTreeSet<String> {
    let policy = group.mixed_instances_policy();
    let template = policy.and_then(|p| p.launch_template());
    (template.map(|t| t.overrides()).unwrap_or_default().iter())
        .filter_map(|o| o.instance_type().map(str::to_string))
        .collect()
}

fn subnets(group: &AutoScalingGroup) -> std::collections::BTreeSet<String> {
    (group.vpc_zone_identifier().unwrap_or("").split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}
