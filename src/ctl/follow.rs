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
use crate::config::Config;
use crate::fsutil::now_millis;
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
mod tests {
    use super::*;
    use crate::model::EventKind;
    use std::fs::OpenOptions;

    fn line(time: u64) -> String {
        let e = Event::new(time, EventKind::Joined, format!("joined at {time}"));
        format!("{}\n", serde_json::to_string(&e).unwrap())
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    /// The times of the events a poll read, and what else it said.
    fn read(f: &mut Follower) -> (Vec<u64>, usize, bool) {
        match f.poll().unwrap() {
            Poll::Read {
                events,
                skipped,
                restarted,
                more: false,
                ..
            } => (events.iter().map(|e| e.time).collect(), skipped, restarted),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_new_complete_lines_are_read_and_a_partial_one_waits_for_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut f = Follower::new(&path);
        assert_eq!(f.poll().unwrap(), Poll::Missing);
        append(&path, line(1).as_bytes());
        assert_eq!(read(&mut f), (vec![1], 0, false));
        assert_eq!(read(&mut f), (vec![], 0, false), "nothing new");

        let two = line(2);
        let (start, end) = two.split_at(10);
        append(&path, format!("{}{start}", line(3)).as_bytes());
        assert_eq!(read(&mut f), (vec![3], 0, false), "half a line is held");
        append(&path, end.as_bytes());
        assert_eq!(read(&mut f), (vec![2], 0, false));
    }

    #[test]
    fn a_line_over_the_limit_or_not_an_event_is_skipped_and_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut f = Follower::new(&path);
        // Written in pieces, as a slow writer would: it is skipped, never held whole.
        append(&path, &vec![b'x'; EVENT_LINE_LIMIT]);
        assert_eq!(read(&mut f), (vec![], 0, false));
        append(&path, &vec![b'x'; EVENT_LINE_LIMIT]);
        assert_eq!(read(&mut f), (vec![], 0, false));
        assert!(
            f.partial.capacity() <= EVENT_LINE_LIMIT,
            "held {}",
            f.partial.capacity()
        );
        append(&path, format!("x\nnot json\n\n{}", line(4)).as_bytes());
        assert_eq!(read(&mut f), (vec![4], 2, false));
    }

    #[test]
    fn a_journal_that_shrinks_or_is_replaced_is_read_again_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut f = Follower::new(&path);
        append(&path, format!("{}{}", line(1), line(2)).as_bytes());
        assert_eq!(read(&mut f), (vec![1, 2], 0, false));

        std::fs::write(&path, line(5)).unwrap();
        assert_eq!(read(&mut f), (vec![5], 0, true), "truncated and rewritten");

        // Replaced by another file, longer than what was read.
        let other = dir.path().join("new.jsonl");
        std::fs::write(&other, format!("{}{}{}", line(6), line(7), line(8))).unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(read(&mut f), (vec![6, 7, 8], 0, true));
        assert_eq!(read(&mut f), (vec![], 0, false));

        std::fs::remove_file(&path).unwrap();
        assert_eq!(f.poll().unwrap(), Poll::Missing);
        append(&path, line(9).as_bytes());
        assert_eq!(
            read(&mut f),
            (vec![9], 0, false),
            "a new journal, from its start"
        );
    }

    #[test]
    fn a_rotated_journal_is_read_to_its_end_then_the_new_one_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut f = Follower::new(&path);
        append(&path, line(1).as_bytes());
        assert_eq!(read(&mut f), (vec![1], 0, false));
        // dtd appends, then rotates before its next append: the line after the last poll is
        // in the rotated file.
        append(&path, line(2).as_bytes());
        let limits = crate::config::JournalConfig {
            max_size: 1,
            keep: 3,
        };
        let two = [Event::new(3, EventKind::Joined, "three".into())];
        assert!(journal::append(&path, &two, limits).unwrap());
        let Poll::Read {
            events,
            rotated,
            more,
            restarted,
            ..
        } = f.poll().unwrap()
        else {
            panic!("not read");
        };
        assert_eq!(
            (events.len(), events[0].time, rotated, restarted, more),
            (1, 2, false, false, true)
        );
        let Poll::Read {
            events,
            rotated,
            restarted,
            ..
        } = f.poll().unwrap()
        else {
            panic!("not read");
        };
        let times: Vec<u64> = events.iter().map(|e| e.time).collect();
        assert_eq!((times, rotated, restarted), (vec![3], true, false));
        assert_eq!(read(&mut f), (vec![], 0, false));
    }

    #[test]
    fn a_fifo_in_its_place_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let mut f = Follower::new(&path);
        assert!(matches!(f.poll(), Err(ReadError::NotRegular("a FIFO"))));
    }

    #[test]
    fn a_long_journal_is_read_a_bounded_piece_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let lines: String = (0..20_000).map(line).collect();
        assert!(lines.len() as u64 > READ_LIMIT);
        append(&path, lines.as_bytes());
        let mut f = Follower::new(&path);
        let mut times = Vec::new();
        let mut polls = 0;
        loop {
            polls += 1;
            let Ok(Poll::Read { events, more, .. }) = f.poll() else {
                panic!("not read");
            };
            times.extend(events.iter().map(|e| e.time));
            if !more {
                break;
            }
        }
        assert!(polls > 1);
        assert_eq!(times, (0..20_000).collect::<Vec<u64>>());
    }
}
