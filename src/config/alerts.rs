//! `alerts`: webhooks that journal events are posted to, each with the kinds it wants and the form
//! of its body. Checked in serde's visitors, so an error names the key, the line and the column.

use serde::{Deserialize, Deserializer};

pub use super::webhook_url::{Exposure, InClear, UrlError, WebhookFileError, WebhookUrl};
use crate::model::EventKind;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawAlert")]
pub struct Alert {
    pub webhook: Webhook,
    /// Journal event kinds posted to it; at least one, each a kind `dtd` journals.
    pub events: Vec<EventKind>,
    pub format: AlertFormat,
    /// Lets the webhook be `http://`: its token would cross the network in the clear.
    pub allow_http: bool,
}

/// Where the webhook's URL is: a secret (its path or query holds the token), shown only as
/// `scheme://host[:port]/…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Webhook {
    Url(WebhookUrl),
    /// A file holding the URL, read when `dtd run` starts: the config can then be shown and
    /// copied to every node without the secret (the stack writes it from Secrets Manager on
    /// the master only).
    File(std::path::PathBuf),
}

/// A webhook's URL written in the config itself, in a file others can read or change.
#[derive(Debug, thiserror::Error)]
pub enum InlineSecret {
    #[error("{path}: {error}")]
    Unreadable {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error(
        "alerts[{at}].webhook: {path} holds the webhook's URL, a secret, and {why}; or give the \
         URL in a webhook_file"
    )]
    Exposed {
        at: usize,
        path: std::path::PathBuf,
        why: Exposure,
    },
}

/// A webhook's URL written in the config itself is a secret in that file: the file must then be
/// kept as a `webhook_file` is (root's or dtd's user's, mode 0600), or anyone who can read it
/// can post to the webhook.
pub fn check_inline_secrets(
    alerts: &[Alert],
    config: &std::path::Path,
) -> Result<(), InlineSecret> {
    let Some(at) = alerts
        .iter()
        .position(|a| matches!(a.webhook, Webhook::Url(_)))
    else {
        return Ok(());
    };
    let path = config.to_path_buf();
    let meta = match std::fs::metadata(config) {
        Ok(meta) => meta,
        Err(error) => return Err(InlineSecret::Unreadable { path, error }),
    };
    match super::webhook_url::exposed(&meta) {
        Some(why) => Err(InlineSecret::Exposed { at, path, why }),
        None => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "struct Alert")]
struct RawAlert {
    #[serde(default)]
    webhook: Option<WebhookUrl>,
    #[serde(default)]
    webhook_file: Option<std::path::PathBuf>,
    #[serde(deserialize_with = "kinds")]
    events: Vec<EventKind>,
    #[serde(default)]
    format: AlertFormat,
    #[serde(default)]
    allow_http: bool,
}

/// Why an alert is refused.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error(transparent)]
    InClear(#[from] InClear),
    #[error("webhook_file must be an absolute path, not `{0}`")]
    FileRelative(std::path::PathBuf),
    #[error("give webhook or webhook_file, not both")]
    Both,
    #[error("an alert needs webhook or webhook_file")]
    Neither,
}

impl TryFrom<RawAlert> for Alert {
    type Error = AlertError;

    fn try_from(raw: RawAlert) -> Result<Alert, AlertError> {
        let webhook = match (raw.webhook, raw.webhook_file) {
            (Some(url), None) => {
                url.require_https(raw.allow_http)?;
                Webhook::Url(url)
            }
            (None, Some(path)) if path.is_absolute() => Webhook::File(path),
            (None, Some(path)) => return Err(AlertError::FileRelative(path)),
            (Some(_), Some(_)) => return Err(AlertError::Both),
            (None, None) => return Err(AlertError::Neither),
        };
        Ok(Alert {
            webhook,
            events: raw.events,
            format: raw.format,
            allow_http: raw.allow_http,
        })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertFormat {
    /// `{cluster, kind, time, instance, ip, generation, message, event}` (docs/operating.md, "Alerts").
    #[default]
    Json,
    /// A Slack incoming webhook's `{"text": "..."}`.
    Slack,
}

/// A non-empty list of known kinds; the emptiness is checked in the visitor for its position.
fn kinds<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<EventKind>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Vec<EventKind>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of event kinds")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kinds = Vec::new();
            while let Some(KnownKind(kind)) = seq.next_element()? {
                kinds.push(kind);
            }
            if kinds.is_empty() {
                let msg =
                    "events must list at least one event kind (e.g. [interrupted, ack_timeout])";
                return Err(serde::de::Error::custom(msg));
            }
            Ok(kinds)
        }
    }
    d.deserialize_seq(Visitor)
}

/// An event kind `dtd` journals. The name is read through [`EventKind`]'s own serde form, so a
/// kind added there is known here without a list to keep in step.
struct KnownKind(EventKind);

impl<'de> Deserialize<'de> for KnownKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = KnownKind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an event kind")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KnownKind, E> {
                let read = EventKind::deserialize(serde::de::value::StrDeserializer::<E>::new(v))?;
                match read {
                    EventKind::Other(_) => Err(E::custom(format!(
                        "unknown event kind `{v}`: use the kinds of the events journal (e.g. \
                         interrupted, removal_queued, ack_timeout, source_failed; see docs/troubleshooting.md)"
                    ))),
                    known => Ok(KnownKind(known)),
                }
            }
        }
        d.deserialize_str(Visitor)
    }
}
