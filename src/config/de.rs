//! Deserializers for values that need more checking than their type gives.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::digest::Sha256;

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    use serde::de::Error;
    let text = String::deserialize(d)?;
    let parsed = humantime::parse_duration(&text).map_err(|e| {
        D::Error::custom(format!("bad duration `{text}` ({e}); write e.g. 2s, 10m"))
    })?;
    if parsed.is_zero() {
        return Err(D::Error::custom("duration must be greater than zero"));
    }
    Ok(parsed)
}

/// A value written in more than one form (a word or a mapping, a number or a name), read whole
/// so that its form is told by its type: an untagged enum would answer a mistake with "data did
/// not match any variant", naming neither the key nor what was wrong.
pub(super) fn any_form<'de, D: Deserializer<'de>>(d: D) -> Result<serde_yaml::Value, D::Error> {
    serde_yaml::Value::deserialize(d)
}

/// The mapping form of `key`'s value, with its own unknown keys and bad values named.
pub(super) fn mapping_form<T, E>(key: &str, v: serde_yaml::Value) -> Result<T, E>
where
    T: serde::de::DeserializeOwned,
    E: serde::de::Error,
{
    named(key, T::deserialize(v).map_err(E::custom))
}

/// A uid written as a number, or why it is not one.
pub(super) fn uid(n: &serde_yaml::Number) -> Result<u32, String> {
    (n.as_u64().and_then(|n| u32::try_from(n).ok()))
        .ok_or_else(|| format!("{n} is not a uid (0 to 4294967295)"))
}

/// What a value is, in a message: "job.owner: a list is neither a uid nor a user name".
pub(super) fn form_of(v: &serde_yaml::Value) -> &'static str {
    use serde_yaml::Value;
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a word",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// `r`, its error prefixed with the key: inside a nested section serde names only the section.
pub(super) fn named<T, E: serde::de::Error>(key: &str, r: Result<T, E>) -> Result<T, E> {
    r.map_err(|e| E::custom(format!("{key}: {e}")))
}

pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// Inside `workers` serde loses the key's path (the section is parsed through RawWorkers), so
/// the message names the key itself.
pub(super) fn prepare_timeout<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    use serde::de::Error;
    duration(d)
        .map(Some)
        .map_err(|e| D::Error::custom(format!("prepare_timeout: {e}")))
}

/// A digest pinned on a program `dtd agent` runs (`crate::digest`). serde names only the
/// section of the key, so the message names the key itself.
pub(super) fn sha256<'de, D: Deserializer<'de>>(
    key: &str,
    d: D,
) -> Result<Option<Sha256>, D::Error> {
    use serde::de::Error;
    let text = String::deserialize(d)?;
    (text.parse())
        .map(Some)
        .map_err(|e| D::Error::custom(format!("{key}: {e}")))
}

pub(super) fn prepare_data_sha256<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Sha256>, D::Error> {
    sha256("agent.prepare_data_sha256", d)
}

/// Cluster names end up in tag keys and directory names, so only a safe alphabet is allowed.
pub(super) fn cluster_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    let name = String::deserialize(d)?;
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(name)
    } else {
        Err(D::Error::custom(format!(
            "cluster `{name}` must be 1-64 characters of letters, digits, '-' or '_'"
        )))
    }
}

/// An EFS file system id as the EFS API writes it: `fs-` and 8 or 17 hex digits (older ids have
/// 8). It reaches API calls and messages only, but a typo should fail here, not at the first call.
pub(super) fn file_system_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error;
    let id = String::deserialize(d)?;
    let hex = id.strip_prefix("fs-").unwrap_or("");
    let ok = (hex.len() == 8 || hex.len() == 17)
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(Some(id))
    } else {
        Err(D::Error::custom(format!(
            "shared_fs_id `{id}` is not an EFS file system id (fs- and 8 or 17 lowercase hex digits)"
        )))
    }
}

/// A size in bytes: a number, or a number and a unit (`KiB`, `MiB`, `GiB`; `K`, `M`, `G` the same).
pub(super) fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a size, e.g. 64MiB")
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u64, E> {
            Ok(n)
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<u64, E> {
            parse_byte_size(text).ok_or_else(|| {
                E::custom(format!("bad size `{text}`; write e.g. 64MiB, 512KiB, 1GiB"))
            })
        }
    }
    d.deserialize_any(Visitor)
}

fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(1 << shift)
}
