//! A stand-in for the two Auto Scaling calls moto lacks, CompleteLifecycleAction and
//! RecordLifecycleActionHeartbeat: a small HTTP/1.1 server on 127.0.0.1 that speaks the Auto
//! Scaling Query API (form-encoded POST, XML answers) well enough for the real
//! `aws_sdk_autoscaling::Client`. It records every request's form fields, answers each known
//! action with its success document, or with an AWS XML error when told to
//! ([`AutoScalingStandIn::fail_with`]). Everything else about groups runs against moto.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Mutex;

use super::server::{parse_form, read_request, Server};

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
    while let Some(request) = read_request(&mut reader) {
        let fields = parse_form(&request.body);
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
