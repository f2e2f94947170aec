//! Which sources a config asks observe to read besides the ones every pass reads.

use crate::config::Config;
use crate::model::Choice;

/// The job's progress file is read for stall detection, for joins at checkpoints, and for the
/// in-place strategy's quorum.
pub(super) fn reads_progress(cfg: &Config) -> bool {
    let in_place = (cfg.job.launcher.as_ref()).is_some_and(|l| l.in_place().is_some());
    cfg.job.stall.is_some() || cfg.join.at_checkpoint || in_place
}

/// The capacity choices, in order.
pub(super) fn choices(cfg: &Config) -> impl Iterator<Item = &Choice> {
    cfg.workers.capacity.iter().flat_map(|c| &c.choices)
}

/// The subnets the capacity choices name, each once.
pub(super) fn capacity_subnets(cfg: &Config) -> Vec<String> {
    let subnets: std::collections::BTreeSet<String> =
        choices(cfg).filter_map(|c| c.subnet.clone()).collect();
    subnets.into_iter().collect()
}
