//! A STAND-IN for EC2 running out of capacity, which moto never does: an HTTP proxy on
//! 127.0.0.1 in front of moto. A RunInstances for an instance type it is told has no capacity
//! is answered as EC2 answers it ("Error codes for the Amazon EC2 API": HTTP 500, an `<Errors>`
//! document with the code, e.g. `InsufficientInstanceCapacity`); every other request goes to
//! moto unchanged, and moto's answer comes back. Processes reach it through the SDK's own
//! `AWS_ENDPOINT_URL_EC2`, so only EC2 calls pass here.

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;

use super::server::{parse_form, read_request, Request, Server};

#[derive(Default)]
struct State {
    moto_port: u16,
    /// Instance type -> the error code every RunInstances of it gets.
    refused: BTreeMap<String, String>,
    /// Each RunInstances' fields, in order, answered by the stand-in or by moto.
    run_instances: Vec<BTreeMap<String, String>>,
}

pub struct Ec2CapacityStandIn {
    server: Server<State>,
}

impl Ec2CapacityStandIn {
    /// In front of moto on `moto_port`.
    pub fn start(moto_port: u16) -> Ec2CapacityStandIn {
        let server = Server::start("EC2 capacity stand-in", serve);
        server.lock().moto_port = moto_port;
        Ec2CapacityStandIn { server }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// Every RunInstances of `instance_type` from now on gets `code`.
    pub fn refuse(&self, instance_type: &str, code: &str) {
        let mut s = self.server.lock();
        s.refused.insert(instance_type.into(), code.into());
    }

    /// `instance_type` has capacity again.
    pub fn allow(&self, instance_type: &str) {
        self.server.lock().refused.remove(instance_type);
    }

    /// The instance type each RunInstances asked for, in order.
    pub fn run_instances_types(&self) -> Vec<String> {
        let s = self.server.lock();
        let types = s.run_instances.iter();
        types
            .map(|f| f.get("InstanceType").cloned().unwrap_or_default())
            .collect()
    }
}

/// One request per connection: the answer says `Connection: close`, so the client never sends
/// a second request on a connection moto has closed.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    let fields = parse_form(&request.body);
    let (moto, refusal) = {
        let mut s = state.lock().expect("EC2 stand-in state");
        let refusal = match fields.get("Action").map(String::as_str) {
            Some("RunInstances") => {
                s.run_instances.push(fields.clone());
                let wanted = fields.get("InstanceType");
                wanted.and_then(|t| s.refused.get(t).map(|code| (t.clone(), code.clone())))
            }
            _ => None,
        };
        (s.moto_port, refusal)
    };
    let answer = match refusal {
        Some((instance_type, code)) => refused(&instance_type, &code),
        None => forward(moto, &request).unwrap_or_else(|e| {
            let body = format!("the stand-in could not reach moto: {e}");
            format!(
                "HTTP/1.1 502 Bad Gateway\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }),
    };
    let _ = out.write_all(&answer);
}

/// EC2's error document for a launch it has no capacity for.
fn refused(instance_type: &str, code: &str) -> Vec<u8> {
    let message = format!(
        "We currently do not have sufficient {instance_type} capacity in the Availability Zone \
         you requested. Our system will be working on provisioning additional capacity."
    );
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors><RequestID>stand-in</RequestID></Response>"
    );
    format!(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/xml;charset=UTF-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{xml}",
        xml.len()
    )
    .into_bytes()
}

/// The request to moto as it came (but for `Connection: close`), and moto's whole answer, its
/// own `Connection` header replaced by `close`.
fn forward(moto_port: u16, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut moto = TcpStream::connect(("127.0.0.1", moto_port))?;
    let mut head = format!("{}\r\n", request.line);
    for h in request.headers.iter().filter(|h| !is_connection(h)) {
        head.push_str(&format!("{h}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    moto.write_all(head.as_bytes())?;
    moto.write_all(request.body.as_bytes())?;
    let mut answer = Vec::new();
    moto.read_to_end(&mut answer)?;
    let split = (answer.windows(4).position(|w| w == b"\r\n\r\n")).unwrap_or(answer.len());
    let (head, body) = answer.split_at(split);
    let head = String::from_utf8_lossy(head);
    let mut out: String = (head.split("\r\n"))
        .filter(|h| !is_connection(h))
        .map(|h| format!("{h}\r\n"))
        .collect();
    out.push_str("Connection: close");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    Ok(bytes)
}

fn is_connection(header: &str) -> bool {
    (header.split_once(':')).is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
}
