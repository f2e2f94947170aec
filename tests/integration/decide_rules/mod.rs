//! One test (or more) per rule of `decide`, each asserting what a user would see: the host file's
//! lines, the status tags written, the instances terminated, the job notification, the journal.
//! One file per rule family, as decide itself is split; the builders are in support/world.rs.

mod capacity;
mod group;
mod health;
mod hung;
mod joining;
mod leaving;
mod notices;
mod partial_views;
mod quorum;
mod replaced_first;
mod second_thoughts;
mod stall;
mod stragglers;
mod trains_on;
mod wake;
