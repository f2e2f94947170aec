//! What is posted for a journal event: pure functions of the cluster's name and the event.

use serde_json::json;

use crate::config::AlertFormat;
use crate::model::Event;

pub fn render(format: AlertFormat, cluster: &str, e: &Event) -> String {
    match format {
        AlertFormat::Json => json_body(cluster, e),
        AlertFormat::Slack => slack_body(cluster, e),
    }
}

/// `{cluster, kind, time (RFC 3339), instance, ip, generation, message, event}`: the fields a
/// receiver filters on at the top, `null` when the event is not about one instance or
/// generation, and the journal line itself under `event` (it may carry more, e.g. `az`).
pub fn json_body(cluster: &str, e: &Event) -> String {
    let line = serde_json::to_value(e).unwrap_or(serde_json::Value::Null);
    json!({
        "id": e.id(),
        "cluster": cluster,
        "kind": e.kind.as_str(),
        "time": rfc3339(e.time),
        "instance": e.instance,
        "ip": e.ip,
        "generation": e.generation,
        "message": e.message,
        "event": line,
    })
    .to_string()
}

/// A Slack incoming webhook's simplest message, `{"text": "..."}`, one line:
/// `[cluster] kind: instance (ip), generation N: message`. Slack's "Sending messages using
/// incoming webhooks" (https://api.slack.com/messaging/webhooks) defines the payload; its
/// "Formatting text" page (https://api.slack.com/reference/surfaces/formatting#escaping) asks
/// for `&`, `<` and `>` to be escaped, as those start links and mentions. The AWS Node
/// Termination Handler's default template is the same idea: `{"text":"[NTH][Instance
/// Interruption] EventID: … - Kind: … - Instance: …"}`.
pub fn slack_body(cluster: &str, e: &Event) -> String {
    json!({ "text": slack_escape(&summary(cluster, e)) }).to_string()
}

fn summary(cluster: &str, e: &Event) -> String {
    let mut about = Vec::new();
    match (&e.instance, e.ip) {
        (Some(id), Some(ip)) => about.push(format!("{id} ({ip})")),
        (Some(id), None) => about.push(id.clone()),
        (None, Some(ip)) => about.push(ip.to_string()),
        (None, None) => {}
    }
    if let Some(g) = e.generation {
        about.push(format!("generation {g}"));
    }
    // One line: a message never has a newline today, but a chat line with one would break up.
    let message = e.message.replace(['\r', '\n'], " ");
    match about.is_empty() {
        true => format!("[{cluster}] {}: {message}", e.kind),
        false => format!("[{cluster}] {}: {}: {message}", e.kind, about.join(", ")),
    }
}

fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The journal's milliseconds as RFC 3339 in UTC, e.g. `2026-11-22T10:00:00.123Z`.
fn rfc3339(ms: u64) -> String {
    crate::time::rfc3339_millis(ms).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;

    /// 2026-11-22T10:00:00.250Z
    const AT: u64 = 1_795_341_600_250;

    fn joined() -> Event {
        Event {
            instance: Some("i-0abc".into()),
            ip: Some("10.0.1.6".parse().expect("an IP")),
            generation: Some(3),
            ..Event::new(
                AT,
                EventKind::Joined,
                "10.0.1.6 is ready (prepare-data marker) and joins the job".into(),
            )
        }
    }

    #[test]
    fn the_json_body_has_the_fields_at_the_top_and_the_journal_line() {
        let body: serde_json::Value =
            serde_json::from_str(&json_body("demo", &joined())).expect("JSON");
        assert_eq!(
            body,
            json!({
                "id": joined().id(),
                "cluster": "demo",
                "kind": "joined",
                "time": "2026-11-22T10:00:00.250Z",
                "instance": "i-0abc",
                "ip": "10.0.1.6",
                "generation": 3,
                "message": "10.0.1.6 is ready (prepare-data marker) and joins the job",
                "event": {
                    "time": AT,
                    "kind": "joined",
                    "instance": "i-0abc",
                    "ip": "10.0.1.6",
                    "generation": 3,
                    "message": "10.0.1.6 is ready (prepare-data marker) and joins the job",
                },
            })
        );
    }

    #[test]
    fn a_cluster_event_has_nulls_where_it_is_about_no_instance() {
        let e = Event::new(
            AT,
            EventKind::SourceFailed,
            "EC2 instances could not be read".into(),
        );
        let body: serde_json::Value = serde_json::from_str(&json_body("demo", &e)).expect("JSON");
        assert_eq!(body["kind"], "source_failed");
        assert!(body["instance"].is_null() && body["ip"].is_null() && body["generation"].is_null());
        assert_eq!(
            slack_body("demo", &e),
            r#"{"text":"[demo] source_failed: EC2 instances could not be read"}"#
        );
    }

    #[test]
    fn the_slack_body_is_one_escaped_line() {
        let body: serde_json::Value =
            serde_json::from_str(&slack_body("demo", &joined())).expect("JSON");
        assert_eq!(
            body,
            json!({"text": "[demo] joined: i-0abc (10.0.1.6), generation 3: 10.0.1.6 is ready (prepare-data marker) and joins the job"})
        );
        let e = Event {
            ip: Some("10.0.1.7".parse().expect("an IP")),
            ..Event::new(
                AT,
                EventKind::Interrupted,
                "Spot <interruption> & co\nsecond line".into(),
            )
        };
        let body: serde_json::Value = serde_json::from_str(&slack_body("demo", &e)).expect("JSON");
        assert_eq!(
            body["text"],
            "[demo] interrupted: 10.0.1.7: Spot &lt;interruption&gt; &amp; co second line"
        );
    }

    #[test]
    fn a_kind_from_a_newer_dtd_is_posted_as_written() {
        let e = Event::new(AT, EventKind::Other("replacing_stopped".into()), "x".into());
        assert!(render(AlertFormat::Json, "c", &e).contains(r#""kind":"replacing_stopped""#));
        assert!(render(AlertFormat::Slack, "c", &e).contains("[c] replacing_stopped: x"));
    }
}
