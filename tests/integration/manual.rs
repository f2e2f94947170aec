//! The operator's kit from the real binaries: `dtctl completion` completes dtctl's commands in a
//! real bash, and `dtd man` / `dtctl man` write a page per command that `man` renders.

use std::path::Path;
use std::process::Command;

use crate::support::*;

fn bin(name: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("DT_BIN_DIR").expect("DT_BIN_DIR (scripts/env.sh sets it)");
    Path::new(&dir).join(name)
}

fn run(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect("started");
    assert!(
        out.status.success(),
        "{program:?} {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// What bash's completion offers for `line` (the last word being completed).
fn complete(script: &Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let program = format!(
        "source {}\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{line}'\nCOMP_POINT={}\n\
         _dtctl dtctl '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        words.len() - 1,
        line.len(),
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &program])
        .output()
        .expect("bash");
    assert!(out.status.success(), "bash: {}", stderr(&out));
    stdout(&out).lines().map(str::to_string).collect()
}

#[test]
fn bash_completes_dtctls_commands_and_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("dtctl.bash");
    std::fs::write(&script, run(&bin("dtctl"), &["completion", "bash"])).unwrap();
    let first = complete(&script, "dtctl sc");
    assert_eq!(first, ["scale"], "{first:?}");
    let all = complete(&script, "dtctl ");
    for command in ["status", "explain", "doctor", "completion", "man", "config"] {
        assert!(all.iter().any(|c| c == command), "{command} not in {all:?}");
    }
    let shells = complete(&script, "dtctl completion f");
    assert_eq!(shells, ["fish"], "{shells:?}");
    let zsh = run(&bin("dtctl"), &["completion", "zsh"]);
    assert!(zsh.starts_with("#compdef dtctl"), "{zsh}");
    let fish = run(&bin("dtctl"), &["completion", "fish"]);
    assert!(fish.contains("complete -c dtctl"), "{fish}");
    let bad = Command::new(bin("dtctl"))
        .args(["completion", "tcsh"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("possible values"), "{}", stderr(&bad));
}

#[test]
fn each_command_has_a_man_page_that_man_renders() {
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    let written = run(&bin("dtctl"), &["man", &path_str(&man1)]);
    run(&bin("dtd"), &["man", &path_str(&man1)]);
    let mut pages: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in [
        "dtctl.1",
        "dtctl-status.1",
        "dtctl-explain.1",
        "dtctl-scale.1",
        "dtctl-config-check.1",
        "dtd.1",
        "dtd-run.1",
        "dtd-agent.1",
        "dtd-man.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} not in {pages:?}");
    }
    assert_eq!(
        written.lines().count(),
        pages.iter().filter(|p| p.starts_with("dtctl")).count()
    );
    let rendered = Command::new("man")
        .args(["-l", &path_str(&man1.join("dtctl-scale.1"))])
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man");
    let text = stdout(&rendered);
    assert!(rendered.status.success(), "man: {}", stderr(&rendered));
    assert!(text.contains("--replicas"), "{text}");
    assert!(
        text.contains("Show progress until the job trains"),
        "{text}"
    );
}
