//! Alerts, end to end: the real `dtd` against moto posts journal events to webhook receivers on
//! 127.0.0.1 (support/webhook.rs), each webhook getting only the kinds it lists, once, in the
//! form it asked for; a webhook that is down or hangs never holds a pass back, shows in
//! `dtctl status`, and gets its alert once it is back; the URL's token is never written anywhere.

use std::time::Duration;

use crate::support::webhook::{Received, WebhookReceiver};
use crate::support::*;

/// The secret part of every webhook URL here, as in Slack's `/services/T…/B…/<token>`.
const TOKEN: &str = "SeCrEtToKeN0123";

fn hook_path(name: &str) -> String {
    format!("/services/T0001/{name}/{TOKEN}")
}

/// `alerts:` with one `{ webhook, events, format }` entry per (URL, kinds, format).
fn alerts_yaml(hooks: &[(&str, &str, &str)]) -> String {
    let entries: String = (hooks.iter())
        .map(|(url, kinds, format)| {
            format!("  - {{ webhook: '{url}', events: [{kinds}], format: {format}, allow_http: true }}\n")
        })
        .collect();
    format!("alerts:\n{entries}")
}

/// A cluster whose `dtd` posts to `hooks`, with the job acknowledging through the ack file.
fn cluster_with_alerts(hooks: &[(&str, &str, &str)]) -> Cluster {
    let mut c = Cluster::new();
    c.extra = alerts_yaml(hooks);
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    c.write_config(&config);
    c.start_dtd();
    c
}

fn wait_received(hook: &WebhookReceiver, what: &str, n: usize) -> Vec<Received> {
    wait_for(
        &format!("{n} request(s) at the {what} webhook"),
        Duration::from_secs(60),
        || hook.received(),
        |r| r.len() >= n,
    )
}

/// The token is in no file `dtd` writes and nothing `dtctl status` prints.
fn assert_token_never_shown(c: &Cluster) {
    // An alert can arrive before the pass that queued it has written its status report.
    c.wait_status("a report", |_| true);
    let log = c.dtd_log();
    assert!(!log.contains(TOKEN), "the token is in dtd's log:\n{log}");
    let status = std::fs::read_to_string(c.state_dir().join("status.json")).expect("status.json");
    assert!(
        !status.contains(TOKEN),
        "the token is in status.json: {status}"
    );
    let printed = stdout(&c.dtctl(&["status"]));
    assert!(!printed.contains(TOKEN), "{printed}");
}

/// The journal's line of `kind` about `id`.
fn journal_line(c: &Cluster, kind: &str, id: &str) -> serde_json::Value {
    c.wait_events(kind, id, 1);
    let lines = c.journal_of(id);
    let line = lines.iter().find(|e| e["kind"] == kind);
    line.cloned().expect("the journal line")
}

