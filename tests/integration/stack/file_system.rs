//! The stack's file system: encrypted, a mount target in each worker zone, the workers' access
//! point, and its policy (TLS only, the master in full, the workers through an access point).

use std::collections::BTreeMap;

use super::support::{access_point, aws, aws_json, template};
use crate::support::Moto;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

pub fn check_file_system(moto: &Moto, out: &BTreeMap<String, String>) {
    let fs = aws_json(
        moto,
        &[
            "efs",
            "describe-file-systems",
            "--file-system-id",
            &out["FileSystemId"],
        ],
    );
    assert_eq!(fs["FileSystems"][0]["Encrypted"], true);
    let targets = aws_json(
        moto,
        &[
            "efs",
            "describe-mount-targets",
            "--file-system-id",
            &out["FileSystemId"],
        ],
    );
    let mut azs: Vec<&str> = targets["MountTargets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["AvailabilityZoneName"].as_str())
        .collect();
    azs.sort();
    azs.dedup();
    assert_eq!(azs.len(), 2, "a mount target in each worker AZ: {targets}");

    // The workers' access point: a non-root POSIX user, at the file system's root.
    let ap = access_point(moto, &out["FileSystemId"]);
    let uid = ap["PosixUser"]["Uid"].as_i64().unwrap();
    assert!(
        uid > 0 && ap["PosixUser"]["Gid"].as_i64().unwrap() > 0,
        "{ap}"
    );
    assert_eq!(ap["RootDirectory"]["Path"], "/");
    check_file_system_policy(moto, out);
}

/// Stand-in: moto's CloudFormation ignores FileSystemPolicy. The template's policy, checked
/// as written, then put on the emulator's file system with the stack's values filled in.
fn check_file_system_policy(moto: &Moto, out: &BTreeMap<String, String>) {
    let t = template();
    let policy = &t["Resources"]["FileSystem"]["Properties"]["FileSystemPolicy"];
    let sts = policy["Statement"].as_sequence().unwrap();
    let sid = |name: &str| {
        sts.iter()
            .find(|s| s["Sid"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let tls = sid("DenyWithoutTls");
    assert_eq!(tls["Effect"], Yaml::from("Deny"));
    assert_eq!(
        tls["Condition"]["Bool"]["aws:SecureTransport"],
        Yaml::from("false")
    );
    let master = sid("MasterFullAccess");
    let worker = sid("WorkersThroughAnAccessPoint");
    let acts = |s: &Yaml| -> Vec<String> {
        s["Action"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    assert!(acts(master).contains(&"elasticfilesystem:ClientRootAccess".into()));
    assert!(!acts(worker).contains(&"elasticfilesystem:ClientRootAccess".into()));
    assert!(matches!(
        worker["Condition"]["ArnLike"]["elasticfilesystem:AccessPointArn"],
        Yaml::Tagged(_)
    ));
    for (s, role) in [(master, "MasterRole"), (worker, "WorkerRole")] {
        let Yaml::Tagged(getatt) = &s["Principal"]["AWS"] else {
            panic!("{role}: {s:?}")
        };
        assert_eq!(getatt.value, Yaml::from(format!("{role}.Arn")));
    }
    assert_eq!(sts.len(), 3, "nobody else is allowed in");
    put_file_system_policy(moto, out, acts(master), acts(worker));
}

/// The template's policy with the roles' ARNs, on the emulator's file system and read back.
fn put_file_system_policy(
    moto: &Moto,
    out: &BTreeMap<String, String>,
    master_actions: Vec<String>,
    worker_actions: Vec<String>,
) {
    let role_arn = |kind: &str| {
        let roles = aws_json(moto, &["iam", "list-roles"]);
        roles["Roles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["RoleName"].as_str().unwrap().contains(kind))
            .unwrap()["Arn"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let rendered = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            { "Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": { "AWS": "*" },
              "Action": "*", "Resource": "*",
              "Condition": { "Bool": { "aws:SecureTransport": "false" } } },
            { "Sid": "MasterFullAccess", "Effect": "Allow",
              "Principal": { "AWS": role_arn("MasterRole") }, "Action": master_actions,
              "Resource": "*" },
            { "Sid": "WorkersThroughAnAccessPoint", "Effect": "Allow",
              "Principal": { "AWS": role_arn("WorkerRole") }, "Action": worker_actions,
              "Resource": "*",
              "Condition": { "ArnLike": { "elasticfilesystem:AccessPointArn":
                  "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/*" } } },
        ],
    });
    aws(
        moto,
        &[
            "efs",
            "put-file-system-policy",
            "--file-system-id",
            &out["FileSystemId"],
            "--policy",
            &rendered.to_string(),
        ],
    );
    let back = aws_json(
        moto,
        &[
            "efs",
            "describe-file-system-policy",
            "--file-system-id",
            &out["FileSystemId"],
        ],
    );
    let back: Json = serde_json::from_str(back["Policy"].as_str().unwrap()).unwrap();
    assert_eq!(
        back["Statement"].as_array().map(Vec::len),
        Some(3),
        "{back}"
    );
}
