//! Property tests of the safety rules of ARCHITECTURE.md over random worlds, random remembered states
//! and random clocks, fed through several passes the way the daemon runs decide: the plan's state
//! comes back as the next pass's memory, while people, the job and AWS change the world between
//! passes (tags deleted, markers appearing, acks advancing, instances vanishing, sources failing).
//!
//! One file per family of rules; support/ holds the scenarios, the world and the simulated
//! daemon they share.

mod coverage;
mod generation_and_journal;
mod host_file;
mod support;
mod terminations;
mod views;
