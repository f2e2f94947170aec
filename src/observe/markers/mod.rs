//! The workers' reports in the shared directory (`prepare_data_success_<ip>`, `health_<ip>`, …):
//! one directory read per pass, each file read only when it is new or replaced (a new
//! [`FileVersion`]: one `stat` each), so a pass over a thousand workers reads only the reports
//! that changed.
//!
//! A name whose IP part does not parse is ignored with a warning and never used to build a path
//! or a command. What a report is believed for is [`book`]'s: here a file is only read.

pub mod book;
pub mod read;

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file_version::FileVersion;
use crate::model::Millis;
use crate::protocol::markers::{MarkerName, NameError, PREPARE_DATA_PREFIX};
pub use read::{Body, BodyError, LauncherBody, Read};

/// Every report file in the directory, as last read.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub files: BTreeMap<MarkerName, Arc<Read>>,
}

/// Why the directory could not be listed: the scan is not complete.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("cannot read {}: {why}", dir.display())]
    Open { dir: PathBuf, why: io::Error },
    #[error("listing {}: {why}", dir.display())]
    List { dir: PathBuf, why: io::Error },
}

pub struct MarkerScanner {
    dir: PathBuf,
    /// Names warned about, so a bad file is reported once, not every pass; forgotten once the
    /// file is gone.
    warned: HashSet<OsString>,
    /// Each report as read, by name: read again only when its version changes.
    files: BTreeMap<MarkerName, Arc<Read>>,
}

impl MarkerScanner {
    pub fn new(dir: &Path) -> Self {
        MarkerScanner {
            dir: dir.to_path_buf(),
            warned: HashSet::new(),
            files: BTreeMap::new(),
        }
    }

    pub fn scan(&mut self) -> Result<Scan, ScanError> {
        let entries = fs::read_dir(&self.dir).map_err(|why| ScanError::Open {
            dir: self.dir.clone(),
            why,
        })?;
        let mut files = BTreeMap::new();
        let mut names = HashSet::new();
        for entry in entries {
            let entry = entry.map_err(|why| ScanError::List {
                dir: self.dir.clone(),
                why,
            })?;
            names.insert(entry.file_name());
            if let Some((name, read)) = self.consider(&entry) {
                files.insert(name, read);
            }
        }
        self.warned.retain(|n| names.contains(n));
        self.files.clone_from(&files);
        Ok(Scan { files })
    }

    fn consider(&mut self, entry: &fs::DirEntry) -> Option<(MarkerName, Arc<Read>)> {
        let file = entry.file_name();
        let Some(text) = file.to_str() else {
            if file.to_string_lossy().starts_with(PREPARE_DATA_PREFIX) {
                self.warn(&file, "file name is not UTF-8");
            }
            return None;
        };
        let name = match MarkerName::parse(text) {
            Ok(name) => name,
            Err(NameError::NotAMarker) => return None,
            Err(e @ NameError::NotAnIp) => {
                self.warn(&file, &e.to_string());
                return None;
            }
        };
        // Not followed: a link is no report.
        let meta = entry.metadata().ok()?;
        if !meta.file_type().is_file() {
            self.warn(&file, "not a regular file");
            return None;
        }
        let version = FileVersion::of(&meta);
        let known = self.files.get(&name);
        if let Some(read) = known.filter(|r| r.version == Some(version)) {
            return Some((name, Arc::clone(read)));
        }
        // A success marker is timed by its first version: a replacement is not a new readiness.
        let modified = known.and_then(|k| k.modified).or_else(|| modified(&meta));
        let read = read::read(&entry.path(), &name, version, modified);
        if let Err(why) = &read.body {
            self.warn(&file, &why.to_string());
        }
        Some((name, Arc::new(read)))
    }

    fn warn(&mut self, name: &OsString, why: &str) {
        if self.warned.insert(name.clone()) {
            tracing::warn!(file = %name.to_string_lossy(), dir = %self.dir.display(), "ignoring marker: {why}");
        }
    }
}

/// The entry's own modification time (a symbolic link is never followed: it is refused above).
fn modified(meta: &fs::Metadata) -> Option<Millis> {
    let modified = meta.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(since.as_millis() as Millis)
}

#[cfg(test)]
mod tests;
