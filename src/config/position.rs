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
    let key = path
        .rsplit('.')
        .map(|seg| seg.split('[').next().unwrap_or(seg))
        .find(|seg| !seg.is_empty())
        .unwrap_or(&path);
    at_key(text, key, &format!("{path}: {message}"))
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
