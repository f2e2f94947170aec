//! A real Prometheus (Debian's `prometheus` package, installed by `scripts/setup --tests`) on a
//! free loopback port, scraping one target every second, stopped when dropped; and a minimal
//! HTTP/1.0 GET for the tests to read its API and dtd's endpoints.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, wait_for, CLUSTER};

pub struct Prometheus {
    pub addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

fn binary(var: &str, name: &str) -> PathBuf {
    let path =
        std::env::var_os(var).map_or_else(|| PathBuf::from("/usr/bin").join(name), PathBuf::from);
    assert!(
        path.exists(),
        "{} not found: run scripts/setup --tests (it installs Debian's prometheus package) or set {var}",
        path.display()
    );
    path
}

impl Prometheus {
    /// Scrapes `target`'s `/metrics` every second, labelling its series with the tests' cluster
    /// as docs/operating.md's scrape config does.
    pub fn scraping(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        let body = format!(
            "global: {{ scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }}\n\
             scrape_configs:\n  - job_name: dtd\n    static_configs: [{{ targets: ['{target}'], \
             labels: {{ cluster: {CLUSTER} }} }}]\n"
        );
        std::fs::write(&config, body).expect("prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(binary("DT_PROMETHEUS", "prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            addr,
            child,
            _dir: dir,
        };
        wait_for(
            "prometheus to be ready (/-/ready)",
            Duration::from_secs(60),
            || get(p.addr, "/-/ready").map(|(code, _)| code),
            |r| matches!(r, Ok(200)),
        )
        .expect("ready");
        p
    }

    /// The value of an instant query that must return exactly one series, or why not.
    pub fn value(&self, query: &str) -> Result<f64, String> {
        let path = format!("/api/v1/query?query={}", percent_encode(query));
        let (code, body) = get(self.addr, &path)?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}: {body}"))?;
        match v["data"]["result"].as_array().map(Vec::as_slice) {
            Some([one]) => (one["value"][1].as_str())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("no value in {one}")),
            _ => Err(format!("not one series for {query}: {body}")),
        }
    }

    /// Waits until `query` returns one series whose value satisfies `ok`.
    pub fn wait(&self, query: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let what = format!("Prometheus to answer {query}");
        let r = wait_for(
            &what,
            Duration::from_secs(30),
            || self.value(query),
            |v| v.as_ref().is_ok_and(|v| ok(*v)),
        );
        r.unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` over HTTP/1.0 (so the answer is never chunked): the status code and body.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or("no end of headers")?;
    let code = (head.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {head}"))?;
    Ok((code, body.to_string()))
}

/// A query as the query string of a URL carries it.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
