//! What the agents' connections have told `dtd` since it started, shared between the
//! connections that write it (`conn`) and the pass that reads it ([`Board::take`]): per instance
//! the key its agent proved, when it was last heard, and per report name the newest report.
//!
//! An instance speaks with one key: the one `dtd` pinned for it (`State`, published here after
//! each pass), else the first its agent proved since `dtd` started. A hello with any other key is
//! refused, so a second claimant (the job on that instance, allowed to read its metadata) can
//! neither take the instance's reports' place nor push them out.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::model::Millis;
use crate::observe::markers::{Read, Scan};
use crate::protocol::markers::MarkerName;
use crate::protocol::signed::AgentKey;

/// Refusals kept for `dtctl status` at once: more are anyone's noise, dropped.
const MAX_REFUSALS: usize = 1024;
/// A refusal not seen again for this long is forgotten (and journaled again if it comes back).
const REFUSAL_SHOWN_MS: Millis = 5 * 60_000;

/// An instance's agent, as its hello proved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub instance_id: String,
    pub ip: IpAddr,
    pub key: AgentKey,
    /// The identity document's account: EC2 must list the instance in this one.
    pub account_id: String,
    pub at: Millis,
}

/// Something a connection sent that is not believed, kept to be shown and journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The IP the message was about (its name's), or the peer's for a line without one.
    pub ip: IpAddr,
    /// The message's name (`identity_<ip>`, `health_<ip>`, …) or `connection`.
    pub file: String,
    /// What kind of refusal, for journaling it once.
    pub class: String,
    pub why: String,
    pub last: Millis,
}

/// What one pass takes: everything believed so far, and the refusals still shown.
#[derive(Debug, Default, Clone)]
pub struct Heard {
    pub scan: Scan,
    pub proofs: Vec<Proof>,
    /// When each instance's agent was last heard (any line on its connection).
    pub heard: HashMap<String, Millis>,
    pub refused: Vec<Refusal>,
}

/// Why a hello does not make its key the instance's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefused {
    #[error("dtd keeps {instance}'s agent key {kept}…, and this hello's is {offered}…: another agent's (terminate the worker if its agent really lost its key)")]
    NotPinned {
        instance: String,
        kept: String,
        offered: String,
    },
    #[error("{instance}'s agent already proved key {first}… since dtd started, and this hello's is {offered}…: refused (the first keeps its place)")]
    NotFirst {
        instance: String,
        first: String,
        offered: String,
    },
}

/// Set when a connection's agent is heard on a newer one, or forgotten: that connection ends
/// (at its next line, or the next look at the quiet ones) and nothing more on it is believed.
#[derive(Debug, Default)]
pub struct Displaced(AtomicBool);

impl Displaced {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Release)
    }
}

#[derive(Default)]
struct Inner {
    reports: BTreeMap<MarkerName, Arc<Read>>,
    /// Who signed each report: its instance (the connection's proof).
    signers: BTreeMap<MarkerName, String>,
    proofs: HashMap<String, Proof>,
    heard: HashMap<String, Millis>,
    pins: HashMap<String, AgentKey>,
    refused: BTreeMap<(IpAddr, String), Refusal>,
    /// Per instance, what a newer connection of its agent sets to end the older one.
    displace: HashMap<String, Arc<Displaced>>,
}

#[derive(Default)]
pub struct Board {
    inner: Mutex<Inner>,
    /// A report or a proof arrived: worth a pass now.
    news: Notify,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a report or a proof since the last call (cancel-safe).
    pub async fn news(&self) {
        self.news.notified().await
    }

    /// The keys `dtd` keeps (after a pass pinned new ones, or at start).
    pub fn set_pins(&self, pins: HashMap<String, AgentKey>) {
        self.lock().pins = pins;
    }

