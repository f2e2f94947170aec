//! Reports a worker's `dtd agent` signs: the proof that a file about a worker came from that
//! worker's own agent, and not from user code on any worker (all of them write the shared
//! directory as one user, so a file's owner or an instance id in its body proves nothing).
//!
//! Each agent keeps an Ed25519 key where only it can read it (the worker's root disk), and puts
//! the public half on its own instance as the tag [`KEY_TAG`]; the worker role may tag only the
//! instance it runs on, and `dtd` keeps the first key it sees per instance. A signed report is
//! the body's one line of JSON with three members appended, the last of them the signature:
//!
//! ```text
//! {"instance_id":"i-0abc","ok":true,...,"agent_key":"<base64>","signed_at":1764201600123,"sig":"<base64>"}
//! ```
//!
//! The signature covers [`DOMAIN`], the file's name and a newline, then every byte of the line
//! before `,"sig":`. Binding the name means a report cannot be moved to another worker's IP or
//! passed off as another kind; `signed_at` (milliseconds since the epoch, strictly increasing per
//! agent) orders an agent's reports, so an older one put back in place is told from a new one.

use std::fmt;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::markers::MarkerName;

/// The instance tag that carries the agent's public key.
pub const KEY_TAG: &str = "dt:agent-key";
/// What a signature is made over first, so that no other signed message can pass for a report.
pub const DOMAIN: &[u8] = b"dt-agent-report-v1\n";
/// Where the signature member begins; everything before it is signed.
const SIG_MEMBER: &[u8] = b",\"sig\":\"";
const PUBLIC_KEY_BYTES: usize = 32;
const SIGNATURE_BYTES: usize = 64;

/// An agent's public key as the tag and the reports carry it: standard base64 of 32 bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentKey(String);

impl TryFrom<String> for AgentKey {
    type Error = SignError;

    fn try_from(text: String) -> Result<AgentKey, SignError> {
        AgentKey::parse(&text)
    }
}

impl From<AgentKey> for String {
    fn from(k: AgentKey) -> String {
        k.0
    }
}

impl AgentKey {
    /// A key as a tag or a report writes it; anything but 32 bytes in base64 is refused.
    pub fn parse(text: &str) -> Result<AgentKey, SignError> {
        match B64.decode(text) {
            Ok(bytes) if bytes.len() == PUBLIC_KEY_BYTES => Ok(AgentKey(text.to_string())),
            _ => Err(SignError::BadKey),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first characters, enough to tell two keys apart in a message.
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }

    fn bytes(&self) -> Vec<u8> {
        B64.decode(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for AgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("it is not signed by an agent (no signature)")]
    Unsigned,
    #[error("its signature is malformed: {0}")]
    Malformed(Malformed),
    #[error("its agent_key is not an Ed25519 public key in base64")]
    BadKey,
    #[error("its signature does not verify (changed after signing, or signed for another file)")]
    BadSignature,
    #[error("the agent's key is not a PKCS#8 Ed25519 key")]
    BadPrivateKey,
}

/// How a signature is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the signature is not the report's last member")]
    NotLast,
    /// serde_json's words, kept as text so that the error can be compared and cloned.
    #[error("{0}")]
    NotJson(String),
    #[error("sig is not 64 bytes in base64")]
    NotBase64,
}

/// What a signed report says of its signing: verified against the key it names, which is
/// still to be compared with the key of the instance at its IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub key: AgentKey,
    pub signed_at: u64,
}

/// An agent's private key.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    public: AgentKey,
}

impl SigningKey {
    /// A new key, as PKCS#8 bytes to keep.
    pub fn generate() -> Result<Vec<u8>, SignError> {
        let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| SignError::BadPrivateKey)?;
        Ok(doc.as_ref().to_vec())
    }

    pub fn from_pkcs8(bytes: &[u8]) -> Result<SigningKey, SignError> {
        let pair = Ed25519KeyPair::from_pkcs8(bytes).map_err(|_| SignError::BadPrivateKey)?;
        let public = AgentKey(B64.encode(pair.public_key().as_ref()));
        Ok(SigningKey { pair, public })
    }

    pub fn public(&self) -> &AgentKey {
        &self.public
    }

    /// `line` (a report's one line of JSON, as rendered) signed for `name` (a report's
    /// [`MarkerName`], or an agent's hello, `protocol::channel`) at `signed_at`.
    pub fn sign(&self, name: &dyn fmt::Display, line: &[u8], signed_at: u64) -> Vec<u8> {
        let body = line.trim_ascii_end();
        let open = body.strip_suffix(b"}").unwrap_or(body);
        let mut out = open.to_vec();
        if out.last() != Some(&b'{') {
            out.push(b',');
        }
        out.extend_from_slice(
            format!(
                "\"agent_key\":\"{}\",\"signed_at\":{signed_at}",
                self.public
            )
            .as_bytes(),
        );
        let sig = self.pair.sign(&message(name, &out));
        out.extend_from_slice(SIG_MEMBER);
        out.extend_from_slice(B64.encode(sig.as_ref()).as_bytes());
        out.extend_from_slice(b"\"}\n");
        out
    }
}

