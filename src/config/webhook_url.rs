//! A webhook's URL, which is a secret: Slack's incoming webhooks (and most others) put their token
//! in the path (`/services/T…/B…/XXXX`) or the query. Everything that shows a webhook (logs,
//! status, errors) shows only `scheme://host[:port]/…`; the full URL leaves this type only as the
//! request's target.

use hyper::Uri;
use serde::{Deserialize, Deserializer};

#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    uri: Uri,
    shown: String,
}

impl WebhookUrl {
    /// An absolute http or https URL with a host. The error never repeats the URL.
    pub fn parse(text: &str) -> Result<WebhookUrl, String> {
        let uri: Uri = text
            .parse()
            .map_err(|_| "webhook is not a URL (write e.g. https://hooks.slack.com/services/…)")?;
        let scheme = uri.scheme_str().unwrap_or("");
        if scheme != "http" && scheme != "https" {
            return Err("webhook must be an http:// or https:// URL".into());
        }
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        // Credentials in the URL would be sent nowhere (hyper does not turn them into a header)
        // and would be one more secret to keep out of messages.
        if authority.contains('@') {
            return Err("webhook must not carry user:password@; put the token where the service says (usually the path)".into());
        }
        let host = uri.host().unwrap_or("");
        if host.is_empty() {
            return Err("webhook URL has no host".into());
        }
        let port = uri.port_u16().map_or(String::new(), |p| format!(":{p}"));
        let shown = format!("{scheme}://{host}{port}/…");
        Ok(WebhookUrl { uri, shown })
    }

    /// An `https://` URL, or `http://` when `allow_http`: a token sent in the clear is one anyone
    /// on the path can read and replay.
    pub fn require_https(&self, allow_http: bool) -> Result<(), String> {
        match self.uri.scheme_str() {
            Some("http") if !allow_http => Err(format!(
                "webhook {} is http://: its token would cross the network in the clear; use \
                 https://, or set allow_http: true for a webhook on a network of your own",
                self.shown
            )),
            _ => Ok(()),
        }
    }

    /// The URL in a file (`alerts[].webhook_file`): owned by root or dtd's own user, readable by
    /// no one else, one line. The error never repeats the file's content.
    pub fn read_file(path: &std::path::Path, allow_http: bool) -> Result<WebhookUrl, String> {
        let at = path.display();
        let (file, meta) = match crate::untrusted::open(path) {
            Ok(Some(opened)) => opened,
            Ok(None) => return Err(format!("webhook_file {at} does not exist")),
            Err(e) => return Err(format!("webhook_file {at}: {e}")),
        };
        if let Some(why) = exposed(&meta) {
            return Err(format!("webhook_file {at} {why}"));
        }
        let bytes = crate::untrusted::read_opened(file, &meta, WEBHOOK_FILE_LIMIT)
            .map_err(|e| format!("webhook_file {at}: {e}"))?;
        let text =
            std::str::from_utf8(&bytes).map_err(|_| format!("webhook_file {at} is not text"))?;
        let url = WebhookUrl::parse(text.trim()).map_err(|e| format!("webhook_file {at}: {e}"))?;
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

/// Why a file holding a secret (a webhook's URL) is not safe to hold it: owned by someone other
/// than root or dtd's own user, or readable by its group or others. `None`: it is safe.
pub(super) fn exposed(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let own = crate::fsutil::own_uid();
    if meta.uid() != 0 && meta.uid() != own {
        return Some(format!(
            "is owned by uid {}: only root or dtd's own user may own it",
            meta.uid()
        ));
    }
    (meta.mode() & 0o077 != 0).then(|| {
        format!(
            "has mode {:o}: a secret must be readable by its owner only (chmod 600)",
            meta.mode() & 0o7777
        )
    })
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
            let e = WebhookUrl::parse(bad).expect_err(bad);
            assert!(!e.contains("SeCrEt"), "{bad}: {e}");
        }
    }
}
