//! The loopback HTTP server the stand-ins share: bound to a free port on 127.0.0.1, a thread per
//! connection running the stand-in's `serve` over its state, stopped when dropped; and the
//! reading of the AWS Query API's requests (form-encoded POSTs) they answer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub struct Server<S> {
    pub port: u16,
    name: &'static str,
    state: Arc<Mutex<S>>,
    stop: Arc<AtomicBool>,
}

impl<S: Default + Send + 'static> Server<S> {
    pub fn start(name: &'static str, serve: fn(TcpStream, &Mutex<S>)) -> Server<S> {
        Server::start_at(name, 0, serve)
    }

    /// On a given loopback port (0: any free one), e.g. one a client was already pointed at.
    pub fn start_at(name: &'static str, port: u16, serve: fn(TcpStream, &Mutex<S>)) -> Server<S> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("binding the {name}: {e}"));
        let port = listener.local_addr().expect("local addr").port();
        let state = Arc::new(Mutex::new(S::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    let s = s.clone();
                    std::thread::spawn(move || serve(conn, &s));
                }
            }
        });
        Server {
            port,
            name,
            state,
            stop,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, S> {
        (self.state.lock()).unwrap_or_else(|_| panic!("{} state", self.name))
    }
}

impl<S> Drop for Server<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One HTTP/1.1 request as read: its request line, its header lines, its body.
pub struct Request {
    pub line: String,
    pub headers: Vec<String>,
    pub body: String,
}

/// Reads one request; `None` at the end of the connection or on a malformed request.
pub fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let (mut len, mut headers) = (0, Vec::new());
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
        }
        headers.push(h);
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        line: line.trim_end().to_string(),
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

/// `application/x-www-form-urlencoded` into fields.
pub fn parse_form(body: &str) -> BTreeMap<String, String> {
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
