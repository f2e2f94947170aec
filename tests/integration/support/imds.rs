//! A stand-in for the EC2 instance metadata service (IMDSv2), which cannot run off EC2: a small
//! HTTP/1.1 server on 127.0.0.1 that issues session tokens on `PUT /latest/api/token` (honouring
//! the TTL header), serves `GET /latest/meta-data/...` only with a valid token (401 otherwise),
//! answers 404 for paths not set, and counts the requests per path. Point the SDK's IMDS client at
//! it with `AWS_EC2_METADATA_SERVICE_ENDPOINT` (see [`ImdsStandIn::env`]).
//!
//! It serves the instance identity document too (`/latest/dynamic/instance-identity/document`
//! and `/signature`), made from its `instance-id` and `local-ipv4`, and signed, as EC2 signs it,
//! but with the tests' stand-in for AWS's key (tests/fixtures/identity/), whose certificate the
//! tests' `dtd` trusts (`workers.identity_certificates`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::server::Server;

const TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";

#[derive(Default)]
struct State {
    /// Metadata by path under `/latest/meta-data/`.
    values: HashMap<String, String>,
    tokens: HashMap<String, Instant>,
    issued: u64,
    /// Every request answers this status while set (an IMDS outage).
    failing: Option<u16>,
    requests: HashMap<String, usize>,
}

pub struct ImdsStandIn {
    server: Server<State>,
}

impl ImdsStandIn {
    pub fn start() -> ImdsStandIn {
        ImdsStandIn {
            server: Server::start("IMDS stand-in", serve),
        }
    }

    /// An instance with this private IP and id.
    pub fn with_identity(ip: &str, instance_id: &str) -> ImdsStandIn {
        let imds = ImdsStandIn::start();
        imds.set("local-ipv4", ip);
        imds.set("instance-id", instance_id);
        imds
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// The environment that points the AWS SDK's IMDS client here.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![("AWS_EC2_METADATA_SERVICE_ENDPOINT", self.endpoint())]
    }

    /// Sets `/latest/meta-data/<path>`.
    pub fn set(&self, path: &str, body: &str) {
        self.lock()
            .values
            .insert(path.to_string(), body.to_string());
    }

    pub fn remove(&self, path: &str) {
        self.lock().values.remove(path);
    }

    /// Answers every request with `status` (e.g. 500) until `fail_with(None)`.
    pub fn fail_with(&self, status: Option<u16>) {
        self.lock().failing = status;
    }

    /// Requests so far for `/latest/meta-data/<path>` (or `api/token` for token requests).
    pub fn requests(&self, path: &str) -> usize {
        self.lock().requests.get(path).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.server.lock()
    }
}

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

/// One connection, kept alive for as many requests as the client sends.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let Ok(write_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut out = write_half;
    while let Some(req) = read_request(&mut reader) {
        let (status, headers, body) = answer(&req, &mut state.lock().expect("IMDS state"));
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n",
            reason(status),
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() || out.write_all(body.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
    })
}

fn answer(req: &Request, s: &mut State) -> (u16, Vec<(&'static str, String)>, String) {
    let key = req
        .path
        .strip_prefix("/latest/meta-data/")
        .or_else(|| req.path.strip_prefix("/latest/"))
        .unwrap_or(&req.path)
        .to_string();
    *s.requests.entry(key.clone()).or_default() += 1;
    if let Some(status) = s.failing {
        return (status, vec![], "stand-in outage\n".into());
    }
    let get = req.method == "GET";
    match (req.method.as_str(), req.path.as_str()) {
        ("PUT", "/latest/api/token") => issue_token(req, s),
        (_, p)
            if get
                && (p.starts_with("/latest/meta-data/") || p.starts_with("/latest/dynamic/")) =>
        {
            let valid = req
                .headers
                .get(TOKEN_HEADER)
                .and_then(|t| s.tokens.get(t))
                .is_some_and(|expiry| Instant::now() < *expiry);
            if !valid {
                return (401, vec![], String::new());
            }
            match s.values.get(&key).cloned().or_else(|| identity(s, &key)) {
                Some(v) => (200, vec![], v),
                None => (404, vec![], "Not Found\n".into()),
            }
        }
        _ => (405, vec![], String::new()),
    }
}

/// The identity document and its signature, from the instance's id and IP (when both are set).
fn identity(s: &State, key: &str) -> Option<String> {
    let id = s.values.get("instance-id")?;
    let ip = s.values.get("local-ipv4")?;
    let doc = identity_document(id, ip);
    match key {
        "dynamic/instance-identity/document" => Some(doc),
        "dynamic/instance-identity/signature" => Some(sign_identity(&doc)),
        _ => None,
    }
}

/// moto's account, the one the tests' instances are in.
pub const ACCOUNT: &str = "123456789012";

/// An instance identity document as EC2 writes one (pretty-printed, more members than dtd reads).
pub fn identity_document(id: &str, ip: &str) -> String {
    format!(
        "{{\n  \"accountId\" : \"{ACCOUNT}\",\n  \"architecture\" : \"x86_64\",\n  \
         \"availabilityZone\" : \"us-east-1a\",\n  \"imageId\" : \"ami-12c6146b\",\n  \
         \"instanceId\" : \"{id}\",\n  \"instanceType\" : \"p3.2xlarge\",\n  \
         \"pendingTime\" : \"2026-11-28T00:00:00Z\",\n  \"privateIp\" : \"{ip}\",\n  \
         \"region\" : \"us-east-1\",\n  \"version\" : \"2017-09-30\"\n}}"
    )
}

/// `document` signed as EC2 signs one (base64 of SHA-256 with RSA, wrapped as the metadata
/// serves it), with the tests' stand-in key.
pub fn sign_identity(document: &str) -> String {
    use aws_lc_rs::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
    use base64::Engine as _;
    let pk8 = std::fs::read(super::repo().join("tests/fixtures/identity/signer.pk8"))
        .expect("the stand-in signer's key");
    let key = RsaKeyPair::from_pkcs8(&pk8).expect("a PKCS#8 RSA key");
    let mut sig = vec![0; key.public_modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &aws_lc_rs::rand::SystemRandom::new(),
        document.as_bytes(),
        &mut sig,
    )
    .expect("signing");
    let b64 = base64::engine::general_purpose::STANDARD.encode(sig);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap_or(""))
        .collect();
    lines.join("\n")
}

/// The certificate the tests' `dtd` trusts for identity documents.
pub fn identity_certificate() -> std::path::PathBuf {
    super::repo().join("tests/fixtures/identity/signer.pem")
}

fn issue_token(req: &Request, s: &mut State) -> (u16, Vec<(&'static str, String)>, String) {
    let ttl = req
        .headers
        .get(TTL_HEADER)
        .and_then(|v| v.parse::<u64>().ok());
    let Some(ttl) = ttl.filter(|t| (1..=21600).contains(t)) else {
        return (400, vec![], "bad or missing TTL\n".into());
    };
    s.issued += 1;
    let token = format!("stand-in-token-{}", s.issued);
    s.tokens
        .insert(token.clone(), Instant::now() + Duration::from_secs(ttl));
    (200, vec![(TTL_HEADER, ttl.to_string())], token)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        _ => "Status",
    }
}
