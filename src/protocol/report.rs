//! The bodies of the prepare-data markers: JSON that `dtd agent` writes and the master reads.
//!
//! The master reads them leniently: a marker may come from a 2018-style script (an empty success
//! marker, a failure report of its own shape), and is only ever summarised for people.

use serde::{Deserialize, Serialize};

use super::ParseError;

/// The master reads at most [`MAX_REPORT_BYTES`](super::markers::MAX_REPORT_BYTES) of a report;
/// the agent drops the oldest output lines to stay well under it.
pub(super) const RENDER_LIMIT: usize = 12 * 1024;

/// The body of `prepare_data_success_<ip>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuccessReport {
    /// Which instance prepared: an IP can be reused by a new instance while the marker is there.
    pub instance_id: String,
    pub attempts: u32,
    pub duration_s: f64,
    pub output_tail: Vec<String>,
}

/// The body of `prepare_data_failed_<ip>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureReport {
    pub instance_id: String,
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub attempts: u32,
    pub duration_s: f64,
    pub output_tail: Vec<String>,
    /// Why the program could not be started or waited for, when that is what failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SuccessReport {
    /// One line of JSON that fits the master's reader.
    pub fn render(self) -> Vec<u8> {
        bounded(self, |r| &mut r.output_tail)
    }
}

impl FailureReport {
    /// One line of JSON that fits the master's reader.
    pub fn render(self) -> Vec<u8> {
        bounded(self, |r| &mut r.output_tail)
    }
}

/// The report's JSON and a newline, dropping the oldest output lines until it fits; the last
/// line, usually the one that says what went wrong, is the one kept longest.
pub(super) fn bounded<T: Serialize>(
    mut report: T,
    tail: fn(&mut T) -> &mut Vec<String>,
) -> Vec<u8> {
    loop {
        // Serializing these plain structs cannot fail.
        let mut json = serde_json::to_vec(&report).unwrap_or_default();
        let lines = tail(&mut report);
        if json.len() <= RENDER_LIMIT || lines.is_empty() {
            json.push(b'\n');
            return json;
        }
        lines.remove(0);
    }
}

/// The instance a marker's body names, if it names one (a 2018-style marker does not).
pub fn owner(body: &[u8]) -> Option<String> {
    let v = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    v.get("instance_id")?.as_str().map(str::to_string)
}

/// A failure report in one line for people: `exit 3 after 2 attempt(s): disk full`. Any JSON
/// object will do; what it lacks is shown as unknown.
pub fn summary(body: &str) -> Result<String, ParseError> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(ParseError::Failure)?;
    let code = v.get("exit_code").map_or("?".into(), |c| c.to_string());
    let attempts = v.get("attempts").and_then(|a| a.as_u64()).unwrap_or(1);
    let last = match v.get("output_tail") {
        Some(serde_json::Value::Array(lines)) => {
            lines.last().and_then(|l| l.as_str()).unwrap_or("")
        }
        Some(serde_json::Value::String(s)) => s.lines().last().unwrap_or(""),
        _ => "",
    };
    // A program that never ran (refused, not found) printed nothing: the agent's reason is all.
    if let Some(error) = v.get("error").and_then(|e| e.as_str()) {
        let error = printable(error, 400);
        return Ok(format!("not started after {attempts} attempt(s): {error}"));
    }
    let last = printable(last, 200);
    Ok(format!("exit {code} after {attempts} attempt(s): {last}"))
}

/// At most `limit` characters of a worker's text, without control characters.
fn printable(text: &str, limit: usize) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(tail: &[&str]) -> FailureReport {
        FailureReport {
            instance_id: "i-1".into(),
            exit_code: Some(3),
            signal: None,
            timed_out: false,
            attempts: 2,
            duration_s: 1.5,
            output_tail: tail.iter().map(|s| s.to_string()).collect(),
            error: None,
        }
    }

    #[test]
    fn a_failure_report_round_trips_and_summarises() {
        let report = failure(&["a", "disk full"]);
        let body = report.clone().render();
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            "{\"instance_id\":\"i-1\",\"exit_code\":3,\"timed_out\":false,\"attempts\":2,\
             \"duration_s\":1.5,\"output_tail\":[\"a\",\"disk full\"]}\n"
        );
        assert_eq!(
            serde_json::from_slice::<FailureReport>(&body).unwrap(),
            report
        );
        let text = String::from_utf8(body.clone()).unwrap();
        assert_eq!(
            summary(&text).unwrap(),
            "exit 3 after 2 attempt(s): disk full"
        );
        assert_eq!(owner(&body).as_deref(), Some("i-1"));
    }

    #[test]
    fn a_success_report_round_trips_and_names_its_owner() {
        let report = SuccessReport {
            instance_id: "i-2".into(),
            attempts: 1,
            duration_s: 0.25,
            output_tail: vec!["ok".into()],
        };
        let body = report.clone().render();
        assert_eq!(
            serde_json::from_slice::<SuccessReport>(&body).unwrap(),
            report
        );
        assert_eq!(owner(&body).as_deref(), Some("i-2"));
    }

    #[test]
    fn other_shapes_are_read_leniently_and_garbage_is_rejected() {
        assert_eq!(owner(b""), None);
        assert_eq!(owner(b"{\"instance_id\": 7}"), None);
        let e = summary("{truncated").unwrap_err().to_string();
        assert!(e.starts_with("failure report is not JSON"), "{e}");
        let s = summary(r#"{"output_tail": "one\ntwo\u0007"}"#).unwrap();
        assert_eq!(s, "exit ? after 1 attempt(s): two");
    }

    #[test]
    fn a_program_that_never_ran_is_summarised_by_the_agents_reason() {
        let mut report = failure(&[]);
        report.exit_code = None;
        report.attempts = 1;
        report.error = Some("refused /p: /p is owned by uid 65534, not root\u{7}".into());
        let text = String::from_utf8(report.render()).unwrap();
        assert_eq!(
            summary(&text).unwrap(),
            "not started after 1 attempt(s): refused /p: /p is owned by uid 65534, not root"
        );
    }

    #[test]
    fn a_marker_fits_the_masters_reader_and_keeps_the_last_line() {
        // Quotes double in JSON: 20 such lines would be far over the reader's 16 KiB.
        let tail: Vec<String> = (0..20)
            .map(|i| format!("{i}{}", "\"".repeat(499)))
            .collect();
        let json = SuccessReport {
            instance_id: "i-1".into(),
            attempts: 1,
            duration_s: 1.0,
            output_tail: tail,
        }
        .render();
        assert!(json.len() <= RENDER_LIMIT + 1, "{}", json.len());
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let lines = v["output_tail"].as_array().unwrap();
        assert!(!lines.is_empty() && lines.len() < 20);
        assert!(lines.last().unwrap().as_str().unwrap().starts_with("19"));
    }
}
