//! A webhook receiver for the alert tests: a small HTTP/1.1 server on 127.0.0.1 that records each
//! request's path and body and answers with a status the test sets (200 unless told otherwise).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;

use super::server::Server;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub content_type: Option<String>,
    pub idempotency_key: Option<String>,
    pub body: String,
    /// The status it was answered with.
    pub answered: u16,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("a JSON body ({e}): {}", self.body))
    }
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    /// What every request is answered with; `None` is 200.
    status: Option<u16>,
}

pub struct WebhookReceiver {
    server: Server<State>,
}

impl WebhookReceiver {
    pub fn start() -> WebhookReceiver {
        WebhookReceiver::start_at(0)
    }

    /// On `port`, e.g. the one a webhook was configured with while nothing listened there.
    pub fn start_at(port: u16) -> WebhookReceiver {
        WebhookReceiver {
            server: Server::start_at("webhook receiver", port, serve),
        }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.server.port)
    }

    /// Answers every request with `status` from now on.
    pub fn answer(&self, status: u16) {
        self.server.lock().status = Some(status);
    }

    pub fn received(&self) -> Vec<Received> {
        self.server.lock().received.clone()
    }
}

/// One connection, kept alive for as many requests as the client sends.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    while let Some(req) = read_request(&mut reader) {
        let status = {
            let mut s = state.lock().expect("receiver state");
            let answered = s.status.unwrap_or(200);
            s.received.push(Received { answered, ..req });
            answered
        };
        let answer = format!("HTTP/1.1 {status} Status\r\nContent-Length: 2\r\n\r\nok");
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_string();
    let (mut length, mut content_type, mut idempotency_key) = (0, None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let Some((k, v)) = h.trim_end().split_once(':') else {
            break;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = v.trim().parse().ok()?,
            "content-type" => content_type = Some(v.trim().to_string()),
            "idempotency-key" => idempotency_key = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        path,
        content_type,
        idempotency_key,
        body: String::from_utf8_lossy(&body).to_string(),
        answered: 0,
    })
}
