//! What a process on a worker can do to the others through torchft's Lighthouse, tried as the
//! job's user with the job's own torchft (attack.py), against the real `dtd run`, `dtd agent`,
//! torchrun and moto: one node trains while the attacker calls the dashboard's kill route for it,
//! or heartbeats replicas that do not exist and asks to join the quorum as a node outside the
//! plan claiming the highest step. The victim keeps its processes and trains on; each attempt
//! is journaled once and shown in `dtctl status` (docs/torchrun.md, "What the nodes cannot do
//! to each other").

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{quorum, script, wait_quorum, Lighthouse};
use crate::support::{self, free_port, wait_until};
use crate::torchrun::{Node, Story, PHASE, STORIES};

/// The victim trains this many steps with the attack going on (about 3 s undisturbed).
const STEPS_ON: u64 = 30;
/// An address no node of the plan has.
const GHOST: &str = "127.0.0.9";

struct Scene {
    s: Story,
    a: Node,
    /// Where the nodes dial the Lighthouse, and where a process on the master reaches it.
    dialled: String,
    local: String,
    _lighthouse: [Lighthouse; 2],
}

/// One node training under `in_place`, the Lighthouse dialled at 127.0.0.100 (the "master").
fn one_node_training() -> Scene {
    let venv = support::torch_venv();
    let port = free_port();
    let (dialled, local) = (format!("127.0.0.100:{port}"), format!("127.0.0.1:{port}"));
    let guards = [
        Lighthouse(format!("bind={dialled}")),
        Lighthouse(format!("bind={local}")),
    ];
    let yaml = format!(
        "    strategy: in_place\n    in_place: {{ lighthouse: '{dialled}', collective_timeout: 3s }}\n"
    );
    let s = Story::with(&venv, &script(), &yaml);
    support::install(
        "tests/integration/in_place/attack.py",
        &s.c.dir.path().join("job"),
        0o644,
    );
    let a = s.node("127.0.0.2", false);
    wait_quorum(&s, 1, 0, "a quorum of 1 training");
    Scene {
        s,
        a,
        dialled,
        local,
        _lighthouse: guards,
    }
}

/// attack.py, as the job's user; its output in `<dir>/attack.log`.
struct Attacker {
    child: Child,
    log: PathBuf,
}

impl Attacker {
    fn start(s: &Story, args: &[&str]) -> Attacker {
        use std::os::unix::process::CommandExt;
        let (uid, gid) = support::job_user();
        let log = s.c.dir.path().join("attack.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(support::torch_venv().join("bin/python3"))
            .arg(s.c.dir.path().join("job/attack.py"))
            .args(args)
            .env("HOME", "/tmp")
            .current_dir("/tmp")
            .uid(uid)
            .gid(gid)
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("starting attack.py");
        Attacker { child, log }
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for(&self, line: &str) {
        wait_until(&format!("the attacker to say {line:?}"), PHASE, || {
            self.said().lines().any(|l| l.starts_with(line))
        });
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("---- attack.py said ----\n{}", self.said());
    }
}

/// The victim trained `STEPS_ON` steps past `step` within a minute, in the quorum `id`.
fn trains_on(scene: &Scene, id: u64, step: u64) {
    wait_until("the victim training on", Duration::from_secs(60), || {
        quorum(&scene.s).is_some_and(|q| q.2 >= step + STEPS_ON)
    });
    let now = quorum(&scene.s).map(|q| q.0);
    assert_eq!(now, Some(id), "the quorum changed under the attack");
}

/// The journal's `lighthouse_refused` lines whose message holds `text`, after two more passes.
fn journaled(scene: &Scene, text: &str) -> Vec<Value> {
    scene.s.c.wait_passes(2);
    let journal = scene.s.c.journal().into_iter();
    let refused = journal.filter(|e| e["kind"] == "lighthouse_refused");
    refused
        .filter(|e| e["message"].as_str().unwrap_or("").contains(text))
        .collect()
}

fn status(scene: &Scene) -> String {
    support::stdout(&scene.s.c.dtctl(&["status"]))
}

#[test]
fn in_place_the_lighthouses_kill_route_is_not_served_and_the_victim_trains_on() {
    let _turn = STORIES.enter();
    let scene = one_node_training();
    let (id, _, step, _) = quorum(&scene.s).unwrap_or_default();
    let before = scene.s.processes(&scene.a);

    // The dashboard lists each replica with its kill button; the attacker reads it where it can
    // (where the nodes dial, or, from the master itself, on its loopback) and presses them all.
    let dashboards = [
        format!("http://{}", scene.dialled),
        format!("http://{}", scene.local),
    ];
    let front = format!("http://{}", scene.dialled);
    let attacker = Attacker::start(&scene.s, &["kill", &front, &dashboards[0], &dashboards[1]]);
    attacker.wait_for("done");
    assert!(
        attacker.said().contains("kill 127.0.0.2#"),
        "{}",
        attacker.said()
    );

    trains_on(&scene, id, step);
    assert_eq!(
        scene.s.processes(&scene.a),
        before,
        "the victim's processes changed"
    );
    let kills = journaled(&scene, "/kill");
    assert_eq!(kills.len(), 1, "three kills journaled once: {kills:?}");
    let status = status(&scene);
    assert!(
        status.contains("Refused:") && status.contains("/kill") && status.contains("3 time(s)"),
        "{status}"
    );
}

#[test]
fn in_place_fake_heartbeats_and_a_replica_outside_the_plan_claiming_the_highest_step_are_refused() {
    let _turn = STORIES.enter();
    let scene = one_node_training();
    let (id, _, _, _) = quorum(&scene.s).unwrap_or_default();
    let before = scene.s.processes(&scene.a);

    // A node outside the plan asks to join with a step no one has, so that the others would copy
    // their state from it; it and a second replica of the victim's own node heartbeat, so that
    // the next quorum waits for more than half of them.
    let (ghost, twin) = (format!("{GHOST}#9:ghost"), "127.0.0.2#2:twin".to_string());
    let front = format!("http://{}", scene.dialled);
    let attacker = Attacker::start(&scene.s, &["impersonate", &front, &ghost, &twin]);
    attacker.wait_for("quorum");
    attacker.wait_for("heartbeats");
    let step = quorum(&scene.s).map_or(0, |q| q.2);

    trains_on(&scene, id, step);
    assert_eq!(
        scene.s.processes(&scene.a),
        before,
        "the victim's processes changed"
    );
    assert!(
        attacker.said().contains("quorum refused"),
        "{}",
        attacker.said()
    );
    drop(attacker);
    let ghosts = journaled(&scene, GHOST);
    assert_eq!(ghosts.len(), 1, "{ghosts:?}");
    let twins = journaled(&scene, "twin");
    assert_eq!(twins.len(), 1, "{twins:?}");
    let status = status(&scene);
    assert!(
        status.contains("no node of the plan") && status.contains("127.0.0.2#2:twin"),
        "{status}"
    );
}
