//! The report `dtctl doctor` prints: a line per check, ✔ or ✖ (or – when it could not apply),
//! and for each ✖ what to do.

use std::fmt::Write as _;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    /// Not applicable here (not configured, or an earlier check's failure hides it).
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable name for scripts (`-o json`) and tests, e.g. `template.imdsv2`.
    pub id: &'static str,
    pub title: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub fn pass(id: &'static str, title: &'static str, detail: impl Into<String>) -> Check {
        Check {
            id,
            title,
            outcome: Outcome::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn fail(
        id: &'static str,
        title: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            id,
            title,
            outcome: Outcome::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn skip(id: &'static str, title: &'static str, detail: impl Into<String>) -> Check {
        Check {
            id,
            title,
            outcome: Outcome::Skip,
            detail: detail.into(),
            fix: None,
        }
    }

    /// Pass when `ok`, else fail with `fix`; for checks whose detail reads the same either way.
    pub fn verdict(
        id: &'static str,
        title: &'static str,
        ok: bool,
        detail: impl Into<String>,
        fix: impl FnOnce() -> String,
    ) -> Check {
        if ok {
            Check::pass(id, title, detail)
        } else {
            Check::fail(id, title, detail, fix())
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub cluster: String,
    pub ok: bool,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn new(cluster: &str, checks: Vec<Check>) -> Report {
        Report {
            cluster: cluster.to_string(),
            ok: checks.iter().all(|c| c.outcome != Outcome::Fail),
            checks,
        }
    }

    pub fn render(&self) -> String {
        let width = self.checks.iter().map(|c| c.title.len()).max().unwrap_or(0);
        let mut o = String::new();
        let _ = writeln!(o, "dtctl doctor: cluster {}", self.cluster);
        for c in &self.checks {
            let mark = match c.outcome {
                Outcome::Pass => '✔',
                Outcome::Fail => '✖',
                Outcome::Skip => '–',
            };
            let _ = writeln!(o, "{mark} {:width$}  {}", c.title, c.detail);
            if let Some(fix) = &c.fix {
                let _ = writeln!(o, "  {:width$}  fix: {fix}", "");
            }
        }
        let failed = self.checks.iter().filter(|c| c.outcome == Outcome::Fail);
        match failed.count() {
            0 => o.push_str("Every check passed.\n"),
            1 => o.push_str("1 check failed.\n"),
            n => {
                let _ = writeln!(o, "{n} checks failed.");
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_fails_the_report_and_shows_its_fix() {
        let r = Report::new(
            "demo",
            vec![
                Check::pass("a", "first", "fine"),
                Check::skip("b", "second", "not configured"),
                Check::fail("c", "third", "broken", "mend it"),
            ],
        );
        assert!(!r.ok);
        let text = r.render();
        assert!(text.contains("✔ first   fine"), "{text}");
        assert!(text.contains("– second  not configured"), "{text}");
        assert!(
            text.contains("✖ third   broken\n          fix: mend it"),
            "{text}"
        );
        assert!(text.ends_with("1 check failed.\n"), "{text}");
        let skipped_only = Report::new("demo", vec![Check::skip("b", "second", "n/a")]);
        assert!(skipped_only.ok);
    }
}
