//! The agent's connection to `dtd run` (`protocol::channel`): it proves its instance with the
//! identity document EC2 signed (read from the instance metadata, which only root reaches on
//! the stack's workers), then sends every report the outbox holds, each signed as it is sent,
//! and a ping every beat when there is nothing new. A lost connection is made again, at once
//! and then less often, for as long as the agent runs; the address is read again each time
//! (`dtd` may have moved to a new master).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::imds::Imds;
use super::outbox::Outbox;
use super::signer::Signer;
use super::Identity;
use crate::config::Config;
use crate::protocol::channel::{self, Answer, Hello, HelloName, ADDRESS_FILE, MAX_ADDRESS_BYTES};
use crate::protocol::markers::{MarkerKind, MarkerName};

/// How long a connection or an answer may take.
const WAIT: Duration = Duration::from_secs(10);
/// The longest pause between two attempts to reach `dtd`.
const RETRY_MAX: Duration = Duration::from_secs(5);
/// An answer from a clock this far from the agent's is worth a warning (dtd refuses reports
/// past `workers.max_clock_skew`).
const SKEW_WARNING_MS: u64 = 5_000;

#[derive(Debug, thiserror::Error)]
enum Lost {
    #[error("no address to send reports to: {0}")]
    NoAddress(String),
    #[error("cannot reach dtd at {0}: {1}")]
    Connect(SocketAddr, io::Error),
    #[error("dtd at {0} did not answer within {WAIT:?}")]
    NoAnswer(SocketAddr),
    #[error("the connection to dtd at {0} was lost: {1}")]
    Io(SocketAddr, io::Error),
    #[error("dtd at {0} closed the connection")]
    Closed(SocketAddr),
    #[error("dtd at {0} answered what is not an answer")]
    Garbled(SocketAddr),
    #[error("dtd at {0} refused this agent's hello: {1}")]
    Refused(SocketAddr, String),
    #[error("cannot read the instance identity document: {0}")]
    Identity(String),
}

/// What the sender needs, for as long as the agent runs.
pub struct Sender {
    pub report_to: Option<SocketAddr>,
    pub shared_dir: PathBuf,
    pub identity: Identity,
    pub signer: Signer,
    pub outbox: Outbox,
    pub beat: Duration,
}

impl Sender {
    pub fn new(cfg: &Config, identity: Identity, signer: Signer, outbox: Outbox) -> Sender {
        Sender {
            report_to: cfg.agent.report_to,
            shared_dir: cfg.shared_dir.clone(),
            identity,
            signer,
            outbox,
            beat: channel::beat(cfg.job.launcher.as_ref().map(|l| l.silent_after)),
        }
    }

