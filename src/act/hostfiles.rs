//! Host files in every configured format, rewritten atomically and only when their content changes.

use std::path::{Path, PathBuf};

use crate::config::HostfileSpec;
use crate::fsutil::write_if_changed;
use crate::protocol;
use crate::protocol::host_files::{render, Host};

/// Which file of the membership could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HostfileError {
    #[error("writing host file {}: {why}", path.display())]
    HostFile { path: PathBuf, why: std::io::Error },
    /// The launch plan or the generation file.
    #[error("writing {}: {why}", path.display())]
    File { path: PathBuf, why: std::io::Error },
    /// The shared directory did not answer in time.
    #[error(transparent)]
    Stalled(crate::deadline::DeadlineError),
}

/// Returns whether any file changed.
pub fn ensure(specs: &[HostfileSpec], hosts: &[Host]) -> Result<bool, HostfileError> {
    let mut changed = false;
    for spec in specs {
        let content = match &spec.template {
            Some(template) => template.render(hosts),
            None => render(spec.format, hosts),
        };
        changed |= write_if_changed(&spec.path, content.as_bytes()).map_err(|why| {
            let path = spec.path.clone();
            HostfileError::HostFile { path, why }
        })?;
    }
    Ok(changed)
}

/// The launchers' view of the same membership, in the same order (`job.launcher`).
pub fn write_launch_plan(
    path: &Path,
    generation: u64,
    hosts: &[Host],
) -> Result<bool, HostfileError> {
    let plan = protocol::launch_plan::LaunchPlan {
        generation,
        hosts: hosts.iter().map(|h| h.ip).collect(),
    };
    write_if_changed(path, &plan.render()).map_err(|why| file_error(path, why))
}

/// Written after the host files, so a job that reads it first never acknowledges a generation
/// newer than the host file it then reads.
pub fn write_generation(path: &Path, generation: u64) -> Result<bool, HostfileError> {
    write_if_changed(path, protocol::generation::render(generation).as_bytes())
        .map_err(|why| file_error(path, why))
}

fn file_error(path: &Path, why: std::io::Error) -> HostfileError {
    let path = path.to_path_buf();
    HostfileError::File { path, why }
}
