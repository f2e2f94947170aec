//! The stack deployed into moto's CloudFormation as docs/deploy.md deploys it (`aws
//! cloudformation deploy --s3-bucket`: the CLI uploads the template to S3 and the stack is made
//! from its URL, the template being over the 51,200 bytes a request may carry), and its outputs.

use std::collections::BTreeMap;

use super::support::{aws, aws_json, template_path, STACK, WEBHOOK_SECRET};
use crate::support::{aws_cli_with, Moto};

/// The bucket docs/deploy.md's `--s3-bucket` names, in the emulator.
pub const TEMPLATE_BUCKET: &str = "dt-templates";

/// Every stack parameter the test sets: docs/deploy.md's command plus the emulator's AMI.
pub fn parameter_overrides() -> Vec<String> {
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

/// `KEY=VALUE` overrides as `create-stack`'s and `update-stack`'s `--parameters`, in JSON: the
/// CLI's shorthand would split a value at its commas (TrainingScript's arguments).
pub fn parameters(overrides: &[String]) -> String {
    let all: Vec<_> = (overrides.iter())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("KEY=VALUE");
            serde_json::json!({ "ParameterKey": k, "ParameterValue": v })
        })
        .collect();
    serde_json::Value::from(all).to_string()
}

/// Stand-in: moto's CloudFormation reads a TemplateURL's bucket from its path only when the URL
/// says `localhost`, else from its host name (AWS's virtual-hosted form), and the CLI writes a
/// path-style URL on its S3 endpoint: so the CLI's S3 calls go to the same emulator, on
/// loopback, as `localhost`.
fn s3_endpoint(moto: &Moto) -> String {
    moto.endpoint().replace("127.0.0.1", "localhost")
}

pub fn make_bucket(moto: &Moto) {
    aws(
        moto,
        &["s3api", "create-bucket", "--bucket", TEMPLATE_BUCKET],
    );
}

pub fn deploy(moto: &Moto) {
    make_bucket(moto);
    let template = template_path().display().to_string();
    let overrides = parameter_overrides();
    let mut args = vec![
        "cloudformation",
        "deploy",
        "--stack-name",
        STACK,
        "--template-file",
        &template,
        "--s3-bucket",
        TEMPLATE_BUCKET,
        "--capabilities",
        "CAPABILITY_IAM",
        "--parameter-overrides",
    ];
    args.extend(overrides.iter().map(String::as_str));
    let s3 = [("AWS_ENDPOINT_URL_S3", s3_endpoint(moto))];
    aws_cli_with(&moto.endpoint(), &s3, &args);

    // What the CLI uploaded: the template, whole.
    let listed = aws_json(
        moto,
        &["s3api", "list-objects-v2", "--bucket", TEMPLATE_BUCKET],
    );
    let [object] = listed["Contents"].as_array().expect("uploaded").as_slice() else {
        panic!("one object: {listed}");
    };
    let size = std::fs::metadata(&template).unwrap().len();
    assert_eq!(object["Size"].as_u64(), Some(size), "{object}");
    let url = format!(
        "{}/{TEMPLATE_BUCKET}/{}",
        s3_endpoint(moto),
        object["Key"].as_str().unwrap()
    );

    // Stand-in: moto builds a change-set stack's outputs from the empty template it starts
    // with and never rebuilds them; an update with the same template and parameters (which
    // changes no resource in moto) makes it evaluate them. AWS fills them in on deploy.
    let params = parameters(&overrides);
    aws(
        moto,
        &[
            "cloudformation",
            "update-stack",
            "--stack-name",
            STACK,
            "--template-url",
            &url,
            "--capabilities",
            "CAPABILITY_IAM",
            "--parameters",
            &params,
        ],
    );
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
