//! `job.launcher`: the command `dtd agent` runs on every listed node to start the job (torchrun),
//! and how it is stopped. Read by the agent (it runs it) and by `dtd run` (it writes the launch
//! plan and watches the agents' reports).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::de::{duration, named, sha256};
use super::error::Rule;
use super::Elastic;
use crate::digest::Sha256;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launcher {
    /// torchrun as an argv (never a shell): the program, then any arguments of its own that
    /// come before the ones the agent adds.
    #[serde(deserialize_with = "program_argv")]
    pub torchrun: Vec<String>,
    /// The training script and its arguments, after torchrun's.
    #[serde(deserialize_with = "script_argv")]
    pub script: Vec<String>,
    /// Processes per node: a number, or `gpu` (one per GPU), `cpu` or `auto`, as torchrun takes.
    #[serde(default)]
    pub nproc_per_node: NprocPerNode,
    #[serde(default)]
    pub rdzv: Rdzv,
    /// How torchrun meets a membership change: a fresh world per generation, or its own
    /// `--nnodes=MIN:MAX` rendezvous kept across generations.
    #[serde(default)]
    pub strategy: Strategy,
    /// The elastic strategy's settings (only with `strategy: elastic`).
    #[serde(default)]
    pub elastic: Option<Elastic>,
    /// The in-place strategy's settings (required with `strategy: in_place`).
    #[serde(default)]
    pub in_place: Option<super::InPlace>,
    /// torchrun's own `--max-restarts`; unset: [`Launcher::max_restarts`] picks by strategy.
    #[serde(default)]
    pub max_restarts: Option<u32>,
    #[serde(default)]
    pub stop: Stop,
    /// Added to torchrun's environment (after the agent's `DT_*`).
    #[serde(default, deserialize_with = "environment")]
    pub env: BTreeMap<String, String>,
    /// The first pause before a launcher that failed while listed starts again; it doubles at
    /// every failure in the same generation, up to five minutes.
    #[serde(default = "default_backoff", deserialize_with = "backoff")]
    pub backoff: Duration,
    /// A member whose agent has not touched its launcher report for this long has stopped
    /// answering: it leaves the job at once, so the others start a new world without it.
    #[serde(default = "default_silent_after", deserialize_with = "silent_after")]
    pub silent_after: Duration,
    /// When more than this share of the members are silent at once, none is taken out for its
    /// silence: so many at once is dtd's or the network's trouble, not theirs.
    #[serde(default = "default_silent_share", deserialize_with = "silent_share")]
    pub silent_share: f64,
    /// The digest torchrun's program (the first element) must have, if pinned.
    #[serde(default, deserialize_with = "torchrun_sha256")]
    pub sha256: Option<Sha256>,
    /// Who torchrun and the training run as; `None`: `job.owner`'s user, else the agent's own
    /// (which must then not be root).
    #[serde(default)]
    pub user: Option<super::JobUser>,
    /// torchrun's working directory; `None`: the job's user's home, if it has one.
    #[serde(default, deserialize_with = "workdir")]
    pub workdir: Option<std::path::PathBuf>,
}

impl Launcher {
    /// `--max-restarts`: as configured, else none within a generation (`generation`), or
    /// enough for a long job's membership changes (`elastic`: every leave costs each survivor
    /// one, since the agent ends its workers to start a new round), or a few (`in_place`: a
    /// node's crashed process starts again and copies its state back from a peer).
    pub fn max_restarts(&self) -> u32 {
        let by_strategy = match self.strategy {
            Strategy::Generation => 0,
            Strategy::Elastic => 1000,
            Strategy::InPlace => 10,
        };
        self.max_restarts.unwrap_or(by_strategy)
    }

    /// The elastic strategy's settings, when it is the strategy.
    pub fn elastic(&self) -> Option<Elastic> {
        (self.strategy == Strategy::Elastic).then(|| self.elastic.clone().unwrap_or_default())
    }

    /// The in-place strategy's settings, when it is the strategy.
    pub fn in_place(&self) -> Option<&super::InPlace> {
        self.in_place
            .as_ref()
            .filter(|_| self.strategy == Strategy::InPlace)
    }

