//! Reading files that workers can write (ARCHITECTURE.md, "Trust rules").
//!
//! Every worker mounts the shared directory with write access and runs user code, so anything
//! there may be a FIFO (an open that blocks forever), a symbolic link to `/dev/zero` (a read that
//! never ends), a sparse file of gigabytes, or a directory. Every read of the shared directory goes
//! through this module: the open never blocks and never follows a final symbolic link, the opened
//! descriptor must be a regular file, and no read takes more than its caller's bound.

use std::collections::HashMap;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("holds {size} bytes, more than the {limit} it can hold")]
    TooLarge { size: u64, limit: u64 },
    /// A job file created by someone other than the job (`job.owner`): a worker got there first.
    #[error("is owned by uid {uid}, not the job's user (uid {owner})")]
    NotOwned { uid: u32, owner: u32 },
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl ReadError {
    /// Whether the file is something a worker put in the way (as opposed to an I/O failure of
    /// the file system itself, which makes the source incomplete).
    pub fn is_refused(&self) -> bool {
        !matches!(self, ReadError::Io(_))
    }
}

/// Opens `path` for reading without blocking (a FIFO opens at once) and without following a final
/// symbolic link; checks on the opened descriptor that it is a regular file. `None`: no such file.
pub fn open(path: &Path) -> Result<Option<(File, Metadata)>, ReadError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags::NONBLOCK | libc_flags::NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc_flags::ELOOP) => {
            return Err(ReadError::NotRegular("a symbolic link"))
        }
        Err(e) => return Err(ReadError::Io(e)),
    };
    let meta = file.metadata()?;
    check_regular(&meta)?;
    Ok(Some((file, meta)))
}

/// [`open`], and refused unless `owner` (when given) owns the file.
pub fn open_owned(path: &Path, owner: Option<u32>) -> Result<Option<(File, Metadata)>, ReadError> {
    let opened = open(path)?;
    if let (Some((_, meta)), Some(owner)) = (&opened, owner) {
        let uid = std::os::unix::fs::MetadataExt::uid(meta);
        if uid != owner {
            return Err(ReadError::NotOwned { uid, owner });
        }
    }
    Ok(opened)
}

/// The line for `dtctl status` and the journal when `e` refused `path` for its owner.
pub fn not_owned_line(path: &Path, e: &ReadError) -> Option<String> {
    matches!(e, ReadError::NotOwned { .. }).then(|| format!("{} {e}: ignored", path.display()))
}

/// A whole small file (a PID, a generation): larger than `limit` bytes is refused unread.
pub fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
    read_owned(path, limit, None)
}

/// [`read`] of a file `owner` (when given) must own.
pub fn read_owned(
    path: &Path,
    limit: u64,
    owner: Option<u32>,
) -> Result<Option<Vec<u8>>, ReadError> {
    let Some((file, meta)) = open_owned(path, owner)? else {
        return Ok(None);
    };
    read_opened(file, &meta, limit).map(Some)
}

/// An opened file whole, refused unread when larger than `limit` bytes (or when it grows past
/// them while it is read).
pub fn read_opened(file: File, meta: &Metadata, limit: u64) -> Result<Vec<u8>, ReadError> {
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    let bytes = read_at_most(file, limit + 1)?;
    // It grew between the stat and the read: still more than it may hold.
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The first `limit` bytes of a file whose useful part is at its start (a marker's JSON).
pub fn read_prefix(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
    match open(path)? {
        Some((file, _)) => Ok(Some(read_at_most(file, limit)?)),
        None => Ok(None),
    }
}

/// At most `limit` bytes from `reader`.
pub fn read_at_most(reader: impl Read, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn check_regular(meta: &Metadata) -> Result<(), ReadError> {
    let t = meta.file_type();
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    };
    Err(ReadError::NotRegular(what))
}

/// Flags the standard library does not name; values from Linux's `<fcntl.h>` via `nix`.
pub mod libc_flags {
    use nix::fcntl::OFlag;
    pub const NONBLOCK: i32 = OFlag::O_NONBLOCK.bits();
    pub const NOFOLLOW: i32 = OFlag::O_NOFOLLOW.bits();
    pub const DIRECTORY: i32 = OFlag::O_DIRECTORY.bits();
    pub const ELOOP: i32 = nix::errno::Errno::ELOOP as i32;
}

/// Logs a refused file once per file and reason, not at every pass, and its recovery.
#[derive(Debug, Default)]
pub struct WarnOnce {
    warned: HashMap<PathBuf, String>,
}

impl WarnOnce {
    /// Logs `why` for `path` unless it was the last thing said about it; returns whether it logged.
    pub fn warn(&mut self, path: &Path, why: &str, then: &str) -> bool {
        if self.warned.get(path).map(String::as_str) == Some(why) {
            return false;
        }
        tracing::warn!(file = %path.display(), "{} {why}: {then}", describe(path));
        self.warned.insert(path.to_path_buf(), why.to_string());
        true
    }

    /// The file is fine again: the next refusal is logged anew.
    pub fn clear(&mut self, path: &Path) {
        if self.warned.remove(path).is_some() {
            tracing::info!(file = %path.display(), "{} is readable again", describe(path));
        }
    }
}

fn describe(path: &Path) -> String {
    match path.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn mkfifo(p: &Path) {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ack");
        mkfifo(&p);
        let started = Instant::now();
        let e = read(&p, 64).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("a FIFO")), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn links_directories_and_devices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("job.pid");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read(&link, 64),
            Err(ReadError::NotRegular("a symbolic link"))
        ));
        let sub = dir.path().join("ack");
        std::fs::create_dir(&sub).unwrap();
        assert!(matches!(
            read(&sub, 64),
            Err(ReadError::NotRegular("a directory"))
        ));
        assert!(matches!(
            read(Path::new("/dev/zero"), 64),
            Err(ReadError::NotRegular("a character device"))
        ));
    }

    #[test]
    fn a_large_file_is_refused_unread_and_a_prefix_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ack");
        let f = File::create(&p).unwrap();
        f.set_len(3 << 30).unwrap();
        match read(&p, 64) {
            Err(ReadError::TooLarge { size, limit }) => assert_eq!((size, limit), (3 << 30, 64)),
            other => panic!("{other:?}"),
        }
        assert_eq!(read_prefix(&p, 100).unwrap().unwrap().len(), 100);
    }

    #[test]
    fn a_file_of_another_owner_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ack");
        std::fs::write(&p, "7\n").unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(read_owned(&p, 64, Some(me)).unwrap().unwrap(), b"7\n");
        let other = me.wrapping_add(1);
        match read_owned(&p, 64, Some(other)) {
            Err(e @ ReadError::NotOwned { .. }) => {
                assert!(e.is_refused());
                assert_eq!(
                    e.to_string(),
                    format!("is owned by uid {me}, not the job's user (uid {other})")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(read_owned(&dir.path().join("none"), 64, Some(other))
            .unwrap()
            .is_none());
    }

    #[test]
    fn small_files_and_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ack");
        assert!(read(&p, 64).unwrap().is_none());
        std::fs::write(&p, "7\n").unwrap();
        assert_eq!(read(&p, 64).unwrap().unwrap(), b"7\n");
        assert!(read(&p, 1).is_err());
    }
}
