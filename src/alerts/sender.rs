//! A webhook's sender: a task of its own that posts its events one at a time, in order, each
//! retried with exponential backoff until the webhook takes it, refuses it, or an hour has passed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::body;
use super::http::{post, Client, Posted};
use super::outbox::Outbox;
use crate::clock::SharedClock;
use crate::config::AlertFormat;
use crate::config::WebhookUrl;
use crate::model::Event;

/// How long to wait between attempts, and when to stop.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// An event still not delivered this long after its first attempt is dropped: an alert
    /// hours late misleads more than it helps, and the ones behind it are waiting.
    pub give_up_after: Duration,
    /// One attempt's limit: connect, TLS and the answer.
    pub timeout: Duration,
}

impl Retry {
    /// 1 s doubling to a minute; a webhook back after an outage hears within a minute.
    pub const DEFAULT: Retry = Retry {
        first_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(60),
        give_up_after: Duration::from_secs(3600),
        timeout: Duration::from_secs(10),
    };

    /// The pause after failed attempt `n` (0 for the first): first_delay × 2ⁿ, at most max_delay.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.first_delay.saturating_mul(factor).min(self.max_delay)
    }
}

pub struct Sender {
    pub url: WebhookUrl,
    pub format: AlertFormat,
    pub cluster: String,
    pub outbox: Arc<Outbox>,
    pub client: Client,
    pub retry: Retry,
    /// The daemon's clock: when the webhook last failed.
    pub clock: SharedClock,
}

impl Sender {
    /// Runs until `dtd` stops; events still queued then are not sent.
    pub async fn run(self) {
        loop {
            let event = self.outbox.next().await;
            self.deliver(&event).await;
        }
    }

    async fn deliver(&self, event: &Event) {
        let body = body::render(self.format, &self.cluster, event);
        let id = event.id();
        let started = Instant::now();
        for attempt in 0u32.. {
            let posted = post(
                &self.client,
                &self.url,
                body.clone(),
                &id,
                self.retry.timeout,
            )
            .await;
            let (error, after) = match posted {
                Posted::Delivered => return self.delivered(),
                Posted::Refused(error) => {
                    self.failed(&error);
                    return self.give_up(event, &format!("refused: {error}"));
                }
                Posted::Retry { error, after } => (error, after),
            };
            self.failed(&error);
            // The server's Retry-After, when longer, within the same ceiling.
            let wait = (self.retry.delay(attempt))
                .max(after.unwrap_or_default().min(self.retry.max_delay));
            if started.elapsed() + wait > self.retry.give_up_after {
                let tried = humantime::format_duration(self.retry.give_up_after);
                return self.give_up(event, &format!("not delivered within {tried}: {error}"));
            }
            tracing::debug!(webhook = %self.url, "alert attempt {} failed ({error}); next in {wait:?}", attempt + 1);
            tokio::time::sleep(wait).await;
        }
    }

    fn delivered(&self) {
        if self.outbox.delivered() {
            tracing::info!(webhook = %self.url, "alert webhook recovered");
        }
    }

    /// Logs the first failure of a run only (a refusal too: it is not retried, but the webhook
    /// is failing until an event gets through); `dtctl status` shows the latest.
    fn failed(&self, error: &str) {
        if self.outbox.failed(error.to_string(), self.clock.now()) {
            tracing::warn!(webhook = %self.url, "alert webhook failing: {error}");
        }
    }

