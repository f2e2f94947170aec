//! Crash-safe file writes: a reader sees the old content or the new, never a torn file.
//!
//! The files written here live in the shared directory, where a worker may have put a FIFO, a
//! symbolic link or a directory in the way: no open here blocks or follows a final link.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::untrusted::{self, libc_flags};

/// Writes to a temp file in the same directory, fsyncs it, renames it over `path`, fsyncs the dir.
/// The rename replaces whatever was at `path` (a FIFO, a link) without opening it.
pub fn write_atomic(path: &Path, content: &[u8]) -> io::Result<()> {
    write_atomic_owned(path, content, None)
}

/// [`write_atomic`], the new file given to `owner` (a uid) before it takes the name, so that no
/// reader ever sees it owned by anyone else (`dtctl ack` run as root writes the job's file).
pub fn write_atomic_owned(path: &Path, content: &[u8], owner: Option<u32>) -> io::Result<()> {
    let (dir, tmp, mut f) = temp_beside(path)?;
    let result = (|| {
        f.write_all(content)?;
        if let Some(uid) = owner {
            std::os::unix::fs::fchown(&f, Some(uid), None)?;
        }
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Puts `content` at `path` only if nothing is there, and never partly written: written whole
/// under a temp name with `mode`, then hard-linked to `path`. `AlreadyExists` when `path` was
/// taken first (by another writer racing for it).
pub fn create_whole(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (dir, tmp, mut f) = temp_beside(path)?;
    let result = (|| {
        // Before the content: the temp name never holds it readable by others.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(content)?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)?;
        sync_dir(dir)
    })();
    let _ = fs::remove_file(&tmp);
    result
}

/// `path`'s directory, and a new temp file in it named after `path` (see [`create_temp`]).
fn temp_beside(path: &Path) -> io::Result<(&Path, std::path::PathBuf, fs::File)> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let (tmp, f) = create_temp(dir, &name.to_string_lossy())?;
    Ok((dir, tmp, f))
}

/// Attempts at a temp name before giving up: one taken by chance is a 1-in-2^64 event, so only
/// someone planting names at random could take more than one.
const TEMP_TRIES: usize = 16;

/// A new file at an unpredictable name beside the target (`.NAME.tmp.<16 random hex digits>`),
/// created exclusively: whatever someone planted at a name they could guess (a directory, a
/// FIFO, a link) cannot stand in the way or be written through.
/// 16 random hex digits: a name no one can guess before it exists.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    // The system's random source does not fail on Linux; zeros would still be a fresh name.
    let _ = aws_lc_rs::rand::SecureRandom::fill(&aws_lc_rs::rand::SystemRandom::new(), &mut bytes);
    format!("{:016x}", u64::from_ne_bytes(bytes))
}

fn create_temp(dir: &Path, name: &str) -> io::Result<(std::path::PathBuf, fs::File)> {
    let rng = aws_lc_rs::rand::SystemRandom::new();
    for _ in 0..TEMP_TRIES {
        let mut bytes = [0u8; 8];
        aws_lc_rs::rand::SecureRandom::fill(&rng, &mut bytes)
            .map_err(|_| io::Error::other("no random bytes for a temp name"))?;
        let tmp = dir.join(format!(".{name}.tmp.{:016x}", u64::from_ne_bytes(bytes)));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc_flags::NOFOLLOW)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{TEMP_TRIES} random temp names in {} were all taken",
            dir.display()
        ),
    ))
}

/// The directory `path` is in (`.` for a bare file name), where its renames happen.
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags::DIRECTORY | libc_flags::NONBLOCK)
        .open(dir)?
        .sync_all()
}

/// Writes only when the content differs, or the file is not dtd's own; returns whether it wrote.
/// A file someone else owns (a worker created it first, and could rewrite it in place later) is
/// replaced by dtd's own even when it already holds the right content. Nothing longer than the
/// new content is read, and anything that is not a regular file is replaced unread.
pub fn write_if_changed(path: &Path, content: &[u8]) -> io::Result<bool> {
    let want = content.len() as u64;
    match untrusted::open(path) {
        Ok(Some((file, meta))) if meta.len() == want && meta.uid() == own_uid() => {
            if untrusted::read_at_most(file, want + 1)? == content {
                return Ok(false);
            }
        }
        Ok(Some((_, meta))) if meta.uid() != own_uid() => {
            tracing::warn!(file = %path.display(), uid = meta.uid(), "owned by another user: replaced by dtd's own");
        }
        Ok(_) => {}
        Err(untrusted::ReadError::Io(e)) => return Err(e),
        // Logged once it is gone: a directory that cannot be replaced fails the write instead.
        Err(refused) => {
            tracing::warn!(file = %path.display(), "{refused}: replaced by the new content")
        }
    }
    write_atomic(path, content).map(|_| true)
}

