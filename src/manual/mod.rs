//! Man pages and shell completion, generated from a binary's own clap definition (`dtd man`,
//! `dtctl man`, `dtctl completion`), so that they say exactly what the binary accepts.
//! `scripts/release` writes them into the archive; the stack installs them.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Command;

mod pages;

/// Writes `NAME.1` and a page per subcommand (`NAME-SUB.1`, `NAME-SUB-SUB.1`) into `dir`,
/// which is made if missing, and returns the pages it wrote.
pub fn write_man_pages(cmd: Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    // Built, as clap_mangen does, so that subcommands carry their full names (dtctl-config-check).
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(cmd, dir, &mut written)?;
    Ok(written)
}

fn write_pages(cmd: Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        write_pages(sub, dir, written)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let file = man.get_filename();
    let mut page = Vec::new();
    man.render(&mut page)?;
    let name = file.strip_suffix(".1").unwrap_or(&file);
    page.extend(pages::sections(name).as_bytes());
    let path = dir.join(&file);
    std::fs::write(&path, page)?;
    written.push(path);
    Ok(())
}

/// What `dtd man DIR` and `dtctl man DIR` do: the pages written, a path a line; an error says
/// which directory.
pub fn print_man_pages(cmd: Command, dir: &Path) -> std::io::Result<()> {
    let pages = write_man_pages(cmd, dir).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("writing man pages into {}: {e}", dir.display()),
        )
    })?;
    for page in pages {
        println!("{}", page.display());
    }
    Ok(())
}

/// The completion script of `cmd` for `shell`.
pub fn write_completion(mut cmd: Command, shell: clap_complete::Shell, out: &mut dyn Write) {
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn tool() -> Command {
        Command::new("tool")
            .about("A tool")
            .subcommand(Command::new("show").about("Show it").arg(Arg::new("what")))
            .subcommand(
                Command::new("config").subcommand(Command::new("check").about("Check a file")),
            )
    }

    #[test]
    fn a_page_per_command_named_as_man_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut pages: Vec<String> = write_man_pages(tool(), dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        pages.sort();
        assert_eq!(
            pages,
            [
                "tool-config-check.1",
                "tool-config.1",
                "tool-show.1",
                "tool.1"
            ]
        );
        let show = std::fs::read_to_string(dir.path().join("tool-show.1")).unwrap();
        assert!(show.contains(".TH tool-show 1"), "{show}");
        assert!(show.contains("Show it"), "{show}");
        assert!(show.contains(".SH \"EXIT STATUS\""), "{show}");
    }

    #[test]
    fn completion_offers_the_subcommands() {
        let mut out = Vec::new();
        write_completion(tool(), clap_complete::Shell::Bash, &mut out);
        let script = String::from_utf8(out).unwrap();
        assert!(script.contains("complete -F _tool"), "{script}");
        assert!(script.contains("show"), "{script}");
    }
}
