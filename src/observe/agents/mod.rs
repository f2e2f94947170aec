//! The agents' reports, as they arrive on each agent's own connection to `workers.listen`
//! (`protocol::channel`; ARCHITECTURE.md, "How a worker's word reaches dtd"): the port and its
//! limits ([`listen`]), what the connections share ([`ctx`]), a connection until its hello is
//! believed ([`conn`]), a hello's proof ([`hello`]), the proved connections on one thread
//! ([`proved`]), what one of their lines means ([`said`]), and what they have said ([`board`]),
//! which each pass takes. What a report is believed for is still the book's
//! (`observe::markers::book`), as for files.

pub mod board;
mod conn;
mod ctx;
pub mod hello;
mod lines;
mod listen;
mod proved;
mod said;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use board::{Board, Heard, Proof, Refusal};

use crate::clock::{millis, SharedClock};
use crate::config::Config;
use crate::protocol::channel::beat;
use crate::protocol::signed::AgentKey;

/// A proved connection silent for this many of its agent's pings is closed.
const IDLE_BEATS: u32 = 4;

#[derive(Debug, thiserror::Error)]
#[error("cannot listen for the agents' reports on {addr} (workers.listen): {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

/// The agents' port, listening until dropped: then the port is closed and every connection
/// ends (the agents connect again to whichever `dtd` listens next).
pub struct Agents {
    board: Arc<Board>,
    /// The address bound (its port chosen by the system when `workers.listen` names port 0).
    pub bound: SocketAddr,
    /// Dropped with this: every connection's end.
    _open: tokio::sync::watch::Sender<()>,
    /// The accepting task, which holds the port: aborted with this.
    accepting: tokio::task::JoinHandle<()>,
    /// The thread serving the proved connections: stopped with this, closing them.
    _proved: proved::Running,
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Agents {
    /// Binds `workers.listen` and serves it (hellos on tasks, proved connections on a thread);
    /// `pins`: the keys `dtd` keeps.
    pub async fn start(
        cfg: &Config,
        clock: SharedClock,
        pins: HashMap<String, AgentKey>,
    ) -> Result<Agents, ListenError> {
        let addr = cfg.workers.listen;
        let listener =
            (TcpListener::bind(addr).await).map_err(|source| ListenError { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| ListenError { addr, source })?;
        let board = Arc::new(Board::default());
        board.set_pins(pins);
        let (open, closed) = tokio::sync::watch::channel(());
        let (door, room) = proved::open().map_err(|source| ListenError { addr, source })?;
        let ctx = ctx::Ctx {
            closed,
            board: Arc::clone(&board),
            certs: cfg.workers.identity.clone(),
            skew: millis(cfg.workers.max_clock_skew),
            clock,
            idle: beat(cfg.job.launcher.as_ref().map(|l| l.silent_after)) * IDLE_BEATS,
        };
        let ctx = Arc::new(ctx);
        let proved = (room.run(Arc::clone(&ctx))).map_err(|source| ListenError { addr, source })?;
        let accepting = tokio::spawn(listen::accept(listener, ctx, door));
        tracing::info!(%bound, certificates = %cfg.workers.identity.source, "taking the agents' reports");
        Ok(Agents {
            board,
            bound,
            _open: open,
            accepting,
            _proved: proved,
        })
    }

    pub fn board(&self) -> &Board {
        &self.board
    }
}
