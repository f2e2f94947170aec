//! One agent's connection: its hello first, within a few seconds, then its reports and pings,
//! each answered. Nothing on it is believed beyond what the hello proved: every report must be
//! for the hello's IP, signed with its key, at a time near dtd's clock, and newer than the one
//! kept. A refusal is answered (the agent logs it) and kept on the board to be shown.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use super::board::{Board, Proof, Refusal};
use super::hello::{self, Judge};
use crate::clock::SharedClock;
use crate::model::Millis;
use crate::observe::markers::read;
use crate::protocol::channel::{self, Answer, Frame, HelloName, MAX_LINE};
use crate::protocol::identity::Certificates;
use crate::protocol::markers::MarkerName;

/// A connection must say hello this soon, or it is closed: a slot held without a word is a
/// slot a worker's agent may need.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// A connection's read buffer; a longer line is gathered in its line buffer.
const READ_BUFFER: usize = 256;

/// What every connection shares.
pub struct Ctx {
    pub board: Arc<Board>,
    /// Changes (its sender gone) when the port closes: every connection ends.
    pub closed: tokio::sync::watch::Receiver<()>,
    pub certs: Certificates,
    /// `workers.max_clock_skew`, in ms.
    pub skew: Millis,
    pub clock: SharedClock,
    /// A proved connection that says nothing for this long is closed (its agent pings more often).
    pub idle: Duration,
}

/// Why a connection ends: logged at debug level, as agents reconnect on their own.
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
    #[error("a newer connection of the same agent took its place")]
    Displaced,
    #[error("dtd stopped taking reports")]
    PortClosed,
}

/// Serves the connection until it ends; `admitted` is released once the hello is believed.
pub async fn serve<G>(stream: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>, admitted: G) {
    let (r, w) = stream.into_split();
    let mut conn = Conn {
        // Small: most lines are pings, and at 10,000 agents every byte here is 10 kB of dtd's
        // memory; a longer line is read through it in pieces.
        r: BufReader::with_capacity(READ_BUFFER, r),
        w,
        peer,
        ctx,
        line: Vec::new(),
    };
    let mut closed = conn.ctx.closed.clone();
    let serve = async {
        // On the heap while it lasts: the hello's state (its timer, the refusal's words) would
        // otherwise stay in every connected agent's task (136 of its 1,104 bytes).
        let (proof, displaced) = Box::pin(conn.hello()).await?;
        drop(admitted);
        conn.speak(&proof, displaced).await
    };
    let ended = tokio::select! {
        ended = serve => ended,
        _ = closed.changed() => Err(Ended::PortClosed),
    };
    if let Err(why) = ended {
        tracing::debug!(%peer, "agent connection ended: {why}");
    }
}

struct Conn {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: OwnedWriteHalf,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    line: Vec<u8>,
}

