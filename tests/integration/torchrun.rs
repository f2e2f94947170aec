//! A real PyTorch elastic job under `dtd agent`'s launcher (`job.launcher`): torch from PyPI
//! (`scripts/setup --tests`), torchrun with the c10d rendezvous and gloo on the CPU, one agent
//! per "node" on its own loopback address (moto gives the instances 127.0.0.N), `dtd run`
//! against moto. `examples/torch_job.py` trains a small DDP model and checkpoints every 20 steps.
//!
//! One story, in order: two nodes train; a third joins (world 2 -> 3); one vanishes (all its
//! processes SIGSTOPped: the others train again without it, long before gloo's 30 minutes; it is
//! kept running, since a silence is no one's word, until a person terminates it);
//! `dtd run` is killed -9 and started again without disturbing training; the node holding the
//! rendezvous leaves by its elastic tag (terminated only after the job acknowledged and its
//! launcher stopped); a Spot node joins and gets a Spot warning (its processes gone before the
//! deadline); the job finishes (`job_finished`) with the loss of a single-process run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::agent::process_gone;
use crate::support::imds::ImdsStandIn;
use crate::support::{self, free_port, signal, tree, wait_until, Cluster};

const STEPS: u64 = 1500;
pub(crate) const PHASE: Duration = Duration::from_secs(150);

/// At most two stories at a time: each runs three torchruns and their workers, mostly waiting
/// (a tiny model, about half a core), so two share two cores well while a third would make slow
/// steps, which are not what these tests are about. Run alone, the stories were the suite's
/// critical path (about 16 minutes of its 17).
pub(crate) static STORIES: support::Gate = support::Gate::new(2);

/// The training script of a story: the repository's files to install beside it (the script
/// first) and its arguments, as YAML list items (`{efs}` stands for the shared directory).
pub(crate) struct Script {
    pub files: &'static [&'static str],
    pub args: String,
}

fn torch_job() -> Script {
    Script {
        files: &["examples/torch_job.py"],
        args: format!("--dir, {{efs}}, --steps, '{STEPS}', --step-sleep, '0.05', --checkpoint-every, '20', --stop-timeout, '3'"),
    }
}

pub(crate) struct Node {
    pub ip: &'static str,
    pub id: String,
    pub imds: ImdsStandIn,
    pub agent: Child,
    log: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- agent {} (last lines) ----", self.ip);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
        for pid in tree(self.agent.id() as i32).into_iter().rev() {
            signal(pid, "KILL");
        }
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}

pub(crate) struct Story {
    pub c: Cluster,
    /// The loopback subnet (127.0.0.0/24) the nodes are launched into.
    pub subnet: String,
}

/// The four changes scripts/bench-torchrun compares across strategies.
pub(crate) const JOIN: &str = "join (from its marker)";
pub(crate) const LEAVE: &str = "planned leave (delete-tags)";
pub(crate) const VANISH: &str = "vanished node (SIGSTOP)";
pub(crate) const SPOT: &str = "Spot warning";

/// One figure for scripts/bench-torchrun: `FIGURE <strategy> | <change> | <measure>: <value>`.
pub(crate) fn figure(strategy: &str, change: &str, measure: &str, value: f64) {
    // On a line of its own: the nodes' processes share stderr and may have left one unfinished.
    eprintln!("\nFIGURE {strategy} | {change} | {measure}: {value:.2}");
}

pub(crate) struct Before {
    step: u64,
    procs: Vec<Vec<i32>>,
    pub t: Instant,
}

impl Story {
    /// moto, a loopback subnet, the config (`launcher_yaml`: more of `job.launcher`), `dtd run`.
    fn start(venv: &Path, launcher_yaml: &str) -> Story {
        Story::with(venv, &torch_job(), launcher_yaml)
    }

    /// The same, training `script` (`job_yaml`: more of `job.launcher`).
    pub fn with(venv: &Path, script: &Script, launcher_yaml: &str) -> Story {
        Story::with_workers(venv, script, launcher_yaml, |_, _| ())
    }

