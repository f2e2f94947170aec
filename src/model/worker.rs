//! A worker's status, as its `elastic_worker_status` tag and `dtctl status` show it.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::Millis;

/// The status tag key, kept from the 2018 protocol.
pub const STATUS_TAG: &str = "elastic_worker_status";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkerStatus {
    Preparing,
    AddQueued,
    Added,
    RemovalQueued,
    Removed,
    PrepareFailed,
    Interrupted,
}

impl WorkerStatus {
    pub const ALL: [WorkerStatus; 7] = [
        WorkerStatus::Preparing,
        WorkerStatus::AddQueued,
        WorkerStatus::Added,
        WorkerStatus::RemovalQueued,
        WorkerStatus::Removed,
        WorkerStatus::PrepareFailed,
        WorkerStatus::Interrupted,
    ];

    pub fn as_tag(self) -> &'static str {
        match self {
            WorkerStatus::Preparing => "PREPARING",
            WorkerStatus::AddQueued => "ADD_QUEUED",
            WorkerStatus::Added => "ADDED",
            WorkerStatus::RemovalQueued => "REMOVAL_QUEUED",
            WorkerStatus::Removed => "REMOVED",
            WorkerStatus::PrepareFailed => "PREPARE_FAILED",
            WorkerStatus::Interrupted => "INTERRUPTED",
        }
    }

    pub fn from_tag(value: &str) -> Option<WorkerStatus> {
        WorkerStatus::ALL.into_iter().find(|s| s.as_tag() == value)
    }
}

/// One row of `dtctl status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerView {
    pub id: String,
    pub ip: IpAddr,
    pub instance_type: String,
    pub az: String,
    pub market: String,
    /// The status tag value, or `BASE` for base hosts.
    pub status: String,
    pub since: Option<Millis>,
    pub waiting_for: Option<String>,
    /// Its launcher (`job.launcher`), as its agent last reported it: `running g7 (node 0 of 3)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
}

/// Where a status row's instance details come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowSource {
    /// An index into the snapshot's instances.
    Instance(usize),
    /// An index into the plan's remembered members (the EC2 view failed).
    Member(usize),
}

/// What a status row shows in its STATUS column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Status(WorkerStatus),
    /// A base host or the master: never managed, never removed.
    Base,
    /// Carries the cluster's tags but not the elastic tag, and never had a status.
    Unmanaged,
}

impl Shown {
    pub fn label(self) -> &'static str {
        match self {
            Shown::Status(s) => s.as_tag(),
            Shown::Base => "BASE",
            Shown::Unmanaged => "-",
        }
    }
}

/// What decide says about one worker: its status and what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub source: RowSource,
    pub shown: Shown,
    pub waiting_for: Option<String>,
}

impl Row {
    pub fn label(&self) -> &'static str {
        self.shown.label()
    }
}
