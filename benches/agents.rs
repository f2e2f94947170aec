//! What the agents' reports cost `dtd`, now that each comes on its agent's own connection
//! (`protocol::channel`): `cargo bench --bench agents`. 1,000 and 10,000 agents, each in a
//! client process of its own (this binary run again with `--client`, so that the two sides'
//! file descriptors and CPU are apart), connect to the real port `dtd run` serves
//! (`observe::agents`), say hello with an identity document signed by the tests' stand-in for
//! AWS's key, send one report each, then one ping each (what every agent sends every
//! `silent_after` / 4, 7.5 s by default). The figures are the CPU time of `dtd`'s side (this
//! process: the port's runtime, one thread) per phase, and the time a pass takes to take what
//! was heard and judge it (`Board::take` and the book), beside `benches/markers.rs`'s `stat` of
//! as many report files.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dt::config::{Config, Reports};
use dt::observe::agents::Agents;
use dt::observe::markers::book::{Book, Judging, Keys};
use dt::protocol::channel::{self, Hello, HelloName};
use dt::protocol::markers::{MarkerKind, MarkerName};
use dt::protocol::signed::SigningKey;

const SIZES: [usize; 2] = [1_000, 10_000];
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/identity");

fn ip(n: usize) -> String {
    let n = n + 256;
    format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255)
}

fn id(n: usize) -> String {
    format!("i-{n:017x}")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--client") {
        let port = args[at + 1].parse().expect("a port");
        let n = args[at + 2].parse().expect("a count");
        return client(port, n);
    }
    let bench = args.iter().any(|a| a == "--bench");
    let sizes: &[usize] = if bench { &SIZES } else { &[50] };
    for &n in sizes {
        server(n, bench);
    }
    if !bench {
        println!("agents benchmark scenario holds (run `cargo bench --bench agents`)");
    }
}

/// This process's CPU time so far, in ns, every thread's (`/proc/self/task/*/schedstat`).
fn cpu_ns() -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// This process's anonymous resident memory (`RssAnon`), in KiB.
fn rss_anon_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    (status.lines())
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon in /proc/self/status")
}

fn config() -> Config {
    let yaml = format!(
        "cluster: bench\nworkers:\n  launch_template: lt-0abc\n  max: 20000\n  listen: 127.0.0.1:0\n  \
         identity_certificates: {FIXTURES}/signer.pem\nshared_dir: /tmp\n"
    );
    Config::parse(&yaml).expect("the bench's config")
}

fn server(n: usize, bench: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cfg = config();
    let clock: dt::clock::SharedClock = std::sync::Arc::new(dt::clock::SystemClock);
    let agents = rt
        .block_on(Agents::start(&cfg, clock, HashMap::new()))
        .expect("the agents' port");
    let mut child = Command::new(std::env::current_exe().expect("this binary"))
        .args(["--client", &agents.bound.port().to_string(), &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the clients");
    let mut to = child.stdin.take().expect("stdin");
    let from = BufReader::new(child.stdout.take().expect("stdout"));
    // The clients' word, from a thread of its own: the port's runtime runs while it is awaited.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in from.lines() {
            if tx.send(line.expect("from the clients")).is_err() {
                return;
            }
        }
    });
    let mut step = |say: &str| -> u64 {
        writeln!(to, "{say}").expect("to the clients");
        let before = cpu_ns();
        let said = rt.block_on(rx.recv()).expect("the clients' answer");
        assert!(said.starts_with("done"), "the clients said {said:?}");
        cpu_ns() - before
    };
    let anon_before = rss_anon_kib();
    let hellos = step("hello");
    let reports = step("report");
    let pings = step("ping");
    let anon_connected = rss_anon_kib().saturating_sub(anon_before);
    let board = agents.board();
    let heard = board.take(dt::clock::now_millis());
    assert_eq!(heard.proofs.len(), n, "every agent proved its instance");
    assert_eq!(heard.scan.files.len(), n, "every report kept");
    let keys = Keys {
        by_ip: (heard.proofs.iter())
            .map(|p| (p.ip, (p.instance_id.clone(), Some(p.key.clone()))))
            .collect(),
        complete: true,
    };
    let mut book = Book::default();
    let mut pass = || {
        let started = Instant::now();
        let heard = board.take(dt::clock::now_millis());
        let judging = Judging {
            keys: &keys,
            mode: Reports::Signed,
            now: dt::clock::now_millis(),
            heard: &heard.heard,
            floor: &|_, _| None,
        };
        let m = book.judge(&heard.scan, &judging);
        assert_eq!(m.success.len(), n);
        started.elapsed()
    };
    pass();
    let mut passes: Vec<Duration> = (0..20).map(|_| pass()).collect();
    passes.sort();
    drop(to);
    let _ = child.wait();
    if !bench {
        return;
    }
    let per = |ns: u64| ns as f64 / n as f64 / 1e3;
    println!(
        "agents {n:>6}: dtd's CPU for {n} hellos {:.0} ms ({:.1} µs each), {n} reports {:.0} ms ({:.1} µs each), {n} pings {:.0} ms ({:.1} µs each); a pass's take and judge {:.2} ms (median of 20)",
        hellos as f64 / 1e6,
        per(hellos),
        reports as f64 / 1e6,
        per(reports),
        pings as f64 / 1e6,
        per(pings),
        passes[10].as_secs_f64() * 1e3
    );
    println!(
        "agents {n:>6}: dtd's anonymous memory for {n} connected agents {} KiB ({:.0} bytes each: connections, their tasks, proofs and reports)",
        anon_connected,
        anon_connected as f64 * 1024.0 / n as f64
    );
    // The steady state: a ping per agent every 7.5 s, a pass every 2 s (`interval`).
    let per_minute = pings as f64 * 8.0 + passes[10].as_nanos() as f64 * 30.0;
    println!(
        "agents {n:>6}: steady, dtd's CPU per minute {:.0} ms ({:.2}% of a core)",
        per_minute / 1e6,
        per_minute / 60e9 * 100.0
    );
}

