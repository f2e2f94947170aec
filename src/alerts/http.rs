//! One POST to a webhook, with the HTTP client the AWS SDK already builds (hyper-util's pooled
//! client over hyper-rustls), and what its answer means for a retry.
//!
//! Nothing here can stall the control loop, which shares `dtd`'s one thread with the senders: the
//! TCP connect is a non-blocking socket polled by tokio, the name lookup runs on tokio's blocking
//! pool (hyper-util's resolver), and the whole exchange runs under a timeout.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::header::{CONTENT_TYPE, RETRY_AFTER, USER_AGENT};

/// The IETF HTTP API draft's name for a request's deduplication key
/// (draft-ietf-httpapi-idempotency-key-header), which Stripe and others read.
const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
use hyper::{Request, Response, StatusCode};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::WebhookUrl;

pub type Client = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, String>;

/// How much of an answer's body is kept for the error shown in `dtctl status` (Slack explains a
/// refusal there: `invalid_payload`, `no_service`, ...).
const BODY_SHOWN: usize = 200;

/// How one POST went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    Delivered,
    /// Worth trying again (no answer, 408, 429, 5xx); `after` is the server's `Retry-After`.
    Retry {
        error: String,
        after: Option<Duration>,
    },
    /// The webhook refused this event for good (another 4xx, a redirect); retrying cannot help.
    Refused(String),
}

/// rustls refused every protocol version of its provider: no webhook can be reached.
#[derive(Debug, thiserror::Error)]
#[error("TLS setup: {0}")]
pub struct TlsSetup(rustls::Error);

/// A client for http and https webhooks. Without the system's CA certificates (a minimal
/// container) https webhooks fail their handshake, with that said in the status, and http ones
/// still work.
pub fn client(connect_timeout: Duration) -> Result<Client, TlsSetup> {
    let mut http = HttpConnector::new();
    // hyper-rustls takes https: URLs from this connector, which would otherwise refuse them.
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let https = HttpsConnectorBuilder::new()
        .with_tls_config(tls_config()?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(https),
    )
}

/// rustls with aws-lc, the provider the SDK's client is built with, so no second one is compiled.
fn tls_config() -> Result<rustls::ClientConfig, TlsSetup> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsSetup)?;
    let config = match builder.clone().with_native_roots() {
        Ok(with_roots) => with_roots.with_no_client_auth(),
        Err(e) => {
            tracing::warn!("alerts: no CA certificates ({e}); https webhooks will fail");
            let empty = rustls::RootCertStore::empty();
            builder.with_root_certificates(empty).with_no_client_auth()
        }
    };
    Ok(config)
}

/// Posts `body` as JSON, with `Idempotency-Key: id` (the event's, the same in every attempt);
/// gives up on this attempt after `timeout` (connect, TLS, answer).
pub async fn post(
    client: &Client,
    url: &WebhookUrl,
    body: String,
    id: &str,
    timeout: Duration,
) -> Posted {
    let request = Request::post(url.target().clone())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("dtd/", env!("CARGO_PKG_VERSION")))
        .header(IDEMPOTENCY_KEY, id)
        .body(body);
    let request = match request {
        Ok(r) => r,
        Err(e) => return Posted::Refused(url.scrub(&e.to_string())),
    };
    let exchange = async {
        let response = client.request(request).await.map_err(|e| chain(&e))?;
        Ok::<_, String>(read(response).await)
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Posted::Retry {
            error: format!("no answer within {}", humantime::format_duration(timeout)),
            after: None,
        },
        Ok(Err(e)) => Posted::Retry {
            error: url.scrub(&e),
            after: None,
        },
        Ok(Ok((status, after, text))) => judge(status, after, &url.scrub(&text)),
    }
}

/// The status, `Retry-After` in seconds, and the start of the body: read, when short, so the
/// connection can go back to the pool.
async fn read(response: Response<Incoming>) -> (StatusCode, Option<Duration>, String) {
    let status = response.status();
    let after = (response.headers().get(RETRY_AFTER))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut body = pin!(response.into_body());
    let mut bytes = Vec::new();
    while bytes.len() <= BODY_SHOWN {
        match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            Some(Ok(frame)) => bytes.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
            _ => break,
        }
    }
    (status, after, one_line(&bytes))
}

/// What an answer means: 2xx delivered; 408, 429 and 5xx worth retrying; the rest refused.
pub fn judge(status: StatusCode, after: Option<Duration>, body: &str) -> Posted {
    if status.is_success() {
        return Posted::Delivered;
    }
    let error = match body.is_empty() {
        true => format!("HTTP {status}"),
        false => format!("HTTP {status}: {body}"),
    };
    let retry = status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error();
    match retry {
        true => Posted::Retry { error, after },
        false => Posted::Refused(error),
    }
}

/// An error and its causes: hyper's own message ("client error (Connect)") says little alone.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// At most [`BODY_SHOWN`] characters on one line, for a status line.
fn one_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let flat: String = (text.chars())
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(BODY_SHOWN)
        .collect();
    flat.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_for_a_retry() {
        assert_eq!(judge(StatusCode::OK, None, "ok"), Posted::Delivered);
        assert_eq!(judge(StatusCode::NO_CONTENT, None, ""), Posted::Delivered);
        let wait = Some(Duration::from_secs(30));
        for retried in [408, 429, 500, 502, 503] {
            let status = StatusCode::from_u16(retried).expect("a status");
            assert!(
                matches!(judge(status, wait, ""), Posted::Retry { after, .. } if after == wait),
                "{retried}"
            );
        }
        assert_eq!(
            judge(StatusCode::NOT_FOUND, None, "no_service"),
            Posted::Refused("HTTP 404 Not Found: no_service".into())
        );
        for refused in [301, 400, 401, 403, 410] {
            let status = StatusCode::from_u16(refused).expect("a status");
            assert!(
                matches!(judge(status, None, ""), Posted::Refused(_)),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_body_is_shown_on_one_short_line() {
        assert_eq!(one_line(b"invalid_payload\n"), "invalid_payload");
        assert_eq!(one_line(b"a\r\nb"), "a  b");
        assert_eq!(one_line(&[b'x'; 1000]).len(), BODY_SHOWN);
    }
}
