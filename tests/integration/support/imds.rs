//! A stand-in for the EC2 instance metadata service (IMDSv2), which cannot run off EC2: a small
//! HTTP/1.1 server on 127.0.0.1 that issues session tokens on `PUT /latest/api/token` (honouring
//! the TTL header), serves `GET /latest/meta-data/...` only with a valid token (401 otherwise),
//! answers 404 for paths not set, and counts the requests per path. Point the SDK's IMDS client at
//! it with `AWS_EC2_METADATA_SERVICE_ENDPOINT` (see [`ImdsStandIn::env`]).

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
    match (req.method.as_str(), req.path.as_str()) {
        ("PUT", "/latest/api/token") => issue_token(req, s),
        ("GET", p) if p.starts_with("/latest/meta-data/") => {
            let valid = req
                .headers
                .get(TOKEN_HEADER)
                .and_then(|t| s.tokens.get(t))
                .is_some_and(|expiry| Instant::now() < *expiry);
            if !valid {
                return (401, vec![], String::new());
            }
            match s.values.get(&key) {
                Some(v) => (200, vec![], v.clone()),
                None => (404, vec![], "Not Found\n".into()),
            }
        }
        _ => (405, vec![], String::new()),
    }
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
