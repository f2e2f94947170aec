//! The failures the passes meet, per source read or step taken: each logged when it begins or
//! changes and journaled when it begins, its recovery logged and journaled once, never at every
//! pass. This pass's failures go to the status report.

use std::collections::BTreeMap;

use crate::model::*;

#[derive(Debug, Default)]
pub struct Ledger {
    failing: BTreeMap<Part, String>,
    /// This pass's failures, as the status report lists them.
    errors: Vec<String>,
}

impl Ledger {
    pub fn begin_pass(&mut self) {
        self.errors.clear();
    }

    /// Records a source's or step's result (`None`: it worked); returns the event kind when it
    /// began failing or recovered.
    pub fn note(&mut self, part: impl Into<Part>, err: Option<String>) -> Option<EventKind> {
        let part = part.into();
        let Some(e) = err else {
            return self.failing.remove(&part).map(|_| {
                tracing::info!("{part}: recovered");
                EventKind::SourceRecovered
            });
        };
        self.errors.push(format!("{part}: {e}"));
        let first = !self.failing.contains_key(&part);
        if self.failing.get(&part) != Some(&e) {
            tracing::warn!("{part}: {e}");
            self.failing.insert(part, e);
        }
        first.then_some(EventKind::SourceFailed)
    }

    /// The failure a part is in, if any.
    pub fn failing(&self, part: impl Into<Part>) -> Option<&str> {
        self.failing.get(&part.into()).map(String::as_str)
    }

    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Journals a source of the snapshot failing or recovering, once per change.
    pub fn sources(&mut self, snap: &Snapshot, now: Millis) -> Vec<Event> {
        let sources = [
            (Source::Instances, snap.instances.as_ref().err()),
            (Source::Markers, snap.markers.as_ref().err()),
            (Source::Acks, snap.acks.as_ref().err()),
        ];
        let mut events = Vec::new();
        for (source, err) in sources {
            if let Some(kind) = self.note(source, err.map(ToString::to_string)) {
                let message = match err {
                    Some(e) => format!("{source} could not be read completely: {e}; holding"),
                    None => format!("{source} readable again"),
                };
                events.push(Event::new(now, kind, message));
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_news_once_and_its_recovery_once() {
        let mut l = Ledger::default();
        let fail = || Some("timed out".to_string());
        assert_eq!(
            l.note(Step::HostFiles, fail()),
            Some(EventKind::SourceFailed)
        );
        assert_eq!(l.note(Step::HostFiles, fail()), None);
        assert_eq!(l.failing(Step::HostFiles), Some("timed out"));
        assert_eq!(
            l.errors(),
            ["host files: timed out", "host files: timed out"]
        );
        l.begin_pass();
        assert_eq!(
            l.note(Step::HostFiles, None),
            Some(EventKind::SourceRecovered)
        );
        assert_eq!(l.note(Step::HostFiles, None), None);
        assert!(l.errors().is_empty() && l.failing(Step::HostFiles).is_none());
    }
}
