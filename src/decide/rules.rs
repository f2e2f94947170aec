//! The part of the configuration decide reads, and what it reads from an instance's tags.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::{Config, HealthLeave, MaxUnhealthy, Rebalance, Slots, StallAction};
use crate::model::*;

/// The tags AWS puts on instances launched from a template or by a group.
pub const TEMPLATE_TAG: &str = "aws:ec2launchtemplate:id";
pub const GROUP_TAG: &str = "aws:autoscaling:groupName";

/// The part of the configuration decide needs, with the launch template resolved to its id.
#[derive(Debug, Clone)]
pub struct Rules {
    pub elastic_tag: String,
    pub worker_tags: BTreeMap<String, String>,
    pub launch_template_id: Option<String>,
    pub auto_scaling_group: Option<String>,
    pub min: usize,
    pub max: usize,
    pub base_hosts: Vec<IpAddr>,
    pub master: Option<IpAddr>,
    pub slots: Slots,
    pub ack_timeout_ms: u64,
    pub rebalance: Rebalance,
    pub max_prepare_failures: u32,
    /// How long a worker held by the launching hook may go without a prepare-data marker.
    pub prepare_timeout_ms: u64,
    /// How long before an EC2 scheduled change starts its worker is drained.
    pub scheduled_change_lead_ms: u64,
    /// Above this many unhealthy workers, none is removed or replaced.
    pub max_unhealthy: MaxUnhealthy,
    /// How an unhealthy member whose GPUs are still there leaves.
    pub health_leave: HealthLeave,
    /// Launch a replacement from the template for an unhealthy launch-template worker.
    pub replace_unhealthy: bool,
    /// Launch a replacement from the template when a launch-template worker is warned of its loss.
    pub replace_interrupted: bool,
    /// `job.stall.after`: how long the job's step may stand still; `None`: no stall detection.
    pub stall_after_ms: Option<u64>,
    /// `job.stall.action`.
    pub stall_action: StallAction,
    /// `job.stragglers`.
    pub stragglers: crate::config::Stragglers,
    /// `job.launcher.silent_after`: a training member whose agent's launcher report has not
    /// changed for this long stopped answering. `None`: no launcher configured.
    pub launcher_silent_ms: Option<u64>,
    /// `job.launcher.silent_share`: above this share of the members silent at once, none is
    /// taken out for its silence.
    pub launcher_silent_share: f64,
    /// `job.ack.by: launcher`: a generation is applied once every member's launcher reports it
    /// running, not when the job writes an ack.
    pub ack_by_launcher: bool,
    /// `join.batch`: how long the first ready worker waits for others to join with it.
    pub join_batch_ms: u64,
    /// `join.at_checkpoint`: ready workers wait for the job's next checkpoint, at most
    /// `join_max_wait_ms`.
    pub join_at_checkpoint: bool,
    pub join_max_wait_ms: u64,
    /// `join.sizes`: the world sizes the job may grow to, ascending; empty: any.
    pub join_sizes: Vec<usize>,
    /// `disruption.budget`: how many members may be leaving voluntarily at once.
    pub disruption_budget: crate::config::Budget,
    /// `disruption.windows`: when voluntary leaves may start; empty: at any time.
    pub disruption_windows: Vec<crate::config::Window>,
    /// `workers.capacity`: what a launched worker may be, in order; empty: the template's own.
    pub capacity: Vec<Choice>,
    /// How long a choice EC2 had no capacity for is skipped.
    pub capacity_cool_down_ms: Millis,
    /// `workers.reports: signed` (the default): reports are believed only when the worker's
    /// agent signed them. `false` (unsigned, the 2018 protocol): a failure marker is only shown.
    pub reports_signed: bool,
    /// `agent.health` is configured: health reports count. Without it they are ignored.
    pub health_checked: bool,
    /// `job.launcher.in_place.leave_before_loss`, under `in_place` only: a Spot-warned member
    /// trains on until this long before AWS takes it.
    pub leave_before_loss_ms: Option<u64>,
}

/// What the rules read from one instance's tags.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Facts {
    /// Carries the worker tags and comes from this cluster's launch template or group.
    pub cluster: bool,
    pub elastic: bool,
    pub status: Option<WorkerStatus>,
}

