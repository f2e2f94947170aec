//! The launch plan as this node's agent reads it: only when dtd's user owns it (workers write
//! the shared directory through an access point that makes their files someone else's), and
//! never one older than a plan already followed, so a worker cannot replay an old membership.

use std::net::IpAddr;
use std::path::PathBuf;

use super::command::Placement;
use crate::config::Launcher;
use crate::protocol::launch_plan::{self, LaunchPlan};

pub struct PlanReader {
    path: PathBuf,
    /// The newest generation of a plan followed: an older plan is a replay.
    newest: Option<u64>,
    /// The last problem with the plan, warned once until it changes.
    problem: Option<String>,
}

impl PlanReader {
    pub fn new(path: PathBuf) -> PlanReader {
        PlanReader {
            path,
            newest: None,
            problem: None,
        }
    }

    /// Where the newest plan places this node: `Some(None)` when it does not list it, `None`
    /// when there is no plan to follow (none yet, unreadable, or a replay).
    pub fn wanted(&mut self, launcher: &Launcher, ip: IpAddr) -> Option<Option<Placement>> {
        let plan = self.read_plan()?;
        if self.newest.is_some_and(|n| plan.generation < n) {
            let problem = format!(
                "ignoring a launch plan of generation {}: generation {} was already followed",
                plan.generation,
                self.newest.unwrap_or_default()
            );
            self.warn(problem);
            return None;
        }
        self.newest = Some(plan.generation);
        self.problem = None;
        let port = launcher.rdzv.port;
        Some(Placement::of(&plan, ip, port, launcher.strategy))
    }

    fn read_plan(&mut self) -> Option<LaunchPlan> {
        let owner = Some(crate::fsutil::own_uid());
        let read = crate::untrusted::read_owned(&self.path, launch_plan::MAX_BYTES, owner);
        let body = match read {
            Ok(Some(body)) => body,
            Ok(None) => return None,
            Err(e) => {
                self.warn(format!("cannot use {}: {e}", self.path.display()));
                return None;
            }
        };
        match LaunchPlan::parse(&body) {
            Ok(plan) => Some(plan),
            Err(e) => {
                self.warn(format!("{}: {e}", self.path.display()));
                None
            }
        }
    }

    fn warn(&mut self, problem: String) {
        if self.problem.as_ref() != Some(&problem) {
            tracing::warn!("launcher: {problem}");
            self.problem = Some(problem);
        }
    }
}
