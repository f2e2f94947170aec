//! `dtctl events --follow`: the journal so far, then each line as dtd appends it.
//!
//! The journal lives on the shared file system, which workers can write: it is opened through
//! [`untrusted`] on every poll (a FIFO put in its place is refused, never waited on), only the
//! bytes added since the last poll are read, and a line is held only up to the journal's own
//! line limit. A journal that shrinks or is replaced (another inode) is read again from its
//! start; one that is missing is waited for.

use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};

use super::local::event_line;
use crate::act::journal;
use crate::clock::now_millis;
use crate::config::Config;
use crate::model::{Event, Millis, EVENT_LINE_LIMIT};
use crate::store::Paths;
use crate::untrusted::{self, ReadError};

/// How often the journal is looked at: dtd appends at most once a pass (`interval`, 2 s by
/// default), and a person watching wants a line within a moment of it.
const POLL: Duration = Duration::from_millis(300);

/// The most read in one poll; more is read at once by the next poll, without waiting.
const READ_LIMIT: u64 = 1 << 20;

/// What one poll found.
#[derive(Debug, PartialEq)]
pub enum Poll {
    /// No journal at the path (not yet, or not any more).
    Missing,
    Read {
        /// The complete lines added since the last poll that are events.
        events: Vec<Event>,
        /// Lines that are not events, or longer than the journal's line limit.
        skipped: usize,
        /// The journal shrank or was replaced: read again from its start.
        restarted: bool,
        /// The journal was rotated: the file read so far was read to its end, and the new one
        /// is read from its start.
        rotated: bool,
        /// The read stopped at its limit: there is more to read now.
        more: bool,
    },
}

/// Reads what is appended to the journal, a poll at a time.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    /// How far the file has been read, and which file it was (device, inode).
    at: u64,
    file: Option<(u64, u64)>,
    /// The start of a line whose newline has not been written yet.
    partial: Vec<u8>,
    /// The line being read is over the limit: skipped up to its newline.
    skipping: bool,
}

impl Follower {
    pub fn new(path: &Path) -> Follower {
        Follower {
            path: path.to_path_buf(),
            at: 0,
            file: None,
            partial: Vec::new(),
            skipping: false,
        }
    }

    /// Reads what was appended since the last poll; never blocks on what is at the path.
    pub fn poll(&mut self) -> Result<Poll, ReadError> {
        let Some((mut file, meta)) = untrusted::open(&self.path)? else {
            self.start_over(None);
            return Ok(Poll::Missing);
        };
        let id = (meta.dev(), meta.ino());
        let replaced = self.file.is_some_and(|known| known != id);
        let mut rotated = false;
        if replaced {
            match self.read_rotated()? {
                Ok(unread) => return Ok(unread),
                Err(found) => rotated = found,
            }
        }
        // A new file is read from its start; the same one again only if it shrank.
        let restarted = if replaced {
            !rotated
        } else {
            meta.len() < self.at
        };
        if replaced || restarted || self.file.is_none() {
            self.start_over(Some(id));
        }
        let (events, skipped, more) = self.read_from(&mut file)?;
        Ok(Poll::Read {
            events,
            skipped,
            restarted,
            rotated,
            more,
        })
    }

    /// The file being read was replaced: if dtd rotated it (it is now the newest rotated
    /// file), what was appended to it before the rotation is read first. `Err(found)` once
    /// there is nothing more in it, saying whether it was found there.
    fn read_rotated(&mut self) -> Result<Result<Poll, bool>, ReadError> {
        let old = journal::last_rotated(&self.path);
        let Some((mut file, meta)) = untrusted::open(&old)? else {
            return Ok(Err(false));
        };
        if self.file != Some((meta.dev(), meta.ino())) {
            return Ok(Err(false));
        }
        if meta.len() <= self.at {
            return Ok(Err(true));
        }
        let (events, skipped, _) = self.read_from(&mut file)?;
        Ok(Ok(Poll::Read {
            events,
            skipped,
            restarted: false,
            rotated: false,
            more: true,
        }))
    }

    /// The events in what was appended since `at`, up to the read limit, and whether the read
    /// stopped at that limit.
    fn read_from(
        &mut self,
        file: &mut std::fs::File,
    ) -> Result<(Vec<Event>, usize, bool), ReadError> {
        file.seek(SeekFrom::Start(self.at))?;
        let bytes = untrusted::read_at_most(file, READ_LIMIT)?;
        self.at += bytes.len() as u64;
        let (events, skipped) = self.feed(&bytes);
        Ok((events, skipped, bytes.len() as u64 == READ_LIMIT))
    }