    /// What only makes sense together: a strategy's settings without that strategy are a
    /// mistake, not something to ignore; the in-place strategy needs its Lighthouse's address.
    pub(super) fn check(&self) -> Result<(), Rule> {
        let s = self.strategy.as_str();
        if self.strategy != Strategy::Elastic && self.elastic.is_some() {
            return Err(Rule::ElasticSettingsAlone(s));
        }
        if self.strategy != Strategy::InPlace && self.in_place.is_some() {
            return Err(Rule::InPlaceSettingsAlone(s));
        }
        if self.strategy == Strategy::InPlace && self.in_place.is_none() {
            return Err(Rule::InPlaceWithoutSettings);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// A fixed-size world per generation, under a fresh rendezvous id.
    #[default]
    Generation,
    /// torchrun's own rendezvous (`--nnodes=MIN:MAX`), kept while its holder stays.
    Elastic,
    /// One torchrun per node for as long as the node is listed; torchft re-forms the job's
    /// process group between steps (`job.launcher.in_place`).
    InPlace,
}

impl Strategy {
    /// As the config writes it (and `DT_STRATEGY` tells the training script).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Generation => "generation",
            Strategy::Elastic => "elastic",
            Strategy::InPlace => "in_place",
        }
    }
}

/// torchrun's `--nproc-per-node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NprocPerNode {
    Count(u32),
    /// `gpu`, `cpu` or `auto`.
    Word(&'static str),
}

impl Default for NprocPerNode {
    fn default() -> Self {
        NprocPerNode::Word("gpu")
    }
}

impl std::fmt::Display for NprocPerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NprocPerNode::Count(n) => write!(f, "{n}"),
            NprocPerNode::Word(w) => f.write_str(w),
        }
    }
}

impl<'de> Deserialize<'de> for NprocPerNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Count(u32),
            Word(String),
        }
        match Either::deserialize(d)? {
            Either::Count(n) if (1..=1024).contains(&n) => Ok(NprocPerNode::Count(n)),
            Either::Word(w) => match ["gpu", "cpu", "auto"].into_iter().find(|k| *k == w) {
                Some(k) => Ok(NprocPerNode::Word(k)),
                None => Err(D::Error::custom(format!(
                    "job.launcher.nproc_per_node: `{w}` is not 1..1024, gpu, cpu or auto"
                ))),
            },
            Either::Count(n) => Err(D::Error::custom(format!(
                "job.launcher.nproc_per_node: {n} is not 1..1024, gpu, cpu or auto"
            ))),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rdzv {
    /// The c10d rendezvous port on the first listed node (open from workers to workers).
    #[serde(default = "default_port", deserialize_with = "port")]
    pub port: u16,
}

impl Default for Rdzv {
    fn default() -> Self {
        Rdzv {
            port: default_port(),
        }
    }
}

/// How a launcher is stopped: `signal` to torchrun (which passes it to its workers), then after
/// `grace` SIGKILL to its whole process group.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    #[serde(default = "default_signal", deserialize_with = "signal")]
    pub signal: nix::sys::signal::Signal,
    #[serde(default = "default_grace", deserialize_with = "grace")]
    pub grace: Duration,
}

impl Default for Stop {
    fn default() -> Self {
        Stop {
            signal: default_signal(),
            grace: default_grace(),
        }
    }
}

fn default_port() -> u16 {
    29400
}

fn default_signal() -> nix::sys::signal::Signal {
    nix::sys::signal::Signal::SIGTERM
}

/// Well inside a Spot warning's two minutes, with room for a checkpoint.
fn default_grace() -> Duration {
    Duration::from_secs(30)
}

fn default_backoff() -> Duration {
    Duration::from_secs(5)
}

fn default_silent_after() -> Duration {
    Duration::from_secs(30)
}

fn default_silent_share() -> f64 {
    1.0 / 3.0
}

