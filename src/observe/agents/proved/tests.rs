use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream as StdStream};

use super::*;
use crate::clock::SystemClock;
use crate::observe::agents::board::Board;
use crate::protocol::identity::Certificates;
use crate::protocol::signed::SigningKey;

const ID: &str = "i-0b0000000000000b5";

struct Open {
    board: Arc<Board>,
    door: Door,
    running: Option<Running>,
    /// The agent's: every connection of the test's is the same agent's.
    key: SigningKey,
    /// Kept so that the hellos' side of the port stays open.
    _open: tokio::sync::watch::Sender<()>,
}

fn open_room(idle: Duration) -> Open {
    let (door, room) = open().unwrap();
    let (open, closed) = tokio::sync::watch::channel(());
    let board = Arc::new(Board::default());
    let ctx = Arc::new(Ctx {
        board: Arc::clone(&board),
        closed,
        certs: Certificates::aws(),
        skew: 60_000,
        clock: Arc::new(SystemClock),
        idle,
    });
    let running = Some(room.run(ctx).unwrap());
    Open {
        board,
        door,
        running,
        key: SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap(),
        _open: open,
    }
}

/// A connected pair: the agent's end, and dtd's with its hello believed for `ID`.
fn proved(o: &Open, after_hello: &[u8]) -> StdStream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let agent = StdStream::connect(l.local_addr().unwrap()).unwrap();
    let (dtd, peer) = l.accept().unwrap();
    dtd.set_nonblocking(true).unwrap();
    let proof = Proof {
        instance_id: ID.into(),
        ip: peer.ip(),
        key: o.key.public().clone(),
        account_id: "123456789012".into(),
        at: 1,
    };
    let displaced = o.board.prove(proof.clone()).unwrap();
    o.door.adopt(Adopted {
        stream: dtd,
        peer,
        proof,
        displaced,
        unread: after_hello.to_vec(),
    });
    agent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    agent
}

fn answer(r: &mut BufReader<StdStream>) -> Answer {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// Waits, up to the agent's read timeout, for dtd to close the connection.
fn closed(r: &mut BufReader<StdStream>) -> bool {
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).is_ok() && rest.is_empty()
}

#[test]
fn lines_that_came_with_the_hello_or_in_pieces_are_each_answered() {
    let o = open_room(Duration::from_secs(60));
    let mut agent = proved(&o, b"ping\npi");
    let mut r = BufReader::new(agent.try_clone().unwrap());
    assert!(answer(&mut r).ok, "the line that came with the hello");
    agent.write_all(b"ng\n").unwrap();
    assert!(answer(&mut r).ok, "the line begun with the hello");
    for piece in [&b"pi"[..], b"n", b"g\nping\n"] {
        agent.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(answer(&mut r).ok);
    assert!(answer(&mut r).ok);
    agent.write_all(b"{not a frame}\n").unwrap();
    assert!(!answer(&mut r).ok, "a garbled line is refused");
    assert!(closed(&mut r), "and ends the connection");
    assert!(o.board.take(2).heard.contains_key(ID));
}

#[test]
fn a_displaced_connection_is_not_heard_and_is_closed() {
    let o = open_room(Duration::from_secs(60));
    let mut old = proved(&o, b"");
    let mut r = BufReader::new(old.try_clone().unwrap());
    old.write_all(b"ping\n").unwrap();
    assert!(answer(&mut r).ok);
    let _newer = proved(&o, b"");
    old.write_all(b"ping\n").unwrap();
    assert!(closed(&mut r), "the older connection is closed unanswered");
}

#[test]
fn a_silent_connection_is_closed_and_every_one_closes_when_the_thread_stops() {
    let mut o = open_room(Duration::from_millis(200));
    let silent = proved(&o, b"");
    assert!(
        closed(&mut BufReader::new(silent)),
        "closed within the read's 10 s"
    );

    let mut o2 = open_room(Duration::from_secs(60));
    let kept = proved(&o2, b"ping\n");
    let mut r = BufReader::new(kept);
    assert!(answer(&mut r).ok);
    drop(o2.running.take());
    assert!(closed(&mut r), "stopping the thread closes its connections");
    drop(o.running.take());
}
