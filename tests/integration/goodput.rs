//! The goodput ledger, end to end: the real `dtd` against moto, two workers launched from the
//! template, one prepared, joined, acknowledged and trained through a `kill -9` of `dtd` and
//! eight seconds without it, then removed and terminated; the other still preparing. The ledger
//! (`dtctl goodput`) holds every second of both from their launch, the dead `dtd`'s seconds
//! too, and each in the bucket of what the worker was doing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::*;

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn ack(c: &Cluster) {
    let out = c.dtctl(&["ack", c.written_generation().trim()]);
    assert!(out.status.success(), "dtctl ack: {}", stderr(&out));
}

/// Each instance's launch time as EC2 gives it, in seconds.
fn launched_at(c: &Cluster, id: &str) -> f64 {
    let text = c.aws(&[
        "ec2",
        "describe-instances",
        "--instance-ids",
        id,
        "--query",
        "Reservations[0].Instances[0].LaunchTime",
        "--output",
        "text",
    ]);
    let t = humantime::parse_rfc3339_weak(text.trim_end_matches("+00:00"))
        .unwrap_or_else(|e| panic!("LaunchTime {text}: {e}"));
    t.duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// A bucket's node-seconds in `dtctl goodput -o json`.
pub(crate) fn bucket(g: &Value, name: &str) -> f64 {
    let b = g["buckets"].as_array().expect("buckets");
    let line = b.iter().find(|l| l["bucket"] == name);
    line.and_then(|l| l["node_seconds"].as_f64())
        .unwrap_or_else(|| panic!("bucket {name} in {g}"))
}

/// Every bucket, in `dtctl goodput`'s order: they sum to `paid`.
pub(crate) const BUCKETS: [&str; 7] = [
    "training",
    "preparing",
    "waiting_to_join",
    "paused",
    "redone",
    "leaving",
    "idle",
];

#[test]
fn every_second_of_every_worker_is_in_one_bucket_across_a_kill_9() {
    let mut c = Cluster::new();
    // The workers are p3.2xlarge (support's launch): priced at its on-demand 3.06 dollars an hour.
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    let priced = config.replacen(
        "  min: 0\n",
        "  min: 0\n  prices: { p3.2xlarge: 3.06 }\n",
        1,
    );
    assert_ne!(priced, config, "the workers section has min: 0");
    c.write_config(&priced);
    c.start_dtd();
    let workers = c.launch(2);
    let (a, a_ip) = &workers[0];
    let b = &workers[1].0;
    std::thread::sleep(Duration::from_secs(2));
    c.marker(a_ip);
    c.wait_hosts("a to join", |h| h.contains(a_ip));
    ack(&c);
    c.wait_tag(a, "ADDED");
    std::thread::sleep(Duration::from_secs(3));

    // dtd is killed; nobody accounts for eight seconds.
    c.kill_dtd();
    std::thread::sleep(Duration::from_secs(8));
    c.start_dtd();
    c.wait_passes(2);

    c.delete_elastic_tag(a);
    c.wait_hosts("a to leave", |h| !h.contains(a_ip));
    std::thread::sleep(Duration::from_secs(2));
    ack(&c);
    // The journal line, not EC2's state: moto shows the state before dtd has journaled it.
    let terminated = || {
        (c.journal_of(a).iter())
            .find(|e| e["kind"] == "terminated")
            .and_then(|e| e["time"].as_u64())
    };
    wait_until("a's terminated line", Duration::from_secs(30), || {
        terminated().is_some()
    });
    let gone = terminated().unwrap_or_default() as f64 / 1000.0;
    c.wait_passes(2);
    c.stop_dtd();
    let stopped = now_s();

    let out = c.dtctl(&["goodput", "-o", "json"]);
    assert!(out.status.success(), "dtctl goodput: {}", stderr(&out));
    let g: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let sum: f64 = BUCKETS.iter().map(|n| bucket(&g, n)).sum();
    let paid = g["paid"]["node_seconds"].as_f64().expect("paid");
    assert!((sum - paid).abs() < 0.002, "{sum} against {paid}");
    // Paid: a from its launch to its termination, b from its launch to dtd's stop (each to a
    // pass, which comes at least every second). The eight seconds without dtd are in it.
    let expected = (gone - launched_at(&c, a)) + (stopped - launched_at(&c, b));
    assert!(
        (paid - expected).abs() < 4.0,
        "paid {paid:.1} s, expected {expected:.1} s: {g}"
    );
    assert!(
        bucket(&g, "training") >= 3.0 + 8.0,
        "trained through the kill: {g}"
    );
    assert!(
        bucket(&g, "preparing") >= 2.0 * 2.0,
        "both booted first: {g}"
    );
    assert!(
        bucket(&g, "leaving") >= 2.0,
        "a, out of the job, not yet gone: {g}"
    );
    assert_eq!(bucket(&g, "idle"), 0.0, "{g}");
    let master = g["master_node_seconds"]
        .as_f64()
        .expect("the master's time");
    assert!(
        master >= 3.0 + 8.0,
        "the master ran while dtd was down: {g}"
    );
    // What each change cost: a's join, then its leave, charged its time out of the job; every
    // leaving and paused second is some change's.
    let changes = g["changes"].as_array().expect("changes");
    let what = |c: &Value| c["what"].as_str().unwrap_or_default().to_string();
    let joined = format!("{a_ip} joined");
    let left = format!("{a_ip} left (");
    assert!(changes.iter().any(|c| what(c) == joined), "{g}");
    let leave = (changes.iter())
        .find(|c| what(c).starts_with(&left))
        .unwrap_or_else(|| panic!("a's leave: {g}"));
    let leaving = leave["leaving_node_seconds"].as_f64().expect("leaving");
    assert!(leaving >= 2.0, "{leave}");
    for (part, name) in [
        ("leaving_node_seconds", "leaving"),
        ("paused_node_seconds", "paused"),
    ] {
        let charged: f64 = changes.iter().filter_map(|c| c[part].as_f64()).sum();
        assert!((charged - bucket(&g, name)).abs() < 0.002, "{name}: {g}");
    }
    let usd = g["paid"]["usd"]
        .as_f64()
        .expect("dollars, with workers.prices");
    let at_price = paid * 3.06 / 3600.0;
    assert!(
        (usd - at_price).abs() < 1e-4,
        "{usd} dollars against {at_price}: {g}"
    );
    // --since: from the hourly mark at or before then; the only one is the first pass's.
    let out = c.dtctl(&["goodput", "--since", "1s", "-o", "json"]);
    assert!(
        out.status.success(),
        "dtctl goodput --since: {}",
        stderr(&out)
    );
    let w: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let w_paid = w["paid"]["node_seconds"].as_f64().expect("paid");
    assert!(w["since"] == g["since"] || w_paid < paid, "{w}");
    assert!(
        w_paid > paid - 10.0,
        "the first pass is within seconds of the start: {w}"
    );
    let out = c.dtctl(&["goodput", "--since", "1h"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("the oldest is at"),
        "{}",
        stderr(&out)
    );
    let text = stdout(&c.dtctl(&["goodput"]));
    assert!(text.contains("Trained / paid: "), "{text}");
    assert!(text.contains("What each change cost"), "{text}");
    assert!(text.lines().any(|l| l.ends_with(&joined)), "{text}");
    // a's story names what its join and its leave cost the job.
    let out = c.dtctl(&["explain", a_ip]);
    let story = stdout(&out);
    assert!(out.status.success(), "dtctl explain: {}", stderr(&out));
    let cost = (story.lines())
        .skip_while(|l| !l.starts_with("  cost to the job"))
        .collect::<Vec<_>>();
    assert_eq!(cost.len(), 3, "its join and its leave: {story}");
    assert!(cost[1].ends_with(&format!("({joined})")), "{story}");
    assert!(cost[2].contains(&format!("({left}")), "{story}");
    assert!(
        text.lines().nth(1).is_some_and(|l| l.ends_with("dollars")),
        "{text}"
    );
}

/// `workers.spot_price_history`: a Spot worker whose type has no price in `workers.prices` is
/// priced at the Spot price history's price for its type and zone (moto's is 0.00001 dollars an
/// hour, too small for the ledger's micro-dollars, so the price is read where the metrics show
/// it), read once, not at every pass; an on-demand worker asks for nothing.
#[test]
fn a_spot_worker_is_priced_from_the_spot_price_history_read_once() {
    let mut c = Cluster::new();
    let metrics = format!("127.0.0.1:{}", free_port());
    c.worker_extra = "  spot_price_history: true\n".into();
    c.extra = format!("metrics: {{ listen: '{metrics}' }}\n");
    c.write_config(&c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }"));
    c.start_dtd();
    let scrape = || {
        let got = prometheus::get(metrics.parse().expect("an address"), "/metrics");
        got.map(|(_, body)| body).unwrap_or_default()
    };
    let line = |body: &str, name: &str| -> Option<String> {
        body.lines()
            .find(|l| l.starts_with(name))
            .map(str::to_string)
    };
    let calls = |body: &str| -> Option<String> {
        (body.lines())
            .find(|l| {
                l.starts_with("dt_aws_calls_total{") && l.contains("\"DescribeSpotPriceHistory\"")
            })
            .map(str::to_string)
    };
    c.launch(1);
    c.wait_passes(3);
    assert_eq!(calls(&scrape()), None, "no Spot worker, no call");

    // A g5.xlarge: moto's price history has no p3.2xlarge (the template's type) in this region.
    let template = format!("LaunchTemplateId={},Version=$Latest", c.template_id);
    let zone = c.aws(&[
        "ec2",
        "run-instances",
        "--launch-template",
        &template,
        "--instance-type",
        "g5.xlarge",
        "--subnet-id",
        &c.subnet,
        "--instance-market-options",
        "MarketType=spot",
        "--query",
        "Instances[0].Placement.AvailabilityZone",
        "--output",
        "text",
    ]);
    // Every zone's price of the Spot workers' types: a replacement may launch in another.
    let ours =
        format!("dt_spot_price_dollars_per_hour{{instance_type=\"g5.xlarge\",zone=\"{zone}\"}}");
    let price = wait_for(
        "the Spot price of the worker's type in its zone",
        Duration::from_secs(30),
        || line(&scrape(), &ours),
        Option::is_some,
    );
    let price = price.unwrap_or_default();
    assert!(
        price.ends_with(" 0.00001") || price.ends_with(" 1e-5"),
        "{price}"
    );
    c.wait_passes(5);
    let body = scrape();
    let once = calls(&body).unwrap_or_default();
    assert!(once.ends_with(" 1"), "one read for the hour: {once}");
}
