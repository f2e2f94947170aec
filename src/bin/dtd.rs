//! `dtd`: the dynamic-training daemon.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

use dt::config::Config;
use dt::daemon::{lock_state_dir, Daemon};

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
    /// Run on each worker: prepare its data, write its marker, watch for interruption notices.
    Agent {
        /// The YAML configuration file, on the worker's own disk (the stack writes it at boot): not
        /// a copy in the shared directory, which the job on every worker can write.
        #[arg(long, short, default_value = "/etc/dt/dtd.yaml")]
        config: PathBuf,
        /// This worker's private IP (default: the instance metadata's local-ipv4).
        #[arg(long)]
        ip: Option<IpAddr>,
        /// This worker's instance id (default: the instance metadata's instance-id).
        #[arg(long)]
        instance_id: Option<String>,
        /// Where the agent keeps its signing key (default: the config's agent.key_file).
        #[arg(long)]
        key_file: Option<PathBuf>,
    },
    /// Write the man pages of dtd and of each of its commands into DIR (made if missing).
    Man { dir: PathBuf },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    dt::init_logging();
    match Cli::parse().command {
        Command::Run { config } => run(config).await,
        Command::Agent {
            config,
            ip,
            instance_id,
            key_file,
        } => {
            let overrides = dt::agent::Overrides {
                ip,
                instance_id,
                key_file,
            };
            agent(config, overrides).await
        }
        Command::Man { dir } => Ok(dt::manual::print_man_pages(Cli::command(), &dir)?),
    }
}

async fn run(config: PathBuf) -> anyhow::Result<()> {
    let cfg = Config::load(&config)?;
    let _lock = lock_state_dir(&cfg)?;
    let clients = dt::aws::clients(&cfg).await;
    let clock = std::sync::Arc::new(dt::clock::SystemClock);
    let daemon = Daemon::new(cfg, clients, clock).context("starting dtd")?;
    daemon.run().await?;
    Ok(())
}

async fn agent(config: PathBuf, overrides: dt::agent::Overrides) -> anyhow::Result<()> {
    let cfg = Config::load(&config)?;
    dt::agent::run(&cfg, overrides).await.context("dtd agent")?;
    Ok(())
}
