//! Applies a pass's outcome: the host files and the generation file, then the job's
//! notification, the status tags, the terminations and the group's actions. Every step runs
//! whatever the others did; each result is reported under the name `dtctl status` shows.

use std::path::PathBuf;

use crate::config::{Config, HostfileSpec, Notify, TemplateRef};
use crate::deadline::Deadline;
use crate::model::*;

use super::hook::HookError;
use super::hostfiles::HostfileError;
use super::notify::NotifyError;
use super::queue::EventQueue;
use super::{asg, capacity, ec2, hostfiles, notify};

/// What applying an outcome acts on.
pub struct Actuators {
    pub ec2: aws_sdk_ec2::Client,
    /// The worker group's client and name, when the config names a group.
    pub group: Option<(aws_sdk_autoscaling::Client, String)>,
    pub hostfiles: Vec<HostfileSpec>,
    pub generation_file: PathBuf,
    /// `<shared_dir>/launch_plan`, with `job.launcher`: written between the host files and the
    /// generation file.
    pub launch_plan: Option<PathBuf>,
    /// `<shared_dir>/notices`, written before the signal (signal mode only).
    pub notices_file: PathBuf,
    pub notify: Notify,
    /// What replacements of unhealthy workers are launched from (`workers.launch_template`).
    pub launch_template: Option<TemplateRef>,
    /// Run on `stalled` and `stall_cleared` (see `Job::stall_command`).
    pub stall_command: Option<Vec<String>>,
    /// The job's uid (`Job::owner_uid`): only a pidfile and a process of this user are signalled.
    pub job_owner: Option<u32>,
    /// The event queue heeded messages are deleted from, when the config names one.
    pub queue: Option<EventQueue>,
}

impl Actuators {
    /// The group and the queue are acted on only when the config names them and a client for
    /// them is given.
    pub fn new(
        cfg: &Config,
        ec2: aws_sdk_ec2::Client,
        autoscaling: Option<aws_sdk_autoscaling::Client>,
        sqs: Option<aws_sdk_sqs::Client>,
        job_owner: Option<u32>,
    ) -> Actuators {
        let queue = sqs.zip(cfg.events.queue_url.clone());
        Actuators {
            ec2,
            group: autoscaling.zip(cfg.workers.auto_scaling_group.clone()),
            hostfiles: cfg.hostfiles.clone(),
            generation_file: cfg.generation_file.clone(),
            launch_plan: (cfg.job.launcher.as_ref())
                .map(|_| cfg.shared_dir.join(crate::protocol::launch_plan::PLAN_FILE)),
            notices_file: cfg.shared_dir.join(crate::protocol::notices::NOTICES_FILE),
            notify: cfg.job.notify.clone(),
            launch_template: cfg.workers.launch_template.clone(),
            stall_command: cfg.job.stall_command().map(<[String]>::to_vec),
            job_owner,
            queue: queue.map(|(client, url)| EventQueue::new(client, url)),
        }
    }
}

/// Applies `outcome` for `generation` and reports what happened; it changes no state (see
/// `Applied`). `notify_failing` (the job notification's failure already reported) keeps a
/// refusal from being journaled at every pass. Work on the shared directory runs within
/// `shared_fs`'s deadline. `now`, the pass's time, stamps the events it reports.
pub async fn apply(
    a: &Actuators,
    outcome: &Outcome,
    generation: u64,
    shared_fs: &mut Deadline,
    notify_failing: Option<&str>,
    now: Millis,
) -> Applied {
    let mut done = Applied::default();
    let written = write_hostfiles(a, outcome, generation, shared_fs).await;
    let ok = written.is_ok();
    done.results.push((Step::HostFiles, words(written.err())));
    if let (true, Some(n)) = (ok, &outcome.notify) {
        deliver(a, n, shared_fs, notify_failing, now, &mut done).await;
    }
    if let Some(change) = &outcome.stall {
        tell_stall(a, change, now, &mut done).await;
    }
    let tagged = ec2::set_status_tags(&a.ec2, &outcome.tags()).await;
    done.results.push((Step::StatusTags, words(tagged.err())));
    launch_replacements(a, outcome, now, &mut done).await;
    if let Some((client, group)) = &a.group {
        detach_replaced(client, group, outcome, now, &mut done).await;
    }
    let ids = outcome.terminate();
    if !ids.is_empty() {
        let (ended, err) = ec2::terminate(&a.ec2, &ids).await;
        if !ended.is_empty() {
            tracing::info!(instances = ?ended, "terminated");
        }
        let call = "TerminateInstances accepted for";
        done.ended.extend(ended.into_iter().map(|id| (id, call)));
        done.results.push((Step::Terminations, words(err)));
    }
    if let Some((client, group)) = &a.group {
        apply_group(client, group, outcome, &mut done).await;
    }
    done
}

