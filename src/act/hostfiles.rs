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

/// Written after the host files, so a job that reads it first never acknowledges a generation
/// newer than the host file it then reads.
pub fn write_generation(path: &Path, generation: u64) -> Result<bool, String> {
    write_if_changed(path, protocol::generation::render(generation).as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