/// The members the envelope adds; serde refuses a report that names one twice.
#[derive(Deserialize)]
struct Envelope {
    agent_key: String,
    signed_at: u64,
    sig: String,
}

/// Checks the signature of the report `name` (as [`SigningKey::sign`]), against the key it
/// names.
pub fn open(name: &dyn fmt::Display, bytes: &[u8]) -> Result<Signed, SignError> {
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let Some(at) = rfind(line, SIG_MEMBER) else {
        return Err(SignError::Unsigned);
    };
    let sig_text = line[at + SIG_MEMBER.len()..]
        .strip_suffix(b"\"}")
        .ok_or(SignError::Malformed(Malformed::NotLast))?;
    let env: Envelope = serde_json::from_slice(line)
        .map_err(|e| SignError::Malformed(Malformed::NotJson(e.to_string())))?;
    if env.sig.as_bytes() != sig_text {
        return Err(SignError::Malformed(Malformed::NotLast));
    }
    let sig = match B64.decode(sig_text) {
        Ok(sig) if sig.len() == SIGNATURE_BYTES => sig,
        _ => return Err(SignError::Malformed(Malformed::NotBase64)),
    };
    let key = AgentKey::parse(&env.agent_key)?;
    UnparsedPublicKey::new(&ED25519, key.bytes())
        .verify(&message(name, &line[..at]), &sig)
        .map_err(|_| SignError::BadSignature)?;
    Ok(Signed {
        key,
        signed_at: env.signed_at,
    })
}

fn message(name: &dyn fmt::Display, signed: &[u8]) -> Vec<u8> {
    let mut m = DOMAIN.to_vec();
    m.extend_from_slice(name.to_string().as_bytes());
    m.push(b'\n');
    m.extend_from_slice(signed);
    m
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::markers::{MarkerKind, MarkerName};

    fn key() -> SigningKey {
        SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap()
    }

    fn name(kind: MarkerKind, ip: &str) -> MarkerName {
        MarkerName::new(kind, ip.parse().unwrap())
    }

    #[test]
    fn a_signed_report_opens_with_its_key_and_stays_json() {
        let k = key();
        let n = name(MarkerKind::Health, "10.0.1.5");
        let line = b"{\"instance_id\":\"i-1\",\"ok\":false}\n";
        let signed = k.sign(&n, line, 1_764_201_600_123);
        assert!(signed.ends_with(b"\"}\n"));
        let v: serde_json::Value = serde_json::from_slice(&signed).unwrap();
        assert_eq!(v["instance_id"], "i-1");
        assert_eq!(v["signed_at"], 1_764_201_600_123u64);
        let opened = open(&n, &signed).unwrap();
        assert_eq!(&opened.key, k.public());
        assert_eq!(opened.signed_at, 1_764_201_600_123);
        // An empty object signs too.
        let empty = k.sign(&n, b"{}\n", 7);
        assert_eq!(open(&n, &empty).unwrap().signed_at, 7);
    }

    #[test]
    fn a_report_moved_to_another_name_or_changed_does_not_verify() {
        let k = key();
        let n = name(MarkerKind::Health, "10.0.1.5");
        let signed = k.sign(&n, b"{\"ok\":true}\n", 1);
        let elsewhere = name(MarkerKind::Health, "10.0.1.6");
        assert_eq!(open(&elsewhere, &signed), Err(SignError::BadSignature));
        let other_kind = name(MarkerKind::Success, "10.0.1.5");
        assert_eq!(open(&other_kind, &signed), Err(SignError::BadSignature));
        let text = String::from_utf8(signed).unwrap().replace("true", "false");
        assert_eq!(open(&n, text.as_bytes()), Err(SignError::BadSignature));
    }

    #[test]
    fn a_key_swapped_in_does_not_verify_and_garbage_is_refused() {
        let (k, other) = (key(), key());
        let n = name(MarkerKind::Launcher, "10.0.1.5");
        let signed = String::from_utf8(k.sign(&n, b"{\"state\":\"running\"}\n", 3)).unwrap();
        let swapped = signed.replace(k.public().as_str(), other.public().as_str());
        assert_eq!(open(&n, swapped.as_bytes()), Err(SignError::BadSignature));
        assert_eq!(open(&n, b"{\"ok\":true}\n"), Err(SignError::Unsigned));
        let trailing = format!("{}x", signed.trim_end());
        assert!(matches!(
            open(&n, trailing.as_bytes()),
            Err(SignError::Malformed(_))
        ));
        let twice = signed.replacen("{", "{\"signed_at\":9,", 1);
        assert!(matches!(
            open(&n, twice.as_bytes()),
            Err(SignError::Malformed(_))
        ));
        assert_eq!(AgentKey::parse("c2hvcnQ="), Err(SignError::BadKey));
    }
}
