//! docs/configuration.md is the reference for every key of `dtd.yaml`: a key the code reads that
//! the reference does not list fails here, and so does a row for a key the code does not read.
//!
//! The code's keys come from the parser itself: it refuses unknown keys and names the ones it
//! knows ("unknown field `x`, expected one of ..."), so probing each section with a key that
//! cannot exist lists that section's keys, recursively. A key whose value is not a section (a
//! duration, a list of strings, a map of instance types) answers otherwise and is a leaf.

use std::collections::BTreeSet;

use dt::config::Config;

use crate::support::repo;

const PROBE: &str = "zz_not_a_key";

/// The YAML that puts the probe at `path`: `[a, b]` -> `a: {b: {zz_not_a_key: 1}}`, each
/// segment ending in `[]` a one-element list.
fn probe_at(path: &[String]) -> String {
    let mut value = format!("{{{PROBE}: 1}}");
    for seg in path.iter().rev() {
        value = match seg.strip_suffix("[]") {
            Some(name) => format!("{{{name}: [{value}]}}"),
            None => format!("{{{seg}: {value}}}"),
        };
    }
    // Parsed as the whole file: its top-level keys are `value`'s.
    let inner = &value[1..value.len() - 1];
    format!("{inner}\n")
}

/// The keys the parser lists for the section at `path`, or None when it is not a section.
fn section_keys(path: &[String]) -> Option<Vec<String>> {
    let err = Config::parse(&probe_at(path)).err()?.to_string();
    // serde says "expected `a`", "expected `a` or `b`" or "expected one of `a`, `b`, ...".
    let listed = err
        .split(&format!("unknown field `{PROBE}`, expected "))
        .nth(1)?;
    let listed = listed.split(" at line").next().unwrap_or(listed);
    let keys = listed.split('`').skip(1).step_by(2).map(str::to_string);
    Some(keys.collect())
}

/// Every key the code reads, dotted, lists written `name[]` for their items as the reference
/// writes them (`hostfiles[].template`).
fn code_keys() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let keys = section_keys(&path).expect("the top level is a section");
        for key in keys {
            let mut child = path.clone();
            child.push(key.clone());
            found.insert(child.join("."));
            if section_keys(&child).is_some() {
                todo.push(child);
                continue;
            }
            let last = child.len() - 1;
            child[last] = format!("{key}[]");
            if section_keys(&child).is_some() {
                found.insert(child.join("."));
                todo.push(child);
            }
        }
    }
    found
}

/// Each row of the reference's table: its key (`` | `job.ack.by` | ``) and its Default cell.
pub(crate) fn rows() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").map(str::trim).collect();
            let key = cells[0].trim_start_matches("| `").trim_end_matches('`');
            (key.to_string(), cells.get(1).unwrap_or(&"").to_string())
        })
        .collect()
}

/// The first column of every row of the reference's table.
fn documented_keys() -> BTreeSet<String> {
    rows().into_iter().map(|(key, _)| key).collect()
}

/// A key is covered by its own row, by rows of its keys (a section), or by the row of a key
/// above it whose keys have no rows of their own (`job.launcher.user` covers `{ uid, gid }`).
fn covered(key: &str, doc: &BTreeSet<String>) -> bool {
    let has_rows_below = |k: &str| doc.iter().any(|d| d.starts_with(&format!("{k}.")));
    if doc.contains(key) || has_rows_below(key) {
        return true;
    }
    let mut above = key;
    while let Some((parent, _)) = above.rsplit_once('.') {
        if doc.contains(parent) {
            return !has_rows_below(parent);
        }
        above = parent;
    }
    false
}

#[test]
fn the_reference_lists_every_key_the_code_reads_and_no_other() {
    let code = code_keys();
    let doc = documented_keys();
    // A row the parser does not know, as the reference writes it or without its `[]`.
    let plain = |k: &String| k.replace("[]", "");
    let known: BTreeSet<String> = code.iter().map(plain).collect();
    let unknown: Vec<&String> = doc.iter().filter(|d| !known.contains(&plain(d))).collect();
    let doc_plain: BTreeSet<String> = doc.iter().map(plain).collect();
    let missing: Vec<&String> = code
        .iter()
        .filter(|k| !k.ends_with("[]") && !covered(&plain(k), &doc_plain))
        .collect();
    assert!(
        code.len() > 60 && code.contains("job.launcher.in_place.lighthouse"),
        "the probe found too little: {code:?}"
    );
    assert!(
        unknown.is_empty(),
        "docs/configuration.md has rows for keys the code does not read: {unknown:?}"
    );
    assert!(
        missing.is_empty(),
        "keys the code reads that docs/configuration.md does not list: {missing:?}"
    );
}

#[test]
fn the_probe_finds_a_section_a_list_of_sections_and_a_leaf() {
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let launcher = section_keys(&path(&["job", "launcher"])).expect("job.launcher is a section");
    assert!(launcher.contains(&"strategy".to_string()), "{launcher:?}");
    let hostfile = section_keys(&path(&["hostfiles[]"])).expect("hostfiles holds sections");
    assert_eq!(hostfile, ["path", "format", "template"]);
    assert!(
        section_keys(&path(&["interval"])).is_none(),
        "a duration is a leaf"
    );
    // Keys whose value has more than one form are sections too: their keys are probed.
    let notify = section_keys(&path(&["job", "notify"])).expect("job.notify's mapping form");
    assert_eq!(notify, ["signal", "pidfile", "expect", "command"]);
    let user = section_keys(&path(&["job", "launcher", "user"])).expect("a user's mapping form");
    assert_eq!(user, ["uid", "gid"]);
    let mut doc = BTreeSet::from(["job.launcher.user".to_string(), "job.ack.by".to_string()]);
    assert!(covered("job.launcher.user.uid", &doc));
    assert!(covered("job.ack", &doc));
    assert!(
        !covered("job.ack.file", &doc),
        "job.ack has rows below it, but not this one"
    );
    doc.insert("job.launcher.user.uid".into());
    assert!(!covered("job.launcher.user.gid", &doc));
}
