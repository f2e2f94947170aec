//! The GPU-time totals a restarted `dtd` carries on from: read back from its last `status.json`.

use serde::Deserialize;

use super::STATUS_LIMIT;
use crate::model::Totals;

/// The totals an earlier dtd wrote in its last status, if it can be read: counting goes on
/// from there. A status that is missing or unreadable starts the count again (with a warning).
pub fn read_totals(path: &std::path::Path) -> Option<Totals> {
    #[derive(Deserialize)]
    struct Last {
        #[serde(default)]
        totals: Option<Totals>,
    }
    let bytes = match crate::untrusted::read(path, STATUS_LIMIT) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!("{}: {e}; GPU time is counted from now", path.display());
            return None;
        }
    };
    match serde_json::from_slice::<Last>(&bytes) {
        Ok(last) => last.totals,
        Err(e) => {
            tracing::warn!("{}: {e}; GPU time is counted from now", path.display());
            None
        }
    }
}
