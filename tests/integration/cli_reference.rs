//! docs/cli.md is what the binaries say: each `## `command`` section holds that command's
//! `--help`, and every command the binaries have has a section (scripts/cli-reference writes
//! the page).

use std::process::Command;

use crate::support::repo;

/// The page's sections: the command (`dtctl config check`) and the text in its code block.
fn sections() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/cli.md")).expect("docs/cli.md");
    let mut found = Vec::new();
    for part in text.split("\n## `").skip(1) {
        let (command, rest) = part.split_once("`\n").expect("a heading");
        let body = rest.split("```text\n").nth(1).expect("a code block");
        let body = body.split("```\n").next().expect("its end");
        found.push((command.to_string(), body.to_string()));
    }
    found
}

fn help(command: &str) -> String {
    let mut words = command.split(' ');
    let exe = match words.next() {
        Some("dtd") => env!("CARGO_BIN_EXE_dtd"),
        Some("dtctl") => env!("CARGO_BIN_EXE_dtctl"),
        other => panic!("not a binary of this project: {other:?}"),
    };
    let out = Command::new(exe)
        .args(words)
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{command} --help: {out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    format!("{}\n", text.trim_end())
}

/// The commands a help text lists, `help` aside.
fn listed(text: &str) -> Vec<String> {
    let Some(block) = text.split("Commands:\n").nth(1) else {
        return Vec::new();
    };
    (block.lines())
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_cli_reference_is_what_the_binaries_say() {
    let page = sections();
    let mut wrong = Vec::new();
    for (command, body) in &page {
        if help(command) != *body {
            wrong.push(format!("{command}: the page's text is not its --help"));
        }
    }
    let mut todo = vec!["dtd".to_string(), "dtctl".to_string()];
    while let Some(command) = todo.pop() {
        if !page.iter().any(|(c, _)| *c == command) {
            wrong.push(format!("{command}: no section"));
        }
        todo.extend(
            listed(&help(&command))
                .iter()
                .map(|s| format!("{command} {s}")),
        );
    }
    assert!(
        wrong.is_empty(),
        "docs/cli.md differs from the binaries (run scripts/cli-reference):\n{}",
        wrong.join("\n")
    );
}
