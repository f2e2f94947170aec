//! Prepare-data markers in the shared directory: one directory read per pass.
//!
//! A marker's name carries an IP; a name whose IP part does not parse is ignored with a warning
//! and never used to build a path or a command.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::fsutil::millis_from_rfc3339;
use crate::model::{Health, Launcher, Markers, Millis, Notice, NoticeKind, NoticeTarget};
use crate::protocol::health::HealthReport;
use crate::protocol::interruption::{InterruptionMarker, NoticeKind as AgentKind};
use crate::protocol::launcher::LauncherReport;
use crate::protocol::markers::{
    MarkerKind, MarkerName, NameError, MAX_REPORT_BYTES, PREPARE_DATA_PREFIX,
};
use crate::protocol::report;
use crate::untrusted;

/// Longer than any notice id the agent writes (`imds:<kind>:<time or event id>`).
const MAX_NOTICE_ID: usize = 128;

pub struct MarkerScanner {
    dir: PathBuf,
    /// Names already warned about, so a bad file is reported once, not every pass.
    warned: HashSet<OsString>,
    /// Success markers by IP: each is `stat`ed for its time once, and read for the instance it
    /// names once per file (inode), not every pass.
    success: BTreeMap<IpAddr, SuccessSeen>,
    /// Health reports by IP with the inode they were read from: the agent replaces the file
    /// (a new inode) at every check, so an unchanged inode is not read again. A pass over a
    /// thousand workers reads only the reports that changed, not a thousand files.
    health: BTreeMap<IpAddr, (u64, Option<Health>)>,
    /// The IPs with a health report in the directory on this scan.
    health_seen: HashSet<IpAddr>,
    /// Launcher reports by IP: read once per inode (the agent replaces the file when its state
    /// changes) and `stat`ed for their modification time (its heartbeat) at most every 2 s.
    launchers: BTreeMap<IpAddr, LauncherSeen>,
    launchers_seen: HashSet<IpAddr>,
    launchers_statted: Option<Millis>,
}

/// A launcher report as last read, and when its file last changed in dtd's eyes.
struct LauncherSeen {
    ino: u64,
    modified: Option<std::time::SystemTime>,
    report: Option<Launcher>,
}

/// How often launcher reports are `stat`ed for their heartbeat: as often as the agent touches
/// them, well within the silence that counts (`job.launcher.silent_after`, at least 10 s), far
/// less than every pass (on EFS a `stat` past the attribute cache is a round trip).
const LAUNCHER_STAT_EVERY: Millis = 2000;

/// What a success marker said when it was first seen (its time) and last read (its inode).
struct SuccessSeen {
    ino: u64,
    at: Option<Millis>,
    named: Option<String>,
}

impl MarkerScanner {
    pub fn new(dir: &Path) -> Self {
        MarkerScanner {
            dir: dir.to_path_buf(),
            warned: HashSet::new(),
            success: BTreeMap::new(),
            health: BTreeMap::new(),
            health_seen: HashSet::new(),
            launchers: BTreeMap::new(),
            launchers_seen: HashSet::new(),
            launchers_statted: None,
        }
    }

    /// `now` (the daemon's clock): a launcher report not touched for a while is silent.
    pub fn scan(&mut self, now: Millis) -> Result<Markers, String> {
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot read {}: {e}", self.dir.display()))?;
        let mut markers = Markers::default();
        let stat = self
            .launchers_statted
            .is_none_or(|at| now.saturating_sub(at) >= LAUNCHER_STAT_EVERY);
        if stat {
            self.launchers_statted = Some(now);
        }
        for entry in entries {
            let entry = entry.map_err(|e| format!("listing {}: {e}", self.dir.display()))?;
            self.consider(&entry, &mut markers, (now, stat));
        }
        let seen = std::mem::take(&mut self.launchers_seen);
        self.launchers.retain(|ip, _| seen.contains(ip));
        for (ip, l) in &self.launchers {
            if let Some(report) = &l.report {
                markers.launchers.insert(*ip, report.clone());
            }
        }
        self.success.retain(|ip, _| markers.success.contains(ip));
        for (ip, seen) in &self.success {
            if let Some(at) = seen.at {
                markers.ready_at.insert(*ip, at);
            }
            if let Some(named) = &seen.named {
                markers.success_named.insert(*ip, named.clone());
            }
        }
        // Forgets the reports whose file is gone (an unreadable one stays, so it is warned
        // about once and read again only when replaced).
        let seen = std::mem::take(&mut self.health_seen);
        self.health.retain(|ip, _| seen.contains(ip));
        Ok(markers)
    }

