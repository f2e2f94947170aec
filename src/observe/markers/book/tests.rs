use super::*;
use crate::observe::file_version::FileVersion;
use crate::observe::markers::read;
use crate::protocol::health::HealthReport;
use crate::protocol::launcher::{LauncherReport, LauncherState};
use crate::protocol::signed::SigningKey;

const IP: &str = "10.0.1.5";
const ID: &str = "i-0b0000000000000b5";

fn key() -> SigningKey {
    SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap()
}

fn name(kind: MarkerKind) -> MarkerName {
    MarkerName::new(kind, IP.parse().unwrap())
}

fn health(ok: bool, id: &str) -> Vec<u8> {
    HealthReport {
        instance_id: id.into(),
        ok,
        gpus_lost: !ok,
        reason: if ok {
            "ok".into()
        } else {
            "7 of 8 GPUs".into()
        },
        when: "2026-11-26T10:00:00Z".into(),
        output_tail: vec![],
    }
    .render()
}

fn launcher(state: LauncherState) -> Vec<u8> {
    LauncherReport {
        instance_id: ID.into(),
        state,
        generation: Some(3),
        rdzv_id: None,
        pid: None,
        exit_code: None,
        signal: None,
        restarts: 0,
        reason: "node 1 of 2".into(),
        since: "2026-11-26T10:00:00Z".into(),
        output_tail: vec![],
        stopped: None,
        compute: None,
    }
    .render()
}

/// A scan holding one file, as the scanner reads it.
fn scan_of(kind: MarkerKind, bytes: &[u8]) -> Scan {
    let dir = tempfile::tempdir().unwrap();
    let n = name(kind);
    let path = dir.path().join(n.to_string());
    std::fs::write(&path, bytes).unwrap();
    let version = FileVersion::of(&std::fs::symlink_metadata(&path).unwrap());
    let read = read::read(&path, &n, version, Some(1_000));
    Scan {
        files: BTreeMap::from([(n, Arc::new(read))]),
    }
}

fn keys(k: Option<&SigningKey>) -> Keys {
    Keys {
        by_ip: HashMap::from([(
            IP.parse().unwrap(),
            (ID.to_string(), k.map(|k| k.public().clone())),
        )]),
        complete: true,
    }
}

static NOT_HEARD: std::sync::LazyLock<HashMap<String, Millis>> =
    std::sync::LazyLock::new(HashMap::new);

fn no_floor(_: &str, _: MarkerKind) -> Option<u64> {
    None
}

fn judging(keys: &Keys, now: Millis) -> Judging<'_> {
    Judging {
        keys,
        mode: Reports::Signed,
        now,
        heard: &NOT_HEARD,
        floor: &no_floor,
    }
}

fn ip() -> IpAddr {
    IP.parse().unwrap()
}

#[test]
fn only_the_instances_own_agent_is_believed() {
    let (own, other) = (key(), key());
    let keys = keys(Some(&own));
    let mut book = Book::default();
    let n = name(MarkerKind::Health);
    // Another worker's agent (or user code with a key of its own) signs B's report.
    let forged = scan_of(MarkerKind::Health, &other.sign(&n, &health(false, ID), 5));
    let m = book.judge(&forged, &judging(&keys, 10));
    assert!(m.health.is_empty());
    assert_eq!(m.refused.len(), 1);
    assert!(
        m.refused[0]
            .why
            .contains("not with i-0b0000000000000b5's agent key"),
        "{:?}",
        m.refused
    );
    // Unsigned: refused too.
    let unsigned = scan_of(MarkerKind::Health, &health(false, ID));
    let m = book.judge(&unsigned, &judging(&keys, 10));
    assert!(m.health.is_empty() && m.refused[0].class == "unsigned");
    // The agent's own: believed.
    let own_report = scan_of(MarkerKind::Health, &own.sign(&n, &health(false, ID), 6));
    let m = book.judge(&own_report, &judging(&keys, 10));
    assert!(!m.health[&ip()].ok, "{m:?}");
    assert!(m.refused.is_empty());
}

#[test]
fn a_report_deleted_or_replaced_by_an_older_one_changes_nothing() {
    let own = key();
    let keys = keys(Some(&own));
    let n = name(MarkerKind::Health);
    let mut book = Book::default();
    let healthy_then = own.sign(&n, &health(true, ID), 5);
    let sick_now = own.sign(&n, &health(false, ID), 9);
    book.judge(&scan_of(MarkerKind::Health, &sick_now), &judging(&keys, 10));
    // Deleted: still what the agent last said.
    let m = book.judge(&Scan::default(), &judging(&keys, 11));
    assert!(!m.health[&ip()].ok);
    // The agent's older report put back: refused, and the newer one still counts.
    let m = book.judge(
        &scan_of(MarkerKind::Health, &healthy_then),
        &judging(&keys, 12),
    );
    assert!(!m.health[&ip()].ok);
    assert_eq!(m.refused[0].class, "before-newest");
    assert!(
        m.refused[0].why.contains("sent again by someone"),
        "{}",
        m.refused[0].why
    );
}

