//! Alerts: journal events of the kinds a webhook lists, posted to it. The webhook URL is a secret
//! that everything else shows redacted.

mod url;

pub use url::WebhookUrl;
