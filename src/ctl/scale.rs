//! `dtctl scale --replicas N`: the worker group's desired capacity, or, for launch-template
//! workers, launches and removals until N of them stay; then, with `--wait`, progress until the
//! job trains on N workers.

use std::time::{Duration, Instant};

use anyhow::bail;

use crate::config::Config;
use crate::ctl::local::load_status;
use crate::status::StatusReport;

pub async fn scale(cfg: &Config, replicas: usize, wait: Option<Duration>) -> anyhow::Result<()> {
    match (
        &cfg.workers.auto_scaling_group,
        &cfg.workers.launch_template,
    ) {
        (Some(group), _) => super::asg::scale(cfg, group, replicas).await?,
        (None, Some(template)) => {
            super::asg::within_max(cfg, replicas)?;
            super::ec2::scale(cfg, template, replicas).await?
        }
        (None, None) => bail!(
            "neither workers.auto_scaling_group nor workers.launch_template is set in the \
             config: there are no workers to scale"
        ),
    }
    match wait {
        Some(timeout) => wait_for(cfg, replicas, timeout),
        None => Ok(()),
    }
}

/// Polls the daemon's status until the job trains on `replicas` workers, printing each change
/// of progress.
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
            println!("done: the job trains on {replicas} workers");
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
