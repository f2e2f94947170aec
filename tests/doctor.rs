//! `dtctl doctor` against the emulator: every line ✔ on a healthy cluster built as a person would
//! build it with the AWS CLI, then each defect introduced one at a time turns exactly its own line
//! ✖, with a fix, and the exit status 1.
//!
//! Stand-in: this kernel has no NFS client, so the shared directory is a tmpfs mounted under the
//! EFS file system's DNS name (what the mount table shows for `mount -t efs`); doctor reads the
//! mount table as it would on a node.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const FS_DNS_SUFFIX: &str = ".efs.us-east-1.amazonaws.com:/";

/// What a healthy cluster has, by the names the defects need.
struct Names {
    template: String,
    group: String,
    fs: String,
    subnet_b: String,
    efs_sg: String,
    worker_sg: String,
    queue: String,
}

struct Healthy {
    c: Cluster,
    n: Names,
    _mount: Mount,
}

fn json_arg(v: &Value) -> String {
    v.to_string()
}

fn aws_text(c: &Cluster, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--output", "text"]);
    c.aws(&all)
}

fn network(c: &Cluster) -> (String, String, String, String) {
    let vpc = aws_text(
        c,
        &[
            "ec2",
            "create-vpc",
            "--cidr-block",
            "10.0.0.0/16",
            "--query",
            "Vpc.VpcId",
        ],
    );
    let subnet = |cidr: &str, zone: &str| {
        let q = ["--query", "Subnet.SubnetId"];
        let args = [
            "ec2",
            "create-subnet",
            "--vpc-id",
            &vpc,
            "--cidr-block",
            cidr,
            "--availability-zone",
            zone,
        ];
        aws_text(c, &[&args[..], &q[..]].concat())
    };
    let a = subnet("10.0.1.0/24", "us-east-1a");
    let b = subnet("10.0.2.0/24", "us-east-1b");
    let sg = |name: &str| {
        let args = [
            "ec2",
            "create-security-group",
            "--group-name",
            name,
            "--description",
            name,
            "--vpc-id",
            &vpc,
        ];
        aws_text(c, &[&args[..], &["--query", "GroupId"][..]].concat())
    };
    let worker_sg = sg("itest-workers");
    let efs_sg = sg("itest-efs");
    c.aws(&[
        "ec2",
        "authorize-security-group-ingress",
        "--group-id",
        &efs_sg,
        "--protocol",
        "tcp",
        "--port",
        "2049",
        "--source-group",
        &worker_sg,
    ]);
    (a, b, worker_sg, efs_sg)
}

fn template_data(subnet: &str, sg: &str, tokens: &str, elastic: bool) -> String {
    let mut tags = vec![json!({"Key": "NodeType", "Value": "Worker"})];
    if elastic {
        tags.push(json!({"Key": ELASTIC, "Value": "true"}));
    }
    json_arg(&json!({
        "ImageId": "ami-12c6146b",
        "InstanceType": "p3.2xlarge",
        "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": subnet, "Groups": [sg]}],
        "MetadataOptions": {"HttpTokens": tokens, "HttpPutResponseHopLimit": 1},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
    }))
}

fn put_hook(c: &Cluster, group: &str, which: &str) {
    let (transition, result) = match which {
        "launching" => ("autoscaling:EC2_INSTANCE_LAUNCHING", "ABANDON"),
        _ => ("autoscaling:EC2_INSTANCE_TERMINATING", "CONTINUE"),
    };
    c.aws(&[
        "autoscaling",
        "put-lifecycle-hook",
        "--auto-scaling-group-name",
        group,
        "--lifecycle-hook-name",
        &format!("{group}-{which}"),
        "--lifecycle-transition",
        transition,
        "--heartbeat-timeout",
        "600",
        "--default-result",
        result,
    ]);
}

/// The TLS rule of "Enforcing encryption in transit" (Amazon EFS User Guide, "Data encryption
/// in transit"), with the access a cluster needs.
fn tls_policy(fs_arn: &str) -> String {
    json_arg(&json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "NoPlainNfs", "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "*",
             "Resource": fs_arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
            {"Sid": "Mount", "Effect": "Allow", "Principal": {"AWS": "*"},
             "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"],
             "Resource": fs_arn}
        ]
    }))
}

