//! `job.notify`, read from one word or a mapping, with its signal name and `expect` checked.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use super::de::{any_form, form_of, mapping_form};

/// How the job hears about a new membership (docs/job-contract.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Notify {
    #[default]
    None,
    Signal {
        signal: nix::sys::signal::Signal,
        pidfile: PathBuf,
        /// A string the process's command line must contain before it is signalled.
        expect: Option<String>,
    },
    Command(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    #[serde(default)]
    signal: Option<String>,
    #[serde(default)]
    pidfile: Option<PathBuf>,
    #[serde(default)]
    expect: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for Notify {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        use serde_yaml::Value;
        const FORMS: &str = "use none, { signal, pidfile } or { command: [..] }";
        let raw: RawNotify = match any_form(d)? {
            Value::String(w) if w == "none" => return Ok(Notify::None),
            Value::String(w) => {
                let why = format!("job.notify: unknown notify `{w}`: {FORMS}");
                return Err(D::Error::custom(why));
            }
            v @ Value::Mapping(_) => mapping_form("job.notify", v)?,
            v => {
                let why = format!("job.notify: {} is not a notify: {FORMS}", form_of(&v));
                return Err(D::Error::custom(why));
            }
        };
        match raw {
            RawNotify {
                signal: Some(sig),
                pidfile: Some(pidfile),
                expect,
                command: None,
            } => Ok(Notify::Signal {
                signal: parse_signal(&sig).map_err(D::Error::custom)?,
                pidfile,
                expect: expect_text(expect).map_err(D::Error::custom)?,
            }),
            RawNotify {
                signal: None,
                pidfile: None,
                expect: None,
                command: Some(argv),
            } if !argv.is_empty() && !argv[0].is_empty() => Ok(Notify::Command(argv)),
            _ => Err(D::Error::custom(
                "job.notify needs exactly { signal, pidfile[, expect] } or { command: [program, args..] }",
            )),
        }
    }
}

/// `expect` given but blank: it would match every command line.
#[derive(Debug, thiserror::Error)]
#[error("expect must not be empty: it is a string the job's command line contains")]
struct EmptyExpect;

fn expect_text(expect: Option<String>) -> Result<Option<String>, EmptyExpect> {
    match expect {
        Some(e) if e.trim().is_empty() => Err(EmptyExpect),
        other => Ok(other),
    }
}

/// A signal name (`SIGUSR1`, `usr1`) that names no signal.
#[derive(Debug, thiserror::Error)]
#[error("unknown signal `{0}` (e.g. SIGUSR1, SIGHUP)")]
pub(super) struct UnknownSignal(String);

pub(super) fn parse_signal(name: &str) -> Result<nix::sys::signal::Signal, UnknownSignal> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse().map_err(|_| UnknownSignal(name.into()))
}
