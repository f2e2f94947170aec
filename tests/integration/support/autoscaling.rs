//! A stand-in for the two Auto Scaling calls moto lacks, CompleteLifecycleAction and
//! RecordLifecycleActionHeartbeat: a small HTTP/1.1 server on 127.0.0.1 that speaks the Auto
//! Scaling Query API (form-encoded POST, XML answers) well enough for the real
//! `aws_sdk_autoscaling::Client`. It records every request's form fields, answers each known
//! action with its success document, or with an AWS XML error when told to
//! ([`AutoScalingStandIn::fail_with`]). Everything else about groups runs against moto.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;

use super::server::Server;

/// The two actions moto lacks; anything else is answered `InvalidAction`.
const ACTIONS: [&str; 2] = ["CompleteLifecycleAction", "RecordLifecycleActionHeartbeat"];

/// One request's form fields (`Action`, `AutoScalingGroupName`, `LifecycleHookName`,
/// `InstanceId`, `LifecycleActionResult`, `LifecycleActionToken`, ...), decoded.
pub type Fields = BTreeMap<String, String>;

#[derive(Default)]
struct State {
    calls: Vec<Fields>,
    /// Action -> (error code, message) every call of it answers while set.
    errors: BTreeMap<String, (String, String)>,
}

pub struct AutoScalingStandIn {
    server: Server<State>,
}

impl AutoScalingStandIn {
    pub fn start() -> AutoScalingStandIn {
        AutoScalingStandIn {
            server: Server::start("Auto Scaling stand-in", serve),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// The real SDK client, pointed here with static test credentials.
    pub fn client(&self) -> aws_sdk_autoscaling::Client {
        use aws_sdk_autoscaling::config::{BehaviorVersion, Credentials, Region};
        let conf = aws_sdk_autoscaling::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
            .endpoint_url(self.endpoint())
            .build();
        aws_sdk_autoscaling::Client::from_conf(conf)
    }

    /// Answers every call of `action` with an AWS error (HTTP 400, `code`, `message`).
    pub fn fail_with(&self, action: &str, code: &str, message: &str) {
        self.lock()
            .errors
            .insert(action.into(), (code.into(), message.into()));
    }

    /// The form fields of every `action` request so far, in order.
    pub fn calls(&self, action: &str) -> Vec<Fields> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.get("Action").map(String::as_str) == Some(action))
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.server.lock()
    }
}

/// One connection, kept alive for as many requests as the client sends.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    while let Some(body) = read_body(&mut reader) {
        let fields = parse_form(&body);
        let (status, xml) = answer(fields, &mut state.lock().expect("Auto Scaling state"));
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n",
            if status == 200 { "OK" } else { "Bad Request" },
            xml.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(xml.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads one request and returns its body (the form).
fn read_body(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut len = 0;
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
            if k.trim().eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

fn answer(fields: Fields, s: &mut State) -> (u16, String) {
    let action = fields.get("Action").cloned().unwrap_or_default();
    s.calls.push(fields);
    let xmlns = "http://autoscaling.amazonaws.com/doc/2011-01-01/";
    let request_id = format!("stand-in-{}", s.calls.len());
    let error = if !ACTIONS.contains(&action.as_str()) {
        Some((
            "InvalidAction".to_string(),
            format!("the stand-in does not implement {action:?}"),
        ))
    } else {
        s.errors.get(&action).cloned()
    };
    match error {
        Some((code, message)) => (
            400,
            format!(
                "<ErrorResponse xmlns=\"{xmlns}\"><Error><Type>Sender</Type><Code>{code}</Code>\
                 <Message>{message}</Message></Error><RequestId>{request_id}</RequestId>\
                 </ErrorResponse>"
            ),
        ),
        None => (
            200,
            format!(
                "<{action}Response xmlns=\"{xmlns}\"><{action}Result/><ResponseMetadata>\
                 <RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
            ),
        ),
    }
}

/// `application/x-www-form-urlencoded` into fields.
fn parse_form(body: &str) -> Fields {
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
