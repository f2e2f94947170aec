//! Issue 37: a worker's word reaches `dtd` whole, and no other worker can silence, replay or
//! pre-empt it. Real `dtd agent`s (each with its own key, its instance's metadata stand-in and
//! its launcher, a shell script standing for torchrun) report to the real `dtd run` on its port,
//! against moto; the instances are on loopback (127.0.0.N), so a process of the test binding
//! one of those addresses speaks from that worker's IP, as user code on it would. Each attack is
//! made as user code on worker A could make it: files in the shared directory (write, delete,
//! put back, squat a name with a directory, for each report's name, for one worker and for
//! every other member at once), connections to dtd's port (floods, garbage, claims of another
//! instance), a report sent again across a restart, a tag put first on a new instance. The
//! victims keep training, nobody is drained on a silence they did not cause, and the attempt
//! is journaled once and shown by `dtctl status`.

use std::os::unix::fs::PermissionsExt;
use std::process::Child;
use std::time::{Duration, Instant};

use dt::protocol::markers::MarkerName;

use crate::no_worker_speaks_for_another::health;
use crate::support::attacker::Attacker;
use crate::support::imds::ImdsStandIn;
use crate::support::*;

/// What `silent_after` is in these tests: the least the config takes.
const SILENT: Duration = Duration::from_secs(10);
/// Every report name a worker's agent uses.
const KINDS: [&str; 5] = [
    "prepare_data_success",
    "prepare_data_failed",
    "health",
    "interruption",
    "launcher",
];

/// A worker with its real `dtd agent`.
struct Worker {
    id: String,
    ip: String,
    _imds: ImdsStandIn,
    agent: Child,
}

