//! A webhook's URL, which is a secret: Slack's incoming webhooks (and most others) put their token
//! in the path (`/services/T…/B…/XXXX`) or the query. Everything that shows a webhook (logs,
//! status, errors) shows only `scheme://host[:port]/…`; the full URL leaves this type only as the
//! request's target.

use std::path::{Path, PathBuf};

use hyper::Uri;
use serde::{Deserialize, Deserializer};

#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    uri: Uri,
    shown: String,
}

/// Why a webhook's text is not a URL to post to. Never repeats the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("webhook is not a URL (write e.g. https://hooks.slack.com/services/…)")]
    NotAUrl,
    #[error("webhook must be an http:// or https:// URL")]
    Scheme,
    #[error(
        "webhook must not carry user:password@; put the token where the service says (usually \
         the path)"
    )]
    Credentials,
    #[error("webhook URL has no host")]
    NoHost,
}

/// An `http://` webhook not allowed to be one; shown redacted.
#[derive(Debug, thiserror::Error)]
#[error(
    "webhook {0} is http://: its token would cross the network in the clear; use https://, or \
     set allow_http: true for a webhook on a network of your own"
)]
pub struct InClear(WebhookUrl);

/// Why `alerts[].webhook_file` gives no webhook. Never repeats the file's content.
#[derive(Debug, thiserror::Error)]
pub enum WebhookFileError {
    #[error("webhook_file {0} does not exist")]
    Missing(PathBuf),
    #[error("webhook_file {path}: {error}")]
    Unreadable {
        path: PathBuf,
        error: crate::untrusted::ReadError,
    },
    #[error("webhook_file {path} {why}")]
    Exposed { path: PathBuf, why: Exposure },
    #[error("webhook_file {0} is not text")]
    NotText(PathBuf),
    #[error("webhook_file {path}: {error}")]
    NotAUrl { path: PathBuf, error: UrlError },
    #[error(transparent)]
    InClear(#[from] InClear),
}

impl WebhookUrl {
    /// An absolute http or https URL with a host. The error never repeats the URL.
    pub fn parse(text: &str) -> Result<WebhookUrl, UrlError> {
        let uri: Uri = text.parse().map_err(|_| UrlError::NotAUrl)?;
        let scheme = uri.scheme_str().unwrap_or("");
        if scheme != "http" && scheme != "https" {
            return Err(UrlError::Scheme);
        }
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        // Credentials in the URL would be sent nowhere (hyper does not turn them into a header)
        // and would be one more secret to keep out of messages.
        if authority.contains('@') {
            return Err(UrlError::Credentials);
        }
        let host = uri.host().unwrap_or("");
        if host.is_empty() {
            return Err(UrlError::NoHost);
        }
        let port = uri.port_u16().map_or(String::new(), |p| format!(":{p}"));
        let shown = format!("{scheme}://{host}{port}/…");
        Ok(WebhookUrl { uri, shown })
    }

    /// An `https://` URL, or `http://` when `allow_http`: a token sent in the clear is one anyone
    /// on the path can read and replay.
    pub fn require_https(&self, allow_http: bool) -> Result<(), InClear> {
        match self.uri.scheme_str() {
            Some("http") if !allow_http => Err(InClear(self.clone())),
            _ => Ok(()),
        }
    }

    /// The URL in a file (`alerts[].webhook_file`): owned by root or dtd's own user, readable by
    /// no one else, one line. The error never repeats the file's content.
    pub fn read_file(path: &Path, allow_http: bool) -> Result<WebhookUrl, WebhookFileError> {
        let at = || path.to_path_buf();
        let (file, meta) = match crate::untrusted::open(path) {
            Ok(Some(opened)) => opened,
            Ok(None) => return Err(WebhookFileError::Missing(at())),
            Err(error) => return Err(WebhookFileError::Unreadable { path: at(), error }),
        };
        if let Some(why) = exposed(&meta) {
            return Err(WebhookFileError::Exposed { path: at(), why });
        }
        let bytes = crate::untrusted::read_opened(file, &meta, WEBHOOK_FILE_LIMIT)
            .map_err(|error| WebhookFileError::Unreadable { path: at(), error })?;
        let text = std::str::from_utf8(&bytes).map_err(|_| WebhookFileError::NotText(at()))?;
        let url = WebhookUrl::parse(text.trim())
            .map_err(|error| WebhookFileError::NotAUrl { path: at(), error })?;
        url.require_https(allow_http)?;
        Ok(url)
    }