    /// The same, the cluster set up further before its config is written (`setup` is given the
    /// loopback subnet's id: more under `workers:` in `worker_extra`, or sections in `extra`).
    pub fn with_workers(
        venv: &Path,
        script: &Script,
        launcher_yaml: &str,
        setup: impl FnOnce(&mut Cluster, &str),
    ) -> Story {
        let mut c = Cluster::new();
        // What the stack makes: the shared directory the job's user writes (root's, its group's,
        // sticky), the training script where that user can read it but not change it.
        support::open_to_job(c.dir.path());
        let efs = c.efs();
        let (_, gid) = support::job_user();
        std::os::unix::fs::chown(&efs, Some(0), Some(gid)).unwrap();
        install_mode(&efs, 0o1775);
        let job = c.dir.path().join("job");
        std::fs::create_dir(&job).unwrap();
        for file in script.files {
            support::install(file, &job, 0o644);
        }
        support::install("templates/job/dt_torch.py", &job, 0o644);
        support::install("prepare-data/dt_atomic.py", &job, 0o644);
        let subnet = c.loopback_subnet();
        let prepare = c.dir.path().join("prepare.sh");
        std::fs::write(&prepare, "#!/bin/sh\nexit 0\n").unwrap();
        install_mode(&prepare, 0o755);
        setup(&mut c, &subnet);
        c.write_config(&config(&c, venv, &prepare, script, launcher_yaml));
        let mut s = Story { c, subnet };
        s.c.start_dtd();
        s
    }

    pub fn node(&self, ip: &'static str, spot: bool) -> Node {
        let id = self.c.launch_at(&self.subnet, ip, spot);
        self.adopt(ip, id)
    }

    /// An agent for instance `id` at `ip`, launched by someone else (`dtd`'s replacements).
    pub fn adopt(&self, ip: &'static str, id: String) -> Node {
        let imds = ImdsStandIn::with_identity(ip, &id);
        let path = self.c.dir.path().join(format!("agent-{ip}.log"));
        let log = std::fs::File::create(&path).unwrap();
        let agent = (self.c)
            .agent_command(&self.c.config_path(), ip, &id, &imds)
            .stderr(log)
            .spawn()
            .expect("starting dtd agent");
        Node {
            ip,
            id,
            imds,
            agent,
            log: path,
        }
    }

