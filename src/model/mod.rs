//! Plain data shared by observe, decide and act: what was seen, what is remembered, what to do.

mod capacity;
mod event;
mod goodput;
mod observed;
mod outcome;
mod part;
mod refusal;
mod removal;
mod state;
mod state_before_records;
mod totals;
mod worker;
mod worker_record;

pub use crate::tags::Tags;
pub use capacity::{
    CapacityStatus, Choice, LaunchChoice, Reservation, Unavailable, CAPACITY_BLOCK_TERMINATES_MS,
    CAPACITY_BLOCK_WARNS_MS, NO_CAPACITY,
};
pub use event::{Event, EventKind, QuorumCost, EVENT_LINE_LIMIT};
pub use goodput::{Bucket, Change, Goodput, Mark, Seen, Spent, StepRun, CHANGES_KEPT, MARKS_KEPT};
pub use observed::*;
pub use outcome::{
    Action, Applied, HookAction, HookResult, LaunchFailed, Outcome, Plan, StallChange,
    LAUNCH_RETRY_MS,
};
pub use part::{Part, Source, Step};
pub use refusal::RefusalKey;
pub use removal::{Cause, Ending, Removal, Stage};
pub use state::*;
pub use totals::Totals;
pub use worker::*;
pub use worker_record::{LaunchWait, Pending, Pinned, Pins, StatusSince, WorkerRecord};

pub use crate::time::{rfc3339, span, span_left, span_measured, Millis};