#[test]
fn each_webhook_gets_the_kinds_it_lists_once_in_its_format() {
    let json_hook = WebhookReceiver::start();
    let slack_hook = WebhookReceiver::start();
    let (json_url, slack_url) = (
        json_hook.url(&hook_path("JSON")),
        slack_hook.url(&hook_path("SLACK")),
    );
    let c = cluster_with_alerts(&[
        (&json_url, "joined, removal_queued", "json"),
        (&slack_url, "removal_queued", "slack"),
    ]);
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));
    let out = c.dtctl(&["remove", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.wait_tag(&id, "REMOVAL_QUEUED");

    let got = wait_received(&json_hook, "JSON", 2);
    let slack = wait_received(&slack_hook, "Slack", 1);
    // Later passes post nothing more: each event once, and no kind the webhook does not list.
    c.wait_passes(3);
    assert_eq!(json_hook.received().len(), 2, "{:#?}", json_hook.received());
    assert_eq!(
        slack_hook.received().len(),
        1,
        "{:#?}",
        slack_hook.received()
    );

    let (joined, queued) = (
        journal_line(&c, "joined", &id),
        journal_line(&c, "removal_queued", &id),
    );
    for (request, line) in got.iter().zip([&joined, &queued]) {
        assert_eq!(request.path, hook_path("JSON"), "posted to the whole URL");
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
        let body = request.json();
        assert_eq!(body["cluster"], CLUSTER);
        assert_eq!(body["kind"], line["kind"]);
        assert_eq!(body["instance"], id.as_str());
        assert_eq!(body["ip"], ip.as_str());
        assert_eq!(body["generation"], line["generation"]);
        assert_eq!(body["message"], line["message"]);
        assert_eq!(body["event"], *line, "the journal line itself");
        let time = body["time"].as_str().expect("a time");
        let at = humantime::parse_rfc3339(time).expect("RFC 3339");
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        assert_eq!(ms as u64, line["time"].as_u64().expect("ms"), "{time}");
    }

    assert_eq!(slack[0].path, hook_path("SLACK"));
    let text = format!(
        "[{CLUSTER}] removal_queued: {id} ({ip}), generation {}: {}",
        queued["generation"],
        queued["message"].as_str().expect("a message")
    );
    assert_eq!(slack[0].json(), serde_json::json!({ "text": text }));

    let status = c.status_json();
    let alerts = status["alerts"].as_array().expect("alerts in the status");
    let counts: Vec<_> = (alerts.iter())
        .map(|a| {
            (
                a["webhook"].clone(),
                a["sent"].clone(),
                a["pending"].clone(),
                a["dropped"].clone(),
            )
        })
        .collect();
    let shown = |port: u16| serde_json::json!(format!("http://127.0.0.1:{port}/…"));
    assert_eq!(
        counts,
        [
            (shown(json_hook.port()), 2.into(), 0.into(), 0.into()),
            (shown(slack_hook.port()), 1.into(), 0.into(), 0.into()),
        ]
    );
    assert_token_never_shown(&c);
}

#[test]
fn a_webhook_that_is_down_holds_no_pass_back_and_gets_its_alert_once_it_is_up() {
    // Reserved, then closed: nothing listens there until the receiver starts below.
    let port = free_port();
    let down = format!("http://127.0.0.1:{port}{}", hook_path("DOWN"));
    // Accepts connections and never answers: every attempt runs into the request timeout.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let hung_url = format!(
        "http://{}{}",
        hung.local_addr().expect("addr"),
        hook_path("HUNG")
    );
    let c = cluster_with_alerts(&[(&down, "joined", "json"), (&hung_url, "joined", "slack")]);
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));

    let failing = c.wait_status("the webhook failing", |s| {
        s["alerts"][0]["last_error"].is_string() && s["alerts"][0]["pending"] == 1
    });
    assert!(
        failing["alerts"][0]["failing_since"].is_u64(),
        "{failing:#}"
    );
    // dtd keeps passing, quickly, while one webhook refuses connections and another hangs.
    for _ in 0..3 {
        c.wait_passes(1);
        let pass_ms = c.status_json()["pass_ms"].as_u64().expect("pass_ms");
        assert!(pass_ms < 2_000, "a pass took {pass_ms} ms");
    }
    let printed = c.wait_status_text(&format!(
        "Alert:       http://127.0.0.1:{port}/… FAILING for"
    ));
    assert!(
        printed.contains("(sent 0, pending 1, dropped 0)"),
        "{printed}"
    );
    assert_eq!(c.events_of("joined", &id), 1);

    let receiver = WebhookReceiver::start_at(port);
    let got = wait_received(&receiver, "restarted", 1);
    assert_eq!(got[0].json()["kind"], "joined");
    assert_eq!(got[0].json()["instance"], id.as_str());
    let healed = c.wait_status("the failure cleared", |s| {
        s["alerts"][0]["sent"] == 1 && s["alerts"][0]["last_error"].is_null()
    });
    assert_eq!(healed["alerts"][0]["pending"], 0);
    assert!(healed["alerts"][0]["failing_since"].is_null(), "{healed:#}");
    c.wait_passes(3);
    assert_eq!(
        receiver.received().len(),
        1,
        "delivered once: {:#?}",
        receiver.received()
    );
    let printed = stdout(&c.dtctl(&["status"]));
    assert!(!printed.contains(&format!("127.0.0.1:{port}")), "{printed}");

    let log = c.dtd_log();
    assert!(log.contains(&format!("http://127.0.0.1:{port}/…")), "{log}");
    assert!(
        log.contains("alert webhook failing") && log.contains("alert webhook recovered"),
        "{log}"
    );
    assert_token_never_shown(&c);
    drop(hung);
}

