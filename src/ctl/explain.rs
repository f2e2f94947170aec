//! `dtctl explain IP|INSTANCE_ID`: a worker's story from the events journal, and where it is
//! now from dtd's last status report. The story itself is built in [`super::story`].

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::{bail, Context};
use serde::Serialize;

use super::local::load_status;
use super::story::{self, Span, Story, Target};
use crate::act::journal;
use crate::clock::now_millis;
use crate::config::Config;
use crate::model::{rfc3339, span_measured, Change, Millis};
use crate::store::Paths;

/// What `-o json` prints.
#[derive(Serialize)]
struct Explained<'a> {
    target: String,
    stories: &'a [Story],
    /// When dtd last wrote its status report, which each story's `now` comes from.
    status_updated_at: Option<Millis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_error: Option<String>,
}

pub fn explain(cfg: &Config, target: &Target, json: bool) -> anyhow::Result<()> {
    let path = Paths::new(&cfg.state_dir).journal();
    let (events, bad) = journal::read_matching(&path, |e| target.matches(e))
        .with_context(|| format!("reading {}", path.display()))?;
    if bad > 0 {
        eprintln!(
            "dtctl: skipped {bad} unreadable line(s) in {}",
            path.display()
        );
    }
    let now = now_millis();
    let mut stories = story::stories(&events, target, now);
    if stories.is_empty() {
        bail!(
            "the journal {} holds nothing about {target}: no worker of cluster {} with this IP or id was journaled",
            path.display(),
            cfg.cluster
        );
    }
    let status = load_status(cfg);
    if let Ok(report) = &status {
        for s in &mut stories {
            s.now = report.workers.iter().find(|w| w.id == s.instance).cloned();
        }
    }
    // The ledger is a second opinion: a story is told without it.
    if let Ok(ledger) = super::goodput::load(cfg) {
        for s in &mut stories {
            s.changes = costs(s, &ledger.changes);
        }
    }
    let updated_at = status.as_ref().ok().map(|r| r.updated_at);
    let status_error = status.as_ref().err().map(|e| format!("{e:#}"));
    if json {
        let out = Explained {
            target: target.to_string(),
            stories: &stories,
            status_updated_at: updated_at,
            status_error,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let now_line = |s: &Story| where_now(s, updated_at, status_error.as_deref());
        print!("{}", render(target, &stories, now_line));
    }
    Ok(())
}

/// The ledger's changes of the generations the story's lines name (its join, its leave).
fn costs(s: &Story, changes: &[Change]) -> Vec<Change> {
    let generations: BTreeSet<u64> = s.steps.iter().filter_map(|st| st.generation).collect();
    (changes.iter())
        .filter(|c| generations.contains(&c.generation))
        .cloned()
        .collect()
}

/// The stories as text, oldest first; `now_line` says where each instance is now.
pub fn render(target: &Target, stories: &[Story], now_line: impl Fn(&Story) -> String) -> String {
    let mut out = String::new();
    for (n, s) in stories.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let ip = s.ip.map_or("?".to_string(), |ip| ip.to_string());
        let _ = write!(out, "{} ({ip})", s.instance);
        if stories.len() > 1 {
            let _ = write!(
                out,
                ": instance {} of {} journaled for {target}",
                n + 1,
                stories.len()
            );
        }
        out.push('\n');
        render_steps(&mut out, s);
        let _ = writeln!(out, "  {:<20}  {}", "now", now_line(s));
        render_totals(&mut out, s);
        render_costs(&mut out, s);
    }
    out
}

/// What its changes cost the whole job, as the goodput ledger charged them.
fn render_costs(out: &mut String, s: &Story) {
    if s.changes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  cost to the job (the goodput ledger, every node's time)"
    );
    for c in &s.changes {
        let cost = c.cost();
        let usd = match cost.micro_usd {
            0 => String::new(),
            _ => format!(", {:.2} dollars", cost.usd()),
        };
        let _ = writeln!(
            out,
            "    g{:<18} {}s paused, {}s leaving, {} steps redone: {:.3} GPU-hours{usd} ({})",
            c.generation,
            c.paused.node_ms / 1000,
            c.leaving.node_ms / 1000,
            c.redone_steps,
            cost.gpu_ms as f64 / 3_600_000.0,
            c.what
        );
    }
}

fn render_steps(out: &mut String, s: &Story) {
    if let Some(at) = s.launched_at {
        let _ = writeln!(
            out,
            "  {}  {:<18} (EC2 launch time)",
            rfc3339(at),
            "launched"
        );
    }
    for step in &s.steps {
        let gen = step.generation.map_or(String::new(), |g| format!("g{g} "));
        let _ = writeln!(
            out,
            "  {}  {:<18} {gen}{}",
            rfc3339(step.time),
            step.kind,
            step.message
        );
        if let Some(note) = &step.note {
            let _ = writeln!(out, "  {:<20}  {:<18} {note}", "", "");
        }
    }
}

