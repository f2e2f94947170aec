//! Which reports are believed: a report about a worker counts only when that worker's own
//! agent signed it (`protocol::signed`), with the key `dtd` pinned for the instance EC2 lists at
//! the report's IP, and only when it is newer than the last one believed, before or since `dtd`
//! last started (the newest believed per worker and kind is in the state).
//!
//! With signed reports, the reports come on each agent's own connection (`observe::agents`),
//! already held to the key its hello proved; the book remembers the newest it believed of each
//! kind, and forgets a worker's once EC2 lists another instance at its IP, or none. With
//! `workers.reports: unsigned` (the 2018 protocol, no agent) the prepare-data markers in the
//! shared directory are taken as they are and every other report is ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use super::read::{Body, Read};
use super::Scan;
use crate::config::Reports;
use crate::model::{LauncherSeen, Markers, Millis, Refused};
use crate::protocol::markers::{MarkerKind, MarkerName};
use crate::protocol::signed::{AgentKey, SignError};

/// Whose key signs for whom: the instance EC2 lists at each IP, with its agent's key when known.
#[derive(Debug, Default)]
pub struct Keys {
    pub by_ip: HashMap<IpAddr, (String, Option<AgentKey>)>,
    /// Every instance is listed: an IP no instance has is no worker's (a report for it is
    /// forgotten); otherwise it may only be unread.
    pub complete: bool,
}

#[derive(Default)]
pub struct Book {
    believed: BTreeMap<MarkerName, Believed>,
}

/// The newest report of a kind the book believed.
#[derive(Debug, Clone)]
struct Believed {
    instance_id: String,
    signed_at: u64,
    read: Arc<Read>,
}

/// What one pass needs to judge reports.
pub struct Judging<'a> {
    pub keys: &'a Keys,
    pub mode: Reports,
    pub now: Millis,
    /// When each instance's agent was last heard on its connection (any line).
    pub heard: &'a HashMap<String, Millis>,
    /// The newest report of an instance and kind that `dtd` believed before, as its state
    /// remembers it: nothing older is believed, whatever this run has seen.
    pub floor: &'a dyn Fn(&str, MarkerKind) -> Option<u64>,
}

enum Verdict {
    Authentic {
        instance_id: String,
        signed_at: u64,
    },
    /// Signed, but for an IP no instance is known at, or whose instance has no key yet.
    Pending,
    Refused {
        class: String,
        why: String,
    },
}

impl Book {
    pub fn judge(&mut self, scan: &Scan, j: &Judging) -> Markers {
        let mut m = Markers::default();
        if j.mode == Reports::Unsigned {
            unsigned(scan, &mut m);
            return m;
        }
        for (name, read) in &scan.files {
            self.judge_file(name, read, j, &mut m);
        }
        self.forget_others(j.keys);
        for (name, b) in &self.believed {
            show(name, b, j, &mut m);
        }
        m
    }

    /// Files under a report's name in the shared directory, with signed reports: not read, and
    /// shown (for listed workers' IPs) as what they are, someone's writing.
    pub fn strays(&self, names: &[MarkerName], keys: &Keys, m: &mut Markers) {
        for name in names {
            let why = "is in the shared directory, where dtd reads no report (workers.reports: \
                       signed): a worker's reports come only on its own agent's connection, so \
                       someone on a worker put it there; writing, deleting or squatting it \
                       changes nothing";
            refuse(
                name.ip,
                &name.to_string(),
                keys,
                "stray".into(),
                why.into(),
                m,
            );
        }
    }

    /// Refusals made as a report arrived (`observe::agents`): shown like the book's own.
    pub fn refused_on_arrival(
        &self,
        refused: &[crate::observe::agents::Refusal],
        keys: &Keys,
        m: &mut Markers,
    ) {
        for r in refused {
            refuse(r.ip, &r.file, keys, r.class.clone(), r.why.clone(), m);
        }
    }

    fn judge_file(&mut self, name: &MarkerName, read: &Arc<Read>, j: &Judging, m: &mut Markers) {
        match verdict(name, read, j.keys) {
            Verdict::Pending => {
                m.pending.insert(name.ip);
            }
            Verdict::Refused { class, why } => {
                refuse(name.ip, &name.to_string(), j.keys, class, why, m)
            }
            Verdict::Authentic {
                instance_id,
                signed_at,
            } => self.believe(name, read, instance_id, signed_at, j, m),
        }
    }

    fn believe(
        &mut self,
        name: &MarkerName,
        read: &Arc<Read>,
        instance_id: String,
        signed_at: u64,
        j: &Judging,
        m: &mut Markers,
    ) {
        let known = self
            .believed
            .get(name)
            .filter(|b| b.instance_id == instance_id);
        let floor = (j.floor)(&instance_id, name.kind);
        let newest = known.map(|b| b.signed_at).max(floor);
        if let Some(newest) = newest.filter(|n| *n > signed_at) {
            let why = format!(
                "is an older report of {instance_id}'s agent (signed at {}) than one dtd \
                 believed (signed at {}): sent again by someone; ignored",
                crate::model::rfc3339(signed_at),
                crate::model::rfc3339(newest)
            );
            let class = "before-newest".into();
            return refuse(name.ip, &name.to_string(), j.keys, class, why, m);
        }
        if newest == Some(signed_at) && known.is_some() {
            return;
        }
        if floor.is_none_or(|f| f < signed_at) {
            m.newest.push((instance_id.clone(), name.kind, signed_at));
        }
        let b = Believed {
            instance_id,
            signed_at,
            read: Arc::clone(read),
        };
        self.believed.insert(*name, b);
    }

