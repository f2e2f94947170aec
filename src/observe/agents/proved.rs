//! The proved connections, all on one thread. After its hello a connection is handed here, so
//! that between its lines an agent costs `dtd` its socket and one entry (a few hundred bytes),
//! not a task of its own (about 1 KB more an agent: BENCHMARKS.md, "The agents' reports (cargo
//! bench --bench agents)").
//! Each line is answered as it arrives (an answer is a few dozen bytes: a socket that cannot
//! take one belongs to an agent that stopped reading, and its connection ends); every second
//! the connections silent past `idle`, or whose agent is heard on a newer one, are closed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use super::board::{Displaced, Proof};
use super::ctx::Ctx;
use super::lines::{self, READ_CHUNK};
use super::said::{said, Said};
use crate::protocol::channel::Answer;

const WAKE: Token = Token(usize::MAX);
/// How often the quiet connections are looked at: silence is judged to within this.
const LOOK: Duration = Duration::from_secs(1);

/// A connection whose hello was believed, with what it proved.
pub struct Adopted {
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub proof: Proof,
    pub displaced: Arc<Displaced>,
    /// What came after the hello's line.
    pub unread: Vec<u8>,
}

/// Where the hellos' tasks hand their connections over.
#[derive(Clone)]
pub struct Door {
    tx: mpsc::Sender<Adopted>,
    waker: Arc<Waker>,
}

impl Door {
    /// Hands `a` to the thread; once it has stopped, the connection is closed.
    pub fn adopt(&self, a: Adopted) {
        if self.tx.send(a).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// The thread's half, until it runs.
pub struct Room {
    poll: Poll,
    rx: mpsc::Receiver<Adopted>,
    waker: Arc<Waker>,
}

pub fn open() -> io::Result<(Door, Room)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let (tx, rx) = mpsc::channel();
    let door = Door {
        tx,
        waker: Arc::clone(&waker),
    };
    Ok((door, Room { poll, rx, waker }))
}

/// The running thread: dropped, it closes every proved connection before returning.
pub struct Running {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Room {
    pub fn run(self, ctx: Arc<Ctx>) -> io::Result<Running> {
        let stop = Arc::new(AtomicBool::new(false));
        let waker = Arc::clone(&self.waker);
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("dtd-agents".into())
            .spawn(move || self.serve(&ctx, &stopped))?;
        Ok(Running {
            stop,
            waker,
            thread: Some(thread),
        })
    }

    fn serve(mut self, ctx: &Ctx, stop: &AtomicBool) {
        let mut events = Events::with_capacity(1024);
        let mut conns: HashMap<Token, Quiet> = HashMap::new();
        let mut next = 0usize;
        let mut looked = Instant::now();
        while !stop.load(Ordering::Acquire) {
            if let Err(e) = self.poll.poll(&mut events, Some(LOOK)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("waiting on the agents' connections: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            for ev in &events {
                let t = ev.token();
                if let Some(why) = conns.get_mut(&t).and_then(|c| c.serve(ctx).err()) {
                    self.end(&mut conns, t, &why);
                }
            }
            while let Ok(a) = self.rx.try_recv() {
                let t = Token(next);
                next += 1;
                self.adopt(&mut conns, t, a, ctx);
            }
            if looked.elapsed() >= LOOK {
                looked = Instant::now();
                self.look(&mut conns, ctx);
            }
        }
    }

    fn adopt(&mut self, conns: &mut HashMap<Token, Quiet>, t: Token, a: Adopted, ctx: &Ctx) {
        let mut q = Quiet {
            s: TcpStream::from_std(a.stream),
            peer: a.peer,
            proof: a.proof,
            displaced: a.displaced,
            unread: a.unread,
            last: Instant::now(),
        };
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut q.s, t, Interest::READABLE)
        {
            tracing::warn!(peer = %q.peer, "cannot wait on an agent's connection: {e}");
            return;
        }
        conns.insert(t, q);
        // Lines may have come with the hello, or before the registration.
        if let Some(why) = conns.get_mut(&t).and_then(|c| c.serve(ctx).err()) {
            self.end(conns, t, &why);
        }
    }

    /// Closes the connections silent past `idle` and those whose agent has a newer one.
    fn look(&mut self, conns: &mut HashMap<Token, Quiet>, ctx: &Ctx) {
        let over: Vec<(Token, String)> = conns
            .iter()
            .filter_map(|(t, c)| c.over(ctx.idle).map(|why| (*t, why)))
            .collect();
        for (t, why) in over {
            self.end(conns, t, &why);
        }
    }

    fn end(&mut self, conns: &mut HashMap<Token, Quiet>, t: Token, why: &str) {
        if let Some(mut c) = conns.remove(&t) {
            let _ = self.poll.registry().deregister(&mut c.s);
            tracing::debug!(peer = %c.peer, "agent connection ended: {why}");
        }
    }
}

/// One proved connection between its lines.
struct Quiet {
    s: TcpStream,
    peer: SocketAddr,
    proof: Proof,
    displaced: Arc<Displaced>,
    /// Bytes received past the last line's end: none while the agent waits for its answer.
    unread: Vec<u8>,
    last: Instant,
}

impl Quiet {
    /// Answers every whole line, reading until the socket has nothing more (the readiness is
    /// an edge: what is left unread would not be announced again).
    fn serve(&mut self, ctx: &Ctx) -> Result<(), String> {
        loop {
            self.lines(ctx)?;
            let mut chunk = [0u8; READ_CHUNK];
            match self.s.read(&mut chunk) {
                Ok(0) => return Err("closed by the agent".into()),
                Ok(n) => self.unread.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn lines(&mut self, ctx: &Ctx) -> Result<(), String> {
        while let Some(line) = lines::take(&mut self.unread, 0).map_err(|e| e.to_string())? {
            if self.displaced.is_set() {
                return Err(DISPLACED.into());
            }
            self.last = Instant::now();
            match said(ctx, &self.proof, self.peer, &line) {
                Said::Goes(a) => self.answer(&a)?,
                Said::Ends(a, why) => {
                    let _ = self.answer(&a);
                    return Err(why);
                }
            }
        }
        Ok(())
    }

    fn answer(&mut self, a: &Answer) -> Result<(), String> {
        (self.s.write_all(&a.render())).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => "the agent does not read its answers".to_string(),
            _ => e.to_string(),
        })
    }

    fn over(&self, idle: Duration) -> Option<String> {
        if self.displaced.is_set() {
            return Some(DISPLACED.into());
        }
        (self.last.elapsed() > idle).then(|| format!("no line within {idle:?}"))
    }
}

const DISPLACED: &str = "a newer connection of the same agent took its place";

#[cfg(test)]
mod tests;
