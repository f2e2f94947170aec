//! One agent's connection until its hello is believed: the hello first, within a few seconds,
//! proving the instance and its key; then the connection goes to the thread that serves every
//! proved one (`proved`), where each report must be for the hello's IP, signed with its key, at
//! a time near dtd's clock, and newer than the one kept (`said`). A refusal is answered (the
//! agent logs it) and kept on the board to be shown.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::board::{Displaced, Proof};
use super::ctx::Ctx;
use super::hello::{self, Judge};
use super::lines::{self, TooLong, READ_CHUNK};
use super::proved::{Adopted, Door};
use super::said;
use crate::model::Millis;
use crate::protocol::channel::{self, Answer, Frame, HelloName};

/// A connection must say hello this soon, or it is closed: a slot held without a word is a
/// slot a worker's agent may need.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// Why a connection ends before its hello is believed: logged at debug level, as agents
/// reconnect on their own.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("closed by the agent")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("no line within {0:?}")]
    Silent(Duration),
    #[error("refused: {0}")]
    Refused(String),
    #[error("dtd stopped taking reports")]
    PortClosed,
}

/// Serves the hello and hands the connection over; `admitted` is released once the hello is
/// believed.
pub async fn serve<G>(stream: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>, door: Door, admitted: G) {
    let mut conn = Conn {
        s: stream,
        peer,
        ctx,
        unread: Vec::new(),
    };
    let mut closed = conn.ctx.closed.clone();
    let ended = tokio::select! {
        hello = conn.hello() => hello,
        _ = closed.changed() => Err(Ended::PortClosed),
    };
    drop(admitted);
    let (proof, displaced) = match ended {
        Ok(proved) => proved,
        Err(why) => return tracing::debug!(%peer, "agent connection ended: {why}"),
    };
    let Conn { s, unread, .. } = conn;
    match s.into_std() {
        Ok(stream) => door.adopt(Adopted {
            stream,
            peer,
            proof,
            displaced,
            unread,
        }),
        Err(e) => tracing::debug!(%peer, "agent connection ended: {e}"),
    }
}

/// A connection until its hello is believed.
struct Conn {
    s: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    /// Bytes received past the hello's end.
    unread: Vec<u8>,
}

impl Conn {
    async fn hello(&mut self) -> Result<(Proof, Arc<Displaced>), Ended> {
        let line =
            match tokio::time::timeout(HELLO_WAIT, read_line(&self.s, &mut self.unread)).await {
                Err(_) => return Err(Ended::Silent(HELLO_WAIT)),
                Ok(read) => read?,
            };
        let now = self.ctx.clock.now();
        let Ok(Frame::Hello { ip, signed }) = channel::parse(&line) else {
            let file = format!("connection from {}", self.peer.ip());
            let why = format!(
                "{file}: its first line is not a hello (identity_<ip> and a signed identity document)"
            );
            return Err(self
                .refuse(self.peer.ip(), &file, "no-hello", why, now)
                .await);
        };
        let judge = Judge {
            certs: &self.ctx.certs,
            now,
            skew: self.ctx.skew,
        };
        let name = HelloName(ip).to_string();
        let proof = match hello::check(ip, signed, &judge) {
            Ok(proof) => proof,
            Err(e) => {
                let why = format!("{name} from {} {e}", self.peer.ip());
                return Err(self.refuse(ip, &name, e.class(), why, now).await);
            }
        };
        match self.ctx.board.prove(proof.clone()) {
            Ok(displaced) => {
                self.answer(Answer::ok(now)).await?;
                tracing::debug!(peer = %self.peer, instance = %proof.instance_id, "agent proved its instance");
                Ok((proof, displaced))
            }
            Err(e) => {
                let why = format!("{name} from {}: {e}", self.peer.ip());
                Err(self.refuse(ip, &name, "hello-key", why, now).await)
            }
        }
    }

    /// Keeps the refusal, tells the agent, and ends the connection.
    async fn refuse(
        &mut self,
        ip: std::net::IpAddr,
        file: &str,
        class: &str,
        why: String,
        now: Millis,
    ) -> Ended {
        said::keep(&self.ctx, self.peer, ip, file, class, why.clone(), now);
        let _ = self.answer(Answer::refused(now, why.clone())).await;
        Ended::Refused(why)
    }

    async fn answer(&mut self, a: Answer) -> Result<(), Ended> {
        self.s.write_all(&a.render()).await?;
        Ok(())
    }
}

/// The next line, without its newline, at most [`channel::MAX_LINE`] bytes; `unread` keeps what came
/// after it. Read with `try_read` after readiness, so that no buffer is held while waiting.
async fn read_line(s: &TcpStream, unread: &mut Vec<u8>) -> Result<Vec<u8>, Ended> {
    let mut searched = 0;
    loop {
        if let Some(line) = lines::take(unread, searched).map_err(too_long)? {
            return Ok(line);
        }
        searched = unread.len();
        s.readable().await?;
        let mut chunk = [0u8; READ_CHUNK];
        match s.try_read(&mut chunk) {
            Ok(0) => return Err(Ended::Closed),
            Ok(n) => unread.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn too_long(e: TooLong) -> Ended {
    Ended::Io(io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::channel::MAX_LINE;
    use tokio::io::AsyncWriteExt;

    /// A connected pair on loopback: what the agent writes, what dtd reads.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (dtd, _) = l.accept().await.unwrap();
        (agent, dtd)
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(f)
    }

    #[test]
    fn lines_are_read_whole_however_they_arrive_and_nothing_is_kept_between_them() {
        run(async {
            let (mut agent, dtd) = pair().await;
            let mut unread = Vec::new();
            agent.write_all(b"hel").await.unwrap();
            let writer = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                agent.write_all(b"lo\nping\nre").await.unwrap();
                agent.write_all(&vec![b'x'; 10_000]).await.unwrap();
                agent.write_all(b"\n").await.unwrap();
                agent
            });
            assert_eq!(read_line(&dtd, &mut unread).await.unwrap(), b"hello");
            assert_eq!(read_line(&dtd, &mut unread).await.unwrap(), b"ping");
            let long = read_line(&dtd, &mut unread).await.unwrap();
            assert_eq!((long.len(), &long[..2]), (10_002, &b"re"[..]));
            assert_eq!(unread.capacity(), 0, "nothing held between lines");
            let agent = writer.await.unwrap();
            drop(agent);
            assert!(matches!(
                read_line(&dtd, &mut unread).await,
                Err(Ended::Closed)
            ));
        });
    }

    #[test]
    fn a_line_longer_than_the_limit_ends_the_read_before_it_is_all_taken() {
        run(async {
            let (mut agent, dtd) = pair().await;
            tokio::spawn(async move {
                let _ = agent.write_all(&vec![b'x'; 4 * MAX_LINE]).await;
                agent
            });
            let mut unread = Vec::new();
            let e = read_line(&dtd, &mut unread).await.unwrap_err();
            assert!(e.to_string().contains("a line longer than"), "{e}");
            assert!(unread.len() <= MAX_LINE + READ_CHUNK);
        });
    }
}
