//! What a pass reads ([`Source`]) or does ([`Step`]) that can fail, by the one name logs, the
//! status report and the journal give it.

use std::fmt;

/// A source a pass reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Instances,
    Markers,
    Acks,
    Group,
    EventQueue,
    MountTargets,
}

/// A step of acting on a decision, or of recording it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    HostFiles,
    JobNotification,
    StallCommand,
    StatusTags,
    ReplacementLaunches,
    Terminations,
    ScaleInProtection,
    GroupActions,
    QueueDeletes,
    Journal,
    StateFile,
    AlertOutbox,
    PublishAddress,
}

/// Either, as a failure is remembered until it recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Source(Source),
    Step(Step),
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Instances => "EC2 instances",
            Source::Markers => "prepare-data markers",
            Source::Acks => "acknowledgements",
            Source::Group => "Auto Scaling group",
            Source::EventQueue => "event queue",
            Source::MountTargets => "EFS mount targets",
        }
    }
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::HostFiles => "host files",
            Step::JobNotification => "job notification",
            Step::StallCommand => "stall command",
            Step::StatusTags => "status tags",
            Step::ReplacementLaunches => "replacement launches",
            Step::Terminations => "terminations",
            Step::ScaleInProtection => "scale-in protection",
            Step::GroupActions => "group actions",
            Step::QueueDeletes => "event queue deletes",
            Step::Journal => "events journal",
            Step::StateFile => "state file",
            Step::AlertOutbox => "alert outbox",
            Step::PublishAddress => "dtd's address for the agents",
        }
    }
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Source(s) => s.name(),
            Part::Step(s) => s.name(),
        }
    }
}

impl From<Source> for Part {
    fn from(s: Source) -> Part {
        Part::Source(s)
    }
}

impl From<Step> for Part {
    fn from(s: Step) -> Part {
        Part::Step(s)
    }
}

macro_rules! display_by_name {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    )*};
}
display_by_name!(Source, Step, Part);