/// The user dtd runs as: the owner of every file it writes.
pub fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Appends lines and fsyncs, for the journal: one `write` per batch so lines are never interleaved.
pub fn append_synced(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc_flags::NONBLOCK | libc_flags::NOFOLLOW)
        .open(path)
        .map_err(|e| refused_link(e, path))?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    f.write_all(content)?;
    f.sync_data()
}

fn refused_link(e: io::Error, path: &Path) -> io::Error {
    match e.raw_os_error() {
        Some(libc_flags::ELOOP) => io::Error::other(format!(
            "{} is a symbolic link; not followed",
            path.display()
        )),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_on_change_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("host_worker");
        assert!(write_if_changed(&p, b"a\n").unwrap());
        assert!(!write_if_changed(&p, b"a\n").unwrap());
        assert!(write_if_changed(&p, b"b\n").unwrap());
        assert_eq!(fs::read_to_string(&p).unwrap(), "b\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_fifo_or_link_in_the_way_is_replaced_unread() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("host_worker");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(write_if_changed(&fifo, b"10.0.0.5\n").unwrap());
        assert_eq!(fs::read(&fifo).unwrap(), b"10.0.0.5\n");
        let target = dir.path().join("elsewhere");
        fs::write(&target, "keep").unwrap();
        let link = dir.path().join("generation");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_if_changed(&link, b"3\n").unwrap());
        assert!(!fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn a_file_of_another_owner_is_replaced_by_dtds_own_even_with_the_right_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("generation");
        fs::write(&p, "3\n").unwrap();
        // What a worker's user code does: create the file first, and keep it.
        let other = own_uid().wrapping_add(1000);
        let chowned = nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(other)), None);
        if chowned.is_err() {
            // Only root can give a file away; the tests run as root in CI.
            assert_ne!(own_uid(), 0, "root could not chown: {chowned:?}");
            return;
        }
        assert!(write_if_changed(&p, b"3\n").unwrap());
        assert_eq!(fs::metadata(&p).unwrap().uid(), own_uid());
        assert!(!write_if_changed(&p, b"3\n").unwrap());
        // Shrinking (a worker leaving) is a plain rewrite, not a refusal.
        assert!(write_if_changed(&p, b"\n").unwrap());
    }

    #[test]
    fn names_planted_where_a_temp_file_could_be_guessed_do_not_block_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("generation");
        // What a worker who read dtd's pid (status.json) could plant: the names of earlier
        // releases, a directory and a FIFO.
        let pid = std::process::id();
        fs::create_dir(dir.path().join(format!(".generation.tmp.{pid}"))).unwrap();
        let fifo = dir.path().join(".generation.tmp");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        write_atomic(&p, b"4\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"4\n");
        // Left alone, and nothing else left behind.
        let mut left: Vec<String> = (fs::read_dir(dir.path()).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".generation.tmp",
                &format!(".generation.tmp.{pid}"),
                "generation"
            ]
        );
    }

    #[test]
    fn create_whole_takes_a_free_name_with_its_mode_and_never_a_taken_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        create_whole(&path, b"first", 0o600).unwrap();
        let e = create_whole(&path, b"second", 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"first");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp name left"
        );
    }

    #[test]
    fn temp_names_are_new_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let names: std::collections::BTreeSet<_> = (0..50)
            .map(|_| {
                let (tmp, _) = create_temp(dir.path(), "host_worker").unwrap();
                tmp
            })
            .collect();
        assert_eq!(names.len(), 50);
        assert!(names.iter().all(|n| {
            let n = n.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(".host_worker.tmp.") && n.len() == ".host_worker.tmp.".len() + 16
        }));
    }

    #[test]
    fn appending_to_a_fifo_or_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("events.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(append_synced(&fifo, b"x\n").is_err());
        let link = dir.path().join("other.jsonl");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let e = append_synced(&link, b"x\n").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }
}
