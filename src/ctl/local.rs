//! `dtctl` commands answered from the daemon's files on the shared file system.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::act::journal;
use crate::clock::now_millis;
use crate::config::Config;
use crate::fsutil::write_atomic_owned;
use crate::model::Event;
use crate::protocol;
use crate::protocol::host_files::{render, Format};
use crate::status::{StatusReport, STATUS_LIMIT};
use crate::store::Paths;
use crate::untrusted;

pub fn config_check(file: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(file)?;
    println!(
        "{}: ok (cluster {}, workers {}..={}, {} host file(s), interval {:?})",
        file.display(),
        cfg.cluster,
        cfg.workers.min,
        cfg.workers.max,
        cfg.hostfiles.len(),
        cfg.interval
    );
    Ok(())
}

pub fn load_status(cfg: &Config) -> anyhow::Result<StatusReport> {
    let path = Paths::new(&cfg.state_dir).status();
    let bytes = match untrusted::read(&path, STATUS_LIMIT) {
        Ok(Some(b)) => b,
        Ok(None) => bail!(
            "no status at {}: dtd has not run for cluster {} (start it with `dtd run --config FILE`)",
            path.display(),
            cfg.cluster
        ),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the daemon's status {}", path.display()))
        }
    };
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a status report", path.display()))
}

pub fn status(cfg: &Config, json: bool) -> anyhow::Result<()> {
    let report = load_status(cfg)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render(now_millis()));
    }
    Ok(())
}

pub fn hosts(cfg: &Config, format: Option<Format>) -> anyhow::Result<()> {
    let report = load_status(cfg)?;
    let format = format
        .or(cfg.hostfiles.first().map(|h| h.format))
        .unwrap_or(Format::Mxnet);
    print!("{}", render(format, &report.hosts));
    Ok(())
}

pub fn events(cfg: &Config, since: Option<Duration>, json: bool) -> anyhow::Result<()> {
    let path = Paths::new(&cfg.state_dir).journal();
    let cutoff = since.map_or(0, |d| now_millis().saturating_sub(d.as_millis() as u64));
    let (events, bad) = journal::read_matching(&path, |e| e.time >= cutoff)
        .with_context(|| format!("reading {}", path.display()))?;
    for e in &events {
        println!("{}", event_line(e, json)?);
    }
    if bad > 0 {
        eprintln!(
            "dtctl: skipped {bad} unreadable line(s) in {}",
            path.display()
        );
    }
    Ok(())
}

/// One event as `dtctl events` prints it: a JSON line, or a line for people.
pub fn event_line(e: &Event, json: bool) -> Result<String, serde_json::Error> {
    if json {
        return serde_json::to_string(e);
    }
    let when = crate::model::rfc3339(e.time);
    let gen = e.generation.map_or("-".into(), |g| format!("g{g}"));
    let who = e.instance.as_deref().unwrap_or("-");
    Ok(format!(
        "{when}  {:<18} {gen:<5} {who:<20} {}",
        e.kind, e.message
    ))
}

pub fn ack(cfg: &Config, generation: u64) -> anyhow::Result<()> {
    // dtd ignores an acknowledgement of a generation it never wrote: say so now, not later.
    let written = written_generation(cfg)?;
    if generation > written {
        bail!("generation {generation} does not exist yet: dtd has written up to {written}");
    }
    let path = &cfg.job.ack.file;
    let owner = cfg.job.owner_uid()?;
    // dtd reads the ack file only when the job's user owns it: root hands it over.
    let owner = (nix::unistd::geteuid().is_root()).then_some(owner);
    write_atomic_owned(
        path,
        protocol::generation::render(generation).as_bytes(),
        owner,
    )
    .with_context(|| format!("writing {}", path.display()))?;
    println!("acknowledged generation {generation} in {}", path.display());
    Ok(())
}

/// The last generation dtd wrote: its state's, saved before it writes the host files of that
/// generation (the status report and the `generation` file come later in the same pass, so a
/// person acknowledging what the host file shows could be refused by them). The state directory
/// is dtd's own, out of the workers' reach.
fn written_generation(cfg: &Config) -> anyhow::Result<u64> {
    let path = Paths::new(&cfg.state_dir).state();
    let state = crate::store::load_state(&path)
        .with_context(|| format!("reading dtd's state {}", path.display()))?;
    Ok(state.generation)
}
