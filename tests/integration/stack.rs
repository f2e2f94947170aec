//! The CloudFormation stack, deployed into the emulator's CloudFormation (moto) with
//! `aws cloudformation deploy`, checked resource by resource, and then used: `dtd run` with the
//! config the stack generates, a worker launched from the stack's launch template with the AWS
//! CLI, its prepare-data step, and the worker joining.
//!
//! Stand-ins, each named where it is used: moto's CloudFormation does not create
//! `AWS::SQS::QueuePolicy`, ignores the group's `LifecycleHookSpecificationList` and
//! `CapacityRebalance`, and leaves a change-set-created stack without outputs; EC2's
//! `resolve:ssm:` AMI lookup does not exist in moto, so the stack's own `ImageId` parameter pins
//! an emulator AMI.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

const STACK: &str = "dtstack";
const ELASTIC_KEY: &str = "dtstack-aws-dl-cfn-elastic-worker";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn template_path() -> PathBuf {
    repo().join("cloudformation/dynamic-training.yaml")
}

/// The AWS CLI against the emulator; stdout, or a panic with stderr.
fn aws(moto: &Moto, args: &[&str]) -> String {
    aws_cli(&moto.endpoint(), args)
}

fn aws_json(moto: &Moto, args: &[&str]) -> Json {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--output", "json"]);
    let text = aws(moto, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("aws {args:?}: {e}: {text}"))
}

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

/// The Secrets Manager secret the stack is given for the alerts' webhook URL.
const WEBHOOK_SECRET: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:dt-webhook-AbCdEf";

/// The configuration a node's user data writes to /etc/dt/dtd.yaml.
fn config_in(user_data: &str) -> String {
    let start = "(umask 077 && cat >/etc/dt/dtd.yaml.new) <<'DT_CONFIG_END'\n";
    let at = user_data
        .find(start)
        .expect("the user data writes dtd.yaml, root's only")
        + start.len();
    let end = user_data[at..]
        .find("\nDT_CONFIG_END")
        .expect("the config's end");
    format!("{}\n", &user_data[at..at + end])
}

/// The master's Auto Scaling group, as EC2 Auto Scaling describes it.
fn master_group(moto: &Moto, out: &BTreeMap<String, String>) -> Json {
    let groups = aws_json(
        moto,
        &[
            "autoscaling",
            "describe-auto-scaling-groups",
            "--auto-scaling-group-names",
            &out["MasterGroup"],
        ],
    );
    groups["AutoScalingGroups"][0].clone()
}

/// A launch template's (only) version.
fn launch_version(moto: &Moto, lt_id: &str) -> Json {
    let versions = aws_json(
        moto,
        &[
            "ec2",
            "describe-launch-template-versions",
            "--launch-template-id",
            lt_id,
        ],
    );
    versions["LaunchTemplateVersions"][0].clone()
}

/// The `LaunchTemplateData` of a launch template's (only) version.
fn launch_data(moto: &Moto, lt_id: &str) -> Json {
    launch_version(moto, lt_id)["LaunchTemplateData"].clone()
}

/// The master's launch template's user data.
fn master_user_data(moto: &Moto, out: &BTreeMap<String, String>) -> String {
    let lt = &master_group(moto, out)["LaunchTemplate"]["LaunchTemplateId"];
    let data = launch_data(moto, lt.as_str().unwrap());
    decode_base64(data["UserData"].as_str().unwrap())
}