    /// A report is forgotten once EC2 lists another instance at its IP (or, on a complete
    /// view, none): it was about an instance that is gone.
    fn forget_others(&mut self, keys: &Keys) {
        self.believed
            .retain(|name, b| match keys.by_ip.get(&name.ip) {
                Some((id, _)) => *id == b.instance_id,
                None => !keys.complete,
            });
    }
}

fn verdict(name: &MarkerName, read: &Read, keys: &Keys) -> Verdict {
    let body = match &read.body {
        Ok(body) => body,
        Err(why) => return refused("unreadable", why.to_string()),
    };
    let signed = match &read.signed {
        Ok(signed) => signed,
        Err(SignError::Unsigned) => {
            let why = "is not signed by the worker's dtd agent (workers.reports is signed): \
                       anyone on any worker can write this file; ignored";
            return refused("unsigned", why.into());
        }
        Err(e) => return refused("signature", format!("is refused: {e}")),
    };
    let Some((id, key)) = keys.by_ip.get(&name.ip) else {
        return Verdict::Pending;
    };
    let Some(key) = key else {
        return Verdict::Pending;
    };
    if &signed.key != key {
        let why = format!(
            "is signed with key {}…, not with {id}'s agent key ({}…): written by someone else; ignored",
            signed.key.short(),
            key.short()
        );
        return refused(&format!("key:{}", signed.key.short()), why);
    }
    if body.instance_id() != Some(id.as_str()) {
        let named = body.instance_id().unwrap_or("no instance");
        let why = format!(
            "names {named:?}, but EC2 lists {id} at {}: ignored",
            name.ip
        );
        return refused(&format!("names:{named}"), why);
    }
    Verdict::Authentic {
        instance_id: id.clone(),
        signed_at: signed.signed_at,
    }
}

fn refused(class: &str, why: String) -> Verdict {
    Verdict::Refused {
        class: class.to_string(),
        why,
    }
}

/// Refusals are shown for the IPs of listed instances only: a report for an address no worker
/// has is anyone's noise, and cannot make dtd do anything. `why` follows the report's name.
fn refuse(ip: IpAddr, file: &str, keys: &Keys, class: String, why: String, m: &mut Markers) {
    let Some((id, _)) = keys.by_ip.get(&ip) else {
        return;
    };
    let why = match why.starts_with(file) {
        true => why,
        false => format!("{file} {why}"),
    };
    m.refused.push(Refused {
        ip,
        instance: id.clone(),
        file: file.to_string(),
        class,
        why,
    });
}

fn show(name: &MarkerName, b: &Believed, j: &Judging, m: &mut Markers) {
    let Ok(body) = &b.read.body else { return };
    let ip = name.ip;
    match body {
        Body::Success { .. } => {
            m.success.insert(ip);
            m.success_named.insert(ip, b.instance_id.clone());
            if let Some(at) = b.read.modified {
                m.ready_at.insert(ip, at);
            }
        }
        Body::Failed { summary, .. } => {
            m.failed.insert(ip, summary.clone());
            m.failed_named.insert(ip, b.instance_id.clone());
        }
        Body::Health(h) => {
            m.health.insert(ip, h.clone());
        }
        Body::Launcher(l) => {
            let launcher = LauncherSeen {
                instance_id: l.instance_id.clone(),
                state: l.state,
                generation: l.generation,
                restarts: l.restarts,
                reason: l.reason.clone(),
                stopped: l.stopped,
                compute: l.compute,
                // Not yet heard on a connection of this run: not silent either.
                heard_at: j.heard.get(&b.instance_id).copied().unwrap_or(j.now),
            };
            m.launchers.insert(ip, launcher);
        }
        Body::Notice(n) => m.notices.push(n.clone()),
    }
}

/// The 2018 protocol: the prepare-data markers as they are, nothing else.
fn unsigned(scan: &Scan, m: &mut Markers) {
    for (name, read) in &scan.files {
        let Ok(body) = &read.body else {
            if name.kind == MarkerKind::Failed {
                m.failed
                    .insert(name.ip, "no readable failure report".into());
            }
            continue;
        };
        match body {
            Body::Success { instance_id } => {
                m.success.insert(name.ip);
                if let Some(id) = instance_id {
                    m.success_named.insert(name.ip, id.clone());
                }
                if let Some(at) = read.modified {
                    m.ready_at.insert(name.ip, at);
                }
            }
            Body::Failed {
                instance_id,
                summary,
            } => {
                m.failed.insert(name.ip, summary.clone());
                if let Some(id) = instance_id {
                    m.failed_named.insert(name.ip, id.clone());
                }
            }
            _ => {}
        }
    }
}

/// Every IP a report file names, whatever it says: the ones no known worker has are worth a
/// read of EC2 (a new worker the listing has not seen yet).
pub fn reported_ips(scan: &Scan) -> BTreeSet<IpAddr> {
    scan.files.keys().map(|n| n.ip).collect()
}

#[cfg(test)]
mod tests;
