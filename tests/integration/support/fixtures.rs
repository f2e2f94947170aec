//! The events of `tests/fixtures/events/` (AWS's published samples; the README there names each
//! page), and the stack template's own EventBridge rule patterns.

use std::path::PathBuf;

use serde_json::Value as Json;

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events")
}

/// A fixture's `event`, as published (placeholders left in).
pub fn published(name: &str) -> Json {
    let text = std::fs::read_to_string(dir().join(name)).expect("reading a fixture");
    let v: Json = serde_json::from_str(&text).expect("fixture JSON");
    v["event"].clone()
}

/// A fixture's `event` with its placeholders filled in: only string values equal to a
/// placeholder, or containing a bracketed one, change (keys never do).
pub fn filled(name: &str) -> Json {
    let text = std::fs::read_to_string(dir().join(name)).expect("reading a fixture");
    let v: Json = serde_json::from_str(&text).expect("fixture JSON");
    let mut event = v["event"].clone();
    if let Some(map) = v["placeholders"].as_object() {
        fill(&mut event, map);
    }
    event
}

fn fill(v: &mut Json, map: &serde_json::Map<String, Json>) {
    match v {
        Json::String(s) => {
            for (k, with) in map {
                let with = with.as_str().unwrap_or_default();
                if s == k {
                    *s = with.to_string();
                } else if k.starts_with('[') && s.contains(k.as_str()) {
                    *s = s.replace(k.as_str(), with);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(|i| fill(i, map)),
        Json::Object(o) => o.values_mut().for_each(|i| fill(i, map)),
        _ => {}
    }
}

/// The detail-type, however the sample spells the key (`detail-type`, or `detail_type` on the
/// Capacity Blocks page).
pub fn detail_type(event: &Json) -> String {
    event
        .get("detail-type")
        .or_else(|| event.get("detail_type"))
        .and_then(Json::as_str)
        .expect("detail-type")
        .to_string()
}

/// A PutEvents entry carrying the event's source, detail-type, resources and detail, as the
/// AWS service would put it on the bus.
pub fn put_events_entry(event: &Json) -> Json {
    let resources = match &event["resources"] {
        Json::Array(a) => a.clone(),
        // The interruptible Capacity Reservation sample gives one ARN as a string.
        Json::String(s) => vec![Json::String(s.clone())],
        _ => vec![],
    };
    serde_json::json!({
        "Source": event["source"],
        "DetailType": detail_type(event),
        "Resources": resources,
        "Detail": event["detail"].to_string(),
    })
}

/// An EventBridge rule's `EventPattern` in the stack template, as JSON; `${AWS::StackName}` is
/// replaced by `stack`.
pub fn stack_rule_pattern(rule: &str, stack: &str) -> Json {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cloudformation/dynamic-training.yaml");
    let text = std::fs::read_to_string(path).expect("reading the template");
    let t: serde_yaml::Value = serde_yaml::from_str(&text).expect("template YAML");
    let pattern = &t["Resources"][rule]["Properties"]["EventPattern"];
    let json = serde_json::to_string(&untagged(pattern)).expect("pattern as JSON");
    serde_json::from_str(&json.replace("${AWS::StackName}", stack)).expect("pattern JSON")
}

/// `!Sub "..."` read as its string.
fn untagged(v: &serde_yaml::Value) -> serde_yaml::Value {
    match v {
        serde_yaml::Value::Tagged(t) => untagged(&t.value),
        serde_yaml::Value::Sequence(s) => s.iter().map(untagged).collect(),
        serde_yaml::Value::Mapping(m) => {
            serde_yaml::Value::Mapping(m.iter().map(|(k, v)| (k.clone(), untagged(v))).collect())
        }
        other => other.clone(),
    }
}

/// What EC2 puts on the bus when `instance` enters `state` (the sample of "State change events
/// for Amazon EC2 instances", Amazon EC2 User Guide), as a PutEvents entry: moto emits none.
pub fn state_change_entry(instance: &str, state: &str) -> Json {
    let mut event = filled("instance-state-change.json");
    event["detail"]["instance-id"] = instance.into();
    event["detail"]["state"] = state.into();
    let arn = format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}");
    event["resources"] = serde_json::json!([arn]);
    put_events_entry(&event)
}

/// What AWS puts on the bus when `key` is deleted from `instance` ("Monitor tag changes with
/// serverless workflows and Amazon EventBridge", Tag Editor User Guide): the sample with that
/// instance, that key changed, and the tags it has left.
pub fn tag_deleted_entry(instance: &str, key: &str, left: &[(&str, &str)]) -> Json {
    let mut event = filled("tag-change-on-resource.json");
    let arn = format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}");
    event["resources"] = serde_json::json!([arn]);
    event["detail"]["changed-tag-keys"] = serde_json::json!([key]);
    let tags: serde_json::Map<String, Json> = (left.iter())
        .map(|(k, v)| (k.to_string(), Json::from(*v)))
        .collect();
    event["detail"]["tags"] = Json::Object(tags);
    put_events_entry(&event)
}
