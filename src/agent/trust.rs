//! Opens a program `dtd agent` is about to run (as root, on AWS) only if no one but root and the
//! agent's own user can have put it there or changed it (README, "The programs dtd agent runs").
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

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};

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

enum Walked {
    Refused(Unsafe),
    NotFound,
    Io(PathBuf, std::io::Error),
}

impl From<Unsafe> for Walked {
    fn from(why: Unsafe) -> Walked {
        Walked::Refused(why)
    }
}

/// A directory reached on the walk, checked.
struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    /// Its mode: others may add names to it when it is writable by them (it is sticky, or it
    /// would have been refused).
    mode: u32,
}

impl Dir {
    fn open_to_others(&self) -> bool {
        self.mode & GROUP_OR_OTHER_WRITE != 0
    }
}

/// The walk from `/` to the program: the directories checked so far (the last one is where the
/// next name is looked up), the names still to walk, and the links followed.
struct Walk {
    owners: Owners,
    dirs: Vec<Dir>,
    todo: VecDeque<OsString>,
    links: u32,
}

/// Walks `path` (absolute) from `/`, following links on the way, and opens the program at its
/// end. Each step is an `*at` call on the descriptor of the directory checked before it.
fn walk(path: &Path, owners: Owners) -> Result<File, Walked> {
    let root = PathBuf::from("/");
    let fd = open_dir(None, &root)?;
    let mut walk = Walk {
        owners,
        dirs: vec![checked_dir(fd, root, owners)?],
        todo: names(path),
        links: 0,
    };
    while let Some(name) = walk.todo.pop_front() {
        if let Some(program) = walk.step(name, path)? {
            return Ok(program);
        }
    }
    Err(Unsafe::NotFile {
        path: path.to_path_buf(),
        what: "a directory",
    }
    .into())
}

impl Walk {
    /// One name: into a directory, along a link, or the program when it is the last.
    fn step(&mut self, name: OsString, path: &Path) -> Result<Option<File>, Walked> {
        if name == ".." {
            if self.dirs.len() > 1 {
                self.dirs.pop();
            }
            return Ok(None);
        }
        let here = self.dirs.last().ok_or(Walked::NotFound)?;
        let at = here.path.join(&name);
        let st = match fstatat(&here.fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Err(Walked::NotFound),
            Err(e) => return Err(Walked::Io(at, e.into())),
        };
        let last = self.todo.is_empty();
        match st.st_mode & libc_mode::S_IFMT {
            libc_mode::S_IFLNK => {
                check_link(&at, (&st).into(), here.open_to_others(), self.owners)?;
                let target = readlinkat(&here.fd, name.as_os_str())
                    .map(PathBuf::from)
                    .map_err(|e| Walked::Io(at.clone(), e.into()))?;
                if last {
                    return Err(Unsafe::Link { path: at, target }.into());
                }
                self.follow(&target, path)?;
            }
            libc_mode::S_IFDIR if !last => {
                let fd = open_dir(Some(&here.fd), &at)?;
                let dir = checked_dir(fd, at, self.owners)?;
                self.dirs.push(dir);
            }
            libc_mode::S_IFREG if last => {
                return open_program(here, &name, at, self.owners).map(Some);
            }
            libc_mode::S_IFREG => return Err(Unsafe::NotDir { path: at }.into()),
            kind => {
                let what = describe_kind(kind);
                return Err(Unsafe::NotFile { path: at, what }.into());
            }
        }
        Ok(None)
    }

    /// Puts a link's target in front of the names left: from `/` when it is absolute, else from
    /// the directory the link is in.
    fn follow(&mut self, target: &Path, path: &Path) -> Result<(), Walked> {
        self.links += 1;
        if self.links > MAX_LINKS {
            let path = path.to_path_buf();
            return Err(Unsafe::Loop { path }.into());
        }
        if target.is_absolute() {
            self.dirs.truncate(1);
        }
        for n in names(target).into_iter().rev() {
            self.todo.push_front(n);
        }
        Ok(())
    }
}

