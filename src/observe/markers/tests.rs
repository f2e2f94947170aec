use super::*;

#[test]
fn reads_markers_and_ignores_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("prepare_data_success_10.0.0.7"), "").unwrap();
    fs::write(d.join("prepare_data_success_fe80::1"), "").unwrap();
    fs::write(d.join("prepare_data_success_10.0.0.7;rm -rf"), "").unwrap();
    fs::write(d.join("prepare_data_success_../../etc"), "").unwrap_or(());
    fs::create_dir(d.join("prepare_data_success_10.0.0.9")).unwrap();
    fs::write(
        d.join("prepare_data_failed_10.0.0.8"),
        r#"{"exit_code": 3, "attempts": 2, "output_tail": ["a", "disk full"]}"#,
    )
    .unwrap();
    fs::write(d.join("prepare_data_failed_10.0.0.10"), "{truncated").unwrap();
    fs::write(d.join("host_worker"), "").unwrap();
    let m = MarkerScanner::new(d)
        .scan(crate::clock::now_millis())
        .unwrap();
    let ok: Vec<String> = m.success.iter().map(|i| i.to_string()).collect();
    assert_eq!(ok, vec!["10.0.0.7", "fe80::1"]);
    let failed = &m.failed[&"10.0.0.8".parse::<IpAddr>().unwrap()];
    assert_eq!(failed, "exit 3 after 2 attempt(s): disk full");
    let bad = &m.failed[&"10.0.0.10".parse::<IpAddr>().unwrap()];
    assert_eq!(bad, "no readable failure report");
}

#[test]
fn health_reports_are_read_once_per_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ip: IpAddr = "10.0.0.7".parse().unwrap();
    let report = |ok: bool, reason: &str| {
        let body = HealthReport {
            instance_id: "i-0123456789abcdef0".into(),
            ok,
            gpus_lost: false,
            reason: reason.into(),
            when: "2026-11-24T09:00:00Z".into(),
            output_tail: vec![],
        }
        .render();
        crate::fsutil::write_atomic(&d.join("health_10.0.0.7"), &body).unwrap();
    };
    report(false, "Xid 79");
    fs::write(d.join("health_10.0.0.8"), "not json").unwrap();
    let mut scanner = MarkerScanner::new(d);
    let m = scanner.scan(crate::clock::now_millis()).unwrap();
    assert_eq!(m.health[&ip].reason, "Xid 79");
    assert!(!m.health[&ip].ok);
    assert_eq!(m.health[&ip].when, Some(1_795_510_800_000));
    assert_eq!(m.health.len(), 1, "an unreadable report is no report");
    // Replaced (a new inode): read again.
    report(true, "ok");
    assert!(scanner.scan(crate::clock::now_millis()).unwrap().health[&ip].ok);
    fs::remove_file(d.join("health_10.0.0.7")).unwrap();
    assert!(scanner
        .scan(crate::clock::now_millis())
        .unwrap()
        .health
        .is_empty());
}

#[test]
fn missing_directory_is_an_incomplete_view() {
    let err = MarkerScanner::new(Path::new("/nonexistent/dt"))
        .scan(crate::clock::now_millis())
        .unwrap_err();
    assert!(err.contains("/nonexistent/dt"), "{err}");
}
