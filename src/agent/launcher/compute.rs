//! The job's own measure of this node's share of a step. Each training process that times its
//! work with `dt_torch`'s `session.compute()` writes `{"step": N, "compute_s": x}` (the median of
//! its last steps) to a file of its own in `DT_STEP_TIMES`: a directory the agent makes for each
//! run, at a name no one can guess, owned by the job's user. At every heartbeat the agent reads it
//! and reports the slowest process's figure: a node is as fast as its slowest GPU.
//!
//! What is there was written by the job (untrusted): bounded files, no links followed, parsed as
//! numbers. A job can only make its own node look slow or fast: the report is this node's.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::protocol::launcher::StepCompute;

/// The variable that names the directory to the job.
pub const VAR: &str = "DT_STEP_TIMES";

/// A process's file is one short JSON line.
const MAX_FILE_BYTES: u64 = 256;

/// Files read at most per heartbeat: one per training process of the node.
const MAX_FILES: usize = 64;

/// A file not replaced for this long is a process that stopped measuring (exited, restarted).
const FRESH: Duration = Duration::from_secs(30);

/// The directory of one run, removed with what is in it when the run ends.
pub struct StepTimes {
    dir: PathBuf,
}

#[derive(Deserialize)]
struct Line {
    step: u64,
    compute_s: f64,
}

impl StepTimes {
    /// Makes the directory under the system's temporary directory, for `uid` alone.
    pub fn create(uid: u32, gid: u32) -> std::io::Result<StepTimes> {
        use std::os::unix::fs::DirBuilderExt;
        let name = format!("dt-step-times-{}", crate::fsutil::random_hex());
        let dir = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let owner = (uid != crate::fsutil::own_uid()).then_some(uid);
        if let Some(uid) = owner {
            let (uid, gid) = (
                nix::unistd::Uid::from_raw(uid),
                nix::unistd::Gid::from_raw(gid),
            );
            if let Err(e) = nix::unistd::chown(&dir, Some(uid), Some(gid)) {
                let _ = std::fs::remove_dir(&dir);
                return Err(e.into());
            }
        }
        Ok(StepTimes { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The slowest fresh process's compute time, at the newest step any of them names.
    pub fn read(&self) -> Option<StepCompute> {
        let entries = std::fs::read_dir(&self.dir).ok()?;
        let lines = entries
            .take(MAX_FILES)
            .filter_map(|e| read_line(&e.ok()?.path()));
        let mut node: Option<StepCompute> = None;
        for l in lines {
            let micros = (l.compute_s * 1e6) as u64;
            let n = node.get_or_insert(StepCompute { step: 0, micros: 0 });
            n.step = n.step.max(l.step);
            n.micros = n.micros.max(micros);
        }
        node
    }
}

fn read_line(path: &Path) -> Option<Line> {
    let (file, meta) = crate::untrusted::open(path).ok()??;
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok());
    if age.is_some_and(|a| a > FRESH) {
        return None;
    }
    let body = crate::untrusted::read_opened(file, &meta, MAX_FILE_BYTES).ok()?;
    let l: Line = serde_json::from_slice(&body).ok()?;
    // Not a time a step can take (negative, not a number, over a day): not believed.
    (l.compute_s.is_finite() && l.compute_s > 0.0 && l.compute_s < 86_400.0).then_some(l)
}

impl Drop for StepTimes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_fresh_process_is_the_nodes_figure_and_nonsense_is_ignored() {
        let t = StepTimes::create(crate::fsutil::own_uid(), 0).unwrap();
        assert_eq!(t.read(), None);
        let w = |name: &str, body: &str| std::fs::write(t.dir().join(name), body).unwrap();
        w("1", r#"{"step": 40, "compute_s": 0.10}"#);
        w("2", r#"{"step": 41, "compute_s": 0.25}"#);
        w("3", r#"{"step": 99, "compute_s": -1}"#);
        w("4", "not json");
        w(
            "5",
            &format!(
                r#"{{"step": 1, "compute_s": 0.1, "pad": "{}"}}"#,
                "x".repeat(300)
            ),
        );
        std::os::unix::fs::symlink("/etc/passwd", t.dir().join("6")).unwrap();
        let golden = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/protocol/step_times.json"
        );
        std::fs::copy(golden, t.dir().join("7")).unwrap();
        assert_eq!(
            t.read(),
            Some(StepCompute {
                step: 41,
                micros: 250_000
            })
        );
        let dir = t.dir().to_path_buf();
        drop(t);
        assert!(!dir.exists());
    }
}
