//! Where in the file an error is: serde_yaml places the errors it finds itself; for the rest the
//! key's line is looked up in the text.

/// The line a problem was found at, when it was: shown as ` at line N` after its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Line(Option<usize>);

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, " at line {n}"),
            None => Ok(()),
        }
    }
}

impl Line {
    /// The first line of `text` that `is_it` picks.
    pub(super) fn first(text: &str, is_it: impl Fn(&str) -> bool) -> Line {
        Line(text.lines().position(is_it).map(|i| i + 1))
    }
}

/// The key a check made after parsing is about, where serde no longer knows the position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// The first line that starts with it, at any depth: a key only one section has.
    Anywhere(&'static str),
    /// A key several sections share (`timeout`), found in its own: see [`line_of_path`].
    Path(&'static [&'static str]),
}

impl Key {
    pub(super) fn line(self, text: &str) -> Line {
        match self {
            Key::Anywhere(key) => line_of_key(text, key),
            Key::Path(path) => line_of_path(text, path),
        }
    }
}

/// The line of `path`'s last key, found by looking for each key below the line of the one
/// before (`agent`, then `health`, then `timeout`), so that a key several sections share
/// (`timeout`, `interval`) is found in its own section. When a key is not at the start of a line
/// (a flow mapping), falls back to [`line_of_key`] for the last one.
pub(super) fn line_of_path(text: &str, path: &[&str]) -> Line {
    match line_of(text, path) {
        Some(n) => Line(Some(n)),
        None => line_of_key(text, path.last().copied().unwrap_or_default()),
    }
}

fn line_of(text: &str, path: &[&str]) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    for key in path {
        let prefix = format!("{key}:");
        let starts = |l: &&str| {
            let l = l.trim_start();
            l.strip_prefix("- ").unwrap_or(l).starts_with(&prefix)
        };
        from += lines.get(from..)?.iter().position(starts)? + 1;
    }
    (from > 0).then_some(from)
}

/// The first line that starts with `key:`, at any depth.
fn line_of_key(text: &str, key: &str) -> Line {
    let prefix = format!("{key}:");
    Line::first(text, |l| l.trim_start().starts_with(&prefix))
}
