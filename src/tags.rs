//! An instance's tags: a handful of pairs, kept in a vector.
//!
//! EC2 instances carry few tags, and decide reads four of them for every instance on every pass:
//! a linear scan that compares lengths before bytes costs a fraction of an ordered-map look-up,
//! which compared the bytes of every key it passed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "BTreeMap<String, String>", into = "BTreeMap<String, String>")]
pub struct Tags(Vec<(String, String)>);

impl Tags {
    pub fn get(&self, key: &str) -> Option<&String> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`, returning its previous value.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.0.push((key, value));
                None
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let pos = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.swap_remove(pos).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(k, v)| (k, v))
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
        tags.0.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map() {
        let mut t = Tags::from([("a".to_string(), "1".to_string())]);
        assert_eq!(t.insert("a".into(), "2".into()), Some("1".into()));
        assert_eq!(t.insert("b".into(), "3".into()), None);
        assert_eq!(t.get("a").map(String::as_str), Some("2"));
        assert!(t.contains_key("b") && !t.contains_key("c"));
        assert_eq!(t.remove("a"), Some("2".into()));
        assert_eq!(t.get("a"), None);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"{"b":"3"}"#);
        assert_eq!(serde_json::from_str::<Tags>(&json).unwrap(), t);
    }
}
