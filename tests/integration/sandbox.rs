//! The real `dtd agent` and `dtd run` inside the file-system view of the stack's systemd unit
//! (templates/systemd/dtd.service, which node.sh installs): they must still do their work when
//! everything but the shared directory is read-only, /tmp is private and the home directories
//! are gone.
//!
//! systemd cannot start the unit here (it is not PID 1 in this container), so the test builds
//! the same view by hand, in a private mount namespace (`unshare --mount --propagation
//! private`), from the unit's own settings, read from that file so the test follows the unit:
//! - `ProtectSystem=strict`: a new root (a tmpfs) with every top-level directory and file of the
//!   host bind-mounted into it read-only, except /dev, /proc and /sys (bound as they are);
//! - `ReadWritePaths=`: read-write binds; the unit's /myEFSvolume is the test's shared
//!   directory, a `-` path is skipped when it does not exist (as systemd does);
//! - `PrivateTmp=yes`: empty tmpfs on /tmp and /var/tmp;
//! - `StateDirectory=`: a writable directory at /var/lib/NAME with `StateDirectoryMode=` (an
//!   empty tmpfs here, as on a node's first boot; its mount point is made on the host, as
//!   systemd makes the directory);
//! - `ProtectHome=yes`: empty read-only tmpfs on /home, /root and /run/user (systemd mounts an
//!   inaccessible node there; to root, which bypasses the mode, both are an empty directory);
//! - `NoNewPrivileges=yes`: `setpriv --no-new-privs`;
//! - `CapabilityBoundingSet=`: `setpriv --bounding-set`, checked in the kernel's `CapBnd`;
//! - `ProtectKernelTunables=yes`: /proc/sys and /sys read-only;
//! - `ProtectKernelModules=yes`: /usr/lib/modules hidden (and no CAP_SYS_MODULE);
//! - `RestrictAddressFamilies=`: a seccomp filter here would need systemd; instead `strace`
//!   records every socket dtd and what it starts open, and each must be of an allowed family;
//!
//! then `chroot` into the new root and exec `dtd` (no pivot_root: a chroot gives the same view
//! to dtd and what it starts). A setting outside these values fails the test: extend it then.
//!
//! What differs from a node, and why: the binaries are built under cargo's target directory and
//! the test's files are in a temporary directory, both under /root or /tmp, which the unit's view
//! hides; so `dtd` and the config are copied into a staging directory that is bound read-only at
//! /dt-test (on a node: /usr/local/bin/dtd and /etc/dt/dtd.yaml, both read-only there too).
//! Top-level directories are bound without their sub-mounts, except the API file systems.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::imds::{self, ImdsStandIn};
use crate::support::{aws_env, wait_for, Cluster};

/// The sandbox settings of dtd.service, as the release ships it (node.sh fills in its role).
#[derive(Debug)]
struct Unit {
    /// (path, optional): `-/x` is optional.
    read_write: Vec<(String, bool)>,
    private_tmp: bool,
    protect_home: bool,
    no_new_privileges: bool,
    /// `CapabilityBoundingSet=`, lower case without `CAP_` (setpriv's names); `None` for all.
    capabilities: Option<Vec<String>>,
    protect_kernel_modules: bool,
    protect_kernel_tunables: bool,
    /// `RestrictAddressFamilies=`; `None` for any.
    address_families: Option<Vec<String>>,
    /// `StateDirectory=` and `StateDirectoryMode=` (default 0755).
    state_directory: Option<(String, String)>,
}

