//! Every report the agent writes goes through its [`Signer`]: signed with the worker's key, at a
//! `signed_at` that never repeats or goes back, so `dtd` can tell the newest report from an older
//! one someone put back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::clock::now_millis;
use crate::protocol::markers::MarkerName;
use crate::protocol::signed::{self, AgentKey, SigningKey};

#[derive(Clone)]
pub struct Signer(Arc<Inner>);

struct Inner {
    key: SigningKey,
    last: AtomicU64,
}

impl Signer {
    pub fn new(key: SigningKey) -> Signer {
        Signer(Arc::new(Inner {
            key,
            last: AtomicU64::new(0),
        }))
    }

    pub fn public(&self) -> &AgentKey {
        self.0.key.public()
    }

    /// `line` (a rendered report, or a hello) signed for `name`.
    pub fn sign(&self, name: &dyn std::fmt::Display, line: &[u8]) -> Vec<u8> {
        self.0.key.sign(name, line, self.next())
    }

    /// Whether `bytes`, read from the file `name`, is a report this agent signed.
    pub fn signed_it(&self, name: &MarkerName, bytes: &[u8]) -> bool {
        signed::open(name, bytes).is_ok_and(|s| &s.key == self.public())
    }

    /// The clock's time, or one past the last one used when the clock has not moved on (two
    /// reports in a millisecond) or went back.
    fn next(&self) -> u64 {
        let now = now_millis();
        let prev = self
            .0
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(now.max(last.saturating_add(1)))
            });
        let last = prev.unwrap_or(0);
        now.max(last.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::markers::MarkerKind;

    #[test]
    fn signed_at_never_repeats_and_only_its_own_reports_are_its_own() {
        let key = || SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap();
        let (s, other) = (Signer::new(key()), Signer::new(key()));
        let name = MarkerName::new(MarkerKind::Health, "10.0.1.5".parse().unwrap());
        let times: Vec<u64> = (0..100)
            .map(|_| {
                signed::open(&name, &s.sign(&name, b"{}\n"))
                    .unwrap()
                    .signed_at
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        assert!(s.signed_it(&name, &s.sign(&name, b"{}\n")));
        assert!(!s.signed_it(&name, &other.sign(&name, b"{}\n")));
        assert!(!s.signed_it(&name, b"{}\n"));
    }
}
