//! `dtctl scale` and `dtctl resume`: the worker Auto Scaling group's size, and re-arming the
//! replacement of workers whose prepare-data failed.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::aws::{autoscaling_client, describe_error};
use crate::clock::now_millis;
use crate::config::Config;
use crate::ctl::local::load_status;
use crate::fsutil::write_atomic;
use crate::observe::asg::read_group;
use crate::status::StatusReport;
use crate::store::Paths;

pub async fn scale(cfg: &Config, replicas: usize, wait: Option<Duration>) -> anyhow::Result<()> {
    let Some(name) = cfg.workers.auto_scaling_group.as_deref() else {
        bail!("workers.auto_scaling_group is not set in the config: there is no group to scale");
    };
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
    if replicas > cfg.workers.max {
        bail!(
            "refusing to scale {name} to {replicas}: the config's workers.max is {}, \
             so the extra workers would never join the job",
            cfg.workers.max
        );
    }
    client
        .set_desired_capacity()
        .auto_scaling_group_name(name)
        .desired_capacity(replicas as i32)
        .honor_cooldown(false)
        .send()
        .await
        .map_err(|e| anyhow!("SetDesiredCapacity {name}: {}", describe_error(&e)))?;
    println!("{name}: desired capacity {} -> {replicas}", group.desired);
    match wait {
        Some(timeout) => wait_for(cfg, replicas, timeout),
        None => Ok(()),
    }
}

/// Polls the daemon's status until the job trains on `replicas` group workers, printing each
/// change of progress.
fn wait_for(cfg: &Config, replicas: usize, timeout: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        // A dtd started a moment ago has not written its first report yet: wait for it too.
        let (line, done) = match load_status(cfg) {
            Ok(status) => progress(&status, replicas),
            Err(e) => (format!("waiting for dtd's status report: {e:#}"), false),
        };
        if line != last {
            println!("{:>5}s  {line}", started.elapsed().as_secs());
            last = line;
        }
        if done {
            println!("done: the job trains on {replicas} group workers");
            return Ok(());
        }
        if started.elapsed() >= timeout {
            bail!(
                "gave up after {}: {last}",
                humantime::format_duration(timeout)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn progress(s: &StatusReport, replicas: usize) -> (String, bool) {
    let count = |wanted: &[&str]| {
        s.workers
            .iter()
            .filter(|w| wanted.contains(&w.status.as_str()))
            .count()
    };
    let added = count(&["ADDED"]);
    let preparing = count(&["PREPARING"]);
    let queued = count(&["ADD_QUEUED"]);
    let leaving = count(&["REMOVAL_QUEUED"]);
    let acked = s.acked_generation.map_or("none".into(), |g| g.to_string());
    let line = format!(
        "{added}/{replicas} in the job, {preparing} preparing, {queued} joining, {leaving} leaving (generation {}, acknowledged {acked})",
        s.generation
    );
    (line, added == replicas && queued == 0 && leaving == 0)
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
