//! `job.launcher.in_place`: the in-place strategy's settings. Each node runs its own torchrun
//! (one torchft replica group), `dtd run` runs torchft's Lighthouse, and the training re-forms
//! its process group between two steps instead of restarting (docs/torchrun.md, "The in-place strategy").

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::digest::Sha256;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "Fields")]
pub struct InPlace {
    /// Where `dtd run` serves the Lighthouse and the nodes reach it: an IP of the master the
    /// workers can reach, and a port.
    pub lighthouse: SocketAddr,
    /// torchft's `torchft_lighthouse`; `None`: the one beside torchrun (`torchrun[0]`'s
    /// directory), from the same environment.
    pub program: Option<PathBuf>,
    /// The digest the Lighthouse's program must have, if pinned.
    pub sha256: Option<Sha256>,
    /// How long a quorum waits for nodes that heartbeat but have not asked to join: what a
    /// planned leave costs the others.
    pub join_timeout: Duration,
    /// A node whose heartbeats stop for this long is out of the next quorum.
    pub heartbeat_timeout: Duration,
    /// A collective blocked this long on a peer that went silent is aborted, and the step
    /// discarded (gloo's default is 30 minutes, NCCL's 10).
    pub collective_timeout: Duration,
    /// Fewer nodes than this do not train (torchft's `min_replica_size`).
    pub min_nodes: u32,
    /// A Spot-warned node trains on until this long before AWS takes it, then leaves like a
    /// planned leave: the warning's two minutes are worth training, and a leave costs the others
    /// under a second. Two minutes or more: it leaves at the warning.
    pub leave_before_loss: Duration,
}

impl InPlace {
    /// The Lighthouse's program: as configured, else `torchft_lighthouse` beside torchrun.
    pub fn program(&self, torchrun: &str) -> PathBuf {
        let beside = || {
            let dir = std::path::Path::new(torchrun).parent();
            dir.unwrap_or(std::path::Path::new(""))
                .join("torchft_lighthouse")
        };
        self.program.clone().unwrap_or_else(beside)
    }

    /// Where torchft's own Lighthouse listens, behind dtd's front: the master's loopback, on
    /// the same port.
    pub fn local(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.lighthouse.port()))
    }

    /// The URL torchft's managers dial (`TORCHFT_LIGHTHOUSE`).
    pub fn url(&self) -> String {
        format!("http://{}", self.lighthouse)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    lighthouse: Option<String>,
    program: Option<PathBuf>,
    #[serde(default, deserialize_with = "lighthouse_sha256")]
    sha256: Option<Sha256>,
    #[serde(default, deserialize_with = "super::de::optional_duration")]
    join_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "super::de::optional_duration")]
    heartbeat_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "super::de::optional_duration")]
    collective_timeout: Option<Duration>,
    min_nodes: Option<u32>,
    #[serde(default, deserialize_with = "super::de::optional_duration")]
    leave_before_loss: Option<Duration>,
}

fn lighthouse_sha256<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Sha256>, D::Error> {
    super::de::sha256("job.launcher.in_place.sha256", d)
}

/// Why `job.launcher.in_place` is refused.
#[derive(Debug, thiserror::Error)]
pub enum InPlaceError {
    #[error(
        "job.launcher.in_place.lighthouse: required: the master's IP and a port the workers \
         reach, e.g. 10.0.0.5:29510"
    )]
    NoLighthouse,
    #[error(
        "job.launcher.in_place.lighthouse: `{0}` is not an IP and a port, e.g. 10.0.0.5:29510"
    )]
    NotAnAddress(String),
    #[error(
        "job.launcher.in_place.lighthouse: `{0}`: an address the workers can dial (not 0.0.0.0 \
         or ::) and an unprivileged port"
    )]
    NotDialable(String),
    #[error(
        "job.launcher.in_place.lighthouse: `{0}`: not 127.0.0.1, where torchft's own Lighthouse \
         listens behind dtd's front; the master's IP the workers dial (another loopback address \
         on a single host)"
    )]
    Local(String),
    #[error("job.launcher.in_place.program: an absolute path, not {0}")]
    ProgramRelative(PathBuf),
    #[error("job.launcher.in_place.join_timeout: 100ms to 1m")]
    JoinTimeout,
    #[error("job.launcher.in_place.heartbeat_timeout: 500ms to 10m")]
    HeartbeatTimeout,
    #[error("job.launcher.in_place.collective_timeout: whole seconds, 1s to 1h")]
    CollectiveTimeout,
    #[error("job.launcher.in_place.min_nodes: at least 1")]
    NoMinNodes,
    #[error("job.launcher.in_place.leave_before_loss: 100ms to 2m (2m: leave at the warning)")]
    LeaveBeforeLoss,
}

impl TryFrom<Fields> for InPlace {
    type Error = InPlaceError;

    fn try_from(f: Fields) -> Result<Self, InPlaceError> {
        let lighthouse = parse_lighthouse(f.lighthouse.as_deref())?;
        if let Some(p) = f.program.as_ref().filter(|p| !p.is_absolute()) {
            return Err(InPlaceError::ProgramRelative(p.clone()));
        }
        let settings = InPlace {
            lighthouse,
            program: f.program,
            sha256: f.sha256,
            join_timeout: f.join_timeout.unwrap_or(Duration::from_millis(500)),
            heartbeat_timeout: f.heartbeat_timeout.unwrap_or(Duration::from_secs(2)),
            collective_timeout: f.collective_timeout.unwrap_or(Duration::from_secs(10)),
            min_nodes: f.min_nodes.unwrap_or(1),
            leave_before_loss: f.leave_before_loss.unwrap_or(Duration::from_secs(30)),
        };
        settings.check()?;
        Ok(settings)
    }
}

/// An IP and a port, the IP parsed as one: a host name would be resolved by every node on its
/// own, and `0.0.0.0` is no address a node can dial.
fn parse_lighthouse(text: Option<&str>) -> Result<SocketAddr, InPlaceError> {
    let text = text.ok_or(InPlaceError::NoLighthouse)?;
    let addr: SocketAddr = (text.parse()).map_err(|_| InPlaceError::NotAnAddress(text.into()))?;
    if addr.ip().is_unspecified() || addr.port() < 1024 {
        return Err(InPlaceError::NotDialable(text.into()));
    }
    if addr.ip() == std::net::Ipv4Addr::LOCALHOST {
        return Err(InPlaceError::Local(text.into()));
    }
    Ok(addr)
}

impl InPlace {
    fn check(&self) -> Result<(), InPlaceError> {
        let ms = |d: Duration| d.as_millis();
        if !(100..=60_000).contains(&ms(self.join_timeout)) {
            return Err(InPlaceError::JoinTimeout);
        }
        if !(500..=600_000).contains(&ms(self.heartbeat_timeout)) {
            return Err(InPlaceError::HeartbeatTimeout);
        }
        // torchft's managers take whole seconds from the environment.
        let c = self.collective_timeout;
        if c.subsec_nanos() != 0 || !(1..=3600).contains(&c.as_secs()) {
            return Err(InPlaceError::CollectiveTimeout);
        }
        if self.min_nodes == 0 {
            return Err(InPlaceError::NoMinNodes);
        }
        if !(100..=120_000).contains(&ms(self.leave_before_loss)) {
            return Err(InPlaceError::LeaveBeforeLoss);
        }
        Ok(())
    }
}
