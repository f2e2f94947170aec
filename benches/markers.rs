//! How long the master's read of the shared directory's markers takes with every worker's
//! health report there: `cargo bench --bench markers`. A report is read again only when its
//! agent replaced it (a new inode), so the steady pass lists the directory and reads nothing;
//! the "all replaced" figure is the worst case, every agent having just rewritten its report.
//!
//! With `job.launcher` every worker also has a `launcher_<ip>` report, touched (not replaced) by
//! its agent every 2 s: the scanner `stat`s them for that heartbeat at most every 2 s, so the
//! third figure is a scan 2 s after the last, which `stat`s them all.
//!
//! On a local disk (tmpfs or ext4); on EFS each read is a network round trip, which is what the
//! cache saves.

use std::hint::black_box;
use std::time::{Duration, Instant};

use dt::observe::markers::MarkerScanner;
use dt::protocol::health::HealthReport;
use dt::protocol::launcher::{LauncherReport, LauncherState};

const SIZES: [usize; 2] = [1_000, 10_000];
const ROUNDS: usize = 20;

fn ip(n: usize) -> String {
    let n = n + 256;
    format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255)
}

fn report(dir: &std::path::Path, n: usize) {
    let body = HealthReport {
        instance_id: format!("i-{n:017x}"),
        ok: true,
        gpus_lost: false,
        reason: "ok".into(),
        when: "2026-11-24T10:00:00Z".into(),
        output_tail: vec!["8 of 8 GPUs, no ECC errors, no Xid, below slowdown".into()],
    }
    .render();
    let path = dir.join(format!("health_{}", ip(n)));
    dt::fsutil::write_atomic(&path, &body).expect("report");
}

fn launcher(dir: &std::path::Path, n: usize) {
    let body = LauncherReport {
        instance_id: format!("i-{n:017x}"),
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
    }
    .render();
    let path = dir.join(format!("launcher_{}", ip(n)));
    dt::fsutil::write_atomic(&path, &body).expect("launcher report");
}

/// `rounds` scans, each after `before` (untimed).
fn timed(rounds: usize, mut before: impl FnMut(), scanner: &mut MarkerScanner) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            before();
            let t = Instant::now();
            black_box(scanner.scan(dt::clock::now_millis()).expect("scan"));
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
        for n in 0..workers {
            std::fs::write(
                dir.path().join(format!("prepare_data_success_{}", ip(n))),
                "{}",
            )
            .expect("marker");
            report(dir.path(), n);
        }
        let mut scanner = MarkerScanner::new(dir.path());
        let first = scanner.scan(dt::clock::now_millis()).expect("scan");
        assert_eq!(first.health.len(), workers);
        if !bench {
            println!("markers benchmark scenario holds (run `cargo bench --bench markers`)");
            return;
        }
        let steady = timed(ROUNDS, || {}, &mut scanner);
        let replaced = timed(
            ROUNDS / 4,
            || (0..workers).for_each(|n| report(dir.path(), n)),
            &mut scanner,
        );
        println!(
            "markers {workers:>6} workers with health reports: steady pass {} (median of {ROUNDS}), every report replaced {} (median of {})",
            show(median(steady)),
            show(median(replaced)),
            ROUNDS / 4
        );
        for n in 0..workers {
            launcher(dir.path(), n);
        }
        let with = scanner.scan(dt::clock::now_millis()).expect("scan");
        assert_eq!(with.launchers.len(), workers);
        let steady = timed(ROUNDS, || {}, &mut scanner);
        let wait = || std::thread::sleep(Duration::from_millis(2050));
        let statted = timed(5, wait, &mut scanner);
        println!(
            "markers {workers:>6} workers with health and launcher reports: steady pass {} (median of {ROUNDS}), a pass that stats every launcher report {} (median of 5)",
            show(median(steady)),
            show(median(statted)),
        );
    }
}
