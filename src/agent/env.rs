//! What every program the agent runs learns about where it runs (docs/operating.md, "dtd").

use std::path::Path;

use super::Identity;
use crate::program::EnvVar;

pub fn agent_env(id: &Identity, shared_dir: &Path, cluster: &str) -> Vec<EnvVar> {
    vec![
        ("DT_AGENT".into(), "1".into()),
        ("DT_IP".into(), id.ip.to_string().into()),
        ("DT_INSTANCE_ID".into(), id.instance_id.clone().into()),
        ("DT_SHARED_DIR".into(), shared_dir.into()),
        ("DT_CLUSTER".into(), cluster.into()),
    ]
}
