//! The story of a worker, end to end: the real `dtd` journals a worker's life against moto,
//! `dtctl explain` tells it back by IP and by instance id, and `dtctl events --follow`, started
//! before the worker leaves, prints its leaving as it happens.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use crate::support::*;

/// `dtctl events --follow -o json`, its stdout read line by line on a thread of its own.
struct Follow {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<serde_json::Value>,
}

impl Follow {
    fn start(c: &Cluster) -> Follow {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dtctl"))
            .arg("--config")
            .arg(c.config_path())
            .args(["events", "--follow", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting dtctl events --follow");
        let out = child.stdout.take().expect("its stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follow {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until it has printed a `kind` line about `id`; returns every line printed so far.
    fn wait_for_line(&mut self, kind: &str, id: &str) -> Vec<serde_json::Value> {
        let what = format!("`dtctl events --follow` to print `{kind}` for {id}");
        let lines = &self.lines;
        let seen = &mut self.seen;
        wait_for(
            &what,
            Duration::from_secs(30),
            || {
                while let Ok(line) = lines.try_recv() {
                    let event = serde_json::from_str(&line).expect("a JSON line");
                    seen.push(event);
                }
                seen.clone()
            },
            |seen| {
                seen.iter()
                    .any(|e| e["kind"] == kind && e["instance"] == id)
            },
        )
    }

    /// SIGTERM ends it cleanly: exit status 0.
    fn terminate(&mut self) -> std::process::ExitStatus {
        signal(self.child.id() as i32, "TERM");
        let child = &mut self.child;
        let status = wait_for(
            "dtctl events --follow to exit on SIGTERM",
            Duration::from_secs(10),
            || child.try_wait().ok().flatten(),
            Option::is_some,
        );
        status.expect("an exit status")
    }

    fn kinds_of(&self, id: &str) -> Vec<String> {
        (self.seen.iter())
            .filter(|e| e["instance"] == id)
            .filter_map(|e| e["kind"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn explain(c: &Cluster, args: &[&str]) -> String {
    let out = c.dtctl(&[&["explain"], args].concat());
    assert!(
        out.status.success(),
        "dtctl explain {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// The kinds of the story's step lines, in the order printed.
fn step_kinds(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

/// The value of one totals line (`    in the job          1m 2s        the job's ...`).
fn total(text: &str, name: &str) -> String {
    let line = (text.lines())
        .find(|l| l.starts_with(&format!("    {name}  ")))
        .unwrap_or_else(|| panic!("no `{name}` total in:\n{text}"));
    line[24..38].trim().to_string()
}

#[test]
fn a_workers_life_is_explained_and_its_leaving_followed_as_it_happens() {
    let mut c = Cluster::new();
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.wait_events("preparing", &id, 1);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));
    c.wait_events("joined", &id, 1);
    assert!(c
        .dtctl(&["ack", c.written_generation().trim()])
        .status
        .success());
    c.wait_events("join_acknowledged", &id, 1);
    c.wait_tag(&id, "ADDED");

    // Started before the removal, it prints what is there, then the removal as it happens.
    let mut follow = Follow::start(&c);
    follow.wait_for_line("join_acknowledged", &id);
    c.delete_elastic_tag(&id);
    follow.wait_for_line("removal_queued", &id);
    assert_eq!(c.events_of("acknowledged", &id), 0, "not before the ack");
    c.wait_status("generation 2", |s| s["generation"] == 2);
    assert!(c.dtctl(&["ack", "2"]).status.success());
    follow.wait_for_line("terminated", &id);
    assert_eq!(
        follow.kinds_of(&id),
        [
            "preparing",
            "joined",
            "join_acknowledged",
            "removal_queued",
            "acknowledged",
            "terminated"
        ]
    );
    assert!(follow.terminate().success());

    // Shown REMOVED until EC2 reports it shut down, then no longer among dtd's workers.
    let by_ip = wait_for(
        "dtctl explain to show the worker gone",
        Duration::from_secs(30),
        || explain(&c, &[&ip]),
        |t| t.contains("not among dtd's workers"),
    );
    let by_id = explain(&c, &[&id]);
    // Where it is now comes from the status of the pass each ran after: the rest is the same.
    let story_of = |t: &str| -> Vec<String> {
        let lines = t.lines().filter(|l| !l.starts_with("  now "));
        lines.map(str::to_string).collect()
    };
    assert_eq!(
        story_of(&by_ip),
        story_of(&by_id),
        "one instance has had this IP"
    );
    assert!(by_ip.starts_with(&format!("{id} ({ip})\n")), "{by_ip}");
    assert_eq!(
        step_kinds(&by_ip),
        [
            "launched",
            "preparing",
            "joined",
            "join_acknowledged",
            "removal_queued",
            "acknowledged",
            "terminated"
        ],
        "{by_ip}"
    );
    for said in [
        "preparing for ",
        "g1 ",
        "asked by a person: its elastic tag was deleted",
    ] {
        assert!(by_ip.contains(said), "`{said}` not in:\n{by_ip}");
    }
    for name in [
        "preparing",
        "launch to training",
        "ready but idle",
        "in the job",
        "leaving",
    ] {
        let value = total(&by_ip, name);
        assert!(
            value.ends_with('s') && !value.contains("so far"),
            "{name}: {value}\n{by_ip}"
        );
    }

    let out = c.dtctl(&["explain", &id, "-o", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("explain -o json");
    let story = &json["stories"][0];
    assert_eq!(
        (story["instance"].as_str(), story["ip"].as_str()),
        (Some(id.as_str()), Some(ip.as_str()))
    );
    let kinds: Vec<&str> = (story["steps"].as_array().expect("steps").iter())
        .filter_map(|s| s["kind"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"preparing"));
    assert_eq!(kinds.last(), Some(&"terminated"));
    assert!(story["launched_at"].as_u64().is_some(), "{story}");
    assert!(
        story["totals"]["in_job"]["ms"].as_u64().is_some(),
        "{story}"
    );
    let queued = (story["steps"].as_array().expect("steps").iter())
        .find(|s| s["kind"] == "removal_queued")
        .expect("removal_queued");
    assert_eq!(queued["generation"], 2);

    let unknown = c.dtctl(&["explain", "10.9.9.9"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("holds nothing about 10.9.9.9"),
        "{}",
        stderr(&unknown)
    );
    let malformed = c.dtctl(&["explain", "i-not-an-id"]);
    assert!(!malformed.status.success());
    assert!(
        stderr(&malformed).contains("neither an IP address nor an EC2 instance id"),
        "{}",
        stderr(&malformed)
    );
}

#[test]
fn a_failed_prepare_is_journaled_once_and_explained() {
    let mut c = Cluster::new();
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.wait_events("preparing", &id, 1);
    // What `dtd agent` writes when the prepare-data program fails (docs/shared-directory.md, "How a worker's reports reach `dtd`").
    let report = r#"{"exit_code": 3, "attempts": 3, "duration_s": 4.2, "output_tail": ["checksum mismatch"]}"#;
    c.report_json(&ip, MarkerKind::Failed, report);
    c.wait_events("prepare_failed", &id, 1);
    c.wait_tag(&id, "PREPARE_FAILED");
    // Read again on every pass: journaled once.
    c.wait_passes(3);
    assert_eq!(c.events_of("prepare_failed", &id), 1);

    let text = wait_for(
        "dtctl explain to show the worker as PREPARE_FAILED now",
        Duration::from_secs(30),
        || explain(&c, &[&ip]),
        |t| t.contains("PREPARE_FAILED since"),
    );
    assert_eq!(
        step_kinds(&text),
        ["launched", "preparing", "prepare_failed"],
        "{text}"
    );
    for said in [
        "(until prepare_failed)",
        "checksum mismatch",
        "it waits for a person",
    ] {
        assert!(text.contains(said), "`{said}` not in:\n{text}");
    }
    assert_eq!(total(&text, "in the job"), "-", "{text}");
    assert!(total(&text, "preparing").ends_with('s'), "{text}");
}

/// An old worker's story, and filler, written as an earlier dtd would have: `size` bytes.
fn seed_journal(c: &Cluster, old_id: &str, old_ip: &str, size: usize) {
    // As an earlier dtd left it: its own, mode 0700.
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(c.state_dir())
        .unwrap();
    let line = |time: u64, kind: &str, instance: Option<&str>, message: &str| {
        let mut e = serde_json::json!({ "time": time, "kind": kind, "message": message });
        if let Some(id) = instance {
            e["instance"] = id.into();
            e["ip"] = old_ip.into();
            e["generation"] = 1.into();
        }
        format!("{e}\n")
    };
    let mut text = line(1_000, "joined", Some(old_id), "an old worker joins");
    let mut t = 2_000;
    loop {
        // The last line is padded to end the file at exactly `size` bytes.
        let bare = line(t, "generation", None, "").len();
        let left = size - text.len();
        let pad = if left >= bare + 800 { 400 } else { left - bare };
        text.push_str(&line(t, "generation", None, &"x".repeat(pad)));
        t += 1;
        if text.len() == size {
            break;
        }
    }
    std::fs::write(c.state_dir().join("events.jsonl"), text).unwrap();
}

#[test]
fn a_rotated_journal_is_read_whole_by_events_explain_and_follow() {
    let mut c = Cluster::new();
    let (old_id, old_ip) = ("i-0123456789abcdef0", "10.9.9.9");
    // An earlier run's journal, 64 bytes short of 64 KiB: dtd's first line takes it past.
    seed_journal(&c, old_id, old_ip, (64 << 10) - 64);
    c.extra = "journal: { max_size: 64KiB, keep: 2 }\n".into();
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    // Following the file that is about to be rotated.
    let mut follow = Follow::start(&c);
    follow.wait_for_line("joined", old_id);
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));
    follow.wait_for_line("joined", &id);
    let rotated = c.state_dir().join("events.jsonl.1");
    assert!(rotated.exists(), "no rotation: {}", c.dtd_log());
    assert!(
        std::fs::metadata(c.state_dir().join("events.jsonl"))
            .unwrap()
            .len()
            < 64 << 10
    );
    assert!(
        c.dtd_log().contains("events journal rotated"),
        "{}",
        c.dtd_log()
    );
    assert!(follow.terminate().success());
    // Each line once, in the order written: the rotated file read to its end, then the new one.
    let journal = c.journal();
    assert!(follow.seen.len() <= journal.len());
    assert_eq!(
        follow.seen,
        journal[..follow.seen.len()],
        "printed twice, out of order or not at all"
    );
    assert_eq!(follow.kinds_of(old_id), ["joined"]);
    // Started after the rotation: the rotated file's lines first, then the current file's.
    let mut late = Follow::start(&c);
    late.wait_for_line("joined", &id);
    assert!(late.terminate().success());
    assert_eq!(late.seen[0]["instance"], old_id);
    let journal = c.journal();
    assert_eq!(late.seen, journal[..late.seen.len()]);

    // `dtctl events` and `explain` read the rotated file too.
    let out = c.dtctl(&["events", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<serde_json::Value> = (stdout(&out).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), c.journal().len());
    assert_eq!(listed[0]["instance"], old_id);
    assert!(listed
        .iter()
        .any(|e| e["instance"] == id.as_str() && e["kind"] == "joined"));
    let story = explain(&c, &[old_ip]);
    assert!(
        story.starts_with(&format!("{old_id} ({old_ip})\n")),
        "{story}"
    );
    assert!(story.contains("an old worker joins"), "{story}");
}