fn render_totals(out: &mut String, s: &Story) {
    let t = &s.totals;
    let rows: [(&str, &Option<Span>, &str); 5] = [
        ("preparing", &t.preparing, story::PREPARING),
        (
            "launch to training",
            &t.launch_to_training,
            story::LAUNCH_TO_TRAINING,
        ),
        ("ready but idle", &t.ready_idle, story::READY_IDLE),
        ("in the job", &t.in_job, story::IN_JOB),
        ("leaving", &t.leaving, story::LEAVING),
    ];
    let _ = writeln!(out, "  totals");
    for (name, span, between) in rows {
        let value = match span {
            Some(s) if s.open => format!("{} so far", span_measured(s.ms)),
            Some(s) => span_measured(s.ms),
            None => "-".to_string(),
        };
        let _ = writeln!(out, "    {name:<20}{value:<14}{between}");
    }
}

/// Where the instance is now, from dtd's last status report.
fn where_now(s: &Story, updated_at: Option<Millis>, error: Option<&str>) -> String {
    let Some(updated_at) = updated_at else {
        return format!("unknown: {}", error.unwrap_or("no status report"));
    };
    let as_of = rfc3339(updated_at);
    match &s.now {
        Some(w) => {
            let since = w
                .since
                .map_or(String::new(), |t| format!(" since {}", rfc3339(t)));
            let waiting =
                (w.waiting_for.as_deref()).map_or(String::new(), |x| format!(", waiting for {x}"));
            format!("{}{since}{waiting} (dtd's status at {as_of})", w.status)
        }
        None => format!("not among dtd's workers at {as_of}: no longer running, or not managed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, EventKind};

    #[test]
    fn each_instance_is_told_with_its_steps_where_it_is_and_its_totals() {
        let event = |time, kind, id: &str| Event {
            instance: Some(id.to_string()),
            ip: Some("10.0.1.5".parse().unwrap()),
            launched_at: Some(1_000),
            generation: (kind == EventKind::Joined).then_some(3),
            ..Event::new(time, kind, format!("said at {time}"))
        };
        let events = [
            event(2_000, EventKind::Preparing, "i-0aaaaaaaaaaaaaaaa"),
            event(4_000, EventKind::Joined, "i-0aaaaaaaaaaaaaaaa"),
            event(9_000, EventKind::Joined, "i-0bbbbbbbbbbbbbbbb"),
        ];
        let target = Target::parse("10.0.1.5").unwrap();
        let stories = story::stories(&events, &target, 10_000);
        let text = render(&target, &stories, |s| format!("where {} is", s.instance));
        let expected = "\
i-0aaaaaaaaaaaaaaaa (10.0.1.5): instance 1 of 2 journaled for 10.0.1.5
  1970-01-01T00:00:01Z  launched           (EC2 launch time)
  1970-01-01T00:00:02Z  preparing          said at 2000
                                           preparing for 2s after dtd first saw it (until joined)
  1970-01-01T00:00:04Z  joined             g3 said at 4000
  now                   where i-0aaaaaaaaaaaaaaaa is
  totals
    preparing           3s            EC2 launch -> ready (joined) or prepare-data failed
";
        assert!(text.starts_with(expected), "{text}");
        assert!(
            text.contains("\n    ready but idle      6s so far     joined -> "),
            "{text}"
        );
        assert!(
            text.contains("\n    in the job          -             the job's"),
            "{text}"
        );
        assert!(
            text.contains("\ni-0bbbbbbbbbbbbbbbb (10.0.1.5): instance 2 of 2"),
            "{text}"
        );
    }

    #[test]
    fn the_changes_it_joined_and_left_in_are_costed_from_the_ledger() {
        let event = |time, kind, generation| Event {
            instance: Some("i-0aaaaaaaaaaaaaaaa".into()),
            ip: Some("10.0.1.8".parse().unwrap()),
            generation: Some(generation),
            ..Event::new(time, kind, format!("said at {time}"))
        };
        let events = [
            event(2_000, EventKind::Joined, 3),
            event(9_000, EventKind::RemovalQueued, 5),
        ];
        let target = Target::parse("10.0.1.8").unwrap();
        let mut stories = story::stories(&events, &target, 10_000);
        let spent = |s: u64| crate::model::Spent {
            node_ms: s * 1000,
            gpu_ms: s * 8000,
            micro_usd: s * 32_770_000 / 3600,
        };
        let change = |generation, what: &str| Change {
            generation,
            what: what.into(),
            paused: spent(20),
            ..Change::default()
        };
        let ledger = [
            change(3, "10.0.1.8 joined"),
            change(4, "10.0.1.9 joined"),
            Change {
                leaving: spent(118),
                redone_steps: 40,
                ..change(
                    5,
                    "10.0.1.8 left (a Spot interruption notice from the queue)",
                )
            },
        ];
        stories[0].changes = costs(&stories[0], &ledger);
        assert_eq!(stories[0].changes.len(), 2, "not generation 4's");
        let text = render(&target, &stories, |_| String::new());
        assert!(
            text.ends_with(
                "  cost to the job (the goodput ledger, every node's time)\n    \
                 g3                  20s paused, 0s leaving, 0 steps redone: 0.044 GPU-hours, \
                 0.18 dollars (10.0.1.8 joined)\n    \
                 g5                  20s paused, 118s leaving, 40 steps redone: 0.307 GPU-hours, \
                 1.26 dollars (10.0.1.8 left (a Spot interruption notice from the queue))\n"
            ),
            "{text}"
        );
    }
}
