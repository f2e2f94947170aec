//! The workers' agents as the tests play them where no real `dtd agent` runs: each instance gets
//! a signing key and a connection to `dtd`'s port (`workers.listen`) that behaves as the real
//! agent's does: it says hello with the instance's identity document (signed by the tests'
//! stand-in for AWS's key, see `support::imds`), sends its current reports, each signed by the
//! protocol's own code when it is sent, pings every second, and on a lost connection (dtd
//! restarted) connects again and says it all again. What a test says this way `dtd` believes
//! exactly as it believes a real agent; what a test says any other way is what user code on
//! some worker could say.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use dt::protocol::channel::{self, Answer, Hello, HelloName};
use dt::protocol::markers::{MarkerKind, MarkerName};
use dt::protocol::signed::SigningKey;

use super::imds::{identity_document, sign_identity};
use super::Cluster;

/// How often a played agent pings when it has nothing new to say.
const BEAT: Duration = Duration::from_secs(1);

/// Each played agent, by instance.
#[derive(Default)]
pub struct Agents(Mutex<HashMap<String, Played>>);

/// A played agent: its key (PKCS#8, what a real agent keeps in its key file, so one started
/// later for the same instance goes on with the same key) and its connection's thread.
struct Played {
    pkcs8: Vec<u8>,
    key: Arc<SigningKey>,
    outbox: Arc<Outbox>,
    /// A real `dtd agent` runs for the instance now, with this key: the test no longer plays it.
    handed_over: bool,
}

#[derive(Default)]
struct Outbox {
    state: Mutex<Said>,
    changed: Condvar,
}

#[derive(Default)]
struct Said {
    reports: BTreeMap<MarkerKind, (u64, Vec<u8>)>,
    versions: u64,
    /// Stopped (SIGSTOP, a hung kernel): nothing sent, not even a ping.
    paused: bool,
    /// The thread ends (the cluster is dropped, or a real agent takes over).
    stopped: bool,
    /// dtd's answers that refused something, in order.
    refused: Vec<String>,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Said> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        let agents = self.0.get_mut().unwrap_or_else(|p| p.into_inner());
        for played in agents.values() {
            played.outbox.lock().stopped = true;
            played.outbox.changed.notify_all();
        }
    }
}

