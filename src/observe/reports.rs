//! What the workers' reports say, and what of it a pass believes: with signed reports, what the
//! agents said on their connections (`observe::agents`), judged by the book against EC2's view and
//! the keys `dtd` keeps; with `workers.reports: unsigned`, the 2018 protocol's marker files as
//! they are. The observer asks; this keeps the book and the agents' port between passes.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use super::agents::{Agents, Heard, ListenError, Proof};
use super::ec2::Ec2Error;
use super::markers::book::{Book, Judging, Keys};
use super::markers::Scan;
use crate::clock::SharedClock;
use crate::config::{Config, Reports as Mode};
use crate::model::*;
use crate::protocol::markers::MarkerName;

/// An agent heard this recently is kept by the port even when the listing lacks its instance
/// (launched after the listing began).
const HEARD_LATELY_MS: Millis = 60_000;

#[derive(Default)]
pub struct Reports {
    /// The reports believed so far, and what a new one must be to be believed.
    book: Book,
    /// The agents' port, with signed reports (`take`).
    agents: Option<Agents>,
    /// The keys `dtd` keeps changed (or may have): the agents' port is told before the next pass.
    pins_stale: bool,
    /// The complete listing the agents' port last forgot gone instances by.
    forgot_by: Option<Millis>,
}

/// What a pass judges the agents' reports against.
pub struct Judged<'a> {
    pub instances: &'a Result<Vec<Instance>, Ec2Error>,
    /// When the complete listing the view rests on began.
    pub listed_at: Option<Millis>,
    pub pins: Pins<'a>,
    pub now: Millis,
}

impl Reports {
    /// Starts taking the agents' reports on `workers.listen`; `pins`: the keys dtd keeps.
    /// Returns the address bound.
    pub async fn take(
        &mut self,
        cfg: &Config,
        clock: SharedClock,
        pins: Pins<'_>,
    ) -> Result<std::net::SocketAddr, ListenError> {
        let agents = Agents::start(cfg, clock, pins.keys()).await?;
        let bound = agents.bound;
        self.agents = Some(agents);
        Ok(bound)
    }

    /// Before the first pass: waits until the agents of `known` (the instances whose keys dtd
    /// kept) have proved themselves again, or `most`, but at least `least` (agents retry every
    /// 100 ms at first), so that a restarted dtd does not decide on what it has not yet heard.
    /// Returns how many of `known` were heard.
    pub async fn await_agents(&self, known: &[String], least: Duration, most: Duration) -> usize {
        let Some(agents) = &self.agents else {
            return 0;
        };
        let started = tokio::time::Instant::now();
        loop {
            let proved = agents.board().proved(known);
            let waited = started.elapsed();
            if waited >= most || (waited >= least && proved == known.len()) {
                return proved;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for an agent's report or proof (for ever without the port). Cancel-safe.
    pub async fn news(&self) {
        match &self.agents {
            Some(a) => a.board().news().await,
            None => std::future::pending().await,
        }
    }

    /// What the agents' port has heard since the last pass (signed reports), once it knows the
    /// keys dtd keeps now.
    pub fn hear(&mut self, pins: Pins<'_>, now: Millis) -> Option<Heard> {
        let board = self.agents.as_ref()?.board();
        if std::mem::take(&mut self.pins_stale) {
            board.set_pins(pins.keys());
        }
        Some(board.take(now))
    }

    /// What of the agents' reports is believed, against EC2's view just read: the instance at
    /// each report's IP, the key dtd pinned for it, else the one its agent proved (which decide
    /// pins on this same pass from `Markers::key_proofs`).
    pub fn judge_heard(&mut self, heard: &Heard, strays: &[MarkerName], on: Judged<'_>) -> Markers {
        let (keys, key_proofs) = keys(heard, strays, &on);
        if let Ok(list) = on.instances {
            self.forget_gone(list, heard, &on);
        }
        self.pins_stale |= !key_proofs.is_empty();
        let floor = |id: &str, kind| on.pins.floor(id, kind);
        let judging = Judging {
            keys: &keys,
            mode: Mode::Signed,
            now: on.now,
            heard: &heard.heard,
            floor: &floor,
        };
        let mut markers = self.book.judge(&heard.scan, &judging);
        self.book
            .refused_on_arrival(&heard.refused, &keys, &mut markers);
        self.book.strays(strays, &keys, &mut markers);
        markers.key_proofs = key_proofs;
        markers
    }

    /// Once per complete listing: the agents' port forgets what it heard of instances gone (EC2
    /// lists another at their IP, or none), unless heard lately (new, not listed yet). An agent
    /// forgotten while still connected is disconnected: it says it all again.
    fn forget_gone(&mut self, list: &[Instance], heard: &Heard, on: &Judged<'_>) {
        let (Some(agents), Some(listed_at)) = (&self.agents, on.listed_at) else {
            return;
        };
        if self.forgot_by == Some(listed_at) {
            return;
        }
        self.forgot_by = Some(listed_at);
        self.pins_stale = true;
        let at: HashMap<IpAddr, &str> = list.iter().map(|i| (i.ip, i.id.as_str())).collect();
        let lately = |id: &str| {
            (heard.heard.get(id)).is_some_and(|h| on.now.saturating_sub(*h) < HEARD_LATELY_MS)
        };
        agents
            .board()
            .forget(|id, ip| at.get(&ip) == Some(&id) || lately(id));
    }

    /// The 2018 protocol's files (`workers.reports: unsigned`): the prepare-data markers as
    /// they are.
    pub fn judge_files(&mut self, cfg: &Config, scan: &Scan, now: Millis) -> Markers {
        let keys = Keys::default();
        let nothing = |_: &str, _| None;
        let judging = Judging {
            keys: &keys,
            mode: cfg.workers.reports,
            now,
            heard: &HashMap::new(),
            floor: &nothing,
        };
        self.book.judge(scan, &judging)
    }
}

/// Whose key signs for the listed instance at each IP something was said about, and the keys
/// proved for listed instances that dtd does not keep yet.
fn keys(
    heard: &Heard,
    strays: &[MarkerName],
    on: &Judged<'_>,
) -> (Keys, Vec<(String, crate::protocol::signed::AgentKey)>) {
    let proofs: HashMap<IpAddr, &Proof> = heard.proofs.iter().map(|p| (p.ip, p)).collect();
    let ips: HashSet<IpAddr> = (heard.scan.files.keys().map(|n| n.ip))
        .chain(heard.refused.iter().map(|r| r.ip))
        .chain(strays.iter().map(|n| n.ip))
        .chain(proofs.keys().copied())
        .collect();
    let mut keys = Keys::default();
    let mut key_proofs = Vec::new();
    let Ok(list) = on.instances else {
        return (keys, key_proofs);
    };
    keys.complete = true;
    for i in list.iter().filter(|i| ips.contains(&i.ip)) {
        let proved = (proofs.get(&i.ip))
            .filter(|p| p.instance_id == i.id)
            .map(|p| &p.key);
        let pinned = on.pins.get(&i.id);
        if let Some(k) = proved.filter(|k| Some(*k) != pinned) {
            key_proofs.push((i.id.clone(), k.clone()));
        }
        keys.by_ip
            .insert(i.ip, (i.id.clone(), pinned.or(proved).cloned()));
    }
    (keys, key_proofs)
}
