//! The walk from `/` to the program, one name at a time, each checked through the descriptor it
//! was opened with (see the parent module).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};

use super::*;

pub(super) enum Walked {
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
pub(super) fn walk(path: &Path, owners: Owners) -> Result<File, Walked> {
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
pub(super) fn check_dir(path: &Path, e: Entry, owners: Owners) -> Result<(), Unsafe> {
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
pub(super) fn check_home(path: &Path, mode: u32) -> Result<(), Unsafe> {
    if mode & GROUP_OR_OTHER_WRITE != 0 {
        return Err(Unsafe::OpenHome {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// The program: trusted owner, written by no one else.
pub(super) fn check_program(path: &Path, e: Entry, owners: Owners) -> Result<(), Unsafe> {
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
pub(super) fn check_link(
    path: &Path,
    e: Entry,
    in_open_dir: bool,
    owners: Owners,
) -> Result<(), Unsafe> {
    check_owner(path, e, owners)?;
    if in_open_dir && e.links > 1 {
        return Err(Unsafe::HardLinks {
            path: path.to_path_buf(),
            links: e.links,
        });
    }
    Ok(())
}

pub(super) fn check_owner(path: &Path, e: Entry, owners: Owners) -> Result<(), Unsafe> {
    if owners.allow(e.uid) {
        return Ok(());
    }
    Err(Unsafe::Owner {
        path: path.to_path_buf(),
        uid: e.uid,
        allowed: owners,
    })
}

pub(super) fn describe_kind(kind: u32) -> &'static str {
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