fn unit() -> Unit {
    let body = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/systemd/dtd.service"),
    )
    .unwrap();
    let get = |key: &str| -> Option<String> {
        let values: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .collect();
        assert!(values.len() <= 1, "{key}= twice: this test reads one");
        values.first().map(|v| v.trim().to_string())
    };
    let yes = |key: &str| match get(key).as_deref() {
        Some("yes") | Some("true") => true,
        None | Some("no") | Some("false") => false,
        Some(other) => panic!("{key}={other}: this test reproduces yes and no only"),
    };
    // Settings that change the view and this test does not reproduce.
    for key in [
        "ReadOnlyPaths",
        "InaccessiblePaths",
        "TemporaryFileSystem",
        "BindPaths",
        "BindReadOnlyPaths",
        "RootDirectory",
        "RootImage",
        "PrivateDevices",
        "ProtectControlGroups",
        "ProtectKernelLogs",
        "RuntimeDirectory",
        "DynamicUser",
        "User",
    ] {
        assert_eq!(
            get(key),
            None,
            "{key}= in dtd.service: reproduce it in tests/sandbox.rs"
        );
    }
    assert_eq!(
        get("ProtectSystem").as_deref(),
        Some("strict"),
        "tests/sandbox.rs reproduces ProtectSystem=strict"
    );
    let protect_home = match get("ProtectHome").as_deref() {
        Some("yes") | Some("true") => true,
        None | Some("no") | Some("false") => false,
        Some(other) => panic!("ProtectHome={other}: tests/sandbox.rs reproduces yes and no"),
    };
    let read_write = get("ReadWritePaths")
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| match p.strip_prefix('-') {
            Some(p) => (p.to_string(), true),
            None => (p.to_string(), false),
        })
        .collect();
    let list = |key: &str| -> Option<Vec<String>> {
        let value = get(key)?;
        assert!(
            !value.starts_with('~'),
            "{key}=~...: this test reproduces an allow list"
        );
        Some(value.split_whitespace().map(str::to_string).collect())
    };
    let capabilities = list("CapabilityBoundingSet").map(|caps| {
        (caps.iter())
            .map(|c| c.strip_prefix("CAP_").expect("a CAP_ name").to_lowercase())
            .collect()
    });
    let state_directory = get("StateDirectory").map(|name| {
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "StateDirectory={name}: this test reproduces one plain name"
        );
        let mode = get("StateDirectoryMode").unwrap_or_else(|| "0755".into());
        assert!(
            mode.chars().all(|c| c.is_digit(8)),
            "StateDirectoryMode={mode}"
        );
        (name, mode)
    });
    Unit {
        state_directory,
        read_write,
        private_tmp: yes("PrivateTmp"),
        protect_home,
        no_new_privileges: yes("NoNewPrivileges"),
        capabilities,
        protect_kernel_modules: yes("ProtectKernelModules"),
        protect_kernel_tunables: yes("ProtectKernelTunables"),
        address_families: list("RestrictAddressFamilies"),
    }
}

/// The unit's shared directory, which the stack's dtd.yaml names.
const SHARED: &str = "/myEFSvolume";
/// Where the staging directory (dtd, its config) appears in the sandbox.
const STAGE: &str = "/dt-test";

