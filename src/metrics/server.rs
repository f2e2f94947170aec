//! The HTTP endpoint: `GET /metrics` (OpenMetrics text, which Prometheus scrapes) and
//! `GET /healthz` (200 or 503 with the reasons), on a thread and runtime of its own so that a
//! scrape, or a client that never finishes its request, cannot delay a pass.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;

use super::health::{Reason, Unhealthy};
use super::DaemonHealth;

/// The exposition format's content type (OpenMetrics 1.0, "OpenMetrics text format").
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus and a load balancer's health check need a handful; more is someone else.
const MAX_CONNECTIONS: usize = 32;
/// A request's headers must arrive within this, so an idle client cannot hold a connection.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("metrics.listen {addr}: cannot listen: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics server: {0}")]
    Start(std::io::Error),
}

struct Shared {
    registry: Registry,
    health: Arc<Mutex<DaemonHealth>>,
}

/// Binds now (so that a taken port fails `dtd run` at once) and serves on a thread of its own.
/// Returns the address bound (the port, when 0 was asked for).
pub fn spawn(
    addr: SocketAddr,
    registry: Registry,
    health: Arc<Mutex<DaemonHealth>>,
) -> Result<SocketAddr, ServeError> {
    let bind = |source| ServeError::Bind { addr, source };
    let listener = TcpListener::bind(addr).map_err(bind)?;
    listener.set_nonblocking(true).map_err(ServeError::Start)?;
    let bound = listener.local_addr().map_err(ServeError::Start)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Start)?;
    let shared = Arc::new(Shared { registry, health });
    std::thread::Builder::new()
        .name("dtd-metrics".into())
        .spawn(move || runtime.block_on(serve(listener, shared)))
        .map_err(ServeError::Start)?;
    Ok(bound)
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("metrics server: {e}; /metrics and /healthz are not served");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!("metrics server: accepting: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            continue; // dropped: too many connections open
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(respond(&shared, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = conn.await;
            drop(permit);
        });
    }
}

fn respond(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => metrics(&shared.registry),
        "/healthz" => healthz(&shared.health),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics or /healthz\n".into(),
        ),
    }
}

fn metrics(registry: &Registry) -> Response<Full<Bytes>> {
    let mut body = String::with_capacity(16 * 1024);
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, registry) {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding: {e}\n"),
        );
    }
    let mut r = Response::new(Full::new(Bytes::from(body)));
    (r.headers_mut()).insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    r
}

fn healthz(health: &Mutex<DaemonHealth>) -> Response<Full<Bytes>> {
    let verdict = match health.lock() {
        Ok(h) => h.verdict(Instant::now()),
        Err(_) => Err(Unhealthy(vec![Reason::Poisoned])),
    };
    match verdict {
        Ok(ok) => text(StatusCode::OK, format!("{ok}\n")),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let plain = HeaderValue::from_static("text/plain; charset=utf-8");
    r.headers_mut().insert(CONTENT_TYPE, plain);
    r
}
