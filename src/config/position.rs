//! Where in the file an error is: serde_yaml places the errors it finds itself; for the rest the
//! key's line is looked up in the text.

/// serde_yaml places syntax and type errors itself; errors raised by our own checks (durations,
/// signals, cross-field rules) carry no position, so the key's line is looked up from its path.
pub(super) fn describe(text: &str, e: serde_path_to_error::Error<serde_yaml::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let message = inner.to_string();
    // Custom errors carry a location serde_yaml does not print (the document's start).
    if message.contains(" at line ") || path == "." {
        return message;
    }
    let keys: Vec<&str> = path
        .split('.')
        .map(|seg| seg.split('[').next().unwrap_or(seg))
        .filter(|seg| !seg.is_empty() && *seg != "?")
        .collect();
    at_path(text, &keys, &format!("{path}: {message}"))
}

/// Adds the line of `path`'s last key, found by looking for each key below the line of the one
/// before (`agent`, then `health`, then `timeout`), so that a key several sections share
/// (`timeout`, `interval`) is found in its own section. When a key is not at the start of a line
/// (a flow mapping), falls back to [`at_key`] for the last one.
pub(super) fn at_path(text: &str, path: &[&str], message: &str) -> String {
    match line_of(text, path) {
        Some(n) => format!("{message} at line {n}"),
        None => at_key(text, path.last().copied().unwrap_or_default(), message),
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

/// Adds "at line N" for checks made after parsing, where serde no longer knows the position.
pub(super) fn at_key(text: &str, key: &str, message: &str) -> String {
    let line = text
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{key}:")))
        .map(|i| i + 1);
    match line {
        Some(n) => format!("{message} at line {n}"),
        None => message.to_string(),
    }
}
