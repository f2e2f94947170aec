//! The nodes' IAM roles: each gets only what its side of dtd calls. The worker: Session Manager
//! and the file system through its access point, no EC2 action. The master: Session Manager, the
//! webhook's secret, tags and terminations of this cluster's instances, its own group's actions,
//! launches from the worker template only, and no action that nothing in src/ calls.

use std::collections::BTreeMap;

use super::policies::{actions, called_in_src, role_of, role_policy, statement};
use super::support::{
    access_point, aws_json, launch_data, master_group, moto_access_point_ref, ELASTIC_KEY, STACK,
    WEBHOOK_SECRET,
};
use crate::support::Moto;
use serde_json::Value as Json;

/// Session Manager's own five actions, not AmazonSSMManagedInstanceCore (which reads every
/// SSM parameter): on both roles, and no managed policy at all.
const SESSION: [&str; 5] = [
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
];

pub fn check_iam(moto: &Moto, out: &BTreeMap<String, String>) {
    let ap = access_point(moto, &out["FileSystemId"]);
    let worker_profile = profile_of(moto, &out["WorkerLaunchTemplateId"]);
    let worker = policy_of(moto, &worker_profile, &ap);
    check_worker_sessions(moto, &worker);
    check_worker_file_system(&worker, &ap);

    let master_lt = master_group(moto, out)["LaunchTemplate"]["LaunchTemplateId"]
        .as_str()
        .unwrap()
        .to_string();
    let master_profile = profile_of(moto, &master_lt);
    let master = policy_of(moto, &master_profile, &ap);
    assert_eq!(actions(statement(&master, "SessionManager")), SESSION);
    check_no_managed_policy(moto, [master_profile, worker_profile]);
    check_webhook_secret(&master);
    check_cluster_conditions(&master);
    check_group_actions(&master, out);
    check_run_instances(&master, out);
    check_instance_types(&master);
    check_image_parameter(&master);
    check_every_action_is_called(&master);
    check_queue_and_reads(&master);
}

/// The instance profile of a launch template.
fn profile_of(moto: &Moto, lt_id: &str) -> String {
    let profile = &launch_data(moto, lt_id)["IamInstanceProfile"]["Arn"];
    profile.as_str().unwrap().to_string()
}

/// The role's policy, with the access point's id where moto puts its repr (support.rs).
fn policy_of(moto: &Moto, profile_arn: &str, ap: &Json) -> Json {
    let ap_id = ap["AccessPointId"].as_str().unwrap();
    let p = role_policy(moto, profile_arn);
    serde_json::from_str::<Json>(&moto_access_point_ref(&p.to_string(), ap_id)).unwrap()
}

/// Session Manager's actions, for this stack's instances only, and in the stack's own network
/// only from behind its NAT gateway: the roles' credentials used outside the VPC fail.
fn check_worker_sessions(moto: &Moto, worker: &Json) {
    let sessions = statement(worker, "SessionManager");
    assert_eq!(actions(sessions), SESSION);
    let nat = aws_json(moto, &["ec2", "describe-nat-gateways"]);
    let [gateway] = nat["NatGateways"].as_array().unwrap().as_slice() else {
        panic!("one NAT gateway: {nat}");
    };
    let public = gateway["NatGatewayAddresses"][0]["PublicIp"]
        .as_str()
        .unwrap();
    assert_eq!(
        sessions["Condition"]["IpAddress"]["aws:SourceIp"],
        format!("{public}/32").as_str(),
        "only from behind the stack's NAT gateway"
    );
    assert_eq!(
        sessions["Condition"]["StringEqualsIfExists"]["aws:ResourceTag/dt:cluster"], STACK,
        "only this stack's instances register with Systems Manager"
    );
    let keys: Vec<&String> = (sessions["Condition"].as_object().unwrap().values())
        .flat_map(|op| op.as_object().unwrap().keys())
        .collect();
    assert_eq!(keys.len(), 2, "no other condition: {keys:?}");
}

