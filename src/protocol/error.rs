//! Why a body read from the shared directory is not the format its name promises. Any worker can
//! write there, so the reader says what it expected and what was wrong, never more.

use std::net::IpAddr;

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("health report is not the agent's JSON: {0}")]
    Health(serde_json::Error),
    #[error("launcher report is not the agent's JSON: {0}")]
    Launcher(serde_json::Error),
    #[error("failure report is not JSON: {0}")]
    Failure(serde_json::Error),
    #[error("the launch plan is not dtd's JSON: {0}")]
    Plan(serde_json::Error),
    /// Two ranks for one node.
    #[error("the launch plan lists {0} twice")]
    PlanListsTwice(IpAddr),
    #[error("does not hold the job's progress ({{\"step\": N, \"time\": \"…\"}}): {0}")]
    Progress(serde_json::Error),
}
