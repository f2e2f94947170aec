//! How long the master's read of the shared directory's reports takes with every worker's
//! signed success marker and health report there, and what it believes of them (the scan, then
//! the book's judgement against each instance's agent key): `cargo bench --bench markers`. A
//! report is read, and its signature checked, only when its agent replaced it (a new file
//! version: one `stat` per file), so the steady pass lists the directory and reads nothing;
//! the "all replaced" figure is the worst case, every agent having just rewritten its report.
//!
//! With `job.launcher` every worker also has a `launcher_<ip>` report, which its agent signs
//! again every `silent_after` / 4 (7.5 s by default) as its heartbeat: the third figure is a pass
//! in which every launcher report was just re-signed, the worst case of a heartbeat.
//!
//! On a local disk (tmpfs or ext4); on EFS each read is a network round trip, which is what the
//! cache saves.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use dt::config::Reports;
use dt::observe::markers::book::{Book, Judging, Keys};
use dt::observe::markers::MarkerScanner;
use dt::protocol::health::HealthReport;
use dt::protocol::launcher::{LauncherReport, LauncherState};
use dt::protocol::markers::{MarkerKind, MarkerName};
use dt::protocol::signed::SigningKey;

const SIZES: [usize; 2] = [1_000, 10_000];
const ROUNDS: usize = 20;

fn ip(n: usize) -> String {
    let n = n + 256;
    format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255)
}

fn id(n: usize) -> String {
    format!("i-{n:017x}")
}

/// Each worker's agent key, and the book's view of whose key signs for which IP.
fn agents(workers: usize) -> (Vec<SigningKey>, Keys) {
    let keys: Vec<SigningKey> = (0..workers)
        .map(|_| SigningKey::from_pkcs8(&SigningKey::generate().expect("key")).expect("key"))
        .collect();
    let by_ip: HashMap<_, _> = (0..workers)
        .map(|n| {
            let ip = ip(n).parse().expect("ip");
            (ip, (id(n), Some(keys[n].public().clone())))
        })
        .collect();
    let view = Keys {
        by_ip,
        complete: true,
    };
    (keys, view)
}

fn write(dir: &std::path::Path, key: &SigningKey, kind: MarkerKind, n: usize, line: &[u8]) {
    let name = MarkerName::new(kind, ip(n).parse().expect("ip"));
    let signed = key.sign(&name, line, dt::clock::now_millis());
    dt::fsutil::write_atomic(&name.path_in(dir), &signed).expect("report");
}

fn success(dir: &std::path::Path, key: &SigningKey, n: usize) {
    let line = format!("{{\"instance_id\":\"{}\",\"attempts\":1}}\n", id(n));
    write(dir, key, MarkerKind::Success, n, line.as_bytes());
}

fn report(dir: &std::path::Path, key: &SigningKey, n: usize) {
    let body = HealthReport {
        instance_id: id(n),
        ok: true,
        gpus_lost: false,
        reason: "ok".into(),
        when: "2026-11-24T10:00:00Z".into(),
        output_tail: vec!["8 of 8 GPUs, no ECC errors, no Xid, below slowdown".into()],
    }
    .render();
    write(dir, key, MarkerKind::Health, n, &body);
}

fn launcher(dir: &std::path::Path, key: &SigningKey, n: usize) {
    let body = LauncherReport {
        instance_id: id(n),
        state: LauncherState::Running,
        generation: Some(7),
        rdzv_id: Some("bench-g7".into()),
        pid: Some(4242),
        exit_code: None,
        signal: None,
        restarts: 0,
        reason: "node 3 of 1000".into(),
        since: "2026-11-25T10:00:00Z".into(),
        output_tail: vec!["[torch_job] generation 7: rank 3 of 1000, from step 120".into()],
        stopped: None,
        compute: Some(dt::protocol::launcher::StepCompute {
            step: 120,
            micros: 183_250,
        }),
    }
    .render();
    write(dir, key, MarkerKind::Launcher, n, &body);
}

/// The master's side of a pass: the directory read, then what is believed.
struct Master {
    scanner: MarkerScanner,
    book: Book,
    keys: Keys,
}

impl Master {
    fn pass(&mut self) -> dt::model::Markers {
        let scan = self.scanner.scan().expect("scan");
        let heard = std::collections::HashMap::new();
        let judging = Judging {
            keys: &self.keys,
            mode: Reports::Signed,
            now: dt::clock::now_millis(),
            heard: &heard,
            floor: &|_, _| None,
        };
        self.book.judge(&scan, &judging)
    }
}

/// `rounds` passes, each after `before` (untimed).
fn timed(rounds: usize, mut before: impl FnMut(), master: &mut Master) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            before();
            let t = Instant::now();
            black_box(master.pass());
            t.elapsed()
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn show(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    for workers in SIZES {
        if !bench && workers > 1_000 {
            break;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (agents, keys) = agents(workers);
        for (n, key) in agents.iter().enumerate() {
            success(dir.path(), key, n);
            report(dir.path(), key, n);
        }
        let mut master = Master {
            scanner: MarkerScanner::new(dir.path()),
            book: Book::default(),
            keys,
        };
        let first = master.pass();
        assert_eq!(
            (first.health.len(), first.success.len()),
            (workers, workers)
        );
        assert!(first.refused.is_empty());
        if !bench {
            println!("markers benchmark scenario holds (run `cargo bench --bench markers`)");
            return;
        }
        let steady = timed(ROUNDS, || {}, &mut master);
        let rewrite = |n: usize| report(dir.path(), &agents[n], n);
        let replaced = timed(ROUNDS / 4, || (0..workers).for_each(rewrite), &mut master);
        println!(
            "markers {workers:>6} workers with health reports: steady pass {} (median of {ROUNDS}), every report replaced {} (median of {})",
            show(median(steady)),
            show(median(replaced)),
            ROUNDS / 4
        );
        let beat = |n: usize| launcher(dir.path(), &agents[n], n);
        (0..workers).for_each(beat);
        let with = master.pass();
        assert_eq!(with.launchers.len(), workers);
        let steady = timed(ROUNDS, || {}, &mut master);
        let beaten = timed(5, || (0..workers).for_each(beat), &mut master);
        println!(
            "markers {workers:>6} workers with health and launcher reports: steady pass {} (median of {ROUNDS}), a pass after every launcher report was re-signed {} (median of 5)",
            show(median(steady)),
            show(median(beaten)),
        );
    }
}
