//! What every agent's connection shares, before and after its hello.

use std::sync::Arc;
use std::time::Duration;

use super::board::Board;
use crate::clock::SharedClock;
use crate::model::Millis;
use crate::protocol::identity::Certificates;

/// What every connection shares.
pub struct Ctx {
    pub board: Arc<Board>,
    /// Changes (its sender gone) when the port closes: every connection waiting for its hello
    /// ends (the proved ones end with their thread).
    pub closed: tokio::sync::watch::Receiver<()>,
    pub certs: Certificates,
    /// `workers.max_clock_skew`, in ms.
    pub skew: Millis,
    pub clock: SharedClock,
    /// A proved connection that says nothing for this long is closed (its agent pings more often).
    pub idle: Duration,
}
