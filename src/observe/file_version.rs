//! What tells one version of a file from the next without reading it.
//!
//! The inode alone does not: a file replaced by a rename frees its inode, and the next rename
//! often gets that number back (ext4 hands out the lowest free one), so a file written twice
//! between two looks shows the inode it had before. The change time does: the kernel sets it
//! whenever the inode is made or changed, and no `utime` can set it back.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileVersion {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileVersion {
    pub fn of(meta: &Metadata) -> Self {
        FileVersion {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two renames over a file bring its first inode back on ext4; the version still differs.
    #[test]
    fn a_replaced_file_is_a_new_version_even_when_its_inode_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report");
        let mut seen = Vec::new();
        for i in 0..6 {
            let tmp = dir.path().join(format!(".tmp{i}"));
            std::fs::write(&tmp, b"same size").unwrap();
            std::fs::rename(&tmp, &path).unwrap();
            seen.push(FileVersion::of(&std::fs::symlink_metadata(&path).unwrap()));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for pair in seen.windows(3) {
            assert_ne!(pair[0], pair[2], "{pair:?}");
        }
    }
}
