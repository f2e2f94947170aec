//! The pass's reads of the shared directory: markers, acknowledgements and `dtctl resume`, all
//! on one thread within the shared directory's deadline.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::deadline::Deadline;
use crate::model::*;
use crate::observe::acks::AckReader;
use crate::observe::markers::MarkerScanner;
use crate::untrusted;

/// What the pass reads from the shared directory, all on one thread with one deadline.
pub(super) struct SharedReaders {
    pub markers: MarkerScanner,
    pub acks: AckReader,
    pub resume: PathBuf,
}

pub(super) struct SharedView {
    pub markers: Result<Markers, String>,
    pub acks: Result<Acks, String>,
    pub resume_requested: Option<Millis>,
}

impl SharedReaders {
    fn read(&mut self) -> SharedView {
        SharedView {
            markers: self.markers.scan(),
            acks: self.acks.read(),
            resume_requested: resume_requested(&self.resume),
        }
    }
}

/// `dtctl resume` writes the time it was asked; anything unreadable is no request.
fn resume_requested(path: &std::path::Path) -> Option<Millis> {
    let bytes = untrusted::read(path, 32).ok()??;
    String::from_utf8_lossy(&bytes).trim().parse().ok()
}

/// Reads everything within `fs`'s deadline; a stall makes markers and acknowledgements fail.
pub(super) async fn read(readers: &Arc<Mutex<SharedReaders>>, fs: &mut Deadline) -> SharedView {
    let readers = Arc::clone(readers);
    let read = move || {
        let mut r = readers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        r.read()
    };
    match fs.run("reading markers and acknowledgements", read).await {
        Ok(view) => view,
        Err(stalled) => SharedView {
            markers: Err(stalled.clone()),
            acks: Err(stalled),
            resume_requested: None,
        },
    }
}
