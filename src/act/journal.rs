//! The events journal: append-only JSON lines, one per decision, read by `dtctl events`.

use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::fsutil::append_synced;
use crate::model::Event;
use crate::untrusted;

pub fn append(path: &Path, events: &[Event]) -> Result<(), String> {
    if events.is_empty() {
        return Ok(());
    }
    let mut buf = String::new();
    for e in events {
        let line = serde_json::to_string(e).map_err(|err| format!("encoding event: {err}"))?;
        buf.push_str(&line);
        buf.push('\n');
    }
    append_synced(path, buf.as_bytes()).map_err(|e| format!("appending to {}: {e}", path.display()))
}

/// A journal line is one event, well under this; a longer line is not the daemon's and is skipped.
pub const LINE_LIMIT: usize = 64 * 1024;

/// Reads the journal, skipping (and counting) lines that do not parse or are too long. The
/// journal is on the shared file system: read as a stream, never more than a line at a time.
pub fn read(path: &Path) -> std::io::Result<(Vec<Event>, usize)> {
    read_matching(path, |_| true)
}

/// Like [`read`], keeping only the events `keep` wants: a long journal is never held whole.
pub fn read_matching(
    path: &Path,
    mut keep: impl FnMut(&Event) -> bool,
) -> std::io::Result<(Vec<Event>, usize)> {
    let file = match untrusted::open(path) {
        Ok(Some((file, _))) => file,
        Ok(None) => return Ok((Vec::new(), 0)),
        Err(untrusted::ReadError::Io(e)) => return Err(e),
        Err(refused) => return Err(std::io::Error::other(refused.to_string())),
    };
    let mut reader = BufReader::new(file);
    let (mut events, mut bad) = (Vec::new(), 0);
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
    Ok((events, bad))
}

/// The next line (`Some(None)` for one over `LINE_LIMIT`, consumed but not kept); `None` at the end.
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
        if !too_long && line.len() + chunk.len() <= LINE_LIMIT {
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

    #[test]
    fn a_huge_line_is_skipped_and_a_fifo_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let event = Event::new(1, crate::model::EventKind::Joined, "10.0.0.5 joined".into());
        append(&path, std::slice::from_ref(&event)).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &vec![b'x'; 3 * LINE_LIMIT]).unwrap();
        std::io::Write::write_all(&mut f, b"\nnot json\n\n").unwrap();
        append(&path, std::slice::from_ref(&event)).unwrap();
        let (events, bad) = read(&path).unwrap();
        assert_eq!((events.len(), bad), (2, 2));
        let fifo = dir.path().join("fifo.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(read(&fifo).is_err());
    }
}