    /// Makes `p.key` the instance's, when it may be: returns what the connection it came on
    /// looks at, set when a newer connection of the same agent takes its place.
    pub fn prove(&self, p: Proof) -> Result<Arc<Displaced>, KeyRefused> {
        let mut g = self.lock();
        let id = p.instance_id.clone();
        if let Some(kept) = g.pins.get(&id).filter(|k| **k != p.key) {
            return Err(KeyRefused::NotPinned {
                instance: id,
                kept: kept.short().into(),
                offered: p.key.short().into(),
            });
        }
        let pinned = g.pins.contains_key(&id);
        if let Some(first) = g.proofs.get(&id).filter(|f| f.key != p.key && !pinned) {
            return Err(KeyRefused::NotFirst {
                instance: id,
                first: first.key.short().into(),
                offered: p.key.short().into(),
            });
        }
        g.heard.insert(id.clone(), p.at);
        g.proofs.insert(id.clone(), p);
        let ended = Arc::new(Displaced::default());
        if let Some(old) = g.displace.insert(id, ended.clone()) {
            old.set();
        }
        drop(g);
        self.news.notify_one();
        Ok(ended)
    }

    /// Keeps `read`, the report `name` that `instance`'s agent signed at `signed_at`, unless a
    /// newer one of that name from the same instance is kept; `Err` holds the newer's time.
    pub fn report(
        &self,
        instance: &str,
        name: MarkerName,
        read: Read,
        signed_at: u64,
        now: Millis,
    ) -> Result<(), u64> {
        let mut g = self.lock();
        let same = g.signers.get(&name).is_some_and(|s| s == instance);
        let kept = g.reports.get(&name).filter(|_| same);
        let newest = kept
            .and_then(|r| r.signed.as_ref().ok())
            .map(|s| s.signed_at);
        if let Some(newest) = newest.filter(|n| *n >= signed_at) {
            return Err(newest);
        }
        // A success marker is timed by its first report: a resent one is not a new readiness.
        let first = kept.and_then(|r| r.modified);
        let read = Read {
            modified: first.or(Some(now)),
            ..read
        };
        g.reports.insert(name, Arc::new(read));
        g.signers.insert(name, instance.to_string());
        g.heard.insert(instance.to_string(), now);
        drop(g);
        self.news.notify_one();
        Ok(())
    }

    /// How many of `ids` have proved themselves since dtd started.
    pub fn proved(&self, ids: &[String]) -> usize {
        let g = self.lock();
        ids.iter().filter(|id| g.proofs.contains_key(*id)).count()
    }

    /// A ping: the agent still runs.
    pub fn heard(&self, instance: &str, now: Millis) {
        self.lock().heard.insert(instance.to_string(), now);
    }

    pub fn refuse(&self, r: Refusal) {
        let mut g = self.lock();
        let key = (r.ip, r.class.clone());
        if g.refused.len() >= MAX_REFUSALS && !g.refused.contains_key(&key) {
            return;
        }
        g.refused.insert(key, r);
        drop(g);
        self.news.notify_one();
    }

    /// Everything kept, for one pass; refusals not seen for a while are forgotten.
    pub fn take(&self, now: Millis) -> Heard {
        let mut g = self.lock();
        g.refused
            .retain(|_, r| now.saturating_sub(r.last) < REFUSAL_SHOWN_MS);
        Heard {
            scan: Scan {
                files: g.reports.clone(),
            },
            proofs: g.proofs.values().cloned().collect(),
            heard: g.heard.clone(),
            refused: g.refused.values().cloned().collect(),
        }
    }

    /// Forgets what was said about instances EC2 no longer lists (`keep` says which stay), and
    /// reports whose IP another instance now has. A forgotten agent still connected is
    /// disconnected, so that it proves itself and says everything again.
    pub fn forget(&self, keep: impl Fn(&str, IpAddr) -> bool) {
        let mut g = self.lock();
        let Inner {
            reports,
            signers,
            proofs,
            heard,
            displace,
            ..
        } = &mut *g;
        proofs.retain(|id, p| keep(id, p.ip));
        heard.retain(|id, _| proofs.contains_key(id));
        displace.retain(|id, ended| {
            let kept = proofs.contains_key(id);
            if !kept {
                ended.set();
            }
            kept
        });
        signers.retain(|name, id| keep(id, name.ip));
        reports.retain(|name, _| signers.contains_key(name));
    }
}

#[cfg(test)]
mod tests;