    /// The job's progress file: step, generation, world size (rank 0 writes it through dt_torch).
    pub fn progress(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.c.efs().join("progress")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits until a world of `world` trains in a generation after `after` and its step has
    /// advanced 10 past where that world was first seen; returns that generation.
    pub fn wait_world(&self, world: u64, after: u64, what: &str) -> u64 {
        let mut first: Option<(u64, u64)> = None;
        let mut probe = || {
            let p = self.progress();
            let seen = p.as_ref().and_then(|p| {
                let g = p["generation"].as_u64()?;
                let (w, step) = (p["world_size"].as_u64()?, p["step"].as_u64()?);
                if w != world || g <= after {
                    return None;
                }
                let (fg, fstep) = *first.get_or_insert((g, step));
                (g == fg && step >= fstep + 10).then_some(g)
            });
            (seen, p)
        };
        let (seen, _) = support::wait_for(what, PHASE, &mut probe, |(g, _)| g.is_some());
        seen.unwrap_or_default()
    }

    /// A node joins: its marker, then a world of `world` training in a generation after
    /// `after`. Prints the figures (from its marker) and returns the node and that generation.
    pub fn join(
        &self,
        ip: &'static str,
        world: u64,
        after: u64,
        stay: &[&Node],
        strategy: &str,
    ) -> (Node, u64) {
        let node = self.node(ip, false);
        let marker = self.c.own_report(&node.id, ip, "prepare_data_success");
        wait_until(&format!("{ip}'s marker"), PHASE, || marker.exists());
        let before = self.before(stay);
        let g = self.wait_world(world, after, &format!("a world of {world} training"));
        self.after(before, stay, g, strategy, JOIN);
        (node, g)
    }

    /// Every process of `node` SIGSTOPped: the others train again as a world of `world`, within
    /// 60 s. Prints the figures; returns the stopped processes (killed later) and the generation.
    pub fn vanish(
        &self,
        node: &Node,
        world: u64,
        after: u64,
        stay: &[&Node],
        strategy: &str,
    ) -> (Vec<i32>, u64) {
        let agent = node.agent.id() as i32;
        let pids: Vec<i32> = std::iter::once(agent).chain(tree(agent)).collect();
        let before = self.before(stay);
        for pid in &pids {
            signal(*pid, "STOP");
        }
        let g = self.wait_world(world, after, "the others training after the node vanished");
        let back = before.t.elapsed();
        self.after(before, stay, g, strategy, VANISH);
        assert!(
            back < Duration::from_secs(60),
            "trained again after {back:?}"
        );
        (pids, g)
    }

    /// `node`'s two-minute Spot warning: its processes are gone well before the deadline, and
    /// the others train again as a world of `world`. Prints the figures.
    pub fn spot_warning(
        &self,
        node: &Node,
        stay: &[&Node],
        world: u64,
        after: u64,
        strategy: &str,
    ) -> u64 {
        let procs = self.processes(node);
        let deadline = std::time::SystemTime::now() + Duration::from_secs(120);
        let at = humantime::format_rfc3339_seconds(deadline);
        let before = self.before(stay);
        node.imds.set(
            "spot/instance-action",
            &format!(r#"{{"action":"terminate","time":"{at}"}}"#),
        );
        wait_until("the Spot node's processes gone", PHASE, || {
            procs.iter().all(|p| process_gone(*p))
        });
        let gone = before.t.elapsed();
        figure(strategy, SPOT, "its processes gone (s)", gone.as_secs_f64());
        assert!(
            gone < Duration::from_secs(120),
            "gone after {gone:?}, past the deadline"
        );
        let g = self.wait_world(world, after, "the others training after the Spot warning");
        self.after(before, stay, g, strategy, SPOT);
        assert_eq!(self.c.events_of("interrupted", &node.id), 1);
        g
    }

    /// The nodes that stay, their processes and the job's step, just before a change.
    pub fn before(&self, stay: &[&Node]) -> Before {
        Before {
            step: self
                .progress()
                .and_then(|p| p["step"].as_u64())
                .unwrap_or(0),
            procs: stay.iter().map(|n| self.processes(n)).collect(),
            t: Instant::now(),
        }
    }

    /// Once generation `g` trains: what the change cost the nodes that stayed (scripts/
    /// bench-torchrun prints these side by side with the in-place strategy's).
    pub fn after(&self, before: Before, stay: &[&Node], g: u64, strategy: &str, change: &str) {
        figure(
            strategy,
            change,
            "to training again (s)",
            before.t.elapsed().as_secs_f64(),
        );
        let kept = stay.iter().map(|n| self.processes(n)).collect::<Vec<_>>() == before.procs;
        figure(
            strategy,
            change,
            "the others' processes kept",
            f64::from(u8::from(kept)),
        );
        // The new world resumes from its checkpoint: the steps after it were done twice. The
        // step before is the progress file's (written at most once a second), so this is a
        // lower bound.
        let from = format!("generation {g}: rank 0 of ");
        let resumed = stay.iter().find_map(|n| {
            let log = self.log(n.ip);
            let line = log.lines().rev().find(|l| l.contains(&from))?;
            line.split("from step ")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        });
        let lost = resumed.map_or(0, |r| before.step.saturating_sub(r));
        figure(strategy, change, "steps lost", lost as f64);
    }

    /// A node's torchrun and every process under it.
    pub fn processes(&self, node: &Node) -> Vec<i32> {
        let torchrun = self.launcher(node.ip)["pid"].as_i64().unwrap_or_default() as i32;
        std::iter::once(torchrun).chain(tree(torchrun)).collect()
    }

    /// A vanished node left the job on its silence alone: journaled so, and still running a
    /// few passes later (nothing confirms it is gone; a person or EC2 ends it).
    pub fn kept_after_silence(&self, node: &Node) {
        let journal = self.c.journal_of(&node.id);
        let left = journal.iter().any(|e| {
            e["kind"] == "removal_queued"
                && e["cause"] == "silent"
                && e["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("left the job at once")
        });
        assert!(left, "{journal:?}");
        self.c.wait_passes(5);
        assert_eq!(
            self.c.state_of(&node.id),
            "running",
            "terminated on a silence"
        );
    }

    /// What a person does with a node that hung: kills what is left of it and terminates it.
    pub fn person_terminates(&self, node: &mut Node, pids: &[i32]) {
        for pid in pids {
            signal(*pid, "KILL");
        }
        let _ = node.agent.wait();
        self.c
            .aws(&["ec2", "terminate-instances", "--instance-ids", &node.id]);
        wait_until("the hung node gone", PHASE, || {
            !self.c.hosts().contains(&node.ip.to_string())
                && self.c.state_of(&node.id) == "terminated"
        });
    }

    pub fn generation(&self) -> u64 {
        self.progress()
            .and_then(|p| p["generation"].as_u64())
            .unwrap_or(0)
    }

    pub fn launcher(&self, ip: &str) -> Value {
        let path = self.c.own_report(&self.c.id_at(ip), ip, "launcher");
        serde_json::from_slice(&std::fs::read(path).unwrap_or_default()).unwrap_or(Value::Null)
    }

    pub fn log(&self, ip: &str) -> String {
        std::fs::read_to_string(self.c.dir.path().join(format!("agent-{ip}.log")))
            .unwrap_or_default()
    }

    /// The journal time (ms) of the first event of `kind` about `id`.
    pub fn event_time(&self, kind: &str, id: &str) -> Option<u64> {
        (self.c.journal_of(id).iter())
            .find(|e| e["kind"] == kind)
            .and_then(|e| e["time"].as_u64())
    }
}

fn config(
    c: &Cluster,
    venv: &Path,
    prepare: &Path,
    script: &Script,
    launcher_yaml: &str,
) -> String {
    let efs = c.efs().display().to_string();
    let file = Path::new(script.files[0]).file_name().unwrap_or_default();
    let args = script.args.replace("{efs}", &efs);
    let script = c.dir.path().join("job").join(file).display().to_string();
    let (uid, _) = support::job_user();
    let job = format!(
        "  notify: none\n  ack: {{ timeout: 3m }}\n  owner: {uid}\n  launcher:\n    torchrun: [{}]\n    \
         script: [{script}, {args}]\n    \
         nproc_per_node: 1\n    rdzv: {{ port: {} }}\n    stop: {{ grace: 20s }}\n    silent_after: 10s\n    \
         backoff: 1s\n    env: {{ PYTHONWARNINGS: ignore, OMP_NUM_THREADS: '1' }}\n{launcher_yaml}",
        venv.join("bin/torchrun").display(),
        free_port()
    );
    let mut text = c.config(0, 8, &[], &job);
    text.push_str(&format!(
        "agent:\n  prepare_data: {}\n  imds_interval: 200ms\n",
        prepare.display()
    ));
    text
}

#[test]
fn a_real_torchrun_job_rescales_on_join_vanish_leave_and_spot_and_finishes() {
    let _turn = STORIES.enter();
    let venv = support::torch_venv();
    let mut s = Story::start(&venv, "");

    // Two nodes train.
    let a = s.node("127.0.0.2", false);
    let b = s.node("127.0.0.3", false);
    let g1 = s.wait_world(2, 0, "a world of 2 training");

    // A third joins: the figure is from its marker to the world of 3 training.
    let (mut c3, g2) = s.join("127.0.0.4", 3, g1, &[&a, &b], "generation");

    // It vanishes: every process of that node stopped. The others train again within 60 s.
    let (pids, g3) = s.vanish(&c3, 2, g2, &[&a, &b], "generation");
    s.kept_after_silence(&c3);
    let explain = crate::support::stdout(&s.c.dtctl(&["explain", &c3.id]));
    for text in [
        "launcher_started",
        "left the job at once",
        "its agent went silent",
    ] {
        assert!(explain.contains(text), "{text} not in {explain}");
    }
    s.person_terminates(&mut c3, &pids);

    // kill -9 of dtd run disturbs nothing: the same launchers train on in the same generation.
    let pid_a = s.launcher(a.ip)["pid"].clone();
    let pid_b = s.launcher(b.ip)["pid"].clone();
    let step = s.progress().unwrap()["step"].as_u64().unwrap();
    s.c.kill_dtd();
    wait_until("training on without dtd", PHASE, || {
        s.progress()
            .and_then(|p| p["step"].as_u64())
            .is_some_and(|n| n >= step + 20)
    });
    s.c.start_dtd();
    s.c.wait_passes(5);
    assert_eq!(s.generation(), g3, "no new generation after dtd's restart");
    assert_eq!(
        s.launcher(a.ip)["pid"],
        pid_a,
        "127.0.0.2's launcher was not restarted"
    );
    assert_eq!(
        s.launcher(b.ip)["pid"],
        pid_b,
        "127.0.0.3's launcher was not restarted"
    );

    // The node holding the rendezvous (first in the host file) leaves by its elastic tag.
    let holder = s.c.hosts()[0].clone();
    let (leaving, staying) = if holder == a.ip { (&a, &b) } else { (&b, &a) };
    let procs = s.processes(leaving);
    let before = s.before(&[staying]);
    s.c.delete_elastic_tag(&leaving.id);
    wait_until("the leaving node's processes gone", PHASE, || {
        procs.iter().all(|p| process_gone(*p))
    });
    let gone = before.t.elapsed().as_secs_f64();
    figure("generation", LEAVE, "its processes gone (s)", gone);
    let g4 = s.wait_world(1, g3, "a world of 1 after the rendezvous holder left");
    s.after(before, &[staying], g4, "generation", LEAVE);
    // The journal, not the instance's state: moto shows it terminated before dtd has heard
    // back from TerminateInstances and journaled it.
    wait_until("the leaving node's termination journaled", PHASE, || {
        s.event_time("terminated", &leaving.id).is_some()
    });
    let stopped = s
        .event_time("launcher_stopped", &leaving.id)
        .expect("launcher_stopped journaled");
    let acked = s
        .event_time("acknowledged", &leaving.id)
        .expect("acknowledged journaled");
    let ended = s
        .event_time("terminated", &leaving.id)
        .expect("terminated journaled");
    assert!(
        stopped <= ended && acked <= ended,
        "stopped {stopped}, acknowledged {acked}, terminated {ended}"
    );

    // A Spot node joins, then gets its two-minute warning: its processes are gone well before.
    let d = s.node("127.0.0.5", true);
    let g5 = s.wait_world(2, g4, "a world of 2 with the Spot node");
    s.spot_warning(&d, &[staying], 1, g5, "generation");

    // The job finishes on the node left; its loss is a single-process run's.
    wait_until("job_finished journaled", Duration::from_secs(300), || {
        s.c.journal().iter().any(|e| e["kind"] == "job_finished")
    });
    let result: Value =
        serde_json::from_slice(&std::fs::read(s.c.efs().join("torch_job_result.json")).unwrap())
            .unwrap();
    assert_eq!(result["steps"].as_u64(), Some(STEPS));
    let single = single_run(&venv, s.c.dir.path(), "torch_job", STEPS, &[]);
    let (elastic, alone) = (
        result["loss"].as_f64().unwrap(),
        single["loss"].as_f64().unwrap(),
    );
    assert!(
        (elastic - alone).abs() <= 0.05 * alone,
        "elastic loss {elastic}, single-process {alone}"
    );
    assert_eq!(
        s.launcher(staying.ip)["state"],
        "finished",
        "{}",
        s.log(staying.ip)
    );
    let text = crate::support::stdout(&s.c.dtctl(&["status"]));
    assert!(
        text.contains("LAUNCHER") && text.contains("finished"),
        "{text}"
    );
    drop((a, b, d));
}

/// The elastic strategy: torchrun's own `--nnodes=1:1024` rendezvous on the first node, kept
/// through a join (torchrun sees the node waiting and starts a new round itself) and a vanished
/// node (the agents end the survivors' workers, not torchrun); only the store holder's leave
/// starts torchrun again; a Spot node then joins and takes its warning. On 127.0.0.6-9, apart
/// from the other story's nodes.
#[test]
fn under_the_elastic_strategy_torchrun_keeps_its_rendezvous_through_a_join_and_a_vanished_node() {
    let _turn = STORIES.enter();
    let venv = support::torch_venv();
    let s = Story::start(
        &venv,
        "    strategy: elastic\n    elastic: { last_call: 3s }\n",
    );
    let a = s.node("127.0.0.6", false);
    let b = s.node("127.0.0.7", false);
    let g1 = s.wait_world(2, 0, "a world of 2 training");
    let torchruns = |s: &Story| {
        (
            s.launcher(a.ip)["pid"].clone(),
            s.launcher(b.ip)["pid"].clone(),
        )
    };
    let before = torchruns(&s);

    let (mut c3, g2) = s.join("127.0.0.8", 3, g1, &[&a, &b], "elastic");
    assert_eq!(torchruns(&s), before, "a join restarts no torchrun");
    let (pids, g3) = s.vanish(&c3, 2, g2, &[&a, &b], "elastic");
    assert_eq!(torchruns(&s), before, "the survivors' torchruns go on");
    let reason = s.launcher(a.ip)["reason"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(reason.contains("127.0.0.8 left"), "{reason}");
    s.kept_after_silence(&c3);
    s.person_terminates(&mut c3, &pids);

    // The store holder leaves: the other node's torchrun starts again, holding a new store.
    let holder = s.c.hosts()[0].clone();
    let (leaving, staying) = if holder == a.ip { (&a, &b) } else { (&b, &a) };
    let old = s.launcher(staying.ip)["pid"].clone();
    let before = s.before(&[staying]);
    s.c.delete_elastic_tag(&leaving.id);
    let g4 = s.wait_world(1, g3, "a world of 1 after the store holder left");
    s.after(before, &[staying], g4, "elastic", LEAVE);
    let r = s.launcher(staying.ip);
    assert_ne!(r["pid"], old);
    let holder_id = format!("{}-e{}", support::CLUSTER, staying.ip.replace('.', "-"));
    assert_eq!(r["rdzv_id"].as_str(), Some(holder_id.as_str()));
    wait_until("the leaving node's termination journaled", PHASE, || {
        s.event_time("terminated", &leaving.id).is_some()
    });
    let stopped = s.event_time("launcher_stopped", &leaving.id);
    let ended = s.event_time("terminated", &leaving.id);
    assert!(
        stopped.is_some() && stopped <= ended,
        "{stopped:?} {ended:?}"
    );

    // A Spot node joins the one left, and gets its warning: torchrun on the other node stays.
    let d = s.node("127.0.0.9", true);
    let g5 = s.wait_world(2, g4, "a world of 2 with the Spot node");
    s.spot_warning(&d, &[staying], 1, g5, "elastic");

    wait_until("job_finished journaled", Duration::from_secs(300), || {
        s.c.journal().iter().any(|e| e["kind"] == "job_finished")
    });
    let result: Value =
        serde_json::from_slice(&std::fs::read(s.c.efs().join("torch_job_result.json")).unwrap())
            .unwrap();
    let single = single_run(&venv, s.c.dir.path(), "torch_job", STEPS, &[]);
    let (elastic, alone) = (
        result["loss"].as_f64().unwrap(),
        single["loss"].as_f64().unwrap(),
    );
    assert!(
        (elastic - alone).abs() <= 0.05 * alone,
        "elastic loss {elastic}, single-process {alone}"
    );
    drop((a, b, d));
}

/// The same training in one process, without torchrun: what a run with changes must match.
/// `job` is the example's name (`torch_job`), which names its result `<job>_single.json`.
pub(crate) fn single_run(venv: &Path, dir: &Path, job: &str, steps: u64, extra: &[&str]) -> Value {
    let out = dir.join("single");
    std::fs::create_dir_all(&out).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{job}.py"));
    let status = Command::new(venv.join("bin/python3"))
        .args(["-W", "ignore"])
        .arg(script)
        .arg("--single")
        .args(extra)
        .args(["--steps", &steps.to_string(), "--dir"])
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .expect("the single-process run");
    assert!(status.success());
    let result = std::fs::read(out.join(format!("{job}_single.json"))).unwrap_or_default();
    serde_json::from_slice(&result).unwrap_or(Value::Null)
}

pub(crate) fn install_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
