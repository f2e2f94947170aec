//! The stack deployed into moto's CloudFormation as docs/deploy.md deploys it, and its outputs.

use std::collections::BTreeMap;

use super::support::{aws, aws_json, template_path, STACK, WEBHOOK_SECRET};
use crate::support::Moto;

/// Every stack parameter the test sets: docs/deploy.md's command plus the emulator's AMI.
fn parameter_overrides() -> Vec<String> {
    vec![
        // Stand-in: moto has neither the public Deep Learning AMI parameter nor EC2's
        // `resolve:ssm:` lookup, so the stack's ImageId parameter pins one of moto's AMIs.
        "ImageId=ami-12c6146b".into(),
        "DtdReleaseUrl=https://releases.example.invalid/dynamic-training.tar.gz".into(),
        format!("DtdReleaseSha256={}", "ab".repeat(32)),
        "WorkerInitial=1".into(),
        "WorkerMin=0".into(),
        "WorkerMax=4".into(),
        format!("AlertWebhookSecret={WEBHOOK_SECRET}"),
    ]
}

pub fn deploy(moto: &Moto) {
    let template = template_path().display().to_string();
    let overrides = parameter_overrides();
    let mut args = vec![
        "cloudformation",
        "deploy",
        "--stack-name",
        STACK,
        "--template-file",
        &template,
        "--capabilities",
        "CAPABILITY_IAM",
        "--parameter-overrides",
    ];
    args.extend(overrides.iter().map(String::as_str));
    aws(moto, &args);

    // Stand-in: moto builds a change-set stack's outputs from the empty template it starts
    // with and never rebuilds them; an update with the same template and parameters (which
    // changes no resource in moto) makes it evaluate them. AWS fills them in on deploy.
    let body = format!("file://{template}");
    let params: Vec<String> = overrides
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("KEY=VALUE");
            format!("ParameterKey={k},ParameterValue={v}")
        })
        .collect();
    let mut args = vec![
        "cloudformation",
        "update-stack",
        "--stack-name",
        STACK,
        "--template-body",
        &body,
        "--capabilities",
        "CAPABILITY_IAM",
        "--parameters",
    ];
    args.extend(params.iter().map(String::as_str));
    aws(moto, &args);
}

pub fn outputs(moto: &Moto) -> BTreeMap<String, String> {
    let stacks = aws_json(
        moto,
        &["cloudformation", "describe-stacks", "--stack-name", STACK],
    );
    let stack = &stacks["Stacks"][0];
    assert!(
        stack["StackStatus"]
            .as_str()
            .is_some_and(|s| s.ends_with("_COMPLETE") && !s.contains("ROLLBACK")),
        "{stack}"
    );
    stack["Outputs"]
        .as_array()
        .unwrap_or_else(|| panic!("no outputs: an Fn::GetAtt moto lacks drops them all: {stack}"))
        .iter()
        .map(|o| {
            (
                o["OutputKey"].as_str().unwrap().to_string(),
                o["OutputValue"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
