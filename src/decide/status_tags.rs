//! The status tags a pass writes: only where an instance's tag differs from its status.

use std::collections::BTreeMap;

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// Status tags to write: every viewed instance whose tag differs, in list order.
pub(super) fn tags(p: &Inputs, out: &Draft) -> BTreeMap<WorkerStatus, Vec<String>> {
    let mut tags: BTreeMap<WorkerStatus, Vec<String>> = BTreeMap::new();
    for ((inst, view), facts) in p.list.iter().zip(&out.views).zip(&p.facts) {
        let Some((Some(status), _)) = view else {
            continue;
        };
        if facts.status != Some(*status) {
            tags.entry(*status).or_default().push(inst.id.clone());
        }
    }
    tags.values_mut().for_each(|ids| ids.sort_unstable());
    tags
}
