//! The security groups: who may reach the master, the workers and the file system's mount targets,
//! and which group each launch template puts its instances in.

use std::collections::BTreeMap;

use super::support::{aws_json, launch_data, master_group, template, STACK};
use crate::support::Moto;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

/// The security group tagged `Name` = `name`: its id and its ingress rules.
pub(super) fn security_group(moto: &Moto, name: &str) -> (String, Vec<Json>) {
    let found = aws_json(
        moto,
        &[
            "ec2",
            "describe-security-groups",
            "--filters",
            &format!("Name=tag:Name,Values={name}"),
        ],
    );
    let [group] = found["SecurityGroups"].as_array().unwrap().as_slice() else {
        panic!("one group named {name}: {found}");
    };
    let id = group["GroupId"].as_str().unwrap().to_string();
    (id, group["IpPermissions"].as_array().unwrap().clone())
}

/// The groups a rule lets in, with its protocol and ports.
pub(super) fn sources(rules: &[Json]) -> Vec<(String, String, Option<i64>, Option<i64>)> {
    let mut all: Vec<_> = (rules.iter())
        .flat_map(|r| {
            let pairs = r["UserIdGroupPairs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            pairs.into_iter().map(move |p| {
                let group = p["GroupId"].as_str().unwrap_or_default().to_string();
                let proto = r["IpProtocol"].as_str().unwrap_or_default().to_string();
                (group, proto, r["FromPort"].as_i64(), r["ToPort"].as_i64())
            })
        })
        .collect();
    all.sort();
    all
}

/// Workers talk to workers and take the master's calls freely; the master takes from workers
/// only the job's TCP ports (no ssh, nothing privileged) and the agents' reports on 7719; the
/// file system NFS from both.
pub fn check_security_groups(moto: &Moto, out: &BTreeMap<String, String>) {
    let (master, master_in) = security_group(moto, &format!("{STACK}-master"));
    let (workers, workers_in) = security_group(moto, &format!("{STACK}-workers"));
    let all = |g: &str| (g.to_string(), "-1".to_string(), None, None);
    let mut want = vec![all(&master), all(&workers)];
    want.sort();
    assert_eq!(sources(&workers_in), want);
    let job = (workers.clone(), "tcp".to_string(), Some(1024), Some(65535));
    let reports = (workers.clone(), "tcp".to_string(), Some(7719), Some(7719));
    assert_eq!(sources(&master_in), [job, reports]);
    check_reports_rule(&master_in);
    let master_lt = &master_group(moto, out)["LaunchTemplate"]["LaunchTemplateId"];
    let data = launch_data(moto, master_lt.as_str().unwrap());
    assert_eq!(data["SecurityGroupIds"], serde_json::json!([master]));
    let worker = launch_data(moto, &out["WorkerLaunchTemplateId"]);
    let nic = &worker["NetworkInterfaces"][0];
    assert_eq!(nic["Groups"], serde_json::json!([workers]));
    let by_description = serde_json::json!([{
        "Name": "description",
        "Values": ["dynamic-training EFS mount targets, NFS from the nodes only"]
    }]);
    let fs = aws_json(
        moto,
        &[
            "ec2",
            "describe-security-groups",
            "--filters",
            &by_description.to_string(),
        ],
    );
    let nfs = sources(fs["SecurityGroups"][0]["IpPermissions"].as_array().unwrap());
    let mut want = vec![
        (master, "tcp".to_string(), Some(2049), Some(2049)),
        (workers, "tcp".to_string(), Some(2049), Some(2049)),
    ];
    want.sort();
    assert_eq!(nfs, want);
}

/// The agents' reports' rule is the stack's `MasterIngressReports` and says what it is for, in
/// the characters EC2 takes in a rule's description (no apostrophe).
fn check_reports_rule(master_in: &[Json]) {
    assert!(
        master_in.iter().any(|r| r["FromPort"] == 7719),
        "{master_in:?}"
    );
    // Stand-in: moto keeps no description of a rule a stack creates; it is the template's.
    let t = template();
    let rule = &t["Resources"]["MasterIngressReports"]["Properties"];
    assert_eq!(rule["Description"], Yaml::from("dtd agents reports"));
    let allowed = |c: char| c.is_ascii_alphanumeric() || " ._-:/()#,@[]+=;{}!$*".contains(c);
    assert!(rule["Description"].as_str().unwrap().chars().all(allowed));
}
