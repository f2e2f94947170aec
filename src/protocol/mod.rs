//! The wire formats spoken through the shared directory, each named, parsed and rendered here
//! only, so the agent and the master (and `dtctl`) cannot drift apart (ARCHITECTURE.md, "Sources of
//! truth and contracts"). The bytes on disk are a contract with jobs and with 2018 users: a change
//! here is a change of protocol.
//!
//! | file | written by | read by | module |
//! |---|---|---|---|
//! | `prepare_data_success_<ip>`, `prepare_data_failed_<ip>` | `dtd agent` (or a 2018 script) | `dtd run` | [`markers`] (names), [`report`] (bodies) |
//! | `interruption_<ip>` | `dtd agent` | `dtd run` | [`markers`] (name), [`interruption`] (body) |
//! | `health_<ip>` | `dtd agent` (its health check) | `dtd run` | [`markers`] (name), [`health`] (body) |
//! | `launcher_<ip>` | `dtd agent` (with `job.launcher`) | `dtd run` | [`markers`] (name), [`launcher`] (body) |
//! | `notices` | `dtd run`, before it signals the job | the job | [`notices`] (name) |
//! | `launch_plan` | `dtd run` (with `job.launcher`), before `generation` | `dtd agent` | [`launch_plan`] |
//! | `host_worker_log` | the job | `dtd run` | [`host_worker_log`] |
//! | `generation` | `dtd run`, after the host files | the job | [`generation`] |
//! | `ack` | the job, or `dtctl ack G` | `dtd run` | [`generation`] |
//! | `progress` | the job (optional) | `dtd run`, with `job.stall` | [`progress`] |
//! | `capacity_refusals` (dtd's state directory) | `dtctl add` | `dtd run` | [`capacity_refusals`] |
//! | the host files (`hostfiles`) | `dtd run`, before `generation` | the job | [`host_files`] |
//! | `dtd_address` | `dtd run` (signed reports) | `dtd agent` | [`channel`] |
//!
//! With signed reports (the default) the agents' reports do not travel as files at all: each
//! agent sends them to `dtd run` over its own connection ([`channel`]), proving its instance with
//! EC2's instance identity document ([`identity`]).

pub mod capacity_refusals;
pub mod channel;
mod error;
pub mod generation;
pub mod health;
pub mod host_files;
pub mod host_worker_log;
pub mod identity;
pub mod interruption;
pub mod launch_plan;
pub mod launcher;
pub mod markers;
pub mod notices;
pub mod progress;
pub mod report;
pub mod signed;

pub use error::ParseError;
