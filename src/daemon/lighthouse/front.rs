//! dtd's front for torchft's Lighthouse: it listens where the nodes dial
//! (`job.launcher.in_place.lighthouse`) and hands the Lighthouse, which listens on the master's
//! loopback, only the heartbeat and quorum calls the gate (admit.rs) lets through: torchft's
//! dashboard and its kill route are never served, and no one speaks for a node but that node.
//!
//! gRPC is HTTP/2 with prior knowledge, the dashboard HTTP/1: the first bytes tell them apart.
//! Each node's connection gets a connection of its own to the Lighthouse, so the calls it lets
//! through (a quorum call waits until the quorum forms) go on as they came. It runs on a thread
//! and runtime of its own, so a long pass never delays a heartbeat.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::admit::{shown, Refusal};
use super::grpc;
use super::prefixed::Prefixed;
use super::Shared;

/// The connection preface of HTTP/2 (RFC 9113, section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEARTBEAT: &str = "/torchft.LighthouseService/Heartbeat";
const QUORUM: &str = "/torchft.LighthouseService/Quorum";
/// A node's calls are a few hundred bytes.
const MAX_CALL: usize = 64 * 1024;
/// An HTTP/1 request line is read this far, to say what was asked.
const MAX_LINE: usize = 2048;
/// The first bytes must arrive within this, so an idle client cannot hold a connection.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Each node keeps a connection or two open; more is someone else.
const MAX_CONNECTIONS: usize = 4096;
/// A front that cannot listen (the address is not this host's yet, the port is taken) tries
/// again this often.
const RETRY: Duration = Duration::from_secs(5);
/// gRPC's PERMISSION_DENIED: the node's manager retries its quorum, as when the Lighthouse is away.
const DENIED: &str = "7";

type Body = Either<Full<Bytes>, Incoming>;

/// Serves on a thread of its own until dtd exits.
pub fn spawn(listen: SocketAddr, inner: SocketAddr, shared: Arc<Shared>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("dtd-lighthouse-front".into())
        .spawn(move || runtime.block_on(serve(listen, inner, shared)))?;
    Ok(())
}

async fn serve(listen: SocketAddr, inner: SocketAddr, shared: Arc<Shared>) {
    let listener = loop {
        match TcpListener::bind(listen).await {
            Ok(l) => break l,
            Err(e) => {
                shared.set_front(Some(format!("cannot listen on {listen}: {e}")));
                tracing::error!("torchft's Lighthouse: dtd's front cannot listen on {listen}: {e}");
                tokio::time::sleep(RETRY).await;
            }
        }
    };
    shared.set_front(None);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            connection(stream, peer.ip(), inner, shared).await;
            drop(slot);
        });
    }
}

/// What a connection opened with.
enum Head {
    Http2(Vec<u8>),
    /// The request line of anything else.
    Other(String),
}

async fn connection(mut stream: TcpStream, from: IpAddr, inner: SocketAddr, shared: Arc<Shared>) {
    if let Err(refusal) = shared.gate(|g| g.connection(from)) {
        shared.refuse(from, &refusal);
        return;
    }
    match tokio::time::timeout(HEAD_TIMEOUT, head(&mut stream)).await {
        Ok(Some(Head::Http2(head))) => {
            http2(Prefixed::new(head, stream), from, inner, shared).await
        }
        Ok(Some(Head::Other(line))) => {
            let path = line.split(' ').nth(1).unwrap_or(&line);
            shared.refuse(from, &Refusal::Route(shown(path)));
            let answer =
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            let _ = stream.write_all(answer).await;
        }
        Ok(None) | Err(_) => {}
    }
}

