//! The workers' Auto Scaling group: its size, Spot allocation, instance types and tag, then what
//! moto's CloudFormation drops (Capacity Rebalance, the lifecycle hooks), read from the template.

use std::collections::BTreeMap;

use super::support::{aws, aws_json, resource, tags_of, template, untag, STACK};
use crate::support::Moto;
use serde_yaml::Value as Yaml;

pub fn check_worker_group(moto: &Moto, out: &BTreeMap<String, String>) {
    let groups = aws_json(
        moto,
        &[
            "autoscaling",
            "describe-auto-scaling-groups",
            "--auto-scaling-group-names",
            &out["WorkerGroup"],
        ],
    );
    let g = &groups["AutoScalingGroups"][0];
    assert_eq!(g["AutoScalingGroupName"], format!("{STACK}-workers"));
    assert_eq!(
        (g["MinSize"].as_i64(), g["MaxSize"].as_i64()),
        (Some(0), Some(4))
    );
    let policy = &g["MixedInstancesPolicy"];
    assert_eq!(
        policy["InstancesDistribution"]["SpotAllocationStrategy"], "price-capacity-optimized",
        "{g}"
    );
    let lt = &policy["LaunchTemplate"]["LaunchTemplateSpecification"]["LaunchTemplateId"];
    assert_eq!(lt, out["WorkerLaunchTemplateId"].as_str());
    let types: Vec<&str> = policy["LaunchTemplate"]["Overrides"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["InstanceType"].as_str())
        .collect();
    assert_eq!(types, ["g5.xlarge", "g6.xlarge", "g4dn.xlarge"]);
    assert_eq!(
        tags_of(&g["Tags"]).get("dt:cluster").map(String::as_str),
        Some(STACK)
    );
    check_rebalance_and_hooks(moto, out);
}

/// Not created by moto's CloudFormation (it ignores these properties): read from the template.
fn check_rebalance_and_hooks(moto: &Moto, out: &BTreeMap<String, String>) {
    let t = template();
    let props = resource(&t, "WorkerGroup");
    assert_eq!(props["CapacityRebalance"], Yaml::Bool(true));
    let hooks = props["LifecycleHookSpecificationList"]
        .as_sequence()
        .unwrap();
    let spec: Vec<(String, &str, &str)> = hooks
        .iter()
        .map(|h| {
            (
                untag(&h["LifecycleHookName"])
                    .as_str()
                    .unwrap()
                    .replace("${AWS::StackName}", STACK),
                h["LifecycleTransition"].as_str().unwrap(),
                h["DefaultResult"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        spec,
        [
            (
                format!("{STACK}-launching"),
                "autoscaling:EC2_INSTANCE_LAUNCHING",
                "ABANDON"
            ),
            (
                format!("{STACK}-terminating"),
                "autoscaling:EC2_INSTANCE_TERMINATING",
                "CONTINUE"
            ),
        ]
    );
    // Stand-in for CloudFormation: the hooks as the template declares them, so the group
    // looks as it does on AWS to dtd (which finds them with DescribeLifecycleHooks).
    for (name, transition, result) in &spec {
        aws(
            moto,
            &[
                "autoscaling",
                "put-lifecycle-hook",
                "--auto-scaling-group-name",
                &out["WorkerGroup"],
                "--lifecycle-hook-name",
                name,
                "--lifecycle-transition",
                transition,
                "--default-result",
                result,
            ],
        );
    }
    let hooks = aws_json(
        moto,
        &[
            "autoscaling",
            "describe-lifecycle-hooks",
            "--auto-scaling-group-name",
            &out["WorkerGroup"],
        ],
    );
    assert_eq!(hooks["LifecycleHooks"].as_array().map(Vec::len), Some(2));
}
