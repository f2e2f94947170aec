//! Plain data shared by observe, decide and act: what was seen, what is remembered, what to do.

mod event;
pub mod fleet;
mod observed;
mod outcome;
mod part;
mod removal;
mod state;
mod totals;
mod worker;

pub use crate::tags::Tags;
pub use event::{Event, EventKind, EVENT_LINE_LIMIT};
pub use observed::*;
pub use outcome::{Action, Applied, HookAction, HookResult, Outcome, Plan, StallChange};
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

/// A wait for people, to the second: `10m 3s`.
pub fn span(ms: Millis) -> String {
    humantime::format_duration(std::time::Duration::from_secs(ms / 1000)).to_string()
}
