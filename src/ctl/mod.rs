//! The commands behind `dtctl`: `local` reads and writes the daemon's files, `ec2` talks to AWS.

pub mod ec2;
pub mod local;
