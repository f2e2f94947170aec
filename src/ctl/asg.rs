//! The worker Auto Scaling group's size (`dtctl scale` of a group), and `dtctl resume`:
//! re-arming the replacement of workers whose prepare-data failed.

use anyhow::{anyhow, bail, Context};

use crate::aws::{autoscaling_client, describe_error};
use crate::clock::now_millis;
use crate::config::Config;
use crate::ctl::local::load_status;
use crate::fsutil::write_atomic;
use crate::observe::asg::read_group;
use crate::store::Paths;

/// Sets the group's desired capacity to `replicas`, within its own bounds and `workers.max`.
pub async fn scale(cfg: &Config, name: &str, replicas: usize) -> anyhow::Result<()> {
    let client = autoscaling_client(cfg).await;
    let group = read_group(&client, name).await.map_err(|e| anyhow!(e))?;
    if replicas < group.min || replicas > group.max {
        bail!(
            "refusing to scale {name} to {replicas}: the group allows {} to {} instances \
             (change them with `aws autoscaling update-auto-scaling-group --min-size/--max-size`)",
            group.min,
            group.max
        );
    }
    within_max(cfg, replicas)?;
    client
        .set_desired_capacity()
        .auto_scaling_group_name(name)
        .desired_capacity(replicas as i32)
        .honor_cooldown(false)
        .send()
        .await
        .map_err(|e| anyhow!("SetDesiredCapacity {name}: {}", describe_error(&e)))?;
    println!("{name}: desired capacity {} -> {replicas}", group.desired);
    Ok(())
}

/// More workers than `workers.max` would never join the job.
pub(super) fn within_max(cfg: &Config, replicas: usize) -> anyhow::Result<()> {
    if replicas > cfg.workers.max {
        bail!(
            "refusing to scale to {replicas}: the config's workers.max is {}, so the extra \
             workers would never join the job",
            cfg.workers.max
        );
    }
    Ok(())
}

pub fn resume(cfg: &Config) -> anyhow::Result<()> {
    let path = Paths::new(&cfg.state_dir).resume();
    write_atomic(&path, format!("{}\n", now_millis()).as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    let stopped = load_status(cfg).ok().and_then(|s| s.replacing_stopped);
    match stopped {
        Some(why) => {
            println!("re-armed: dtd replaces failed workers again on its next pass (was {why})")
        }
        None => println!(
            "re-armed: dtd was replacing failed workers already; the failure count restarts"
        ),
    }
    Ok(())
}
