//! Observe: one module per source, each returning plain data or saying why it is incomplete.

pub mod acks;
pub mod asg;
pub mod ec2;
pub mod efs;
pub mod eventbridge;
pub mod markers;
pub mod progress;
pub mod queue;
pub mod shared_changes;