/// Of the file system, a worker has the client actions, through its access point only; and no
/// other action at all but Session Manager's (no EC2 tag: `dtd` takes no key from one).
fn check_worker_file_system(worker: &Json, ap: &Json) {
    let all: Vec<String> = worker["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["Sid"] != "SessionManager")
        .flat_map(actions)
        .collect();
    assert!(
        all.iter()
            .all(|a| a.starts_with("elasticfilesystem:Client")),
        "{all:?}"
    );
    let ap_arn = ap["AccessPointArn"].as_str().unwrap().to_string();
    let mount = statement(worker, "MountThroughAccessPoint");
    assert!(!actions(mount).contains(&"elasticfilesystem:ClientRootAccess".to_string()));
    assert_eq!(
        mount["Condition"]["ArnEquals"]["elasticfilesystem:AccessPointArn"],
        ap_arn.as_str()
    );
    let deny = statement(worker, "NoOtherWayIn");
    assert_eq!(deny["Effect"], "Deny");
    assert_eq!(
        deny["Condition"]["ArnNotEquals"]["elasticfilesystem:AccessPointArn"],
        ap_arn.as_str()
    );
}

fn check_no_managed_policy(moto: &Moto, profiles: [String; 2]) {
    for profile in profiles {
        let role = role_of(moto, &profile);
        let attached = aws_json(
            moto,
            &["iam", "list-attached-role-policies", "--role-name", &role],
        );
        assert_eq!(
            attached["AttachedPolicies"],
            serde_json::json!([]),
            "{role}"
        );
    }
}

/// The alerts' webhook secret: the master reads that one secret; the workers none.
fn check_webhook_secret(master: &Json) {
    let secret = statement(master, "ReadWebhookSecret");
    assert_eq!(actions(secret), ["secretsmanager:GetSecretValue"]);
    assert_eq!(secret["Resource"], WEBHOOK_SECRET);
}

/// Tags and terminations only on this cluster's instances, and only the keys dtd writes.
fn check_cluster_conditions(master: &Json) {
    for sid in [
        "StatusTagOnClusterInstances",
        "ElasticTagRemovalOnClusterInstances",
        "TerminateClusterInstances",
    ] {
        let s = statement(master, sid);
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:ResourceTag/dt:cluster"], STACK,
            "{sid} is limited to this cluster's resources"
        );
    }
    assert_eq!(
        statement(master, "StatusTagOnClusterInstances")["Condition"]["ForAllValues:StringEquals"]
            ["aws:TagKeys"],
        serde_json::json!(["elastic_worker_status"])
    );
    let delete_tags = &statement(master, "ElasticTagRemovalOnClusterInstances")["Condition"];
    assert_eq!(
        delete_tags["ForAllValues:StringEquals"]["aws:TagKeys"],
        serde_json::json!([ELASTIC_KEY])
    );
    // ForAllValues also holds for a call with no tag keys, which deletes every tag.
    assert_eq!(delete_tags["Null"]["aws:TagKeys"], "false");
}

/// Group actions on the worker group only; the master group only marks itself Unhealthy.
fn check_group_actions(master: &Json, out: &BTreeMap<String, String>) {
    let group_arn = |name: &str| {
        format!("arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/{name}")
    };
    let workers = statement(master, "ClusterWorkerGroup");
    assert_eq!(workers["Resource"], group_arn(&out["WorkerGroup"]).as_str());
    let replace = statement(master, "ReplaceThisMaster");
    assert_eq!(actions(replace), ["autoscaling:SetInstanceHealth"]);
    assert_eq!(replace["Resource"], group_arn(&out["MasterGroup"]).as_str());
    for s in master["Statement"].as_array().unwrap() {
        if actions(s)
            .iter()
            .any(|a| a.starts_with("autoscaling:") && !a.contains(":Describe"))
        {
            assert!(
                s["Resource"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("arn:")),
                "{s}"
            );
        }
    }
}

/// RunInstances: from the worker template, nothing overridden, the stack's instance types.
fn check_run_instances(master: &Json, out: &BTreeMap<String, String>) {
    let lt_arn = format!(
        "arn:aws:ec2:us-east-1:123456789012:launch-template/{}",
        out["WorkerLaunchTemplateId"]
    );
    for s in master["Statement"].as_array().unwrap() {
        if actions(s) != ["ec2:RunInstances"] || s["Resource"] == lt_arn.as_str() {
            continue;
        }
        assert_eq!(
            s["Condition"]["ArnEquals"]["ec2:LaunchTemplate"],
            lt_arn.as_str(),
            "{s}"
        );
        assert_eq!(
            s["Condition"]["Bool"]["ec2:IsLaunchTemplateResource"], "true",
            "{s}"
        );
    }
}