fn file_system(c: &Cluster, subnets: [&str; 2], sg: &str) -> String {
    let fs = aws_text(
        c,
        &[
            "efs",
            "create-file-system",
            "--encrypted",
            "--query",
            "FileSystemId",
        ],
    );
    for s in subnets {
        c.aws(&[
            "efs",
            "create-mount-target",
            "--file-system-id",
            &fs,
            "--subnet-id",
            s,
            "--security-groups",
            sg,
        ]);
    }
    let arn = format!("arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/{fs}");
    c.aws(&[
        "efs",
        "put-file-system-policy",
        "--file-system-id",
        &fs,
        "--policy",
        &tls_policy(&arn),
    ]);
    fs
}

/// What the stack's EventQueuePolicy grants (EventBridge User Guide, "Permissions for Amazon SQS").
fn queue_policy(queue_arn: &str) -> String {
    json_arg(&json!({
        "Version": "2012-10-17",
        "Statement": [{"Sid": "EventBridge", "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
            "Resource": queue_arn}]
    }))
}

fn set_queue_policy(c: &Cluster, url: &str, policy: &str) {
    let attrs = json_arg(&json!({ "Policy": policy }));
    c.aws(&[
        "sqs",
        "set-queue-attributes",
        "--queue-url",
        url,
        "--attributes",
        &attrs,
    ]);
}

fn queue_arn(c: &Cluster, url: &str) -> String {
    aws_text(
        c,
        &[
            "sqs",
            "get-queue-attributes",
            "--queue-url",
            url,
            "--attribute-names",
            "QueueArn",
            "--query",
            "Attributes.QueueArn",
        ],
    )
}

fn config(c: &Cluster, h: &Names, shared: &Path) -> String {
    let state = c.state_dir().display().to_string();
    format!(
        "cluster: {CLUSTER}\nregion: us-east-1\nworkers:\n  launch_template: {}\n  auto_scaling_group: {}\n  min: 0\n  max: 4\nshared_dir: {}\nshared_fs_id: {}\nstate_dir: {state}\njob:\n  notify: none\nevents:\n  queue_url: {}\ninterval: 300ms\n",
        h.template, h.group, shared.display(), h.fs, h.queue
    )
}

fn healthy() -> Healthy {
    let mut c = Cluster::new();
    let (a, b, worker_sg, efs_sg) = network(&c);
    let template = "itest-doctor-template".to_string();
    c.aws(&[
        "ec2",
        "create-launch-template",
        "--launch-template-name",
        &template,
        "--launch-template-data",
        &template_data(&a, &worker_sg, "required", true),
    ]);
    let group = "itest-workers".to_string();
    c.aws(&[
        "autoscaling",
        "create-auto-scaling-group",
        "--auto-scaling-group-name",
        &group,
        "--launch-template",
        &format!("LaunchTemplateName={template}"),
        "--min-size",
        "0",
        "--max-size",
        "4",
        "--desired-capacity",
        "0",
        "--vpc-zone-identifier",
        &format!("{a},{b}"),
        "--capacity-rebalance",
    ]);
    put_hook(&c, &group, "launching");
    put_hook(&c, &group, "terminating");
    let fs = file_system(&c, [&a, &b], &efs_sg);
    let queue = create_event_queue(&c);
    set_queue_policy(&c, &queue, &queue_policy(&queue_arn(&c, &queue)));
    c.aws(&[
        "ec2",
        "run-instances",
        "--launch-template",
        &format!("LaunchTemplateName={template}"),
        "--subnet-id",
        &a,
        "--count",
        "1",
    ]);
    let mount = Mount::tmpfs(&c.efs(), &format!("{fs}{FS_DNS_SUFFIX}"));
    let n = Names {
        template,
        group,
        fs,
        subnet_b: b,
        efs_sg,
        worker_sg,
        queue,
    };
    c.write_config(&config(&c, &n, &c.efs()));
    c.start_dtd();
    c.wait_passes(1);
    Healthy {
        c,
        n,
        _mount: mount,
    }
}

/// The doctor's report, with its exit status.
fn doctor(c: &Cluster, config: Option<&Path>) -> (bool, Value) {
    let path: PathBuf = config.map_or_else(|| c.config_path(), Path::to_path_buf);
    let out = c.dtctl_with(&path, &["doctor", "-o", "json"]);
    let report: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("doctor -o json: {e}: {} {}", stdout(&out), stderr(&out)));
    assert_eq!(
        out.status.success(),
        report["ok"] == true,
        "exit status and report disagree: {report:#}"
    );
    (out.status.success(), report)
}

