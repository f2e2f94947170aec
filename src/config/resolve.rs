//! From the file as written to the [`Config`] the daemon runs with: the checks that span keys (in
//! the order made here, each in its section's file), the host-file templates read, and every
//! default that depends on another key filled in.

use std::path::Path;
use std::time::Duration;

use super::error::{InvalidConfig, Rule, TemplateUnusable};
use super::position::Line;
use super::raw::{HostfileForm, RawAgent, RawConfig, RawHostfile, RawJob, RawWorkers};
use super::{
    Ack, Agent, Capacity, Config, HostfileSpec, Job, Slots, Stragglers, Workers,
    ELASTIC_TAG_SUFFIX, PREPARE_MARGIN,
};
use crate::protocol::generation::{ACK_FILE, GENERATION_FILE};
use crate::protocol::host_files::{Format, HostTemplate};
use crate::protocol::identity::Certificates;
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
        replace_interrupted: w.replace_interrupted,
        reports: w.reports,
        listen: w.listen,
        identity: w.identity_certificates.unwrap_or_else(Certificates::aws),
        max_clock_skew: w.max_clock_skew,
        prices: w.prices,
        spot_price_history: w.spot_price_history,
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
        stragglers: Stragglers::resolve(
            j.stragglers,
            (j.launcher.as_ref()).is_some_and(|l| l.in_place().is_some()),
        ),
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
        report_to: a.report_to,
    }
}

/// The checks that serde cannot make on one value: they span keys, or need the whole file.
/// Each section makes its own; this says in which order (the first rule broken is reported).
fn validate(raw: &RawConfig) -> Result<(), Rule> {
    raw.check_shared_dir()?;
    raw.job.check_progress()?;
    raw.hostfiles.iter().try_for_each(RawHostfile::check)?;
    raw.events.check()?;
    raw.agent.check_attempts()?;
    raw.check_periods()?;
    if let Some(health) = &raw.agent.health {
        health.check()?;
    }
    raw.workers.check_prepare_timeout(raw.agent.limit())?;
    raw.join.check(raw.workers.max)?;
    raw.job.check()?;
    let launcher = raw.job.launcher.is_some();
    (raw.workers.reports).check(raw.agent.health.is_some(), launcher)?;
    raw.check_master()
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
