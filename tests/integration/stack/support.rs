//! What the stack's checks share: its names, the AWS CLI against the emulator, the template as
//! written, and reading back what the stack made (its groups, launch templates, user data and
//! access point).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{aws_cli, aws_env, repo, Moto};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

pub const STACK: &str = "dtstack";
pub const ELASTIC_KEY: &str = "dtstack-aws-dl-cfn-elastic-worker";

/// The Secrets Manager secret the stack is given for the alerts' webhook URL.
pub const WEBHOOK_SECRET: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:dt-webhook-AbCdEf";

/// The elastic tag's key on this stack's workers (its launch template's tag and dtd.yaml's
/// `workers.elastic_tag`).
pub fn elastic_tag() -> String {
    format!("{STACK}-aws-dl-cfn-elastic-worker")
}

pub fn template_path() -> PathBuf {
    repo().join("cloudformation/dynamic-training.yaml")
}

/// The AWS CLI against the emulator; stdout, or a panic with stderr.
pub fn aws(moto: &Moto, args: &[&str]) -> String {
    aws_cli(&moto.endpoint(), args)
}

pub fn aws_json(moto: &Moto, args: &[&str]) -> Json {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--output", "json"]);
    let text = aws(moto, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("aws {args:?}: {e}: {text}"))
}

/// The configuration a node's user data writes to /etc/dt/dtd.yaml.
pub fn config_in(user_data: &str) -> String {
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
pub fn master_group(moto: &Moto, out: &BTreeMap<String, String>) -> Json {
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
pub fn launch_version(moto: &Moto, lt_id: &str) -> Json {
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
pub fn launch_data(moto: &Moto, lt_id: &str) -> Json {
    launch_version(moto, lt_id)["LaunchTemplateData"].clone()
}

/// The master's launch template's user data.
pub fn master_user_data(moto: &Moto, out: &BTreeMap<String, String>) -> String {
    let lt = &master_group(moto, out)["LaunchTemplate"]["LaunchTemplateId"];
    let data = launch_data(moto, lt.as_str().unwrap());
    decode_base64(data["UserData"].as_str().unwrap())
}

/// The worker launch template's user data.
pub fn worker_user_data(moto: &Moto, out: &BTreeMap<String, String>) -> String {
    let data = launch_data(moto, &out["WorkerLaunchTemplateId"]);
    decode_base64(data["UserData"].as_str().unwrap())
}

/// EC2 takes at most 16 KB of user data, counted before base64 (EC2 User Guide, "Run commands
/// when you launch an EC2 instance with user data input"): with the template itself in S3 (1 MB),
/// this is the limit the embedded scripts run into first.
pub const USER_DATA_MAX: usize = 16 * 1024;

/// A node's rendered user data fits EC2's limit.
pub fn assert_user_data_fits(what: &str, user_data: &str) {
    assert!(
        user_data.len() <= USER_DATA_MAX,
        "{what}'s user data is {} bytes, over EC2's {USER_DATA_MAX}",
        user_data.len()
    );
}

pub fn tags_of(list: &Json) -> BTreeMap<String, String> {
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
pub fn template() -> Yaml {
    let text = std::fs::read_to_string(template_path()).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

pub fn untag(v: &Yaml) -> &Yaml {
    match v {
        Yaml::Tagged(t) => &t.value,
        other => other,
    }
}

pub fn resource<'a>(t: &'a Yaml, name: &str) -> &'a Yaml {
    &t["Resources"][name]["Properties"]
}

/// Stand-in: moto's `Ref` to an `AWS::EFS::AccessPoint` gives the Python repr of its object
/// (`<moto.efs.models.AccessPoint object at 0x...>`), where AWS gives the access point's id (and
/// moto has no `Fn::GetAtt` for it at all); this puts the id where AWS would.
pub fn moto_access_point_ref(text: &str, ap_id: &str) -> String {
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
pub fn access_point(moto: &Moto, fs: &str) -> Json {
    let aps = aws_json(
        moto,
        &["efs", "describe-access-points", "--file-system-id", fs],
    );
    let all = aps["AccessPoints"].as_array().unwrap();
    assert_eq!(all.len(), 1, "{aps}");
    all[0].clone()
}

pub fn decode_base64(text: &str) -> String {
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

/// PutEvents takes at most ten entries per call.
pub fn put_events(moto: &Moto, entries: &[Json]) {
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

pub fn dtctl(moto: &Moto, config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dtctl"))
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(aws_env(&moto.endpoint()))
        .output()
        .expect("dtctl")
}

pub fn instance_tag(moto: &Moto, id: &str, key: &str) -> Option<String> {
    let d = aws_json(moto, &["ec2", "describe-instances", "--instance-ids", id]);
    tags_of(&d["Reservations"][0]["Instances"][0]["Tags"]).remove(key)
}
