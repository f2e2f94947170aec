//! The key a refusal is journaled once under (`State::refused`): one kind of lie in one file,
//! so the same lie seen again on the next pass is shown but not journaled again.
//!
//! state.json keeps each key as the string dtd has always written (`ack:7`,
//! `report:health_10.0.0.5:unsigned`), so a state written by an earlier dtd still reads, and a
//! key no kind here builds (a later dtd's) is kept as read instead of failing the whole state.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum RefusalKey {
    /// `agent-key:<instance>:<key>`: the instance's agent-key tag changed to `key` (its short
    /// form) from the one dtd pinned.
    AgentKeyChanged { instance: String, key: String },
    /// `report:<file>:<class>`: a report not believed, once per file and kind of lie.
    Report { file: String, class: String },
    /// `file:<why>`: a job file someone other than the job's user owns.
    File { why: String },
    /// `ack:<generation>`: an acknowledgement of a generation dtd never wrote.
    Ack { claimed: u64 },
    /// `marker:prepare_data_<success|failed>:<instance>:<named>`: a marker at the instance's IP
    /// naming another instance.
    ForeignMarker {
        failed: bool,
        instance: String,
        named: String,
    },
    /// `agent-drain:<notice>`: an agent's notice that would drain its worker, reported only.
    AgentDrain { notice: String },
    /// `notice:<notice>`: an agent's interruption notice not believed.
    Notice { notice: String },
    /// A key none of the above reads back exactly, as state.json held it. Made only by parsing.
    Other(String),
}

const SUCCESS_MARKER: &str = "prepare_data_success";
const FAILED_MARKER: &str = "prepare_data_failed";

impl fmt::Display for RefusalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalKey::AgentKeyChanged { instance, key } => {
                write!(f, "agent-key:{instance}:{key}")
            }
            RefusalKey::Report { file, class } => write!(f, "report:{file}:{class}"),
            RefusalKey::File { why } => write!(f, "file:{why}"),
            RefusalKey::Ack { claimed } => write!(f, "ack:{claimed}"),
            RefusalKey::ForeignMarker {
                failed,
                instance,
                named,
            } => {
                let file = if *failed {
                    FAILED_MARKER
                } else {
                    SUCCESS_MARKER
                };
                write!(f, "marker:{file}:{instance}:{named}")
            }
            RefusalKey::AgentDrain { notice } => write!(f, "agent-drain:{notice}"),
            RefusalKey::Notice { notice } => write!(f, "notice:{notice}"),
            RefusalKey::Other(key) => f.write_str(key),
        }
    }
}

impl From<String> for RefusalKey {
    /// Never fails: a key that does not read back as the same string stays as it was.
    fn from(key: String) -> RefusalKey {
        match parse(&key) {
            Some(parsed) if parsed.to_string() == key => parsed,
            _ => RefusalKey::Other(key),
        }
    }
}

impl From<RefusalKey> for String {
    fn from(key: RefusalKey) -> String {
        key.to_string()
    }
}

/// The kind a key's prefix names, with its fields; the caller checks it reads back the same.
fn parse(key: &str) -> Option<RefusalKey> {
    let (kind, rest) = key.split_once(':')?;
    let owned = |s: &str| s.to_string();
    Some(match kind {
        "agent-key" => {
            let (instance, key) = rest.split_once(':')?;
            RefusalKey::AgentKeyChanged {
                instance: owned(instance),
                key: owned(key),
            }
        }
        // A file's name may hold colons (an IPv6 worker's); a class never does.
        "report" => {
            let (file, class) = rest.rsplit_once(':')?;
            RefusalKey::Report {
                file: owned(file),
                class: owned(class),
            }
        }
        "file" => RefusalKey::File { why: owned(rest) },
        "ack" => RefusalKey::Ack {
            claimed: rest.parse().ok()?,
        },
        "marker" => {
            let (file, rest) = rest.split_once(':')?;
            let (instance, named) = rest.split_once(':')?;
            RefusalKey::ForeignMarker {
                failed: match file {
                    SUCCESS_MARKER => false,
                    FAILED_MARKER => true,
                    _ => return None,
                },
                instance: owned(instance),
                named: owned(named),
            }
        }
        "agent-drain" => RefusalKey::AgentDrain {
            notice: owned(rest),
        },
        "notice" => RefusalKey::Notice {
            notice: owned(rest),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::State;

    fn every_kind() -> Vec<(RefusalKey, &'static str)> {
        let s = |t: &str| t.to_string();
        vec![
            (
                RefusalKey::AgentKeyChanged {
                    instance: s("i-0abc"),
                    key: s("MCowBQYDK2Vw"),
                },
                "agent-key:i-0abc:MCowBQYDK2Vw",
            ),
            (
                RefusalKey::Report {
                    file: s("health_fe80::5"),
                    class: s("unsigned"),
                },
                "report:health_fe80::5:unsigned",
            ),
            (
                RefusalKey::File {
                    why: s("ack is owned by uid 0: not read"),
                },
                "file:ack is owned by uid 0: not read",
            ),
            (RefusalKey::Ack { claimed: 7 }, "ack:7"),
            (
                RefusalKey::ForeignMarker {
                    failed: false,
                    instance: s("i-0abc"),
                    named: s("i-0other:x"),
                },
                "marker:prepare_data_success:i-0abc:i-0other:x",
            ),
            (
                RefusalKey::ForeignMarker {
                    failed: true,
                    instance: s("i-0abc"),
                    named: s(""),
                },
                "marker:prepare_data_failed:i-0abc:",
            ),
            (
                RefusalKey::AgentDrain { notice: s("n-1") },
                "agent-drain:n-1",
            ),
            (RefusalKey::Notice { notice: s("e:2:3") }, "notice:e:2:3"),
        ]
    }

    #[test]
    fn every_kind_reads_back_from_the_string_dtd_has_always_written() {
        for (key, text) in every_kind() {
            assert_eq!(key.to_string(), text);
            assert_eq!(RefusalKey::from(text.to_string()), key, "{text}");
        }
    }

    #[test]
    fn a_key_no_kind_reads_back_exactly_is_kept_as_it_was() {
        for text in [
            "ack:007",
            "ack:x",
            "marker:other:i-1:x",
            "later-kind:1",
            "plain",
        ] {
            let key = RefusalKey::from(text.to_string());
            assert_eq!(key, RefusalKey::Other(text.to_string()));
            assert_eq!(key.to_string(), text);
        }
    }

    #[test]
    fn an_earlier_state_files_refusals_read_and_are_written_back_the_same() {
        let old = r#"{"generation": 3, "members": [], "removals": [],
            "refused": ["ack:9", "report:health_10.0.0.5:signature", "someday:a:b"]}"#;
        let state: State = serde_json::from_str(old).expect("state.json of an earlier dtd");
        assert!(state.refused.contains(&RefusalKey::Ack { claimed: 9 }));
        assert!(state.refused.contains(&RefusalKey::Report {
            file: "health_10.0.0.5".into(),
            class: "signature".into(),
        }));
        assert!(state
            .refused
            .contains(&RefusalKey::Other("someday:a:b".into())));
        let written = serde_json::to_value(&state).expect("state");
        let mut keys: Vec<&str> = (written["refused"].as_array().expect("an array").iter())
            .filter_map(|k| k.as_str())
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["ack:9", "report:health_10.0.0.5:signature", "someday:a:b"]
        );
    }
}