impl Worker {
    fn stop(&mut self, sig: &str) {
        for pid in std::iter::once(self.agent.id() as i32).chain(tree(self.agent.id() as i32)) {
            signal(pid, sig);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop("CONT");
        let root = self.agent.id() as i32;
        for pid in tree(root) {
            signal(pid, "KILL");
        }
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}

/// A cluster whose members each run a real agent and its launcher (a script that sleeps), the
/// agents' launcher reports acknowledging the job's generations (`job.ack.by: launcher`).
struct World {
    c: Cluster,
    subnet: String,
    workers: Vec<Worker>,
}

impl World {
    /// `n` workers at 127.0.0.10, .11, …, in the job; `extra`: more top-level config.
    fn new(n: usize, extra: &str) -> World {
        let mut c = Cluster::new();
        open_to_job(c.dir.path());
        let prepare = c.dir.path().join("prepare.sh");
        std::fs::write(&prepare, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&prepare, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = c.dir.path().join("launcher.sh");
        std::fs::write(&launcher, "#!/bin/sh\nexec sleep 3600\n").unwrap();
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (uid, gid) = job_user();
        c.extra = format!(
            "agent: {{ prepare_data: {}, imds_interval: 200ms }}\n{extra}",
            prepare.display()
        );
        let job = format!(
            "  notify: none\n  ack: {{ by: launcher, timeout: 10m }}\n  launcher:\n    \
             torchrun: [{}]\n    script: [/train.py]\n    user: {{ uid: {uid}, gid: {gid} }}\n    \
             stop: {{ grace: 1s }}\n    silent_after: {}s",
            launcher.display(),
            SILENT.as_secs()
        );
        c.write_config(&c.config(0, 16, &[], &job));
        let subnet = c.loopback_subnet();
        c.start_dtd();
        let mut w = World {
            c,
            subnet,
            workers: Vec::new(),
        };
        for k in 0..n {
            w.add(&format!("127.0.0.{}", 10 + k));
        }
        let want = n;
        w.c.wait_hosts("the workers", |h| h.len() == want);
        for worker in &w.workers {
            w.c.wait_tag(&worker.id, "ADDED");
        }
        w
    }

    /// A worker launched at `ip`, and its agent started.
    fn add(&mut self, ip: &str) -> usize {
        let id = self.c.launch_at(&self.subnet, ip, false);
        self.start_agent(&id, ip)
    }

    /// The agent of the instance `id` at `ip`, started.
    fn start_agent(&mut self, id: &str, ip: &str) -> usize {
        let id = id.to_string();
        let imds = ImdsStandIn::with_identity(ip, &id);
        let log = std::fs::File::create(self.c.dir.path().join(format!("agent-{ip}.log"))).unwrap();
        let agent = (self.c)
            .agent_command(&self.c.config_path(), ip, &id, &imds)
            .stderr(log)
            .spawn()
            .expect("dtd agent");
        self.workers.push(Worker {
            id,
            ip: ip.to_string(),
            _imds: imds,
            agent,
        });
        self.workers.len() - 1
    }

    fn in_the_job(&self, k: usize) -> bool {
        self.c.hosts().contains(&self.workers[k].ip)
    }

    /// Nobody left the job, nothing was removed or terminated.
    fn all_kept(&self) {
        let hosts = self.c.hosts();
        for w in &self.workers {
            assert!(hosts.contains(&w.ip), "{} left the job: {hosts:?}", w.ip);
            assert_eq!(self.c.events_of("removal_queued", &w.id), 0, "{}", w.ip);
            assert_eq!(self.c.state_of(&w.id), "running");
        }
    }
}

/// What user code on a worker can keep doing to a member's report names in the shared
/// directory, each way kept up for a third of the attack (the ways that drained a member at
/// 33716b8, within 7-10 s): the name deleted the moment it appears; the member's own older
/// report (`older`: what its agent said before the attack; for a kind it has not sent, a
/// well-formed unsigned one naming `id`) put back whenever the name holds anything else; a
/// directory squatting the name.
fn attack_files(c: &Cluster, id: &str, ip: &str, phase: usize, older: &Older) {
    for kind in KINDS {
        let path = c.efs().join(format!("{kind}_{ip}"));
        match phase {
            0 => {
                let _ = std::fs::remove_file(&path);
            }
            1 => {
                let body = older.get(kind).cloned().unwrap_or_else(|| {
                    format!("{{\"instance_id\":\"{id}\",\"state\":\"running\",\"ok\":true}}\n")
                        .into_bytes()
                });
                let _ = std::fs::remove_dir(&path);
                if std::fs::read(&path).ok().as_deref() != Some(&body[..]) {
                    let _ = std::fs::write(&path, body);
                }
            }
            _ => {
                if !path.is_dir() {
                    let _ = std::fs::remove_file(&path);
                    let _ = std::fs::create_dir(&path);
                }
            }
        }
    }
}

/// A member's reports as its agent said them before an attack, by kind.
type Older = std::collections::HashMap<&'static str, Vec<u8>>;

/// What the agent of `id` has said so far (its own copies, out of any job's reach): what user
/// code that read the shared directory before would hold, had the reports still been there.
fn older_reports(c: &Cluster, id: &str, ip: &str) -> Older {
    (KINDS.iter())
        .filter_map(|kind| Some((*kind, std::fs::read(c.own_report(id, ip, kind)).ok()?)))
        .collect()
}

/// Keeps at `attack` every 50 ms for `how_long`, its phase (0, 1, 2) a third of it each,
/// checking twice a second that `kept` holds.
fn keep_at(how_long: Duration, mut attack: impl FnMut(usize), kept: impl Fn()) {
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < how_long {
        let phase = (3 * started.elapsed().as_millis() / how_long.as_millis()) as usize;
        attack(phase.min(2));
        round += 1;
        std::thread::sleep(Duration::from_millis(50));
        if round % 10 == 0 {
            kept();
        }
    }
}

#[test]
fn writing_deleting_putting_back_or_squatting_one_workers_reports_changes_nothing() {
    let w = World::new(3, "");
    let (victim, victim_ip) = (&w.workers[1].id, &w.workers[1].ip);
    let older = older_reports(&w.c, victim, victim_ip);
    assert!(older.contains_key("launcher") && older.contains_key("prepare_data_success"));
    // Each way kept up for longer than `silent_after`.
    keep_at(
        SILENT * 3 + Duration::from_secs(3),
        |phase| attack_files(&w.c, victim, victim_ip, phase, &older),
        || assert!(w.in_the_job(1), "the victim left the job"),
    );
    w.c.wait_passes(3);
    w.all_kept();
    // Each name someone wrote is journaled once, whatever was done to it since, and shown.
    for kind in KINDS {
        let file = format!("{kind}_{victim_ip}");
        let once = (w.c.journal_of(victim).iter())
            .filter(|e| {
                e["kind"] == "marker_refused"
                    && e["message"].as_str().unwrap_or("").starts_with(&file)
            })
            .count();
        assert_eq!(once, 1, "{file} journaled {once} times");
    }
    attack_files(&w.c, victim, victim_ip, 1, &older);
    w.c.wait_status_text(&format!(
        "Refused:     launcher_{victim_ip} is in the shared directory"
    ));
}

#[test]
fn the_same_done_to_every_other_member_at_once_changes_nothing() {
    let w = World::new(6, "");
    let others = &w.workers[1..];
    let older: Vec<Older> = (others.iter())
        .map(|o| older_reports(&w.c, &o.id, &o.ip))
        .collect();
    keep_at(
        SILENT * 3 + Duration::from_secs(3),
        |phase| {
            for (o, older) in others.iter().zip(&older) {
                attack_files(&w.c, &o.id, &o.ip, phase, older);
            }
        },
        || {
            let hosts = w.c.hosts();
            assert_eq!(hosts.len(), 6, "a member left: {hosts:?}");
        },
    );
    w.c.wait_passes(3);
    w.all_kept();
    assert!(!w
        .c
        .journal()
        .iter()
        .any(|e| e["kind"] == "silence_widespread"));
}

/// An older report, signed by the victim's own agent key, sent again by someone holding its
/// key and its instance's identity document (more than a worker's user code can hold): refused
/// while dtd runs, after dtd restarts (state.json remembers the newest it believed), and when
/// signed further back than `workers.max_clock_skew`, whatever dtd remembers.
#[test]
fn a_report_sent_again_is_refused_while_dtd_runs_after_it_restarts_and_when_old() {
    let mut c = Cluster::new();
    c.checks_health();
    let workers = c.launch(2);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    c.wait_hosts("the workers", |h| h.len() == 2);
    let (victim, victim_ip) = &workers[0];
    let key = c.agent_key(victim);
    let name = MarkerName::new(MarkerKind::Health, victim_ip.parse().unwrap());
    // Signed by its agent a moment ago (GPUs gone), and never sent; then the agent says healthy.
    let older_at = dt::clock::now_millis();
    let older = health(victim, false);
    std::thread::sleep(Duration::from_millis(20));
    c.report(victim_ip, MarkerKind::Health, &health(victim, true));
    // Sent by the played agent's thread: wait until dtd believed it (state.json keeps the
    // signing time of the newest), or the replay below would be the newest dtd has heard.
    wait_until(
        "dtd to believe the healthy report",
        Duration::from_secs(30),
        || {
            let text =
                std::fs::read_to_string(c.state_dir().join("state.json")).unwrap_or_default();
            let state: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            state["workers"][victim.as_str()]["newest"]["health"]
                .as_u64()
                .is_some_and(|at| at > older_at)
        },
    );
    let replay = |c: &Cluster, at: u64| {
        let mut a = Attacker::connect(c, "127.0.0.2")
            .unwrap()
            .with_key(key.clone());
        assert!(
            a.claim_with_own_document(victim_ip, victim, victim, victim_ip)
                .unwrap()
                .ok
        );
        a.report(name, &older, at).unwrap()
    };
    let answer = replay(&c, older_at);
    assert!(
        answer
            .refused
            .as_deref()
            .unwrap_or("")
            .contains("older than the one kept"),
        "{answer:?}"
    );
    c.wait_events("marker_refused", victim, 1);

    // Across a restart: the new dtd has heard nothing yet, but its state remembers.
    c.kill_dtd();
    c.pause_agent(victim_ip, true);
    c.start_dtd();
    c.wait_passes(2);
    let answer = replay(&c, older_at);
    assert!(
        answer.ok,
        "taken on arrival, judged by the pass: {answer:?}"
    );
    c.wait_status_text("than one dtd believed");
    c.pause_agent(victim_ip, false);
    // Signed three minutes ago: refused as it arrives, whatever dtd remembers.
    let answer = replay(&c, dt::clock::now_millis() - 180_000);
    assert!(
        answer
            .refused
            .as_deref()
            .unwrap_or("")
            .contains("more than workers.max_clock_skew"),
        "{answer:?}"
    );
    c.wait_passes(3);
    assert!(c.hosts().contains(victim_ip), "the victim keeps training");
    assert_eq!(c.events_of("unhealthy", victim), 0);
    assert_eq!(c.state_of(victim), "running");
    let refused = (c.journal_of(victim).iter())
        .filter(|e| e["kind"] == "marker_refused")
        .count();
    assert_eq!(
        refused,
        3,
        "each refusal journaled once: {:?}",
        c.journal_of(victim)
    );
}

/// The key dtd pins for a new instance is the one its own agent proved with the instance's
/// identity document: a `dt:agent-key` tag someone put there first, a hello with a forged
/// document or with another instance's document, none of them takes its place.
#[test]
fn neither_a_tag_nor_a_claim_pre_empts_a_new_instances_key() {
    let mut w = World::new(2, "");
    let (a_id, a_ip) = (w.workers[0].id.clone(), w.workers[0].ip.clone());
    let id = w.c.launch_at(&w.subnet, "127.0.0.20", false);
    let ip = "127.0.0.20";
    // User code on A, first: tags the new instance, and claims it twice.
    let mut a = Attacker::connect(&w.c, &a_ip).unwrap();
    w.c.set_tag(&id, "dt:agent-key", a.key.public().as_str());
    let forged = a.claim_with_forged_document(ip, &id).unwrap();
    assert!(!forged.ok, "{forged:?}");
    let mut a = Attacker::connect(&w.c, &a_ip).unwrap();
    let own = a.claim_with_own_document(ip, &id, &a_id, &a_ip).unwrap();
    assert!(!own.ok, "{own:?}");
    w.c.wait_status_text(&format!("Refused:     identity_{ip}"));
    // Its own agent starts: it joins, with its own key pinned.
    let k = w.start_agent(&id, ip);
    w.c.wait_hosts("the new worker", |h| h.contains(&ip.to_string()));
    let key_file =
        w.c.dir
            .path()
            .join(format!("agent-{}.key", w.workers[k].id));
    let own_key = dt::agent::key::load_or_create(&key_file).unwrap();
    let state = std::fs::read_to_string(w.c.state_dir().join("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(
        state["workers"][&id]["agent_key"],
        own_key.public().as_str()
    );
    w.c.wait_passes(3);
    assert_eq!(
        w.c.events_of("marker_refused", &id),
        2,
        "{:?}",
        w.c.journal_of(&id)
    );
    w.all_kept();
}

/// Connections from worker A's IP that never say hello, garbage, and lines too long: A's
/// places are few and its own; every agent keeps reporting, a new worker joins meanwhile, the
/// crowding is journaled once (as A's) and shown.
#[test]
fn a_flood_on_dtds_port_silences_no_one_and_keeps_no_one_out() {
    let mut w = World::new(3, "");
    let a_ip = w.workers[0].ip.clone();
    let mut held = Vec::new();
    for _ in 0..64 {
        if let Ok(a) = Attacker::connect(&w.c, &a_ip) {
            held.push(a);
        }
    }
    let started = Instant::now();
    let mut joined = None;
    while started.elapsed() < SILENT * 2 + Duration::from_secs(2) {
        for k in 0..4 {
            if let Ok(mut a) = Attacker::connect(&w.c, &a_ip) {
                let line = match k {
                    0 => b"garbage\n".to_vec(),
                    1 => vec![b'x'; 40_000],
                    2 => b"health_127.0.0.11 {\"ok\":false}\n".to_vec(),
                    _ => b"ping\n".to_vec(),
                };
                a.say(&line);
            }
        }
        if joined.is_none() && started.elapsed() > SILENT {
            joined = Some(w.add("127.0.0.21"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    w.c.wait_hosts("the worker that came during the flood", |h| {
        h.contains(&"127.0.0.21".to_string())
    });
    w.c.wait_passes(3);
    w.all_kept();
    w.c.wait_status_text(&format!("Refused:     connection from {a_ip}"));
    let a_id = &w.workers[0].id;
    let crowded = (w.c.journal_of(a_id).iter())
        .filter(|e| {
            e["message"]
                .as_str()
                .unwrap_or("")
                .contains("over the limit")
        })
        .count();
    assert_eq!(crowded, 1, "{:?}", w.c.journal_of(a_id));
    drop(held);
}

/// Two of three members' agents stop at once (SIGSTOP): more than a third is dtd's or the
/// network's trouble, so neither is taken out; once one answers again, the one still silent is
/// one of three, and it is.
#[test]
fn silence_of_many_members_at_once_drains_none_and_is_journaled_once() {
    let mut w = World::new(3, "");
    w.workers[1].stop("STOP");
    w.workers[2].stop("STOP");
    w.c.wait_status_text("silence: 2 of 3 members not heard from");
    std::thread::sleep(SILENT);
    w.c.wait_passes(3);
    assert_eq!(
        w.c.hosts().len(),
        3,
        "nobody taken out for a silence of most"
    );
    let widespread = |c: &Cluster| {
        c.journal()
            .iter()
            .filter(|e| e["kind"] == "silence_widespread")
            .count()
    };
    assert_eq!(widespread(&w.c), 1);
    w.workers[1].stop("CONT");
    let silent = w.workers[2].ip.clone();
    w.c.wait_hosts("the one still silent out", |h| !h.contains(&silent));
    assert!(w
        .c
        .journal()
        .iter()
        .any(|e| e["kind"] == "silence_subsided"));
    let left = w.c.journal_of(&w.workers[2].id);
    assert!(left.iter().any(|e| e["cause"] == "silent"), "{left:?}");
    assert_eq!(widespread(&w.c), 1, "journaled once");
    assert_eq!(
        w.c.state_of(&w.workers[2].id),
        "running",
        "never terminated on a silence"
    );
}

/// A worker launched from the console, with no event and no listing due for ten minutes, and
/// 300 report names for unknown IPs planted in the shared directory: its agent's hello is
/// enough for dtd to read it by its id, and it joins within seconds of its marker.
#[test]
fn a_new_workers_hello_is_enough_to_join_whatever_names_others_plant() {
    let mut w = World::new(1, "resync: 10m\n");
    for k in 0..300 {
        let name = format!(
            "prepare_data_success_10.0.{}.{}",
            100 + k / 250,
            k % 250 + 1
        );
        std::fs::write(w.c.efs().join(name), "{}").unwrap();
    }
    w.c.wait_passes(2);
    let k = w.add("127.0.0.22");
    let started = Instant::now();
    w.c.wait_hosts("the new worker", |h| h.contains(&"127.0.0.22".to_string()));
    let took = started.elapsed();
    eprintln!("FIGURE a worker launched from the console joined {took:?} after its agent started");
    assert!(w
        .c
        .journal_of(&w.workers[k].id)
        .iter()
        .any(|e| e["kind"] == "joined"));
}
