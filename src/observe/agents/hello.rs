//! An agent's hello, checked: its key signed it, recently, for the IP it names, and it carries
//! an identity document EC2 signed for the instance it names at that IP. Only then may the key
//! speak for the instance (`board::Board::prove` decides whether it does).

use std::net::IpAddr;

use super::board::Proof;
use crate::model::Millis;
use crate::protocol::channel::{Hello, HelloName};
use crate::protocol::identity::{Certificates, IdentityError};
use crate::protocol::signed::{self, SignError};

/// What a hello is checked with.
pub struct Judge<'a> {
    pub certs: &'a Certificates,
    pub now: Millis,
    /// `workers.max_clock_skew`, in ms.
    pub skew: Millis,
}

/// Why a hello is refused: one class per kind, for journaling it once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloRefused {
    #[error("is refused: {0}")]
    Signature(SignError),
    #[error("is not a hello: {0}")]
    NotJson(String),
    #[error("{0}")]
    Time(#[from] Stale),
    #[error("carries an identity document that is refused: {0}")]
    Document(IdentityError),
    #[error("names {named}, but its identity document is {document}'s: a document proves only its own instance")]
    OtherInstance { named: String, document: String },
    #[error("is for {named}, but its identity document says {document}: a document proves only its own address")]
    OtherIp { named: IpAddr, document: IpAddr },
    #[error("names {0:?}, which is not an EC2 instance id")]
    NotAnInstance(String),
}

impl HelloRefused {
    pub fn class(&self) -> &'static str {
        match self {
            HelloRefused::Signature(_) => "hello-signature",
            HelloRefused::NotJson(_) => "hello-json",
            HelloRefused::Time(_) => "hello-time",
            HelloRefused::Document(_) => "hello-document",
            HelloRefused::OtherInstance { .. } => "hello-instance",
            HelloRefused::OtherIp { .. } => "hello-ip",
            HelloRefused::NotAnInstance(_) => "hello-instance-id",
        }
    }
}

/// A signing time too far from dtd's clock: a message kept and sent again, or a clock off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("was signed at {}, {} from dtd's clock ({}), more than workers.max_clock_skew ({}s): a message kept and sent again, or a clock that is off",
    crate::model::rfc3339(*.signed_at), describe(*.signed_at, *.now), crate::model::rfc3339(*.now), .skew / 1000)]
pub struct Stale {
    pub signed_at: u64,
    pub now: Millis,
    pub skew: Millis,
}

/// `Ok` when `signed_at` is within `skew` of `now`.
pub fn fresh(signed_at: u64, now: Millis, skew: Millis) -> Result<(), Stale> {
    match signed_at.abs_diff(now) <= skew {
        true => Ok(()),
        false => Err(Stale {
            signed_at,
            now,
            skew,
        }),
    }
}

fn describe(signed_at: u64, now: Millis) -> String {
    let secs = signed_at.abs_diff(now) / 1000;
    match signed_at > now {
        true => format!("{secs}s ahead"),
        false => format!("{secs}s behind"),
    }
}

/// Checks the hello `signed` (a signed line) for `ip`.
pub fn check(ip: IpAddr, signed: &[u8], j: &Judge) -> Result<Proof, HelloRefused> {
    let envelope = signed::open(&HelloName(ip), signed).map_err(HelloRefused::Signature)?;
    fresh(envelope.signed_at, j.now, j.skew)?;
    let hello: Hello =
        serde_json::from_slice(signed).map_err(|e| HelloRefused::NotJson(e.to_string()))?;
    if !crate::model::is_ec2_instance_id(&hello.instance_id) {
        let named = hello.instance_id.chars().take(64).collect();
        return Err(HelloRefused::NotAnInstance(named));
    }
    let doc = (j.certs)
        .verify(&hello.document, &hello.signature)
        .map_err(HelloRefused::Document)?;
    if doc.instance_id != hello.instance_id {
        return Err(HelloRefused::OtherInstance {
            named: hello.instance_id,
            document: doc.instance_id,
        });
    }
    if doc.private_ip != ip {
        return Err(HelloRefused::OtherIp {
            named: ip,
            document: doc.private_ip,
        });
    }
    Ok(Proof {
        instance_id: doc.instance_id,
        ip,
        key: envelope.key,
        account_id: doc.account_id,
        at: j.now,
    })
}
