//! The node's launcher (`job.launcher`, torchrun): started for every generation whose launch plan
//! lists this node, stopped (its signal, its grace, then SIGKILL of its process group) when a
//! plan no longer does or names a newer generation, started again after a backoff when it fails
//! while listed. Every change and every heartbeat is reported in `launcher_<ip>`.
//!
//! Under the elastic strategy a run outlives generations while its store holder (the plan's
//! first node) stays: a join is torchrun's own business (its rendezvous sees the new node
//! waiting), and a node the plan drops gets the stop signal sent to this node's *workers*, so
//! torchrun sees them fail and forms a new round without waiting for a collective's timeout.
//!
//! The plan is read as [`plan`] says: only dtd's, never an older one.

mod command;
mod compute;
mod plan;
mod report;
mod tree;

use std::time::Duration;

use tokio::time::Instant;

use super::Identity;
use crate::agent::reports::Reports;
use crate::config::{Config, Launcher};
use crate::program::{self, user, Program, Running, Status};
use crate::protocol::launch_plan;
use crate::protocol::launcher::{LauncherState, HEARTBEAT};
use command::Placement;
use report::Reporter;

/// How often the plan is read: a directory entry and a small file.
const POLL: Duration = Duration::from_millis(250);

/// The longest pause between two starts of a launcher that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How long the processes of a stopped launcher may take to be gone after SIGKILL.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// One run of the launcher, for one placement.
struct Run {
    at: Placement,
    /// Before `running`: dropped first (the agent stopping), it notes torchrun's workers while
    /// torchrun still lives and kills them; then `running` kills torchrun's own group.
    tree: tree::Tree,
    running: Running,
    /// Where the job's processes say how long their share of a step takes; none when it could
    /// not be made (the job trains on, unmeasured).
    step_times: Option<compute::StepTimes>,
}

impl Run {
    /// Kills what is left of the processes it started and waits (a few seconds at most) until
    /// they are gone.
    async fn reap(&self) {
        self.tree.kill();
        let until = Instant::now() + REAP_WAIT;
        while self.tree.any_alive() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What holds a listed node's launcher from starting for the current generation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hold {
    None,
    /// It exited 0 in this generation: the job is done here.
    Finished(u64),
    /// It failed `failures` times in this generation; next start at the instant.
    Failed {
        generation: u64,
        failures: u32,
        next: Instant,
    },
}

struct Supervisor<'a> {
    cfg: &'a Config,
    launcher: &'a Launcher,
    identity: Identity,
    plan: plan::PlanReader,
    hold: Hold,
    reporter: Reporter,
    /// Who the launcher runs as, or why it cannot start.
    run_as: Result<user::RunAs, user::RunAsError>,
}

/// Runs for ever (until the agent stops, which kills the launcher's process group).
pub async fn run(cfg: &Config, launcher: &Launcher, identity: Identity, reports: Reports) {
    let mut s = Supervisor::new(cfg, launcher, identity, reports);
    s.reporter.set(
        LauncherState::Idle,
        None,
        "no launch plan lists this node yet",
    );
    let mut current: Option<Run> = None;
    let strategy = launcher.strategy;
    loop {
        let wanted = s.plan.wanted(launcher, s.identity.ip);
        if let Some(mut run) = current.take() {
            match &wanted {
                Some(Some(at)) if run.at.same_run(at, strategy) => {
                    s.follow(&mut run, at);
                    current = Some(run);
                }
                Some(Some(at)) => {
                    s.stop(run, &format!("generation {} began", at.generation))
                        .await
                }
                Some(None) => {
                    s.stop(run, "the launch plan no longer lists this node")
                        .await
                }
                None => current = Some(run),
            }
        }
        if current.is_none() {
            if let Some(Some(at)) = wanted {
                current = s.start(at).await;
            }
        }
        let exited = match current.as_mut() {
            Some(run) => tokio::select! {
                status = run.running.wait() => Some(status),
                () = tokio::time::sleep(POLL) => None,
            },
            None => {
                tokio::time::sleep(POLL).await;
                None
            }
        };
        if let Some(status) = exited {
            if let Some(run) = current.take() {
                s.exited(run, status).await;
            }
        }
        if s.reporter.heartbeat() {
            if let Some(run) = current.as_mut() {
                run.tree.look();
                s.reporter.stopped_process(run.tree.stopped());
                s.reporter
                    .compute(run.step_times.as_ref().and_then(|t| t.read()));
            }
        }
    }
}

