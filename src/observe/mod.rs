//! Observe: one module per source, each returning plain data or saying why it is incomplete, and
//! the [`observer::Observer`] that builds a pass's whole snapshot from them.

pub mod acks;
pub mod agents;
pub mod asg;
pub mod ec2;
pub mod ec2_view;
pub mod efs;
pub mod eventbridge;
pub mod file_version;
pub mod fleet;
pub mod inbox;
pub mod lookups;
pub mod markers;
pub mod observer;
pub mod progress;
pub mod queue;
pub mod reports;
pub mod reservations;
pub mod shared;
pub mod shared_changes;
mod sources;
pub mod spot_prices;
pub mod strays;
