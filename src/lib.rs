//! dynamic-training: keeps a distributed training job on AWS running while workers come and go.
//!
//! The daemon is a control loop kept in three parts (ARCHITECTURE.md, "The stages of a pass"):
//! [`observe`] reads the world, [`decide`] is a pure function holding every rule, [`act`] applies.

pub mod act;
pub mod agent;
pub mod alerts;
pub mod aws;
pub mod clock;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod deadline;
pub mod decide;
pub mod digest;
pub mod fsutil;
pub mod manual;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod program;
pub mod protocol;
pub mod status;
pub mod store;
pub mod tags;
pub mod time;
pub mod untrusted;

/// Logs to stderr; `RUST_LOG` overrides the default `info`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