/// Only the statement that binds the instance types names instances: another one with
/// instance/* (or "*") would let any type through.
fn check_instance_types(master: &Json) {
    for s in master["Statement"].as_array().unwrap() {
        if actions(s) == ["ec2:RunInstances"] && s["Sid"] != "LaunchWorkerInstance" {
            let resources: Vec<&str> = match &s["Resource"] {
                Json::Array(all) => all.iter().filter_map(Json::as_str).collect(),
                one => vec![one.as_str().unwrap()],
            };
            assert!(
                resources
                    .iter()
                    .all(|r| *r != "*" && !r.contains(":instance/")),
                "{s}"
            );
        }
    }
    let instance = statement(master, "LaunchWorkerInstance");
    assert!(instance["Resource"]
        .as_str()
        .unwrap()
        .ends_with(":instance/*"));
    assert_eq!(
        instance["Condition"]["StringEquals"]["ec2:InstanceType"],
        serde_json::json!(["g5.xlarge", "g6.xlarge", "g4dn.xlarge"])
    );
}

/// resolve:ssm: needs ssm:GetParameters on the AMI parameter (a public one: no account).
fn check_image_parameter(master: &Json) {
    let ssm = statement(master, "ReadImageParameter");
    assert_eq!(actions(ssm), ["ssm:GetParameters"]);
    assert!(ssm["Resource"].as_array().unwrap().iter().any(|r| r
        == "arn:aws:ssm:us-east-1::parameter/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"));
}

/// No action that nothing calls: each is an SDK call in src/, or named here with its caller.
fn check_every_action_is_called(master: &Json) {
    let called = called_in_src();
    let elsewhere = [
        // Needed by RunInstances itself, and by EC2's resolve:ssm: at launch.
        "iam:PassRole",
        "ssm:GetParameters",
        // The mount (amazon-efs-utils, iam option) and dt-replace-master (master.sh).
        "elasticfilesystem:ClientMount",
        "elasticfilesystem:ClientWrite",
        "elasticfilesystem:ClientRootAccess",
        "autoscaling:SetInstanceHealth",
        // DeleteMessageBatch is authorized as sqs:DeleteMessage.
        "sqs:DeleteMessage",
        // The SSM agent (Session Manager), and the master's bootstrap (dt_webhook).
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
        "secretsmanager:GetSecretValue",
        // dtctl doctor (being written): read-only.
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "events:ListRuleNamesByTarget",
        "events:DescribeRule",
        "events:ListTargetsByRule",
        "sqs:GetQueueAttributes",
        "elasticfilesystem:DescribeFileSystems",
        "elasticfilesystem:DescribeMountTargets",
        "elasticfilesystem:DescribeMountTargetSecurityGroups",
        "elasticfilesystem:DescribeFileSystemPolicy",
        "elasticfilesystem:DescribeAccessPoints",
    ];
    for s in master["Statement"].as_array().unwrap() {
        for a in actions(s) {
            let name = a.split_once(':').unwrap().1;
            assert!(
                elsewhere.contains(&a.as_str()) || called.iter().any(|c| c == name),
                "{a} is granted but nothing in src/ calls it"
            );
        }
    }
}

/// The master reads its own queue; unconditional on any resource are only Describe and List.
fn check_queue_and_reads(master: &Json) {
    let read = statement(master, "ReadEventQueue");
    assert!(read["Resource"]
        .as_str()
        .unwrap()
        .ends_with(&format!(":{STACK}-events")));
    assert!(actions(read).contains(&"sqs:ReceiveMessage".to_string()));
    for s in master["Statement"].as_array().unwrap() {
        if s["Resource"] == "*" && s["Condition"].is_null() {
            assert!(
                actions(s)
                    .iter()
                    .all(|a| a.contains(":Describe") || a.contains(":List")),
                "only Describe and List calls are unconditional: {s}"
            );
        }
    }
}
