//! Files in the shared directory under a report's name (`health_10.0.1.5`, …) while the reports
//! come on the agents' connections (signed reports): none is read, since any worker can write,
//! delete, put back or squat such a name, but each is shown, so that a person sees someone on a
//! worker is at it. Only the names are listed, and only when the directory changed. A name
//! gone is still shown for [`SHOWN`] after it was last seen, so that one written, deleted and
//! written again is one attempt, journaled once.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::file_version::FileVersion;
use crate::protocol::markers::MarkerName;

/// How long a name is shown after it was last seen (as `observe::agents` keeps a refusal).
pub const SHOWN: Duration = Duration::from_secs(300);

/// How many names no longer in the directory are remembered, the most recently seen kept: a
/// worker planting and deleting names by the thousand must not grow dtd (as `observe::agents`
/// caps its refusals).
pub const GONE_KEPT: usize = 1024;

pub struct Strays {
    dir: PathBuf,
    /// The directory's version when last listed, and the names then.
    seen: Option<(FileVersion, Vec<MarkerName>)>,
    /// When each name was last seen.
    last: BTreeMap<MarkerName, Instant>,
}

impl Strays {
    pub fn new(dir: &Path) -> Strays {
        Strays {
            dir: dir.to_path_buf(),
            seen: None,
            last: BTreeMap::new(),
        }
    }

    /// The report names in the directory (files, directories, anything), listed again only
    /// when the directory changed since the last call, and those seen within [`SHOWN`].
    pub fn names(&mut self) -> io::Result<Vec<MarkerName>> {
        let now = Instant::now();
        let present = self.listed()?;
        for name in &present {
            self.last.insert(*name, now);
        }
        self.last.retain(|_, at| now.duration_since(*at) < SHOWN);
        self.forget_beyond(&present);
        Ok(self.last.keys().copied().collect())
    }

    /// Keeps the [`GONE_KEPT`] most recently seen of the names gone from the directory.
    fn forget_beyond(&mut self, present: &[MarkerName]) {
        if self.last.len() <= present.len() + GONE_KEPT {
            return;
        }
        let mut gone: Vec<(Instant, MarkerName)> = (self.last.iter())
            .filter(|(name, _)| present.binary_search(name).is_err())
            .map(|(name, at)| (*at, *name))
            .collect();
        gone.sort_unstable();
        let excess = gone.len().saturating_sub(GONE_KEPT);
        for (_, name) in &gone[..excess] {
            self.last.remove(name);
        }
    }

    fn listed(&mut self) -> io::Result<Vec<MarkerName>> {
        let version = FileVersion::of(&fs::metadata(&self.dir)?);
        if let Some((seen, names)) = &self.seen {
            if *seen == version {
                return Ok(names.clone());
            }
        }
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let parsed = entry.file_name().to_str().map(MarkerName::parse);
            if let Some(Ok(name)) = parsed {
                names.push(name);
            }
        }
        names.sort();
        self.seen = Some((version, names.clone()));
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::markers::MarkerKind;

    #[test]
    fn report_names_are_found_whatever_they_are_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("health_10.0.1.5"), "{}").unwrap();
        fs::create_dir(dir.path().join("launcher_10.0.1.6")).unwrap();
        fs::write(dir.path().join("host_worker"), "").unwrap();
        fs::write(dir.path().join("health_nope"), "").unwrap();
        let mut s = Strays::new(dir.path());
        let names = s.names().unwrap();
        assert_eq!(
            names,
            vec![
                MarkerName::new(MarkerKind::Health, "10.0.1.5".parse().unwrap()),
                MarkerName::new(MarkerKind::Launcher, "10.0.1.6".parse().unwrap()),
            ]
        );
        // Gone, and still shown a while: one attempt, however often the name comes and goes.
        fs::remove_file(dir.path().join("health_10.0.1.5")).unwrap();
        assert_eq!(s.names().unwrap().len(), 2);
        assert_eq!(s.listed().unwrap().len(), 1);
    }

    #[test]
    fn names_gone_by_the_thousand_are_forgotten_beyond_the_cap_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Strays::new(dir.path());
        let path = |k: usize| {
            dir.path()
                .join(format!("health_10.1.{}.{}", k / 250, k % 250))
        };
        for round in 0..3 {
            for k in round * 1000..(round + 1) * 1000 {
                fs::write(path(k), "").unwrap();
            }
            s.names().unwrap();
            assert!(s.last.len() <= 1000 + GONE_KEPT, "{}", s.last.len());
            // The directory is listed again when its modification time moves: past the clock's
            // tick.
            std::thread::sleep(Duration::from_millis(20));
            for k in round * 1000..(round + 1) * 1000 {
                fs::remove_file(path(k)).unwrap();
            }
        }
        let shown = s.names().unwrap();
        assert_eq!(shown.len(), GONE_KEPT);
        // The newest round whole, then the most recent of the one before.
        let newest = MarkerName::new(MarkerKind::Health, "10.1.11.249".parse().unwrap());
        assert!(shown.contains(&newest));
        let oldest = MarkerName::new(MarkerKind::Health, "10.1.0.0".parse().unwrap());
        assert!(!shown.contains(&oldest));
    }
}
