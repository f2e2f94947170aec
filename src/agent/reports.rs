//! The agent's reports (`prepare_data_success_<ip>`, `health_<ip>`, …). With signed reports
//! (the default) each goes to `dtd` on the agent's own connection (`outbox`, `channel`) and a
//! copy stays on this worker's own disk, beside the agent's key, where only the agent can read
//! or change it: what an agent restarted said before is read back from there, never from the
//! shared directory. With `workers.reports: unsigned` (the 2018 protocol) each is a file in the
//! shared directory, read back only when this agent signed it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::outbox::Outbox;
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
    ip: IpAddr,
    signer: Signer,
    sink: Sink,
}

#[derive(Clone)]
enum Sink {
    /// The shared directory (unsigned reports).
    Files(PathBuf),
    /// `dtd`, through the outbox; `own` is the directory of this worker's copies.
    Dtd { own: PathBuf, outbox: Outbox },
}

impl Reports {
    /// Reports as files in `shared_dir` (`workers.reports: unsigned`).
    pub fn files(shared_dir: &Path, ip: IpAddr, signer: Signer) -> Reports {
        Reports {
            ip,
            signer,
            sink: Sink::Files(shared_dir.to_path_buf()),
        }
    }

    /// Reports sent to `dtd` through `outbox`, with copies kept in `own`.
    pub fn to_dtd(own: &Path, ip: IpAddr, signer: Signer, outbox: Outbox) -> Reports {
        Reports {
            ip,
            signer,
            sink: Sink::Dtd {
                own: own.to_path_buf(),
                outbox,
            },
        }
    }

    pub fn name(&self, kind: MarkerKind) -> MarkerName {
        MarkerName::new(kind, self.ip)
    }

    /// Where the report of `kind` is kept: the shared directory's file, or this worker's copy.
    pub fn path(&self, kind: MarkerKind) -> PathBuf {
        match &self.sink {
            Sink::Files(dir) => self.name(kind).path_in(dir),
            Sink::Dtd { own, .. } => self.name(kind).path_in(own),
        }
    }

    /// Makes `line` (a rendered report) the report of `kind`: signed and written in place of
    /// whatever is there, or kept and handed to the sender.
    pub fn write(&self, kind: MarkerKind, line: &[u8]) -> std::io::Result<()> {
        match &self.sink {
            Sink::Files(_) => {
                let signed = self.signer.sign(&self.name(kind), line);
                crate::fsutil::write_atomic(&self.path(kind), &signed)
            }
            Sink::Dtd { outbox, .. } if outbox.holds(kind, line) => Ok(()),
            Sink::Dtd { own, outbox } => {
                create_private_dir(own)?;
                crate::fsutil::write_atomic(&self.path(kind), line)?;
                outbox.put(kind, line);
                Ok(())
            }
        }
    }

    /// [`Reports::write`], tried again every `delay` until it is written (EFS, or the worker's
    /// disk, may be briefly unavailable; the master must eventually hear it); logged when the
    /// error changes.
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

    /// The report of `kind` as this agent last made it (an earlier run's, after a restart).
    /// Anything else under its name in the shared directory (another worker's file, an earlier
    /// instance's, a 2018 script's) is `Err`, with what it is.
    pub fn read_own(&self, kind: MarkerKind) -> Result<Option<Vec<u8>>, NotOwn> {
        let path = self.path(kind);
        let body = match crate::untrusted::read_prefix(&path, MAX_REPORT_BYTES) {
            Ok(Some(body)) => body,
            Ok(None) => return Ok(None),
            Err(error) => return Err(NotOwn::Unreadable { path, error }),
        };
        match &self.sink {
            Sink::Dtd { .. } => Ok(Some(body)),
            Sink::Files(_) if self.signer.signed_it(&self.name(kind), &body) => Ok(Some(body)),
            Sink::Files(_) => Err(NotOwn::NotSigned(path)),
        }
    }

    /// After a restart: what an earlier run of this agent said (its prepare-data verdict, a
    /// notice) is sent again, so a `dtd` that forgot it, or never heard it, does. The launcher's
    /// and the health check's reports are not: they are made anew at once.
    pub fn resume(&self) {
        let Sink::Dtd { outbox, .. } = &self.sink else {
            return;
        };
        for kind in [
            MarkerKind::Success,
            MarkerKind::Failed,
            MarkerKind::Interruption,
        ] {
            if let Ok(Some(line)) = self.read_own(kind) {
                outbox.put(kind, &line);
            }
        }
    }

    /// The report of `kind` is no more: not sent again, and not read back after a restart.
    pub fn remove(&self, kind: MarkerKind) {
        if let Sink::Dtd { outbox, .. } = &self.sink {
            outbox.remove(kind);
        }
        let path = self.path(kind);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "removed stale report"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), "cannot remove a report: {e}"),
        }
    }
}

/// The copies' directory: the agent's user's alone, like its key's.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
