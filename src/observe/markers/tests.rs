use super::*;
use crate::protocol::health::HealthReport;
use crate::protocol::markers::MarkerKind;
use crate::protocol::signed::SigningKey;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;

fn name(kind: MarkerKind, ip: &str) -> MarkerName {
    MarkerName::new(kind, ip.parse::<IpAddr>().unwrap())
}

#[test]
fn reads_reports_and_ignores_garbage() {
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
    let scan = MarkerScanner::new(d).scan().unwrap();
    let names: Vec<String> = scan.files.keys().map(|n| n.to_string()).collect();
    assert_eq!(
        names,
        [
            "prepare_data_success_10.0.0.7",
            "prepare_data_success_fe80::1",
            "prepare_data_failed_10.0.0.8",
            "prepare_data_failed_10.0.0.10",
        ]
    );
    let failed = &scan.files[&name(MarkerKind::Failed, "10.0.0.8")];
    let summary = "exit 3 after 2 attempt(s): disk full".to_string();
    assert_eq!(
        failed.body,
        Ok(Body::Failed {
            instance_id: None,
            summary
        })
    );
    let bad = &scan.files[&name(MarkerKind::Failed, "10.0.0.10")];
    assert!(bad
        .body
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("not JSON"));
}

#[test]
fn a_report_is_read_once_per_version_and_its_signature_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap();
    let health = name(MarkerKind::Health, "10.0.0.7");
    let report = |ok: bool, reason: &str, at: u64| {
        let body = HealthReport {
            instance_id: "i-0123456789abcdef0".into(),
            ok,
            gpus_lost: false,
            reason: reason.into(),
            when: "2026-11-24T09:00:00Z".into(),
            output_tail: vec![],
        }
        .render();
        let signed = key.sign(&health, &body, at);
        crate::fsutil::write_atomic(&d.join(health.to_string()), &signed).unwrap();
    };
    report(false, "Xid 79", 1);
    let mut scanner = MarkerScanner::new(d);
    let first = Arc::clone(&scanner.scan().unwrap().files[&health]);
    assert_eq!(first.signed.as_ref().unwrap().signed_at, 1);
    let Ok(Body::Health(h)) = &first.body else {
        panic!("{:?}", first.body)
    };
    assert_eq!((h.ok, h.reason.as_str()), (false, "Xid 79"));
    // Unchanged: the same read, not a second one.
    let again = Arc::clone(&scanner.scan().unwrap().files[&health]);
    assert!(Arc::ptr_eq(&first, &again));
    // Replaced (a new inode): read again.
    report(true, "ok", 2);
    let next = &scanner.scan().unwrap().files[&health];
    assert_eq!(next.signed.as_ref().unwrap().signed_at, 2);
    // Replaced until the inode read last is back (ext4 hands a freed one out again, often
    // after two renames): still a new version.
    let ino = |d: &Path| std::fs::metadata(d.join(health.to_string())).unwrap().ino();
    let read_ino = ino(d);
    let mut at = 2;
    while at < 64 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        at += 1;
        report(true, "ok", at);
        if ino(d) == read_ino {
            break;
        }
    }
    let last = &scanner.scan().unwrap().files[&health];
    assert_eq!(last.signed.as_ref().unwrap().signed_at, at);
    fs::remove_file(d.join(health.to_string())).unwrap();
    assert!(scanner.scan().unwrap().files.is_empty());
}

#[test]
fn missing_directory_is_an_incomplete_view() {
    let err = MarkerScanner::new(Path::new("/nonexistent/dt"))
        .scan()
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/dt"), "{err}");
}

#[test]
fn warnings_are_forgotten_with_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir(d.join("health_10.0.0.9")).unwrap();
    let mut scanner = MarkerScanner::new(d);
    scanner.scan().unwrap();
    assert_eq!(scanner.warned.len(), 1);
    fs::remove_dir(d.join("health_10.0.0.9")).unwrap();
    scanner.scan().unwrap();
    assert!(scanner.warned.is_empty());
}
