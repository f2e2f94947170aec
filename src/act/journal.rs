//! The events journal: append-only JSON lines, one per decision, read by `dtctl events`.
//!
//! It rotates by size: once an append would take `events.jsonl` past `journal.max_size`, the
//! file becomes `events.jsonl.1` (the older ones move up a number, the oldest past
//! `journal.keep` is removed) and a new one is started. Readers read the rotated files oldest
//! first, then the current one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::config::JournalConfig;
use crate::fsutil::{append_synced, parent_dir, sync_dir};
use crate::model::{Event, EVENT_LINE_LIMIT};
use crate::untrusted;

/// Why events could not be appended: they stay for the next write.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("reading {}: {why}", path.display())]
    Stat { path: PathBuf, why: std::io::Error },
    #[error("rotating {}: {why}", path.display())]
    Rotate { path: PathBuf, why: std::io::Error },
    #[error("appending to {}: {why}", path.display())]
    Append { path: PathBuf, why: std::io::Error },
}

/// Appends the events; returns whether the journal was rotated first.
pub fn append(path: &Path, events: &[Event], limits: JournalConfig) -> Result<bool, JournalError> {
    if events.is_empty() {
        return Ok(false);
    }
    let mut buf = String::new();
    for e in events {
        buf.push_str(&e.line());
        buf.push('\n');
    }
    let rotate = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta.len() > 0 && meta.len().saturating_add(buf.len() as u64) > limits.max_size,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(why) => {
            let path = path.to_path_buf();
            return Err(JournalError::Stat { path, why });
        }
    };
    if rotate {
        self::rotate(path, limits.keep).map_err(|why| JournalError::Rotate {
            path: path.to_path_buf(),
            why,
        })?;
    }
    append_synced(path, buf.as_bytes()).map_err(|why| JournalError::Append {
        path: path.to_path_buf(),
        why,
    })?;
    Ok(rotate)
}

/// `path` becomes `path.1`, each `path.N` below `keep` becomes `path.N+1`, the rest are removed.
/// Renamed newest last, so a crash midway leaves a gap in the numbers, never two files in the
/// wrong order (readers order by number, not by a count).
fn rotate(path: &Path, keep: usize) -> std::io::Result<()> {
    for (n, old) in rotated(path)?.into_iter().rev() {
        match n >= keep {
            true => std::fs::remove_file(&old)?,
            false => std::fs::rename(&old, numbered(path, n + 1))?,
        }
    }
    std::fs::rename(path, numbered(path, 1))?;
    sync_dir(parent_dir(path))
}

/// The most rotated files looked for: more than `journal.keep` ever allows.
const MAX_ROTATED: usize = 1000;

fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The rotated files beside `path` (`path.N`), by number: the newest first.
fn rotated(path: &Path) -> std::io::Result<Vec<(usize, PathBuf)>> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{name}.");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(parent_dir(path))? {
        let entry = entry?;
        let number = (entry.file_name().to_str())
            .and_then(|n| n.strip_prefix(&prefix).map(str::to_string))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=MAX_ROTATED).contains(n));
        if let Some(n) = number {
            found.push((n, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// The journal's files in the order they were written: the rotated ones oldest first, then
/// `path` itself (which may not exist yet).
pub fn files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let rotated = match rotated(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        r => r?,
    };
    let mut files: Vec<PathBuf> = rotated.into_iter().rev().map(|(_, p)| p).collect();
    files.push(path.to_path_buf());
    Ok(files)
}

/// The newest rotated file: where `path` went when it was last rotated.
pub fn last_rotated(path: &Path) -> PathBuf {
    numbered(path, 1)
}

/// Reads the journal, skipping (and counting) lines that do not parse or are too long. The
/// journal is on the shared file system: read as a stream, never more than a line at a time.
pub fn read(path: &Path) -> std::io::Result<(Vec<Event>, usize)> {
    read_matching(path, |_| true)
}

/// Like [`read`], keeping only the events `keep` wants: a long journal is never held whole.
/// Reads across rotation; a rotation while it reads (a file listed gone when opened) starts
/// the read over, a few times at most.
pub fn read_matching(
    path: &Path,
    mut keep: impl FnMut(&Event) -> bool,
) -> std::io::Result<(Vec<Event>, usize)> {
    read_listed(path, true, &mut keep)
}

/// The rotated files only, for `dtctl events --follow`, which then follows the current one.
pub fn read_rotated(
    path: &Path,
    mut keep: impl FnMut(&Event) -> bool,
) -> std::io::Result<(Vec<Event>, usize)> {
    read_listed(path, false, &mut keep)
}

fn read_listed(
    path: &Path,
    current: bool,
    keep: &mut impl FnMut(&Event) -> bool,
) -> std::io::Result<(Vec<Event>, usize)> {
    let mut tries = 0;
    loop {
        let (mut events, mut bad, mut vanished) = (Vec::new(), 0, false);
        let mut files = files(path)?;
        if !current {
            files.pop();
        }
        let rotated = files.len() - usize::from(current);
        for (i, file) in files.iter().enumerate() {
            match read_file(file, keep, &mut events)? {
                Some(skipped) => bad += skipped,
                None => vanished |= i < rotated,
            }
        }
        tries += 1;
        if !vanished || tries == 3 {
            return Ok((events, bad));
        }
    }
}

/// One file's events into `events`; the lines skipped, or `None` when there is no such file.
fn read_file(
    path: &Path,
    keep: &mut impl FnMut(&Event) -> bool,
    events: &mut Vec<Event>,
) -> std::io::Result<Option<usize>> {
    let file = match untrusted::open(path) {
        Ok(Some((file, _))) => file,
        Ok(None) => return Ok(None),
        Err(untrusted::ReadError::Io(e)) => return Err(e),
        Err(refused) => {
            let why = format!("{}: {refused}", path.display());
            return Err(std::io::Error::other(why));
        }
    };
    let mut reader = BufReader::new(file);
    let mut bad = 0;
    while let Some(line) = next_line(&mut reader)? {
        match line {
            Some(l) if l.iter().all(u8::is_ascii_whitespace) => {}
            Some(l) => match serde_json::from_slice::<Event>(&l) {
                Ok(e) if keep(&e) => events.push(e),
                Ok(_) => {}
                Err(_) => bad += 1,
            },
            None => bad += 1,
        }
    }
    Ok(Some(bad))
}

/// The next line (`Some(None)` for one over `EVENT_LINE_LIMIT`, consumed but not kept); `None` at the end.
fn next_line(reader: &mut impl BufRead) -> std::io::Result<Option<Option<Vec<u8>>>> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((!line.is_empty() || too_long).then_some((!too_long).then_some(line)));
        }
        let (chunk, ends) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long && line.len() + chunk.len() <= EVENT_LINE_LIMIT {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line.clear();
        }
        let used = ends.unwrap_or(buf.len());
        reader.consume(used);
        if ends.is_some() {
            return Ok(Some((!too_long).then_some(line)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;

    fn limits() -> JournalConfig {
        JournalConfig::default()
    }

    fn event(time: u64) -> Event {
        Event::new(time, EventKind::Joined, format!("joined at {time}"))
    }

    fn times(path: &Path) -> Vec<u64> {
        let (events, bad) = read(path).unwrap();
        assert_eq!(bad, 0);
        events.iter().map(|e| e.time).collect()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn it_rotates_by_size_keeps_n_files_and_is_read_across_them_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let line = serde_json::to_string(&event(0)).unwrap().len() as u64 + 1;
        // Three lines to a file: the fourth append rotates.
        let limits = JournalConfig {
            max_size: 3 * line,
            keep: 2,
        };
        let mut rotations = 0;
        for t in 0..10 {
            rotations += append(&path, &[event(t)], limits).unwrap() as u32;
        }
        assert_eq!(rotations, 3);
        assert_eq!(
            names(dir.path()),
            ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]
        );
        // The oldest file (0..=2) went when the third rotation needed its number.
        assert_eq!(times(&path), (3..10).collect::<Vec<_>>());
        assert!(std::fs::metadata(&path).unwrap().len() <= limits.max_size);
    }

    #[test]
    fn a_batch_larger_than_the_limit_still_lands_whole_in_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let limits = JournalConfig {
            max_size: 10,
            keep: 1,
        };
        assert!(!append(&path, &[event(1), event(2)], limits).unwrap());
        assert!(append(&path, &[event(3), event(4)], limits).unwrap());
        assert_eq!(times(&path), [1, 2, 3, 4]);
    }

    #[test]
    fn a_gap_left_by_a_crash_midway_keeps_the_order_and_lowering_keep_removes_the_extra() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let limits = JournalConfig {
            max_size: 10,
            keep: 5,
        };
        append(&path, &[event(1)], limits).unwrap();
        std::fs::rename(&path, dir.path().join("events.jsonl.4")).unwrap();
        append(&path, &[event(2)], limits).unwrap();
        std::fs::rename(&path, dir.path().join("events.jsonl.2")).unwrap();
        // Not the journal's: other names beside it are left alone.
        std::fs::write(dir.path().join("events.jsonl.old"), "x").unwrap();
        append(&path, &[event(3)], limits).unwrap();
        assert_eq!(times(&path), [1, 2, 3]);
        append(
            &path,
            &[event(4)],
            JournalConfig {
                max_size: 10,
                keep: 2,
            },
        )
        .unwrap();
        // keep 2: the old .2 and .4 would be .3 and .5.
        assert_eq!(
            names(dir.path()),
            ["events.jsonl", "events.jsonl.1", "events.jsonl.old"]
        );
        assert_eq!(times(&path), [3, 4]);
    }

    #[test]
    fn a_huge_line_is_skipped_and_a_fifo_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let event = Event::new(1, crate::model::EventKind::Joined, "10.0.0.5 joined".into());
        append(&path, std::slice::from_ref(&event), limits()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &vec![b'x'; 3 * EVENT_LINE_LIMIT]).unwrap();
        std::io::Write::write_all(&mut f, b"\nnot json\n\n").unwrap();
        append(&path, std::slice::from_ref(&event), limits()).unwrap();
        let (events, bad) = read(&path).unwrap();
        assert_eq!((events.len(), bad), (2, 2));
        let fifo = dir.path().join("fifo.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(read(&fifo).is_err());
    }
}
