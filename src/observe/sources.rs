//! Which sources a config asks observe to read besides the ones every pass reads.

use crate::config::Config;
use crate::model::Choice;

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
