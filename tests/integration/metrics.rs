//! `/metrics` scraped by a real Prometheus and read back through its HTTP API after a join and a
//! removal against the emulator; `promtool` checks the exposition; `/healthz` turns 503 while
//! the emulator is away and 200 when it is back.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::prometheus::{get, Prometheus};
use crate::support::*;

/// dtd with `metrics.listen` on a free loopback port, and `count` workers prepared.
fn cluster(count: i32, extra: &str) -> (Cluster, Vec<(String, String)>, SocketAddr) {
    let mut c = Cluster::new();
    let workers = c.launch(count);
    for (_, ip) in &workers {
        c.marker(ip);
    }
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    c.extra = format!("metrics: {{ listen: '{addr}' }}\n{extra}");
    let config = c.config(0, 8, &[], "  notify: none\n  ack: { timeout: 10m }");
    // The workers are p3.2xlarge (support's launch), at its on-demand price.
    let config = config.replacen(
        "  min: 0\n",
        "  min: 0\n  prices: { p3.2xlarge: 3.06 }\n",
        1,
    );
    c.write_config(&config);
    c.start_dtd();
    (c, workers, addr)
}

fn generation(c: &Cluster) -> String {
    c.written_generation()
}

fn ack(c: &Cluster) {
    let out = c.dtctl(&["ack", generation(c).trim()]);
    assert!(out.status.success(), "dtctl ack: {}", stderr(&out));
}

#[test]
fn prometheus_scrapes_a_join_and_a_removal() {
    let (c, workers, addr) = cluster(2, "");
    c.wait_hosts("both workers", |h| h.len() == 2);
    let prom = Prometheus::scraping(addr);
    prom.wait("up{job=\"dtd\"}", |v| v == 1.0);
    prom.wait("dt_marker_to_host_file_seconds_count", |v| v == 2.0);
    prom.wait("dt_workers{status=\"ADD_QUEUED\"}", |v| v == 2.0);
    ack(&c);
    prom.wait("dt_workers{status=\"ADDED\"}", |v| v == 2.0);
    let g: f64 = generation(&c).trim().parse().expect("a generation");
    prom.wait("dt_acknowledged_generation", |v| v == g);
    prom.wait("dt_gpu_time_seconds_total{state=\"training\"} > 0", |_| {
        true
    });
    prom.wait("dt_goodput_gpu_seconds{bucket=\"training\"} > 0", |_| true);
    prom.wait("dt_goodput_dollars{bucket=\"training\"} > 0", |_| true);
    prom.wait(
        "sum(dt_aws_calls_total{service=\"EC2\",operation=\"DescribeInstances\"})",
        |v| v >= 1.0,
    );

    // A removal: out of the host files, awaiting the job; then acknowledged and terminated.
    let (id, ip) = &workers[0];
    c.delete_elastic_tag(id);
    c.wait_hosts("the worker to leave", |h| {
        !h.iter().any(|l| l.contains(ip.as_str()))
    });
    prom.wait("dt_removals_awaiting_ack", |v| v == 1.0);
    prom.wait("dt_workers{status=\"REMOVAL_QUEUED\"}", |v| v == 1.0);
    prom.wait("dt_generation", |v| v == g + 1.0);
    ack(&c);
    prom.wait("dt_ack_to_termination_seconds_count", |v| v == 1.0);
    prom.wait("dt_removals_awaiting_ack", |v| v == 0.0);
    prom.wait("dt_workers{status=\"ADDED\"}", |v| v == 1.0);
    prom.wait("dt_pass_duration_seconds_count > 10", |_| true);

    // What `dtctl status` sums up is what the counters say.
    let text = c.wait_status_text("GPU-hours trained");
    assert!(text.contains("0 interruption(s) survived"), "{text}");
}

/// Prometheus ingesting every scrape (`up` is 1 only when the exposition parsed) is the check
/// of the format; this one checks what a person reading /metrics relies on. (`promtool check
/// metrics` reads the older text format, in which OpenMetrics' counter families look like
/// families without help, so it cannot judge this one.)
#[test]
fn every_metric_has_its_help_and_other_paths_are_404() {
    let (c, _, addr) = cluster(1, "");
    c.wait_hosts("the worker", |h| h.len() == 1);
    let (code, body) = wait_for(
        "a scrape",
        Duration::from_secs(30),
        || get(addr, "/metrics"),
        |r| matches!(r, Ok((200, _))),
    )
    .expect("scraped");
    assert_eq!(code, 200);
    let documented =
        std::fs::read_to_string(repo().join("docs/operating.md")).expect("docs/operating.md");
    for family in body.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = family.split_whitespace().next().expect("a name");
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "{name} has no help:\n{body}"
        );
        let shown = [name.to_string(), format!("{name}_total")];
        assert!(
            shown.iter().any(|n| documented.contains(&format!("`{n}`"))),
            "{name} is not in docs/operating.md's metric list"
        );
    }
    assert!(
        body.ends_with("# EOF\n"),
        "an OpenMetrics exposition ends with # EOF"
    );
    assert_eq!(get(addr, "/nowhere").expect("an answer").0, 404);
    // The reference lists every family exposed (above; a family without samples yet is not
    // exposed, so the list is the whole set): every metric a document names is one of it.
    let listed: Vec<&str> = (documented.lines())
        .filter_map(|l| l.strip_prefix("| `")?.split(" | ").next())
        .flat_map(|cell| cell.split('`'))
        .filter(|n| n.starts_with("dt_"))
        .map(|n| n.strip_suffix("_total").unwrap_or(n))
        .collect();
    for (doc, name) in metric_names_in_documents() {
        assert!(
            is_listed(&name, &listed),
            "{doc} names {name}, which is not in docs/operating.md's metric list: {listed:?}"
        );
    }
}

