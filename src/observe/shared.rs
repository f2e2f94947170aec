//! The pass's reads of the shared directory: markers, acknowledgements, `dtctl resume`, the
//! capacity `dtctl add` found refused, and the job's progress, all on one thread within the shared directory's deadline.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::deadline::Deadline;
use crate::model::*;
use crate::observe::acks::{AckError, AckReader};
use crate::observe::markers::{MarkerScanner, Scan, ScanError};
use crate::observe::progress::{ProgressError, ProgressReader};
use crate::observe::strays::Strays;
use crate::protocol::capacity_refusals::{self, CapacityRefusal, CapacityRefusals};
use crate::protocol::markers::MarkerName;
use crate::untrusted;

/// What the pass reads from the shared directory, all on one thread with one deadline.
pub struct SharedReaders {
    /// With `workers.reports: unsigned` only: signed reports do not come through files.
    pub markers: Option<MarkerScanner>,
    /// With signed reports: files under a report's name, which are not read but shown.
    pub strays: Option<Strays>,
    pub acks: AckReader,
    pub resume: PathBuf,
    pub capacity_refusals: PathBuf,
    /// With `job.stall` configured only.
    pub progress: ProgressReader,
}

/// Why a read of the shared directory has no answer: the file system did not answer in time,
/// or the read itself failed.
#[derive(Debug, thiserror::Error)]
pub enum Unread<E> {
    /// The deadline's words: the same at every pass of one stall.
    #[error("{0}")]
    Stalled(String),
    #[error("{0}")]
    Failed(E),
}

pub struct SharedView {
    /// The workers' report files, as read (unsigned reports only): what is believed of them is
    /// decided after EC2 is.
    pub markers: Option<Result<Scan, Unread<ScanError>>>,
    /// Report names in the shared directory (signed reports): none is read.
    pub strays: Vec<MarkerName>,
    pub acks: Result<Acks, Unread<AckError>>,
    pub resume_requested: Option<Millis>,
    pub capacity_refusals: Vec<CapacityRefusal>,
    pub progress: Option<Result<Progress, Unread<ProgressError>>>,
}

impl SharedReaders {
    fn read(&mut self) -> SharedView {
        let progress = self.progress.read();
        let mut acks = self.acks.read().map_err(Unread::Failed);
        // The job's files refused for their owner are reported together (`Acks::refused`).
        let not_owned = self.progress.not_owned();
        if let (Ok(a), Some(why)) = (&mut acks, not_owned) {
            a.refused.push(why.to_string());
        }
        SharedView {
            markers: (self.markers.as_mut()).map(|m| m.scan().map_err(Unread::Failed)),
            strays: (self.strays.as_mut())
                .and_then(|s| s.names().ok())
                .unwrap_or_default(),
            acks,
            resume_requested: resume_requested(&self.resume),
            capacity_refusals: capacity_refusals(&self.capacity_refusals),
            progress: progress.map(|read| read.map_err(Unread::Failed)),
        }
    }
}

/// `dtctl resume` writes the time it was asked; anything unreadable is no request.
fn resume_requested(path: &std::path::Path) -> Option<Millis> {
    let bytes = untrusted::read(path, 32).ok()??;
    String::from_utf8_lossy(&bytes).trim().parse().ok()
}

/// What `dtctl add` wrote; anything unreadable is no refusal.
fn capacity_refusals(path: &std::path::Path) -> Vec<CapacityRefusal> {
    match untrusted::read(path, capacity_refusals::MAX_BYTES) {
        Ok(Some(bytes)) => CapacityRefusals::parse(&bytes).refusals,
        _ => Vec::new(),
    }
}

/// Reads everything within `fs`'s deadline; a stall makes markers, acknowledgements and the
/// progress file fail (the readers' lock may be held by the stuck thread, so that is not asked
/// of them).
pub async fn read(readers: &Arc<Mutex<SharedReaders>>, fs: &mut Deadline) -> SharedView {
    let readers = Arc::clone(readers);
    let read = move || {
        let mut r = readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        r.read()
    };
    match fs
        .run("reading markers and acknowledgements", read)
        .await
        .map_err(|e| e.to_string())
    {
        Ok(view) => view,
        // Not "no progress file": a stall already shown stays shown until the file is read.
        Err(stalled) => SharedView {
            progress: Some(Err(Unread::Stalled(stalled.clone()))),
            markers: Some(Err(Unread::Stalled(stalled.clone()))),
            strays: Vec::new(),
            acks: Err(Unread::Stalled(stalled)),
            resume_requested: None,
            capacity_refusals: Vec::new(),
        },
    }
}