fn failed(report: &Value) -> Vec<String> {
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    checks
        .iter()
        .filter(|c| c["outcome"] == "fail")
        .map(|c| c["id"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Polls until exactly `id` fails (a defect reaches AWS's answers at once, but dtd's own view
/// takes a pass), and checks it comes with a fix.
fn expect_only(h: &Healthy, id: &str, config: Option<&Path>) -> Value {
    let (ok, report) = wait_for(
        &format!("only {id} to fail"),
        Duration::from_secs(30),
        || doctor(&h.c, config),
        |(_, r)| failed(r) == [id.to_string()],
    );
    assert!(!ok, "a failing check must exit 1");
    let line = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
        .clone();
    assert!(
        line["fix"].as_str().is_some_and(|f| !f.is_empty()),
        "{line:#}"
    );
    line
}

fn expect_healthy(h: &Healthy) {
    let (ok, report) = wait_for(
        "every check to pass",
        Duration::from_secs(30),
        || doctor(&h.c, None),
        |(ok, _)| *ok,
    );
    assert!(ok);
    let not_passed: Vec<&Value> = (report["checks"].as_array().unwrap().iter())
        .filter(|c| c["outcome"] != "pass")
        .collect();
    assert!(
        not_passed.is_empty(),
        "a healthy cluster has no ✖ and nothing skipped: {not_passed:#?}"
    );
}

#[test]
fn doctor_passes_a_healthy_cluster_and_names_each_defect() {
    let mut h = healthy();
    expect_healthy(&h);
    let text = stdout(&h.c.dtctl(&["doctor"]));
    assert!(
        text.contains("✔ file system: mount targets") && text.contains("Every check passed."),
        "{text}"
    );

    // A template version without IMDSv2, made the default.
    let add_version = |data: String| {
        let args = [
            "ec2",
            "create-launch-template-version",
            "--launch-template-name",
            &h.n.template,
            "--launch-template-data",
            &data,
            "--query",
            "LaunchTemplateVersion.VersionNumber",
        ];
        aws_text(&h.c, &args)
    };
    let set_default = |v: &str| {
        h.c.aws(&[
            "ec2",
            "modify-launch-template",
            "--launch-template-name",
            &h.n.template,
            "--default-version",
            v,
        ]);
    };
    let subnet_a = aws_text(
        &h.c,
        &[
            "ec2",
            "describe-subnets",
            "--filters",
            "Name=cidr-block,Values=10.0.1.0/24",
            "--query",
            "Subnets[0].SubnetId",
        ],
    );
    let v = add_version(template_data(&subnet_a, &h.n.worker_sg, "optional", true));
    set_default(&v);
    let line = expect_only(&h, "template.imdsv2", None);
    assert!(
        line["detail"].as_str().unwrap().contains("optional"),
        "{line:#}"
    );
    // One without the elastic tag.
    let v = add_version(template_data(&subnet_a, &h.n.worker_sg, "required", false));
    set_default(&v);
    let line = expect_only(&h, "template.tags", None);
    assert!(
        line["detail"].as_str().unwrap().contains(ELASTIC),
        "{line:#}"
    );
    set_default("1");
    expect_healthy(&h);

    // The launching hook removed.
    h.c.aws(&[
        "autoscaling",
        "delete-lifecycle-hook",
        "--auto-scaling-group-name",
        &h.n.group,
        "--lifecycle-hook-name",
        &format!("{}-launching", h.n.group),
    ]);
    let line = expect_only(&h, "group.launching_hook", None);
    assert!(
        line["fix"].as_str().unwrap().contains("put-lifecycle-hook"),
        "{line:#}"
    );
    put_hook(&h.c, &h.n.group, "launching");
    // Capacity Rebalance off. moto's UpdateAutoScalingGroup ignores CapacityRebalance, so the
    // defect is a second group made without it, hooks and all, named in a second config.
    let plain_group = format!("{}-plain", h.n.group);
    h.c.aws(&[
        "autoscaling",
        "create-auto-scaling-group",
        "--auto-scaling-group-name",
        &plain_group,
        "--launch-template",
        &format!("LaunchTemplateName={}", h.n.template),
        "--min-size",
        "0",
        "--max-size",
        "4",
        "--vpc-zone-identifier",
        &aws_text(
            &h.c,
            &[
                "autoscaling",
                "describe-auto-scaling-groups",
                "--auto-scaling-group-names",
                &h.n.group,
                "--query",
                "AutoScalingGroups[0].VPCZoneIdentifier",
            ],
        ),
    ]);
    put_hook(&h.c, &plain_group, "launching");
    put_hook(&h.c, &plain_group, "terminating");
    let no_rebalance = h.c.dir.path().join("no-rebalance.yaml");
    let body = config(&h.c, &h.n, &h.c.efs()).replace(
        &format!("auto_scaling_group: {}\n", h.n.group),
        &format!("auto_scaling_group: {plain_group}\n"),
    );
    std::fs::write(&no_rebalance, body).unwrap();
    expect_only(&h, "group.capacity_rebalance", Some(&no_rebalance));
    expect_healthy(&h);

    // No mount target in the second zone.
    let target_b = aws_text(
        &h.c,
        &[
            "efs",
            "describe-mount-targets",
            "--file-system-id",
            &h.n.fs,
            "--query",
            &format!(
                "MountTargets[?SubnetId=='{}'].MountTargetId | [0]",
                h.n.subnet_b
            ),
        ],
    );
    h.c.aws(&["efs", "delete-mount-target", "--mount-target-id", &target_b]);
    let line = expect_only(&h, "efs.mount_targets", None);
    assert!(
        line["detail"].as_str().unwrap().contains("us-east-1b"),
        "{line:#}"
    );
    assert!(
        line["fix"].as_str().unwrap().contains(&h.n.subnet_b),
        "{line:#}"
    );
    h.c.aws(&[
        "efs",
        "create-mount-target",
        "--file-system-id",
        &h.n.fs,
        "--subnet-id",
        &h.n.subnet_b,
        "--security-groups",
        &h.n.efs_sg,
    ]);
    // NFS no longer admitted from the workers.
    let rule = [
        "--group-id",
        &h.n.efs_sg,
        "--protocol",
        "tcp",
        "--port",
        "2049",
        "--source-group",
        &h.n.worker_sg,
    ];
    h.c.aws(&[&["ec2", "revoke-security-group-ingress"][..], &rule[..]].concat());
    expect_only(&h, "efs.security_groups", None);
    h.c.aws(&[&["ec2", "authorize-security-group-ingress"][..], &rule[..]].concat());
    // A file system policy that does not require TLS.
    let arn = format!(
        "arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/{}",
        h.n.fs
    );
    let lax = json_arg(
        &json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "elasticfilesystem:ClientMount", "Resource": arn}]}),
    );
    h.c.aws(&[
        "efs",
        "put-file-system-policy",
        "--file-system-id",
        &h.n.fs,
        "--policy",
        &lax,
    ]);
    expect_only(&h, "efs.tls_policy", None);
    h.c.aws(&[
        "efs",
        "put-file-system-policy",
        "--file-system-id",
        &h.n.fs,
        "--policy",
        &tls_policy(&arn),
    ]);
    expect_healthy(&h);

    // shared_dir not a mount: the same cluster with a plain directory as shared_dir.
    let plain = h.c.dir.path().join("not-a-mount");
    std::fs::create_dir_all(&plain).unwrap();
    let other = h.c.dir.path().join("plain.yaml");
    std::fs::write(&other, config(&h.c, &h.n, &plain)).unwrap();
    let line = expect_only(&h, "efs.mounted", Some(&other));
    assert!(
        line["detail"]
            .as_str()
            .unwrap()
            .contains("root file system"),
        "{line:#}"
    );

    // A queue no rule sends to, then one EventBridge may not send to.
    let arn = queue_arn(&h.c, &h.n.queue);
    for rule in ["itest-events", "itest-health"] {
        h.c.aws(&["events", "remove-targets", "--rule", rule, "--ids", "queue"]);
    }
    let line = expect_only(&h, "queue.rules", None);
    assert!(
        line["detail"]
            .as_str()
            .unwrap()
            .contains("no enabled EventBridge rule"),
        "{line:#}"
    );
    let target = json_arg(&json!([{ "Id": "queue", "Arn": arn }]));
    h.c.aws(&[
        "events",
        "put-targets",
        "--rule",
        "itest-events",
        "--targets",
        &target,
    ]);
    set_queue_policy(&h.c, &h.n.queue, "");
    expect_only(&h, "queue.policy", None);
    set_queue_policy(&h.c, &h.n.queue, &queue_policy(&arn));
    expect_healthy(&h);

    // dtd stopped: its status goes stale.
    h.c.kill_dtd();
    let line = expect_only(&h, "dtd.alive", None);
    assert!(
        line["detail"]
            .as_str()
            .unwrap()
            .contains("not running its passes"),
        "{line:#}"
    );
    let text = stdout(&h.c.dtctl(&["doctor"]));
    assert!(
        text.contains("✖ dtd alive")
            && text.contains("fix: on the master")
            && text.ends_with("1 check failed.\n"),
        "{text}"
    );
}
