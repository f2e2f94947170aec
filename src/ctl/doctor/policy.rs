//! Reading IAM-style policy documents (file system and queue policies), whose elements AWS lets
//! be written either as one value or as a list of them (IAM User Guide, "IAM JSON policy element
//! reference").

use serde_json::Value;

/// The policy's statements: `Statement` as a list, or the one statement it holds.
pub fn statements(policy: &Value) -> Vec<Value> {
    match &policy["Statement"] {
        Value::Array(list) => list.clone(),
        one @ Value::Object(_) => vec![one.clone()],
        _ => Vec::new(),
    }
}

/// Whether an element (a string or a list of them) holds `want`.
pub fn one_of(v: &Value, want: &str) -> bool {
    match v {
        Value::String(s) => s == want,
        Value::Array(list) => list.iter().any(|x| x.as_str() == Some(want)),
        _ => false,
    }
}