impl Conn {
    async fn hello(&mut self) -> Result<(Proof, Arc<tokio::sync::Notify>), Ended> {
        match tokio::time::timeout(HELLO_WAIT, read_line(&mut self.r, &mut self.line)).await {
            Err(_) => return Err(Ended::Silent(HELLO_WAIT)),
            Ok(read) => read?,
        }
        let now = self.ctx.clock.now();
        let line = std::mem::take(&mut self.line);
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

    /// Reports and pings until the agent goes, falls silent, or a newer connection of its
    /// agent takes this one's place.
    async fn speak(
        &mut self,
        proof: &Proof,
        displaced: Arc<tokio::sync::Notify>,
    ) -> Result<(), Ended> {
        loop {
            let idle = self.ctx.idle;
            tokio::select! {
                () = displaced.notified() => return Err(Ended::Displaced),
                read = tokio::time::timeout(idle, read_line(&mut self.r, &mut self.line)) => match read {
                    Err(_) => return Err(Ended::Silent(idle)),
                    Ok(read) => read?,
                },
            }
            let now = self.ctx.clock.now();
            let line = std::mem::take(&mut self.line);
            let answer = match channel::parse(&line) {
                Ok(Frame::Ping) => {
                    self.ctx.board.heard(&proof.instance_id, now);
                    Answer::ok(now)
                }
                Ok(Frame::Report { name, signed }) if name.ip == proof.ip => {
                    match report(&self.ctx, proof, name, signed, now) {
                        Ok(()) => Answer::ok(now),
                        Err((class, why)) => {
                            let why = format!("{name} {why}");
                            self.keep(name.ip, &name.to_string(), class, why.clone(), now);
                            Answer::refused(now, why)
                        }
                    }
                }
                Ok(Frame::Report { name, .. }) => {
                    let why = format!("{name} came on the connection of {} ({}): an agent speaks only for its own instance", proof.instance_id, proof.ip);
                    return Err(self
                        .refuse(proof.ip, &name.to_string(), "other-ip", why, now)
                        .await);
                }
                Ok(Frame::Hello { .. }) => Answer::refused(now, "one hello per connection".into()),
                Err(e) => {
                    let why = format!(
                        "connection from {}: a line from {}'s agent is refused: {e}",
                        self.peer.ip(),
                        proof.instance_id
                    );
                    let file = format!("connection from {}", self.peer.ip());
                    return Err(self.refuse(proof.ip, &file, "garbled", why, now).await);
                }
            };
            // A report's line is not kept: what a connection holds between lines is a ping's.
            if line.capacity() <= READ_BUFFER {
                self.line = line;
            }
            self.answer(answer).await?;
        }
    }

    fn keep(&self, ip: std::net::IpAddr, file: &str, class: &str, why: String, now: Millis) {
        tracing::warn!(peer = %self.peer, "{why}");
        self.ctx.board.refuse(Refusal {
            ip,
            file: file.to_string(),
            class: class.to_string(),
            why,
            last: now,
        });
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
        self.keep(ip, file, class, why.clone(), now);
        let _ = self.answer(Answer::refused(now, why.clone())).await;
        Ended::Refused(why)
    }

    async fn answer(&mut self, a: Answer) -> Result<(), Ended> {
        self.w.write_all(&a.render()).await?;
        Ok(())
    }
}

/// A report on a proved connection: kept on the board, or why not (its class and words).
fn report(
    ctx: &Ctx,
    proof: &Proof,
    name: MarkerName,
    signed: &[u8],
    now: Millis,
) -> Result<(), (&'static str, String)> {
    let read = read::from_bytes(&name, signed, None, None);
    let signed_at = match &read.signed {
        Ok(s) if s.key == proof.key => s.signed_at,
        Ok(s) => {
            let why = format!(
                "is signed with key {}…, not with the key {}'s hello proved ({}…): ignored",
                s.key.short(),
                proof.instance_id,
                proof.key.short()
            );
            return Err(("other-key", why));
        }
        Err(e) => return Err(("signature", format!("is refused: {e}"))),
    };
    hello::fresh(signed_at, now, ctx.skew).map_err(|e| ("time", e.to_string()))?;
    let named = read.body.as_ref().ok().and_then(|b| b.instance_id());
    if named.is_some_and(|n| n != proof.instance_id) {
        let why = format!(
            "names {:?}, but comes from {}'s agent: ignored",
            named.unwrap_or(""),
            proof.instance_id
        );
        return Err(("names", why));
    }
    (ctx.board)
        .report(&proof.instance_id, name, read, signed_at, now)
        .map_err(|newer| {
            let why = format!(
                "signed at {} is older than the one kept (signed at {}): sent again by someone; ignored",
                crate::model::rfc3339(signed_at),
                crate::model::rfc3339(newer)
            );
            ("older", why)
        })
}

/// One line, without its newline, into `buf`; at most [`MAX_LINE`] bytes.
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> Result<(), Ended> {
    buf.clear();
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Err(Ended::Closed);
        }
        let (take, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > MAX_LINE {
            let e = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a line longer than {MAX_LINE} bytes"),
            );
            return Err(Ended::Io(e));
        }
        buf.extend_from_slice(&avail[..take]);
        r.consume(take + usize::from(done));
        if done {
            return Ok(());
        }
    }
}
