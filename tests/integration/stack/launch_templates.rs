//! The two launch templates as EC2 describes them: IMDSv2, the tags, and the user data rendered
//! from templates/user-data/ (each line embedded, every variable filled in, the config it writes
//! accepted by `dtctl config check`, and `bash -n` clean).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use super::support::{
    access_point, assert_user_data_fits, config_in, decode_base64, dtctl, launch_data,
    launch_version, master_group, moto_access_point_ref, tags_of, template, ELASTIC_KEY, STACK,
    WEBHOOK_SECRET,
};
use crate::support::{repo, stderr, Moto};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

pub fn check_launch_template(moto: &Moto, out: &BTreeMap<String, String>) {
    let version = &launch_version(moto, &out["WorkerLaunchTemplateId"]);
    assert_eq!(
        version["LaunchTemplateName"],
        out["WorkerLaunchTemplateName"].as_str()
    );
    let data = &version["LaunchTemplateData"];
    assert_eq!(data["MetadataOptions"]["HttpTokens"], "required", "IMDSv2");
    // Nothing reads tags from IMDS, and enabled it fails launches for some tag keys.
    assert_eq!(data["MetadataOptions"]["InstanceMetadataTags"], "disabled");
    check_worker_tags(data);
    check_worker_user_data(moto, out, data);
}

fn check_worker_tags(data: &Json) {
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
}

/// The user data is templates/user-data/node.sh, rendered for the worker role.
fn check_worker_user_data(moto: &Moto, out: &BTreeMap<String, String>, data: &Json) {
    let ap = access_point(moto, &out["FileSystemId"]);
    let ap_id = ap["AccessPointId"].as_str().unwrap();
    let user_data = decode_base64(data["UserData"].as_str().expect("user data"));
    assert_user_data_fits("the worker", &user_data);
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
    // JobInstanceMetadata defaults to false: the instance metadata answers root only
    // (tests/python/test_imds_lock.py loads the rules the block writes).
    assert!(
        user_data.contains("if [ 'false' != true ]; then\n    command -v nft"),
        "{user_data}"
    );
    let config = config_in(&user_data);
    assert!(!user_data.contains("${"), "every variable is substituted");
    // TorchrunStrategy defaults to generation: no Lighthouse, nothing for node.sh to fill in.
    assert!(!config.contains("@MASTER_IP@") && !config.contains("in_place"));
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
    // The release's files are installed: the unit filled in, the torchrun helper beside, the
    // man pages and dtctl's bash completion (scripts/release checks the archive holds them).
    assert!(user_data.contains("/usr/local/lib/dt/dt_torch.py"));
    assert!(user_data.contains("-t /usr/local/share/man/man1 \"$workdir\"/man/*.1\n"));
    assert!(
        user_data.contains("\"$workdir/completions/dtctl.bash\" /etc/bash_completion.d/dtctl\n")
    );
    check_config_variants(moto, &config);
    bash_syntax_ok(&user_data);
}

/// The worker's config as the stack's parameters can make it (without the GPU check, with the
/// training script, with the elastic strategy): each passes `dtctl config check`.
fn check_config_variants(moto: &Moto, config: &str) {
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

/// `bash -n`: the rendered user data parses as the script it claims to be.
pub(super) fn bash_syntax_ok(script: &str) {
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

pub fn check_master(moto: &Moto, out: &BTreeMap<String, String>) {
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
    assert_user_data_fits("the master", &user_data);
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
