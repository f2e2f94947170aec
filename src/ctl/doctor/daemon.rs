//! Whether `dtd` is alive and sees everything: its status report, which it rewrites after every
//! pass, is recent, and every source it reads was readable in its last pass.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Check;
use crate::config::Config;
use crate::ctl::local::load_status;
use crate::status::ago;

const ALIVE: &str = "dtd alive";
const SOURCES: &str = "dtd sources";

/// A pass may be late by a few intervals (a slow AWS call retried) before it means trouble.
fn stale_after(cfg: &Config) -> Duration {
    (cfg.interval * 5).max(Duration::from_secs(10)) + cfg.fs_timeout
}

pub fn checks(cfg: &Config) -> Vec<Check> {
    let report = match load_status(cfg) {
        Ok(r) => r,
        Err(e) => {
            return vec![
                Check::fail("dtd.alive", ALIVE, format!("{e:#}"), start_fix()),
                Check::skip("dtd.sources", SOURCES, "needs dtd's status"),
            ]
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let age = now.saturating_sub(report.updated_at);
    let limit = stale_after(cfg);
    let detail = format!("pid {}, last pass {} ago", report.pid, ago(age));
    let alive = if age as u128 <= limit.as_millis() {
        Check::pass("dtd.alive", ALIVE, detail)
    } else {
        let late = format!(
            "{detail}, more than {} ago: dtd is not running its passes",
            humantime::format_duration(limit)
        );
        Check::fail("dtd.alive", ALIVE, late, start_fix())
    };
    let failed: Vec<String> = (report.sources.iter())
        .filter(|s| !s.ok)
        .map(|s| format!("{}: {}", s.name, s.detail))
        .collect();
    let names = report
        .sources
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let sources = if failed.is_empty() {
        Check::pass(
            "dtd.sources",
            SOURCES,
            format!("all read in the last pass ({names})"),
        )
    } else {
        Check::fail(
            "dtd.sources",
            SOURCES,
            failed.join("; "),
            "see `dtctl status` and dtd's log for each failing source",
        )
    };
    vec![alive, sources]
}

fn start_fix() -> String {
    "on the master: `systemctl status dtd` and `journalctl -u dtd`; start it with `dtd run --config FILE`".into()
}