    fn start_over(&mut self, file: Option<(u64, u64)>) {
        self.at = 0;
        self.file = file;
        self.partial.clear();
        self.skipping = false;
    }

    /// Splits new bytes into lines; the last one, without its newline yet, is kept for later.
    fn feed(&mut self, bytes: &[u8]) -> (Vec<Event>, usize) {
        let (mut events, mut skipped) = (Vec::new(), 0);
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match chunk.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (chunk, false),
            };
            if !self.skipping && self.partial.len() + body.len() > EVENT_LINE_LIMIT {
                self.skipping = true;
                self.partial = Vec::new();
            }
            if !self.skipping {
                self.partial.extend_from_slice(body);
            }
            if !ends {
                continue;
            }
            if self.skipping {
                skipped += 1;
            } else if !self.partial.iter().all(u8::is_ascii_whitespace) {
                match serde_json::from_slice(&self.partial) {
                    Ok(e) => events.push(e),
                    Err(_) => skipped += 1,
                }
            }
            self.partial.clear();
            self.skipping = false;
        }
        (events, skipped)
    }
}

/// Prints the journal's events (from `since` ago), then each new one, until SIGINT or SIGTERM,
/// or until whoever reads stdout goes away.
pub async fn follow(cfg: &Config, since: Option<Duration>, json: bool) -> anyhow::Result<()> {
    let path = Paths::new(&cfg.state_dir).journal();
    let cutoff = since.map_or(0, |d| now_millis().saturating_sub(d.as_millis() as u64));
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut follower = Follower::new(&path);
    let mut notice = Notice::default();
    // The rotated files first, then the current one is followed. A rotation in between is rare
    // (one per `journal.max_size` of events): its lines would be printed twice, none lost.
    let (older, bad) = journal::read_rotated(&path, |e| e.time >= cutoff)
        .with_context(|| format!("reading the rotated files of {}", path.display()))?;
    if bad > 0 {
        eprintln!(
            "dtctl: skipped {bad} unreadable line(s) in the rotated files of {}",
            path.display()
        );
    }
    if !print(older.iter(), json)? {
        return Ok(());
    }
    loop {
        let Some(wait) = step(&mut follower, &mut notice, cutoff, json)? else {
            return Ok(());
        };
        if stdout_closed() {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
    }
}

/// One poll, and what it found printed: how long to wait for the next one, or `None` once
/// stdout is closed.
fn step(
    follower: &mut Follower,
    notice: &mut Notice,
    cutoff: Millis,
    json: bool,
) -> anyhow::Result<Option<Duration>> {
    let path = follower.path.display().to_string();
    let (events, skipped, restarted, more) = match follower.poll() {
        Ok(Poll::Read {
            events,
            skipped,
            restarted,
            more,
            ..
        }) => (events, skipped, restarted, more),
        Ok(Poll::Missing) => {
            notice.say(format!("waiting for {path} to appear"));
            return Ok(Some(POLL));
        }
        Err(e) => {
            notice.say(format!("{path}: {e}; waiting for a journal"));
            return Ok(Some(POLL));
        }
    };
    notice.clear();
    if restarted {
        eprintln!("dtctl: {path} shrank or was replaced: reading it from the start");
    }
    if skipped > 0 {
        eprintln!("dtctl: skipped {skipped} unreadable line(s) in {path}");
    }
    if !print(events.iter().filter(|e| e.time >= cutoff), json)? {
        return Ok(None);
    }
    Ok(Some(if more { Duration::ZERO } else { POLL }))
}

/// Writes the events to stdout; false once stdout is closed (a broken pipe ends the command
/// cleanly, as it does `tail -f`).
fn print<'a>(events: impl Iterator<Item = &'a Event>, json: bool) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    let written = events
        .map(|e| event_line(e, json))
        .try_for_each(|line| -> anyhow::Result<()> { Ok(writeln!(out, "{}", line?)?) })
        .and_then(|()| Ok(out.flush()?));
    match written {
        Ok(()) => Ok(true),
        Err(e) if is_broken_pipe(&e) => Ok(false),
        Err(e) => Err(e.context("writing to stdout")),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Whether the reader of stdout went away (a pipe whose other end is closed), noticed while no
/// event comes that would fail to be written.
fn stdout_closed() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLOUT)];
    match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)),
        Err(_) => false,
    }
}

/// A condition told once on stderr, until it changes.
#[derive(Default)]
struct Notice(Option<String>);

impl Notice {
    fn say(&mut self, what: String) {
        if self.0.as_deref() != Some(what.as_str()) {
            eprintln!("dtctl: {what}");
            self.0 = Some(what);
        }
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests;
