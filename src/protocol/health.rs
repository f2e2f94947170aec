//! The body of `health_<ip>`: what the worker's health check last said, written by `dtd agent`
//! after every run of the check and read by `dtd run` on every pass.
//!
//! The check is a program (`agent.health.command`, run as an argv). Its exit status is the
//! verdict: 0 healthy; [`GPUS_LOST_EXIT`] unhealthy because the GPUs are gone (the job cannot use
//! the worker at all, so it leaves at once); anything else, a signal, or running past its timeout,
//! unhealthy (the worker drains gracefully). The last line it prints is the reason people see.

use serde::{Deserialize, Serialize};

use super::ParseError;

/// The check's exit code for "the GPUs are gone" (fewer than the instance type has, or the
/// driver cannot reach them): no graceful drain can help, the job loses the worker now.
pub const GPUS_LOST_EXIT: i32 = 3;

/// A reason is one line for `dtctl status` and the journal.
pub const MAX_REASON_CHARS: usize = 300;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    /// Which instance checked: an IP can be reused by a new instance while the file is there.
    pub instance_id: String,
    pub ok: bool,
    /// The check exited [`GPUS_LOST_EXIT`].
    #[serde(default)]
    pub gpus_lost: bool,
    /// Why it is unhealthy (the check's last line, or how it ended); "ok" when healthy.
    pub reason: String,
    /// When the check finished, RFC 3339 to the second.
    pub when: String,
    #[serde(default)]
    pub output_tail: Vec<String>,
}

impl HealthReport {
    /// One line of JSON that fits the master's reader, dropping the oldest output lines first.
    pub fn render(mut self) -> Vec<u8> {
        self.reason = one_line(&self.reason);
        super::report::bounded(self, |r| &mut r.output_tail)
    }

    /// Parses a body read from the shared directory (untrusted: any worker can write it); the
    /// reason is cut to one printable line.
    pub fn parse(body: &[u8]) -> Result<HealthReport, ParseError> {
        let mut r: HealthReport = serde_json::from_slice(body).map_err(ParseError::Health)?;
        r.reason = one_line(&r.reason);
        Ok(r)
    }
}

/// Printable characters only, at most [`MAX_REASON_CHARS`].
pub fn one_line(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_REASON_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(tail: Vec<String>) -> HealthReport {
        HealthReport {
            instance_id: "i-0123456789abcdef0".into(),
            ok: false,
            gpus_lost: true,
            reason: "7 of 8 GPUs\nvisible".into(),
            when: "2026-11-24T09:00:00Z".into(),
            output_tail: tail,
        }
    }

    #[test]
    fn round_trips_on_one_line() {
        let body = report(vec!["a".into()]).render();
        assert_eq!(body.iter().filter(|b| **b == b'\n').count(), 1);
        let back = HealthReport::parse(&body).unwrap();
        assert_eq!(back.reason, "7 of 8 GPUsvisible");
        assert!(back.gpus_lost && !back.ok);
    }

    #[test]
    fn a_long_output_keeps_the_newest_lines_within_the_limit() {
        let tail: Vec<String> = (0..40)
            .map(|i| format!("{i} {}", "x".repeat(1000)))
            .collect();
        let body = report(tail).render();
        assert!(body.len() <= super::super::report::RENDER_LIMIT + 1);
        let back = HealthReport::parse(&body).unwrap();
        assert!(back.output_tail.last().unwrap().starts_with("39 "));
    }

    #[test]
    fn garbage_is_refused() {
        assert!(HealthReport::parse(b"{\"ok\": true}").is_err());
        assert!(HealthReport::parse(b"\xff").is_err());
    }
}
