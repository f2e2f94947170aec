//! Test harness: a real AWS API (moto's server on a loopback port), the real SDK client, the AWS
//! CLI as the person at the console, and the real `dtd` / `dtctl` binaries.
#![allow(dead_code)]
pub mod agents;
pub mod attacker;
pub mod autoscaling;
pub mod ec2_capacity;
pub mod fixtures;
pub mod gate;
pub mod imds;
pub mod ports;
pub mod prometheus;
pub mod server;
pub mod webhook;
pub mod world;

pub use gate::Gate;
pub use ports::free_port;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{
    LaunchTemplateSpecification, LaunchTemplateTagSpecificationRequest, RequestLaunchTemplateData,
    ResourceType, Tag,
};

pub use dt::protocol::markers::MarkerKind;

pub const CLUSTER: &str = "itest";
pub const ELASTIC: &str = "itest-aws-dl-cfn-elastic-worker";
pub const STATUS: &str = "elastic_worker_status";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Copies a file of the repository into `dir` with `mode`, as a node installs it: `dtd agent`
/// runs only a program no one but its owner can change, in a directory the same holds for, and a
/// checkout may be group-writable.
pub fn install(from_repo: &str, dir: &Path, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let from = repo().join(from_repo);
    let name = from.file_name().expect("a file name");
    let to = dir.join(name);
    std::fs::copy(&from, &to).expect("copying a program");
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).expect("chmod");
    to
}

/// A tool from the project's virtualenv (scripts/setup), or the path in `var`.
fn tool(var: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin").join(name));
    assert!(
        path.exists(),
        "{} not found: run scripts/setup (it installs moto and the AWS CLI into .venv) or set {var}",
        path.display()
    );
    path
}

/// Every process below `root` (torchrun's workers run in sessions of their own).
pub fn tree(root: i32) -> Vec<i32> {
    let mut parent = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r.to_string()) else {
            continue;
        };
        if let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<i32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (child, pp) in &parent {
            if *pp == p {
                out.push(*child);
                frontier.push(*child);
            }
        }
    }
    out
}

/// Who the tests' jobs run as (`job.launcher.user`): `nobody` when the tests run as root (as
/// CI does), since the job never runs as root; the tests' own user otherwise, the only one an
/// unprivileged agent can start it as.
pub fn job_user() -> (u32, u32) {
    match nix::unistd::geteuid().is_root() {
        true => (65534, 65534),
        false => (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        ),
    }
}

/// Gives `path` to the job's user, so the job can write it.
pub fn give_to_job(path: &Path) {
    let (uid, gid) = job_user();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown to the job's user");
}

/// Lets the job's user reach what is under `dir` (a test's temp directory is 0700).
pub fn open_to_job(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod 755");
}

/// The virtualenv with PyPI's torch that `scripts/setup --tests` keeps outside the clone
/// (`$DT_TORCH_VENV`, see scripts/env.sh); the torchrun tests fail, never skip, without it.
pub fn torch_venv() -> PathBuf {
    let venv = std::env::var_os("DT_TORCH_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(".cache/dynamic-training/torch"))
        })
        .expect("DT_TORCH_VENV or HOME");
    assert!(
        venv.join("bin/torchrun").exists(),
        "{}/bin/torchrun not found: run scripts/setup --tests (it installs PyTorch there) or set DT_TORCH_VENV",
        venv.display()
    );
    venv
}

