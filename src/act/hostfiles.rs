//! Host files in every configured format, rewritten atomically and only when their content changes.

use std::path::Path;

use crate::config::HostfileSpec;
use crate::fsutil::write_if_changed;
use crate::hostfile::{render, Host};
use crate::protocol;

/// Returns whether any file changed.
pub fn ensure(specs: &[HostfileSpec], hosts: &[Host]) -> Result<bool, String> {
    let mut changed = false;
    for spec in specs {
        let content = match &spec.template {
            Some(template) => template.render(hosts),
            None => render(spec.format, hosts),
        };
        changed |= write_if_changed(&spec.path, content.as_bytes())
            .map_err(|e| format!("writing host file {}: {e}", spec.path.display()))?;
    }
    Ok(changed)
}

/// The launchers' view of the same membership, in the same order (`job.launcher`).
pub fn write_launch_plan(path: &Path, generation: u64, hosts: &[Host]) -> Result<bool, String> {
    let plan = protocol::launch_plan::LaunchPlan {
        generation,
        hosts: hosts.iter().map(|h| h.ip).collect(),
    };
    write_if_changed(path, &plan.render()).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Written after the host files, so a job that reads it first never acknowledges a generation
/// newer than the host file it then reads.
pub fn write_generation(path: &Path, generation: u64) -> Result<bool, String> {
    write_if_changed(path, protocol::generation::render(generation).as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
