//! Opens a program `dtd agent` is about to run (as root, on AWS) only if no one but root and the
//! agent's own user can have put it there or changed it (docs/shared-directory.md, "The programs dtd agent runs").
//!
//! The path is walked one name at a time from `/`, each directory opened (`O_PATH`, never
//! following a link) and checked through its descriptor, and the program itself opened with
//! `O_NOFOLLOW`: what is checked is what is opened, and the runner executes that descriptor, so
//! nothing can be swapped between the check and the run. Every name on the way (directory, link,
//! program) must be owned by root or the agent's user. A directory others may write is accepted
//! on the way only when sticky (others cannot rename or remove names they do not own in it:
//! unlink(2), rename(2)), and a link in one must have a single hard link (else it could be
//! another trusted link given this name); the program's own directory must be written by no one
//! else at all, sticky or not, because interpreters load from it what the program imports
//! (Python puts it first on `sys.path`) and others could add those names. The program must not
//! be writable by its group or others, nor be a symbolic link; links on the way to it are
//! followed, each checked like the rest. With a pin, the SHA-256 of the bytes read from that
//! same descriptor must match.

use std::fmt;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::FileStat;

use crate::digest::Sha256;

/// Links followed on the way before the walk gives up: Linux's own limit (path_resolution(7)).
const MAX_LINKS: u32 = 40;
/// Where a name without a `/` is looked up when the agent has no `PATH` (glibc's `execvp`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";
const GROUP_OR_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// A program that passed: its descriptor (close-on-exec) and the path it was found at.
#[derive(Debug)]
pub struct Vetted {
    pub file: File,
    pub path: PathBuf,
}

/// Why a program cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The existing message for a program that is not there (it may still be installed: the
    /// prepare-data attempts go on).
    #[error("program not found: {}", .0.display())]
    NotFound(PathBuf),
    #[error("refused {}: {why}", program.display())]
    Refused { program: PathBuf, why: Unsafe },
    #[error("cannot open {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What makes a path unsafe to run as root; each names the path at fault.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsafe {
    #[error("{} is owned by uid {uid}, not {allowed}", path.display())]
    Owner {
        path: PathBuf,
        uid: u32,
        allowed: Owners,
    },
    #[error("{} is writable by its group or others (mode {mode:04o})", path.display())]
    Writable { path: PathBuf, mode: u32 },
    #[error("{} is writable by its group or others and not sticky (mode {mode:04o})", path.display())]
    WritableDir { path: PathBuf, mode: u32 },
    #[error("{} is a symbolic link (to {}): name the program itself", path.display(), target.display())]
    Link { path: PathBuf, target: PathBuf },
    #[error("{} has {links} hard links in a directory others can add names to", path.display())]
    HardLinks { path: PathBuf, links: u64 },
    #[error(
        "{} is writable by its group or others (mode {mode:04o}): a program's own directory must \
         be written by no one else, sticky or not",
        path.display()
    )]
    OpenHome { path: PathBuf, mode: u32 },
    #[error("{} is {what}, not a program file", path.display())]
    NotFile { path: PathBuf, what: &'static str },
    #[error("{} is not a directory", path.display())]
    NotDir { path: PathBuf },
    #[error("more than {MAX_LINKS} symbolic links on the way to {}", path.display())]
    Loop { path: PathBuf },
    #[error("its sha256 is {actual}, not the pinned {expected}")]
    Digest { expected: Sha256, actual: Sha256 },
}

/// Who may own what the agent runs: root, and the user the agent runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owners {
    me: u32,
}

impl Owners {
    pub fn of_this_process() -> Owners {
        Owners {
            me: nix::unistd::geteuid().as_raw(),
        }
    }

    fn allow(&self, uid: u32) -> bool {
        uid == 0 || uid == self.me
    }
}

impl fmt::Display for Owners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.me {
            0 => write!(f, "root"),
            me => write!(f, "root or uid {me} (dtd agent's own user)"),
        }
    }
}

/// What the checks look at in a `stat`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    uid: u32,
    mode: u32,
    links: u64,
}

impl From<&FileStat> for Entry {
    // `nlink_t` is 64 bits on x86_64, 32 on aarch64.
    #[allow(clippy::useless_conversion)]
    fn from(st: &FileStat) -> Entry {
        Entry {
            uid: st.st_uid,
            mode: st.st_mode,
            links: u64::from(st.st_nlink),
        }
    }
}

/// Finds `program` (a name without `/` on `PATH`), walks to it checking every name on the way,
/// opens it, and checks its digest against `pin`.
pub fn open(program: &Path, pin: Option<&Sha256>) -> Result<Vetted, OpenError> {
    let search = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    let path = locate(program, &search)?;
    let owners = Owners::of_this_process();
    let file = walk(&path, owners).map_err(|e| match e {
        Walked::Refused(why) => OpenError::Refused {
            program: path.clone(),
            why,
        },
        Walked::NotFound => OpenError::NotFound(program.to_path_buf()),
        Walked::Io(at, source) => OpenError::Io { path: at, source },
    })?;
    if let Some(expected) = pin {
        let actual = Sha256::of_reader(&file).map_err(|source| OpenError::Io {
            path: path.clone(),
            source,
        })?;
        if actual != *expected {
            let why = Unsafe::Digest {
                expected: *expected,
                actual,
            };
            return Err(OpenError::Refused { program: path, why });
        }
    }
    Ok(Vetted { file, path })
}

/// An absolute path to walk: a name without `/` is looked up on `PATH` as `execvp` would (the
/// first executable file), skipping relative entries, which would let the working directory
/// choose what runs as root.
fn locate(program: &Path, search: &std::ffi::OsStr) -> Result<PathBuf, OpenError> {
    let not_found = || OpenError::NotFound(program.to_path_buf());
    if program.as_os_str().is_empty() {
        return Err(not_found());
    }
    if program.as_os_str().as_bytes().contains(&b'/') {
        return std::path::absolute(program).map_err(|source| OpenError::Io {
            path: program.to_path_buf(),
            source,
        });
    }
    std::env::split_paths(search)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(not_found)
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

mod walk;

use walk::{walk, Walked};

#[cfg(test)]
mod tests;
