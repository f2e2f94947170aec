//! The nodes' IAM policies as IAM gives them back, read statement by statement, and the SDK calls
//! of src/ they are checked against.

use std::path::Path;

use super::support::aws_json;
use crate::support::{repo, Moto};
use serde_json::Value as Json;

/// The role of an instance profile.
pub fn role_of(moto: &Moto, profile_arn: &str) -> String {
    let profile_name = profile_arn.rsplit('/').next().unwrap();
    let profile = aws_json(
        moto,
        &[
            "iam",
            "get-instance-profile",
            "--instance-profile-name",
            profile_name,
        ],
    );
    profile["InstanceProfile"]["Roles"][0]["RoleName"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The inline policy of the role behind an instance profile ARN, from IAM.
pub fn role_policy(moto: &Moto, profile_arn: &str) -> Json {
    let role = role_of(moto, profile_arn);
    let names = aws_json(moto, &["iam", "list-role-policies", "--role-name", &role]);
    // Every inline policy of the role, as one policy.
    let mut statements = Vec::new();
    for name in names["PolicyNames"].as_array().unwrap() {
        let doc = aws_json(
            moto,
            &[
                "iam",
                "get-role-policy",
                "--role-name",
                &role,
                "--policy-name",
                name.as_str().unwrap(),
            ],
        );
        let doc = match &doc["PolicyDocument"] {
            // moto keeps a policy that CloudFormation created as Python's repr of the document
            // (single quotes); this one has no quote inside a value, so swapping them gives JSON.
            Json::String(s) => serde_json::from_str(s)
                .or_else(|_| serde_json::from_str(&s.replace('\'', "\"")))
                .unwrap_or_else(|e| panic!("policy of {role}: {e}: {s}")),
            other => other.clone(),
        };
        statements.extend(doc["Statement"].as_array().unwrap().iter().cloned());
    }
    serde_json::json!({ "Statement": statements })
}

/// Actions the code calls: every `.snake_case()` SDK call in src/, by its IAM name.
pub fn called_in_src() -> Vec<String> {
    fn walk(dir: &Path, out: &mut String) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut text = String::new();
    walk(&repo().join("src"), &mut text);
    text.split('.')
        .filter_map(|w| w.split_once("()").map(|(name, _)| name))
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(|n| {
            n.split('_')
                .map(|p| p[..1].to_uppercase() + &p[1..])
                .collect()
        })
        .collect()
}

pub fn statement<'a>(policy: &'a Json, sid: &str) -> &'a Json {
    policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == sid)
        .unwrap_or_else(|| panic!("no statement {sid}: {policy}"))
}

pub fn actions(s: &Json) -> Vec<String> {
    match &s["Action"] {
        Json::String(a) => vec![a.clone()],
        Json::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
        _ => vec![],
    }
}
