//! The Default column of docs/configuration.md is what the parser gives: every row is checked
//! against a config that leaves its key out, so a default changed in the code, or a row added
//! without a check here, fails.
//!
//! A cell that starts with a literal (`` `10s` ``) must be the value the code resolves; a cell
//! that says there is none (`–`, `none`, `off`) must mean the key resolves to nothing; `required`
//! must be refused when left out. Cells that are prose (a formula, another key's value) are
//! checked by the test that knows their rule, below the table.

use std::collections::BTreeMap;
use std::time::Duration;

use dt::config::{Config, Launcher};

use crate::config_reference::rows;
use crate::support::repo;

/// A config with only what is required, and the launcher's and the health check's required keys
/// so that their sections' defaults can be read.
const MINIMAL: &str =
    "cluster: demo\nshared_dir: /efs\nworkers: { max: 4, auto_scaling_group: g }\n";
const WITH_SECTIONS: &str =
    "cluster: demo\nshared_dir: /efs\nworkers: { max: 4, auto_scaling_group: g }
job:
  launcher: { torchrun: [/usr/bin/torchrun], script: [train.py] }
  stall: { after: 10m }
agent:
  health: { command: [/usr/bin/true] }
alerts:
  - { webhook: 'https://hooks.example.com/x', events: [joined] }
";

