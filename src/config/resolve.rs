//! From the file as written to the [`Config`] the daemon runs with: the checks that span keys,
//! the host-file templates read, and every default that depends on another key filled in.

use std::path::Path;
use std::time::Duration;

use super::error::{InvalidConfig, Rule, TemplateUnusable};
use super::position::Line;
use super::raw::{HostfileForm, RawAgent, RawConfig, RawHostfile, RawJob, RawWorkers};
use super::{
    Ack, AckBy, Agent, Capacity, Config, Health, HostfileSpec, Job, Slots, Workers,
    ELASTIC_TAG_SUFFIX, HOOK_GLOBAL_TIMEOUT_MAX, PREPARE_MARGIN,
};
use crate::hostfile::{Format, HostTemplate};
use crate::protocol::generation::{ACK_FILE, GENERATION_FILE};
use crate::protocol::progress::PROGRESS_FILE;

/// The 2018 `host_worker`, written when the file names no host file.
const DEFAULT_HOSTFILE: &str = "host_worker";
/// The prepare-data program run when the file names none: root's, outside the shared directory
/// (which every worker writes, and `dtd agent` runs it as root).
const DEFAULT_PREPARE_DATA: &str = "/usr/local/libexec/dt/prepare-data";
/// Where the agent keeps its signing key: the worker's own disk, root's.
const DEFAULT_KEY_FILE: &str = "/var/lib/dt/agent.key";
/// With events naming the instances that change, the complete listing only catches what they missed.
const DEFAULT_RESYNC_WITH_EVENTS: Duration = Duration::from_secs(60);

pub(super) fn resolve(raw: RawConfig, text: &str) -> Result<Config, InvalidConfig> {
    validate(&raw).map_err(|rule| rule.placed(text))?;
    let hostfiles = hostfiles(&raw.hostfiles, &raw.shared_dir, text)?;
    let shared = raw.shared_dir;
    let resync = raw.resync.unwrap_or(match raw.events.queue_url {
        Some(_) => DEFAULT_RESYNC_WITH_EVENTS.max(raw.interval),
        None => raw.interval,
    });
    Ok(Config {
        workers: workers(raw.workers, &raw.cluster, &raw.agent),
        state_dir: raw
            .state_dir
            .unwrap_or_else(|| shared.join(".dt").join(&raw.cluster)),
        agent: agent(raw.agent),
        job: job(raw.job, &shared),
        generation_file: shared.join(GENERATION_FILE),
        cluster: raw.cluster,
        region: raw.region,
        shared_dir: shared,
        shared_fs_id: raw.shared_fs_id,
        shared_fs_refresh: raw.shared_fs_refresh,
        hostfiles,
        events: raw.events,
        interval: raw.interval,
        resync,
        shared_poll: raw.shared_poll,
        allow_local_state_dir: raw.allow_local_state_dir,
        journal: raw.journal,
        join: raw.join,
        disruption: raw.disruption,
        api_timeout: raw.api_timeout,
        fs_timeout: raw.fs_timeout,
        master: raw.master,
        metrics: raw.metrics,
        alerts: raw.alerts,
        health: raw.health,
    })
}

fn workers(w: RawWorkers, cluster: &str, agent: &RawAgent) -> Workers {
    Workers {
        elastic_tag: w
            .elastic_tag
            .unwrap_or_else(|| format!("{cluster}{ELASTIC_TAG_SUFFIX}")),
        prepare_timeout: (w.prepare_timeout)
            .unwrap_or_else(|| agent.limit().saturating_add(PREPARE_MARGIN)),
        launch_template: w.launch_template,
        auto_scaling_group: w.auto_scaling_group,
        tags: w.tags,
        min: w.min,
        max: w.max,
        base_hosts: w.base_hosts,
        slots: slots(w.slots, w.capacity.as_ref()),
        capacity: w.capacity,
        page_size: w.page_size,
        max_prepare_failures: w.max_prepare_failures,
        replace_unhealthy: w.replace_unhealthy,
        reports: w.reports,
    }
}

/// The workers' slots: as configured, else one per GPU of the capacity choices, else 1.
fn slots(slots: Option<Slots>, capacity: Option<&Capacity>) -> Slots {
    let gpus = capacity.and_then(|c| c.choices.first()).map(|c| c.gpus);
    slots.unwrap_or(Slots::All(gpus.unwrap_or(1)))
}

fn job(j: RawJob, shared_dir: &Path) -> Job {
    let ack = Ack {
        by: j.ack.by,
        host_worker_log: j.ack.host_worker_log,
        file: j.ack.file.unwrap_or_else(|| shared_dir.join(ACK_FILE)),
        timeout: j.ack.timeout,
    };
    Job {
        notify: j.notify,
        ack,
        progress: j.progress.unwrap_or_else(|| shared_dir.join(PROGRESS_FILE)),
        stall: j.stall,
        owner: j.owner,
        launcher: j.launcher,
    }
}

fn agent(a: RawAgent) -> Agent {
    Agent {
        prepare_data: a
            .prepare_data
            .unwrap_or_else(|| DEFAULT_PREPARE_DATA.into()),
        prepare_data_sha256: a.prepare_data_sha256,
        args: a.args,
        timeout: a.timeout,
        attempts: a.attempts,
        retry_delay: a.retry_delay,
        imds_interval: a.imds_interval,
        health: a.health,
        key_file: a.key_file.unwrap_or_else(|| DEFAULT_KEY_FILE.into()),
    }
}

