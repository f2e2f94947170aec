//! Why a configuration cannot be used: its file cannot be read, its text is not a configuration
//! (the message names the key and, when it can be found, the line), or it holds a secret others
//! can read.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::position::{Key, Line};
use crate::protocol::host_files::TemplateError;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // Not a `source`: the message holds the reason, and `{:#}` would print it twice.
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {error}")]
    Invalid { path: PathBuf, error: InvalidConfig },
    #[error("{path}: {error}")]
    Exposed {
        path: PathBuf,
        error: super::alerts::InlineSecret,
    },
}

/// Why a configuration's text is not a configuration.
#[derive(Debug, thiserror::Error)]
pub enum InvalidConfig {
    /// What the YAML reader found, where it says itself: syntax, types, the checks made as a
    /// value is read.
    #[error("{0}")]
    Yaml(serde_yaml::Error),
    /// What the YAML reader found at a key whose line it does not say.
    #[error("{path}: {error}{line}")]
    AtKey {
        path: String,
        error: serde_yaml::Error,
        line: Line,
    },
    /// A rule checked once the whole file is read.
    #[error("{rule}{line}")]
    Rule { rule: Rule, line: Line },
    /// A host file's template that cannot be used.
    #[error("hostfiles[{index}].template: {error}{line}")]
    Template {
        index: usize,
        error: TemplateUnusable,
        line: Line,
    },
}

impl InvalidConfig {
    /// serde_yaml places syntax and type errors itself; errors raised by our own checks (durations,
    /// signals, cross-field rules) carry no position, so the key's line is looked up from its path.
    pub(super) fn from_yaml(text: &str, e: serde_path_to_error::Error<serde_yaml::Error>) -> Self {
        let path = e.path().to_string();
        let error = e.into_inner();
        // Custom errors carry a location serde_yaml does not print (the document's start).
        if path == "." || error.to_string().contains(" at line ") {
            return InvalidConfig::Yaml(error);
        }
        let keys: Vec<&str> = path
            .split('.')
            .map(|seg| seg.split('[').next().unwrap_or(seg))
            .filter(|seg| !seg.is_empty() && *seg != "?")
            .collect();
        let line = super::position::line_of_path(text, &keys);
        InvalidConfig::AtKey { path, error, line }
    }
}

/// Why a host file's template cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateUnusable {
    #[error("{path} must be an absolute path")]
    Relative { path: PathBuf },
    #[error("cannot read {path}: {error}")]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} {error}")]
    Invalid { path: PathBuf, error: TemplateError },
}

/// A rule that serde cannot check on one value: it spans keys, or needs the whole file.
#[derive(Debug, thiserror::Error)]
pub enum Rule {
    #[error("shared_dir must be an absolute path")]
    SharedDirRelative,
    #[error("job.progress must be an absolute path")]
    ProgressRelative,
    #[error("hostfiles: path {0} must be an absolute file path")]
    HostfileNotAFile(PathBuf),
    #[error("events.wait must be within 1s..=20s (SQS long polling)")]
    QueueWait,
    #[error("agent.attempts must be at least 1")]
    NoAttempt,
    #[error("resync must be at least interval: a listing runs at most once a pass")]
    ResyncBelowInterval,
    #[error("shared_poll must be within 10ms..=60s")]
    SharedPoll,
    #[error("shared_fs_refresh must be at least 1s")]
    SharedFsRefresh,
    #[error("agent.health.command must name a program (an argv like [/path/check, --flag])")]
    HealthWithoutProgram,
    #[error(
        "agent.health.timeout ({}) must be shorter than agent.health.interval ({}): a check \
         that may run the whole interval cannot report once every interval",
        shown(.timeout),
        shown(.interval)
    )]
    HealthTimeout {
        timeout: Duration,
        interval: Duration,
    },
    #[error(
        "workers.prepare_timeout ({}) is shorter than the agent's own limit ({}: agent.timeout \
         × agent.attempts plus the retry delays and agent.health.timeout); a worker still \
         preparing would be abandoned",
        shown(.timeout),
        shown(.limit)
    )]
    PrepareTimeoutShort { timeout: Duration, limit: Duration },
    #[error(
        "workers.prepare_timeout ({}) is longer than 48h, the most a lifecycle hook can hold an instance",
        shown(.0)
    )]
    PrepareTimeoutLong(Duration),
    #[error(
        "join.sizes names {size} workers, more than workers.max ({max}): the job never grows to it"
    )]
    JoinSizeAboveMax { size: usize, max: usize },
    #[error(
        "job.ack.by: launcher needs job.launcher (the agents' launcher reports are the acknowledgement)"
    )]
    AckByLauncherAlone,
    #[error("job.launcher.elastic: only with `strategy: elastic` (the strategy is {0})")]
    ElasticSettingsAlone(&'static str),
    #[error("job.launcher.in_place: only with `strategy: in_place` (the strategy is {0})")]
    InPlaceSettingsAlone(&'static str),
    #[error(
        "job.launcher.in_place: required with `strategy: in_place`: at least \
         `{{ lighthouse: <the master's IP>:29510 }}`, where dtd runs torchft's Lighthouse"
    )]
    InPlaceWithoutSettings,
    #[error(
        "workers.reports: unsigned is for clusters without dtd agent, but {0} is configured: its \
         reports are signed (leave workers.reports out)"
    )]
    UnsignedWithAgent(&'static str),
    #[error("master must not also be a base host")]
    MasterIsBaseHost(IpAddr),
}

impl Rule {
    /// The key the rule is about, whose line the message gives.
    pub(super) fn key(&self) -> Key {
        match self {
            Rule::SharedDirRelative => Key::Anywhere("shared_dir"),
            Rule::ProgressRelative => Key::Anywhere("progress"),
            Rule::HostfileNotAFile(_) => Key::Anywhere("hostfiles"),
            Rule::QueueWait => Key::Anywhere("wait"),
            Rule::NoAttempt => Key::Anywhere("attempts"),
            Rule::ResyncBelowInterval => Key::Anywhere("resync"),
            Rule::SharedPoll => Key::Anywhere("shared_poll"),
            Rule::SharedFsRefresh => Key::Anywhere("shared_fs_refresh"),
            Rule::HealthWithoutProgram => Key::Path(&["agent", "health", "command"]),
            Rule::HealthTimeout { .. } => Key::Path(&["agent", "health", "timeout"]),
            Rule::PrepareTimeoutShort { .. } | Rule::PrepareTimeoutLong(_) => {
                Key::Anywhere("prepare_timeout")
            }
            Rule::JoinSizeAboveMax { .. } => Key::Path(&["join", "sizes"]),
            Rule::AckByLauncherAlone => Key::Path(&["job", "ack", "by"]),
            Rule::ElasticSettingsAlone(_) => Key::Path(&["job", "launcher", "elastic"]),
            Rule::InPlaceSettingsAlone(_) => Key::Path(&["job", "launcher", "in_place"]),
            Rule::InPlaceWithoutSettings => Key::Path(&["job", "launcher", "strategy"]),
            Rule::UnsignedWithAgent(_) => Key::Path(&["workers", "reports"]),
            Rule::MasterIsBaseHost(_) => Key::Anywhere("master"),
        }
    }

    /// The error, with the line of its key in `text`.
    pub(super) fn placed(self, text: &str) -> InvalidConfig {
        let line = self.key().line(text);
        InvalidConfig::Rule { rule: self, line }
    }
}

/// A duration as the config writes it (`1h 30m`).
fn shown(d: &Duration) -> humantime::FormattedDuration {
    humantime::format_duration(*d)
}
