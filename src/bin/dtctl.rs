//! `dtctl`: the command-line tool for people and scripts.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use dt::config::Config;
use dt::ctl;
use dt::ctl::story::Target;
use dt::protocol::host_files::Format;

#[derive(Parser)]
#[command(
    name = "dtctl",
    version,
    about = "Inspect and drive a dynamic-training cluster"
)]
struct Cli {
    /// The same YAML file `dtd run` uses.
    #[arg(
        long,
        short,
        global = true,
        env = "DT_CONFIG",
        default_value = "/etc/dt/dtd.yaml"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// The cluster, its generation and every worker with what it waits for.
    Status {
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Launch workers from the worker launch template (as the EC2 console does).
    Add {
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
        count: u32,
    },
    /// Ask for workers to leave: deletes their elastic tag (as the EC2 console does).
    Remove {
        /// Private IPs or instance ids.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Print the current membership (a Horovod discovery script is `dtctl hosts --format horovod`).
    Hosts {
        #[arg(long, short, value_enum)]
        format: Option<Format>,
    },
    /// The events journal: who joined, who left, why, when.
    Events {
        /// Only events newer than this, e.g. 10m, 2h.
        #[arg(long)]
        since: Option<humantime::Duration>,
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        /// Then print each new event as dtd journals it, until interrupted.
        #[arg(long, short)]
        follow: bool,
    },
    /// A worker's story from the journal: launched, preparing, joined, trained, why it left, totals.
    Explain {
        /// A private IP (each instance that had it, oldest first) or an instance id.
        #[arg(value_parser = Target::parse)]
        target: Target,
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Where the workers' paid time went: training, preparing, waiting to join, paused, redone,
    /// leaving, idle, and the share trained.
    Goodput {
        /// Only the time since the ledger's hourly mark at or before this long ago, e.g. 6h,
        /// 2days (marks are kept for three days).
        #[arg(long)]
        since: Option<humantime::Duration>,
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Set how many workers there are: the worker Auto Scaling group's desired capacity (within
    /// its min and max), or launch-template workers launched or let go until N stay.
    Scale {
        #[arg(long)]
        replicas: usize,
        /// Show progress until the job trains on that many workers.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits.
        #[arg(long, default_value = "30m")]
        timeout: humantime::Duration,
    },
    /// Whether this cluster can work: a line per check, ✔ or ✖ with what to do; exit 1 on any ✖.
    Doctor {
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Re-arm replacing workers whose prepare-data failed, after dtd stopped at the limit.
    Resume,
    /// Acknowledge generation G on behalf of the job (writes the ack file).
    Ack { generation: u64 },
    /// Configuration file commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print the shell completion script, e.g. `dtctl completion bash >/etc/bash_completion.d/dtctl`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages of dtctl and of each of its commands into DIR (made if missing).
    Man { dir: PathBuf },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file without starting anything.
    Check { file: PathBuf },
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli).await {
        eprintln!("dtctl: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // The commands that need no configuration.
    match &cli.command {
        Command::Config {
            command: ConfigCommand::Check { file },
        } => return ctl::local::config_check(file),
        Command::Completion { shell } => {
            dt::manual::write_completion(Cli::command(), *shell, &mut std::io::stdout());
            return Ok(());
        }
        Command::Man { dir } => return Ok(dt::manual::print_man_pages(Cli::command(), dir)?),
        _ => {}
    }
    let cfg = Config::load(&cli.config)?;
    let json = |o: Output| matches!(o, Output::Json);
    match cli.command {
        Command::Status { output } => ctl::local::status(&cfg, json(output)),
        Command::Hosts { format } => ctl::local::hosts(&cfg, format),
        Command::Events {
            since,
            output,
            follow: false,
        } => ctl::local::events(&cfg, since.map(Into::into), json(output)),
        Command::Events { since, output, .. } => {
            ctl::follow::follow(&cfg, since.map(Into::into), json(output)).await
        }
        Command::Explain { target, output } => ctl::explain::explain(&cfg, &target, json(output)),
        Command::Goodput { since, output } => {
            ctl::goodput::goodput(&cfg, since.map(Into::into), json(output))
        }
        Command::Ack { generation } => ctl::local::ack(&cfg, generation),
        Command::Add { count } => ctl::ec2::add(&cfg, count).await,
        Command::Remove { targets } => ctl::ec2::remove(&cfg, &targets).await,
        Command::Scale {
            replicas,
            wait,
            timeout,
        } => ctl::scale::scale(&cfg, replicas, wait.then(|| timeout.into())).await,
        Command::Resume => ctl::asg::resume(&cfg),
        Command::Doctor { output } => {
            if !ctl::doctor::doctor(&cfg, json(output)).await? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Config { .. } | Command::Completion { .. } | Command::Man { .. } => {
            unreachable!("answered before the configuration was read")
        }
    }
}