#[test]
fn nothing_older_than_what_dtd_believed_before_it_restarted_is_believed() {
    let own = key();
    let keys = keys(Some(&own));
    let n = name(MarkerKind::Health);
    // The book of a restarted dtd: empty, but the state remembers a report signed at 9.
    let mut book = Book::default();
    let floor = |id: &str, kind| (id == ID && kind == MarkerKind::Health).then_some(9);
    let j = Judging {
        floor: &floor,
        ..judging(&keys, 20)
    };
    let sick_before = own.sign(&n, &health(false, ID), 5);
    let m = book.judge(&scan_of(MarkerKind::Health, &sick_before), &j);
    assert!(m.health.is_empty(), "{m:?}");
    assert_eq!(m.refused[0].class, "before-newest");
    assert!(m.newest.is_empty());
    let healthy_now = own.sign(&n, &health(true, ID), 12);
    let m = book.judge(&scan_of(MarkerKind::Health, &healthy_now), &j);
    assert!(m.health[&ip()].ok);
    assert_eq!(m.newest, vec![(ID.to_string(), MarkerKind::Health, 12)]);
    // Told once: the next pass has nothing newer to remember.
    let m = book.judge(&scan_of(MarkerKind::Health, &healthy_now), &j);
    assert!(m.newest.is_empty());
}

#[test]
fn a_report_naming_another_instance_is_refused_and_one_without_a_key_waits() {
    let own = key();
    let n = name(MarkerKind::Success);
    let mut book = Book::default();
    let line = b"{\"instance_id\":\"i-0c0000000000000c6\"}\n";
    let other_instance = scan_of(MarkerKind::Success, &own.sign(&n, line, 3));
    let m = book.judge(&other_instance, &judging(&keys(Some(&own)), 10));
    assert!(m.success.is_empty());
    assert!(m.refused[0].why.contains("names \"i-0c0000000000000c6\""));
    let mine = format!("{{\"instance_id\":\"{ID}\"}}\n");
    let signed = scan_of(MarkerKind::Success, &own.sign(&n, mine.as_bytes(), 4));
    let m = book.judge(&signed, &judging(&keys(None), 10));
    assert!(m.success.is_empty() && m.refused.is_empty());
    assert!(m.pending.contains(&ip()));
    let m = book.judge(&signed, &judging(&keys(Some(&own)), 11));
    assert!(m.success.contains(&ip()));
    assert_eq!(m.ready_at[&ip()], 1_000);
}

#[test]
fn reports_are_forgotten_when_ec2_lists_another_instance_at_the_ip() {
    let own = key();
    let n = name(MarkerKind::Success);
    let mut book = Book::default();
    let mine = format!("{{\"instance_id\":\"{ID}\"}}\n");
    let signed = scan_of(MarkerKind::Success, &own.sign(&n, mine.as_bytes(), 4));
    book.judge(&signed, &judging(&keys(Some(&own)), 10));
    let reused = Keys {
        by_ip: HashMap::from([(ip(), ("i-0d0000000000000d7".to_string(), None))]),
        complete: true,
    };
    let m = book.judge(&Scan::default(), &judging(&reused, 11));
    assert!(m.success.is_empty());
    assert!(book.believed.is_empty());
}

#[test]
fn a_launcher_is_heard_when_its_agent_last_was_on_its_connection() {
    let own = key();
    let keys = keys(Some(&own));
    let n = name(MarkerKind::Launcher);
    let mut book = Book::default();
    let at = 1_000_000;
    let report = own.sign(&n, &launcher(LauncherState::Running), at);
    let heard = HashMap::from([(ID.to_string(), at + 7_500)]);
    let j = Judging {
        heard: &heard,
        ..judging(&keys, at + 40_000)
    };
    let m = book.judge(&scan_of(MarkerKind::Launcher, &report), &j);
    assert_eq!(m.launchers[&ip()].heard_at, at + 7_500);
    // Not heard on a connection since dtd started: not silent either.
    let m = book.judge(
        &scan_of(MarkerKind::Launcher, &report),
        &judging(&keys, at + 50_000),
    );
    assert_eq!(m.launchers[&ip()].heard_at, at + 50_000);
}

#[test]
fn unsigned_mode_takes_prepare_data_markers_and_ignores_the_rest() {
    let mut book = Book::default();
    let keys = keys(None);
    let j = Judging {
        mode: Reports::Unsigned,
        ..judging(&keys, 10)
    };
    let m = book.judge(&scan_of(MarkerKind::Success, b""), &j);
    assert!(m.success.contains(&ip()));
    let m = book.judge(&scan_of(MarkerKind::Health, &health(false, ID)), &j);
    assert!(m.health.is_empty() && m.refused.is_empty());
}
