//! `capacity_refusals` in dtd's state directory: the capacity choices EC2 refused to
//! `dtctl add`, so that `dtd` starts their cool-down and journals them as if its own launch had
//! been refused. One JSON document, replaced atomically by `dtctl`:
//! `{"refusals":[{"at":1764201600123,"choice":"p5.48xlarge","code":"InsufficientInstanceCapacity","message":"..."}]}`.
//!
//! Only `dtctl` run as dtd's user (or root) can write the state directory (dtd refuses one that
//! is not its own 0700), and dtd uses only names of choices its config has.

use serde::{Deserialize, Serialize};

pub const FILE: &str = "capacity_refusals";

/// Far more than [`KEPT`] refusals with EC2's messages cut to [`MAX_MESSAGE`].
pub const MAX_BYTES: u64 = 64 * 1024;

/// The newest refusals kept: older ones have long been read.
const KEPT: usize = 32;

/// EC2's messages are a sentence; a longer one is cut.
const MAX_MESSAGE: usize = 300;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityRefusals {
    pub refusals: Vec<CapacityRefusal>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityRefusal {
    /// When EC2 refused (dtctl's clock, milliseconds since the epoch).
    pub at: u64,
    /// The choice's name (what `Choice::name` in `model` gives).
    pub choice: String,
    pub code: String,
    pub message: String,
}

impl CapacityRefusals {
    /// What the file holds; anything unreadable is no refusal.
    pub fn parse(bytes: &[u8]) -> Self {
        serde_json::from_slice(bytes).unwrap_or_default()
    }

    /// `more` added after the ones held, the newest [`KEPT`] kept.
    pub fn with(mut self, more: impl IntoIterator<Item = CapacityRefusal>) -> Self {
        let cut = |mut r: CapacityRefusal| {
            r.message = r.message.chars().take(MAX_MESSAGE).collect();
            r
        };
        self.refusals.extend(more.into_iter().map(cut));
        self.refusals.sort_by_key(|r| r.at);
        let drop = self.refusals.len().saturating_sub(KEPT);
        self.refusals.drain(..drop);
        self
    }

    pub fn render(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(at: u64, message: &str) -> CapacityRefusal {
        CapacityRefusal {
            at,
            choice: "p5.48xlarge".into(),
            code: "InsufficientInstanceCapacity".into(),
            message: message.into(),
        }
    }

    #[test]
    fn the_newest_are_kept_in_order_with_messages_cut() {
        let long = "x".repeat(1000);
        let held = CapacityRefusals::default().with((0..40).map(|n| refusal(n, &long)));
        let file = CapacityRefusals::parse(&held.render()).with([refusal(5, "late")]);
        assert_eq!(file.refusals.len(), KEPT);
        assert_eq!(file.refusals.first().map(|r| r.at), Some(8));
        assert_eq!(file.refusals.last().map(|r| r.at), Some(39));
        assert!(file.refusals.iter().all(|r| r.message.len() <= MAX_MESSAGE));
    }

    #[test]
    fn anything_unreadable_is_no_refusal() {
        for bytes in [&b""[..], b"{", b"[1,2]", b"{\"refusals\":7}"] {
            assert_eq!(CapacityRefusals::parse(bytes), CapacityRefusals::default());
        }
    }
}