/// The checks that serde cannot make on one value: they span keys, or need the whole file.
fn validate(raw: &RawConfig) -> Result<(), Rule> {
    if !raw.shared_dir.is_absolute() {
        return Err(Rule::SharedDirRelative);
    }
    if raw.job.progress.as_ref().is_some_and(|p| !p.is_absolute()) {
        return Err(Rule::ProgressRelative);
    }
    for spec in &raw.hostfiles {
        if !spec.path.is_absolute() || spec.path.file_name().is_none() {
            return Err(Rule::HostfileNotAFile(spec.path.clone()));
        }
    }
    if !(Duration::from_secs(1)..=Duration::from_secs(20)).contains(&raw.events.wait) {
        return Err(Rule::QueueWait);
    }
    if raw.agent.attempts == 0 {
        return Err(Rule::NoAttempt);
    }
    if raw.resync.is_some_and(|r| r < raw.interval) {
        return Err(Rule::ResyncBelowInterval);
    }
    if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&raw.shared_poll) {
        return Err(Rule::SharedPoll);
    }
    if raw.shared_fs_refresh < Duration::from_secs(1) {
        return Err(Rule::SharedFsRefresh);
    }
    if let Some(health) = &raw.agent.health {
        validate_health(health)?;
    }
    validate_prepare_timeout(raw)?;
    if let Some(size) = raw.join.sizes.iter().find(|s| **s > raw.workers.max) {
        let (size, max) = (*size, raw.workers.max);
        return Err(Rule::JoinSizeAboveMax { size, max });
    }
    if raw.job.ack.by == AckBy::Launcher && raw.job.launcher.is_none() {
        return Err(Rule::AckByLauncherAlone);
    }
    if let Some(launcher) = &raw.job.launcher {
        launcher.check()?;
    }
    validate_reports(raw)?;
    match raw.master {
        Some(master) if raw.workers.base_hosts.contains(&master) => {
            Err(Rule::MasterIsBaseHost(master))
        }
        _ => Ok(()),
    }
}

/// Health and launcher reports come only from `dtd agent`, which signs what it writes: a
/// cluster that runs it has no use for unsigned reports, which any worker could write.
fn validate_reports(raw: &RawConfig) -> Result<(), Rule> {
    if raw.workers.reports != super::Reports::Unsigned {
        return Ok(());
    }
    let uses_agent = match (&raw.agent.health, &raw.job.launcher) {
        (Some(_), _) => Some("agent.health"),
        (None, Some(_)) => Some("job.launcher"),
        (None, None) => None,
    };
    match uses_agent {
        Some(key) => Err(Rule::UnsignedWithAgent(key)),
        None => Ok(()),
    }
}

/// A check needs a program; and one that may run as long as the interval could not report once
/// every interval, which is what the master relies on to see a report that is out of date.
fn validate_health(h: &Health) -> Result<(), Rule> {
    if h.command.first().is_none_or(|p| p.is_empty()) {
        return Err(Rule::HealthWithoutProgram);
    }
    if h.timeout >= h.interval {
        let (timeout, interval) = (h.timeout, h.interval);
        return Err(Rule::HealthTimeout { timeout, interval });
    }
    Ok(())
}

/// A prepare timeout shorter than the agent's own limit would abandon a worker whose agent is
/// still retrying, before it could report either way.
fn validate_prepare_timeout(raw: &RawConfig) -> Result<(), Rule> {
    let Some(timeout) = raw.workers.prepare_timeout else {
        return Ok(());
    };
    let limit = raw.agent.limit();
    if timeout < limit {
        return Err(Rule::PrepareTimeoutShort { timeout, limit });
    }
    if timeout > HOOK_GLOBAL_TIMEOUT_MAX {
        return Err(Rule::PrepareTimeoutLong(timeout));
    }
    Ok(())
}

/// The host files with their templates read, so a bad one stops `dtd` at start, not mid-run.
fn hostfiles(
    raw: &[RawHostfile],
    shared_dir: &Path,
    text: &str,
) -> Result<Vec<HostfileSpec>, InvalidConfig> {
    if raw.is_empty() {
        return Ok(vec![HostfileSpec {
            path: shared_dir.join(DEFAULT_HOSTFILE),
            format: Format::Mxnet,
            template: None,
        }]);
    }
    let spec = |(index, h): (usize, &RawHostfile)| {
        let (format, template) = match &h.form {
            HostfileForm::Format(format) => (*format, None),
            HostfileForm::Template(path) => {
                let template = template(path).map_err(|error| InvalidConfig::Template {
                    index,
                    error,
                    line: template_line(text, path),
                })?;
                (Format::Mxnet, Some(template))
            }
        };
        let path = h.path.clone();
        Ok(HostfileSpec {
            path,
            format,
            template,
        })
    };
    raw.iter().enumerate().map(spec).collect()
}

fn template(path: &Path) -> Result<HostTemplate, TemplateUnusable> {
    let path = path.to_path_buf();
    if !path.is_absolute() {
        return Err(TemplateUnusable::Relative { path });
    }
    let body = match std::fs::read_to_string(&path) {
        Ok(body) => body,
        Err(error) => return Err(TemplateUnusable::Unreadable { path, error }),
    };
    HostTemplate::parse(&body).map_err(|error| TemplateUnusable::Invalid { path, error })
}

/// The key usually sits inside a flow mapping (`- { path: .., template: .. }`), where the search
/// for a line starting with the key would miss it.
fn template_line(text: &str, path: &Path) -> Line {
    let shown = path.display().to_string();
    Line::first(text, |l| l.contains("template:") && l.contains(&shown))
}