/// The names of a path in order; `.` dropped, `..` kept for the walk to go up.
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn open_dir(parent: Option<&OwnedFd>, path: &Path) -> Result<OwnedFd, Walked> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let opened = match parent {
        Some(dir) => openat(dir, last_name(path), flags, Mode::empty()),
        None => nix::fcntl::open(path, flags, Mode::empty()),
    };
    opened.map_err(|e| match e {
        Errno::ENOENT => Walked::NotFound,
        // Swapped for a link or a file since it was looked at.
        Errno::ELOOP | Errno::ENOTDIR => Unsafe::NotDir {
            path: path.to_path_buf(),
        }
        .into(),
        e => Walked::Io(path.to_path_buf(), e.into()),
    })
}

fn last_name(path: &Path) -> &std::ffi::OsStr {
    path.file_name().unwrap_or(path.as_os_str())
}

fn checked_dir(fd: OwnedFd, path: PathBuf, owners: Owners) -> Result<Dir, Walked> {
    let st = fstat(&fd).map_err(|e| Walked::Io(path.clone(), e.into()))?;
    let entry = Entry::from(&st);
    check_dir(&path, entry, owners)?;
    Ok(Dir {
        fd,
        path,
        mode: entry.mode,
    })
}

/// Opens the program for reading (never blocking, never following a link) and checks what was
/// opened, then the directory it is in.
fn open_program(
    dir: &Dir,
    name: &std::ffi::OsStr,
    path: PathBuf,
    owners: Owners,
) -> Result<File, Walked> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = openat(&dir.fd, name, flags, Mode::empty()).map_err(|e| match e {
        Errno::ENOENT => Walked::NotFound,
        e => Walked::Io(path.clone(), e.into()),
    })?;
    let st = fstat(&fd).map_err(|e| Walked::Io(path.clone(), e.into()))?;
    if st.st_mode & libc_mode::S_IFMT != libc_mode::S_IFREG {
        let what = describe_kind(st.st_mode & libc_mode::S_IFMT);
        return Err(Unsafe::NotFile { path, what }.into());
    }
    check_program(&path, Entry::from(&st), owners)?;
    check_home(&dir.path, dir.mode)?;
    Ok(File::from(fd))
}

/// A directory on the way: trusted owner, and written by no one else unless sticky.
fn check_dir(path: &Path, e: Entry, owners: Owners) -> Result<(), Unsafe> {
    check_owner(path, e, owners)?;
    if e.mode & GROUP_OR_OTHER_WRITE != 0 && e.mode & STICKY == 0 {
        return Err(Unsafe::WritableDir {
            path: path.to_path_buf(),
            mode: e.mode & 0o7777,
        });
    }
    Ok(())
}

