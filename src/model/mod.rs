//! Plain data shared by observe, decide and act: what was seen, what is remembered, what to do.

mod capacity;
mod event;
mod observed;
mod outcome;
mod part;
mod removal;
mod state;
mod totals;
mod worker;

pub use crate::tags::Tags;
pub use capacity::{
    CapacityStatus, Choice, LaunchChoice, Reservation, Unavailable, CAPACITY_BLOCK_TERMINATES_MS,
    CAPACITY_BLOCK_WARNS_MS, NO_CAPACITY,
};
pub use event::{Event, EventKind, QuorumCost, EVENT_LINE_LIMIT};
pub use observed::*;
pub use outcome::{
    Action, Applied, HookAction, HookResult, Outcome, Plan, StallChange, LAUNCH_RETRY_MS,
};
pub use part::{Part, Source, Step};
pub use removal::{Cause, Ending, Removal, Stage};
pub use state::*;
pub use totals::Totals;
pub use worker::*;

/// Milliseconds since the Unix epoch. Decide receives "now" as one of these; it never reads a clock.
pub type Millis = u64;

/// A time for people and files, to the second, in UTC: `2026-11-24T08:16:41Z`.
pub fn rfc3339(at: Millis) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(at))
}

/// A time that has passed, for people, to the second: `10m 3s`. Rounded down: a wait is not
/// over before it is.
pub fn span(ms: Millis) -> String {
    seconds(ms / 1000)
}

/// A time left, for people, to the second. Rounded up: `0s left` while some is would be wrong.
pub fn span_left(ms: Millis) -> String {
    seconds(ms.div_ceil(1000))
}

/// A measured duration (between two journaled events), for people, to the nearest second.
pub fn span_measured(ms: Millis) -> String {
    seconds(ms.saturating_add(500) / 1000)
}

fn seconds(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}
