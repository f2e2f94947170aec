//! The stack used: `dtd run` with the config it generates, a worker launched from its launch
//! template with the AWS CLI, that worker's `dtd agent` preparing its data, the worker joining,
//! and `dtctl doctor` on the whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::support::{
    aws_json, config_in, dtctl, instance_tag, master_user_data, put_events, STACK,
};
use crate::support::imds::ImdsStandIn;
use crate::support::{
    aws_env, fixtures, free_port, install, repo, stderr, stdout, wait_for, wait_until, Moto, Mount,
    STATUS,
};
use serde_json::Value as Json;

struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker's `dtd agent` and the instance metadata it reads, which must outlive it (fields drop
/// in order: the agent first).
struct Agent {
    _daemon: Daemon,
    _imds: ImdsStandIn,
}

pub fn a_worker_joins(moto: &Moto, out: &BTreeMap<String, String>) {
    // The generated config, with the shared directory moved to a temp dir.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(moto, out, dir.path());
    let check = dtctl(
        moto,
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

    let _dtd = start_dtd(moto, &config, dir.path());
    let (id, ip) = launch_worker(moto, out, dir.path());
    let _agent = start_agent(moto, &config, dir.path(), &id, &ip);
    check_host_files(&efs, &ip);
    // The job acknowledges in the 2018 form, in the log the generated config names.
    std::fs::write(
        job_dir.join("host_worker_log"),
        format!("1 ADDED {ip} 2026-11-23 02:00:00\n"),
    )
    .unwrap();
    wait_until("the worker to be ADDED", Duration::from_secs(30), || {
        instance_tag(moto, &id, STATUS).as_deref() == Some("ADDED")
    });
    let status = dtctl(moto, &config, &["status"]);
    assert!(
        stdout(&status).contains(&format!("Cluster:     {STACK}")),
        "{}",
        stdout(&status)
    );
    check_doctor(moto, &config);
}

fn write_config(moto: &Moto, out: &BTreeMap<String, String>, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let efs = dir.join("efs");
    std::fs::create_dir_all(&efs).unwrap();
    let master = config_in(&master_user_data(moto, out));
    let mut config = master.replace("/myEFSvolume", &efs.display().to_string());
    // The agents' reports on a port of the test's own, and identity documents signed by the
    // tests' stand-in for AWS (no instance metadata signs one off EC2).
    let reports = format!(
        "workers:\n  listen: 127.0.0.1:{}\n  identity_certificates: {}\n",
        free_port(),
        crate::support::imds::identity_certificate().display()
    );
    let listen = line_starting(&config, "  listen: ");
    config = config
        .replace(&listen, "")
        .replacen("workers:\n", &reports, 1);
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

fn start_dtd(moto: &Moto, config: &Path, dir: &Path) -> Daemon {
    let log = std::fs::File::create(dir.join("dtd.log")).unwrap();
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["run", "--config"])
            .arg(config)
            .envs(aws_env(&moto.endpoint()))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("dtd run"),
    )
}

/// The person at the console: a worker from the stack's launch template, until dtd tags it
/// PREPARING. Its id and IP.
fn launch_worker(moto: &Moto, out: &BTreeMap<String, String>, dir: &Path) -> (String, String) {
    let run = aws_json(
        moto,
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
    put_events(moto, &states);
    let preparing = || instance_tag(moto, &id, STATUS).as_deref() == Some("PREPARING");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !preparing() {
        let log = std::fs::read_to_string(dir.join("dtd.log")).unwrap_or_default();
        assert!(
            std::time::Instant::now() < deadline,
            "not PREPARING; dtd's log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (id, ip)
}

/// Its `dtd agent`, with the stack's config and the example prepare-data script where the
/// stack's PrepareDataScriptPath puts it (root's, in a directory only root writes): it runs the
/// script and sends its marker to dtd, proving its instance with its identity document.
fn start_agent(moto: &Moto, config: &Path, dir: &Path, id: &str, ip: &str) -> Agent {
    let prepare = dir.join("efs/prepare");
    std::fs::create_dir(&prepare).unwrap();
    let script = install("prepare-data/synthetic.py", &prepare, 0o755);
    std::fs::rename(&script, prepare.join("prepare-data.py")).unwrap();
    install("prepare-data/dtprepare.py", &prepare, 0o644);
    install("prepare-data/dt_atomic.py", &prepare, 0o644);
    // The release's GPU check, over the STAND-IN nvidia-smi of tests/standins/bin describing one
    // GPU, as on the template's g5.xlarge.
    let check = install("templates/health/gpu_health.py", dir, 0o755);
    let agent_config = dir.join("agent.yaml");
    let text = std::fs::read_to_string(config).unwrap();
    assert!(text.contains("/usr/local/bin/gpu_health.py"), "{text}");
    let text = text.replace("/usr/local/bin/gpu_health.py", &check.display().to_string());
    std::fs::write(&agent_config, text).unwrap();
    let node = dir.join("node.json");
    std::fs::write(&node, r#"{"gpus": 1}"#).unwrap();
    let path = format!(
        "{}:{}",
        repo().join("tests/standins/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let imds = ImdsStandIn::with_identity(ip, id);
    imds.set("instance-type", "g5.xlarge");
    let agent_log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["agent", "--config"])
            .arg(&agent_config)
            .arg("--key-file")
            .arg(dir.join("agent.key"))
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
    Agent {
        _daemon: daemon,
        _imds: imds,
    }
}

/// The worker in every host file the generated config names.
fn check_host_files(efs: &Path, ip: &str) {
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

/// The whole line of `text` that starts with `prefix` (and its newline), or nothing.
fn line_starting(text: &str, prefix: &str) -> String {
    (text.lines())
        .find(|l| l.starts_with(prefix))
        .map_or(String::new(), |l| format!("{l}\n"))
}
