//! The agent's reports in the shared directory (`prepare_data_success_<ip>`, `health_<ip>`, …):
//! each written whole (temp file and rename) and signed, and each read back only when this
//! agent signed it: a report someone else left under this worker's name is not its own.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::signer::Signer;
use crate::protocol::markers::{MarkerKind, MarkerName, MAX_REPORT_BYTES};

/// Why what is under this agent's report's name is not taken for its own.
#[derive(Debug, thiserror::Error)]
pub enum NotOwn {
    #[error("cannot read {path}: {error}")]
    Unreadable {
        path: PathBuf,
        error: crate::untrusted::ReadError,
    },
    #[error("{0} is not signed by this agent")]
    NotSigned(PathBuf),
}

#[derive(Clone)]
pub struct Reports {
    dir: PathBuf,
    ip: IpAddr,
    signer: Signer,
}

impl Reports {
    pub fn new(dir: &Path, ip: IpAddr, signer: Signer) -> Reports {
        Reports {
            dir: dir.to_path_buf(),
            ip,
            signer,
        }
    }

    pub fn name(&self, kind: MarkerKind) -> MarkerName {
        MarkerName::new(kind, self.ip)
    }

    pub fn path(&self, kind: MarkerKind) -> PathBuf {
        self.name(kind).path_in(&self.dir)
    }

    /// Signs `line` (a rendered report) and writes it in place of whatever is there.
    pub fn write(&self, kind: MarkerKind, line: &[u8]) -> std::io::Result<()> {
        let signed = self.signer.sign(&self.name(kind), line);
        crate::fsutil::write_atomic(&self.path(kind), &signed)
    }

    /// [`Reports::write`], tried again every `delay` until it is written (EFS may be briefly
    /// unavailable; the master must eventually see it); logged when the error changes.
    pub async fn write_retrying(&self, kind: MarkerKind, line: &[u8], delay: Duration) {
        let mut last: Option<std::io::ErrorKind> = None;
        while let Err(e) = self.write(kind, line) {
            if last != Some(e.kind()) {
                let path = self.path(kind);
                tracing::error!(path = %path.display(), "cannot write the report, retrying: {e}");
                last = Some(e.kind());
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// The report of `kind` when this agent signed it. Anything else there (another worker's
    /// file under this name, an earlier instance's, a 2018 script's) is `Err`, with what it is.
    pub fn read_own(&self, kind: MarkerKind) -> Result<Option<Vec<u8>>, NotOwn> {
        let path = self.path(kind);
        let body = match crate::untrusted::read_prefix(&path, MAX_REPORT_BYTES) {
            Ok(Some(body)) => body,
            Ok(None) => return Ok(None),
            Err(error) => return Err(NotOwn::Unreadable { path, error }),
        };
        match self.signer.signed_it(&self.name(kind), &body) {
            true => Ok(Some(body)),
            false => Err(NotOwn::NotSigned(path)),
        }
    }

    pub fn remove(&self, kind: MarkerKind) {
        let path = self.path(kind);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "removed stale marker"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), "cannot remove a report: {e}"),
        }
    }
}
