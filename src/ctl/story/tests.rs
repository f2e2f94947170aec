use super::*;

const ID: &str = "i-0123456789abcdef0";
const OTHER: &str = "i-0fedcba9876543210";

fn ev(time: Millis, kind: EventKind, id: &str, addr: &str) -> Event {
    Event {
        instance: Some(id.into()),
        ip: Some(addr.parse().unwrap()),
        message: format!("{kind} at {time}"),
        ..Event::new(time, kind, String::new())
    }
}

fn launched(mut e: Event, at: Millis) -> Event {
    e.launched_at = Some(at);
    e
}

/// Launched at 0; preparing seen at 5s; joined at 60s (g1), acknowledged at 62s; its elastic
/// tag deleted at 1h, acknowledged at 1h 10s, terminated at 1h 11s.
fn a_whole_life(id: &str, addr: &str, from: Millis) -> Vec<Event> {
    let at = |s: u64| from + s * 1000;
    let mut queued = ev(at(3600), EventKind::RemovalQueued, id, addr);
    queued.cause = Some(Cause::ElasticTag);
    vec![
        launched(ev(at(5), EventKind::Preparing, id, addr), from),
        launched(ev(at(60), EventKind::Joined, id, addr), from),
        ev(at(62), EventKind::JoinAcknowledged, id, addr),
        queued,
        ev(at(3610), EventKind::Acknowledged, id, addr),
        ev(at(3611), EventKind::Terminated, id, addr),
    ]
}

fn span(ms: u64, between: &'static str) -> Option<Span> {
    Some(Span {
        ms,
        between,
        open: false,
    })
}

#[test]
fn a_whole_life_is_told_in_order_with_its_totals() {
    let mut events = a_whole_life(ID, "10.0.1.5", 0);
    // Lines about the cluster or other workers are not part of it.
    events.insert(2, Event::new(60_000, EventKind::Generation, "g1".into()));
    events.insert(3, ev(61_000, EventKind::Joined, OTHER, "10.0.1.6"));
    let target = Target::parse("10.0.1.5").unwrap();
    let stories = stories(&events, &target, 9_999_999);
    assert_eq!(stories.len(), 1);
    let s = &stories[0];
    assert_eq!((s.instance.as_str(), s.launched_at), (ID, Some(0)));
    let kinds: Vec<&str> = s.steps.iter().map(|x| x.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "preparing",
            "joined",
            "join_acknowledged",
            "removal_queued",
            "acknowledged",
            "terminated"
        ]
    );
    assert_eq!(
        s.steps[0].note.as_deref(),
        Some("preparing for 55s after dtd first saw it (until joined)")
    );
    let asked = s.steps[3].note.as_deref().unwrap_or_default();
    assert!(asked.contains("elastic tag was deleted") && asked.contains("dtctl remove"));
    assert_eq!(
        s.totals,
        TimeSpent {
            preparing: span(60_000, PREPARING),
            launch_to_training: span(62_000, LAUNCH_TO_TRAINING),
            // 2 s in the host files before the acknowledgement, 1 s let go before terminated.
            ready_idle: span(3_000, READY_IDLE),
            in_job: span(3_538_000, IN_JOB),
            leaving: span(10_000, LEAVING),
        }
    );
}

#[test]
fn a_reused_ip_tells_each_instance_apart_oldest_first() {
    let mut events = a_whole_life(OTHER, "10.0.1.5", 0);
    events.extend(a_whole_life(ID, "10.0.1.5", 10_000_000));
    let by_ip = stories(
        &events,
        &Target::Ip("10.0.1.5".parse().unwrap()),
        20_000_000,
    );
    let ids: Vec<&str> = by_ip.iter().map(|s| s.instance.as_str()).collect();
    assert_eq!(ids, [OTHER, ID]);
    assert!(by_ip.iter().all(|s| s.steps.len() == 6));
    let by_id = stories(&events, &Target::Instance(ID.into()), 20_000_000);
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].launched_at, Some(10_000_000));
    assert!(stories(&events, &Target::Ip("10.0.1.9".parse().unwrap()), 0).is_empty());
}

#[test]
fn what_is_still_under_way_is_measured_up_to_now() {
    let events = &a_whole_life(ID, "10.0.1.5", 0)[..3];
    let s = &stories(events, &Target::Instance(ID.into()), 100_000)[0];
    let in_job = s.totals.in_job.clone();
    assert_eq!(in_job.map(|x| (x.ms, x.open)), Some((38_000, true)));
    assert!(s.totals.leaving.is_none());

    let preparing = &events[..1];
    let s = &stories(preparing, &Target::Instance(ID.into()), 65_000)[0];
    assert_eq!(
        s.steps[0].note.as_deref(),
        Some("still preparing: 1m so far")
    );
    assert_eq!(s.totals, TimeSpent::default());
}