impl<'a> Supervisor<'a> {
    fn new(cfg: &'a Config, launcher: &'a Launcher, identity: Identity, reports: Reports) -> Self {
        let reporter = Reporter::new(reports, &identity, launcher.silent_after);
        let run_as = user::resolve(cfg, launcher);
        match &run_as {
            Ok(u) => {
                tracing::info!(uid = u.uid, gid = u.gid, user = ?u.name, "the launcher runs as the job's user")
            }
            Err(why) => tracing::error!("the launcher cannot start: {why}"),
        }
        Supervisor {
            cfg,
            launcher,
            plan: plan::PlanReader::new(cfg.shared_dir.join(launch_plan::PLAN_FILE)),
            identity,
            hold: Hold::None,
            reporter,
            run_as,
        }
    }

    /// Starts the launcher for `at` unless this generation finished here or is backing off.
    async fn start(&mut self, at: Placement) -> Option<Run> {
        let restarts = match self.hold {
            Hold::Finished(g) if g == at.generation => return None,
            Hold::Failed {
                generation,
                failures,
                next,
            } if generation == at.generation => {
                if Instant::now() < next {
                    return None;
                }
                failures
            }
            _ => 0,
        };
        let run_as = match &self.run_as {
            Ok(u) => u.clone(),
            Err(why) => {
                self.failed(&at, &Status::Refused(why.to_string()), Vec::new());
                return None;
            }
        };
        let args = command::args(self.launcher, &self.cfg.cluster, &at);
        let mut env = command::env(self.cfg, self.launcher, &self.identity, &at);
        user::add_env(&mut env, &run_as);
        let step_times = step_times(&run_as);
        if let Some(t) = &step_times {
            env.push((compute::VAR.into(), t.dir().into()));
        }
        let rdzv_id = at.rdzv_id(&self.cfg.cluster, self.launcher.strategy);
        let workdir = user::workdir(self.launcher, &run_as);
        let program = Program {
            path: std::path::Path::new(&self.launcher.torchrun[0]),
            sha256: self.launcher.sha256.as_ref(),
            args: &args,
            env,
            timeout: Duration::MAX,
            what: "launcher",
            echo: true,
            user: Some((run_as.uid, run_as.gid)),
            dir: workdir.as_deref(),
        };
        match program::start(&program).await {
            Ok(running) => {
                let pid = running.pid();
                tracing::info!(generation = at.generation, rank = at.rank, nnodes = at.nnodes(), %rdzv_id, ?pid, "launcher started");
                self.reporter.started(&at, rdzv_id, pid, restarts);
                let root = pid.and_then(|p| i32::try_from(p).ok());
                Some(Run {
                    at,
                    tree: tree::Tree::new(root),
                    running,
                    step_times,
                })
            }
            Err(status) => {
                self.failed(&at, &status, Vec::new());
                None
            }
        }
    }