    fn consider(&mut self, entry: &fs::DirEntry, markers: &mut Markers, clock: (Millis, bool)) {
        let name = entry.file_name();
        let Some(text) = name.to_str() else {
            if name.to_string_lossy().starts_with(PREPARE_DATA_PREFIX) {
                self.warn(&name, "file name is not UTF-8");
            }
            return;
        };
        let MarkerName { kind, ip } = match MarkerName::parse(text) {
            Ok(parsed) => parsed,
            Err(NameError::NotAMarker) => return,
            Err(e @ NameError::NotAnIp) => {
                self.warn(&name, &e.to_string());
                return;
            }
        };
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            self.warn(&name, "not a regular file");
            return;
        }
        match kind {
            MarkerKind::Success => {
                markers.success.insert(ip);
                self.see_success(entry, ip);
            }
            MarkerKind::Failed => {
                let (summary, named) = self.failure_summary(&entry.path(), &name);
                markers.failed.insert(ip, summary);
                if let Some(id) = named {
                    markers.failed_named.insert(ip, id);
                }
            }
            MarkerKind::Interruption => match read_notice(&entry.path(), ip) {
                Ok(n) => markers.notices.push(n),
                Err(e) => self.warn(&name, &e),
            },
            MarkerKind::Health => self.consider_health(entry, &name, ip, markers),
            MarkerKind::Launcher => self.consider_launcher(entry, &name, ip, clock),
        }
    }

    /// Reads a launcher report when its inode changed; otherwise, when due, `stat`s it: a new
    /// modification time is the agent's heartbeat. Either is heard at `now`.
    fn consider_launcher(
        &mut self,
        entry: &fs::DirEntry,
        name: &OsString,
        ip: IpAddr,
        (now, stat): (Millis, bool),
    ) {
        use std::os::unix::fs::DirEntryExt;
        self.launchers_seen.insert(ip);
        let ino = entry.ino();
        if let Some(seen) = self.launchers.get_mut(&ip).filter(|s| s.ino == ino) {
            if stat {
                let modified = entry.metadata().ok().and_then(|m| m.modified().ok());
                if modified.is_some() && modified != seen.modified {
                    seen.modified = modified;
                    if let Some(r) = seen.report.as_mut() {
                        r.heard_at = now;
                    }
                }
            }
            return;
        }
        let modified = entry.metadata().ok().and_then(|m| m.modified().ok());
        let report = self.read_report(entry, name, "launcher report", LauncherReport::parse);
        let seen = LauncherSeen {
            ino,
            modified,
            report: report.map(|r| launcher_from(r, now)),
        };
        self.launchers.insert(ip, seen);
    }

    /// An agent's report, parsed; unreadable or garbled, it is warned about once and is none.
    fn read_report<T>(
        &mut self,
        entry: &fs::DirEntry,
        name: &OsString,
        what: &str,
        parse: fn(&[u8]) -> Result<T, String>,
    ) -> Option<T> {
        let read = read_small(&entry.path(), what).and_then(|body| parse(body.as_bytes()));
        read.map_err(|e| self.warn(name, &e)).ok()
    }

    /// Reads a health report only when its inode changed since the last read; an unreadable
    /// one is warned about once and counts as no report.
    fn consider_health(
        &mut self,
        entry: &fs::DirEntry,
        name: &OsString,
        ip: IpAddr,
        markers: &mut Markers,
    ) {
        use std::os::unix::fs::DirEntryExt;
        let ino = entry.ino();
        if !matches!(self.health.get(&ip), Some((known, _)) if *known == ino) {
            let health = self.read_report(entry, name, "health report", HealthReport::parse);
            self.health.insert(ip, (ino, health.map(health_from)));
        }
        self.health_seen.insert(ip);
        if let Some((_, Some(h))) = self.health.get(&ip) {
            markers.health.insert(ip, h.clone());
        }
    }

    /// A success marker's time (its first version's modification time; no `stat` of a file
    /// that vanished: it is simply not timed) and the instance it names, read once per file (a
    /// new inode is a new marker); an unreadable body names none, like a 2018 marker.
    fn see_success(&mut self, entry: &fs::DirEntry, ip: IpAddr) {
        use std::os::unix::fs::DirEntryExt;
        let ino = entry.ino();
        let known = self.success.get(&ip);
        if known.is_some_and(|k| k.ino == ino) {
            return;
        }
        let at = known.and_then(|k| k.at).or_else(|| modified_millis(entry));
        let named = read_small(&entry.path(), "success marker")
            .ok()
            .and_then(|body| report::owner(body.as_bytes()));
        self.success.insert(ip, SuccessSeen { ino, at, named });
    }

    /// The failure in one line for people, and the instance the report names.
    fn failure_summary(&mut self, path: &Path, name: &OsString) -> (String, Option<String>) {
        let read = read_small(path, "failure report")
            .and_then(|body| Ok((report::summary(&body)?, report::owner(body.as_bytes()))));
        match read {
            Ok(read) => read,
            Err(e) => {
                self.warn(name, &e);
                ("no readable failure report".to_string(), None)
            }
        }
    }

    fn warn(&mut self, name: &OsString, why: &str) {
        if self.warned.insert(name.clone()) {
            tracing::warn!(file = %name.to_string_lossy(), dir = %self.dir.display(), "ignoring marker: {why}");
        }
    }
}

