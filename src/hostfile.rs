//! Rendering the job's worker host files in the built-in formats (DESIGN.md, "Host files").

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One IP per line: the 2018 `host_worker`.
    Mxnet,
    /// `ip slots=N`
    Mpi,
    /// `ip slots=N`
    Deepspeed,
    /// `ip:N`, what a Horovod `--host-discovery-script` prints.
    Horovod,
}

/// One line of a host file: a worker and how many processes it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub ip: IpAddr,
    pub slots: u32,
}

pub fn render(format: Format, hosts: &[Host]) -> String {
    let mut out = String::with_capacity(hosts.len() * 24);
    for h in hosts {
        // Writing to a String cannot fail.
        let _ = match format {
            Format::Mxnet => writeln!(out, "{}", h.ip),
            Format::Mpi | Format::Deepspeed => writeln!(out, "{} slots={}", h.ip, h.slots),
            Format::Horovod => writeln!(out, "{}:{}", h.ip, h.slots),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Vec<Host> {
        vec![
            Host {
                ip: "10.0.0.5".parse().unwrap(),
                slots: 1,
            },
            Host {
                ip: "10.0.1.7".parse().unwrap(),
                slots: 8,
            },
        ]
    }

    #[test]
    fn every_format() {
        assert_eq!(render(Format::Mxnet, &hosts()), "10.0.0.5\n10.0.1.7\n");
        assert_eq!(
            render(Format::Mpi, &hosts()),
            "10.0.0.5 slots=1\n10.0.1.7 slots=8\n"
        );
        assert_eq!(
            render(Format::Deepspeed, &hosts()),
            "10.0.0.5 slots=1\n10.0.1.7 slots=8\n"
        );
        assert_eq!(
            render(Format::Horovod, &hosts()),
            "10.0.0.5:1\n10.0.1.7:8\n"
        );
        assert_eq!(render(Format::Horovod, &[]), "");
    }
}
