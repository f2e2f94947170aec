//! The Grafana dashboard (`grafana/dtd.json`, in the release) against the real `dtd` and a real
//! Prometheus: after a join, a removal, a Spot warning from the queue, a refused report, an
//! alert and an AWS call EC2 throttled, every query of every panel returns a series. A query
//! that names a metric `dtd` does not export, or a label it does not have, returns nothing and
//! fails here; so does a metric `dtd` exports that no panel shows, a panel that groups by a
//! label its metrics lack, a query not scoped to the dashboard's one cluster, and a panel whose
//! values are not all in its unit.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use crate::support::ec2_capacity::Ec2CapacityStandIn;
use crate::support::prometheus::{get, percent_encode, Prometheus};
use crate::support::webhook::WebhookReceiver;
use crate::support::*;

/// Every `expr` of every panel, with the panel's title.
fn queries() -> Vec<(String, String)> {
    let dash = dashboard();
    let panels = dash["panels"].as_array().expect("panels");
    let mut found = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("a panel title").to_string();
        for t in p["targets"].as_array().expect("targets") {
            found.push((
                title.clone(),
                t["expr"].as_str().expect("an expr").to_string(),
            ));
        }
    }
    found
}

/// Grafana's variables, as it fills them in for a short range and the tests' cluster.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
        .replace("$__range", "5m")
        .replace("$cluster", CLUSTER)
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(repo().join("grafana/dtd.json")).expect("grafana/dtd.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Each `dt_` metric an expression selects, with its selector's matchers (`{...}`, or empty).
fn selectors(expr: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("dt_") {
        let from = &rest[at..];
        let end = from
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(from.len());
        let name = from[..end].to_string();
        let after = &from[end..];
        let matchers = match after.strip_prefix('{') {
            Some(m) => m[..m.find('}').unwrap_or(m.len())].to_string(),
            None => String::new(),
        };
        found.push((name, matchers));
        rest = after;
    }
    found
}

/// The labels of each `by (...)` of an expression.
fn grouped_by(expr: &str) -> Vec<String> {
    expr.split("by (")
        .skip(1)
        .flat_map(|s| s[..s.find(')').unwrap_or(0)].split(','))
        .map(|l| l.trim().to_string())
        .collect()
}

/// Whether a query's values are seconds (a duration, not GPU-hours or a count).
fn in_seconds(expr: &str) -> bool {
    // Seconds over seconds is a share: no unit of time left (a histogram's `_count` is no time).
    let share = (expr.split(" / ").skip(1))
        .any(|d| d.contains("_seconds") && !d.contains("_seconds_count"));
    (expr.contains("_seconds") || expr.contains("time()")) && !expr.contains("/ 3600") && !share
}

#[test]
fn each_panel_shows_one_cluster_in_one_unit_and_refusals_are_what_workers_wrote() {
    let dash = dashboard();
    let vars = dash["templating"]["list"].as_array().expect("templating");
    let cluster = vars
        .iter()
        .find(|v| v["name"] == "cluster")
        .expect("a cluster variable");
    assert_eq!(cluster["multi"], false, "one cluster at a time");
    let mut wrong = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        let title = p["title"].as_str().unwrap_or_default();
        let unit_of = |ref_id: &serde_json::Value| {
            let overrides = p["fieldConfig"]["overrides"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let by_ref = overrides
                .iter()
                .find(|o| o["matcher"]["options"] == *ref_id);
            let own = by_ref.and_then(|o| o["properties"][0]["value"].as_str().map(str::to_string));
            own.or(p["fieldConfig"]["defaults"]["unit"]
                .as_str()
                .map(str::to_string))
        };
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().unwrap_or_default();
            let metrics = selectors(expr);
            if let Some((name, _)) = metrics
                .iter()
                .find(|(_, m)| !m.contains("cluster=\"$cluster\""))
            {
                wrong.push(format!("{title}: {name} is not scoped to $cluster: {expr}"));
            }
            if expr.starts_with("up{") && !expr.contains("cluster=\"$cluster\"") {
                wrong.push(format!("{title}: not scoped to $cluster: {expr}"));
            }
            let unit = unit_of(&t["refId"]);
            if in_seconds(expr) != (unit.as_deref() == Some("s")) {
                wrong.push(format!("{title}: unit {unit:?} for {expr}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    let refusals = (dash["panels"].as_array().unwrap().iter())
        .find(|p| p["title"] == "Refusals")
        .expect("the refusals panel");
    let expr = refusals["targets"][0]["expr"].as_str().unwrap();
    let kinds = expr
        .split("kind=~\"")
        .nth(1)
        .and_then(|k| k.split('"').next())
        .unwrap();
    for kind in kinds.split('|') {
        let parsed: dt::model::EventKind = serde_json::from_value(serde_json::json!(kind)).unwrap();
        assert!(
            parsed.is_refusal(),
            "{kind} is not something a worker wrote"
        );
    }
    for own in ["notify_refused", "removal_refused"] {
        assert!(!kinds.split('|').any(|k| k == own), "{own} is dtd's own");
    }
}

/// The series of an instant query (an empty list when it matched nothing), or why not.
fn series(prom: &Prometheus, query: &str) -> Result<usize, String> {
    let encoded = percent_encode(query);
    let (code, body) = get(prom.addr, &format!("/api/v1/query?query={encoded}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("HTTP {code}: {body}"));
    }
    Ok(v["data"]["result"].as_array().map_or(0, Vec::len))
}

/// The label names of each metric family in an exposition (the `le` of a histogram's buckets
/// too), by the name queries use for its samples.
fn labels_of(body: &str) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut found: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for line in body.lines().filter(|l| l.starts_with("dt_")) {
        let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
        let labels = found.entry(name.to_string()).or_default();
        if let Some(inner) = line.split_once('{').and_then(|(_, r)| r.split_once('}')) {
            labels.extend(
                inner
                    .0
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, _)| k.to_string()),
            );
        }
    }
    found
}

/// Names of the metric families in an exposition, as queries name them.
fn exported(body: &str) -> BTreeSet<String> {
    let families = body.lines().filter_map(|l| l.strip_prefix("# TYPE "));
    families
        .map(|f| {
            let mut w = f.split_whitespace();
            let (name, kind) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
            match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            }
        })
        .collect()
}

#[test]
fn every_panel_of_the_dashboard_shows_what_dtd_exports() {
    let mut c = Cluster::new();
    let stand_in = Ec2CapacityStandIn::start(c.moto.port);
    c.ec2_endpoint = Some(stand_in.endpoint());
    let queue = create_event_queue(&c);
    let hook = WebhookReceiver::start();
    let workers = c.launch(3);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    c.extra = format!(
        "metrics: {{ listen: '{addr}' }}\nevents: {{ queue_url: '{queue}' }}\nresync: 2s\n\
         alerts:\n  - {{ webhook: '{}', events: [joined, interrupted], allow_http: true }}\n",
        hook.url("/dtd")
    );
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    c.write_config(&config);
    c.start_dtd();
    c.wait_hosts("three workers", |h| h.len() == 3);
    let prom = Prometheus::scraping(addr);

    // The story the panels show: acknowledged joins, a removal the job acknowledges, a Spot
    // warning from the queue, a report that is not the worker's agent's, throttled EC2 calls.
    c.dtctl(&["ack", c.written_generation().trim()]);
    let (gone, gone_ip) = &workers[0];
    c.delete_elastic_tag(gone);
    c.wait_hosts("the removed worker to leave", |h| {
        !h.iter().any(|l| l.contains(gone_ip.as_str()))
    });
    c.dtctl(&["ack", c.written_generation().trim()]);
    let (spot, spot_ip) = &workers[1];
    let warning = serde_json::json!({"instance-id": spot, "instance-action": "terminate"});
    put_ec2_event(&c, "EC2 Spot Instance Interruption Warning", warning);
    c.wait_hosts("the interrupted worker to leave", |h| {
        !h.iter().any(|l| l.contains(spot_ip.as_str()))
    });
    // User code on some worker claims a member's instance with a document EC2 did not sign.
    let (forged_about, forged_ip) = &workers[2];
    let mut attacker = crate::support::attacker::Attacker::connect(&c, "127.0.0.2").unwrap();
    attacker.claim_with_forged_document(forged_ip, forged_about);
    c.wait_events("marker_refused", forged_about, 1);
    stand_in.throttle("DescribeInstances", 2);
    wait_until("an alert to be sent", Duration::from_secs(60), || {
        !hook.received().is_empty()
    });

    let (_, body) = get(addr, "/metrics").expect("a scrape");
    let (families, labels) = (exported(&body), labels_of(&body));
    let mut shown = BTreeSet::new();
    let mut empty = Vec::new();
    for (title, expr) in queries() {
        let query = as_grafana_sends(&expr);
        let result = wait_for(
            &format!("panel {title:?} to show {query}"),
            Duration::from_secs(90),
            || series(&prom, &query),
            |r| matches!(r, Ok(n) if *n > 0),
        );
        if !matches!(result, Ok(n) if n > 0) {
            empty.push(format!("{title}: {query}: {result:?}"));
        }
        for name in &families {
            if expr.contains(name.trim_end_matches("_total")) {
                shown.insert(name.clone());
            }
        }
        // A `by` label the selected metrics lack would group everything into one series.
        let have: BTreeSet<String> = (selectors(&expr).iter())
            .flat_map(|(name, _)| labels.get(name).cloned().unwrap_or_default())
            .collect();
        for label in grouped_by(&expr) {
            if !have.contains(&label) {
                empty.push(format!(
                    "{title}: groups by `{label}`, which its metrics lack: {expr}"
                ));
            }
        }
    }
    assert!(
        empty.is_empty(),
        "panels that show nothing:\n{}",
        empty.join("\n")
    );
    let unshown: Vec<String> = families.difference(&shown).cloned().collect();
    assert!(
        unshown.is_empty(),
        "metrics dtd exports that no panel shows: {unshown:?}"
    );
    let throttled =
        "sum(dt_aws_throttled_attempts_total{service=\"EC2\",operation=\"DescribeInstances\"})";
    prom.wait(throttled, |v| v >= 1.0);
}
