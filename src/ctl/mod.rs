//! The commands behind `dtctl`: `local` reads and writes the daemon's files, `ec2` and `asg`
//! talk to AWS.

pub mod asg;
pub mod doctor;
pub mod ec2;
pub mod explain;
pub mod follow;
pub mod goodput;
pub mod local;
pub mod scale;
pub mod story;
