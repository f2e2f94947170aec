//! The alerts still to send, kept in the state directory so that a restarted `dtd` sends them.
//! Delivery is at least once: an event delivered just before `dtd` stopped, and not yet struck
//! from the file, is sent again after the restart, with the same `Idempotency-Key` (the event's
//! id, [`crate::model::Event::id`]) for the receiver to deduplicate by.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::WebhookUrl;
use crate::digest::Sha256;
use crate::model::Event;

/// The file's name in the state directory.
pub const FILE: &str = "alerts_outbox.json";

/// A thousand events a webhook (`outbox::CAPACITY`) of a few KiB at most; more is not dtd's.
const MAX_BYTES: u64 = 64 << 20;

/// Each webhook's events not yet delivered or given up, in the order they are sent, by [`key`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub webhooks: BTreeMap<String, Vec<Event>>,
}

/// Why the saved outbox cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path} {error}")]
    Unreadable {
        path: PathBuf,
        error: crate::untrusted::ReadError,
    },
    #[error("{path} is not dtd's alert outbox: {error}")]
    NotAnOutbox {
        path: PathBuf,
        error: serde_json::Error,
    },
}

/// Names a webhook in the file without its URL, whose path is a secret: the first 16 hex digits
/// of the SHA-256 of the whole URL. A webhook whose URL changed starts with nothing waiting.
pub fn key(url: &WebhookUrl) -> String {
    let digest = Sha256::of(url.target().to_string().as_bytes()).to_string();
    digest[..16].to_string()
}

impl Saved {
    pub fn render(&self) -> Vec<u8> {
        // Events and strings: serializing cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// What the file holds; nothing waits when there is no file. Read only when dtd's own user
    /// (`owner`) owns it, as it owns the state it sits beside.
    pub fn load(path: &Path, owner: u32) -> Result<Saved, LoadError> {
        let path = path.to_path_buf();
        match crate::untrusted::read_owned(&path, MAX_BYTES, Some(owner)) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .map_err(|error| LoadError::NotAnOutbox { path, error }),
            Ok(None) => Ok(Saved::default()),
            Err(error) => Err(LoadError::Unreadable { path, error }),
        }
    }

    pub fn len(&self) -> usize {
        self.webhooks.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;

    #[test]
    fn a_key_names_the_whole_url_and_shows_none_of_it() {
        let url = |u: &str| WebhookUrl::parse(u).unwrap();
        let a = key(&url("https://hooks.slack.com/services/T0/B0/SeCrEt1"));
        let b = key(&url("https://hooks.slack.com/services/T0/B0/SeCrEt2"));
        assert_eq!(a.len(), 16);
        assert_ne!(a, b, "another token is another webhook");
        assert!(!a.contains("SeCrEt"));
    }

    #[test]
    fn the_file_round_trips_and_is_read_only_from_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let me = crate::fsutil::own_uid();
        assert!(Saved::load(&path, me).unwrap().is_empty(), "no file");
        let mut saved = Saved::default();
        let event = Event::new(7, EventKind::Joined, "joined".into());
        saved
            .webhooks
            .insert("0123456789abcdef".into(), vec![event]);
        std::fs::write(&path, saved.render()).unwrap();
        assert_eq!(Saved::load(&path, me).unwrap(), saved);
        let refused = Saved::load(&path, me + 1).unwrap_err().to_string();
        assert!(refused.contains("owned by uid"), "{refused}");
        std::fs::write(&path, b"{\"webhooks\": 3}").unwrap();
        assert!(Saved::load(&path, me).is_err());
    }
}
