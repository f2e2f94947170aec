//! The last lines of a program's output, kept for the marker the agent writes about it.
//!
//! Bounded in every direction: a program that prints gigabytes, or one endless line, costs a few
//! kilobytes here, and the marker stays small enough for the master's reader.

use std::collections::VecDeque;

pub const TAIL_LINES: usize = 20;
/// Longer lines are cut: a marker is for a glance at what went wrong, not a log file.
const MAX_LINE_CHARS: usize = 500;
const MAX_LINE_BYTES: usize = MAX_LINE_CHARS * 4;

#[derive(Debug, Default)]
pub struct Tail {
    lines: VecDeque<String>,
    current: Vec<u8>,
    /// The current line went over the limit; the rest of it is dropped.
    overflow: bool,
}

impl Tail {
    /// Adds raw output; returns the lines it completed (for the log).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match chunk.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (chunk, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.current.len());
            self.overflow |= body.len() > room;
            self.current
                .extend_from_slice(&body[..body.len().min(room)]);
            if ends {
                done.push(self.complete());
            }
        }
        done
    }

    /// The lines so far, including an unfinished last one.
    pub fn lines(&mut self) -> Vec<String> {
        if !self.current.is_empty() {
            self.complete();
        }
        self.lines.iter().cloned().collect()
    }

    fn complete(&mut self) -> String {
        let raw = String::from_utf8_lossy(&self.current);
        let mut line: String = raw
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_LINE_CHARS)
            .collect();
        if self.overflow || raw.chars().filter(|c| !c.is_control()).count() > MAX_LINE_CHARS {
            line.push_str(" [...]");
        }
        self.current.clear();
        self.overflow = false;
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line.clone());
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_across_chunks() {
        let mut t = Tail::default();
        for i in 0..30 {
            t.feed(format!("line {i}\n").as_bytes());
        }
        t.feed(b"par");
        let done = t.feed(b"tial\r\nend");
        assert_eq!(done, vec!["partial".to_string()]);
        let lines = t.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 12");
        assert_eq!(lines[TAIL_LINES - 2], "partial");
        assert_eq!(lines[TAIL_LINES - 1], "end");
    }

    #[test]
    fn cuts_long_lines() {
        let mut t = Tail::default();
        t.feed(&vec![b'x'; 100_000]);
        t.feed(b"\nok\n");
        let lines = t.lines();
        assert_eq!(lines[0].len(), MAX_LINE_CHARS + " [...]".len());
        assert_eq!(lines[1], "ok");
    }
}