/// The program's own directory (checked on the way as [`check_dir`]): written by no one else,
/// sticky or not.
fn check_home(path: &Path, mode: u32) -> Result<(), Unsafe> {
    if mode & GROUP_OR_OTHER_WRITE != 0 {
        return Err(Unsafe::OpenHome {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// The program: trusted owner, written by no one else.
fn check_program(path: &Path, e: Entry, owners: Owners) -> Result<(), Unsafe> {
    check_owner(path, e, owners)?;
    if e.mode & GROUP_OR_OTHER_WRITE != 0 {
        return Err(Unsafe::Writable {
            path: path.to_path_buf(),
            mode: e.mode & 0o7777,
        });
    }
    Ok(())
}

/// A link on the way: its target is walked and checked; the link itself has an owner, and in a
/// directory others can add names to, must not be a second name of another trusted link.
fn check_link(path: &Path, e: Entry, in_open_dir: bool, owners: Owners) -> Result<(), Unsafe> {
    check_owner(path, e, owners)?;
    if in_open_dir && e.links > 1 {
        return Err(Unsafe::HardLinks {
            path: path.to_path_buf(),
            links: e.links,
        });
    }
    Ok(())
}

fn check_owner(path: &Path, e: Entry, owners: Owners) -> Result<(), Unsafe> {
    if owners.allow(e.uid) {
        return Ok(());
    }
    Err(Unsafe::Owner {
        path: path.to_path_buf(),
        uid: e.uid,
        allowed: owners,
    })
}

fn describe_kind(kind: u32) -> &'static str {
    match kind {
        libc_mode::S_IFDIR => "a directory",
        libc_mode::S_IFIFO => "a FIFO",
        libc_mode::S_IFCHR => "a character device",
        libc_mode::S_IFBLK => "a block device",
        libc_mode::S_IFSOCK => "a socket",
        libc_mode::S_IFLNK => "a symbolic link",
        _ => "not a plain file",
    }
}

/// File types in `st_mode`, from Linux's `<sys/stat.h>` via `nix`.
mod libc_mode {
    use nix::sys::stat::SFlag;
    pub const S_IFMT: u32 = SFlag::S_IFMT.bits();
    pub const S_IFREG: u32 = SFlag::S_IFREG.bits();
    pub const S_IFDIR: u32 = SFlag::S_IFDIR.bits();
    pub const S_IFLNK: u32 = SFlag::S_IFLNK.bits();
    pub const S_IFIFO: u32 = SFlag::S_IFIFO.bits();
    pub const S_IFCHR: u32 = SFlag::S_IFCHR.bits();
    pub const S_IFBLK: u32 = SFlag::S_IFBLK.bits();
    pub const S_IFSOCK: u32 = SFlag::S_IFSOCK.bits();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn owners(me: u32) -> Owners {
        Owners { me }
    }

    fn entry(uid: u32, mode: u32, links: u64) -> Entry {
        Entry { uid, mode, links }
    }

    /// A directory below the system's temporary one: / and /tmp are root's (and /tmp sticky), the
    /// directory this process's own, 0755.
    fn place() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o755);
        dir
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn program(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\necho ran\n").unwrap();
        chmod(&path, mode);
        path
    }

    fn refusal(path: &Path, pin: Option<&Sha256>) -> Unsafe {
        match open(path, pin) {
            Err(OpenError::Refused { why, .. }) => why,
            other => panic!("{} was not refused: {other:?}", path.display()),
        }
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn only_root_and_the_agents_own_user_may_own_what_it_runs() {
        let p = Path::new("/x/prep");
        assert!(check_program(p, entry(0, 0o100755, 1), owners(0)).is_ok());
        assert!(check_program(p, entry(1000, 0o100755, 1), owners(1000)).is_ok());
        assert!(check_program(p, entry(0, 0o100755, 1), owners(1000)).is_ok());
        let e = check_program(p, entry(65534, 0o100755, 1), owners(0)).unwrap_err();
        assert_eq!(e.to_string(), "/x/prep is owned by uid 65534, not root");
        let e = check_dir(p, entry(65534, 0o40755, 2), owners(1000)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/x/prep is owned by uid 65534, not root or uid 1000 (dtd agent's own user)"
        );
    }

    #[test]
    fn nothing_anyone_else_can_write_and_no_second_name_in_a_sticky_directory() {
        let p = Path::new("/x/prep");
        for mode in [0o100775, 0o100757, 0o100722] {
            let e = check_program(p, entry(0, mode, 1), owners(0)).unwrap_err();
            assert!(matches!(e, Unsafe::Writable { .. }), "{mode:o}: {e}");
        }
        let e = check_dir(p, entry(0, 0o40777, 2), owners(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/x/prep is writable by its group or others and not sticky (mode 0777)"
        );
        // On the way, sticky will do; as the program's own directory, it will not.
        assert!(check_dir(p, entry(0, 0o41777, 2), owners(0)).is_ok());
        assert_eq!(
            check_home(p, 0o41775).unwrap_err().to_string(),
            "/x/prep is writable by its group or others (mode 1775): a program's own directory \
             must be written by no one else, sticky or not"
        );
        assert!(check_home(p, 0o41755).is_ok());
        let link = entry(0, 0o120777, 2);
        assert!(check_link(p, link, false, owners(0)).is_ok());
        let e = check_link(p, link, true, owners(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/x/prep has 2 hard links in a directory others can add names to"
        );
    }

    #[test]
    fn a_program_no_one_else_can_change_is_opened() {
        let dir = place();
        let prog = program(dir.path(), "prep", 0o755);
        let v = open(&prog, None).unwrap();
        assert_eq!(v.path, prog);
        // Through a link on the way (a checked one: the test's own).
        let alias = place();
        let via = alias.path().join("d");
        symlink(dir.path(), &via).unwrap();
        assert_eq!(
            open(&via.join("prep"), None).unwrap().path,
            via.join("prep")
        );
        let dotted = dir.path().join("..").join(dir.path().file_name().unwrap());
        assert!(open(&dotted.join("prep"), None).is_ok());
    }

    #[test]
    fn a_group_or_world_writable_program_is_refused() {
        let dir = place();
        let prog = program(dir.path(), "prep", 0o775);
        let why = refusal(&prog, None);
        assert_eq!(
            why,
            Unsafe::Writable {
                path: prog.clone(),
                mode: 0o775
            }
        );
        chmod(&prog, 0o757);
        assert!(matches!(
            refusal(&prog, None),
            Unsafe::Writable { mode: 0o757, .. }
        ));
    }

    #[test]
    fn a_directory_others_can_write_is_refused_on_the_way_unless_sticky_and_as_home_always() {
        let dir = place();
        let open_dir = dir.path().join("shared");
        std::fs::create_dir(&open_dir).unwrap();
        let prog = program(&open_dir, "prep", 0o755);
        chmod(&open_dir, 0o777);
        assert_eq!(
            refusal(&prog, None),
            Unsafe::WritableDir {
                path: open_dir.clone(),
                mode: 0o777
            }
        );
        // Deeper down too: every directory on the way counts.
        let deeper = open_dir.join("sub");
        std::fs::create_dir(&deeper).unwrap();
        chmod(&deeper, 0o755);
        let inner = program(&deeper, "prep", 0o755);
        assert!(matches!(refusal(&inner, None), Unsafe::WritableDir { .. }));
        // Sticky: others cannot replace what is not theirs, so it will do on the way, but not
        // as the program's own directory, where they could add what the program loads.
        chmod(&open_dir, 0o1777);
        assert!(open(&inner, None).is_ok());
        assert_eq!(
            refusal(&prog, None),
            Unsafe::OpenHome {
                path: open_dir.clone(),
                mode: 0o1777
            }
        );
        // A link there that is a second name of another (trusted) link is refused.
        let elsewhere = place();
        let original = elsewhere.path().join("to-deeper");
        symlink(&deeper, &original).unwrap();
        let linked = open_dir.join("linked");
        std::fs::hard_link(&original, &linked).unwrap();
        assert_eq!(
            refusal(&linked.join("prep"), None),
            Unsafe::HardLinks {
                path: linked.clone(),
                links: 2
            }
        );
        assert!(open(&original.join("prep"), None).is_ok());
    }

    #[test]
    fn a_symbolic_link_to_a_good_program_is_refused_and_names_its_target() {
        let dir = place();
        let prog = program(dir.path(), "prep", 0o755);
        let link = dir.path().join("link");
        symlink(&prog, &link).unwrap();
        let why = refusal(&link, None);
        assert_eq!(
            why.to_string(),
            format!(
                "{} is a symbolic link (to {}): name the program itself",
                link.display(),
                prog.display()
            )
        );
    }

    #[test]
    fn a_pinned_digest_must_match_the_bytes_opened() {
        let dir = place();
        let prog = program(dir.path(), "prep", 0o755);
        let actual = Sha256::of_reader(std::fs::File::open(&prog).unwrap()).unwrap();
        assert_eq!(open(&prog, Some(&actual)).unwrap().path, prog);
        let expected: Sha256 = "00".repeat(32).parse().unwrap();
        let e = open(&prog, Some(&expected)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "refused {}: its sha256 is {actual}, not the pinned {expected}",
                prog.display()
            )
        );
    }

    #[test]
    fn a_program_or_directory_owned_by_another_user_is_refused() {
        if !is_root() {
            // Without root no file can belong to a third user; the rule itself is tested above.
            eprintln!(
                "NOTE: not root: files of another user cannot be made; see only_root_and_..."
            );
            return;
        }
        let nobody = Some(nix::unistd::Uid::from_raw(65534));
        let dir = place();
        let prog = program(dir.path(), "prep", 0o755);
        nix::unistd::chown(&prog, nobody, None).unwrap();
        assert_eq!(
            refusal(&prog, None).to_string(),
            format!("{} is owned by uid 65534, not root", prog.display())
        );
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        let inner = program(&theirs, "prep", 0o755);
        nix::unistd::chown(&theirs, nobody, None).unwrap();
        assert!(matches!(
            refusal(&inner, None),
            Unsafe::Owner { uid: 65534, .. }
        ));
        // A link on the way is checked like the rest.
        let good = program(dir.path(), "good", 0o755);
        let link = dir.path().join("via");
        symlink(dir.path(), &link).unwrap();
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            &link,
            nobody,
            None,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
        let why = refusal(&link.join("good"), None);
        assert_eq!(
            why,
            Unsafe::Owner {
                path: link,
                uid: 65534,
                allowed: owners(0)
            }
        );
        assert!(open(&good, None).is_ok());
    }

    #[test]
    fn a_name_is_looked_up_on_path_and_a_missing_program_is_not_found() {
        let dir = place();
        program(dir.path(), "dt-test-prep", 0o755);
        // The agent's own PATH is not changed: the other tests' threads share it.
        let search = format!("relative:{}:/usr/bin", dir.path().display());
        let found = locate(Path::new("dt-test-prep"), search.as_ref()).unwrap();
        assert_eq!(found, dir.path().join("dt-test-prep"));
        // Relative entries are skipped: the working directory must not choose what runs as root
        // (cargo runs the tests in the crate's directory, where this one would find the check).
        assert!(Path::new("templates/health/gpu_health.py").is_file());
        assert!(matches!(
            locate(Path::new("gpu_health.py"), "templates/health".as_ref()),
            Err(OpenError::NotFound(_))
        ));
        assert!(matches!(
            open(Path::new("dt-no-such-program-anywhere"), None),
            Err(OpenError::NotFound(_))
        ));
        let missing = dir.path().join("nope/prep");
        assert_eq!(
            open(&missing, None).unwrap_err().to_string(),
            format!("program not found: {}", missing.display())
        );
        // A system program by its usual name: on merged-/usr systems /bin is a link, followed.
        assert!(open(Path::new("/bin/true"), None).is_ok());
    }

    #[test]
    fn what_is_not_a_program_file_is_refused() {
        let dir = place();
        assert!(matches!(
            refusal(dir.path(), None),
            Unsafe::NotFile {
                what: "a directory",
                ..
            }
        ));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o755)).unwrap();
        assert!(matches!(
            refusal(&fifo, None),
            Unsafe::NotFile { what: "a FIFO", .. }
        ));
        let prog = program(dir.path(), "prep", 0o755);
        assert!(matches!(
            refusal(&prog.join("more"), None),
            Unsafe::NotDir { .. }
        ));
    }
}