/// An alert waiting when `dtd` is killed (its webhook answering 503) is saved in the state
/// directory and sent after the restart; every attempt, before and after, carries the same
/// `Idempotency-Key` (the SHA-256 of the event's journal line), so a receiver that deduplicates
/// by it takes the event exactly once.
#[test]
fn an_alert_waiting_when_dtd_is_killed_is_sent_after_the_restart_under_the_same_id() {
    let receiver = WebhookReceiver::start();
    receiver.answer(503);
    let url = receiver.url(&hook_path("RESTART"));
    let mut c = cluster_with_alerts(&[(&url, "joined", "json")]);
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    c.wait_hosts("the worker to join", |h| h.contains(&ip));
    wait_received(&receiver, "failing", 1);
    let outbox = c.state_dir().join("alerts_outbox.json");
    wait_until("the alert saved", Duration::from_secs(30), || {
        std::fs::read_to_string(&outbox).is_ok_and(|t| t.contains("\"joined\""))
    });
    let saved = std::fs::read_to_string(&outbox).expect("the outbox");
    assert!(!saved.contains(TOKEN), "the URL's token is saved: {saved}");

    c.kill_dtd();
    receiver.answer(200);
    c.start_dtd();
    let got = wait_for(
        "the alert taken after the restart",
        Duration::from_secs(60),
        || receiver.received(),
        |r| r.iter().any(|r| r.answered == 200),
    );
    // The id is the SHA-256 of the journal's line as written (what `sha256sum` prints of it).
    let journal = std::fs::read_to_string(c.state_dir().join("events.jsonl")).expect("journal");
    let joined = (journal.lines())
        .find(|l| l.contains("\"kind\":\"joined\"") && l.contains(&id))
        .expect("the joined line");
    let want = dt::digest::Sha256::of(joined.as_bytes());
    let keys: std::collections::BTreeSet<_> =
        got.iter().map(|r| r.idempotency_key.clone()).collect();
    assert_eq!(
        keys,
        [Some(want.to_string())].into(),
        "one id for every attempt: {got:#?}"
    );
    assert_eq!(
        got.last().expect("a request").json()["id"],
        want.to_string()
    );
    c.wait_status("the alert counted as sent", |s| {
        s["alerts"][0]["sent"] == 1 && s["alerts"][0]["pending"] == 0
    });
    // Struck from the file once delivered: a second restart sends nothing.
    wait_until("the outbox emptied", Duration::from_secs(30), || {
        std::fs::read_to_string(&outbox).is_ok_and(|t| !t.contains("\"joined\""))
    });
    let taken = receiver.received().len();
    c.kill_dtd();
    c.start_dtd();
    c.wait_passes(3);
    assert_eq!(
        receiver.received().len(),
        taken,
        "{:#?}",
        receiver.received()
    );
    assert_eq!(c.events_of("joined", &id), 1);
}

#[test]
fn a_webhook_that_refuses_an_event_is_not_retried_and_shows_why() {
    let hook = WebhookReceiver::start();
    hook.answer(404);
    let url = hook.url(&hook_path("GONE"));
    let c = cluster_with_alerts(&[(&url, "joined", "slack")]);
    let (_, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    let status = c.wait_status("the event dropped", |s| s["alerts"][0]["dropped"] == 1);
    assert_eq!(status["alerts"][0]["sent"], 0);
    assert_eq!(status["alerts"][0]["last_error"], "HTTP 404 Not Found: ok");
    c.wait_passes(3);
    assert_eq!(hook.received().len(), 1, "not retried");
    c.wait_status_text("FAILING for");
    assert_token_never_shown(&c);
}

/// The stack's way: the URL in a file only root reads (written from Secrets Manager on the
/// master), the config naming the file. A file others can read stops `dtd run` at its start.
#[test]
fn a_webhook_in_a_private_file_is_posted_to_and_an_open_one_stops_dtd_at_its_start() {
    use std::os::unix::fs::PermissionsExt;
    let hook = WebhookReceiver::start();
    let url = hook.url(&hook_path("FILE"));
    let mut c = Cluster::new();
    let file = c.dir.path().join("webhook");
    std::fs::write(&file, format!("{url}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.extra = format!(
        "alerts:\n  - {{ webhook_file: {}, events: [joined], allow_http: true }}\n",
        file.display()
    );
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_dtd"))
        .args(["run", "--config"])
        .arg(c.config_path())
        .envs(aws_env(&c.moto.endpoint()))
        .output()
        .expect("running dtd");
    let said = stderr(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("mode 644") && said.contains("chmod 600"),
        "{said}"
    );
    assert!(!said.contains(TOKEN), "{said}");

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.start_dtd();
    let (id, ip) = c.launch(1).remove(0);
    c.marker(&ip);
    let got = wait_received(&hook, "file's", 1);
    assert_eq!(got[0].path, hook_path("FILE"));
    let body = got[0].json();
    assert_eq!(
        (body["kind"].as_str(), body["instance"].as_str()),
        (Some("joined"), Some(id.as_str()))
    );
    assert_token_never_shown(&c);
}
