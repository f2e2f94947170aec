//! Rendering the job's worker host files: the built-in formats, and templates for any other
//! (docs/shared-directory.md).

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
            // Brackets keep an IPv6 address's last group from reading as the slot count.
            Format::Horovod if h.ip.is_ipv6() => writeln!(out, "[{}]:{}", h.ip, h.slots),
            Format::Horovod => writeln!(out, "{}:{}", h.ip, h.slots),
        };
    }
    out
}

/// A host-file format of the user's own: the one line holding `{ip}` is repeated for every host
/// with `{ip}`, `{slots}` and `{index}` (0-based) filled in; the lines before and after it are a
/// header and a footer, copied as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTemplate {
    header: String,
    host_line: String,
    footer: String,
}

const PLACEHOLDERS: [&str; 3] = ["{ip}", "{slots}", "{index}"];

/// Why a template was refused, and on which of its lines (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct TemplateError {
    pub line: usize,
    pub problem: TemplateProblem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateProblem {
    #[error("no line contains {{ip}}: one line, repeated per host, must")]
    NoHostLine,
    #[error("a second line contains {{ip}}: only one line is repeated per host")]
    SecondHostLine,
    /// A `{word}` on the host line that is not a placeholder: most likely a typo (`{slot}`).
    #[error("unknown placeholder {{{0}}}: use {{ip}}, {{slots}} or {{index}}")]
    UnknownPlaceholder(String),
    /// A placeholder on a line that is not repeated per host.
    #[error("{0} outside the line with {{ip}} has no host to fill it")]
    Outside(&'static str),
}

impl HostTemplate {
    pub fn parse(text: &str) -> Result<HostTemplate, TemplateError> {
        let lines: Vec<&str> = text.lines().collect();
        let host_lines: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("{ip}"))
            .collect();
        let at = match host_lines.as_slice() {
            [one] => *one,
            [] => {
                return Err(TemplateError {
                    line: lines.len().max(1),
                    problem: TemplateProblem::NoHostLine,
                })
            }
            [_, second, ..] => {
                return Err(TemplateError {
                    line: second + 1,
                    problem: TemplateProblem::SecondHostLine,
                })
            }
        };
        check_host_line(lines[at]).map_err(|problem| TemplateError {
            line: at + 1,
            problem,
        })?;
        for (i, line) in lines.iter().enumerate().filter(|(i, _)| *i != at) {
            if let Some(p) = PLACEHOLDERS.iter().find(|p| line.contains(*p)) {
                return Err(TemplateError {
                    line: i + 1,
                    problem: TemplateProblem::Outside(p),
                });
            }
        }
        let joined = |part: &[&str]| part.iter().map(|l| format!("{l}\n")).collect::<String>();
        Ok(HostTemplate {
            header: joined(&lines[..at]),
            host_line: lines[at].to_string(),
            footer: joined(&lines[at + 1..]),
        })
    }

    pub fn render(&self, hosts: &[Host]) -> String {
        let mut out = String::with_capacity(self.header.len() + hosts.len() * 32);
        out.push_str(&self.header);
        for (index, h) in hosts.iter().enumerate() {
            let line = self
                .host_line
                .replace("{ip}", &h.ip.to_string())
                .replace("{slots}", &h.slots.to_string())
                .replace("{index}", &index.to_string());
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(&self.footer);
        out
    }
}

/// A `{word}` on the host line that is not a placeholder is most likely a typo (`{slot}`).
fn check_host_line(line: &str) -> Result<(), TemplateProblem> {
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let word = &after[..close];
        let is_word = !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        if is_word && !PLACEHOLDERS.contains(&format!("{{{word}}}").as_str()) {
            return Err(TemplateProblem::UnknownPlaceholder(word.into()));
        }
        rest = &after[close + 1..];
    }
    Ok(())
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

    /// The files under tests/fixtures/protocol/ that tests/python/test_protocol_fixtures.py reads
    /// with the example job's parser.
    #[test]
    fn the_golden_host_files_are_what_dtd_writes() {
        let hosts = [("10.0.1.5", 8), ("10.0.1.6", 8), ("fd00::7", 4)].map(|(ip, slots)| Host {
            ip: ip.parse().unwrap(),
            slots,
        });
        let golden = [
            (
                Format::Mxnet,
                include_str!("../../tests/fixtures/protocol/hosts.mxnet"),
            ),
            (
                Format::Mpi,
                include_str!("../../tests/fixtures/protocol/hosts.mpi"),
            ),
            (
                Format::Deepspeed,
                include_str!("../../tests/fixtures/protocol/hosts.deepspeed"),
            ),
            (
                Format::Horovod,
                include_str!("../../tests/fixtures/protocol/hosts.horovod"),
            ),
        ];
        for (format, text) in golden {
            assert_eq!(render(format, &hosts), text, "{format:?}");
        }
    }

    #[test]
    fn a_template_repeats_its_host_line() {
        let t =
            HostTemplate::parse("# workers\n{ip} slots={slots} # rank {index}\n# end\n").unwrap();
        assert_eq!(
            t.render(&hosts()),
            "# workers\n10.0.0.5 slots=1 # rank 0\n10.0.1.7 slots=8 # rank 1\n# end\n"
        );
        assert_eq!(t.render(&[]), "# workers\n# end\n");
        let bare = HostTemplate::parse("{ip}").unwrap();
        assert_eq!(bare.render(&hosts()), render(Format::Mxnet, &hosts()));
    }

    #[test]
    fn template_errors_name_the_line() {
        let e = HostTemplate::parse("# header\n").unwrap_err();
        assert!(
            e.problem.to_string().contains("no line contains {ip}"),
            "{e}"
        );
        let e = HostTemplate::parse("{ip}\n{ip}:{slots}\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = HostTemplate::parse("# n\n{ip} slots={slot}\n").unwrap_err();
        assert_eq!(
            (e.line, e.problem.to_string().contains("{slot}")),
            (2, true),
            "{e}"
        );
        let e = HostTemplate::parse("np={slots}\n{ip}\n").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        // Braces that are not a lowercase word are text (JSON, shell).
        assert!(HostTemplate::parse("{\"hosts\": [\n\"{ip}\", {\"n\": {slots}}\n]}\n").is_ok());
    }

    /// The examples shipped in templates/hostfiles/ parse and render as their comments say.
    #[test]
    fn shipped_templates() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/hostfiles");
        let load = |name: &str| {
            HostTemplate::parse(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
        };
        let openmpi = load("openmpi.tmpl").render(&hosts());
        assert!(openmpi.starts_with("# Open MPI"), "{openmpi}");
        assert!(openmpi.ends_with("\n10.0.0.5 slots=1 max_slots=1\n10.0.1.7 slots=8 max_slots=8\n"));
        let etc_hosts = load("hosts.tmpl").render(&hosts());
        assert!(
            etc_hosts.ends_with("\n10.0.0.5 dt-worker-0\n10.0.1.7 dt-worker-1\n"),
            "{etc_hosts}"
        );
    }
}