/// The agents: every hello, then every report, then every ping, each when the server asks.
fn client(port: u16, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let signer = std::fs::read(format!("{FIXTURES}/signer.pk8")).expect("the stand-in signer");
    let signer = aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&signer).expect("an RSA key");
    let agents: Vec<Agent> = (0..n).map(|k| Agent::new(k, &signer)).collect();
    let stdin = std::io::stdin();
    let mut conns: Vec<Option<Conn>> = (0..n).map(|_| None).collect();
    for line in stdin.lock().lines() {
        let line = line.expect("a line");
        // One agent after another: what is measured is dtd's CPU, not how fast they come.
        rt.block_on(async {
            for (a, c) in agents.iter().zip(conns.iter_mut()) {
                a.step(line.trim(), port, c).await;
            }
        });
        println!("done {line}");
    }
}

struct Agent {
    n: usize,
    key: SigningKey,
    hello: Vec<u8>,
}

type Conn = (
    tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

impl Agent {
    fn new(n: usize, signer: &aws_lc_rs::signature::RsaKeyPair) -> Agent {
        use base64::Engine as _;
        let key = SigningKey::from_pkcs8(&SigningKey::generate().expect("key")).expect("key");
        let doc = format!(
            "{{\"accountId\":\"123456789012\",\"instanceId\":\"{}\",\"privateIp\":\"{}\",\"region\":\"us-east-1\"}}",
            id(n),
            ip(n)
        );
        let mut sig = vec![0; signer.public_modulus_len()];
        signer
            .sign(
                &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                &aws_lc_rs::rand::SystemRandom::new(),
                doc.as_bytes(),
                &mut sig,
            )
            .expect("signing");
        let hello = Hello {
            instance_id: id(n),
            document: doc,
            signature: base64::engine::general_purpose::STANDARD.encode(sig),
        };
        let name = HelloName(ip(n).parse().expect("an IP"));
        let hello = channel::line(
            &name,
            &key.sign(&name, &hello.render(), dt::clock::now_millis()),
        );
        Agent { n, key, hello }
    }

    async fn step(&self, what: &str, port: u16, conn: &mut Option<Conn>) {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let line = match what {
            "hello" => {
                let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .expect("connect");
                let (r, w) = s.into_split();
                *conn = Some((tokio::io::BufReader::new(r), w));
                self.hello.clone()
            }
            "report" => {
                let name = MarkerName::new(MarkerKind::Success, ip(self.n).parse().expect("ip"));
                let body = format!("{{\"instance_id\":\"{}\",\"attempts\":1}}\n", id(self.n));
                channel::line(
                    &name,
                    &self
                        .key
                        .sign(&name, body.as_bytes(), dt::clock::now_millis()),
                )
            }
            _ => b"ping\n".to_vec(),
        };
        let (r, w) = conn.as_mut().expect("connected");
        w.write_all(&line).await.expect("send");
        let mut answer = String::new();
        r.read_line(&mut answer).await.expect("an answer");
        assert!(answer.contains("\"ok\":true"), "{what}: {answer}");
    }
}
