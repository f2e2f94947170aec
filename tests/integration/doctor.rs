//! `dtctl doctor` against the emulator: every line ✔ on a healthy cluster built as a person would
//! build it with the AWS CLI, then each defect introduced one at a time turns exactly its own line
//! ✖, with a fix, and the exit status 1.
//!
//! Stand-in: this kernel has no NFS client, so the shared directory is a tmpfs mounted under the
//! EFS file system's DNS name (what the mount table shows for `mount -t efs`); doctor reads the
//! mount table as it would on a node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
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
    let zones = [("10.0.1.0/24", "us-east-1a"), ("10.0.2.0/24", "us-east-1b")];
    let (vpc, subnets) = c.vpc_with_subnets("10.0.0.0/16", &zones);
    let (a, b) = (subnets[0].clone(), subnets[1].clone());
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
        "InstanceType": "g5.xlarge",
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
    let fs = file_system_without_policy(c, subnets, sg);
    put_fs_policy(c, &fs, &tls_policy(&fs_arn(&fs)));
    fs
}

/// A file system as one made outside the stack often is (the stack's `EFSFileSystemId`):
/// mount targets, no file system policy.
fn file_system_without_policy(c: &Cluster, subnets: [&str; 2], sg: &str) -> String {
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
    fs
}

/// A second worker group `<group>-<suffix>` in the healthy group's subnets, made with `args`
/// (how it launches, and Capacity Rebalance or not), with both lifecycle hooks; returns a config
/// naming it instead of the healthy group.
fn second_group(h: &Healthy, suffix: &str, args: &[&str]) -> PathBuf {
    let name = format!("{}-{suffix}", h.n.group);
    let zones = group_zones(h);
    let create = [
        "autoscaling",
        "create-auto-scaling-group",
        "--auto-scaling-group-name",
        &name,
        "--min-size",
        "0",
        "--max-size",
        "4",
        "--vpc-zone-identifier",
        &zones,
    ];
    h.c.aws(&[&create[..], args].concat());
    put_hook(&h.c, &name, "launching");
    put_hook(&h.c, &name, "terminating");
    let path = h.c.dir.path().join(format!("{suffix}.yaml"));
    let body = config(&h.c, &h.n, &h.c.efs()).replace(
        &format!("auto_scaling_group: {}\n", h.n.group),
        &format!("auto_scaling_group: {name}\n"),
    );
    std::fs::write(&path, body).unwrap();
    path
}

/// The subnets of the healthy cluster's worker group, as its `VPCZoneIdentifier` lists them.
fn group_zones(h: &Healthy) -> String {
    let args = [
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
    ];
    let query = ["--query", "AutoScalingGroups[0].VPCZoneIdentifier"];
    aws_text(
        &h.c,
        &[&args[..], &[h.n.group.as_str()], &query[..]].concat(),
    )
}

/// `query` (JMESPath) of the healthy cluster's mount targets, as text.
fn mount_targets(h: &Healthy, query: &str) -> String {
    let args = ["efs", "describe-mount-targets", "--file-system-id", &h.n.fs];
    aws_text(&h.c, &[&args[..], &["--query", query]].concat())
}

fn fs_arn(fs: &str) -> String {
    format!("arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/{fs}")
}