enum Check {
    /// The value as the reference writes it, between backticks.
    Literal(fn(&Config) -> String),
    /// Whether the key resolved to nothing.
    Absent(fn(&Config) -> bool),
    /// Left out, the config is refused naming the key: the YAML without it.
    Required(&'static str),
    /// A prose cell with its own test below (or no value the parser resolves): why.
    Elsewhere(&'static str),
}
use Check::*;

fn d(v: Duration) -> String {
    humantime::format_duration(v).to_string()
}

fn lower<T: std::fmt::Debug>(v: T) -> String {
    format!("{v:?}").to_lowercase()
}

fn launcher(c: &Config) -> &Launcher {
    c.job.launcher.as_ref().expect("the launcher section")
}

fn health(c: &Config) -> &dt::config::Health {
    c.agent.health.as_ref().expect("the health section")
}

fn checks() -> BTreeMap<&'static str, Check> {
    let no_max = "cluster: demo\nshared_dir: /efs\nworkers: { auto_scaling_group: g }\n";
    let no_launcher_script =
        "cluster: demo\nshared_dir: /efs\nworkers: { max: 4, auto_scaling_group: g }\njob: { launcher: { torchrun: [/t] } }\n";
    BTreeMap::from([
        (
            "cluster",
            Required("shared_dir: /efs\nworkers: { max: 4, auto_scaling_group: g }\n"),
        ),
        ("region", Absent(|c| c.region.is_none())),
        (
            "workers.launch_template",
            Absent(|c| c.workers.launch_template.is_none()),
        ),
        (
            "workers.auto_scaling_group",
            Elsewhere("one of it and launch_template: src/config/tests"),
        ),
        (
            "workers.prepare_timeout",
            Elsewhere("a formula: prepare_timeout_is_the_agents_limit_and_a_margin"),
        ),
        (
            "workers.max_prepare_failures",
            Literal(|c| c.workers.max_prepare_failures.to_string()),
        ),
        (
            "workers.elastic_tag",
            Elsewhere("<cluster>: the_tag_and_paths_name_the_cluster_and_shared_dir"),
        ),
        (
            "workers.tags",
            Literal(|c| {
                let t: Vec<String> = c
                    .workers
                    .tags
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                format!("{{ {} }}", t.join(", "))
            }),
        ),
        ("workers.min", Literal(|c| c.workers.min.to_string())),
        ("workers.max", Required(no_max)),
        (
            "workers.base_hosts",
            Literal(|c| format!("{:?}", c.workers.base_hosts)),
        ),
        (
            "workers.slots",
            Literal(|c| match &c.workers.slots {
                dt::config::Slots::All(n) => n.to_string(),
                other => format!("{other:?}"),
            }),
        ),
        ("workers.capacity", Absent(|c| c.workers.capacity.is_none())),
        (
            "workers.replace_interrupted",
            Literal(|c| c.workers.replace_interrupted.to_string()),
        ),
        (
            "workers.replace_unhealthy",
            Literal(|c| c.workers.replace_unhealthy.to_string()),
        ),
        (
            "health.max_unhealthy",
            Literal(|c| match c.health.max_unhealthy {
                dt::config::MaxUnhealthy::Percent(p) => format!("{p}%"),
                dt::config::MaxUnhealthy::Count(n) => n.to_string(),
            }),
        ),
        ("health.leave", Literal(|c| lower(c.health.leave))),
        (
            "workers.page_size",
            Literal(|c| c.workers.page_size.to_string()),
        ),
        ("workers.reports", Literal(|c| lower(c.workers.reports))),
        ("workers.listen", Literal(|c| c.workers.listen.to_string())),
        (
            "workers.identity_certificates",
            Elsewhere("built in: src/protocol/identity/aws-rsa.pem"),
        ),
        (
            "workers.max_clock_skew",
            Literal(|c| d(c.workers.max_clock_skew)),
        ),
        ("workers.prices", Absent(|c| c.workers.prices.is_empty())),
        (
            "workers.spot_price_history",
            Literal(|c| c.workers.spot_price_history.to_string()),
        ),
        (
            "shared_dir",
            Required("cluster: demo\nworkers: { max: 4, auto_scaling_group: g }\n"),
        ),
        ("shared_fs_id", Absent(|c| c.shared_fs_id.is_none())),
        ("shared_fs_refresh", Literal(|c| d(c.shared_fs_refresh))),
        ("api_timeout", Literal(|c| d(c.api_timeout))),
        ("master", Absent(|c| c.master.is_none())),
        (
            "hostfiles",
            Elsewhere("<shared_dir>: the_tag_and_paths_name_the_cluster_and_shared_dir"),
        ),
        (
            "hostfiles[].path",
            Elsewhere("required within an entry: src/config/tests"),
        ),
        (
            "hostfiles[].format",
            Elsewhere("one of format and template: src/config/tests"),
        ),
        (
            "hostfiles[].template",
            Elsewhere("one of format and template: src/config/tests"),
        ),
        ("job.notify", Literal(|c| lower(&c.job.notify))),
        ("job.ack.by", Literal(|c| lower(c.job.ack.by))),
        (
            "job.ack.host_worker_log",
            Absent(|c| c.job.ack.host_worker_log.is_none()),
        ),
        (
            "job.ack.file",
            Elsewhere("<shared_dir>: the_tag_and_paths_name_the_cluster_and_shared_dir"),
        ),
        ("job.ack.timeout", Literal(|c| d(c.job.ack.timeout))),
        (
            "job.progress",
            Elsewhere("<shared_dir>: the_tag_and_paths_name_the_cluster_and_shared_dir"),
        ),
        ("job.stall.after", Absent(|c| c.job.stall.is_none())),
        (
            "job.stall.action",
            Literal(|c| lower(c.job.stall.as_ref().expect("the stall section").action)),
        ),
        (
            "job.stragglers.action",
            Elsewhere("per strategy: the_straggler_action_drains_under_in_place_only"),
        ),
        (
            "job.stragglers.ratio",
            Literal(|c| c.job.stragglers.ratio.to_string()),
        ),
        (
            "job.stragglers.steps",
            Literal(|c| c.job.stragglers.steps.to_string()),
        ),
        ("job.owner", Absent(|c| c.job.owner.is_none())),
        ("job.launcher", Absent(|c| c.job.launcher.is_none())),
        (
            "job.launcher.torchrun",
            Elsewhere("required within the section: src/config/tests/launcher.rs"),
        ),
        ("job.launcher.script", Required(no_launcher_script)),
        (
            "job.launcher.nproc_per_node",
            Literal(|c| match launcher(c).nproc_per_node {
                dt::config::NprocPerNode::Word(w) => w.to_string(),
                dt::config::NprocPerNode::Count(n) => n.to_string(),
            }),
        ),
        (
            "job.launcher.rdzv.port",
            Literal(|c| launcher(c).rdzv.port.to_string()),
        ),
        (
            "job.launcher.strategy",
            Literal(|c| lower(launcher(c).strategy)),
        ),
        (
            "job.launcher.in_place.lighthouse",
            Elsewhere("required with in_place: in_place_defaults"),
        ),
        (
            "job.launcher.in_place.program",
            Elsewhere("beside torchrun: in_place_defaults"),
        ),
        (
            "job.launcher.in_place.sha256",
            Elsewhere("none: in_place_defaults"),
        ),
        (
            "job.launcher.in_place.join_timeout",
            Elsewhere("in_place_defaults"),
        ),
        (
            "job.launcher.in_place.heartbeat_timeout",
            Elsewhere("in_place_defaults"),
        ),
        (
            "job.launcher.in_place.collective_timeout",
            Elsewhere("in_place_defaults"),
        ),
        (
            "job.launcher.in_place.min_nodes",
            Elsewhere("in_place_defaults"),
        ),
        (
            "job.launcher.in_place.leave_before_loss",
            Elsewhere("in_place_defaults"),
        ),
        (
            "job.launcher.workdir",
            Absent(|c| launcher(c).workdir.is_none()),
        ),
        (
            "job.launcher.elastic",
            Elsewhere("a mapping: max_restarts_and_elastic_by_strategy"),
        ),
        (
            "job.launcher.max_restarts",
            Elsewhere("by strategy: max_restarts_and_elastic_by_strategy"),
        ),
        (
            "job.launcher.stop",
            Literal(|c| {
                let s = &launcher(c).stop;
                format!("{{ signal: {}, grace: {} }}", s.signal.as_str(), d(s.grace))
            }),
        ),
        (
            "job.launcher.env",
            Literal(|c| format!("{:?}", launcher(c).env)),
        ),
        ("job.launcher.backoff", Literal(|c| d(launcher(c).backoff))),
        (
            "job.launcher.silent_after",
            Literal(|c| d(launcher(c).silent_after)),
        ),
        (
            "job.launcher.silent_share",
            Literal(|c| format!("{:.2}", launcher(c).silent_share)),
        ),
        (
            "job.launcher.user",
            Elsewhere("decided on the worker: src/program/user.rs"),
        ),
        (
            "job.launcher.sha256",
            Absent(|c| launcher(c).sha256.is_none()),
        ),
        (
            "job.stall.command",
            Elsewhere("the notify command: src/config/tests/job.rs"),
        ),
        ("events.queue_url", Absent(|c| c.events.queue_url.is_none())),
        ("events.rebalance", Literal(|c| lower(c.events.rebalance))),
        (
            "events.scheduled_change_lead",
            Literal(|c| d(c.events.scheduled_change_lead)),
        ),
        ("events.wait", Literal(|c| d(c.events.wait))),
        ("interval", Literal(|c| d(c.interval))),
        (
            "resync",
            Elsewhere("by events.queue_url: resync_follows_the_queue"),
        ),
        ("shared_poll", Literal(|c| d(c.shared_poll))),
        ("metrics.listen", Absent(|c| c.metrics.listen.is_none())),
        ("fs_timeout", Literal(|c| d(c.fs_timeout))),
        (
            "state_dir",
            Elsewhere("<shared_dir>: the_tag_and_paths_name_the_cluster_and_shared_dir"),
        ),
        ("disruption.budget", Literal(|c| lower(c.disruption.budget))),
        (
            "disruption.windows",
            Absent(|c| c.disruption.windows.is_empty()),
        ),
        ("join.batch", Absent(|c| c.join.batch.is_zero())),
        (
            "join.at_checkpoint",
            Literal(|c| c.join.at_checkpoint.to_string()),
        ),
        ("join.max_wait", Literal(|c| d(c.join.max_wait))),
        ("join.sizes", Absent(|c| c.join.sizes.is_empty())),
        (
            "journal.max_size",
            Literal(|c| format!("{}MiB", c.journal.max_size >> 20)),
        ),
        ("journal.keep", Literal(|c| c.journal.keep.to_string())),
        (
            "allow_local_state_dir",
            Literal(|c| c.allow_local_state_dir.to_string()),
        ),
        (
            "agent.prepare_data",
            Literal(|c| c.agent.prepare_data.display().to_string()),
        ),
        (
            "agent.prepare_data_sha256",
            Absent(|c| c.agent.prepare_data_sha256.is_none()),
        ),
        ("agent.args", Literal(|c| format!("{:?}", c.agent.args))),
        ("agent.timeout", Literal(|c| d(c.agent.timeout))),
        ("agent.attempts", Literal(|c| c.agent.attempts.to_string())),
        ("agent.retry_delay", Literal(|c| d(c.agent.retry_delay))),
        ("agent.imds_interval", Literal(|c| d(c.agent.imds_interval))),
        (
            "agent.key_file",
            Literal(|c| c.agent.key_file.display().to_string()),
        ),
        ("agent.report_to", Absent(|c| c.agent.report_to.is_none())),
        ("agent.health", Absent(|c| c.agent.health.is_none())),
        (
            "agent.health.command",
            Elsewhere("required within the section: src/config/tests"),
        ),
        (
            "agent.health.sha256",
            Absent(|c| health(c).sha256.is_none()),
        ),
        ("agent.health.interval", Literal(|c| d(health(c).interval))),
        ("agent.health.timeout", Literal(|c| d(health(c).timeout))),
        ("alerts", Literal(|c| format!("{:?}", c.alerts))),
        (
            "alerts[].webhook",
            Elsewhere("one of webhook and webhook_file: src/config/tests/alerts.rs"),
        ),
        (
            "alerts[].webhook_file",
            Elsewhere("one of webhook and webhook_file: src/config/tests/alerts.rs"),
        ),
        (
            "alerts[].allow_http",
            Literal(|c| c.alerts[0].allow_http.to_string()),
        ),
        (
            "alerts[].events",
            Elsewhere("required within an entry: src/config/tests/alerts.rs"),
        ),
        ("alerts[].format", Literal(|c| lower(c.alerts[0].format))),
    ])
}

/// The cell's first literal: `` `10s` `` -> `10s`.
fn literal(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.split('`').next()
}

fn says_none(cell: &str) -> bool {
    ["–", "none", "off", "unlimited", "any"].iter().any(|w| {
        cell == *w || cell.starts_with(&format!("{w}:")) || cell.starts_with(&format!("{w} "))
    }) || cell.starts_with("SDK chain")
        || cell.starts_with("the ")
}

#[test]
fn every_default_in_the_reference_is_the_parsers() {
    let minimal = Config::parse(MINIMAL).expect("the minimal config");
    let full = Config::parse(WITH_SECTIONS).expect("the config with sections");
    let table = checks();
    let mut wrong = Vec::new();
    for (key, cell) in rows() {
        // Keys of a section the minimal config leaves out are read from the one that has it.
        let cfg = if key.starts_with("job.launcher.")
            || key.starts_with("job.stall.action")
            || key.starts_with("agent.health.")
            || key.starts_with("alerts[]")
        {
            &full
        } else {
            &minimal
        };
        match table.get(key.as_str()) {
            None => wrong.push(format!(
                "{key}: no check in tests/integration/config_defaults.rs"
            )),
            Some(Literal(value)) => {
                let want = value(cfg);
                // A cell without backticks (`unlimited`) is the value as it stands.
                let said = literal(&cell).unwrap_or(cell.as_str());
                if said != want {
                    wrong.push(format!(
                        "{key}: documented `{cell}`, the parser gives `{want}`"
                    ));
                }
            }
            Some(Absent(absent)) => {
                if !absent(cfg) || !says_none(&cell) {
                    wrong.push(format!(
                        "{key}: documented `{cell}`, resolved to nothing: {}",
                        absent(cfg)
                    ));
                }
            }
            Some(Required(without)) => {
                let refused = Config::parse(without).err().map(|e| e.to_string());
                let leaf = key.rsplit('.').next().unwrap_or(&key);
                if !cell.starts_with("required")
                    || !refused.as_ref().is_some_and(|e| e.contains(leaf))
                {
                    wrong.push(format!("{key}: documented `{cell}`; left out: {refused:?}"));
                }
            }
            Some(Elsewhere(why)) => {
                // The reason names a test here or a file of the repository that checks it.
                let named = why.rsplit(": ").next().unwrap_or(why);
                let here = include_str!("config_defaults.rs").contains(&format!("fn {named}()"));
                if !here
                    && !repo().join(named.trim_end_matches('*')).exists()
                    && !glob_exists(named)
                {
                    wrong.push(format!(
                        "{key}: checked elsewhere, but `{named}` is neither a test here nor a path"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md's Default column:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_straggler_action_drains_under_in_place_only() {
    use dt::config::StragglerAction::{Alert, Drain};
    let action = |yaml: &str| Config::parse(yaml).expect("config").job.stragglers.action;
    assert_eq!(action(MINIMAL), Alert, "no launcher");
    assert_eq!(action(WITH_SECTIONS), Alert, "strategy: generation");
    let in_place = WITH_SECTIONS.replace(
        "script: [train.py] }",
        "script: [train.py], strategy: in_place, in_place: { lighthouse: '10.0.0.1:29510' } }",
    );
    assert_eq!(action(&in_place), Drain);
    let set = in_place.replace("  stall:", "  stragglers: { action: alert }\n  stall:");
    assert_eq!(action(&set), Alert, "as written");
}

/// `tests/integration/identity_document*`: some file with that prefix.
fn glob_exists(pattern: &str) -> bool {
    let Some(prefix) = pattern.strip_suffix('*') else {
        return false;
    };
    let path = repo().join(prefix);
    let (Some(dir), Some(stem)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let stem = stem.to_string_lossy().to_string();
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&stem))
    })
}

fn cell(key: &str) -> String {
    rows()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, c)| c)
        .unwrap_or_else(|| panic!("no row for {key}"))
}

#[test]
fn prepare_timeout_is_the_agents_limit_and_a_margin() {
    let c = Config::parse(MINIMAL).unwrap();
    let with_check = Config::parse(WITH_SECTIONS).unwrap();
    let doc = cell("workers.prepare_timeout");
    for (cfg, what) in [(&c, "without a health check"), (&with_check, "with one")] {
        let shown = format!("{} {what}", d(cfg.workers.prepare_timeout));
        assert!(doc.contains(&shown), "{doc:?} should say `{shown}`");
    }
    assert!(doc.contains("agent.health.timeout"), "{doc}");
}

#[test]
fn the_tag_and_paths_name_the_cluster_and_shared_dir() {
    let c = Config::parse(MINIMAL).unwrap();
    let named = |v: String| {
        v.replace("/efs", "<shared_dir>")
            .replace("demo", "<cluster>")
    };
    let pairs = [
        ("workers.elastic_tag", named(c.workers.elastic_tag.clone())),
        ("job.ack.file", named(c.job.ack.file.display().to_string())),
        ("job.progress", named(c.job.progress.display().to_string())),
        ("state_dir", named(c.state_dir.display().to_string())),
        (
            "hostfiles",
            format!(
                "[{{ path: {}, format: {} }}]",
                named(c.hostfiles[0].path.display().to_string()),
                lower(c.hostfiles[0].format)
            ),
        ),
    ];
    for (key, want) in pairs {
        assert_eq!(literal(&cell(key)), Some(want.as_str()), "{key}");
    }
}

#[test]
fn max_restarts_and_elastic_by_strategy() {
    let with = |strategy: &str| {
        let yaml = WITH_SECTIONS.replace(
            "script: [train.py]",
            &format!(
                "script: [train.py], strategy: {strategy}{}",
                if strategy == "in_place" {
                    ", in_place: { lighthouse: '10.0.0.1:29510' }"
                } else {
                    ""
                }
            ),
        );
        Config::parse(&yaml).unwrap_or_else(|e| panic!("{strategy}: {e}"))
    };
    let doc = cell("job.launcher.max_restarts");
    let want = format!(
        "`{}`; `{}` under elastic; `{}` under in_place",
        launcher(&with("generation")).max_restarts(),
        launcher(&with("elastic")).max_restarts(),
        launcher(&with("in_place")).max_restarts()
    );
    assert!(
        doc.starts_with(&want),
        "documented {doc:?}, the parser gives {want:?}"
    );
    let e = launcher(&with("elastic")).elastic().unwrap();
    let want = format!(
        "{{ min_nodes: {}, max_nodes: {}, last_call: {} }}",
        e.min_nodes,
        e.max_nodes,
        d(e.last_call)
    );
    assert_eq!(literal(&cell("job.launcher.elastic")), Some(want.as_str()));
}

#[test]
fn in_place_defaults() {
    let yaml = WITH_SECTIONS.replace(
        "script: [train.py]",
        "script: [train.py], strategy: in_place, in_place: { lighthouse: '10.0.0.1:29510' }",
    );
    let c = Config::parse(&yaml).unwrap();
    let p = launcher(&c).in_place().unwrap();
    for (key, want) in [
        ("join_timeout", d(p.join_timeout)),
        ("heartbeat_timeout", d(p.heartbeat_timeout)),
        ("collective_timeout", d(p.collective_timeout)),
        ("min_nodes", p.min_nodes.to_string()),
        ("leave_before_loss", d(p.leave_before_loss)),
    ] {
        let key = format!("job.launcher.in_place.{key}");
        assert_eq!(literal(&cell(&key)), Some(want.as_str()), "{key}");
    }
    assert_eq!(
        p.program("/usr/bin/torchrun"),
        std::path::Path::new("/usr/bin/torchft_lighthouse")
    );
    assert!(
        cell("job.launcher.in_place.program").starts_with("`torchft_lighthouse` beside torchrun")
    );
    assert!(p.sha256.is_none() && cell("job.launcher.in_place.sha256") == "–");
    let without = WITH_SECTIONS.replace(
        "script: [train.py]",
        "script: [train.py], strategy: in_place",
    );
    let e = Config::parse(&without).unwrap_err().to_string();
    assert!(e.contains("lighthouse"), "{e}");
    assert!(cell("job.launcher.in_place.lighthouse").starts_with("required with `in_place`"));
}

#[test]
fn resync_follows_the_queue() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.resync, c.interval);
    let queued =
        MINIMAL.to_string() + "events: { queue_url: 'https://sqs.us-east-1.amazonaws.com/1/q' }\n";
    let q = Config::parse(&queued).unwrap();
    let want = format!("`{}` with `events.queue_url`, else `interval`", d(q.resync));
    assert_eq!(cell("resync"), want);
}