/// The sh script that builds the view in the new mount namespace and execs its arguments:
/// `sh -c SCRIPT sh ROOT SHARED_SOURCE STAGE_SOURCE TRACE_DIR COMMAND...`.
fn sandbox_script(u: &Unit) -> String {
    let mut s = String::from(
        r#"set -eu
R=$1 shared=$2 stage=$3 trace=$4
shift 4
mount -t tmpfs -o mode=0755 dt-sandbox-root "$R"
for e in /* /.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n=${e#/}
    case "$n" in
    proc | sys | dev) mkdir "$R/$n"; mount --rbind "$e" "$R/$n"; continue ;;
    esac
    if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$R/$n"
    elif [ -d "$e" ]; then mkdir "$R/$n"; mount --bind "$e" "$R/$n"
    else : >"$R/$n"; mount --bind "$e" "$R/$n"
    fi
done
"#,
    );
    if u.private_tmp {
        s += "mount -t tmpfs -o mode=1777 dt-private-tmp \"$R/tmp\"\n";
        s += "mount -t tmpfs -o mode=1777 dt-private-var-tmp \"$R/var/tmp\"\n";
    }
    if u.protect_home {
        s += "for d in home root run/user; do\n";
        s += "    if [ -d \"$R/$d\" ]; then mount -t tmpfs -o mode=0755,ro dt-no-home \"$R/$d\"; fi\n";
        s += "done\n";
    }
    // ProtectSystem=strict: every top-level bind read-only but the API file systems (and the
    // private /tmp, a mount of its own).
    s += r#"for e in "$R"/* "$R"/.[!.]*; do
    [ -e "$e" ] && ! [ -L "$e" ] || continue
    case "${e#"$R"/}" in proc | sys | dev | tmp) continue ;; esac
    mount -o remount,bind,ro "$e"
done
mkdir "$R/dt-test"
mount --bind "$stage" "$R/dt-test"
mount -o remount,bind,ro "$R/dt-test"
"#;
    for (path, optional) in &u.read_write {
        assert!(
            path.starts_with('/')
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c)),
            "ReadWritePaths entry {path:?}"
        );
        if path == SHARED {
            // "-": the shared file system not mounted, only node.sh's `mkdir -p /myEFSvolume`
            // on the root file system (bound onto itself, as ReadWritePaths= would).
            s += &format!("mkdir \"$R{path}\"\n");
            s += &format!("if [ \"$shared\" = - ]; then shared=\"$R{path}\"; fi\n");
            s += &format!("mount --bind \"$shared\" \"$R{path}\"\n");
            continue;
        }
        let source = path.clone();
        let parent_is_root = Path::new(path).parent() == Some(Path::new("/"));
        s += &format!(
            "if [ -e \"{source}\" ] && {{ [ -e \"$R{path}\" ] || {top}; }}; then\n",
            top = if parent_is_root {
                format!("mkdir \"$R{path}\"")
            } else {
                "false".into()
            }
        );
        s += &format!("    mount --bind \"{source}\" \"$R{path}\"\n");
        s += if *optional {
            "fi\n"
        } else {
            "else echo \"sandbox: cannot bind ReadWritePaths entry\" >&2; exit 1; fi\n"
        };
    }
    if let Some((name, mode)) = &u.state_directory {
        s += &format!("mkdir -p \"/var/lib/{name}\"\n");
        s += &format!("mount -t tmpfs -o mode={mode} dt-state \"$R/var/lib/{name}\"\n");
    }
    if u.protect_kernel_tunables {
        // /proc/sys and /sys read-only, as systemd makes them.
        s += "mount --bind \"$R/proc/sys\" \"$R/proc/sys\"\n";
        s += "mount -o remount,bind,ro \"$R/proc/sys\"\n";
        s += "mount -o remount,bind,ro \"$R/sys\"\n";
    }
    if u.protect_kernel_modules {
        // The modules out of sight (CAP_SYS_MODULE is out of the bounding set below).
        s += "for d in usr/lib/modules lib/modules; do\n";
        s += "    if [ -d \"$R/$d\" ] && ! [ -L \"$R/$d\" ]; then mount -t tmpfs -o mode=0,ro dt-no-modules \"$R/$d\"; fi\n";
        s += "done\n";
    }
    // The trace of the sockets dtd opens, read by the test (RestrictAddressFamilies=).
    s += "mkdir \"$R/dt-trace\"\nmount --bind \"$trace\" \"$R/dt-trace\"\n";
    s += "mount -o remount,ro \"$R\"\n";
    // chroot needs CAP_SYS_CHROOT: the bounding set is narrowed inside, by setpriv.
    let mut exec = String::from("exec chroot \"$R\" setpriv");
    if u.no_new_privileges {
        exec += " --no-new-privs";
    }
    if let Some(caps) = &u.capabilities {
        let keep: String = caps.iter().map(|c| format!(",+{c}")).collect();
        exec += &format!(" --bounding-set=-all{keep}");
    }
    if u.address_families.is_some() {
        exec += " strace -f -qq -e trace=socket -o /dt-trace/sockets";
    }
    s + &exec + " \"$@\"\n"
}

struct Sandbox {
    unit: Unit,
    work: tempfile::TempDir,
    shared: PathBuf,
}

impl Sandbox {
    /// `shared`: the directory bound at /myEFSvolume, or "-" for none.
    fn new(shared: &Path, config: &str) -> Sandbox {
        let ns = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "true"])
            .output()
            .expect("running unshare (util-linux)");
        assert!(
            ns.status.success(),
            "this test needs a mount namespace (root, or CAP_SYS_ADMIN): {}",
            String::from_utf8_lossy(&ns.stderr)
        );
        let work = tempfile::tempdir().unwrap();
        let stage = work.path().join("stage");
        std::fs::create_dir(&stage).unwrap();
        std::fs::create_dir(work.path().join("root")).unwrap();
        std::fs::create_dir(work.path().join("trace")).unwrap();
        std::fs::copy(env!("CARGO_BIN_EXE_dtd"), stage.join("dtd")).unwrap();
        // The tests' identity certificate, staged: the unit's private /tmp hides a checkout
        // under /tmp.
        let cert = imds::identity_certificate();
        std::fs::copy(&cert, stage.join("identity.pem")).unwrap();
        let config = config.replace(
            &cert.display().to_string(),
            &format!("{STAGE}/identity.pem"),
        );
        std::fs::write(stage.join("dtd.yaml"), config).unwrap();
        Sandbox {
            unit: unit(),
            work,
            shared: shared.to_path_buf(),
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.work.path().join(format!("{name}.log"))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// The address families of the sockets the sandboxed processes opened so far.
    fn socket_families(&self) -> std::collections::BTreeSet<String> {
        let trace = std::fs::read_to_string(self.work.path().join("trace/sockets"))
            .expect("strace's trace of the sandboxed dtd (strace: scripts/setup installs it)");
        (trace.lines())
            .filter_map(|l| l.split_once("socket(")?.1.split(',').next())
            .map(|family| family.trim().to_string())
            .collect()
    }

    /// `dtd ROLE --config /dt-test/dtd.yaml` in the unit's view; stderr to `ROLE.log`.
    fn start(&self, role: &str, env: Vec<(&'static str, String)>) -> Running {
        let log = std::fs::File::create(self.log_path(role)).unwrap();
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(sandbox_script(&self.unit))
            .arg("sh")
            .arg(self.work.path().join("root"))
            .arg(&self.shared)
            .arg(self.work.path().join("stage"))
            .arg(self.work.path().join("trace"))
            .arg(format!("{STAGE}/dtd"))
            .args([role, "--config", &format!("{STAGE}/dtd.yaml")])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("RUST_LOG", "info")
            .envs(env)
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("starting unshare");
        Running(child)
    }
}

/// Killed when dropped, with its process group (strace leaves what it traced running when it
/// is killed alone); the namespace and its mounts go with it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the prepare-data program saw of the file system, one `name: result` line each; the
/// program runs as root, as the unit's dtd does.
const PROBE: &str = r#"#!/bin/sh
w() { if (: >"$1") 2>/dev/null; then echo writable; else echo read-only; fi; }
{
    echo "usr: $(w /usr/local/dt-probe)"
    echo "etc: $(w /etc/dt-probe)"
    echo "root dir: $(w /dt-probe)"
    echo "var: $(w /var/dt-probe)"
    echo "tmp: $(w /tmp/dt-probe)"
    echo "var/tmp: $(w /var/tmp/dt-probe)"
    echo "tmp entries: $(ls -A /tmp | tr '\n' ' ')"
    echo "root home entries: $(ls -A /root | wc -l)"
    echo "root home: $(w /root/dt-probe)"
    echo "host test dir visible: $([ -e "@HOST_TEST_DIR@" ] && echo yes || echo no)"
    echo "no_new_privs: $(grep NoNewPrivs /proc/self/status | tr -d ' \t' | cut -d: -f2)"
    echo "bounding set: $(grep CapBnd /proc/self/status | tr -d ' \t' | cut -d: -f2)"
    echo "proc/sys mount: $(awk '$2 == "/proc/sys" { split($4, o, ","); print o[1] }' /proc/self/mounts | tail -1)"
    echo "sys mount: $(awk '$2 == "/sys" { split($4, o, ","); print o[1] }' /proc/self/mounts | tail -1)"
    echo "modules: $(ls -A /usr/lib/modules 2>/dev/null | wc -l)"
} >/myEFSvolume/probe
"#;

#[test]
fn agent_and_run_work_in_the_units_sandbox() {
    let u = unit();
    assert!(
        u.read_write.iter().any(|(p, _)| p == SHARED),
        "the unit lets dtd write {SHARED}: {u:?}"
    );

    let c = Cluster::new();
    let efs = c.efs();
    // As master.sh leaves it: the prepare-data program in a root-only directory.
    let prepare = efs.join("prepare");
    std::fs::create_dir(&prepare).unwrap();
    std::fs::set_permissions(&prepare, std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = PROBE.replace("@HOST_TEST_DIR@", &c.dir.path().display().to_string());
    std::fs::write(prepare.join("prepare.sh"), probe).unwrap();
    std::fs::set_permissions(
        prepare.join("prepare.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    // templates/dtd.yaml's shape, for the test's cluster; no allow_local_state_dir: the state
    // directory is on the bind mount, not on the sandbox's root file system.
    let config = format!(
        "cluster: itest\n\
         workers:\n  launch_template: itest-worker-template\n  min: 0\n  max: 4\n{}\
         shared_dir: {SHARED}\n\
         hostfiles:\n  - {{ path: {SHARED}/host_worker, format: mxnet }}\n\
         job:\n  notify: none\n  ack: {{ timeout: 10m }}\n\
         agent:\n  prepare_data: {SHARED}/prepare/prepare.sh\n  args: []\n  timeout: 20s\n  \
         attempts: 1\n  imds_interval: 200ms\n\
         interval: 300ms\n",
        c.reports_config()
    );
    let sandbox = Sandbox::new(&efs, &config);

    let (id, ip) = c.launch(1).remove(0);
    let imds = ImdsStandIn::with_identity(&ip, &id);

    // The agent: makes its key in the unit's StateDirectory, runs the program, which records
    // what it sees, and keeps its report there until dtd listens.
    let env = [imds.env(), aws_env(&c.moto.endpoint())].concat();
    let _agent = sandbox.start("agent", env);
    let probed = || std::fs::read_to_string(efs.join("probe")).unwrap_or_default();
    let since = std::time::Instant::now();
    while !probed().contains("modules: ") {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the sandboxed agent ran no prepare-data program in 30 s; its log:\n{}",
            sandbox.log("agent")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let probe = probed();
    let seen: std::collections::BTreeMap<&str, &str> =
        probe.lines().filter_map(|l| l.split_once(": ")).collect();
    for path in ["usr", "etc", "root dir", "var"] {
        assert_eq!(
            seen[path], "read-only",
            "{path} (ProtectSystem=strict)\n{probe}"
        );
    }
    if u.private_tmp {
        assert_eq!(seen["tmp"], "writable", "{probe}");
        assert_eq!(seen["var/tmp"], "writable", "{probe}");
        assert_eq!(
            seen["tmp entries"].trim(),
            "dt-probe",
            "a private /tmp\n{probe}"
        );
        assert_eq!(seen["host test dir visible"], "no", "{probe}");
    }
    if u.protect_home {
        assert_eq!(seen["root home entries"], "0", "ProtectHome\n{probe}");
        assert_eq!(seen["root home"], "read-only", "ProtectHome\n{probe}");
    }
    if u.no_new_privileges {
        assert_eq!(seen["no_new_privs"], "1", "{probe}");
    }
    if let Some(caps) = &u.capabilities {
        // The bounding set as the kernel reports it: exactly the unit's capabilities.
        let want: u64 = caps.iter().map(|c| 1u64 << capability_number(c)).sum();
        let got = u64::from_str_radix(seen["bounding set"], 16).unwrap();
        assert_eq!(got, want, "CapabilityBoundingSet\n{probe}");
    }
    if u.protect_kernel_tunables {
        assert_eq!(
            seen["proc/sys mount"], "ro",
            "ProtectKernelTunables\n{probe}"
        );
        assert_eq!(seen["sys mount"], "ro", "ProtectKernelTunables\n{probe}");
    }
    if let Some(caps) = &u.capabilities {
        assert!(
            !caps.iter().any(|c| c == "sys_module"),
            "modules can be loaded"
        );
    }
    // This machine may have no modules to hide: then the bounding set above is the check.
    let host_modules = std::fs::read_dir("/usr/lib/modules").map_or(0, |d| d.count());
    if u.protect_kernel_modules && host_modules > 0 {
        assert_eq!(seen["modules"].trim(), "0", "ProtectKernelModules\n{probe}");
    }

    // The master: listens for the agents, finds the instance, hears its agent's report (each in
    // its own sandbox), writes the host file and its state.
    let _run = sandbox.start("run", aws_env(&c.moto.endpoint()));
    c.wait_hosts("the worker in the host file", |h| h == [ip.clone()]);
    let state = std::fs::read_to_string(c.state_dir().join("state.json")).unwrap();
    assert!(
        state.contains("agent_key"),
        "the agent's key pinned from its hello: {state}"
    );
    c.wait_tag(&id, "ADD_QUEUED");
    // The job acknowledges generation 1 in the shared directory's ack file, as a job would.
    std::fs::write(efs.join("ack"), "1\n").unwrap();
    c.wait_tag(&id, "ADDED");
    assert!(
        c.state_dir().join("state.json").is_file(),
        "dtd run's state in {SHARED}/.dt/itest\n{}",
        sandbox.log("run")
    );
    for role in ["agent", "run"] {
        let log = sandbox.log(role);
        assert!(
            !log.contains("Read-only file system") && !log.contains("os error 30"),
            "dtd {role} hit the read-only file system:\n{log}"
        );
        assert!(
            !log.contains("Operation not permitted") && !log.contains("os error 1)"),
            "dtd {role} lacked a capability:\n{log}"
        );
    }
    // Every socket dtd (and what it ran) opened is of a family the unit allows: no other
    // would be given under RestrictAddressFamilies=.
    if let Some(allowed) = &u.address_families {
        let used = sandbox.socket_families();
        assert!(
            used.contains("AF_INET"),
            "the trace saw dtd's connections: {used:?}"
        );
        for family in &used {
            assert!(
                allowed.contains(family),
                "dtd opened an {family} socket: {used:?}"
            );
        }
    }
}

/// The number of a capability by its name (linux/capability.h), for the ones a unit may keep.
fn capability_number(name: &str) -> u32 {
    let names = [
        "chown",
        "dac_override",
        "dac_read_search",
        "fowner",
        "fsetid",
        "kill",
        "setgid",
        "setuid",
        "setpcap",
        "linux_immutable",
        "net_bind_service",
        "net_broadcast",
        "net_admin",
        "net_raw",
        "ipc_lock",
        "ipc_owner",
        "sys_module",
        "sys_rawio",
        "sys_chroot",
        "sys_ptrace",
        "sys_pacct",
        "sys_admin",
        "sys_boot",
        "sys_nice",
        "sys_resource",
        "sys_time",
        "sys_tty_config",
        "mknod",
        "lease",
        "audit_write",
        "audit_control",
        "setfcap",
        "mac_override",
        "mac_admin",
        "syslog",
    ];
    names
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("capability {name}")) as u32
}

#[test]
fn the_state_directory_must_be_a_mount_in_the_sandbox_too() {
    // Not vacuous: with nothing mounted at /myEFSvolume, dtd run refuses to keep its state on
    // the root file system (store::require_mounted), as on a node whose EFS mount failed: the
    // sandbox's root is a file system of its own, and the shared directory is then on it.
    let c = Cluster::new();
    let config = format!(
        "cluster: itest\nworkers:\n  launch_template: itest-worker-template\n  max: 4\n  listen: 127.0.0.1:0\n\
         shared_dir: {SHARED}\nhostfiles:\n  - {{ path: {SHARED}/host_worker, format: mxnet }}\n\
         job:\n  notify: none\ninterval: 300ms\n"
    );
    let sandbox = Sandbox::new(Path::new("-"), &config);
    let mut run = sandbox.start("run", aws_env(&c.moto.endpoint()));
    let status = wait_for(
        "dtd run to refuse an unmounted shared directory",
        Duration::from_secs(30),
        || run.0.try_wait().unwrap(),
        |s| s.is_some(),
    )
    .unwrap();
    assert!(!status.success());
    let log = sandbox.log("run");
    assert!(log.contains("allow_local_state_dir"), "{log}");
}
