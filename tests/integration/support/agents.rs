//! The workers' agents as the tests play them where no real `dtd agent` runs: each instance gets
//! a signing key, put on its `dt:agent-key` tag in the emulator the first time it reports (as
//! `dtd agent` does when it starts), and its reports are signed with it by the protocol's own
//! code. What a test writes this way `dtd` believes exactly as it believes a real agent; what a
//! test writes any other way is what user code on some worker could write.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use dt::protocol::markers::{MarkerKind, MarkerName};
use dt::protocol::signed::{SigningKey, KEY_TAG};

use super::Cluster;

/// Each played agent's key, by instance: PKCS#8 (what a real agent keeps in its key file, so one
/// started later for the same instance goes on with the same key) and ready to sign.
#[derive(Default)]
pub struct Agents(Mutex<HashMap<String, PlayedKey>>);

/// PKCS#8, and the key it holds.
type PlayedKey = (Vec<u8>, std::sync::Arc<SigningKey>);

impl Cluster {
    /// The instance at private IP `ip`, as EC2 lists it.
    pub fn id_at(&self, ip: &str) -> String {
        let by_ip = aws_sdk_ec2::types::Filter::builder()
            .name("private-ip-address")
            .values(ip)
            .build();
        let out = self
            .rt
            .block_on(self.ec2.describe_instances().filters(by_ip).send())
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

    /// The key of `id`'s agent, made and put on the instance's tag the first time.
    pub fn agent_key(&self, id: &str) -> std::sync::Arc<SigningKey> {
        let mut keys = self.agents.0.lock().unwrap();
        if let Some((_, k)) = keys.get(id) {
            return k.clone();
        }
        let pkcs8 = SigningKey::generate().unwrap();
        let key = SigningKey::from_pkcs8(&pkcs8).unwrap();
        self.set_tag(id, KEY_TAG, key.public().as_str());
        let key = std::sync::Arc::new(key);
        keys.insert(id.to_string(), (pkcs8, key.clone()));
        key
    }

    /// `line` (a report's JSON line) as the agent of the instance at `ip` signs it.
    pub fn signed(&self, ip: &str, kind: MarkerKind, line: &[u8]) -> Vec<u8> {
        let key = self.agent_key(&self.id_at(ip));
        let name = MarkerName::new(kind, ip.parse::<IpAddr>().unwrap());
        key.sign(&name, line, dt::clock::now_millis())
    }

    /// Writes the report of `kind` for `ip`, signed by its agent, as `dtd agent` writes it.
    pub fn report(&self, ip: &str, kind: MarkerKind, line: &[u8]) {
        let name = MarkerName::new(kind, ip.parse::<IpAddr>().unwrap());
        let path = name.path_in(&self.efs());
        dt::fsutil::write_atomic(&path, &self.signed(ip, kind, line)).expect("report");
    }

    /// Writes `body` (a JSON object) as the report of `kind` for `ip`, with the instance it is
    /// about added as `instance_id` (as the agent writes it), signed by that instance's agent.
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
}

impl Cluster {
    /// The config says the agents run a health check (`agent.health`): without it dtd ignores
    /// every `health_<ip>`. Appended to `extra`, so after any assignment to it.
    pub fn checks_health(&mut self) {
        self.extra
            .push_str("agent:\n  health: { command: [/bin/true], interval: 1m, timeout: 30s }\n");
    }

    /// `dtd agent --config CONFIG` for the instance `id` at `ip`, as on its own worker: its own
    /// key file (a real worker's is on its own disk), EC2 at the emulator (where it tags its
    /// instance with its key) and `imds` for its metadata. The caller adds its log and spawns.
    pub fn agent_command(
        &self,
        config: &std::path::Path,
        ip: &str,
        id: &str,
        imds: &super::imds::ImdsStandIn,
    ) -> std::process::Command {
        let key_file = self.dir.path().join(format!("agent-{id}.key"));
        // The instance's agent played so far: the real one goes on with its key.
        let played = self.agents.0.lock().unwrap().get(id).cloned();
        if let Some((pkcs8, _)) = played.filter(|_| !key_file.exists()) {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&key_file)
                .expect("the agent's key file");
            std::io::Write::write_all(&mut f, &pkcs8).unwrap();
        }
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