    /// Sends for ever, connecting again whenever the connection is lost.
    pub async fn run(self) {
        let imds = Imds::new();
        let mut hello: Option<Hello> = None;
        let mut wait = Duration::from_millis(100);
        let mut logged: Option<String> = None;
        loop {
            let lost = match self.hello(&imds, &mut hello).await {
                Ok(h) => self.session(h, &mut wait, &mut logged).await,
                Err(e) => e,
            };
            let said = lost.to_string();
            if logged.as_deref() != Some(said.as_str()) {
                tracing::warn!("{said}; trying again (logged again only if this changes)");
                logged = Some(said);
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    /// The hello's body, read once from the instance metadata.
    async fn hello(&self, imds: &Imds, cached: &mut Option<Hello>) -> Result<Hello, Lost> {
        if let Some(h) = cached {
            return Ok(h.clone());
        }
        let document = (imds.dynamic("instance-identity/document").await)
            .map_err(|e| Lost::Identity(e.to_string()))?;
        let signature = (imds.dynamic("instance-identity/signature").await)
            .map_err(|e| Lost::Identity(e.to_string()))?;
        let h = Hello {
            instance_id: self.identity.instance_id.clone(),
            document,
            signature,
        };
        *cached = Some(h.clone());
        Ok(h)
    }

    /// One connection, from its hello to its loss.
    async fn session(
        &self,
        hello: Hello,
        wait: &mut Duration,
        logged: &mut Option<String>,
    ) -> Lost {
        let addr = match self.address() {
            Ok(addr) => addr,
            Err(why) => return Lost::NoAddress(why),
        };
        let mut conn = match Conn::open(addr).await {
            Ok(conn) => conn,
            Err(lost) => return lost,
        };
        let name = HelloName(self.identity.ip);
        let line = channel::line(&name, &self.signer.sign(&name, &hello.render()));
        if let Err(lost) = conn.ask(&line).await.and_then(|a| refused(addr, a)) {
            return lost;
        }
        tracing::info!(%addr, instance_id = %self.identity.instance_id, "connected to dtd: sending reports there");
        *wait = Duration::from_millis(100);
        *logged = None;
        let mut sent: BTreeMap<MarkerKind, u64> = BTreeMap::new();
        loop {
            for (kind, version, line) in self.outbox.waiting(&sent) {
                let name = MarkerName::new(kind, self.identity.ip);
                let signed = self.signer.sign(&name, &line);
                match conn.ask(&channel::line(&name, &signed)).await {
                    Ok(a) => report_answer(&name, &a),
                    Err(lost) => return lost,
                }
                sent.insert(kind, version);
            }
            tokio::select! {
                () = self.outbox.changed() => {}
                () = tokio::time::sleep(self.beat) => {
                    if let Err(lost) = conn.ask(b"ping\n").await {
                        return lost;
                    }
                }
            }
        }
    }

    /// `agent.report_to`, else what `dtd` published in the shared directory (believed only
    /// when this agent's own user, which is `dtd`'s, owns it).
    fn address(&self) -> Result<SocketAddr, String> {
        if let Some(addr) = self.report_to {
            return Ok(addr);
        }
        let path = self.shared_dir.join(ADDRESS_FILE);
        let owner = Some(crate::fsutil::own_uid());
        match crate::untrusted::read_owned(&path, MAX_ADDRESS_BYTES, owner) {
            Ok(Some(body)) => channel::parse_address(&body)
                .ok_or_else(|| format!("{} does not hold an address and a port", path.display())),
            Ok(None) => Err(format!(
                "{} is not there yet (dtd run writes it when it starts; or set agent.report_to)",
                path.display()
            )),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

fn refused(addr: SocketAddr, a: Answer) -> Result<(), Lost> {
    match a.refused {
        Some(why) if !a.ok => Err(Lost::Refused(addr, why)),
        _ => Ok(()),
    }
}

/// A refused report is logged (dtd shows it too); the agent goes on with the next.
fn report_answer(name: &MarkerName, a: &Answer) {
    if let Some(why) = a.refused.as_deref().filter(|_| !a.ok) {
        tracing::error!(report = %name, "dtd refused this report: {why}");
    }
}

struct Conn {
    addr: SocketAddr,
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
    answer: Vec<u8>,
    skew_warned: bool,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, Lost> {
        let stream = match tokio::time::timeout(WAIT, TcpStream::connect(addr)).await {
            Err(_) => return Err(Lost::NoAnswer(addr)),
            Ok(Err(e)) => return Err(Lost::Connect(addr, e)),
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        Ok(Conn {
            addr,
            r: BufReader::new(r),
            w,
            answer: Vec::new(),
            skew_warned: false,
        })
    }

    /// Sends one line and reads dtd's answer to it.
    async fn ask(&mut self, line: &[u8]) -> Result<Answer, Lost> {
        let addr = self.addr;
        self.w
            .write_all(line)
            .await
            .map_err(|e| Lost::Io(addr, e))?;
        self.answer.clear();
        let mut bounded = AsyncReadExt::take(&mut self.r, 4096);
        let read = bounded.read_until(b'\n', &mut self.answer);
        match tokio::time::timeout(WAIT, read).await {
            Err(_) => return Err(Lost::NoAnswer(addr)),
            Ok(Err(e)) => return Err(Lost::Io(addr, e)),
            Ok(Ok(0)) => return Err(Lost::Closed(addr)),
            Ok(Ok(_)) => {}
        }
        let answer: Answer =
            serde_json::from_slice(&self.answer).map_err(|_| Lost::Garbled(addr))?;
        self.check_clock(answer.now);
        Ok(answer)
    }

    fn check_clock(&mut self, theirs: u64) {
        let ours = crate::clock::now_millis();
        let off = ours.abs_diff(theirs);
        if off > SKEW_WARNING_MS && !self.skew_warned {
            tracing::warn!(off_ms = off, "this worker's clock is {}s from dtd's: dtd refuses reports signed further than workers.max_clock_skew from its clock", off / 1000);
            self.skew_warned = true;
        }
    }
}
