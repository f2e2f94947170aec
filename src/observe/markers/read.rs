//! One report file read: its body parsed, and its signature checked against the key it names.
//! Whose key that must be is not known here (see [`super::book`]); a file is read again only
//! when it is replaced (a new [`FileVersion`]).

use std::net::IpAddr;
use std::path::Path;

use crate::model::{HealthSeen, Millis, Notice, NoticeKind, NoticeTarget};
use crate::observe::file_version::FileVersion;
use crate::protocol::health::HealthReport;
use crate::protocol::interruption::{InterruptionMarker, NoticeKind as AgentKind};
use crate::protocol::launcher::{LauncherReport, LauncherState, StepCompute};
use crate::protocol::markers::{MarkerKind, MarkerName, MAX_REPORT_BYTES};
use crate::protocol::report;
use crate::protocol::signed::{self, SignError, Signed};
use crate::time::parse_rfc3339;
use crate::untrusted;

/// Longer than any notice id the agent writes (`imds:<kind>:<time or event id>`).
const MAX_NOTICE_ID: usize = 128;
/// Kept in the state and shown: no room for a worker to fill it.
const MAX_INSTANCE_ID: usize = 64;

/// A report as read: from a file (`workers.reports: unsigned`) or from its agent's connection.
#[derive(Debug, Clone)]
pub struct Read {
    /// The file's version; `None`: it came over the agent's connection.
    pub version: Option<FileVersion>,
    /// When it was first seen: a file's modification time, or when dtd received it (a success
    /// marker's is when the worker was ready).
    pub modified: Option<Millis>,
    /// Who signed it (verified against the key it names), or why no one did.
    pub signed: Result<Signed, SignError>,
    /// What it says; `Err`: it cannot be read or does not parse.
    pub body: Result<Body, BodyError>,
}

/// Why a report says nothing dtd can use. The causes are kept as words: a report is kept (and
/// compared) until its file changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("vanished while read")]
    Vanished,
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// Not the report its name says (the protocol's words).
    #[error("{0}")]
    Malformed(String),
    #[error("interruption marker is not the agent's JSON: {0}")]
    NotANotice(String),
    #[error("names {named} in a file for {ip}")]
    OtherIp { named: IpAddr, ip: IpAddr },
    #[error("notice or instance id longer than {MAX_NOTICE_ID} bytes")]
    IdTooLong,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `prepare_data_success_<ip>`: the instance it names, if any (a 2018 marker names none).
    Success {
        instance_id: Option<String>,
    },
    /// `prepare_data_failed_<ip>`: the failure in one line for people.
    Failed {
        instance_id: Option<String>,
        summary: String,
    },
    Health(HealthSeen),
    Launcher(LauncherBody),
    Notice(Notice),
}

/// A launcher report as dtd keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherBody {
    pub instance_id: String,
    pub state: LauncherState,
    pub generation: Option<u64>,
    pub restarts: u32,
    pub reason: String,
    pub stopped: Option<u32>,
    pub compute: Option<StepCompute>,
}

impl Body {
    /// The instance the report names (a 2018 marker names none).
    pub fn instance_id(&self) -> Option<&str> {
        match self {
            Body::Success { instance_id } | Body::Failed { instance_id, .. } => {
                instance_id.as_deref()
            }
            Body::Health(h) => Some(&h.instance_id),
            Body::Launcher(l) => Some(&l.instance_id),
            Body::Notice(n) => match &n.target {
                NoticeTarget::Agent { instance, .. } => Some(instance),
                _ => None,
            },
        }
    }
}

/// Reads the report at `path` (a regular file, already listed as `name`).
pub fn read(
    path: &Path,
    name: &MarkerName,
    version: FileVersion,
    modified: Option<Millis>,
) -> Read {
    let bytes = match untrusted::read_prefix(path, MAX_REPORT_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return failed(version, modified, BodyError::Vanished),
        Err(e) => return failed(version, modified, BodyError::Unreadable(e.to_string())),
    };
    from_bytes(name, &bytes, Some(version), modified)
}

/// A report's bytes (a file's, or a line from its agent's connection) read as `name`.
pub fn from_bytes(
    name: &MarkerName,
    bytes: &[u8],
    version: Option<FileVersion>,
    modified: Option<Millis>,
) -> Read {
    Read {
        version,
        modified,
        signed: signed::open(name, bytes),
        body: parse(name, bytes),
    }
}

fn failed(version: FileVersion, modified: Option<Millis>, why: BodyError) -> Read {
    Read {
        version: Some(version),
        modified,
        signed: Err(SignError::Unsigned),
        body: Err(why),
    }
}

fn parse(name: &MarkerName, bytes: &[u8]) -> Result<Body, BodyError> {
    let malformed = |e: crate::protocol::ParseError| BodyError::Malformed(e.to_string());
    match name.kind {
        MarkerKind::Success => Ok(Body::Success {
            instance_id: report::owner(bytes).map(|id| short(&id)),
        }),
        MarkerKind::Failed => {
            let text = String::from_utf8_lossy(bytes);
            let summary = report::summary(&text).map_err(malformed)?;
            let instance_id = report::owner(bytes).map(|id| short(&id));
            Ok(Body::Failed {
                instance_id,
                summary,
            })
        }
        MarkerKind::Health => (HealthReport::parse(bytes))
            .map(|r| Body::Health(health(r)))
            .map_err(malformed),
        MarkerKind::Launcher => (LauncherReport::parse(bytes))
            .map(|r| Body::Launcher(launcher(r)))
            .map_err(malformed),
        MarkerKind::Interruption => notice(bytes, name.ip).map(Body::Notice),
    }
}

fn short(id: &str) -> String {
    id.chars().take(MAX_INSTANCE_ID).collect()
}

fn health(r: HealthReport) -> HealthSeen {
    HealthSeen {
        when: parse_rfc3339(&r.when),
        instance_id: short(&r.instance_id),
        ok: r.ok,
        gpus_lost: r.gpus_lost,
        reason: r.reason,
    }
}

fn launcher(r: LauncherReport) -> LauncherBody {
    LauncherBody {
        instance_id: short(&r.instance_id),
        state: r.state,
        generation: r.generation,
        restarts: r.restarts,
        reason: r.reason,
        stopped: r.stopped,
        compute: r.compute,
    }
}

/// An agent's notice names its instance and its IP.
fn notice(bytes: &[u8], ip: IpAddr) -> Result<Notice, BodyError> {
    let m = InterruptionMarker::parse(bytes).map_err(|e| BodyError::NotANotice(e.to_string()))?;
    if m.ip != ip {
        return Err(BodyError::OtherIp { named: m.ip, ip });
    }
    // Kept in the state as the notice's id: no room for a worker to fill it.
    if m.id.len() > MAX_NOTICE_ID || m.instance_id.len() > MAX_NOTICE_ID {
        return Err(BodyError::IdTooLong);
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
    let deadline = m.action_time.as_deref().and_then(parse_rfc3339);
    Ok(Notice {
        id: format!("agent:{}:{}", m.instance_id, m.id),
        kind,
        target,
        deadline,
        source: "agent",
    })
}