/// A step's failure as [`Applied`] reports it: in words.
fn words<E: ToString>(failure: Option<E>) -> Option<String> {
    failure.map(|e| e.to_string())
}

/// The host files, the launch plan, then the generation file.
async fn write_hostfiles(
    a: &Actuators,
    outcome: &Outcome,
    generation: u64,
    shared_fs: &mut Deadline,
) -> Result<(), HostfileError> {
    let (specs, hosts) = (a.hostfiles.clone(), outcome.hosts.clone());
    let (gen_file, plan) = (a.generation_file.clone(), a.launch_plan.clone());
    let write = move || {
        let written = hostfiles::ensure(&specs, &hosts)?;
        if let Some(plan) = plan {
            hostfiles::write_launch_plan(&plan, generation, &hosts)?;
        }
        hostfiles::write_generation(&gen_file, generation)?;
        Ok::<bool, HostfileError>(written)
    };
    let written = (shared_fs.run("writing host files", write).await)
        .map_err(HostfileError::Stalled)
        .and_then(|written| written)?;
    if written {
        let workers = outcome.hosts.len();
        tracing::info!(generation, workers, "host files rewritten");
    }
    Ok(())
}

/// Tells the job; a refusal (the pidfile names another program, the hook is not safe to run) is
/// journaled once.
async fn deliver(
    a: &Actuators,
    n: &Notification,
    shared_fs: &mut Deadline,
    failing: Option<&str>,
    now: Millis,
    done: &mut Applied,
) {
    const WHAT: Step = Step::JobNotification;
    let hostfile = (a.hostfiles.first())
        .map(|h| h.path.clone())
        .unwrap_or_default();
    let sent = match a.notify.clone() {
        // Reading the pidfile touches the shared directory: within its deadline.
        Notify::Signal {
            signal,
            pidfile,
            expect,
        } => {
            let (notices, file, owner) = (n.clone(), a.notices_file.clone(), a.job_owner);
            let send = move || {
                notify::write_notices(&file, &notices)?;
                notify::signal_job(signal, &pidfile, expect.as_deref(), owner)
            };
            let sent = shared_fs.run("signalling the job", send).await;
            sent.unwrap_or_else(|e| Err(NotifyError::Stalled(e)))
        }
        how => notify::send(&how, n, &hostfile).await,
    };
    let generation = Some(n.generation);
    match sent {
        Ok(how) => {
            done.results.push((WHAT, None));
            tracing::info!(generation = n.generation, "job notified: {how}");
            done.delivered = Some(n.clone());
            let message = format!("generation {} delivered: {how}", n.generation);
            let e = Event::new(now, EventKind::Notified, message);
            done.events.push(Event { generation, ..e });
        }
        Err(e) => {
            let message = format!("{e} (retried next pass)");
            let changed = failing != Some(message.as_str());
            if changed && e.is_refusal() {
                let e = Event::new(now, EventKind::NotifyRefused, message.clone());
                done.events.push(Event { generation, ..e });
            }
            done.results.push((WHAT, Some(message)));
        }
    }
}

/// Runs the stall command, once: the stall is journaled already, so a failure is reported
/// (log, status) but not retried. A refusal (the command is not safe to run) is journaled too,
/// as `notify_refused`: it runs once per change, so that is once per refusal.
async fn tell_stall(a: &Actuators, change: &StallChange, now: Millis, done: &mut Applied) {
    let Some(argv) = &a.stall_command else {
        return;
    };
    // A failure is logged where every step's is, as `done.results` are recorded.
    match super::stall::run(argv, change).await {
        Ok(how) => {
            tracing::info!("stall command: {how}");
            done.results.push((Step::StallCommand, None));
        }
        Err(e) => {
            let message = format!("{e} (not retried)");
            if matches!(e, HookError::Refused(_)) {
                let why = format!("stall command ({}): {message}", change.kind());
                done.events
                    .push(Event::new(now, EventKind::NotifyRefused, why));
            }
            done.results.push((Step::StallCommand, Some(message)));
        }
    }
}

