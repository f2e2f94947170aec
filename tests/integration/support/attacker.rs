//! What user code on a worker can do to `dtd`'s port for the agents' reports: connect, and say
//! anything. It has no agent's key but its own, and no identity document but the one EC2 signed
//! for its own instance (and that only where the workers' metadata is open to it, which the
//! stack's is not by default); a document EC2 did not sign it can only forge.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use dt::protocol::channel::{self, Answer, Hello, HelloName};
use dt::protocol::markers::MarkerName;
use dt::protocol::signed::SigningKey;

use super::imds::{identity_document, sign_identity};
use super::Cluster;

/// A connection to dtd's port, as any process on a worker can open.
pub struct Attacker {
    r: BufReader<TcpStream>,
    w: TcpStream,
    pub key: std::sync::Arc<SigningKey>,
}

impl Attacker {
    /// Connects from `from` (a loopback address of its own, so that its connections are told
    /// from the played agents', which come from 127.0.0.1, as a worker's come from its IP).
    pub fn connect(c: &Cluster, from: &str) -> std::io::Result<Attacker> {
        let sock = connect_from(from, c.report_port)?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Attacker {
            r: BufReader::new(sock.try_clone()?),
            w: sock,
            key: std::sync::Arc::new(
                SigningKey::from_pkcs8(&SigningKey::generate().unwrap()).unwrap(),
            ),
        })
    }

    /// Holding `key` (an agent's, as someone who stole it would).
    pub fn with_key(mut self, key: std::sync::Arc<SigningKey>) -> Attacker {
        self.key = key;
        self
    }

    /// Sends a line as it is and reads dtd's answer (`None`: the connection closed).
    pub fn say(&mut self, line: &[u8]) -> Option<Answer> {
        self.w.write_all(line).ok()?;
        let mut answer = String::new();
        match self.r.read_line(&mut answer) {
            Ok(n) if n > 0 => serde_json::from_str(&answer).ok(),
            _ => None,
        }
    }

    /// A hello for the instance `claimed` at `ip`, under this attacker's own key, carrying
    /// `document` with `signature`.
    pub fn hello(
        &mut self,
        ip: &str,
        claimed: &str,
        document: String,
        signature: String,
    ) -> Option<Answer> {
        let ip: IpAddr = ip.parse().expect("an IP");
        let hello = Hello {
            instance_id: claimed.to_string(),
            document,
            signature,
        };
        let name = HelloName(ip);
        let signed = self
            .key
            .sign(&name, &hello.render(), dt::clock::now_millis());
        self.say(&channel::line(&name, &signed))
    }

    /// Claims `victim` at `victim_ip` with the identity document EC2 signed for the attacker's
    /// own instance (`own`, `own_ip`): what its user code could read were the metadata open to it.
    pub fn claim_with_own_document(
        &mut self,
        victim_ip: &str,
        victim: &str,
        own: &str,
        own_ip: &str,
    ) -> Option<Answer> {
        let doc = identity_document(own, own_ip);
        let sig = sign_identity(&doc);
        self.hello(victim_ip, victim, doc, sig)
    }

    /// Claims `victim` at `victim_ip` with a document of its own making: the victim's id and IP,
    /// and a signature no AWS key made.
    pub fn claim_with_forged_document(&mut self, victim_ip: &str, victim: &str) -> Option<Answer> {
        let doc = identity_document(victim, victim_ip);
        let junk =
            aws_lc_rs::signature::RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let mut sig = vec![0; junk.public_modulus_len()];
        junk.sign(
            &aws_lc_rs::signature::RSA_PKCS1_SHA256,
            &aws_lc_rs::rand::SystemRandom::new(),
            doc.as_bytes(),
            &mut sig,
        )
        .unwrap();
        use base64::Engine as _;
        let sig = base64::engine::general_purpose::STANDARD.encode(sig);
        self.hello(victim_ip, victim, doc, sig)
    }

    /// A report named for `name`, signed with this attacker's key.
    pub fn report(&mut self, name: MarkerName, line: &[u8], signed_at: u64) -> Option<Answer> {
        let signed = self.key.sign(&name, line, signed_at);
        self.say(&channel::line(&name, &signed))
    }
}

/// A TCP connection to 127.0.0.1:`port` from the local address `from`.
fn connect_from(from: &str, port: u16) -> std::io::Result<TcpStream> {
    let from: IpAddr = from.parse().map_err(std::io::Error::other)?;
    let local = SocketAddr::new(from, 0);
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let socket = match from {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(local)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stream = rt.block_on(socket.connect(to))?;
    stream.into_std().and_then(|s| {
        s.set_nonblocking(false)?;
        Ok(s)
    })
}