    /// The full URL, token included: for the request line only, never for a message.
    pub fn target(&self) -> &Uri {
        &self.uri
    }

    /// `scheme://host[:port]/…`: what may be shown.
    pub fn redacted(&self) -> &str {
        &self.shown
    }

    /// `text` (an error's message, a response's body) with the URL's secret parts replaced by
    /// `…`, in case a library or the server repeated them.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.replace(&self.uri.to_string(), &self.shown);
        let secrets = [
            self.uri.path_and_query().map(|p| p.as_str()),
            Some(self.uri.path()),
            self.uri.query(),
        ];
        // A bare "/" or an empty part is no secret, and replacing it would mangle the text.
        for part in secrets.into_iter().flatten().filter(|p| p.len() > 1) {
            out = out.replace(part, "/…");
        }
        out
    }
}

/// A URL is far shorter; more is not a webhook file.
const WEBHOOK_FILE_LIMIT: u64 = 4096;

/// Shows the redacted form, so a `{:?}` of a config can never print the token.
impl std::fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WebhookUrl({})", self.shown)
    }
}

impl std::fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Checked in the visitor, so serde_yaml places an error at the value's line and column.
impl<'de> Deserialize<'de> for WebhookUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WebhookUrl;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a webhook URL")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WebhookUrl, E> {
                WebhookUrl::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// Why a file holding a secret (a webhook's URL) is not safe to hold it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposure {
    #[error("is owned by uid {0}: only root or dtd's own user may own it")]
    Owner(u32),
    #[error("has mode {0:o}: a secret must be readable by its owner only (chmod 600)")]
    Mode(u32),
}

/// Whether a file is safe to hold a secret: owned by root or dtd's own user, and readable by
/// neither its group nor others. `None`: it is safe.
pub(super) fn exposed(meta: &std::fs::Metadata) -> Option<Exposure> {
    use std::os::unix::fs::MetadataExt;
    let own = crate::fsutil::own_uid();
    if meta.uid() != 0 && meta.uid() != own {
        return Some(Exposure::Owner(meta.uid()));
    }
    (meta.mode() & 0o077 != 0).then(|| Exposure::Mode(meta.mode() & 0o7777))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLACK: &str = "https://hooks.slack.com/services/T0001/B0002/SeCrEtToKeN";

    #[test]
    fn only_scheme_host_and_port_are_shown() {
        let url = WebhookUrl::parse(SLACK).expect("a URL");
        assert_eq!(url.redacted(), "https://hooks.slack.com/…");
        assert_eq!(format!("{url}"), "https://hooks.slack.com/…");
        assert!(!format!("{url:?}").contains("SeCrEt"));
        assert_eq!(url.target().to_string(), SLACK);
        let local = WebhookUrl::parse("http://127.0.0.1:8080/hook?token=abc").expect("a URL");
        assert_eq!(local.redacted(), "http://127.0.0.1:8080/…");
    }

    #[test]
    fn the_secret_parts_are_scrubbed_from_any_text() {
        let url = WebhookUrl::parse(SLACK).expect("a URL");
        let text =
            format!("error sending to {SLACK}: no route; path /services/T0001/B0002/SeCrEtToKeN");
        let scrubbed = url.scrub(&text);
        assert!(!scrubbed.contains("SeCrEt"), "{scrubbed}");
        assert!(scrubbed.contains("https://hooks.slack.com/…"), "{scrubbed}");
        let query = WebhookUrl::parse("http://127.0.0.1:9/?token=SeCrEt").expect("a URL");
        let scrubbed = query.scrub("rejected token=SeCrEt at /?token=SeCrEt, see /docs");
        assert!(!scrubbed.contains("SeCrEt"), "{scrubbed}");
        assert!(
            scrubbed.contains("see /docs"),
            "a bare slash is left alone: {scrubbed}"
        );
    }

    #[test]
    fn what_is_not_an_http_url_with_a_host_is_refused_without_repeating_it() {
        for bad in [
            "ftp://files.example.com/SeCrEt",
            "hooks.slack.com/services/SeCrEt",
            "https://user:SeCrEt@example.com/x",
            "https:///SeCrEt",
            "not a url SeCrEt",
        ] {
            let e = WebhookUrl::parse(bad).expect_err(bad).to_string();
            assert!(!e.contains("SeCrEt"), "{bad}: {e}");
        }
    }
}
