use super::*;
use crate::config::Config;

const CONFIG: &str = "cluster: demo
workers: { launch_template: lt-0abc, min: 1, max: 3, base_hosts: [10.0.0.5] }
shared_dir: /efs
job: { ack: { host_worker_log: /efs/host_worker_log } }
events: { queue_url: 'https://sqs.us-east-1.amazonaws.com/1/q' }
";

fn member(n: u8, generation: u64, acked: bool) -> Member {
    Member {
        id: format!("i-{n}"),
        ip: format!("10.0.1.{n}").parse().expect("an IP"),
        instance_type: "p3.2xlarge".into(),
        joined_generation: generation,
        joined_at: 0,
        log_mark: 0,
        acked,
    }
}

/// Built from a pass's data alone, without the daemon's loop.
#[test]
fn a_report_is_built_from_what_a_pass_saw_and_decided() {
    let cfg = Config::parse(CONFIG).expect("config");
    let snap = Snapshot {
        markers: Err("shared directory /efs: no answer in 5s".into()),
        acks: Ok(Acks {
            log_lines: 4,
            ..Acks::default()
        }),
        ..empty_snapshot()
    };
    let state = State {
        generation: 3,
        members: vec![member(1, 2, true), member(2, 3, false)],
        ..State::default()
    };
    let outcome = Outcome {
        hosts: vec![crate::protocol::host_files::Host {
            ip: "10.0.0.5".parse().expect("an IP"),
            slots: 1,
        }],
        holds: vec!["prepare-data markers: no answer".into()],
        ..Outcome::default()
    };
    let facts = PassFacts {
        outcome: &outcome,
        snap: &snap,
        state: &state,
        queue_error: Some("ReceiveMessage: throttled"),
        mount_targets: None,
        ec2_calls: 1,
        listed_at: Some(1_000),
        pass_ms: 12,
        errors: &[],
        totals: &Totals::default(),
        alerts: Vec::new(),
        lighthouse: None,
        now: 1_000,
    };
    let report = StatusReport::build(&cfg, facts);
    // The log confirms every join up to generation 2; generation 3's is not yet confirmed.
    assert_eq!(report.acked_generation, Some(2));
    assert_eq!((report.min, report.max, report.current), (1, 3, 1));
    assert_eq!(report.desired, 1, "only the base host: no rows");
    let sources: Vec<(&str, bool)> = (report.sources.iter())
        .map(|s| (s.name.as_str(), s.ok))
        .collect();
    assert_eq!(
        sources,
        [
            ("EC2 instances", true),
            ("prepare-data markers", false),
            ("acknowledgements", true),
            ("event queue", false),
        ]
    );
    assert_eq!(report.sources[3].detail, "ReceiveMessage: throttled");
    assert_eq!(report.holds, outcome.holds);
    assert_eq!(report.replacing_stopped, None);
}

fn alert(last_error: Option<&str>, failing_since: Option<Millis>) -> AlertStatus {
    AlertStatus {
        webhook: "https://hooks.slack.com/…".into(),
        format: crate::config::AlertFormat::Slack,
        sent: 4,
        pending: 2,
        dropped: 1,
        last_error: last_error.map(str::to_string),
        failing_since,
    }
}

#[test]
fn a_failing_webhook_gets_a_line_and_a_healthy_one_none() {
    let mut report = empty_report();
    report.alerts = vec![
        alert(None, None),
        alert(Some("tcp connect error: Connection refused"), Some(10_000)),
    ];
    let text = report.render(25_000);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("Alert:")).collect();
    assert_eq!(
        lines,
        ["Alert:       https://hooks.slack.com/… FAILING for 15s: tcp connect error: Connection refused (sent 4, pending 2, dropped 1)"]
    );
}

#[test]
fn a_status_written_before_alerts_existed_still_reads() {
    let mut json = serde_json::to_value(empty_report()).expect("JSON");
    json.as_object_mut().expect("an object").remove("alerts");
    let report: StatusReport = serde_json::from_value(json).expect("read");
    assert!(report.alerts.is_empty());
}

fn progress_lines(p: ProgressStatus, now: Millis) -> Vec<String> {
    let mut report = empty_report();
    report.progress = Some(p);
    let text = report.render(now);
    let lines = text
        .lines()
        .filter(|l| l.starts_with("Stalled:") || l.starts_with("Progress:"));
    lines.map(str::to_string).collect()
}

fn progress(step: Option<u64>, stalled: bool, error: Option<&str>) -> ProgressStatus {
    ProgressStatus {
        file: "/efs/progress".into(),
        step,
        advanced_at: step.map(|_| 1_795_508_201_000),
        stalled,
        stall_after_ms: 600_000,
        held_back: String::new(),
        error: error.map(str::to_string),
    }
}

