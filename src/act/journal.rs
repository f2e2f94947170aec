//! The events journal: append-only JSON lines, one per decision, read by `dtctl events`.

use std::path::Path;

use crate::fsutil::append_synced;
use crate::model::Event;

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

/// Reads the journal, skipping (and counting) lines that do not parse.
pub fn read(path: &Path) -> std::io::Result<(Vec<Event>, usize)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut bad = 0;
    let events = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).map_err(|_| bad += 1).ok())
        .collect();
    Ok((events, bad))
}
