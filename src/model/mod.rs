//! Plain data shared by observe, decide and act: what was seen, what is remembered, what to do.

mod event;
pub mod fleet;
mod observed;
mod outcome;
mod removal;
mod state;
mod worker;

pub use crate::tags::Tags;
pub use event::{Event, EventKind};
pub use observed::*;
pub use outcome::{Action, HookAction, HookResult, Outcome, Plan};
pub use removal::{Cause, Ending, Removal, Stage};
pub use state::*;
pub use worker::*;

/// Milliseconds since the Unix epoch. Decide receives "now" as one of these; it never reads a clock.
pub type Millis = u64;
