//! The in-place strategy's Lighthouse: torchft's `torchft_lighthouse` (supervise.rs), which forms
//! each step's quorum from the nodes' heartbeats, on the master's loopback; and dtd's front
//! (front.rs) where the nodes dial it, which lets through only what a node of the plan says of
//! itself (admit.rs) and keeps what it refused (refusals.rs) for the journal and `dtctl status`
//! (docs/torchrun.md, "What the nodes cannot do to each other").

mod admit;
mod front;
mod grpc;
mod prefixed;
mod refusals;
mod supervise;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::config::Config;
use crate::model::{Event, EventKind, Millis, State};

/// The Lighthouse as the daemon sees it: its supervisor's line and the front's gate.
pub struct Lighthouse {
    state: Arc<Mutex<String>>,
    shared: Arc<Shared>,
    pub address: SocketAddr,
}

/// What the front and the daemon share.
pub struct Shared {
    gate: Mutex<admit::Gate>,
    refused: Mutex<refusals::Refusals>,
    /// Why the front is not listening, while it is not.
    front: Mutex<Option<String>>,
}

impl Lighthouse {
    /// Starts the Lighthouse and its front, when the strategy is `in_place`; the front admits
    /// the nodes `state` lists until the first pass says otherwise.
    pub fn start(cfg: &Config, state: &State) -> Option<Lighthouse> {
        let launcher = cfg.job.launcher.as_ref()?;
        let settings = launcher.in_place()?;
        let shared = Arc::new(Shared {
            gate: Mutex::new(admit::Gate::new(settings.heartbeat_timeout)),
            refused: Mutex::new(refusals::Refusals::new()),
            front: Mutex::new(None),
        });
        let me = Lighthouse {
            state: Arc::new(Mutex::new("starting".into())),
            shared: Arc::clone(&shared),
            address: settings.lighthouse,
        };
        me.admit(nodes(state, cfg.workers.base_hosts.iter().copied()));
        supervise::spawn(cfg, launcher, settings, Arc::clone(&me.state));
        if let Err(e) = front::spawn(settings.lighthouse, settings.local(), shared) {
            me.shared.set_front(Some(format!("not started: {e}")));
        }
        Some(me)
    }

    /// The supervisor's line, and the front's trouble if it has any.
    pub fn describe(&self) -> String {
        let line = self.state.lock().map(|s| s.clone()).unwrap_or_default();
        match self.shared.front.lock().ok().and_then(|f| f.clone()) {
            Some(why) => format!("{line}; dtd's front {why}"),
            None => line,
        }
    }

    /// Who may speak to the Lighthouse from now on: the plan's hosts and the workers leaving.
    pub fn admit(&self, nodes: impl IntoIterator<Item = IpAddr>) {
        let _ = self.shared.gate(|g| {
            g.set_nodes(nodes);
            Ok(())
        });
    }

    /// The refusals not journaled yet, as events (about the worker at the source's IP, if any).
    pub fn journal(&self, now: Millis, state: &State) -> Vec<Event> {
        let seen = match self.shared.refused.lock() {
            Ok(mut r) => r.take_unjournaled(),
            Err(_) => return Vec::new(),
        };
        let event = |s: refusals::Seen| {
            let message = format!("torchft's Lighthouse (dtd's front): {} {}", s.from, s.why);
            let mut e = Event::new(now, EventKind::LighthouseRefused, message);
            e.ip = Some(s.from);
            e.instance = worker_at(state, s.from);
            e
        };
        seen.into_iter().map(event).collect()
    }

    /// What the status shows of the refusals.
    pub fn refused(&self) -> Vec<String> {
        let lines = self
            .shared
            .refused
            .lock()
            .map(|mut r| r.lines(Instant::now()));
        lines.unwrap_or_default()
    }
}

impl Shared {
    fn gate<T>(
        &self,
        f: impl FnOnce(&mut admit::Gate) -> Result<T, admit::Refusal>,
    ) -> Result<T, admit::Refusal> {
        match self.gate.lock() {
            Ok(mut g) => f(&mut g),
            // A panic elsewhere left the gate unknown: nothing is let through.
            Err(_) => Err(admit::Refusal::NotANode),
        }
    }

    fn refuse(&self, from: IpAddr, refusal: &admit::Refusal) {
        tracing::debug!(%from, "torchft's Lighthouse: refused: {refusal}");
        if let Ok(mut r) = self.refused.lock() {
            r.note(from, refusal, Instant::now());
        }
    }

    fn set_front(&self, why: Option<String>) {
        if let Ok(mut f) = self.front.lock() {
            *f = why;
        }
    }
}

/// The hosts of the plan, with the workers still leaving it (their training may be finishing
/// its last step).
pub fn nodes<'a>(
    state: &'a State,
    hosts: impl Iterator<Item = IpAddr> + 'a,
) -> impl Iterator<Item = IpAddr> + 'a {
    let members = state.members.iter().map(|m| m.ip);
    let leaving = state.removals.iter().map(|r| r.ip);
    hosts.chain(members).chain(leaving)
}

fn worker_at(state: &State, ip: IpAddr) -> Option<String> {
    let member = state.members.iter().find(|m| m.ip == ip).map(|m| &m.id);
    let leaving = || state.removals.iter().find(|r| r.ip == ip).map(|r| &r.id);
    member.or_else(leaving).cloned()
}