    /// A run goes on into `next`. Under `elastic` the workers here leave the collective they
    /// share with nodes the plan dropped (the stop signal, to them and not to torchrun), and
    /// torchrun's next round forms without those nodes. Under `in_place` nothing here changes:
    /// torchft's next quorum takes the nodes in or leaves them out.
    fn follow(&mut self, run: &mut Run, next: &Placement) {
        if run.at == *next {
            return;
        }
        let lost = run.at.lost_in(next);
        let why = if self.launcher.in_place().is_some() {
            format!("one of {} nodes in torchft's quorum", next.nnodes())
        } else if lost.is_empty() {
            format!("one of {} nodes in torchrun's rendezvous", next.nnodes())
        } else {
            let signal = self.launcher.stop.signal;
            let kicked = run.tree.signal_children(signal);
            let lost: Vec<String> = lost.iter().map(|ip| ip.to_string()).collect();
            tracing::info!(
                generation = next.generation,
                ?lost,
                kicked,
                "the plan dropped nodes: {signal} to torchrun's workers for a new round"
            );
            format!(
                "one of {} nodes; {} left: {signal} to {kicked} worker(s) for a new round",
                next.nnodes(),
                lost.join(", ")
            )
        };
        run.at = next.clone();
        self.reporter.following(next, &why);
    }

    /// Stops a run: the stop signal to torchrun, the grace (heartbeats go on meanwhile, so the
    /// master does not take a slow stop for a dead node), then SIGKILL of the whole group.
    async fn stop(&mut self, mut run: Run, why: &str) {
        let stop = &self.launcher.stop;
        tracing::info!(
            generation = run.at.generation,
            "stopping the launcher: {why}"
        );
        self.reporter.stopping(why);
        run.tree.look();
        run.running.signal(stop.signal);
        let deadline = Instant::now() + stop.grace;
        let status = loop {
            let tick = (deadline - Instant::now()).min(HEARTBEAT);
            tokio::select! {
                status = run.running.wait() => break status,
                () = tokio::time::sleep(tick) => {}
            }
            if Instant::now() >= deadline {
                tracing::warn!(grace = ?stop.grace, "the launcher outlived its grace: killing its process group");
                run.tree.look();
                run.running.kill_group();
                break run.running.wait().await;
            }
            if self.reporter.heartbeat() {
                run.tree.look();
            }
        };
        run.reap().await;
        let tail = run.running.finish(true).await;
        tracing::info!(
            generation = run.at.generation,
            "launcher stopped ({})",
            describe(&status)
        );
        self.reporter.stopped(&status, why, tail);
    }

    /// It ended on its own: finished (exit 0) or failed (started again after the backoff).
    async fn exited(&mut self, run: Run, status: Status) {
        run.reap().await;
        let tail = run.running.finish(true).await;
        if status == Status::Exited(0) {
            tracing::info!(
                generation = run.at.generation,
                "the launcher finished (exit code 0)"
            );
            self.hold = Hold::Finished(run.at.generation);
            self.reporter.finished(tail);
            return;
        }
        self.failed(&run.at, &status, tail);
    }

    fn failed(&mut self, at: &Placement, status: &Status, tail: Vec<String>) {
        let failures = match self.hold {
            Hold::Failed {
                generation,
                failures,
                ..
            } if generation == at.generation => failures.saturating_add(1),
            _ => 1,
        };
        let pause = backoff(self.launcher.backoff, failures);
        self.hold = Hold::Failed {
            generation: at.generation,
            failures,
            next: Instant::now() + pause,
        };
        let why = format!(
            "{}; started again in {}",
            describe(status),
            humantime::format_duration(pause)
        );
        tracing::warn!(generation = at.generation, "the launcher failed: {why}");
        self.reporter.failed(status, why, tail);
    }
}

/// The run's directory for the job's step times, or none (said once per run) when it cannot be
/// made.
fn step_times(run_as: &user::RunAs) -> Option<compute::StepTimes> {
    match compute::StepTimes::create(run_as.uid, run_as.gid) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!("no directory for the job's step times (stragglers go unseen): {e}");
            None
        }
    }
}

/// `base`, doubled for every failure after the first, at most [`MAX_BACKOFF`].
fn backoff(base: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    base.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

fn describe(status: &Status) -> String {
    status.describe(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_five_minutes() {
        let base = Duration::from_secs(5);
        let got: Vec<u64> = [1, 2, 3, 7, 100, u32::MAX]
            .into_iter()
            .map(|f| backoff(base, f).as_secs())
            .collect();
        assert_eq!(got, [5, 10, 20, 300, 300, 300]);
    }
}
