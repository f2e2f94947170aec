use super::*;
use crate::observe::markers::read;
use crate::protocol::markers::MarkerKind;
use crate::protocol::signed::SigningKey;

const ID: &str = "i-0b0000000000000b5";

fn key() -> SigningKey {
    SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap()
}

fn ip() -> IpAddr {
    "10.0.1.5".parse().unwrap()
}

fn proof(k: &SigningKey, at: Millis) -> Proof {
    Proof {
        instance_id: ID.into(),
        ip: ip(),
        key: k.public().clone(),
        account_id: "123456789012".into(),
        at,
    }
}

fn health(k: &SigningKey, signed_at: u64) -> (MarkerName, Read) {
    let name = MarkerName::new(MarkerKind::Health, ip());
    let line = format!("{{\"instance_id\":\"{ID}\",\"ok\":true,\"gpus_lost\":false,\"reason\":\"ok\",\"when\":\"2026-11-28T04:00:00Z\",\"output_tail\":[]}}\n");
    let signed = k.sign(&name, line.as_bytes(), signed_at);
    (name, read::from_bytes(&name, &signed, None, None))
}

#[test]
fn the_first_key_proved_keeps_its_place_until_one_is_pinned() {
    let (a, b) = (key(), key());
    let board = Board::default();
    assert!(board.prove(proof(&a, 1)).is_ok());
    let e = board.prove(proof(&b, 2)).unwrap_err();
    assert!(matches!(e, KeyRefused::NotFirst { .. }), "{e}");
    // Once dtd pins a key, only that one is taken, whoever came first.
    board.set_pins(HashMap::from([(ID.to_string(), b.public().clone())]));
    let e = board.prove(proof(&a, 3)).unwrap_err();
    assert!(matches!(e, KeyRefused::NotPinned { .. }), "{e}");
    assert!(board.prove(proof(&b, 4)).is_ok());
}

#[test]
fn a_newer_connection_of_the_same_agent_ends_the_older_and_a_forgotten_one_ends() {
    let a = key();
    let board = Board::default();
    let first = board.prove(proof(&a, 1)).unwrap();
    let second = board.prove(proof(&a, 2)).unwrap();
    // The older is told to end at once; the newer is not.
    assert!(first.is_set(), "the older connection is told to end");
    assert!(!second.is_set());
    board.forget(|_, _| false);
    assert!(
        second.is_set(),
        "a forgotten agent's connection is told to end"
    );
    assert!(board.take(10).proofs.is_empty());
}

#[test]
fn a_report_is_kept_only_when_newer_than_the_one_kept_and_its_first_time_stays() {
    let a = key();
    let board = Board::default();
    board.prove(proof(&a, 1)).unwrap();
    let (name, r) = health(&a, 100);
    board.report(ID, name, r, 100, 1_000).unwrap();
    let (_, older) = health(&a, 99);
    assert_eq!(board.report(ID, name, older, 99, 1_001), Err(100));
    let (_, same) = health(&a, 100);
    assert_eq!(board.report(ID, name, same, 100, 1_002), Err(100));
    let (_, newer) = health(&a, 101);
    board.report(ID, name, newer, 101, 2_000).unwrap();
    let heard = board.take(2_000);
    let kept = &heard.scan.files[&name];
    assert_eq!(kept.signed.as_ref().unwrap().signed_at, 101);
    assert_eq!(kept.modified, Some(1_000), "first received, not last");
    assert_eq!(heard.heard[ID], 2_000);
}

#[test]
fn refusals_are_bounded_and_forgotten_when_not_seen_again() {
    let board = Board::default();
    for n in 0..(MAX_REFUSALS + 10) {
        board.refuse(Refusal {
            ip: IpAddr::from([10, 0, (n / 256) as u8, (n % 256) as u8]),
            file: "connection".into(),
            class: "crowded".into(),
            why: "too many".into(),
            last: 0,
        });
    }
    assert_eq!(board.take(1).refused.len(), MAX_REFUSALS);
    assert!(board.take(REFUSAL_SHOWN_MS).refused.is_empty());
}
