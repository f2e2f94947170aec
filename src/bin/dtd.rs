//! `dtd`: the dynamic-training daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use dt::config::Config;
use dt::daemon::{lock_state_dir, Daemon};
use dt::store::Paths;

#[derive(Parser)]
#[command(name = "dtd", version, about = "The dynamic-training daemon")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control loop on the master node: watch workers, rewrite host files, rescale the job.
    Run {
        /// The YAML configuration file.
        #[arg(long, short, default_value = "/etc/dt/dtd.yaml")]
        config: PathBuf,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    dt::init_logging();
    match Cli::parse().command {
        Command::Run { config } => run(config).await,
    }
}

async fn run(config: PathBuf) -> anyhow::Result<()> {
    let cfg = Config::load(&config)?;
    let _lock = lock_state_dir(&Paths::new(cfg.state_dir()))?;
    let clients = dt::aws::clients(&cfg).await;
    let daemon = Daemon::new(cfg, clients).context("starting dtd")?;
    daemon.run().await?;
    Ok(())
}