fn deploy(moto: &Moto) {
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

fn outputs(moto: &Moto) -> BTreeMap<String, String> {
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

fn tags_of(list: &Json) -> BTreeMap<String, String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    (
                        t["Key"].as_str().unwrap_or_default().to_string(),
                        t["Value"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The template itself, for what moto's CloudFormation does not create (`!Tags` become
/// `Yaml::Tagged`).
fn template() -> Yaml {
    let text = std::fs::read_to_string(template_path()).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn untag(v: &Yaml) -> &Yaml {
    match v {
        Yaml::Tagged(t) => &t.value,
        other => other,
    }
}

fn resource<'a>(t: &'a Yaml, name: &str) -> &'a Yaml {
    &t["Resources"][name]["Properties"]
}

fn check_launch_template(moto: &Moto, out: &BTreeMap<String, String>) {
    let version = &launch_version(moto, &out["WorkerLaunchTemplateId"]);
    assert_eq!(
        version["LaunchTemplateName"],
        out["WorkerLaunchTemplateName"].as_str()
    );
    let data = &version["LaunchTemplateData"];
    assert_eq!(data["MetadataOptions"]["HttpTokens"], "required", "IMDSv2");
    // Nothing reads tags from IMDS, and enabled it fails launches for some tag keys.
    assert_eq!(data["MetadataOptions"]["InstanceMetadataTags"], "disabled");
    let specs = data["TagSpecifications"].as_array().expect("tag specs");
    for kind in ["instance", "volume"] {
        let spec = specs
            .iter()
            .find(|s| s["ResourceType"] == kind)
            .unwrap_or_else(|| panic!("no {kind} tags: {data}"));
        let tags = tags_of(&spec["Tags"]);
        assert_eq!(tags["NodeType"], "Worker", "{kind}");
        assert_eq!(tags["dt:cluster"], STACK, "{kind}");
    }
    let instance = specs
        .iter()
        .find(|s| s["ResourceType"] == "instance")
        .unwrap();
    assert!(tags_of(&instance["Tags"]).contains_key(ELASTIC_KEY));

    // The user data is templates/user-data/node.sh, rendered for the worker role.
    let ap = access_point(moto, &out["FileSystemId"]);
    let ap_id = ap["AccessPointId"].as_str().unwrap();
    let user_data = decode_base64(data["UserData"].as_str().expect("user data"));
    let user_data = moto_access_point_ref(&user_data, ap_id);
    let source = std::fs::read_to_string(repo().join("templates/user-data/node.sh")).unwrap();
    assert_embedded(&user_data, &source);
    // The release's unit, filled in: `dtd agent` (tests/python/test_units.py verifies the unit).
    assert!(user_data.contains("s/@ROLE@/agent/"), "{user_data}");
    // Workers mount through the access point (amazon-efs-utils' accesspoint= option).
    assert!(
        user_data.contains(&format!(
            "{}:/ /myEFSvolume efs _netdev,noresvport,tls,iam,accesspoint={ap_id} 0 0",
            out["FileSystemId"]
        )),
        "{}",
        user_data
            .lines()
            .find(|l| l.contains("efs _netdev"))
            .unwrap_or_default()
    );
    assert!(!user_data.contains("cfn-signal"), "only the master signals");
    let config = config_in(&user_data);
    assert!(!user_data.contains("${"), "every variable is substituted");
    // The alerts' webhook is the master's alone: no worker holds it or can read its secret.
    assert!(
        config.contains("\n# alerts: on the master only\n"),
        "{config}"
    );
    assert!(!user_data.contains("secretsmanager") && !user_data.contains(WEBHOOK_SECRET));
    // GpuHealthCheck defaults to true: the release's default check is installed and configured.
    assert!(user_data.contains("\"$workdir/gpu_health.py\" /usr/local/bin/"));
    assert!(
        config.contains("\n  health: { command: [/usr/local/bin/gpu_health.py] }\n"),
        "{config}"
    );
    // With GpuHealthCheck=false the line is the template's other branch, a YAML comment.
    let without = config.replace(
        "health: { command: [/usr/local/bin/gpu_health.py] }",
        "# no GpuHealthCheck",
    );
    // TrainingScript defaults to blank: the launcher line is a comment; set, it is job.launcher.
    let off = "\n  # launcher: { torchrun: [/opt/pytorch/bin/torchrun], script: [], \
               strategy: generation, env: { PYTHONPATH: /usr/local/lib/dt } }\n";
    assert!(config.contains(off), "{config}");
    let on = "\n  launcher: { torchrun: [/opt/pytorch/bin/torchrun], \
              script: [/myEFSvolume/job/train.py,--epochs,90,--lr=0.1], \
              strategy: generation, env: { PYTHONPATH: /usr/local/lib/dt } }\n";
    let with_launcher = without
        .replace(off, on)
        .replace("\n  # owner: 50000\n", "\n  owner: 50000\n");
    assert!(config.contains("\n  # owner: 50000\n"), "{config}");
    // The release's files are installed: the unit filled in, the torchrun helper beside, the
    // man pages and dtctl's bash completion (scripts/release checks the archive holds them).
    assert!(user_data.contains("/usr/local/lib/dt/dt_torch.py"));
    assert!(user_data.contains("-t /usr/local/share/man/man1 \"$workdir\"/man/*.1\n"));
    assert!(
        user_data.contains("\"$workdir/completions/dtctl.bash\" /etc/bash_completion.d/dtctl\n")
    );
    let dir = tempfile::tempdir().unwrap();
    // TorchrunStrategy=elastic.
    let elastic = with_launcher.replace("strategy: generation", "strategy: elastic");
    for (name, body) in [
        ("dtd.yaml", without),
        ("launcher.yaml", with_launcher),
        ("elastic.yaml", elastic),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let check = dtctl(
            moto,
            &path,
            &["config", "check", &path.display().to_string()],
        );
        assert!(
            check.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    bash_syntax_ok(&user_data);
}

/// Every line of a templates/ source without a stack variable is in the rendered copy, except
/// the comment-only lines of a shell script, which scripts/sync-stack leaves out.
fn assert_embedded(rendered: &str, source: &str) {
    for line in source.lines().filter(|l| !l.contains("${")) {
        let t = line.trim_start();
        if t.starts_with('#') && !t.starts_with("#!") {
            assert!(!rendered.contains(line), "comment kept: {line:?}");
            continue;
        }
        assert!(rendered.contains(line), "user data lacks {line:?}");
    }
}

/// Stand-in: moto's `Ref` to an `AWS::EFS::AccessPoint` gives the Python repr of its object
/// (`<moto.efs.models.AccessPoint object at 0x...>`), where AWS gives the access point's id (and
/// moto has no `Fn::GetAtt` for it at all); this puts the id where AWS would.
fn moto_access_point_ref(text: &str, ap_id: &str) -> String {
    const REPR: &str = "<moto.efs.models.AccessPoint object at 0x";
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(REPR) {
        out.push_str(&rest[..i]);
        out.push_str(ap_id);
        let end = rest[i..].find('>').expect("repr ends with >");
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    out
}

/// The workers' access point of the stack's file system.
fn access_point(moto: &Moto, fs: &str) -> Json {
    let aps = aws_json(
        moto,
        &["efs", "describe-access-points", "--file-system-id", fs],
    );
    let all = aps["AccessPoints"].as_array().unwrap();
    assert_eq!(all.len(), 1, "{aps}");
    all[0].clone()
}

/// `bash -n`: the rendered user data parses as the script it claims to be.
fn bash_syntax_ok(script: &str) {
    use std::io::Write;
    let mut child = Command::new("bash")
        .args(["-n", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "user data: {}", stderr(&out));
}

fn check_master(moto: &Moto, out: &BTreeMap<String, String>) {
    let g = &master_group(moto, out);
    assert_eq!(
        (g["MinSize"].as_i64(), g["MaxSize"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(g["Instances"].as_array().map(Vec::len), Some(1), "{g}");
    let lt = &g["LaunchTemplate"]["LaunchTemplateId"];
    let data = &launch_data(moto, lt.as_str().unwrap());
    assert_eq!(data["MetadataOptions"]["HttpTokens"], "required");
    assert_eq!(data["MetadataOptions"]["InstanceMetadataTags"], "disabled");
    let user_data = decode_base64(data["UserData"].as_str().unwrap());
    assert!(user_data.starts_with("#!/bin/bash\n"));
    for source in ["master.sh", "node.sh"] {
        let text = std::fs::read_to_string(repo().join("templates/user-data").join(source));
        assert_embedded(&user_data, &text.unwrap());
    }
    assert!(user_data.contains("s/@ROLE@/run/"), "{user_data}");
    // The webhook's URL is read from Secrets Manager into a file only root reads, which the
    // master's config names; the secret's value is in no config.
    let config = config_in(&user_data);
    assert!(
        config.contains("\nalerts: [{ webhook_file: /etc/dt/webhook, events: ["),
        "{config}"
    );
    assert!(user_data.contains(&format!("local n arn='{WEBHOOK_SECRET}'")));
    // The master mounts the root, as root, and makes it group-writable (sticky) for the gid the
    // workers' access point enforces.
    assert!(user_data.contains(&format!(
        "{}:/ /myEFSvolume efs _netdev,noresvport,tls,iam 0 0",
        out["FileSystemId"]
    )));
    let ap = access_point(moto, &out["FileSystemId"]);
    let gid = ap["PosixUser"]["Gid"].as_i64().unwrap();
    assert!(user_data.contains(&format!("chown 0:{gid} /myEFSvolume\n")));
    assert!(user_data.contains("chmod 1775 /myEFSvolume\n"));
    // cfn-signal names the group that waits for it, success after dtd is up, failure on error.
    let signal =
        format!("--stack '{STACK}' \\\n        --resource MasterGroup --region 'us-east-1'");
    assert!(user_data.contains(&signal), "{user_data}");
    assert!(user_data.contains("trap 'on_error $LINENO' ERR"));
    assert!(user_data.contains("dt_failed() { dt_signal 1; }"));
    let started = user_data.find("hook started").unwrap();
    assert!(
        user_data
            .find("systemctl enable --now dtd.service")
            .unwrap()
            < started
    );
    assert!(user_data.contains("OnFailure=dt-replace-master.service"));
    assert!(user_data.contains(
        "aws autoscaling set-instance-health --instance-id \"$id\" --health-status Unhealthy"
    ));
    bash_syntax_ok(&user_data);

    // Stand-in: moto's CloudFormation does not wait for signals; the policy from the template.
    let t = template();
    let policy = &t["Resources"]["MasterGroup"]["CreationPolicy"]["ResourceSignal"];
    assert_eq!(policy["Count"], Yaml::from(1));
    assert_eq!(policy["Timeout"], Yaml::from("PT30M"));
}

fn check_worker_group(moto: &Moto, out: &BTreeMap<String, String>) {
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

    // Not created by moto's CloudFormation (it ignores these properties): read from the template.
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

fn check_events(moto: &Moto, out: &BTreeMap<String, String>) {
    // The CLI sends SQS calls to the queue URL's host unless told otherwise.
    let endpoint = moto.endpoint();
    let queue_arn = aws_json(
        moto,
        &[
            "--endpoint-url",
            &endpoint,
            "sqs",
            "get-queue-attributes",
            "--queue-url",
            &out["EventQueueUrl"],
            "--attribute-names",
            "QueueArn",
        ],
    )["Attributes"]["QueueArn"]
        .as_str()
        .unwrap()
        .to_string();
    let mut detail_types = Vec::new();
    for (rule, source) in [
        ("instance-events", "aws.ec2"),
        ("lifecycle-events", "aws.autoscaling"),
        ("health-events", "aws.health"),
        ("tag-events", "aws.tag"),
    ] {
        let name = format!("{STACK}-{rule}");
        let described = aws_json(moto, &["events", "describe-rule", "--name", &name]);
        assert_eq!(described["State"], "ENABLED");
        let pattern: Json =
            serde_json::from_str(described["EventPattern"].as_str().unwrap()).unwrap();
        assert_eq!(pattern["source"], serde_json::json!([source]));
        detail_types.extend(
            pattern["detail-type"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap().to_string()),
        );
        if source == "aws.health" {
            // Only EC2 scheduled changes: not issues, not other services.
            assert_eq!(pattern["detail"]["service"], serde_json::json!(["EC2"]));
            assert_eq!(
                pattern["detail"]["eventTypeCategory"],
                serde_json::json!(["scheduledChange"])
            );
        }
        if source == "aws.autoscaling" {
            assert_eq!(
                pattern["detail"]["AutoScalingGroupName"],
                serde_json::json!([out["WorkerGroup"]])
            );
        }
        if source == "aws.tag" {
            // Changes of the elastic tag on instances: not the status tag dtd writes itself.
            assert_eq!(
                pattern["detail"],
                serde_json::json!({
                    "service": ["ec2"],
                    "resource-type": ["instance"],
                    "changed-tag-keys": [elastic_tag()],
                })
            );
        }
        let targets = aws_json(moto, &["events", "list-targets-by-rule", "--rule", &name]);
        assert_eq!(targets["Targets"][0]["Arn"], queue_arn.as_str(), "{name}");
    }
    detail_types.sort();
    assert_eq!(
        detail_types,
        [
            "AWS Health Event",
            "Capacity Block Expiration Warning",
            "Capacity Block Reservation Expiration Warning",
            "EC2 Capacity Reservation Instance Interruption Warning",
            "EC2 Instance Rebalance Recommendation",
            "EC2 Instance State-change Notification",
            "EC2 Instance-launch Lifecycle Action",
            "EC2 Instance-terminate Lifecycle Action",
            "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
            "EC2 Spot Instance Interruption Warning",
            "Tag Change on Resource",
        ]
    );

    check_delivery(moto, out);
    check_published_events(moto, out);
    check_tag_changes(moto, out);

    // Not created by moto's CloudFormation: the queue policy, read from the template. Only
    // EventBridge may send, and only on behalf of this stack's four rules.
    let t = template();
    let policy = resource(&t, "EventQueuePolicy");
    let statement = &policy["PolicyDocument"]["Statement"][0];
    assert_eq!(
        statement["Principal"]["Service"].as_str(),
        Some("events.amazonaws.com")
    );
    assert_eq!(statement["Action"].as_str(), Some("sqs:SendMessage"));
    let sources: Vec<&str> = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| untag(s).as_str().unwrap())
        .collect();
    assert_eq!(
        sources,
        [
            "InstanceEventsRule.Arn",
            "LifecycleEventsRule.Arn",
            "HealthEventsRule.Arn",
            "TagEventsRule.Arn"
        ]
    );
    // Stand-in for CloudFormation: that policy on the queue, with the rules' ARNs, so the
    // queue looks as it does on AWS to `dtctl doctor`.
    let rules = [
        "instance-events",
        "lifecycle-events",
        "health-events",
        "tag-events",
    ];
    let rule_arns: Vec<String> = rules
        .iter()
        .map(|r| {
            let name = format!("{STACK}-{r}");
            aws_json(moto, &["events", "describe-rule", "--name", &name])["Arn"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let document = serde_json::json!({"Version": "2012-10-17", "Statement": [{
        "Sid": statement["Sid"].as_str(), "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
        "Resource": queue_arn, "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}}}]});
    let attributes = serde_json::json!({ "Policy": document.to_string() }).to_string();
    aws(
        moto,
        &[
            "sqs",
            "set-queue-attributes",
            "--queue-url",
            &out["EventQueueUrl"],
            "--attributes",
            &attributes,
        ],
    );
}

/// AWS's published samples (tests/fixtures/events/) put on the bus as the services would: the
/// deployed rules deliver exactly those dtd handles, and what arrives parses into the notice
/// the sample stands for.
fn check_published_events(moto: &Moto, out: &BTreeMap<String, String>) {
    use dt::model::NoticeKind;
    use dt::observe::eventbridge::{parse, Parsed};
    let taken = [
        (
            "spot-interruption-warning.json",
            Some(NoticeKind::Interruption),
        ),
        ("rebalance-recommendation.json", Some(NoticeKind::Rebalance)),
        ("instance-state-change.json", None),
        (
            "capacity-block-expiration-warning.json",
            Some(NoticeKind::CapacityBlockExpiring),
        ),
        (
            "capacity-block-reservation-expiration-warning.json",
            Some(NoticeKind::CapacityBlockExpiring),
        ),
        (
            "capacity-reservation-instance-interruption-warning.json",
            Some(NoticeKind::Interruption),
        ),
        (
            "interruptible-capacity-reservation-interruption-warning.json",
            Some(NoticeKind::Interruption),
        ),
        (
            "aws-health-ec2-scheduled-change.json",
            Some(NoticeKind::ScheduledChange),
        ),
    ];
    // Not for dtd: an EC2 Health issue, and the reservation owner's reclamation report.
    let foreign = [
        "aws-health-ec2-issue.json",
        "aws-health-planned-lifecycle-event.json",
        "interruptible-capacity-reservation-reclamation-complete.json",
    ];
    let names = taken.iter().map(|(n, _)| *n).chain(foreign);
    let entries: Vec<Json> = names
        .map(|n| fixtures::put_events_entry(&fixtures::filled(n)))
        .collect();
    put_events(moto, &entries);
    let mut got: Vec<(String, Option<NoticeKind>)> = drain_queue(moto, out)
        .iter()
        .map(|body| {
            let v: Json = serde_json::from_str(body).unwrap();
            let kind = match parse(body) {
                Parsed::Notices(n) => Some(n[0].kind),
                Parsed::Wake { .. } => None,
                Parsed::Ignored(why) => panic!("delivered but ignored ({why}): {body}"),
            };
            (fixtures::detail_type(&v), kind)
        })
        .collect();
    let mut expected: Vec<(String, Option<NoticeKind>)> = taken
        .iter()
        .map(|(n, k)| (fixtures::detail_type(&fixtures::filled(n)), *k))
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

/// The elastic tag's key on this stack's workers (its launch template's tag and dtd.yaml's
/// `workers.elastic_tag`).
fn elastic_tag() -> String {
    format!("{STACK}-aws-dl-cfn-elastic-worker")
}

/// AWS's Tag Change on Resource sample, put on the bus as the tagging service would: through
/// the stack's rule when the elastic tag was deleted (or put back), becoming a wake for that
/// instance; not for another tag of the instance (the status tag dtd writes among them), nor
/// for the elastic tag's key on a volume.
fn check_tag_changes(moto: &Moto, out: &BTreeMap<String, String>) {
    use dt::observe::eventbridge::{parse, Parsed};
    let sample = fixtures::filled("tag-change-on-resource.json");
    let with_keys = |keys: &[&str]| {
        let mut event = sample.clone();
        event["detail"]["changed-tag-keys"] = serde_json::json!(keys);
        event
    };
    // Deleted: the key changed and is no longer among the instance's tags.
    let deleted = with_keys(&[&elastic_tag()]);
    let mut on_volume = deleted.clone();
    on_volume["detail"]["resource-type"] = "volume".into();
    on_volume["resources"] =
        serde_json::json!(["arn:aws:ec2:us-east-1:123456789012:volume/vol-0000000aaaaaaaaaa"]);
    let entries: Vec<Json> = [
        deleted,
        with_keys(&["elastic_worker_status"]),
        with_keys(&["a-new-key", "an-updated-key", "a-deleted-key"]),
        on_volume,
    ]
    .iter()
    .map(fixtures::put_events_entry)
    .collect();
    put_events(moto, &entries);
    let delivered = drain_queue(moto, out);
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    let body: Json = serde_json::from_str(&delivered[0]).unwrap();
    assert_eq!(
        body["detail"]["changed-tag-keys"],
        serde_json::json!([elastic_tag()])
    );
    match parse(&delivered[0]) {
        Parsed::Wake { instances, .. } => assert_eq!(instances, ["i-0000000aaaaaaaaaa"]),
        other => panic!("expected a wake, got {other:?}: {}", delivered[0]),
    }
}

/// Every message the stack's queue holds now, deleted as read.
fn drain_queue(moto: &Moto, out: &BTreeMap<String, String>) -> Vec<String> {
    let endpoint = moto.endpoint();
    let url = out["EventQueueUrl"].as_str();
    let mut bodies = Vec::new();
    loop {
        let text = aws(
            moto,
            &[
                "--endpoint-url",
                &endpoint,
                "sqs",
                "receive-message",
                "--queue-url",
                url,
                "--max-number-of-messages",
                "10",
                "--wait-time-seconds",
                "1",
                "--output",
                "json",
            ],
        );
        let got: Json = serde_json::from_str(&text).unwrap_or(Json::Null);
        let Some(messages) = got["Messages"].as_array().filter(|m| !m.is_empty()) else {
            return bodies;
        };
        for m in messages {
            bodies.push(m["Body"].as_str().unwrap().to_string());
            let receipt = m["ReceiptHandle"].as_str().unwrap();
            let delete = [
                "--endpoint-url",
                &endpoint,
                "sqs",
                "delete-message",
                "--queue-url",
                url,
                "--receipt-handle",
                receipt,
            ];
            aws(moto, &delete);
        }
    }
}

/// Events as AWS would send them go through the rules to the queue; others do not.
fn check_delivery(moto: &Moto, out: &BTreeMap<String, String>) {
    let group = out["WorkerGroup"].as_str();
    let entry = |source: &str, detail_type: &str, detail: Json| {
        serde_json::json!({
            "Source": source,
            "DetailType": detail_type,
            "Detail": detail.to_string(),
        })
    };
    let instance = serde_json::json!({ "instance-id": "i-0123456789abcdef0" });
    let lifecycle = |g: &str| serde_json::json!({ "AutoScalingGroupName": g });
    let mut entries = vec![
        entry(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            instance.clone(),
        ),
        entry(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            instance.clone(),
        ),
        entry(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            instance.clone(),
        ),
        entry(
            "aws.ec2",
            "Capacity Block Expiration Warning",
            instance.clone(),
        ),
        entry(
            "aws.autoscaling",
            "EC2 Instance-launch Lifecycle Action",
            lifecycle(group),
        ),
        entry(
            "aws.autoscaling",
            "EC2 Instance-terminate Lifecycle Action",
            lifecycle(group),
        ),
    ];
    // Not for dtd: another group's lifecycle action, and an event type it does not handle.
    let others = [
        entry(
            "aws.autoscaling",
            "EC2 Instance-launch Lifecycle Action",
            lifecycle("other"),
        ),
        entry("aws.ec2", "EC2 AMI State Change", instance),
    ];
    let expected: Vec<String> = entries
        .iter()
        .map(|e| e["DetailType"].as_str().unwrap().to_string())
        .collect();
    entries.extend(others);
    put_events(moto, &entries);
    let mut delivered: Vec<String> = drain_queue(moto, out)
        .iter()
        .map(|b| {
            let body: Json = serde_json::from_str(b).unwrap();
            body["detail-type"].as_str().unwrap().to_string()
        })
        .collect();
    delivered.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(delivered, expected);
}

/// The inline policy of the role behind an instance profile ARN, from IAM.
/// The security group tagged `Name` = `name`: its id and its ingress rules.
fn security_group(moto: &Moto, name: &str) -> (String, Vec<Json>) {
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
fn sources(rules: &[Json]) -> Vec<(String, String, Option<i64>, Option<i64>)> {
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
/// only the job's TCP ports (no ssh, nothing privileged); the file system NFS from both.
fn check_security_groups(moto: &Moto, out: &BTreeMap<String, String>) {
    let (master, master_in) = security_group(moto, &format!("{STACK}-master"));
    let (workers, workers_in) = security_group(moto, &format!("{STACK}-workers"));
    let all = |g: &str| (g.to_string(), "-1".to_string(), None, None);
    let mut want = vec![all(&master), all(&workers)];
    want.sort();
    assert_eq!(sources(&workers_in), want);
    let job = (workers.clone(), "tcp".to_string(), Some(1024), Some(65535));
    assert_eq!(sources(&master_in), [job]);
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

/// The role of an instance profile.
fn role_of(moto: &Moto, profile_arn: &str) -> String {
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

fn role_policy(moto: &Moto, profile_arn: &str) -> Json {
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
fn called_in_src() -> Vec<String> {
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

fn statement<'a>(policy: &'a Json, sid: &str) -> &'a Json {
    policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == sid)
        .unwrap_or_else(|| panic!("no statement {sid}: {policy}"))
}

fn actions(s: &Json) -> Vec<String> {
    match &s["Action"] {
        Json::String(a) => vec![a.clone()],
        Json::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
        _ => vec![],
    }
}

fn check_iam(moto: &Moto, out: &BTreeMap<String, String>) {
    let lt = |id: &str| {
        let profile = &launch_data(moto, id)["IamInstanceProfile"]["Arn"];
        profile.as_str().unwrap().to_string()
    };
    let ap = access_point(moto, &out["FileSystemId"]);
    let ap_id = ap["AccessPointId"].as_str().unwrap();
    let fix = |p: Json| {
        serde_json::from_str::<Json>(&moto_access_point_ref(&p.to_string(), ap_id)).unwrap()
    };
    let worker = fix(role_policy(moto, &lt(&out["WorkerLaunchTemplateId"])));
    // Session Manager's own five actions, not AmazonSSMManagedInstanceCore (which reads every
    // SSM parameter): on both roles, and no managed policy at all.
    let session = [
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
    ];
    let sessions = statement(&worker, "SessionManager");
    assert_eq!(actions(sessions), session);
    assert_eq!(
        sessions["Condition"]["ArnLike"]["ec2:SourceInstanceARN"],
        "arn:aws:ec2:us-east-1:123456789012:instance/*",
        "the credentials work only from an instance"
    );
    assert_eq!(
        sessions["Condition"]["StringEqualsIfExists"]["aws:ResourceTag/dt:cluster"], STACK,
        "only this stack's instances register with Systems Manager"
    );
    // Of EC2, a worker may only put its agent's key on its own instance.
    let tag = statement(&worker, "TagItselfWithItsAgentKey");
    assert_eq!(actions(tag), ["ec2:CreateTags"]);
    assert_eq!(
        tag["Condition"]["StringEquals"]["aws:ARN"], "${ec2:SourceInstanceARN}",
        "its own instance only"
    );
    assert_eq!(
        tag["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"],
        serde_json::json!(["dt:agent-key"])
    );
    let all: Vec<String> = worker["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["Sid"] != "SessionManager" && s["Sid"] != "TagItselfWithItsAgentKey")
        .flat_map(actions)
        .collect();
    assert!(
        all.iter()
            .all(|a| a.starts_with("elasticfilesystem:Client")),
        "{all:?}"
    );
    let ap_arn = ap["AccessPointArn"].as_str().unwrap().to_string();
    let mount = statement(&worker, "MountThroughAccessPoint");
    assert!(!actions(mount).contains(&"elasticfilesystem:ClientRootAccess".to_string()));
    assert_eq!(
        mount["Condition"]["ArnEquals"]["elasticfilesystem:AccessPointArn"],
        ap_arn.as_str()
    );
    let deny = statement(&worker, "NoOtherWayIn");
    assert_eq!(deny["Effect"], "Deny");
    assert_eq!(
        deny["Condition"]["ArnNotEquals"]["elasticfilesystem:AccessPointArn"],
        ap_arn.as_str()
    );

    let master_lt = master_group(moto, out)["LaunchTemplate"]["LaunchTemplateId"]
        .as_str()
        .unwrap()
        .to_string();
    let master = fix(role_policy(moto, &lt(&master_lt)));
    assert_eq!(actions(statement(&master, "SessionManager")), session);
    for profile in [lt(&master_lt), lt(&out["WorkerLaunchTemplateId"])] {
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
    // The alerts' webhook secret: the master reads that one secret; the workers none.
    let secret = statement(&master, "ReadWebhookSecret");
    assert_eq!(actions(secret), ["secretsmanager:GetSecretValue"]);
    assert_eq!(secret["Resource"], WEBHOOK_SECRET);
    for sid in [
        "StatusTagOnClusterInstances",
        "ElasticTagRemovalOnClusterInstances",
        "TerminateClusterInstances",
    ] {
        let s = statement(&master, sid);
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:ResourceTag/dt:cluster"], STACK,
            "{sid} is limited to this cluster's resources"
        );
    }
    assert_eq!(
        statement(&master, "StatusTagOnClusterInstances")["Condition"]["ForAllValues:StringEquals"]
            ["aws:TagKeys"],
        serde_json::json!(["elastic_worker_status"])
    );
    let delete_tags = &statement(&master, "ElasticTagRemovalOnClusterInstances")["Condition"];
    assert_eq!(
        delete_tags["ForAllValues:StringEquals"]["aws:TagKeys"],
        serde_json::json!([ELASTIC_KEY])
    );
    // ForAllValues also holds for a call with no tag keys, which deletes every tag.
    assert_eq!(delete_tags["Null"]["aws:TagKeys"], "false");

    // Group actions on the worker group only; the master group only marks itself Unhealthy.
    let group_arn = |name: &str| {
        format!("arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/{name}")
    };
    let workers = statement(&master, "ClusterWorkerGroup");
    assert_eq!(workers["Resource"], group_arn(&out["WorkerGroup"]).as_str());
    let replace = statement(&master, "ReplaceThisMaster");
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

    // RunInstances: from the worker template, nothing overridden, the stack's instance types.
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
    // Only the statement that binds the instance types names instances: another one with
    // instance/* (or "*") would let any type through.
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
    let instance = statement(&master, "LaunchWorkerInstance");
    assert!(instance["Resource"]
        .as_str()
        .unwrap()
        .ends_with(":instance/*"));
    assert_eq!(
        instance["Condition"]["StringEquals"]["ec2:InstanceType"],
        serde_json::json!(["g5.xlarge", "g6.xlarge", "g4dn.xlarge"])
    );
    // resolve:ssm: needs ssm:GetParameters on the AMI parameter (a public one: no account).
    let ssm = statement(&master, "ReadImageParameter");
    assert_eq!(actions(ssm), ["ssm:GetParameters"]);
    assert!(ssm["Resource"].as_array().unwrap().iter().any(|r| r
        == "arn:aws:ssm:us-east-1::parameter/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"));

    // No action that nothing calls: each is an SDK call in src/, or named here with its caller.
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
    let read = statement(&master, "ReadEventQueue");
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

fn check_file_system(moto: &Moto, out: &BTreeMap<String, String>) {
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

    // Stand-in: moto's CloudFormation ignores FileSystemPolicy. The template's policy, checked
    // as written, then put on the emulator's file system with the stack's values filled in.
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
              "Principal": { "AWS": role_arn("MasterRole") }, "Action": acts(master),
              "Resource": "*" },
            { "Sid": "WorkersThroughAnAccessPoint", "Effect": "Allow",
              "Principal": { "AWS": role_arn("WorkerRole") }, "Action": acts(worker),
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

fn decode_base64(text: &str) -> String {
    let out = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("base64 -d");
    String::from_utf8(out.stdout).expect("UTF-8 user data")
}

fn write_config(moto: &Moto, out: &BTreeMap<String, String>, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let efs = dir.join("efs");
    std::fs::create_dir_all(&efs).unwrap();
    let master = config_in(&master_user_data(moto, out));
    let mut config = master.replace("/myEFSvolume", &efs.display().to_string());
    // What dt_webhook writes from the secret: root's, 0600. Nothing listens on the discard port.
    let webhook = dir.join("webhook");
    std::fs::write(&webhook, "https://127.0.0.1:9/services/T0/B0/SeCrEt\n").unwrap();
    std::fs::set_permissions(&webhook, std::fs::Permissions::from_mode(0o600)).unwrap();
    config = config.replace("/etc/dt/webhook", &webhook.display().to_string());
    // A third host file in a format of the user's own, from the shipped template.
    let horovod_line = format!(
        "  - {{ path: {}/hosts.horovod, format: horovod }}\n",
        efs.display()
    );
    assert!(config.contains(&horovod_line), "{config}");
    let template = repo().join("templates/hostfiles/openmpi.tmpl");
    config = config.replace(
        &horovod_line,
        &format!(
            "{horovod_line}  - {{ path: {}/hosts.openmpi, template: {} }}\n",
            efs.display(),
            template.display()
        ),
    );
    let path = dir.join("dtd.yaml");
    std::fs::write(&path, config).unwrap();
    path
}

/// PutEvents takes at most ten entries per call.
fn put_events(moto: &Moto, entries: &[Json]) {
    for chunk in entries.chunks(10) {
        let put = aws_json(
            moto,
            &[
                "events",
                "put-events",
                "--entries",
                &Json::from(chunk.to_vec()).to_string(),
            ],
        );
        assert_eq!(put["FailedEntryCount"], 0, "{put}");
    }
}

fn dtctl(moto: &Moto, config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dtctl"))
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(aws_env(&moto.endpoint()))
        .output()
        .expect("dtctl")
}

fn instance_tag(moto: &Moto, id: &str, key: &str) -> Option<String> {
    let d = aws_json(moto, &["ec2", "describe-instances", "--instance-ids", id]);
    tags_of(&d["Reservations"][0]["Instances"][0]["Tags"]).remove(key)
}

struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_stack_deploys_and_a_worker_from_its_template_joins() {
    let moto = Moto::start();
    deploy(&moto);
    let out = outputs(&moto);
    for key in [
        "MasterGroup",
        "WorkerLaunchTemplateId",
        "WorkerLaunchTemplateName",
        "WorkerGroup",
        "EventQueueUrl",
        "FileSystemId",
    ] {
        assert!(
            out.get(key).is_some_and(|v| !v.is_empty()),
            "output {key}: {out:?}"
        );
    }
    assert_eq!(out["WorkerLaunchTemplateName"], format!("{STACK}-worker"));
    check_launch_template(&moto, &out);
    check_master(&moto, &out);
    check_worker_group(&moto, &out);
    check_events(&moto, &out);
    check_iam(&moto, &out);
    check_security_groups(&moto, &out);
    check_file_system(&moto, &out);

    // The generated config, with the shared directory moved to a temp dir.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&moto, &out, dir.path());
    let check = dtctl(
        &moto,
        &config,
        &["config", "check", &config.display().to_string()],
    );
    assert!(check.status.success(), "{}", stderr(&check));
    let efs = dir.path().join("efs");
    // Stand-in for the EFS mount (this kernel has no NFS client): a tmpfs under the stack's file
    // system's DNS name, which is what the mount table shows on a node and doctor reads.
    let _mount = Mount::tmpfs(
        &efs,
        &format!("{}.efs.us-east-1.amazonaws.com:/", out["FileSystemId"]),
    );
    // What the master's bootstrap (dt_job_files) makes: the job's files, root's (no
    // TrainingScript), in job/run, beside the training script's directory only root writes.
    let job_dir = efs.join("job/run");
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::write(job_dir.join("ack"), "0\n").unwrap();

    let log = std::fs::File::create(dir.path().join("dtd.log")).unwrap();
    let _dtd = Daemon(
        Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["run", "--config"])
            .arg(&config)
            .envs(aws_env(&moto.endpoint()))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("dtd run"),
    );

    // The person at the console: a worker from the stack's launch template.
    let run = aws_json(
        &moto,
        &[
            "ec2",
            "run-instances",
            "--launch-template",
            &format!("LaunchTemplateId={}", out["WorkerLaunchTemplateId"]),
            "--count",
            "1",
        ],
    );
    let id = run["Instances"][0]["InstanceId"]
        .as_str()
        .unwrap()
        .to_string();
    let ip = run["Instances"][0]["PrivateIpAddress"]
        .as_str()
        .unwrap()
        .to_string();
    // As AWS would tell the stack's queue; dtd reads that instance rather than waiting for its
    // next complete listing (a minute away with an event queue).
    let states = ["pending", "running"].map(|s| fixtures::state_change_entry(&id, s));
    put_events(&moto, &states);
    let preparing = || instance_tag(&moto, &id, STATUS).as_deref() == Some("PREPARING");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !preparing() {
        let log = std::fs::read_to_string(dir.path().join("dtd.log")).unwrap_or_default();
        assert!(
            std::time::Instant::now() < deadline,
            "not PREPARING; dtd's log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Its `dtd agent`, with the stack's config and the example prepare-data script where the
    // stack's PrepareDataScriptPath puts it (root's, in a directory only root writes): it tags
    // its instance with its key, runs the script and signs the marker.
    let prepare = efs.join("prepare");
    std::fs::create_dir(&prepare).unwrap();
    let script = install("prepare-data/synthetic.py", &prepare, 0o755);
    std::fs::rename(&script, prepare.join("prepare-data.py")).unwrap();
    install("prepare-data/dtprepare.py", &prepare, 0o644);
    // The release's GPU check, over the STAND-IN nvidia-smi of tests/standins/bin describing one
    // GPU, as on the template's g5.xlarge.
    let check = install("templates/health/gpu_health.py", dir.path(), 0o755);
    let agent_config = dir.path().join("agent.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("/usr/local/bin/gpu_health.py"), "{text}");
    let text = text.replace("/usr/local/bin/gpu_health.py", &check.display().to_string());
    std::fs::write(&agent_config, text).unwrap();
    let node = dir.path().join("node.json");
    std::fs::write(&node, r#"{"gpus": 1}"#).unwrap();
    let path = format!(
        "{}:{}",
        repo().join("tests/standins/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let imds = crate::support::imds::ImdsStandIn::with_identity(&ip, &id);
    imds.set("instance-type", "g5.xlarge");
    let agent_log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
    let _agent = Daemon(
        Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["agent", "--config"])
            .arg(&agent_config)
            .arg("--key-file")
            .arg(dir.path().join("agent.key"))
            .envs(aws_env(&moto.endpoint()))
            .envs(imds.env())
            .env("PATH", path)
            .env("DT_STANDIN_NODE", &node)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(agent_log)
            .spawn()
            .expect("dtd agent"),
    );
    wait_until(
        "the agent's key on its instance",
        Duration::from_secs(30),
        || instance_tag(&moto, &id, dt::protocol::signed::KEY_TAG).is_some(),
    );

    // dtd writes the generation file after every host file.
    wait_until("generation 1", Duration::from_secs(30), || {
        std::fs::read_to_string(efs.join("generation")).is_ok_and(|g| g == "1\n")
    });
    let host_worker = std::fs::read_to_string(efs.join("host_worker")).unwrap();
    assert!(host_worker.lines().any(|l| l == ip), "{host_worker}");
    let horovod = std::fs::read_to_string(efs.join("hosts.horovod")).unwrap();
    assert!(horovod.lines().any(|l| l == format!("{ip}:1")), "{horovod}");
    let openmpi = std::fs::read_to_string(efs.join("hosts.openmpi")).unwrap();
    assert!(
        openmpi.starts_with("# Open MPI hostfile written by dtd"),
        "{openmpi}"
    );
    assert!(
        openmpi
            .lines()
            .any(|l| l == format!("{ip} slots=1 max_slots=1")),
        "{openmpi}"
    );
    // The job acknowledges in the 2018 form, in the log the generated config names.
    std::fs::write(
        job_dir.join("host_worker_log"),
        format!("1 ADDED {ip} 2026-11-23 02:00:00\n"),
    )
    .unwrap();
    wait_until("the worker to be ADDED", Duration::from_secs(30), || {
        instance_tag(&moto, &id, STATUS).as_deref() == Some("ADDED")
    });
    let status = dtctl(&moto, &config, &["status"]);
    assert!(
        stdout(&status).contains(&format!("Cluster:     {STACK}")),
        "{}",
        stdout(&status)
    );
    check_doctor(&moto, &config);
}

/// `dtctl doctor` on the deployed stack: every check passes but Capacity Rebalance, which the
/// template sets (check_worker_group) and moto's CloudFormation drops; moto's
/// UpdateAutoScalingGroup ignores it too, so no stand-in can put it back.
fn check_doctor(moto: &Moto, config: &Path) {
    let report = wait_for(
        "doctor to see the deployed stack",
        Duration::from_secs(30),
        || {
            let out = dtctl(moto, config, &["doctor", "-o", "json"]);
            serde_json::from_str::<Json>(&stdout(&out)).unwrap_or_default()
        },
        |r| {
            let checks = r["checks"].as_array().cloned().unwrap_or_default();
            let failed: Vec<&Json> = checks.iter().filter(|c| c["outcome"] != "pass").collect();
            failed.len() == 1 && failed[0]["id"] == "group.capacity_rebalance"
        },
    );
    assert_eq!(report["ok"], false, "{report:#}");
    // The template's type and the group's overrides: one GPU each.
    let gpus = (report["checks"].as_array().unwrap().iter())
        .find(|c| c["id"] == "workers.gpus")
        .expect("the GPU check");
    assert_eq!(
        gpus["detail"], "g4dn.xlarge 1, g5.xlarge 1, g6.xlarge 1: the same on every type",
        "{gpus:#}"
    );
}
