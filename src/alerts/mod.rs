//! Alerts: journal events of the kinds a webhook lists, posted to it off the control loop.
//!
//! The daemon hands every event it records to [`Alerts::offer`], which only appends to each
//! interested webhook's bounded [`outbox`] and never waits. A [`sender`] task per webhook posts
//! them in order with retries, so a webhook that is slow or down never slows or fails a pass; what
//! it is doing shows in the status report through [`Alerts::status`]. What waits is saved in the
//! state directory whenever it changes ([`saved`]) and sent after a restart.

mod body;
mod http;
mod outbox;
pub mod saved;
mod sender;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::clock::SharedClock;
use crate::config::{AlertFormat, Config, Webhook, WebhookFileError, WebhookUrl};
use crate::model::{Event, EventKind, Millis};
use outbox::Outbox;
use saved::Saved;
use sender::{Retry, Sender};

/// What the status report shows of one webhook. The URL is redacted: its path holds the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertStatus {
    /// `scheme://host[:port]/…`
    pub webhook: String,
    pub format: AlertFormat,
    /// Events the webhook took.
    pub sent: u64,
    /// Events queued or being retried.
    pub pending: u64,
    /// Events given up on: refused by the webhook, retried for an hour, or pushed out of a full
    /// queue.
    pub dropped: u64,
    /// The last attempt's error while the webhook is failing; cleared by the next delivery.
    pub last_error: Option<String>,
    /// When the current run of failures began.
    pub failing_since: Option<Millis>,
}

pub struct Alerts {
    cluster: String,
    hooks: Vec<Hook>,
    started: bool,
    clock: SharedClock,
}

struct Hook {
    url: WebhookUrl,
    /// Names it in the saved outbox.
    key: String,
    format: AlertFormat,
    kinds: Vec<EventKind>,
    outbox: Arc<Outbox>,
}

impl Alerts {
    /// The webhooks of the config, with what waited for each when `dtd` last stopped (`saved`);
    /// nothing sent until [`Alerts::start`]. A webhook in a file is read now: one that cannot be
    /// read stops `dtd run` at its start.
    pub fn new(cfg: &Config, clock: SharedClock, saved: Saved) -> Result<Alerts, WebhookFileError> {
        let hooks = (cfg.alerts.iter())
            .map(|a| {
                let url = match &a.webhook {
                    Webhook::Url(url) => url.clone(),
                    Webhook::File(path) => WebhookUrl::read_file(path, a.allow_http)?,
                };
                Ok(Hook {
                    key: saved::key(&url),
                    url,
                    format: a.format,
                    kinds: a.events.clone(),
                    outbox: Arc::new(Outbox::new(outbox::CAPACITY)),
                })
            })
            .collect::<Result<_, WebhookFileError>>()?;
        let alerts = Alerts {
            cluster: cfg.cluster.clone(),
            hooks,
            started: false,
            clock,
        };
        alerts.restore(saved);
        Ok(alerts)
    }

    fn restore(&self, mut saved: Saved) {
        for hook in &self.hooks {
            let events = saved.webhooks.remove(&hook.key).unwrap_or_default();
            if !events.is_empty() {
                tracing::info!(webhook = %hook.url, count = events.len(), "alerts from before the restart queued");
            }
            events.into_iter().for_each(|e| hook.outbox.push(e));
        }
        if !saved.is_empty() {
            let count = saved.len();
            tracing::warn!(count, "alerts for webhooks no longer configured dropped");
        }
    }

    /// What waits for every webhook, when it changed since the count `since` an earlier call
    /// returned (0 at the start: anything restored counts as a change).
    pub fn waiting_since(&self, since: u64) -> Option<(Saved, u64)> {
        let changes: u64 = self.hooks.iter().map(|h| h.outbox.changes()).sum();
        if changes == since {
            return None;
        }
        let mut saved = Saved::default();
        let mut counted: u64 = 0;
        for hook in &self.hooks {
            let (events, changes) = hook.outbox.waiting();
            counted += changes;
            if !events.is_empty() {
                saved.webhooks.insert(hook.key.clone(), events);
            }
        }
        Some((saved, counted))
    }

    /// Spawns a sender per webhook on the current tokio runtime; once only.
    pub fn start(&mut self) {
        if self.started || self.hooks.is_empty() {
            return;
        }
        self.started = true;
        let client = match http::client(Retry::DEFAULT.timeout) {
            Ok(c) => c,
            Err(e) => return self.cannot_send(&e.to_string()),
        };
        for hook in &self.hooks {
            tracing::info!(webhook = %hook.url, kinds = ?kind_names(&hook.kinds), "posting alerts");
            let sender = Sender {
                url: hook.url.clone(),
                format: hook.format,
                cluster: self.cluster.clone(),
                outbox: hook.outbox.clone(),
                client: client.clone(),
                retry: Retry::DEFAULT,
                clock: self.clock.clone(),
            };
            tokio::spawn(sender.run());
        }
    }

    /// Without a client no webhook can be reached: each shows why, its events pending.
    fn cannot_send(&self, error: &str) {
        tracing::error!("alerts cannot be sent: {error}");
        for hook in &self.hooks {
            hook.outbox.failed(error.to_string(), self.clock.now());
        }
    }

    /// Queues each event for the webhooks that list its kind. Never waits.
    pub fn offer(&self, events: &[Event]) {
        for hook in &self.hooks {
            for e in events.iter().filter(|e| hook.kinds.contains(&e.kind)) {
                hook.outbox.push(e.clone());
            }
        }
    }

    pub fn status(&self) -> Vec<AlertStatus> {
        (self.hooks.iter())
            .map(|hook| {
                let counts = hook.outbox.counts();
                let (last_error, failing_since) = counts.failing.unzip();
                AlertStatus {
                    webhook: hook.url.redacted().to_string(),
                    format: hook.format,
                    sent: counts.sent,
                    pending: counts.pending,
                    dropped: counts.dropped,
                    last_error,
                    failing_since,
                }
            })
            .collect()
    }
}

fn kind_names(kinds: &[EventKind]) -> Vec<&str> {
    kinds.iter().map(EventKind::as_str).collect()
}