fn launcher_from(r: LauncherReport, now: Millis) -> Launcher {
    Launcher {
        instance_id: r.instance_id,
        state: r.state,
        generation: r.generation,
        restarts: r.restarts,
        reason: r.reason,
        heard_at: now,
    }
}

fn health_from(r: HealthReport) -> Health {
    Health {
        when: millis_from_rfc3339(&r.when),
        instance_id: r.instance_id,
        ok: r.ok,
        gpus_lost: r.gpus_lost,
        vanished: false,
        reason: r.reason,
    }
}

/// The entry's own modification time (a symbolic link is never followed: it is refused above).
fn modified_millis(entry: &fs::DirEntry) -> Option<Millis> {
    let modified = entry.metadata().ok()?.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(since.as_millis() as Millis)
}

/// An agent's notice names its instance and its IP: decide believes it only for the instance EC2
/// lists at that IP (an IP can be reused while an old marker is still on disk, and any worker
/// can write any marker).
fn read_notice(path: &Path, ip: IpAddr) -> Result<Notice, String> {
    let body = read_small(path, "interruption marker")?;
    let m = InterruptionMarker::parse(body.as_bytes())
        .map_err(|e| format!("interruption marker is not the agent's JSON: {e}"))?;
    if m.ip != ip {
        return Err(format!("names {} in a file for {ip}", m.ip));
    }
    // Kept in the state as the notice's id: no room for a worker to fill it.
    if m.id.len() > MAX_NOTICE_ID || m.instance_id.len() > MAX_NOTICE_ID {
        return Err(format!(
            "notice or instance id longer than {MAX_NOTICE_ID} bytes"
        ));
    }
    let kind = match m.kind {
        AgentKind::SpotInterruption => NoticeKind::Interruption,
        AgentKind::LifecycleTerminate => NoticeKind::GroupTerminating,
        AgentKind::RebalanceRecommendation => NoticeKind::Rebalance,
        AgentKind::ScheduledMaintenance => NoticeKind::ScheduledChange,
    };
    let target = NoticeTarget::Agent {
        instance: m.instance_id.clone(),
        ip,
    };
    let deadline = m.action_time.as_deref().and_then(millis_from_rfc3339);
    Ok(Notice {
        id: format!("agent:{}:{}", m.instance_id, m.id),
        kind,
        target,
        deadline,
        source: "agent",
    })
}

/// A marker's body, at most `MAX_REPORT_BYTES` of it; it may have been swapped for a FIFO or a
/// link since the directory was listed.
fn read_small(path: &Path, what: &str) -> Result<String, String> {
    match untrusted::read_prefix(path, MAX_REPORT_BYTES) {
        Ok(Some(body)) => Ok(String::from_utf8_lossy(&body).into_owned()),
        Ok(None) => Err(format!("{what} vanished while read")),
        Err(e) => Err(format!("cannot read {what}: {e}")),
    }
}

#[cfg(test)]
mod tests;