/// moto's server on 127.0.0.1, stopped when dropped. Its log is kept and printed when the test
/// that used it fails: the emulator's own traceback is the first thing a failure needs.
pub struct Moto {
    pub port: u16,
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Moto {
    pub fn start() -> Moto {
        Moto::start_with(&[])
    }

    /// With moto's own settings in its environment (e.g. `INITIAL_NO_AUTH_ACTION_COUNT`).
    pub fn start_with(env: &[(&str, &str)]) -> Moto {
        let port = free_port();
        let log = tempfile::NamedTempFile::new().expect("moto's log file");
        let child = Command::new(tool("DT_MOTO_SERVER", "moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log.reopen().expect("moto's log file"))
            .spawn()
            .expect("starting moto_server");
        let mut moto = Moto { port, child, log };
        // Its own banner first (printed once its socket listens), then an HTTP answer: the
        // condition the calls need. A connection accepted on the port was once followed by a
        // refused first call.
        wait_until(
            "moto to answer on its port",
            Duration::from_secs(30),
            || {
                if let Ok(Some(exit)) = moto.child.try_wait() {
                    print_moto_errors(moto.log.path());
                    panic!("moto_server exited at its start: {exit}");
                }
                let log = std::fs::read_to_string(moto.log.path()).unwrap_or_default();
                let ours = log.contains(&format!("Running on http://127.0.0.1:{port}"));
                ours && prometheus::get(([127, 0, 0, 1], port).into(), "/moto-api/").is_ok()
            },
        );
        moto
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Freezes the emulator: connections hang, as with a network partition.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        signal(self.pid(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            print_moto_errors(self.log.path());
        }
    }
}

/// The lines of moto's log that are not its request log (tracebacks, warnings), at most the last
/// 80: the request log of a thousand-worker test runs to tens of thousands of lines.
fn print_moto_errors(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| !(l.contains("\"GET ") || l.contains("\"POST ")) || l.contains("\" 5"))
        .collect();
    let tail = &errors[errors.len().saturating_sub(80)..];
    eprintln!(
        "---- moto log (not its 2xx/4xx requests) ----\n{}",
        tail.join("\n")
    );
}

pub fn signal(pid: i32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

/// Polls `f` until it holds; panics with `what` after `timeout`. Prefer [`wait_for`] when there
/// is a value to show: a failing wait should say what it last saw.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    wait_for(what, timeout, &mut f, |done| *done);
}

/// Polls `probe` until `done` holds for what it returns, and returns that value. After `timeout`
/// panics with what it waited for and the last value seen, so a slow machine and a wrong outcome
/// can be told apart.
pub fn wait_for<T: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let start = Instant::now();
    loop {
        let value = probe();
        if done(&value) {
            return value;
        }
        if start.elapsed() >= timeout {
            let mut last = format!("{value:#?}");
            if last.len() > 4000 {
                last.truncate(4000);
                last.push_str("...");
            }
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The AWS environment every process of a test gets: the emulator and fake credentials.
pub fn aws_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_DEFAULT_REGION", "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

/// The AWS CLI against the emulator at `endpoint`: its stdout, or a panic with its stderr.
pub fn aws_cli(endpoint: &str, args: &[&str]) -> String {
    aws_cli_with(endpoint, &[], args)
}

/// [`aws_cli`] with more of the environment (`extra` after the emulator's).
pub fn aws_cli_with(endpoint: &str, extra: &[(&str, String)], args: &[&str]) -> String {
    try_aws_cli_with(endpoint, extra, args).unwrap_or_else(|e| panic!("{e}"))
}

/// The AWS CLI's stdout, or what it said when it failed. For a poll that is read again until it
/// holds: moto's threaded server can answer a read racing dtd's writes with a 500 that the CLI
/// cannot parse and does not retry, and a poll takes that for "not yet".
pub fn try_aws_cli_with(
    endpoint: &str,
    extra: &[(&str, String)],
    args: &[&str],
) -> Result<String, String> {
    // The CLI's SQS client ignores AWS_ENDPOINT_URL (it keeps queue.amazonaws.com).
    let out = Command::new(tool("DT_AWS_CLI", "aws"))
        .args(["--endpoint-url", endpoint])
        .args(args)
        .envs(aws_env(endpoint))
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("running the AWS CLI");
    if !out.status.success() {
        return Err(format!(
            "aws {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// A tmpfs mounted for a test, unmounted (lazily: dtd may still hold a file) when dropped.
pub struct Mount(PathBuf);

impl Mount {
    /// `source` is the name the mount table shows for it (a tmpfs takes any).
    pub fn tmpfs(at: &Path, source: &str) -> Mount {
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", source])
            .arg(at)
            .status()
            .expect("running mount");
        assert!(
            mounted.success(),
            "mounting a tmpfs at {} needs root (CI runs as root)",
            at.display()
        );
        Mount(at.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// One cluster: an emulator, a launch template, a shared directory and (when started) `dtd`.
pub struct Cluster {
    pub moto: Moto,
    pub rt: tokio::runtime::Runtime,
    pub ec2: aws_sdk_ec2::Client,
    pub dir: tempfile::TempDir,
    pub template_id: String,
    pub dtd: Option<Child>,
    /// Extra YAML appended to the config (top-level keys) and lines under `workers:`.
    pub extra: String,
    pub worker_extra: String,
    /// Where dtd and dtctl send EC2 calls when not to moto itself (`AWS_ENDPOINT_URL_EC2`),
    /// e.g. the capacity stand-in.
    pub ec2_endpoint: Option<String>,
    /// The workers' agents as the tests play them (see `agents`).
    pub agents: agents::Agents,
    /// Where dtd takes the agents' reports (`workers.listen`, on loopback).
    pub report_port: u16,
    /// The subnet instances are launched into unless a test says otherwise (10.0.0.0/16 in a
    /// VPC of its own): EC2 gives an instance an IP of its subnet, which moto does only when
    /// the launch names the subnet, and dtd looks up a report's IP only within the workers'
    /// subnets.
    pub subnet: String,
}

impl Cluster {
    pub fn new() -> Cluster {
        let moto = Moto::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let endpoint = moto.endpoint();
        let ec2 = rt.block_on(async {
            let creds =
                aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "test");
            let conf = aws_sdk_ec2::Config::builder()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new("us-east-1"))
                .credentials_provider(creds)
                .endpoint_url(endpoint)
                .build();
            aws_sdk_ec2::Client::from_conf(conf)
        });
        let mut c = Cluster {
            moto,
            rt,
            ec2,
            dir: tempfile::tempdir().expect("tempdir"),
            template_id: String::new(),
            dtd: None,
            extra: String::new(),
            worker_extra: String::new(),
            ec2_endpoint: None,
            agents: agents::Agents::default(),
            report_port: free_port(),
            subnet: String::new(),
        };
        c.subnet = c.workers_subnet();
        std::fs::create_dir_all(c.efs()).expect("efs dir");
        c.template_id = c.create_template("itest-worker-template", "Worker");
        c
    }

    pub fn efs(&self) -> PathBuf {
        self.dir.path().join("efs")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("dtd.yaml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.efs().join(".dt").join(CLUSTER)
    }

    fn create_template(&self, name: &str, node_type: &str) -> String {
        let tags = LaunchTemplateTagSpecificationRequest::builder()
            .resource_type(ResourceType::Instance)
            .tags(Tag::builder().key("NodeType").value(node_type).build())
            .tags(Tag::builder().key(ELASTIC).value("true").build())
            .build();
        let data = RequestLaunchTemplateData::builder()
            .image_id("ami-12c6146b")
            .instance_type(aws_sdk_ec2::types::InstanceType::P32xlarge)
            .tag_specifications(tags)
            .build();
        let out = self
            .rt
            .block_on(
                self.ec2
                    .create_launch_template()
                    .launch_template_name(name)
                    .launch_template_data(data)
                    .send(),
            )
            .expect("CreateLaunchTemplate");
        out.launch_template()
            .and_then(|t| t.launch_template_id())
            .expect("template id")
            .to_string()
    }

    fn workers_subnet(&self) -> String {
        let cidr = "10.0.0.0/16";
        let vpc = (self.rt)
            .block_on(self.ec2.create_vpc().cidr_block(cidr).send())
            .expect("CreateVpc");
        let vpc = vpc.vpc().and_then(|v| v.vpc_id()).expect("vpc id");
        let subnet = self
            .rt
            .block_on(
                (self.ec2.create_subnet())
                    .vpc_id(vpc)
                    .cidr_block(cidr)
                    .availability_zone("us-east-1a")
                    .send(),
            )
            .expect("CreateSubnet");
        let id = subnet
            .subnet()
            .and_then(|s| s.subnet_id())
            .expect("subnet id");
        id.to_string()
    }

    /// A second template in the same account, for instances that are not this cluster's.
    pub fn foreign_template(&self) -> String {
        self.create_template("someone-elses-template", "Worker")
    }

    /// Launches `count` instances from a template in one reservation: (id, private IP) pairs.
    pub fn launch_from(&self, template_id: &str, count: i32) -> Vec<(String, String)> {
        self.run(template_id, count, None)
    }

    /// Spot workers (moto marks them `InstanceLifecycle: spot`, as EC2 does): the instances a
    /// Spot interruption warning can be about.
    pub fn launch_spot(&self, count: i32) -> Vec<(String, String)> {
        let spot = aws_sdk_ec2::types::InstanceMarketOptionsRequest::builder()
            .market_type(aws_sdk_ec2::types::MarketType::Spot)
            .build();
        let t = self.template_id.clone();
        self.run(&t, count, Some(spot))
    }

    fn run(
        &self,
        template_id: &str,
        count: i32,
        market: Option<aws_sdk_ec2::types::InstanceMarketOptionsRequest>,
    ) -> Vec<(String, String)> {
        self.run_in(template_id, count, market, None)
    }

    /// RunInstances from a template, optionally into a subnet at a private IP.
    fn run_in(
        &self,
        template_id: &str,
        count: i32,
        market: Option<aws_sdk_ec2::types::InstanceMarketOptionsRequest>,
        at: Option<(&str, &str)>,
    ) -> Vec<(String, String)> {
        let spec = LaunchTemplateSpecification::builder()
            .launch_template_id(template_id)
            .build();
        let out = self
            .rt
            .block_on(
                self.ec2
                    .run_instances()
                    .launch_template(spec)
                    .subnet_id(at.map_or(self.subnet.as_str(), |(subnet, _)| subnet))
                    .set_private_ip_address(at.map(|(_, ip)| ip.to_string()))
                    .set_instance_market_options(market)
                    .min_count(count)
                    .max_count(count)
                    .send(),
            )
            .expect("RunInstances");
        out.instances()
            .iter()
            .map(|i| {
                (
                    i.instance_id().unwrap().to_string(),
                    i.private_ip_address().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// A VPC and a subnet on 127.0.0.0/24 (moto accepts it; EC2 would not): instances launched
    /// into it at 127.0.0.N are reachable on this machine's loopback, so their agents and
    /// whatever those start can talk to each other for real.
    pub fn loopback_subnet(&self) -> String {
        let (_, subnets) = self.vpc_with_subnets("127.0.0.0/24", &[("127.0.0.0/24", "us-east-1a")]);
        subnets[0].clone()
    }

    /// One instance from the cluster's template at `ip` in `subnet`, Spot when `spot`: its id.
    pub fn launch_at(&self, subnet: &str, ip: &str, spot: bool) -> String {
        let market = spot.then(|| {
            aws_sdk_ec2::types::InstanceMarketOptionsRequest::builder()
                .market_type(aws_sdk_ec2::types::MarketType::Spot)
                .build()
        });
        let t = self.template_id.clone();
        let (id, at) = self.run_in(&t, 1, market, Some((subnet, ip))).remove(0);
        assert_eq!(at, ip, "moto kept the IP asked for");
        id
    }

    pub fn launch(&self, count: i32) -> Vec<(String, String)> {
        let t = self.template_id.clone();
        self.launch_from(&t, count)
    }

    /// Mode 0600, as the stack writes it: a config may hold a webhook's URL, a secret.
    pub fn write_config(&self, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.config_path();
        std::fs::write(&path, body).expect("writing config");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    /// A config with the defaults most tests want; `job` is the YAML of the `job:` key.
    pub fn config(&self, min: usize, max: usize, base: &[&str], job: &str) -> String {
        let efs = self.efs().display().to_string();
        let base = base
            .iter()
            .map(|b| format!("\"{b}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "cluster: {CLUSTER}\nworkers:\n  launch_template: itest-worker-template\n  min: {min}\n  max: {max}\n  base_hosts: [{base}]\n{}{}shared_dir: {efs}\nhostfiles:\n  - {{ path: {efs}/host_worker, format: mxnet }}\n  - {{ path: {efs}/hosts.mpi, format: mpi }}\njob:\n{job}\ninterval: 300ms\nallow_local_state_dir: true\n{}",
            self.reports_config(),
            self.worker_extra,
            self.extra
        )
    }

    /// Under `workers:`: where dtd takes the agents' reports, and whose identity documents it
    /// trusts (the tests' stand-in signer's, see `imds`).
    pub fn reports_config(&self) -> String {
        format!(
            "  listen: 127.0.0.1:{}\n  identity_certificates: {}\n",
            self.report_port,
            imds::identity_certificate().display()
        )
    }

    pub fn start_dtd(&mut self) {
        self.start_dtd_with(&[]);
    }

    /// `start_dtd` with more environment for dtd (an allocator's settings, say).
    pub fn start_dtd_with(&mut self, env: &[(&str, &str)]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("dtd.log"))
            .expect("dtd log");
        let child = Command::new(env!("CARGO_BIN_EXE_dtd"))
            .args(["run", "--config"])
            .arg(self.config_path())
            .envs(self.env())
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting dtd");
        self.dtd = Some(child);
    }

    /// The AWS environment of dtd and dtctl: moto, or the EC2 stand-in for EC2's calls.
    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = aws_env(&self.moto.endpoint());
        env.extend((self.ec2_endpoint.clone()).map(|e| ("AWS_ENDPOINT_URL_EC2", e)));
        env
    }

    pub fn dtd_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dtd.log")).unwrap_or_default()
    }

    /// SIGTERM, as systemd stops it, and waits for it to exit.
    pub fn stop_dtd(&mut self) {
        if let Some(mut c) = self.dtd.take() {
            signal(c.id() as i32, "TERM");
            let _ = c.wait();
        }
    }

    /// SIGKILL: no chance to clean up, as in a power loss.
    pub fn kill_dtd(&mut self) {
        if let Some(mut c) = self.dtd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn dtctl(&self, args: &[&str]) -> Output {
        self.dtctl_with(&self.config_path(), args)
    }

    /// `dtctl` with another config file than the cluster's own.
    pub fn dtctl_with(&self, config: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_dtctl"))
            .arg("--config")
            .arg(config)
            .args(args)
            .envs(self.env())
            .output()
            .expect("running dtctl")
    }

    /// A VPC with a subnet per (CIDR, Availability Zone), made with the AWS CLI: the VPC's id and
    /// the subnets' ids, in order.
    pub fn vpc_with_subnets(&self, cidr: &str, subnets: &[(&str, &str)]) -> (String, Vec<String>) {
        let text = ["--output", "text"];
        let create = [
            "ec2",
            "create-vpc",
            "--cidr-block",
            cidr,
            "--query",
            "Vpc.VpcId",
        ];
        let vpc = self.aws(&[&create[..], &text].concat());
        let ids = (subnets.iter())
            .map(|(cidr, zone)| {
                let args = [
                    "ec2",
                    "create-subnet",
                    "--vpc-id",
                    &vpc,
                    "--cidr-block",
                    cidr,
                ];
                let at = ["--availability-zone", zone, "--query", "Subnet.SubnetId"];
                self.aws(&[&args[..], &at, &text].concat())
            })
            .collect();
        (vpc, ids)
    }

    /// The person at the console: the real AWS CLI against the emulator.
    pub fn aws(&self, args: &[&str]) -> String {
        aws_cli(&self.moto.endpoint(), args).trim().to_string()
    }

    /// [`Cluster::aws`] for a poll: the CLI's error instead of a panic (see [`try_aws_cli_with`]).
    pub fn try_aws(&self, args: &[&str]) -> Result<String, String> {
        try_aws_cli_with(&self.moto.endpoint(), &[], args).map(|out| out.trim().to_string())
    }

    /// Deletes the elastic tag exactly as a person would from the console.
    pub fn delete_elastic_tag(&self, id: &str) {
        self.aws(&[
            "ec2",
            "delete-tags",
            "--resources",
            id,
            "--tags",
            &format!("Key={ELASTIC}"),
        ]);
    }

    pub fn tag(&self, id: &str, key: &str) -> Option<String> {
        let out = self
            .rt
            .block_on(self.ec2.describe_instances().instance_ids(id).send())
            .expect("DescribeInstances");
        let inst = out.reservations().first()?.instances().first()?.clone();
        inst.tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value().map(str::to_string))
    }

    /// Puts a tag on an instance, as anyone with `ec2:CreateTags` on it can.
    pub fn set_tag(&self, id: &str, key: &str, value: &str) {
        let tag = Tag::builder().key(key).value(value).build();
        self.rt
            .block_on(self.ec2.create_tags().resources(id).tags(tag).send())
            .expect("CreateTags");
    }

    pub fn state_of(&self, id: &str) -> String {
        let out = self
            .rt
            .block_on(self.ec2.describe_instances().instance_ids(id).send())
            .expect("DescribeInstances");
        let inst = out.reservations()[0].instances()[0].clone();
        inst.state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default()
    }

    pub fn hosts(&self) -> Vec<String> {
        std::fs::read_to_string(self.efs().join("host_worker"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits until the host file's IPs satisfy `f`; returns them.
    pub fn wait_hosts(&self, what: &str, f: impl Fn(&[String]) -> bool) -> Vec<String> {
        let what = format!("{what} (host_worker)");
        wait_for(&what, Duration::from_secs(30), || self.hosts(), |h| f(h))
    }

    /// The generation of the host files as they are now: dtd writes the `generation` file after
    /// the host files in the same pass (the job contract: read it first), so one read just
    /// after the host file changed may still name the generation before, which CI once
    /// acknowledged, leaving a removal unacknowledged. Waits until the file names the
    /// generation of dtd's state (saved before the host files).
    pub fn written_generation(&self) -> String {
        wait_for(
            "the generation file to name the generation of dtd's state",
            Duration::from_secs(30),
            || {
                let text = std::fs::read_to_string(self.state_dir().join("state.json"));
                let state: serde_json::Value =
                    serde_json::from_str(&text.unwrap_or_default()).unwrap_or_default();
                let file = std::fs::read_to_string(self.efs().join("generation"));
                (state["generation"].as_u64(), file.unwrap_or_default())
            },
            |(want, file)| want.is_some_and(|g| file.trim() == g.to_string()),
        )
        .1
    }

    pub fn wait_tag(&self, id: &str, value: &str) {
        wait_for(
            &format!("{id} to be tagged {STATUS}={value}"),
            Duration::from_secs(30),
            || self.tag(id, STATUS),
            |t| t.as_deref() == Some(value),
        );
    }

    /// Waits until `id` has `n` journal lines of `kind`; on timeout shows the instance's lines.
    pub fn wait_events(&self, kind: &str, id: &str, n: usize) {
        wait_for(
            &format!("{n} `{kind}` event(s) for {id} in the journal"),
            Duration::from_secs(30),
            || self.journal_of(id),
            |lines| lines.iter().filter(|e| e["kind"] == kind).count() == n,
        );
    }

    /// The journal lines about one instance.
    pub fn journal_of(&self, id: &str) -> Vec<serde_json::Value> {
        let mut lines = self.journal();
        lines.retain(|e| e["instance"] == id);
        lines
    }

    /// Waits until dtd's status report satisfies `f` and returns it; polls, so a report not
    /// written yet (dtd still in its first pass) or one pass behind is waited for, not a failure.
    pub fn wait_status(
        &self,
        what: &str,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        wait_for(
            &format!("dtd's status report to show {what}"),
            Duration::from_secs(30),
            || self.try_status(),
            |s| s.is_object() && f(s),
        )
    }

    /// Waits until `dtctl status` prints `text`, and returns what it printed.
    pub fn wait_status_text(&self, text: &str) -> String {
        wait_for(
            &format!("`{text}` in dtctl status"),
            Duration::from_secs(30),
            || {
                let out = self.dtctl(&["status"]);
                format!("{}{}", stdout(&out), stderr(&out))
            },
            |printed| printed.contains(text),
        )
    }

    /// Waits until dtd has finished `n` more passes (its status report rewritten `n` times):
    /// what a check that something does *not* happen needs, where a fixed sleep may cover no
    /// pass at all on a loaded machine.
    pub fn wait_passes(&self, n: usize) {
        let mut last = self.wait_status("a first pass", |_| true)["updated_at"].clone();
        for i in 1..=n {
            let s = self.wait_status(&format!("pass {i} of {n} after {last}"), |s| {
                s["updated_at"] != last
            });
            last = s["updated_at"].clone();
        }
    }

    /// Every journaled event, across the journal's rotated files, oldest first.
    pub fn journal(&self) -> Vec<serde_json::Value> {
        let path = self.state_dir().join("events.jsonl");
        let files = dt::act::journal::files(&path).unwrap_or_default();
        (files.iter())
            .flat_map(|f| {
                std::fs::read_to_string(f)
                    .unwrap_or_default()
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect()
    }

    pub fn events_of(&self, kind: &str, id: &str) -> usize {
        self.journal()
            .iter()
            .filter(|e| e["kind"] == kind && e["instance"] == id)
            .count()
    }

    /// The status report, or null before dtd has finished its first pass: for polling.
    pub fn try_status(&self) -> serde_json::Value {
        let out = self.dtctl(&["status", "-o", "json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }

    /// The status report, waiting for dtd to write its first one (it does so at the end of its
    /// first pass, after the host files): panics with dtctl's last error if none comes.
    pub fn status_json(&self) -> serde_json::Value {
        let report = wait_for(
            "dtd's first status report (dtctl status -o json)",
            Duration::from_secs(30),
            || {
                let out = self.dtctl(&["status", "-o", "json"]);
                match out.status.success() {
                    true => serde_json::from_slice(&out.stdout).map_err(|e| e.to_string()),
                    false => Err(stderr(&out)),
                }
            },
            |r: &Result<serde_json::Value, String>| r.is_ok(),
        );
        report.unwrap_or_default()
    }

    pub fn append_log(&self, line: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.efs().join("host_worker_log"))
            .expect("host_worker_log");
        f.write_all(line.as_bytes()).expect("append");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_dtd();
        if std::thread::panicking() {
            eprintln!("---- dtd log ----\n{}", self.dtd_log());
        }
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// The example job (examples/elastic_job.py), stopped with SIGTERM when dropped.
pub struct Job(pub Child);

impl Drop for Job {
    fn drop(&mut self) {
        signal(self.0.id() as i32, "TERM");
        let _ = self.0.wait();
    }
}

pub fn start_example_job(c: &Cluster) -> Job {
    start_example_job_with(c, "10")
}

/// The example job with `steps_per_epoch` steps of 20 ms between its epoch-end checkpoints.
pub fn start_example_job_with(c: &Cluster, steps_per_epoch: &str) -> Job {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/elastic_job.py");
    let log = std::fs::File::create(c.dir.path().join("job.log")).unwrap();
    let child = Command::new("python3")
        .arg(script)
        .arg("--shared-dir")
        .arg(c.efs())
        .args(["--step-time", "0.02", "--steps-per-epoch", steps_per_epoch])
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("starting examples/elastic_job.py");
    Job(child)
}

pub fn job_log(c: &Cluster) -> String {
    std::fs::read_to_string(c.dir.path().join("job.log")).unwrap_or_default()
}

/// The EventBridge side the stack sets up, made by hand with the AWS CLI: a queue and one rule
/// for the events dtd handles, delivering to it. Returns the queue URL.
pub fn create_event_queue(c: &Cluster) -> String {
    let url = c.aws(&[
        "sqs",
        "create-queue",
        "--queue-name",
        "itest-events",
        "--query",
        "QueueUrl",
        "--output",
        "text",
    ]);
    let arn = c.aws(&[
        "sqs",
        "get-queue-attributes",
        "--queue-url",
        &url,
        "--attribute-names",
        "QueueArn",
        "--query",
        "Attributes.QueueArn",
        "--output",
        "text",
    ]);
    let pattern = serde_json::json!({
        "source": ["aws.ec2", "aws.autoscaling"],
        "detail-type": [
            "EC2 Spot Instance Interruption Warning",
            "EC2 Instance Rebalance Recommendation",
            "EC2 Instance State-change Notification",
            "EC2 Instance-terminate Lifecycle Action",
            "EC2 Instance-launch Lifecycle Action",
            "Capacity Block Expiration Warning"
        ]
    });
    c.aws(&[
        "events",
        "put-rule",
        "--name",
        "itest-events",
        "--event-pattern",
        &pattern.to_string(),
    ]);
    let target = serde_json::json!([{ "Id": "queue", "Arn": arn }]);
    c.aws(&[
        "events",
        "put-targets",
        "--rule",
        "itest-events",
        "--targets",
        &target.to_string(),
    ]);
    // AWS Health scheduled changes and the elastic tag's changes, through the stack's own rules.
    for (rule, name) in [
        ("HealthEventsRule", "itest-health"),
        ("TagEventsRule", "itest-tags"),
    ] {
        let pattern = fixtures::stack_rule_pattern(rule, CLUSTER);
        let put = ["events", "put-rule", "--name", name];
        c.aws(&[&put[..], &["--event-pattern", &pattern.to_string()]].concat());
        let targets = ["events", "put-targets", "--rule", name, "--targets"];
        c.aws(&[&targets[..], &[target.to_string().as_str()]].concat());
    }
    url
}

/// Puts PutEvents entries on the bus, as the AWS service would.
pub fn put_entries(c: &Cluster, entries: &[serde_json::Value]) {
    let entries = serde_json::Value::from(entries.to_vec()).to_string();
    c.aws(&["events", "put-events", "--entries", &entries]);
}

/// What EC2 does two minutes before reclaiming a Spot instance, injected into EventBridge.
pub fn put_ec2_event(c: &Cluster, detail_type: &str, detail: serde_json::Value) {
    let entry = serde_json::json!([{
        "Source": "aws.ec2",
        "DetailType": detail_type,
        "Detail": detail.to_string(),
        "Resources": [],
    }]);
    c.aws(&["events", "put-events", "--entries", &entry.to_string()]);
}

/// Messages still in the queue, visible or in flight.
pub fn queue_depth(c: &Cluster, url: &str) -> u64 {
    let out = c.aws(&[
        "sqs",
        "get-queue-attributes",
        "--queue-url",
        url,
        "--attribute-names",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "--output",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("queue attributes JSON");
    [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    ]
    .iter()
    .map(|k| {
        v["Attributes"][k]
            .as_str()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    })
    .sum()
}