/// Scale-in protection, then terminations in the group, then lifecycle actions.
async fn apply_group(
    client: &aws_sdk_autoscaling::Client,
    group: &str,
    outcome: &Outcome,
    done: &mut Applied,
) {
    let protect = outcome.protect();
    if !protect.is_empty() {
        let r = asg::protect(client, group, &protect).await;
        done.results.push((Step::ScaleInProtection, words(r.err())));
    }
    let (mut ended, mut errors) = (Vec::new(), Vec::new());
    for (id, decrement) in outcome.group_terminate() {
        match asg::terminate(client, &id, decrement).await {
            Ok(()) => ended.push(id),
            Err(e) => errors.push(e),
        }
    }
    for id in outcome.set_unhealthy() {
        match asg::set_unhealthy(client, &id).await {
            Ok(()) => ended.push(id),
            Err(e) => errors.push(e),
        }
    }
    let hooks = outcome.complete_hooks();
    let (completed, failed) = asg::apply_hooks(client, group, &hooks, &outcome.heartbeats()).await;
    ended.extend(completed);
    errors.extend(failed);
    let call = "Auto Scaling group accepted the end of";
    done.ended.extend(ended.into_iter().map(|id| (id, call)));
    let first = errors.into_iter().next();
    done.results.push((Step::GroupActions, words(first)));
}

/// Replacements of launch-template workers (unhealthy, or warned of their loss), before any
/// termination: the new worker prepares while the old one leaves. Each result is reported by
/// its token (decide stops owing a launch that succeeded, and sets when a refused one is sent
/// again), and each capacity choice EC2 refused (decide skips it for its cool-down).
async fn launch_replacements(a: &Actuators, outcome: &Outcome, now: Millis, done: &mut Applied) {
    let launches = outcome.launches();
    let Some(template) = a.launch_template.as_ref().filter(|_| !launches.is_empty()) else {
        return;
    };
    let mut error = None;
    for ((replaces, because), token, choices) in launches {
        let tried = capacity::launch(&a.ec2, template, &choices, Some(&token), 1).await;
        done.no_capacity.extend(tried.no_capacity);
        match tried.launched.map(|mut l| l.pop()) {
            Ok(Some(l)) => {
                let ip_text = l.ip.as_deref().unwrap_or("no IP yet");
                let as_what =
                    (l.choice.as_ref()).map_or(String::new(), |c| format!(" as {}", c.name()));
                let message = format!(
                    "launched {} ({ip_text}) from {template}{as_what} to replace {} {replaces}",
                    l.id,
                    because.words()
                );
                tracing::info!("{message}");
                let e = Event::new(now, EventKind::ReplacementLaunched, message);
                let ip = l.ip.and_then(|t| t.parse().ok());
                done.launches.push((token, Ok(l.id.clone())));
                done.events.push(Event {
                    instance: Some(l.id),
                    ip,
                    ..e
                });
            }
            Ok(None) => done
                .launches
                .push((token, Err(LaunchFailed::NothingLaunched))),
            Err(e) => error = Some(refused(token, &e, done)),
        }
    }
    done.results.push((Step::ReplacementLaunches, error));
}

/// Group workers warned of their loss, detached so that their group launches their replacements
/// now; each result reported by its token, as a launch's is.
async fn detach_replaced(
    client: &aws_sdk_autoscaling::Client,
    group: &str,
    outcome: &Outcome,
    now: Millis,
    done: &mut Applied,
) {
    let detaches = outcome.detaches();
    if detaches.is_empty() {
        return;
    }
    let mut error = None;
    for ((id, because), token) in detaches {
        match asg::detach(client, group, &id).await {
            Ok(()) => {
                let message = format!(
                    "detached {} {id} from {group} without lowering its desired capacity: \
                     the group launches its replacement now",
                    because.words()
                );
                tracing::info!("{message}");
                let e = Event::new(now, EventKind::ReplacementLaunched, message);
                done.events.push(Event {
                    instance: Some(id),
                    ..e
                });
                done.launches.push((token, Ok(group.to_string())));
            }
            Err(e) => error = Some(refused(token, &e, done)),
        }
    }
    done.results.push((Step::ReplacementLaunches, error));
}

/// Reports a replacement AWS refused by its token (decide sends it again after a minute), and
/// says so for the step's result.
fn refused(token: String, e: &dyn std::fmt::Display, done: &mut Applied) -> String {
    done.launches
        .push((token, Err(LaunchFailed::Refused(e.to_string()))));
    format!("{e} (retried in {})", span(LAUNCH_RETRY_MS))
}