impl Cluster {
    /// The instance at private IP `ip`, as EC2 lists it.
    pub fn id_at(&self, ip: &str) -> String {
        let by_ip = aws_sdk_ec2::types::Filter::builder()
            .name("private-ip-address")
            .values(ip)
            .build();
        // moto lists terminated instances too, and may have drawn a live one's IP for them.
        let live = aws_sdk_ec2::types::Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["pending", "running", "stopping", "stopped"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build();
        let out = self
            .rt
            .block_on(
                (self.ec2.describe_instances())
                    .filters(by_ip)
                    .filters(live)
                    .send(),
            )
            .expect("DescribeInstances");
        let found = out.reservations().iter().flat_map(|r| r.instances());
        let ids: Vec<String> = found
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        match ids.as_slice() {
            [id] => id.clone(),
            other => panic!("{} instances at {ip}: {other:?}", other.len()),
        }
    }

    /// The key of `id`'s agent, made (and its connection started) the first time.
    pub fn agent_key(&self, id: &str) -> Arc<SigningKey> {
        let ip = self.ip_of(id);
        self.played(id, &ip).key.clone()
    }

    fn played(&self, id: &str, ip: &str) -> PlayedRef {
        let mut agents = self.agents.0.lock().unwrap();
        if let Some(p) = agents.get(id) {
            return PlayedRef {
                key: p.key.clone(),
                outbox: p.outbox.clone(),
                handed_over: p.handed_over,
            };
        }
        let pkcs8 = SigningKey::generate().unwrap();
        let key = Arc::new(SigningKey::from_pkcs8(&pkcs8).unwrap());
        let outbox = Arc::new(Outbox::default());
        let speaker = Speaker {
            port: self.report_port,
            id: id.to_string(),
            ip: ip.parse().expect("an IP"),
            key: key.clone(),
            outbox: outbox.clone(),
        };
        std::thread::spawn(move || speaker.run());
        let played = Played {
            pkcs8,
            key: key.clone(),
            outbox: outbox.clone(),
            handed_over: false,
        };
        agents.insert(id.to_string(), played);
        PlayedRef {
            key,
            outbox,
            handed_over: false,
        }
    }

    /// The private IP EC2 lists for `id`.
    pub fn ip_of(&self, id: &str) -> String {
        let out = self
            .rt
            .block_on(self.ec2.describe_instances().instance_ids(id).send())
            .expect("DescribeInstances");
        let inst = out.reservations()[0].instances()[0].clone();
        inst.private_ip_address().expect("a private IP").to_string()
    }

    /// `line` (a report's JSON line) as the agent of the instance at `ip` signs it.
    pub fn signed(&self, ip: &str, kind: MarkerKind, line: &[u8]) -> Vec<u8> {
        let key = self.agent_key(&self.id_at(ip));
        let name = MarkerName::new(kind, ip.parse::<IpAddr>().unwrap());
        key.sign(&name, line, dt::clock::now_millis())
    }

    /// The agent of the instance at `ip` says `line` as its report of `kind`, as `dtd agent`
    /// does: on its connection to dtd, now or as soon as dtd listens.
    pub fn report(&self, ip: &str, kind: MarkerKind, line: &[u8]) {
        let id = self.id_at(ip);
        let played = self.played(&id, ip);
        assert!(
            !played.handed_over,
            "a real dtd agent speaks for {id}: the test cannot play it too"
        );
        let mut said = played.outbox.lock();
        said.versions += 1;
        let v = said.versions;
        said.reports.insert(kind, (v, line.to_vec()));
        drop(said);
        played.outbox.changed.notify_all();
    }

    /// `body` (a JSON object) as the report of `kind` for `ip`, with the instance it is about
    /// added as `instance_id` (as the agent writes it), said by that instance's agent.
    pub fn report_json(&self, ip: &str, kind: MarkerKind, body: &str) {
        let mut v: serde_json::Value = serde_json::from_str(body).expect("a JSON object");
        v["instance_id"] = serde_json::Value::String(self.id_at(ip));
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        self.report(ip, kind, &line);
    }

    /// The worker at `ip` prepared its data: its agent's success marker.
    pub fn marker(&self, ip: &str) {
        let line = format!(
            "{{\"instance_id\":\"{}\",\"attempts\":1}}\n",
            self.id_at(ip)
        );
        self.report(ip, MarkerKind::Success, line.as_bytes());
    }

    /// The played agent of the instance at `ip` stops (as a SIGSTOP would: its connection
    /// stays, nothing comes on it), or goes on (`false`).
    pub fn pause_agent(&self, ip: &str, paused: bool) {
        let id = self.id_at(ip);
        let played = self.played(&id, ip);
        played.outbox.lock().paused = paused;
        played.outbox.changed.notify_all();
    }

    /// What dtd refused of what the played agent of `ip` said, so far.
    pub fn refused_to(&self, ip: &str) -> Vec<String> {
        let id = self.id_at(ip);
        self.played(&id, ip).outbox.lock().refused.clone()
    }
}

struct PlayedRef {
    key: Arc<SigningKey>,
    outbox: Arc<Outbox>,
    handed_over: bool,
}

/// One played agent's connection, on a thread of its own.
struct Speaker {
    port: u16,
    id: String,
    ip: IpAddr,
    key: Arc<SigningKey>,
    outbox: Arc<Outbox>,
}

impl Speaker {
    fn run(self) {
        while !self.outbox.lock().stopped {
            // dtd not listening yet, restarted, or it closed the connection: again, soon.
            let _ = self.session();
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn session(&self) -> std::io::Result<()> {
        let stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut r = BufReader::new(stream.try_clone()?);
        let mut w = stream;
        let doc = identity_document(&self.id, &self.ip.to_string());
        let hello = Hello {
            instance_id: self.id.clone(),
            signature: sign_identity(&doc),
            document: doc,
        };
        let name = HelloName(self.ip);
        let signed = self
            .key
            .sign(&name, &hello.render(), dt::clock::now_millis());
        if !self.ask(&mut r, &mut w, &channel::line(&name, &signed))? {
            return Err(std::io::Error::other("hello refused"));
        }
        let mut sent: BTreeMap<MarkerKind, u64> = BTreeMap::new();
        loop {
            let waiting = self.wait(&sent)?;
            if waiting.is_empty() {
                self.ask(&mut r, &mut w, b"ping\n")?;
            }
            for (kind, v, line) in waiting {
                let name = MarkerName::new(kind, self.ip);
                let signed = self.key.sign(&name, &line, dt::clock::now_millis());
                self.ask(&mut r, &mut w, &channel::line(&name, &signed))?;
                sent.insert(kind, v);
            }
        }
    }

    /// The reports not yet sent on this connection; none after a beat without any.
    #[allow(clippy::type_complexity)]
    fn wait(
        &self,
        sent: &BTreeMap<MarkerKind, u64>,
    ) -> std::io::Result<Vec<(MarkerKind, u64, Vec<u8>)>> {
        let mut said = self.outbox.lock();
        let mut waited = false;
        loop {
            if said.stopped {
                return Err(std::io::Error::other("stopped"));
            }
            let waiting: Vec<_> = (said.reports.iter())
                .filter(|(k, (v, _))| sent.get(k) != Some(v))
                .map(|(k, (v, l))| (*k, *v, l.clone()))
                .collect();
            if !said.paused && (!waiting.is_empty() || waited) {
                return Ok(waiting);
            }
            let (next, timeout) = (self.outbox.changed)
                .wait_timeout(said, BEAT)
                .unwrap_or_else(|p| p.into_inner());
            said = next;
            waited = timeout.timed_out();
        }
    }

    /// Sends one line, reads dtd's answer; whether it was taken.
    fn ask(
        &self,
        r: &mut BufReader<TcpStream>,
        w: &mut TcpStream,
        line: &[u8],
    ) -> std::io::Result<bool> {
        w.write_all(line)?;
        let mut answer = String::new();
        if r.read_line(&mut answer)? == 0 {
            return Err(std::io::Error::other("closed"));
        }
        let a: Answer = serde_json::from_str(&answer).map_err(std::io::Error::other)?;
        if let Some(why) = a.refused.filter(|_| !a.ok) {
            self.outbox.lock().refused.push(why);
            return Ok(false);
        }
        Ok(true)
    }
}

impl Cluster {
    /// The config says the agents run a health check (`agent.health`): without it dtd ignores
    /// every `health_<ip>`. Appended to `extra`, so after any assignment to it.
    pub fn checks_health(&mut self) {
        self.extra
            .push_str("agent:\n  health: { command: [/bin/true], interval: 1m, timeout: 30s }\n");
    }

    /// The copy of its report `name` (`prepare_data_success`, `launcher`, …) that the real
    /// agent of `id` at `ip` (started by [`Cluster::agent_command`]) keeps beside its key: what
    /// it sent, or will send, to dtd.
    pub fn own_report(&self, id: &str, ip: &str, name: &str) -> std::path::PathBuf {
        self.dir
            .path()
            .join("reports")
            .join(id)
            .join(format!("{name}_{ip}"))
    }

    /// `dtd agent --config CONFIG` for the instance `id` at `ip`, as on its own worker: its own
    /// key file (a real worker's is on its own disk), EC2 at the emulator and `imds` for its
    /// metadata. The caller adds its log and spawns. A played agent of the instance gives way:
    /// the real one goes on with its key.
    pub fn agent_command(
        &self,
        config: &std::path::Path,
        ip: &str,
        id: &str,
        imds: &super::imds::ImdsStandIn,
    ) -> std::process::Command {
        let key_file = self.dir.path().join(format!("agent-{id}.key"));
        let mut agents = self.agents.0.lock().unwrap();
        if let Some(p) = agents.get_mut(id).filter(|p| !p.handed_over) {
            p.handed_over = true;
            p.outbox.lock().stopped = true;
            p.outbox.changed.notify_all();
            if !key_file.exists() {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&key_file)
                    .expect("the agent's key file");
                std::io::Write::write_all(&mut f, &p.pkcs8).unwrap();
            }
        }
        drop(agents);
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dtd"));
        cmd.args(["agent", "--config"])
            .arg(config)
            .args(["--ip", ip, "--instance-id", id, "--key-file"])
            .arg(key_file)
            .envs(super::aws_env(&self.moto.endpoint()))
            .envs(imds.env())
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null());
        cmd
    }
}
