//! `dtctl doctor`: whether this cluster can work, one line per check, with what to do about each
//! one that fails. Every check only reads, or asks EC2 with `DryRun`; nothing is changed.

mod daemon;
mod events;
mod file_system;
mod gpus;
mod group;
mod identity;
mod ingress;
mod mounts;
mod permissions;
mod policy;
mod rendezvous;
mod report;
mod template;

use crate::aws::sdk_config;
use crate::config::Config;

pub use report::{Check, Outcome, Report};

/// An AWS read that a check needed and did not get: the call, and what AWS said (its words,
/// through [`crate::aws::describe_error`]). A check shows it as its detail.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadFailed {
    #[error("DescribeInstances failed: {0}")]
    Instances(String),
    #[error("DescribeSubnets failed: {0}")]
    Subnets(String),
    #[error("{0}")]
    MountTargets(crate::observe::efs::MountTargetError),
    #[error("DescribeMountTargetSecurityGroups {target}: {said}")]
    MountTargetGroups { target: String, said: String },
    #[error("DescribeSecurityGroups for {target}: {said}")]
    SecurityGroups { target: String, said: String },
    #[error("DescribeLifecycleHooks failed: {0}")]
    LifecycleHooks(String),
    #[error("ListRuleNamesByTarget {target}: {said}")]
    RuleNames { target: String, said: String },
}

/// What the AWS checks share: one SDK configuration, and what earlier checks learned.
pub(crate) struct Context<'a> {
    pub cfg: &'a Config,
    pub sdk: aws_config::SdkConfig,
    pub ec2: aws_sdk_ec2::Client,
}

/// Runs every check and prints the report; `Ok(false)` when any check failed.
pub async fn doctor(cfg: &Config, json: bool) -> anyhow::Result<bool> {
    let report = run(cfg).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(report.ok)
}

/// The GPUs per worker `workers.capacity` says every choice has.
fn stated_gpus(cfg: &Config) -> Option<i32> {
    let first = cfg.workers.capacity.as_ref()?.choices.first()?;
    i32::try_from(first.gpus).ok()
}

pub async fn run(cfg: &Config) -> Report {
    let sdk = sdk_config(cfg.region.as_deref(), cfg.api_timeout).await;
    let cx = Context {
        cfg,
        ec2: aws_sdk_ec2::Client::new(&sdk),
        sdk,
    };
    // Independent reads run together: the report takes the time of its slowest chain of calls.
    let (identity, template, group, events) = tokio::join!(
        identity::checks(&cx),
        template::checks(&cx),
        group::checks(&cx),
        events::checks(&cx),
    );
    let workers = template::Workers::merge(&template.workers, &group.workers)
        .with_capacity(cfg.workers.capacity.as_ref());
    // Read once for the two checks that need the worker subnets' zones and CIDRs.
    let subnets = match cfg.shared_fs_id.is_some() || cfg.job.launcher.is_some() {
        true => file_system::subnets(&cx, &workers.subnets).await,
        false => Ok(Default::default()),
    };
    let (file_system, permissions, gpus, rendezvous) = tokio::join!(
        file_system::checks(&cx, &workers, &subnets),
        permissions::checks(&cx, template.found.clone()),
        gpus::check(&cx, &workers.instance_types, stated_gpus(cfg)),
        rendezvous::check(&cx, &workers, &subnets),
    );
    let mut checks = identity;
    checks.extend(template.checks);
    checks.extend(group.checks);
    checks.push(gpus);
    checks.extend(rendezvous);
    checks.extend(file_system);
    let region = cx.sdk.region().map_or("", |r| r.as_ref());
    checks.push(mounts::check(cfg, region));
    checks.extend(permissions);
    checks.extend(events);
    checks.extend(daemon::checks(cfg));
    Report::new(&cfg.cluster, checks)
}