impl Rules {
    pub fn from_config(cfg: &Config, launch_template_id: Option<String>) -> Rules {
        Rules {
            elastic_tag: cfg.workers.elastic_tag.clone(),
            worker_tags: cfg.workers.tags.clone(),
            launch_template_id,
            auto_scaling_group: cfg.workers.auto_scaling_group.clone(),
            min: cfg.workers.min,
            max: cfg.workers.max,
            base_hosts: cfg.workers.base_hosts.clone(),
            master: cfg.master,
            slots: cfg.workers.slots.clone(),
            ack_timeout_ms: cfg.job.ack.timeout.as_millis() as u64,
            rebalance: cfg.events.rebalance,
            max_prepare_failures: cfg.workers.max_prepare_failures,
            prepare_timeout_ms: cfg.workers.prepare_timeout.as_millis() as u64,
            scheduled_change_lead_ms: cfg.events.scheduled_change_lead.as_millis() as u64,
            max_unhealthy: cfg.health.max_unhealthy,
            health_leave: cfg.health.leave,
            replace_unhealthy: cfg.workers.replace_unhealthy,
            replace_interrupted: cfg.workers.replace_interrupted,
            stall_after_ms: (cfg.job.stall.as_ref()).map(|s| s.after.as_millis() as u64),
            stall_action: (cfg.job.stall.as_ref()).map_or(StallAction::Alert, |s| s.action),
            stragglers: cfg.job.stragglers,
            launcher_silent_ms: (cfg.job.launcher.as_ref())
                .map(|l| l.silent_after.as_millis() as u64),
            launcher_silent_share: (cfg.job.launcher.as_ref()).map_or(1.0, |l| l.silent_share),
            ack_by_launcher: cfg.job.ack.by == crate::config::AckBy::Launcher,
            join_batch_ms: cfg.join.batch.as_millis() as u64,
            join_at_checkpoint: cfg.join.at_checkpoint,
            join_max_wait_ms: cfg.join.max_wait.as_millis() as u64,
            join_sizes: cfg.join.sizes.clone(),
            disruption_budget: cfg.disruption.budget,
            disruption_windows: cfg.disruption.windows.clone(),
            capacity: (cfg.workers.capacity.as_ref()).map_or_else(Vec::new, |c| c.choices.clone()),
            capacity_cool_down_ms: (cfg.workers.capacity.as_ref())
                .map_or(0, |c| c.cool_down.as_millis() as u64),
            reports_signed: cfg.workers.reports == crate::config::Reports::Signed,
            health_checked: cfg.agent.health.is_some(),
            leave_before_loss_ms: (cfg.job.launcher.as_ref())
                .and_then(|l| l.in_place())
                .map(|i| i.leave_before_loss.as_millis() as u64),
        }
    }

    /// Carries the worker tags and comes from this cluster's launch template or group.
    pub fn is_cluster_worker(&self, i: &Instance) -> bool {
        self.facts(i).cluster
    }

    /// Everything the rules read from an instance's tags, in one walk over them (a pass reads
    /// them for every instance; separate look-ups cost several times more at 10,000 workers).
    pub(super) fn facts(&self, i: &Instance) -> Facts {
        let mut f = Facts::default();
        let mut source = false;
        for (k, v) in i.tags.iter() {
            if k == self.elastic_tag {
                f.elastic = true;
            } else if k == STATUS_TAG {
                f.status = WorkerStatus::from_tag(v);
            } else if k == TEMPLATE_TAG {
                source |= self.launch_template_id.as_deref() == Some(v);
            } else if k == GROUP_TAG {
                source |= self.auto_scaling_group.as_deref() == Some(v);
            }
        }
        let tagged = (self.worker_tags.iter()).all(|(k, v)| i.tags.get(k) == Some(v.as_str()));
        f.cluster = source && tagged;
        f
    }

    /// A base host or the master: never removed, never terminated.
    pub fn is_protected(&self, ip: IpAddr) -> bool {
        self.base_hosts.contains(&ip) || self.master == Some(ip)
    }
}
