//! How an agent's reports reach `dtd run` (ARCHITECTURE.md, "How a worker's word reaches dtd"):
//! over one TCP connection per agent to `workers.listen`, never through a file any job could
//! delete, put back or squat. One line each way per message:
//!
//! ```text
//! agent: identity_10.0.1.5 {"instance_id":"i-0abc","document":"…","signature":"…","agent_key":"…","signed_at":…,"sig":"…"}
//! dtd:   {"ok":true,"now":1764201600123}
//! agent: health_10.0.1.5 {"instance_id":"i-0abc","ok":true,…,"agent_key":"…","signed_at":…,"sig":"…"}
//! dtd:   {"ok":true,"now":1764201600130}
//! agent: ping
//! dtd:   {"ok":true,"now":1764201607630}
//! ```
//!
//! The first line of a connection is the agent's hello: the instance identity document and
//! EC2's signature of it (`protocol::identity`), signed under the agent's key (`protocol::signed`,
//! for the name `identity_<ip>`), which binds the key to the instance. Every report after it is
//! signed with that key for its own name (`health_<ip>`, `launcher_<ip>`, … as the files were
//! named), at a time checked against dtd's clock. A ping, unsigned, says the agent still runs:
//! nothing but the agent can write on its connection. `dtd` answers each line, with its clock,
//! or refuses it (and, for a hello, closes).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::markers::{MarkerName, NameError, MAX_REPORT_BYTES};

/// The port the stack opens from the workers to the master for the agents' reports.
pub const PORT: u16 = 7719;
/// The file in the shared directory where `dtd run` publishes the address it takes reports
/// at, for agents whose config names none (`agent.report_to`). Believed only when `dtd`'s user
/// (the agent's own) owns it.
pub const ADDRESS_FILE: &str = "dtd_address";
pub const MAX_ADDRESS_BYTES: u64 = 128;
/// A hello's name prefix: `identity_<ip>`.
pub const HELLO_PREFIX: &str = "identity_";
pub const PING: &[u8] = b"ping";
/// A report (16 KiB), a hello (document, signature, key), and the name before them.
pub const MAX_LINE: usize = MAX_REPORT_BYTES as usize + 8 * 1024;

/// How often an agent pings `dtd` when it has nothing new to say: four times within
/// `job.launcher.silent_after` (`silent_after`), so that one lost ping never makes a member
/// silent, and at least every 10 s.
pub fn beat(silent_after: Option<Duration>) -> Duration {
    const AT_LEAST: Duration = Duration::from_secs(10);
    silent_after.map_or(AT_LEAST, |s| (s / 4).min(AT_LEAST))
}

/// What a hello is signed for: `identity_<ip>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloName(pub IpAddr);

impl fmt::Display for HelloName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{HELLO_PREFIX}{}", self.0)
    }
}

/// A hello's body, before the agent's signature is appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub instance_id: String,
    /// The identity document exactly as the metadata served it.
    pub document: String,
    /// EC2's base64-encoded signature of the document.
    pub signature: String,
}

impl Hello {
    /// One line of JSON, to be signed.
    pub fn render(&self) -> Vec<u8> {
        // Serializing these plain strings cannot fail.
        let mut json = serde_json::to_vec(self).unwrap_or_default();
        json.push(b'\n');
        json
    }
}

/// One line an agent sends, its bytes borrowed.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Hello { ip: IpAddr, signed: &'a [u8] },
    Report { name: MarkerName, signed: &'a [u8] },
    Ping,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a line is a name, a space and a signed report, or `ping`")]
    NoName,
    #[error("`{0}` is not a report's name: {1}")]
    BadName(String, NameError),
    #[error("the name's IP part is not an address")]
    BadHello,
}

/// Parses one line (without its newline).
pub fn parse(line: &[u8]) -> Result<Frame<'_>, FrameError> {
    if line == PING {
        return Ok(Frame::Ping);
    }
    let at = line
        .iter()
        .position(|b| *b == b' ')
        .ok_or(FrameError::NoName)?;
    let (name, signed) = (&line[..at], &line[at + 1..]);
    let name = std::str::from_utf8(name).map_err(|_| FrameError::NoName)?;
    if let Some(ip) = name.strip_prefix(HELLO_PREFIX) {
        let ip = ip.parse().map_err(|_| FrameError::BadHello)?;
        return Ok(Frame::Hello { ip, signed });
    }
    let name = MarkerName::parse(name).map_err(|e| FrameError::BadName(printable(name), e))?;
    Ok(Frame::Report { name, signed })
}

/// A line to send: `name`, a space, and the signed line (which ends in a newline).
pub fn line(name: &dyn fmt::Display, signed: &[u8]) -> Vec<u8> {
    let mut out = name.to_string().into_bytes();
    out.push(b' ');
    out.extend_from_slice(signed);
    if out.last() != Some(&b'\n') {
        out.push(b'\n');
    }
    out
}

/// What `dtd` answers to each line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub ok: bool,
    /// dtd's clock (ms since the epoch): an agent whose own is far off says so in its log.
    pub now: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl Answer {
    pub fn ok(now: u64) -> Answer {
        Answer {
            ok: true,
            now,
            refused: None,
        }
    }

    pub fn refused(now: u64, why: String) -> Answer {
        Answer {
            ok: false,
            now,
            refused: Some(why),
        }
    }

    pub fn render(&self) -> Vec<u8> {
        let mut json = serde_json::to_vec(self).unwrap_or_default();
        json.push(b'\n');
        json
    }
}

/// The published address: `10.0.0.5:7719` and a newline.
pub fn parse_address(bytes: &[u8]) -> Option<SocketAddr> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// At most 64 characters of a name someone sent, without control characters.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::markers::MarkerKind;

    #[test]
    fn lines_parse_into_hellos_reports_and_pings() {
        let ip: IpAddr = "10.0.1.5".parse().unwrap();
        let hello = line(&HelloName(ip), b"{\"a\":1}\n");
        assert_eq!(hello, b"identity_10.0.1.5 {\"a\":1}\n");
        let body = &hello[..hello.len() - 1];
        assert_eq!(
            parse(body),
            Ok(Frame::Hello {
                ip,
                signed: b"{\"a\":1}"
            })
        );
        let name = MarkerName::new(MarkerKind::Health, ip);
        let report = line(&name, b"{}");
        assert_eq!(
            parse(&report[..report.len() - 1]),
            Ok(Frame::Report {
                name,
                signed: b"{}"
            })
        );
        assert_eq!(parse(b"ping"), Ok(Frame::Ping));
    }

    #[test]
    fn what_is_not_a_frame_is_refused_with_words() {
        assert_eq!(parse(b"hello"), Err(FrameError::NoName));
        assert_eq!(parse(b"identity_nope {}"), Err(FrameError::BadHello));
        let e = parse(b"passwd_10.0.1.5 {}").unwrap_err().to_string();
        assert!(e.contains("passwd_10.0.1.5"), "{e}");
        let e = parse(b"health_x\x07 {}").unwrap_err().to_string();
        assert!(!e.contains('\x07'), "{e}");
    }

    #[test]
    fn answers_and_addresses_round_trip() {
        let a = Answer::refused(5, "no".into());
        assert_eq!(serde_json::from_slice::<Answer>(&a.render()).unwrap(), a);
        assert_eq!(Answer::ok(7).render(), b"{\"ok\":true,\"now\":7}\n");
        assert_eq!(
            parse_address(b"10.0.0.5:7719\n"),
            Some("10.0.0.5:7719".parse().unwrap())
        );
        assert_eq!(parse_address(b"10.0.0.5"), None);
    }
}