/// An argv: a list of words, where a number or a boolean is taken as it is written (`--epochs,
/// 90` needs no quotes).
fn argv<'de, D: Deserializer<'de>>(key: &str, d: D) -> Result<Vec<String>, D::Error> {
    use serde::de::Error;
    let words = Vec::<serde_yaml::Value>::deserialize(d)?;
    let v = (words.into_iter())
        .map(|w| match w {
            serde_yaml::Value::String(s) => Ok(s),
            serde_yaml::Value::Number(n) => Ok(n.to_string()),
            serde_yaml::Value::Bool(b) => Ok(b.to_string()),
            other => Err(D::Error::custom(format!(
                "job.launcher.{key}: {other:?} is not a word of a command line"
            ))),
        })
        .collect::<Result<Vec<String>, _>>()?;
    if v.first().is_none_or(|p| p.is_empty()) {
        return Err(D::Error::custom(format!(
            "job.launcher.{key}: a list whose first element is not empty, e.g. [/opt/venv/bin/torchrun]"
        )));
    }
    if v.iter().any(|a| a.contains('\0')) {
        return Err(D::Error::custom(format!(
            "job.launcher.{key}: an argument holds a NUL byte"
        )));
    }
    Ok(v)
}

fn program_argv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    argv("torchrun", d)
}

fn script_argv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    argv("script", d)
}

fn port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    use serde::de::Error;
    match u16::deserialize(d) {
        Ok(p) if p >= 1024 => Ok(p),
        Ok(p) => Err(D::Error::custom(format!(
            "job.launcher.rdzv.port: {p} is a privileged port; use 1024..65535"
        ))),
        Err(e) => named("job.launcher.rdzv.port", Err(e)),
    }
}

fn signal<'de, D: Deserializer<'de>>(d: D) -> Result<nix::sys::signal::Signal, D::Error> {
    use serde::de::Error;
    let name = String::deserialize(d)?;
    named(
        "job.launcher.stop.signal",
        super::notify::parse_signal(&name).map_err(D::Error::custom),
    )
}

fn grace<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("job.launcher.stop.grace", duration(d))
}

fn backoff<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    named("job.launcher.backoff", duration(d))
}

fn silent_after<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    use serde::de::Error;
    let after = named("job.launcher.silent_after", duration(d))?;
    // The agent touches its report every two seconds, dtd looks every two, and an NFS client
    // (EFS) may serve a `stat` from its attribute cache for three more: up to 7 s between two
    // sightings of a live node. Five heartbeats keep a slow file system from killing one.
    let least = 5 * crate::protocol::launcher::HEARTBEAT;
    if after < least {
        return Err(D::Error::custom(format!(
            "job.launcher.silent_after: at least {}s (five of the agent's heartbeats)",
            least.as_secs()
        )));
    }
    Ok(after)
}

fn silent_share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::de::Error;
    let share = named("job.launcher.silent_share", f64::deserialize(d))?;
    if !(share > 0.0 && share <= 1.0) {
        return Err(D::Error::custom(format!(
            "job.launcher.silent_share: a share of the members above 0 and at most 1 (e.g. 0.33), not {share}"
        )));
    }
    Ok(share)
}

fn workdir<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::path::PathBuf>, D::Error> {
    use serde::de::Error;
    let dir = std::path::PathBuf::deserialize(d)?;
    if !dir.is_absolute() {
        return Err(D::Error::custom(format!(
            "job.launcher.workdir: an absolute path, not {}",
            dir.display()
        )));
    }
    Ok(Some(dir))
}

fn torchrun_sha256<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Sha256>, D::Error> {
    sha256("job.launcher.sha256", d)
}

/// Variable names only, and no `DT_*`: those are the agent's own, which torchrun's children read.
fn environment<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    use serde::de::Error;
    let env = BTreeMap::<String, String>::deserialize(d)?;
    for (k, v) in &env {
        let name_ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok || v.contains('\0') {
            return Err(D::Error::custom(format!(
                "job.launcher.env: `{k}` is not a variable name (letters, digits, _) or its value holds a NUL byte"
            )));
        }
        if k.starts_with("DT_") {
            return Err(D::Error::custom(format!(
                "job.launcher.env: `{k}`: DT_* variables are the agent's own"
            )));
        }
    }
    Ok(env)
}