/// Reads until the bytes are HTTP/2's preface, or a line of something else.
async fn head(stream: &mut TcpStream) -> Option<Head> {
    let mut buf = Vec::with_capacity(PREFACE.len());
    loop {
        let n = buf.len().min(PREFACE.len());
        if buf[..n] != PREFACE[..n] {
            let end = buf.windows(2).position(|w| w == b"\r\n");
            if end.is_some() || buf.len() >= MAX_LINE {
                let line = &buf[..end.unwrap_or(MAX_LINE).min(buf.len())];
                return Some(Head::Other(String::from_utf8_lossy(line).into_owned()));
            }
        } else if n == PREFACE.len() {
            return Some(Head::Http2(buf));
        }
        if stream.read_buf(&mut buf).await.ok()? == 0 {
            return None;
        }
    }
}

async fn http2(
    downstream: Prefixed<TcpStream>,
    from: IpAddr,
    inner: SocketAddr,
    shared: Arc<Shared>,
) {
    let upstream = Arc::new(Upstream {
        inner,
        sender: tokio::sync::Mutex::new(None),
    });
    let service = hyper::service::service_fn(move |req| {
        let (upstream, shared) = (Arc::clone(&upstream), Arc::clone(&shared));
        async move { Ok::<_, Infallible>(call(req, from, &upstream, &shared).await) }
    });
    let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .max_concurrent_streams(16)
        .max_header_list_size(16 * 1024)
        .serve_connection(TokioIo::new(downstream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(%from, "torchft's Lighthouse: a node's connection ended: {e}");
    }
}

/// A node's connection's own connection to the Lighthouse, made again after the Lighthouse
/// restarted; none while it is down (the node's manager retries, as it would without the front).
struct Upstream {
    inner: SocketAddr,
    sender: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl Upstream {
    async fn sender(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut sender = self.sender.lock().await;
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            *sender = connect(self.inner).await;
        }
        sender.clone()
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Option<Response<Incoming>> {
        let mut sender = self.sender().await?;
        sender.ready().await.ok()?;
        sender.send_request(req).await.ok()
    }
}

async fn connect(inner: SocketAddr) -> Option<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(inner).await.ok()?;
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// One call: judged, then handed to the Lighthouse as it came, or refused.
async fn call(
    req: Request<Incoming>,
    from: IpAddr,
    upstream: &Upstream,
    shared: &Shared,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let read: fn(&[u8]) -> Result<grpc::Said, grpc::GrpcError> = match path.as_str() {
        HEARTBEAT => grpc::heartbeat,
        QUORUM => grpc::quorum,
        other => return denied(shared, from, Refusal::Route(shown(other))),
    };
    let Ok(bytes) = Limited::new(body, MAX_CALL)
        .collect()
        .await
        .map(|b| b.to_bytes())
    else {
        return denied(shared, from, grpc::GrpcError::Framing.into());
    };
    let judged = read(&bytes)
        .map_err(Refusal::from)
        .and_then(|said| shared.gate(|g| g.judge(from, &said, Instant::now())));
    if let Err(refusal) = judged {
        return denied(shared, from, refusal);
    }
    let mut forward = Request::from_parts(parts, Full::new(bytes));
    let Ok(uri) = format!("http://{}{path}", upstream.inner).parse() else {
        return unavailable();
    };
    *forward.uri_mut() = uri;
    match upstream.send(forward).await {
        Some(answer) => answer.map(Either::Right),
        None => unavailable(),
    }
}

fn denied(shared: &Shared, from: IpAddr, refusal: Refusal) -> Response<Body> {
    shared.refuse(from, &refusal);
    grpc_error(DENIED, "refused by dtd (see dtctl status)")
}

/// The Lighthouse did not answer: gRPC's UNAVAILABLE, which the manager retries.
fn unavailable() -> Response<Body> {
    grpc_error("14", "the Lighthouse is not answering")
}

/// A gRPC error as a response of headers only ("Trailers-Only" in gRPC over HTTP/2).
fn grpc_error(status: &'static str, message: &'static str) -> Response<Body> {
    let mut answer = Response::new(Either::Left(Full::new(Bytes::new())));
    let headers = answer.headers_mut();
    for (name, value) in [
        ("content-type", "application/grpc"),
        ("grpc-status", status),
        ("grpc-message", message),
    ] {
        headers.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    answer
}
