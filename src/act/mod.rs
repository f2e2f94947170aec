//! Act: applies a plan. Every action is idempotent, so a pass that died half-way is simply
//! applied again by the next one.

pub mod apply;
pub mod asg;
pub mod capacity;
pub mod ec2;
pub mod hook;
pub mod hostfiles;
pub mod job_pid;
pub mod journal;
pub mod notify;
pub mod queue;
pub mod stall;
