//! An instance's tags, packed: every key and value in one string, with a small table of spans.
//!
//! decide reads four tags of every instance on every pass. With a string per key and value, a
//! pass at 10,000 workers touched some 80,000 scattered allocations and was bound by memory
//! latency; packed, an instance's tags sit in two allocations, and a look-up compares lengths
//! before bytes.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(from = "BTreeMap<String, String>", into = "BTreeMap<String, String>")]
pub struct Tags {
    text: String,
    /// (key start, key end, value end) into `text`; a value starts where its key ends.
    spans: Vec<(u32, u32, u32)>,
}

impl Tags {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.spans.iter().map(|&(k, v, end)| {
            let (k, v, end) = (k as usize, v as usize, end as usize);
            (&self.text[k..v], &self.text[v..end])
        })
    }

    /// Sets `key`, returning its previous value.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let old = self.remove(&key);
        let start = self.text.len() as u32;
        self.text.push_str(&key);
        let mid = self.text.len() as u32;
        self.text.push_str(&value);
        self.spans.push((start, mid, self.text.len() as u32));
        old
    }

    /// Removes `key` (rare: tests and console edits), repacking the rest.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let old = self.get(key)?.to_string();
        let rest: Vec<(String, String)> = self
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        *self = rest.into_iter().collect();
        Some(old)
    }
}

/// Equal when they hold the same pairs, in whatever order they were set.
impl PartialEq for Tags {
    fn eq(&self, other: &Tags) -> bool {
        self.spans.len() == other.spans.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Eq for Tags {}

impl fmt::Debug for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, String)> for Tags {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        let mut tags = Tags::default();
        for (k, v) in iter {
            tags.insert(k, v);
        }
        tags
    }
}

impl<const N: usize> From<[(String, String); N]> for Tags {
    fn from(pairs: [(String, String); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl From<BTreeMap<String, String>> for Tags {
    fn from(map: BTreeMap<String, String>) -> Self {
        map.into_iter().collect()
    }
}

impl From<Tags> for BTreeMap<String, String> {
    fn from(tags: Tags) -> Self {
        tags.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map() {
        let mut t = Tags::from([("a".to_string(), "1".to_string())]);
        assert_eq!(t.insert("a".into(), "2".into()), Some("1".into()));
        assert_eq!(t.insert("bb".into(), "3".into()), None);
        assert_eq!(t.insert("".into(), "".into()), None);
        assert_eq!(t.get("a"), Some("2"));
        assert_eq!(t.get(""), Some(""));
        assert!(t.contains_key("bb") && !t.contains_key("b"));
        assert_eq!(t.remove("a"), Some("2".into()));
        assert_eq!(t.get("a"), None);
        assert_eq!(t.get("bb"), Some("3"));
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"{"":"","bb":"3"}"#);
        assert_eq!(serde_json::from_str::<Tags>(&json).unwrap(), t);
        let other_order = Tags::from([("".to_string(), "".to_string()), ("bb".into(), "3".into())]);
        assert_eq!(t, other_order);
        assert_ne!(t, Tags::from([("bb".to_string(), "3".to_string())]));
        assert!(format!("{t:?}").contains(r#""bb": "3""#));
    }
}