#[test]
fn a_failed_prepare_never_trains() {
    let mut queued = ev(31_000, EventKind::RemovalQueued, ID, "10.0.1.5");
    queued.cause = Some(Cause::PrepareFailed);
    let events = [
        launched(ev(1_000, EventKind::Preparing, ID, "10.0.1.5"), 0),
        ev(30_000, EventKind::PrepareFailed, ID, "10.0.1.5"),
        queued,
        ev(31_000, EventKind::Terminated, ID, "10.0.1.5"),
    ];
    let s = &stories(&events, &Target::Instance(ID.into()), 99_000)[0];
    assert_eq!(
        s.steps[0].note.as_deref(),
        Some("preparing for 29s after dtd first saw it (until prepare_failed)")
    );
    assert!(s.steps[2]
        .note
        .as_deref()
        .is_some_and(|n| n.contains("prepare-data failed")));
    assert_eq!(
        s.totals,
        TimeSpent {
            preparing: span(30_000, PREPARING),
            ..TimeSpent::default()
        }
    );
}

#[test]
fn an_interrupted_worker_leaves_at_once_and_a_cancelled_removal_idles_until_it_rejoins() {
    let (a, b) = ("10.0.1.5", ID);
    let mut events = a_whole_life(b, a, 0)[..3].to_vec();
    events.push(ev(100_000, EventKind::RemovalQueued, b, a));
    events.push(ev(104_000, EventKind::RemovalCancelled, b, a));
    events.push(ev(106_000, EventKind::Joined, b, a));
    events.push(ev(107_000, EventKind::JoinAcknowledged, b, a));
    events.push(ev(200_000, EventKind::Interrupted, b, a));
    let s = &stories(&events, &Target::Instance(b.into()), 999_000)[0];
    let t = &s.totals;
    assert_eq!(t.in_job.as_ref().map(|x| x.ms), Some(38_000 + 93_000));
    assert_eq!(t.leaving.as_ref().map(|x| x.ms), Some(4_000));
    // 2 s before the first acknowledgement, 2 s cancelled, 1 s before the second.
    assert_eq!(
        t.ready_idle.as_ref().map(|x| (x.ms, x.open)),
        Some((5_000, false))
    );
    assert_eq!(
        s.steps.last().and_then(|x| x.note.as_deref()),
        Some("asked by AWS: the instance is being taken away")
    );
}

#[test]
fn the_story_begins_with_preparing_even_when_its_pass_said_more_first() {
    let events = [
        ev(1_000, EventKind::NoMountTarget, ID, "10.0.1.5"),
        ev(1_000, EventKind::Preparing, ID, "10.0.1.5"),
    ];
    let s = &stories(&events, &Target::Instance(ID.into()), 2_000)[0];
    let kinds: Vec<&str> = s.steps.iter().map(|x| x.kind.as_str()).collect();
    assert_eq!(kinds, ["preparing", "no_mount_target"]);
}

#[test]
fn only_an_ip_or_an_instance_id_is_a_target() {
    assert_eq!(
        Target::parse("10.0.1.5"),
        Ok(Target::Ip("10.0.1.5".parse().unwrap()))
    );
    assert!(matches!(Target::parse("fd00::5"), Ok(Target::Ip(_))));
    assert_eq!(Target::parse(ID), Ok(Target::Instance(ID.into())));
    assert!(matches!(
        Target::parse("i-1234abcd"),
        Ok(Target::Instance(_))
    ));
    for bad in [
        "",
        "10.0.1",
        "i-",
        "i-XYZ",
        "i-0123456789ABCDEF0",
        "../state.json",
        "host",
    ] {
        let e = Target::parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("neither an IP address nor an EC2 instance id"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn a_worker_first_seen_ready_but_held_says_how_long_it_waited() {
    let events = [
        launched(ev(5_000, EventKind::Ready, ID, "10.0.1.5"), 0),
        ev(35_000, EventKind::Joined, ID, "10.0.1.5"),
    ];
    let target = Target::parse(ID).unwrap();
    let s = &stories(&events, &target, 99_000)[0];
    assert_eq!(
        s.steps[0].note.as_deref(),
        Some("ready and waiting to join for 30s after dtd first saw it (until joined)")
    );
    let held = &stories(&events[..1], &target, 65_000)[0];
    assert_eq!(
        held.steps[0].note.as_deref(),
        Some("still ready and waiting to join: 1m so far")
    );
}
