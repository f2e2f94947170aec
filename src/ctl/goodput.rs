//! `dtctl goodput`: where the worker instances' paid time went, from `dtd`'s ledger
//! (`goodput.json` in its state directory, written every 10 s and when it stops).

use std::fmt::Write as _;

use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::clock::{millis, now_millis};
use crate::config::Config;
use crate::model::{rfc3339, Bucket, Change, Goodput, Millis, Spent, MARKS_KEPT};
use crate::store::Paths;
use crate::untrusted;

const LIMIT: u64 = 64 << 20;

#[derive(Serialize)]
struct Line {
    bucket: &'static str,
    node_seconds: f64,
    gpu_seconds: f64,
    /// At `workers.prices`; `None` when no worker's type has a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    usd: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    since: String,
    buckets: Vec<Line>,
    paid: Line,
    /// The master's own time, apart from the workers'.
    master_node_seconds: f64,
    /// Training GPU time over paid GPU time; `None` before anything was paid.
    trained_share: Option<f64>,
    /// The changes of membership kept, oldest first, and what each cost.
    changes: Vec<ChangeLine>,
}

#[derive(Serialize)]
struct ChangeLine {
    generation: u64,
    at: String,
    what: String,
    paused_node_seconds: f64,
    leaving_node_seconds: f64,
    redone_node_seconds: f64,
    redone_steps: u64,
    /// The preparing of the instances launched to replace its leavers.
    replacing_node_seconds: f64,
    /// Paused, leaving, redone and replacing together.
    gpu_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    usd: Option<f64>,
}

/// The changes the text shows, the newest; `-o json` has every one kept.
const CHANGES_SHOWN: usize = 10;

/// `since`: only the time after the hourly mark at or before this long ago.
pub fn goodput(cfg: &Config, since: Option<Duration>, json: bool) -> anyhow::Result<()> {
    let mut ledger = load(cfg)?;
    if let Some(ago) = since {
        ledger = window(&ledger, now_millis().saturating_sub(millis(ago)))?;
    }
    let report = report(&ledger);
    match json {
        true => println!("{}", serde_json::to_string_pretty(&report)?),
        false => print!("{}", render(&report)),
    }
    Ok(())
}

pub(super) fn load(cfg: &Config) -> anyhow::Result<Goodput> {
    let path = Paths::new(&cfg.state_dir).goodput();
    let bytes = untrusted::read(&path, LIMIT)
        .with_context(|| format!("cannot read the goodput ledger {}", path.display()))?;
    let Some(bytes) = bytes else {
        bail!(
            "no goodput ledger at {}: dtd has not run for cluster {} yet (it writes one every 10 s)",
            path.display(),
            cfg.cluster
        );
    };
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a goodput ledger", path.display()))
}

/// The ledger since the hourly mark at or before `at`, or why there is none.
fn window(g: &Goodput, at: Millis) -> anyhow::Result<Goodput> {
    if let Some(w) = g.since(at) {
        return Ok(w);
    }
    match g.marks.first() {
        Some(oldest) => bail!(
            "the goodput ledger keeps hourly marks for {MARKS_KEPT} hours: the oldest is at {}, \
             after {}",
            rfc3339(oldest.at),
            rfc3339(at)
        ),
        None => bail!("the goodput ledger has no hourly mark yet (dtd takes one at its next pass)"),
    }
}

fn line(bucket: &'static str, s: Spent, priced: bool) -> Line {
    Line {
        bucket,
        node_seconds: s.node_ms as f64 / 1000.0,
        gpu_seconds: s.gpu_ms as f64 / 1000.0,
        usd: priced.then(|| s.usd()),
    }
}

fn report(g: &Goodput) -> Report {
    let paid = g.paid();
    let priced = paid.micro_usd > 0;
    let training = g
        .buckets
        .get(&Bucket::Training)
        .copied()
        .unwrap_or_default();
    Report {
        since: rfc3339(g.since).to_string(),
        buckets: (g.totals().into_iter())
            .map(|(b, s)| line(b.as_str(), s, priced))
            .collect(),
        paid: line("paid", paid, priced),
        master_node_seconds: g.master_ms as f64 / 1000.0,
        trained_share: (paid.gpu_ms > 0).then(|| training.gpu_ms as f64 / paid.gpu_ms as f64),
        changes: g.changes.iter().map(|c| change(c, priced)).collect(),
    }
}

fn change(c: &Change, priced: bool) -> ChangeLine {
    let s = |ms: u64| ms as f64 / 1000.0;
    let cost = c.cost();
    ChangeLine {
        generation: c.generation,
        at: rfc3339(c.at).to_string(),
        what: c.what.clone(),
        paused_node_seconds: s(c.paused.node_ms),
        leaving_node_seconds: s(c.leaving.node_ms),
        redone_node_seconds: s(c.redone.node_ms),
        redone_steps: c.redone_steps,
        replacing_node_seconds: s(c.replacing.node_ms),
        gpu_seconds: s(cost.gpu_ms),
        usd: priced.then(|| cost.usd()),
    }
}

fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Goodput since {} (every worker instance from its launch to its last pass; not the master)",
        r.since
    );
    let dollars = |l: &Line| l.usd.map(|d| format!(" {d:>10.2}")).unwrap_or_default();
    let priced = match r.paid.usd.is_some() {
        true => format!(" {:>10}", "dollars"),
        false => String::new(),
    };
    let _ = writeln!(
        o,
        "{:<16} {:>11} {:>11} {:>7}{priced}",
        "", "node-hours", "GPU-hours", "share"
    );
    let paid = r.paid.gpu_seconds;
    for l in r.buckets.iter().chain(std::iter::once(&r.paid)) {
        let share = match paid > 0.0 {
            true => format!("{:.1} %", 100.0 * l.gpu_seconds / paid),
            false => "-".into(),
        };
        let _ = writeln!(
            o,
            "{:<16} {:>11.3} {:>11.3} {:>7}{}",
            l.bucket,
            l.node_seconds / 3600.0,
            l.gpu_seconds / 3600.0,
            share,
            dollars(l)
        );
    }
    let _ = writeln!(
        o,
        "Master (dtd's instance, apart): {:.3} node-hours",
        r.master_node_seconds / 3600.0
    );
    match r.trained_share {
        Some(s) => {
            let _ = writeln!(o, "Trained / paid: {:.1} % of the GPU time", 100.0 * s);
        }
        None => o.push_str("Trained / paid: nothing paid yet\n"),
    }
    render_changes(&mut o, &r.changes);
    o
}

/// What the newest changes cost, one line each.
fn render_changes(o: &mut String, changes: &[ChangeLine]) {
    if changes.is_empty() {
        return;
    }
    let shown = &changes[changes.len().saturating_sub(CHANGES_SHOWN)..];
    let _ = writeln!(
        o,
        "\nWhat each change cost ({} of {}, newest last; -o json for all):",
        shown.len(),
        changes.len()
    );
    let priced = changes.iter().any(|c| c.usd.is_some());
    let dollars = if priced { "  dollars" } else { "" };
    let _ = writeln!(
        o,
        "{:>5}  {:<20}  {:>8}  {:>8}  {:>6}  {:>9}  {:>9}{dollars}  what",
        "gen", "at", "paused", "leaving", "redone", "replacing", "GPU-hours"
    );
    for c in shown {
        let usd = c.usd.map(|d| format!("  {d:>7.2}")).unwrap_or_default();
        let _ = writeln!(
            o,
            "{:>5}  {:<20}  {:>7.0}s  {:>7.0}s  {:>6}  {:>8.0}s  {:>9.3}{usd}  {}",
            c.generation,
            c.at,
            c.paused_node_seconds,
            c.leaving_node_seconds,
            c.redone_steps,
            c.replacing_node_seconds,
            c.gpu_seconds / 3600.0,
            c.what
        );
    }
    o.push_str(
        "(paused, leaving and the replacements' preparing in node-seconds, redone in steps; \
         GPU-hours and dollars: all four)\n",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_bucket_the_paid_sum_and_the_trained_share() {
        let mut g = Goodput::new(1_795_508_201_000);
        let spent = |s: u64| Spent {
            node_ms: s * 1000,
            gpu_ms: s * 8000,
            micro_usd: 0,
        };
        g.buckets.insert(Bucket::Training, spent(3_240));
        g.buckets.insert(Bucket::Preparing, spent(360));
        let text = render(&report(&g));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 7 + 1 + 2, "{text}");
        assert!(
            lines[0].starts_with("Goodput since 2026-11-24T08:16:41Z"),
            "{text}"
        );
        assert_eq!(lines[2], "training               0.900       7.200  90.0 %");
        assert_eq!(lines[3], "preparing              0.100       0.800  10.0 %");
        assert_eq!(lines[9], "paid                   1.000       8.000 100.0 %");
        assert_eq!(
            lines[10],
            "Master (dtd's instance, apart): 0.000 node-hours"
        );
        assert_eq!(lines[11], "Trained / paid: 90.0 % of the GPU time");
        // At a price, each bucket's dollars (32.77 dollars an hour: 3,240 s is 29.49).
        let priced = |s: u64| Spent {
            micro_usd: s * 32_770_000 / 3600,
            ..spent(s)
        };
        g.buckets.insert(Bucket::Training, priced(3_240));
        g.buckets.insert(Bucket::Preparing, priced(360));
        let text = render(&report(&g));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].ends_with("share    dollars"), "{text}");
        assert_eq!(
            lines[2],
            "training               0.900       7.200  90.0 %      29.49"
        );
        assert_eq!(
            lines[9],
            "paid                   1.000       8.000 100.0 %      32.77"
        );
        let json = serde_json::to_value(report(&g)).unwrap();
        assert_eq!(json["paid"]["usd"], 32.77);
        // Each change's cost, after the totals.
        g.changes.push(Change {
            generation: 4,
            at: 1_795_508_261_000,
            what: "10.0.1.8 left (a Spot interruption notice from the queue)".into(),
            paused: priced(20),
            leaving: priced(30),
            redone_steps: 40,
            redone: priced(40),
            replacing: priced(90),
            replaced: vec!["i-0a8".into()],
        });
        let text = render(&report(&g));
        let lines: Vec<&str> = text.lines().skip(12).collect();
        assert_eq!(
            lines[1],
            "What each change cost (1 of 1, newest last; -o json for all):"
        );
        assert_eq!(
            lines[3],
            "    4  2026-11-24T08:17:41Z       20s       30s      40        90s      0.400     \
             1.64  10.0.1.8 left (a Spot interruption notice from the queue)",
            "{text}"
        );
        let json = serde_json::to_value(report(&g)).unwrap();
        assert_eq!(json["changes"][0]["leaving_node_seconds"], 30.0);
        assert_eq!(json["changes"][0]["redone_steps"], 40);
        assert_eq!(json["changes"][0]["replacing_node_seconds"], 90.0);
        let empty = render(&report(&Goodput::new(0)));
        assert!(
            empty.ends_with("Trained / paid: nothing paid yet\n"),
            "{empty}"
        );
    }
}