    fn give_up(&self, event: &Event, why: &str) {
        self.outbox.gave_up();
        tracing::warn!(webhook = %self.url, kind = %event.kind, "alert dropped: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    #[test]
    fn backoff_doubles_from_a_second_to_a_minute() {
        let secs: Vec<u64> = (0..9).map(|n| Retry::DEFAULT.delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(Retry::DEFAULT.delay(u32::MAX), Duration::from_secs(60));
    }

    const QUICK: Retry = Retry {
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        give_up_after: Duration::from_secs(20),
        timeout: Duration::from_secs(5),
    };

    /// A loopback server answering each request with the next status of `statuses` (the last
    /// one repeated); returns its URL and the bodies it received.
    fn server(statuses: Vec<u16>) -> (String, std::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("an address").port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(mut conn) = conn else { return };
                let status = statuses[n.min(statuses.len() - 1)];
                let body = read_request(&mut conn);
                let _ = tx.send(body);
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
                );
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        (format!("http://127.0.0.1:{port}/hook/SeCrEt"), rx)
    }

    fn read_request(conn: &mut std::net::TcpStream) -> String {
        let mut reader = BufReader::new(conn);
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        String::from_utf8_lossy(&body).to_string()
    }

    fn sender(url: &str, retry: Retry) -> Sender {
        Sender {
            url: WebhookUrl::parse(url).expect("a URL"),
            format: AlertFormat::Slack,
            cluster: "demo".into(),
            outbox: Arc::new(Outbox::new(10)),
            client: super::super::http::client(Duration::from_secs(5)).expect("a client"),
            retry,
            clock: std::sync::Arc::new(crate::clock::SystemClock),
        }
    }

    #[tokio::test]
    async fn an_event_is_retried_until_the_webhook_takes_it_then_sent_once() {
        let (url, bodies) = server(vec![503, 500, 200]);
        let s = sender(&url, QUICK);
        s.deliver(&Event::new(0, EventKind::Interrupted, "lost".into()))
            .await;
        let got: Vec<String> = bodies.try_iter().collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got.iter()
                .all(|b| b == r#"{"text":"[demo] interrupted: lost"}"#),
            "{got:?}"
        );
        let counts = s.outbox.counts();
        assert_eq!((counts.sent, counts.dropped, counts.failing), (1, 0, None));
    }

    #[tokio::test]
    async fn a_refusal_drops_the_event_at_once_and_the_error_hides_the_token() {
        let (url, bodies) = server(vec![404]);
        let s = sender(&url, QUICK);
        s.deliver(&Event::new(0, EventKind::Interrupted, "lost".into()))
            .await;
        assert_eq!(bodies.try_iter().count(), 1, "not retried");
        let counts = s.outbox.counts();
        assert_eq!((counts.sent, counts.dropped), (0, 1));
        let (error, _) = counts.failing.expect("failing");
        assert_eq!(error, "HTTP 404 Not Found: no");
    }

    /// A connect that never completes (the listener's backlog is full, so the kernel drops the
    /// SYN) ends at the timeout, and the thread the control loop shares keeps running meanwhile.
    #[tokio::test]
    async fn a_hung_connect_times_out_without_stalling_the_thread() {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("bind");
        let listener = socket.listen(0).expect("listen");
        let port = listener.local_addr().expect("an address").port();
        // Fills the backlog: never accepted.
        let _queued = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let retry = Retry {
            timeout: Duration::from_millis(300),
            ..QUICK
        };
        let s = sender(&format!("http://127.0.0.1:{port}/SeCrEt"), retry);
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let started = std::time::Instant::now();
        let posted = post(&s.client, &s.url, "{}".into(), "id", retry.timeout).await;
        let took = started.elapsed();
        ticker.abort();
        assert!(
            matches!(&posted, Posted::Retry { error, .. } if error.starts_with("no answer within")),
            "{posted:?}"
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
        // A connect that blocked the thread would leave the ticker no turn at all before abort.
        let ticked = ticks.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            ticked >= 1,
            "the runtime ran other tasks meanwhile: {ticked} ticks"
        );
        drop(listener);
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried_and_named_without_the_token() {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("a port")
            .local_addr()
            .expect("addr")
            .port();
        let s = sender(&format!("http://127.0.0.1:{port}/hook/SeCrEt"), QUICK);
        let posted = post(&s.client, &s.url, "{}".into(), "id", QUICK.timeout).await;
        let Posted::Retry { error, .. } = posted else {
            panic!("{posted:?}");
        };
        assert!(
            error.contains("Connection refused") && !error.contains("SeCrEt"),
            "{error}"
        );
    }
}