fn put_fs_policy(c: &Cluster, fs: &str, policy: &str) {
    let args = ["efs", "put-file-system-policy", "--file-system-id", fs];
    c.aws(&[&args[..], &["--policy", policy]].concat());
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
        "cluster: {CLUSTER}\nworkers:\n  launch_template: {}\n  auto_scaling_group: {}\n  min: 0\n  max: 4\n{}shared_dir: {}\nshared_fs_id: {}\nstate_dir: {state}\njob:\n  notify: none\nevents:\n  queue_url: {}\ninterval: 300ms\n",
        h.template, h.group, c.reports_config(), shared.display(), h.fs, h.queue
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

/// The report's line for check `id`.
fn check_line<'r>(report: &'r Value, id: &str) -> &'r Value {
    (report["checks"].as_array().into_iter().flatten())
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {report:#}"))
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
    let line = check_line(&report, id).clone();
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
    let launch = format!("LaunchTemplateName={}", h.n.template);
    let no_rebalance = second_group(&h, "plain", &["--launch-template", &launch]);
    expect_only(&h, "group.capacity_rebalance", Some(&no_rebalance));
    expect_healthy(&h);

    // A group whose overrides let a worker be a 4-GPU type beside the template's 1-GPU one.
    let policy = json!({"LaunchTemplate": {
        "LaunchTemplateSpecification": {"LaunchTemplateName": h.n.template},
        "Overrides": [{"InstanceType": "g5.xlarge"}, {"InstanceType": "g5.12xlarge"}]}});
    let policy = policy.to_string();
    let mixed = second_group(
        &h,
        "mixed",
        &["--mixed-instances-policy", &policy, "--capacity-rebalance"],
    );
    let line = expect_only(&h, "workers.gpus", Some(&mixed));
    let detail = line["detail"].as_str().unwrap();
    assert!(detail.contains("g5.12xlarge 4, g5.xlarge 1"), "{line:#}");
    let (_, report) = doctor(&h.c, None);
    let gpus = check_line(&report, "workers.gpus");
    assert_eq!(
        gpus["detail"], "g5.xlarge 1: the same on every type",
        "{gpus:#}"
    );
    // workers.capacity saying 4 GPUs of a type EC2 says has 1.
    let wrong = h.c.dir.path().join("capacity.yaml");
    let choices = "  capacity: { choices: [ { instance_type: g5.xlarge, gpus: 4 } ] }\n";
    let body =
        config(&h.c, &h.n, &h.c.efs()).replace("  min: 0\n", &format!("  min: 0\n{choices}"));
    std::fs::write(&wrong, body).unwrap();
    let line = expect_only(&h, "workers.gpus", Some(&wrong));
    assert_eq!(
        line["detail"], "workers.capacity says 4 GPUs per worker; EC2 says g5.xlarge 1",
        "{line:#}"
    );

    // No mount target in the second zone.
    let target_b = mount_targets(
        &h,
        &format!(
            "MountTargets[?SubnetId=='{}'].MountTargetId | [0]",
            h.n.subnet_b
        ),
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
    let arn = fs_arn(&h.n.fs);
    let lax = json_arg(
        &json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "elasticfilesystem:ClientMount", "Resource": arn}]}),
    );
    put_fs_policy(&h.c, &h.n.fs, &lax);
    expect_only(&h, "efs.tls_policy", None);
    put_fs_policy(&h.c, &h.n.fs, &tls_policy(&arn));
    expect_healthy(&h);
    // An existing file system with no policy at all: anyone in the VPC may mount it without TLS.
    let subnets = mount_targets(&h, "MountTargets[].SubnetId");
    let subnets: Vec<&str> = subnets.split_whitespace().collect();
    let existing = file_system_without_policy(&h.c, [subnets[0], subnets[1]], &h.n.efs_sg);
    let dir = h.c.dir.path().join("efs-existing");
    std::fs::create_dir_all(&dir).unwrap();
    let _existing_mount = Mount::tmpfs(&dir, &format!("{existing}{FS_DNS_SUFFIX}"));
    let body = config(&h.c, &h.n, &dir).replace(
        &format!("shared_fs_id: {}\n", h.n.fs),
        &format!("shared_fs_id: {existing}\n"),
    );
    let path = h.c.dir.path().join("existing.yaml");
    std::fs::write(&path, body).unwrap();
    let line = expect_only(&h, "efs.tls_policy", Some(&path));
    let detail = line["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("{existing} has no file system policy")),
        "{line:#}"
    );

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
    for rule in ["itest-events", "itest-health", "itest-tags"] {
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

/// The healthy cluster's config with one line changed, written beside it for doctor alone.
fn variant(h: &Healthy, name: &str, from: &str, to: &str) -> PathBuf {
    let body = config(&h.c, &h.n, &h.c.efs());
    assert!(body.contains(from), "{from:?} not in {body}");
    let path = h.c.dir.path().join(name);
    std::fs::write(&path, body.replace(from, to)).unwrap();
    path
}

#[test]
fn doctor_names_what_is_missing_a_skewed_clock_and_a_failing_dtd_source() {
    let mut h = healthy();
    expect_healthy(&h);
    let n = &h.n;
    let missing = [
        (
            "template.exists",
            format!("launch_template: {}\n", n.template),
            "launch_template: itest-no-such-template\n".to_string(),
        ),
        (
            "group.exists",
            format!("auto_scaling_group: {}\n", n.group),
            "auto_scaling_group: itest-no-such-group\n".to_string(),
        ),
        (
            "queue.exists",
            format!("queue_url: {}\n", n.queue),
            format!(
                "queue_url: {}/123456789012/no-such-queue\n",
                h.c.moto.endpoint()
            ),
        ),
    ];
    for (id, from, to) in &missing {
        let path = variant(&h, &format!("{id}.yaml"), from, to);
        expect_only(&h, id, Some(&path));
    }

    // A file system that is gone, mounted (as far as the mount table tells) where shared_dir is.
    let gone = aws_text(
        &h.c,
        &["efs", "create-file-system", "--query", "FileSystemId"],
    );
    let dir = h.c.dir.path().join("efs-gone");
    std::fs::create_dir_all(&dir).unwrap();
    let _gone_mount = Mount::tmpfs(&dir, &format!("{gone}{FS_DNS_SUFFIX}"));
    h.c.aws(&["efs", "delete-file-system", "--file-system-id", &gone]);
    let body = config(&h.c, &h.n, &dir).replace(
        &format!("shared_fs_id: {}\n", h.n.fs),
        &format!("shared_fs_id: {gone}\n"),
    );
    let path = h.c.dir.path().join("gone.yaml");
    std::fs::write(&path, body).unwrap();
    let line = expect_only(&h, "efs.available", Some(&path));
    assert!(line["detail"].as_str().unwrap().contains(&gone), "{line:#}");

    // The local clock a minute behind AWS's (libfaketime; the monotonic clock left alone).
    let out = std::process::Command::new("faketime")
        .args(["-f", "-60s", env!("CARGO_BIN_EXE_dtctl"), "--config"])
        .arg(h.c.config_path())
        .args(["doctor", "-o", "json"])
        .envs(aws_env(&h.c.moto.endpoint()))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("faketime (scripts/setup installs it)");
    let report: Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(failed(&report), ["clock"], "{report:#}");
    let clock = check_line(&report, "clock");
    assert!(
        clock["detail"].as_str().unwrap().contains("behind"),
        "{clock:#}"
    );

    // dtd itself cannot read a source (here: its own config names a queue that does not exist);
    // doctor, with the right queue, sees it in dtd's status.
    h.c.kill_dtd();
    let (from, to) = (&missing[2].1, &missing[2].2);
    h.c.write_config(&config(&h.c, &h.n, &h.c.efs()).replace(from.as_str(), to.as_str()));
    h.c.start_dtd();
    let good = h.c.dir.path().join("good.yaml");
    std::fs::write(&good, config(&h.c, &h.n, &h.c.efs())).unwrap();
    let line = expect_only(&h, "dtd.sources", Some(&good));
    assert!(
        line["detail"].as_str().unwrap().contains("no-such-queue"),
        "{line:#}"
    );
}

/// IAM as AWS applies it, where moto can: with `INITIAL_NO_AUTH_ACTION_COUNT` moto checks every
/// request after the first few against the caller's IAM policies (moto's "IAM-like access
/// control"), so a dry run answers UnauthorizedOperation-style refusals as EC2 would.
#[test]
fn doctor_names_a_permission_the_role_lacks() {
    // The three setup calls below are the only ones moto lets through unauthenticated.
    let moto = Moto::start_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "3")]);
    let admin = |args: &[&str]| aws_cli(&moto.endpoint(), args);
    admin(&["iam", "create-user", "--user-name", "dtd-master"]);
    let key: Value = serde_json::from_str(&admin(&[
        "iam",
        "create-access-key",
        "--user-name",
        "dtd-master",
        "--output",
        "json",
    ]))
    .unwrap();
    let policy = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "*", "Resource": "*"},
        {"Effect": "Deny", "Action": "ec2:TerminateInstances", "Resource": "*"}]});
    admin(&[
        "iam",
        "put-user-policy",
        "--user-name",
        "dtd-master",
        "--policy-name",
        "dtd",
        "--policy-document",
        &policy.to_string(),
    ]);
    let id = key["AccessKey"]["AccessKeyId"]
        .as_str()
        .unwrap()
        .to_string();
    let secret = key["AccessKey"]["SecretAccessKey"]
        .as_str()
        .unwrap()
        .to_string();
    let env = |secret: &str| {
        let mut e = aws_env(&moto.endpoint());
        e.retain(|(k, _)| !k.starts_with("AWS_ACCESS_KEY_ID") && !k.starts_with("AWS_SECRET"));
        e.push(("AWS_ACCESS_KEY_ID", id.clone()));
        e.push(("AWS_SECRET_ACCESS_KEY", secret.to_string()));
        e
    };
    let as_user = |args: &[&str]| {
        let out = std::process::Command::new(
            std::env::var("DT_AWS_CLI").unwrap_or_else(|_| "aws".into()),
        )
        .args(["--endpoint-url", &moto.endpoint()])
        .args(args)
        .envs(env(&secret))
        .output()
        .unwrap();
        assert!(out.status.success(), "aws {args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let data = json!({"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge",
        "MetadataOptions": {"HttpTokens": "required"},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            {"Key": "NodeType", "Value": "Worker"}, {"Key": ELASTIC, "Value": "true"}]}]});
    as_user(&[
        "ec2",
        "create-launch-template",
        "--launch-template-name",
        "itest-iam",
        "--launch-template-data",
        &data.to_string(),
    ]);
    as_user(&[
        "ec2",
        "run-instances",
        "--launch-template",
        "LaunchTemplateName=itest-iam",
        "--count",
        "1",
    ]);

    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("efs");
    std::fs::create_dir_all(&shared).unwrap();
    let config = dir.path().join("dtd.yaml");
    std::fs::write(&config, format!("cluster: {CLUSTER}\nworkers:\n  launch_template: itest-iam\n  max: 4\n  listen: 127.0.0.1:0\nshared_dir: {}\njob:\n  notify: none\ninterval: 300ms\nallow_local_state_dir: true\n", shared.display())).unwrap();
    let mut dtd = std::process::Command::new(env!("CARGO_BIN_EXE_dtd"))
        .args(["run", "--config"])
        .arg(&config)
        .envs(env(&secret))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let doctor = |secret: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dtctl"))
            .arg("--config")
            .arg(&config)
            .args(["doctor", "-o", "json"])
            .envs(env(secret))
            .output()
            .unwrap();
        let report: Value =
            serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        (out.status.success(), report)
    };
    let (ok, report) = wait_for(
        "only the refused dry run to fail",
        Duration::from_secs(30),
        || doctor(&secret),
        |(_, r)| failed(r) == ["perm.terminate"],
    );
    let _ = dtd.kill();
    let _ = dtd.wait();
    assert!(!ok);
    let line = check_line(&report, "perm.terminate");
    assert!(
        line["detail"].as_str().unwrap().contains("is not allowed"),
        "{line:#}"
    );
    let passed = |id: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == id && c["outcome"] == "pass")
    };
    assert!(
        passed("perm.create_tags") && passed("perm.run_instances"),
        "{report:#}"
    );

    // Credentials AWS does not know: the first line says so, with what to do.
    let (ok, report) = doctor("not-the-secret");
    assert!(!ok);
    let line = check_line(&report, "credentials");
    assert_eq!(line["outcome"], "fail", "{report:#}");
    assert!(
        line["fix"]
            .as_str()
            .unwrap()
            .contains("sts get-caller-identity"),
        "{line:#}"
    );
}

