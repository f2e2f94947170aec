//! The integration tests, one crate: each file of tests/ was once its own test crate that linked
//! the whole AWS SDK again; here they share one link (and one build with the shipped binaries,
//! see scripts/build). `support` is the harness they share: moto, the real `dtd` and `dtctl`,
//! and the stand-ins for what moto cannot emulate.

mod support;

mod a_workers_word_arrives;
mod agent;
mod agent_program;
mod alerts;
mod apply;
mod aws_events;
mod capacity;
mod cli_reference;
mod clock;
mod config_defaults;
mod config_reference;
mod dashboard;
mod decide_launcher;
mod decide_props;
mod decide_rules;
mod decide_trust;
mod doctor;
mod goodput;
mod groups;
mod health;
mod health_agent;
mod hot_path;
mod hung_node;
mod in_place;
mod interruptions;
mod launcher_agent;
mod lifecycle_actions;
mod manual;
mod membership;
mod metrics;
mod mount_targets;
mod no_worker_speaks_for_another;
mod notify;
mod resilience;
mod sandbox;
mod stack;
mod stall;
mod story;
mod torchrun;
mod trace_bench;
mod unchanged_script;
mod untrusted_shared_dir;
mod worker_lies;