/// The suffixes a family's samples add to its name (OpenMetrics).
const SAMPLE_SUFFIXES: [&str; 5] = ["_total", "_bucket", "_sum", "_count", "_created"];

/// `name` is one of `families`, or a sample of one.
fn is_listed(name: &str, families: &[&str]) -> bool {
    families.contains(&name)
        || SAMPLE_SUFFIXES
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|f| families.contains(&f)))
}

/// `dt_…` words in the documents that can only be metrics: followed by `{`, or ending as a
/// metric's name or sample does (`_total`, `_seconds`, `_bucket`, …).
fn metric_names_in_documents() -> Vec<(String, String)> {
    let docs = std::fs::read_dir(repo().join("docs")).expect("docs/");
    let mut paths: Vec<_> = docs.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.extend(["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"].map(|f| repo().join(f)));
    let metric_like = |name: &str, next: Option<char>| {
        next == Some('{')
            || ["_seconds", "_bytes"]
                .iter()
                .chain(SAMPLE_SUFFIXES.iter())
                .any(|s| name.ends_with(s))
    };
    let mut found = Vec::new();
    for path in paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(path).expect("a document");
        let word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        let mut rest = text.as_str();
        while let Some(at) = rest.find("dt_") {
            let before = rest[..at].chars().next_back();
            let tail = &rest[at..];
            let len = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
            let (name, next) = (&tail[..len], tail[len..].chars().next());
            if !before.is_some_and(word) && metric_like(name, next) {
                let doc = path
                    .strip_prefix(repo())
                    .unwrap_or(path)
                    .display()
                    .to_string();
                found.push((doc, name.to_string()));
            }
            rest = &tail[len..];
        }
    }
    assert!(
        found.iter().any(|(_, n)| n == "dt_aws_calls_total"),
        "the documents' metrics were not found: {found:?}"
    );
    found
}

#[test]
fn healthz_is_503_while_the_emulator_is_away_and_200_when_it_is_back() {
    let (c, _, addr) = cluster(1, "resync: 1s\napi_timeout: 1s\n");
    c.wait_hosts("the worker", |h| h.len() == 1);
    let health = || get(addr, "/healthz");
    wait_for("/healthz 200", Duration::from_secs(30), health, |r| {
        matches!(r, Ok((200, _)))
    })
    .expect("healthy");
    c.moto.pause();
    let (_, why) = wait_for("/healthz 503", Duration::from_secs(60), health, |r| {
        matches!(r, Ok((503, _)))
    })
    .expect("an answer");
    assert!(why.contains("source EC2 instances:"), "{why}");
    c.moto.resume();
    wait_for("/healthz 200 again", Duration::from_secs(60), health, |r| {
        matches!(r, Ok((200, _)))
    })
    .expect("healthy again");
}

/// GPU time counts since dtd first managed the cluster: a restarted dtd goes on from the totals
/// its predecessor wrote, and so does the counter Prometheus reads.
#[test]
fn gpu_time_is_carried_over_a_restart() {
    let (mut c, _, addr) = cluster(1, "");
    c.wait_hosts("the worker", |h| h.len() == 1);
    ack(&c);
    let trained =
        |s: &serde_json::Value| s["totals"]["gpu_seconds_training"].as_f64().unwrap_or(0.0);
    let before = c.wait_status("some GPU time trained", |s| trained(s) > 0.5);
    let since = before["totals"]["since"].clone();
    c.kill_dtd();
    c.start_dtd();
    let after = c.wait_status("a pass of the new dtd", |s| s["pid"] != before["pid"]);
    assert_eq!(after["totals"]["since"], since, "the count's start is kept");
    assert!(
        trained(&after) >= trained(&before),
        "{after:#?} after {before:#?}"
    );
    let scraped = wait_for(
        "the new dtd's /metrics",
        Duration::from_secs(30),
        || get(addr, "/metrics"),
        |r| matches!(r, Ok((200, _))),
    )
    .expect("scraped")
    .1;
    let line = (scraped.lines())
        .find(|l| l.starts_with("dt_gpu_time_seconds_total{state=\"training\"}"))
        .expect("the training series");
    let value: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a value");
    assert!(
        value >= trained(&before),
        "{line} after {}",
        trained(&before)
    );
}