#[test]
fn doctor_checks_the_rendezvous_port_between_workers_with_a_launcher() {
    let h = healthy();
    let launcher = "job:\n  notify: none\n  launcher: { torchrun: [/opt/venv/bin/torchrun], \
                    script: [/efs/train.py], rdzv: { port: 29500 } }\n";
    let path = variant(&h, "launcher.yaml", "job:\n  notify: none\n", launcher);
    let line = expect_only(&h, "workers.rendezvous", Some(&path));
    let text = line["detail"].to_string();
    assert!(
        text.contains("TCP 29500") && text.contains(&h.n.worker_sg),
        "{line:#}"
    );
    assert!(
        line["fix"].as_str().unwrap().contains("--port 29500"),
        "{line:#}"
    );
    h.c.aws(&[
        "ec2",
        "authorize-security-group-ingress",
        "--group-id",
        &h.n.worker_sg,
        "--protocol",
        "tcp",
        "--port",
        "29500",
        "--source-group",
        &h.n.worker_sg,
    ]);
    let (ok, report) = doctor(&h.c, Some(&path));
    assert!(ok, "{report:#}");
    let line = check_line(&report, "workers.rendezvous");
    assert_eq!(line["outcome"], "pass", "{line:#}");
    // Without a launcher there is nothing to check, and the line is not there at all.
    let (_, report) = doctor(&h.c, None);
    let ids: Vec<&str> = (report["checks"].as_array().unwrap().iter())
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert!(!ids.contains(&"workers.rendezvous"), "{ids:?}");
}
