//! Every instance type a worker may be has the same number of GPUs: a job places the same number
//! of processes on each node (torchrun's `--nproc-per-node`, the host files' slots), so a node
//! with more GPUs leaves some idle and one with fewer cannot start its share.

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Context};
use crate::aws::describe_error;

const ID: &str = "workers.gpus";
const TITLE: &str = "workers: GPUs per instance";

/// The check over the types the template, the group and `workers.capacity` name; `stated`: the
/// GPUs per worker `workers.capacity` says they have.
pub async fn check(cx: &Context<'_>, types: &BTreeSet<String>, stated: Option<i32>) -> Check {
    if types.is_empty() {
        let why = "no instance type named by the launch template or the group's overrides";
        return Check::skip(ID, TITLE, why);
    }
    let call = (cx.ec2.describe_instance_types())
        .set_instance_types(Some(types.iter().map(|t| t.as_str().into()).collect()));
    let found = match call.send().await {
        Ok(out) => out.instance_types().to_vec(),
        Err(e) => {
            // EC2's own words name the types it does not know; the rest as every check says it.
            let said = e.as_service_error().and_then(|s| s.meta().message());
            let why = said.map_or_else(|| describe_error(&e), str::to_string);
            let text = format!("DescribeInstanceTypes failed: {why}");
            let fix = "name instance types that exist in the region, and let the role call \
                       ec2:DescribeInstanceTypes";
            return Check::fail(ID, TITLE, text, fix);
        }
    };
    let gpus: BTreeMap<String, i32> = (found.iter())
        .filter_map(|t| Some((t.instance_type()?.as_str().to_string(), gpu_count(t))))
        .collect();
    match stated.filter(|n| gpus.values().any(|g| g != n)) {
        Some(n) => Check::fail(
            ID,
            TITLE,
            format!(
                "workers.capacity says {n} GPUs per worker; EC2 says {}",
                listed(&gpus)
            ),
            "make every choice's gpus what EC2 says its instance type has",
        ),
        None => verdict(types, &gpus),
    }
}

fn listed(gpus: &BTreeMap<String, i32>) -> String {
    let each: Vec<String> = gpus.iter().map(|(t, n)| format!("{t} {n}")).collect();
    each.join(", ")
}

fn gpu_count(t: &aws_sdk_ec2::types::InstanceTypeInfo) -> i32 {
    let gpus = t.gpu_info().map(|g| g.gpus()).unwrap_or_default();
    gpus.iter().filter_map(|g| g.count()).sum()
}

/// Pass when every type has the same count; a type EC2 did not describe is a failure too.
fn verdict(types: &BTreeSet<String>, gpus: &BTreeMap<String, i32>) -> Check {
    let unknown: Vec<&str> = (types.iter())
        .filter(|t| !gpus.contains_key(*t))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        let text = format!("EC2 does not describe {}", unknown.join(", "));
        return Check::fail(
            ID,
            TITLE,
            text,
            "name instance types that exist in the region",
        );
    }
    let counts: BTreeSet<i32> = gpus.values().copied().collect();
    let listed = listed(gpus);
    let fix = || {
        "let the launch template and the group's overrides name only instance types with the same \
         number of GPUs (a job places one process per GPU on every node alike)"
            .to_string()
    };
    let detail = match counts.len() {
        1 => format!("{listed}: the same on every type"),
        _ => format!("the types workers may be differ in GPUs: {listed}"),
    };
    Check::verdict(ID, TITLE, counts.len() == 1, detail, fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::doctor::Outcome;

    fn types(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn one_count_passes_and_two_or_an_unknown_type_fail() {
        let gpus: BTreeMap<String, i32> = [("g5.xlarge", 1), ("g6.xlarge", 1), ("g5.12xlarge", 4)]
            .map(|(t, n)| (t.to_string(), n))
            .into();
        let only = |names: &[&str]| -> BTreeMap<String, i32> {
            (gpus.iter())
                .filter(|(t, _)| names.contains(&t.as_str()))
                .map(|(t, n)| (t.clone(), *n))
                .collect()
        };
        let pair = ["g5.xlarge", "g6.xlarge"];
        let same = verdict(&types(&pair), &only(&pair));
        assert_eq!(same.outcome, Outcome::Pass, "{same:?}");
        let pair = ["g5.xlarge", "g5.12xlarge"];
        let mixed = verdict(&types(&pair), &only(&pair));
        assert_eq!(mixed.outcome, Outcome::Fail);
        assert!(
            mixed.detail.contains("g5.12xlarge 4, g5.xlarge 1"),
            "{mixed:?}"
        );
        let unknown = verdict(&types(&["g5.xlarge", "x9.huge"]), &only(&["g5.xlarge"]));
        assert_eq!(unknown.outcome, Outcome::Fail);
        assert!(unknown.detail.contains("x9.huge"), "{unknown:?}");
    }
}
