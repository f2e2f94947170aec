//! `alerts`: webhooks, their kinds and formats, and a webhook URL kept secret.

use super::*;

/// GOOD with an `alerts` section whose entries are `entries` (YAML list items, block style).
fn with_alerts(entries: &str) -> String {
    format!("{GOOD}alerts:\n{entries}")
}

#[test]
fn alerts_take_webhooks_kinds_and_a_format() {
    let cfg = Config::parse(GOOD).unwrap();
    assert!(cfg.alerts.is_empty(), "no alerts unless configured");
    let cfg = Config::parse(&with_alerts(
        "  - webhook: https://hooks.slack.com/services/T0/B0/SeCrEt\n    events: [interrupted, ack_timeout]\n    format: slack\n  - { webhook: 'http://127.0.0.1:9000/hook', events: [joined], allow_http: true }\n",
    ))
    .unwrap();
    let [slack, json] = &cfg.alerts[..] else {
        panic!("{:?}", cfg.alerts);
    };
    assert_eq!(slack.format, AlertFormat::Slack);
    assert_eq!(
        slack.events,
        [EventKind::Interrupted, EventKind::AckTimeout]
    );
    let Webhook::Url(url) = &slack.webhook else {
        panic!("{:?}", slack.webhook);
    };
    assert_eq!(url.redacted(), "https://hooks.slack.com/…");
    assert_eq!(json.format, AlertFormat::Json, "json by default");
    assert_eq!(json.events, [EventKind::Joined]);
    assert!(
        !format!("{cfg:?}").contains("SeCrEt"),
        "a config's Debug hides the token"
    );
}

#[test]
fn a_bad_alert_is_named_with_its_line_and_never_shows_the_url() {
    let e = error_of(&with_alerts(
        "  - webhook: ftp://example.com/SeCrEt\n    events: [joined]\n",
    ));
    assert!(
        e.contains("alerts[0].webhook")
            && e.contains("http:// or https://")
            && e.contains("line 13"),
        "{e}"
    );
    assert!(!e.contains("SeCrEt"), "{e}");
    let e = error_of(&with_alerts(
        "  - webhook: https:///SeCrEt\n    events: [joined]\n",
    ));
    assert!(e.contains("no host") || e.contains("not a URL"), "{e}");
    assert!(!e.contains("SeCrEt"), "{e}");
    let e = error_of(&with_alerts(
        "  - webhook: https://example.com/x\n    events: []\n",
    ));
    assert!(
        e.contains("alerts[0].events") && e.contains("at least one") && e.contains("line 14"),
        "{e}"
    );
    let e = error_of(&with_alerts(
        "  - webhook: https://example.com/x\n  - webhook: https://example.com/y\n    events: [joined, interupted]\n",
    ));
    assert!(
        e.contains("alerts[0]") && e.contains("events"),
        "missing events: {e}"
    );
    let e = error_of(&with_alerts(
        "  - webhook: https://example.com/x\n    events: [joined, interupted]\n",
    ));
    assert!(
        e.contains("alerts[0].events[1]")
            && e.contains("unknown event kind `interupted`")
            && e.contains("line 14"),
        "{e}"
    );
    let e = error_of(&with_alerts(
        "  - webhook: https://example.com/x\n    events: [joined]\n    format: teams\n",
    ));
    assert!(
        e.contains("format") && e.contains("teams") && e.contains("line 15"),
        "{e}"
    );
    let e = error_of(&with_alerts(
        "  - webhook: https://example.com/x\n    events: [joined]\n    channel: ops\n",
    ));
    assert!(e.contains("channel") && e.contains("line 15"), "{e}");
}

#[test]
fn every_journaled_kind_can_be_alerted_on() {
    for kind in [
        "joined",
        "removal_queued",
        "interrupted",
        "ack_timeout",
        "source_failed",
        "terminated",
        "stalled",
        "stall_cleared",
    ] {
        let cfg = Config::parse(&with_alerts(&format!(
            "  - {{ webhook: 'https://example.com/x', events: [{kind}] }}\n"
        )))
        .unwrap();
        assert_eq!(cfg.alerts[0].events[0].as_str(), kind);
    }
}

#[test]
fn a_webhook_is_https_unless_http_is_allowed_and_may_come_from_a_file() {
    let e = error_of(&with_alerts(
        "  - { webhook: 'http://ops.example.com/SeCrEt', events: [joined] }\n",
    ));
    assert!(
        e.contains("http://ops.example.com/…") && e.contains("allow_http"),
        "{e}"
    );
    assert!(!e.contains("SeCrEt"), "{e}");
    let cfg = Config::parse(&with_alerts(
        "  - { webhook_file: /etc/dt/webhook, events: [joined] }\n",
    ))
    .unwrap();
    assert_eq!(
        cfg.alerts[0].webhook,
        Webhook::File("/etc/dt/webhook".into())
    );
    for (bad, says) in [
        (
            "{ webhook_file: etc/webhook, events: [joined] }",
            "absolute path",
        ),
        ("{ events: [joined] }", "needs webhook or webhook_file"),
        (
            "{ webhook: 'https://a.example/x', webhook_file: /w, events: [joined] }",
            "not both",
        ),
    ] {
        let e = error_of(&with_alerts(&format!("  - {bad}\n")));
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn a_webhook_file_is_read_only_when_private_to_its_owner() {
    use crate::config::WebhookUrl;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("webhook");
    std::fs::write(&path, "https://hooks.example.com/services/SeCrEt\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = WebhookUrl::read_file(&path, false).unwrap_err().to_string();
    assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = WebhookUrl::read_file(&path, false).unwrap();
    assert_eq!(url.redacted(), "https://hooks.example.com/…");
    std::fs::write(&path, "http://10.0.0.1/SeCrEt\n").unwrap();
    let e = WebhookUrl::read_file(&path, false).unwrap_err().to_string();
    assert!(e.contains("allow_http") && !e.contains("SeCrEt"), "{e}");
    assert!(WebhookUrl::read_file(&path, true).is_ok());
    std::fs::write(&path, "not a url SeCrEt").unwrap();
    let e = WebhookUrl::read_file(&path, false).unwrap_err().to_string();
    assert!(!e.contains("SeCrEt"), "{e}");
    let e = WebhookUrl::read_file(&dir.path().join("none"), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not exist"), "{e}");
}
