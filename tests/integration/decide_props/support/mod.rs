//! The simulation the properties run: random scenarios over a world of slots, fed pass by pass
//! through decide as the daemon runs it.

mod passes;
mod reader;
mod scenario;
mod slots;
mod world;

pub use passes::{acknowledged, by_id, config, decisions, interrupted_ids, run};
pub use scenario::{scenario, Scenario, Step};
pub use slots::has_cluster_tags;
