//! Act: applies a pass's `Outcome` (the plan's half that is work; decide keeps the state) and
//! reports what happened as `Applied`. Every action is idempotent, so a pass that died half-way
//! is simply applied again by the next one.

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