const HELD_BACK: &str =
    "held back by 10.0.1.8 (its process 4242 stopped); drained (job.stall.action: drain)";

#[test]
fn a_stall_gets_its_line_with_the_step_and_how_long() {
    let now = 1_795_508_201_000 + 603_000;
    assert_eq!(
        progress_lines(progress(Some(1234), true, None), now),
        ["Stalled:     step 1234 has not advanced for 10m 3s (since 2026-11-24T08:16:41Z)"]
    );
    assert_eq!(
        progress_lines(progress(Some(1234), false, None), now - 600_000),
        ["Progress:    step 1234, last advanced 3s ago (a stall after 10m)"]
    );
    assert_eq!(
        progress_lines(progress(None, false, None), now),
        ["Progress:    no step read from /efs/progress yet (a stall after 10m once there is)"]
    );
    assert_eq!(
        progress_lines(
            progress(Some(1234), true, Some("/efs/progress is a FIFO")),
            now
        ),
        [
            "Stalled:     step 1234 has not advanced for 10m 3s (since 2026-11-24T08:16:41Z)",
            "Progress:    unreadable, no stall concluded: /efs/progress is a FIFO"
        ]
    );
}

#[test]
fn the_progress_comes_from_the_state_and_the_files_error_from_the_snapshot() {
    let cfg = Config::parse(&CONFIG.replace(
        "job: { ack: { host_worker_log: /efs/host_worker_log } }",
        "job: { ack: { host_worker_log: /efs/host_worker_log }, stall: { after: 10m } }",
    ))
    .expect("config");
    let snap = Snapshot {
        progress: Some(Err("/efs/progress is a FIFO".into())),
        ..empty_snapshot()
    };
    let state = State {
        progress: Some(JobProgress {
            step: 1234,
            advanced_at: 1_795_508_201_000,
            stalled: true,
            held_back: HELD_BACK.into(),
            run: None,
            generation: None,
        }),
        ..State::default()
    };
    let report = StatusReport::build(&cfg, facts(&Outcome::default(), &snap, &state));
    let expected = ProgressStatus {
        held_back: HELD_BACK.into(),
        ..progress(Some(1234), true, Some("/efs/progress is a FIFO"))
    };
    assert_eq!(report.progress, Some(expected));
}

#[test]
fn a_stall_names_the_nodes_holding_it_back_under_its_line() {
    let stalled = ProgressStatus {
        held_back: HELD_BACK.into(),
        ..progress(Some(1234), true, None)
    };
    let mut o = String::new();
    stalled.render(&mut o, 1_795_508_201_000 + 603_000);
    assert_eq!(
        o.lines().collect::<Vec<_>>(),
        [
            "Stalled:     step 1234 has not advanced for 10m 3s (since 2026-11-24T08:16:41Z)",
            &format!("             {HELD_BACK}"),
        ]
    );
}

#[test]
fn without_stall_detection_there_is_no_progress_line() {
    let report = empty_report();
    assert_eq!(report.progress, None);
    assert!(!report.render(0).contains("Progress:"));
    let json = serde_json::to_value(&report).expect("JSON");
    assert!(json.get("progress").is_none());
}

fn empty_snapshot() -> Snapshot {
    Snapshot {
        reservations: None,
        instances: Ok(Vec::new()),
        markers: Ok(Markers::default()),
        acks: Ok(Acks::default()),
        notices: Vec::new(),
        group: None,
        resume_requested: None,
        subnet_zones: Default::default(),
        capacity_refusals: Vec::new(),
        mount_targets: None,
        progress: None,
    }
}

fn facts<'a>(outcome: &'a Outcome, snap: &'a Snapshot, state: &'a State) -> PassFacts<'a> {
    PassFacts {
        outcome,
        snap,
        state,
        queue_error: None,
        mount_targets: None,
        ec2_calls: 0,
        listed_at: None,
        pass_ms: 1,
        errors: &[],
        totals: &TOTALS,
        alerts: Vec::new(),
        lighthouse: None,
        now: 0,
    }
}

const TOTALS: Totals = Totals {
    since: 0,
    gpu_seconds_training: 0.0,
    gpu_seconds_idle: 0.0,
};

fn empty_report() -> StatusReport {
    let cfg = Config::parse(CONFIG).expect("config");
    let snap = empty_snapshot();
    StatusReport::build(&cfg, facts(&Outcome::default(), &snap, &State::default()))
}
