use super::*;

fn removal(stage: Stage) -> Removal {
    Removal {
        id: "i-1".into(),
        ip: "10.0.0.1".parse().expect("an IP"),
        generation: 3,
        queued_at: 10,
        deadline: 20,
        log_mark: 1,
        reason: "elastic tag deleted".into(),
        stage,
    }
}

#[test]
fn each_move_of_the_stage_goes_only_where_it_may() {
    let awaiting = |then| Stage::AwaitingAck {
        cause: Cause::ElasticTag,
        then,
        heartbeat_at: None,
    };
    // Acknowledged: the ending begins; without one it stays as it is.
    let mut s = awaiting(Some(Ending::Terminate));
    assert_eq!(s.job_done(), Some(Ending::Terminate));
    assert_eq!(s, Stage::Ending(Ending::Terminate));
    let mut stays = awaiting(None);
    assert_eq!(stays.job_done(), None);
    assert_eq!(stays, awaiting(None));
    // Only an ending in progress is confirmed.
    assert!(!stays.confirm() && s.confirm());
    assert_eq!(s, Stage::Ended);
    assert!(!s.confirm());
    // An agent's interruption, then AWS's own word for it: news once, then confirmed.
    let mut r = awaiting(None);
    assert!(r.reclaim(Some(5)));
    assert!(!r.reclaim(None));
    assert_eq!(
        r,
        Stage::Reclaiming {
            unconfirmed_until: None
        }
    );
}

#[test]
fn every_stage_survives_state_json() {
    let stages = [
        Stage::AwaitingAck {
            cause: Cause::Rebalance,
            then: Some(Ending::Hook { name: "h".into() }),
            heartbeat_at: Some(15),
        },
        Stage::AwaitingAck {
            cause: Cause::OutOfService,
            then: None,
            heartbeat_at: None,
        },
        Stage::Ending(Ending::GroupTerminate { decrement: true }),
        Stage::Ending(Ending::Terminate),
        Stage::Ending(Ending::MarkUnhealthy),
        Stage::AwaitingAck {
            cause: Cause::Unhealthy,
            then: Some(Ending::MarkUnhealthy),
            heartbeat_at: None,
        },
        Stage::Ended,
        Stage::Reclaiming {
            unconfirmed_until: None,
        },
        Stage::Reclaiming {
            unconfirmed_until: Some(120_000),
        },
    ];
    for stage in stages {
        let r = removal(stage);
        let json = serde_json::to_string(&r).expect("serialized");
        let back: Removal = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, r, "{json}");
    }
}

#[test]
fn an_earlier_releases_removal_is_read() {
    let json = r#"{"id":"i-1","ip":"10.0.0.1","generation":3,"queued_at":10,"deadline":20,
        "log_mark":1,"reason":"r","termination":"waiting"}"#;
    let r: Removal = serde_json::from_str(json).expect("read");
    let want = Stage::AwaitingAck {
        cause: Cause::ElasticTag,
        then: Some(Ending::Terminate),
        heartbeat_at: None,
    };
    assert_eq!(r.stage, want);
    let interrupted = json.replace(
        r#""termination":"waiting""#,
        r#""termination":"sent","cause":"interrupted""#,
    );
    let r: Removal = serde_json::from_str(&interrupted).expect("read");
    let want = Stage::Reclaiming {
        unconfirmed_until: None,
    };
    assert_eq!(r.stage, want);
}

#[test]
fn the_file_keeps_its_flat_shape() {
    let r = removal(Stage::Ending(Ending::Hook { name: "h".into() }));
    let v = serde_json::to_value(&r).expect("serialized");
    assert_eq!(v["termination"], "requested");
    assert_eq!(v["end"], serde_json::json!({"hook": {"name": "h"}}));
}
