//! The shared file system through the EFS API: it is available, every Availability Zone the
//! workers launch in has a mount target (a worker elsewhere can never mount it, so its marker
//! never comes), those mount targets admit NFS from the workers' security groups, and the file
//! system policy refuses connections without TLS.

mod nfs;

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_efs::types::{LifeCycleState, MountTargetDescription};
use serde_json::Value;

use super::policy::{one_of, statements};
use super::template::Workers;
use super::{Check, Context, ReadFailed};
use crate::aws::describe_error;

const AVAILABLE: &str = "file system";
const TARGETS: &str = "file system: mount targets";
const TLS: &str = "file system: TLS required";

pub async fn checks(cx: &Context<'_>, workers: &Workers, subnets: &Subnets) -> Vec<Check> {
    let Some(fs) = cx.cfg.shared_fs_id.as_deref() else {
        return vec![Check::skip(
            "efs.available",
            AVAILABLE,
            "none configured (shared_fs_id)",
        )];
    };
    let efs = aws_sdk_efs::Client::new(&cx.sdk);
    let available = available(&efs, fs).await;
    if available.outcome != super::Outcome::Pass {
        let needs = "needs the file system";
        return vec![
            available,
            Check::skip("efs.mount_targets", TARGETS, needs),
            Check::skip("efs.security_groups", nfs::NFS, needs),
            Check::skip("efs.tls_policy", TLS, needs),
        ];
    }
    let targets = mount_targets(&efs, fs).await;
    vec![
        available,
        zones_check(fs, &targets, subnets),
        nfs::check(cx, &efs, fs, &targets, subnets, workers).await,
        tls_check(&efs, fs).await,
    ]
}

async fn available(efs: &aws_sdk_efs::Client, fs: &str) -> Check {
    let found = match efs.describe_file_systems().file_system_id(fs).send().await {
        Ok(out) => out.file_systems().first().cloned(),
        Err(e) => {
            return Check::fail(
                "efs.available",
                AVAILABLE,
                format!("DescribeFileSystems {fs} failed: {}", describe_error(&e)),
                "check shared_fs_id and the region, and that the role may call \
                 elasticfilesystem:DescribeFileSystems",
            )
        }
    };
    let Some(found) = found else {
        return Check::fail(
            "efs.available",
            AVAILABLE,
            format!("no file system {fs}"),
            "fix shared_fs_id",
        );
    };
    let state = found.life_cycle_state();
    Check::verdict(
        "efs.available",
        AVAILABLE,
        state == &LifeCycleState::Available,
        format!("{fs} is {}", state.as_str()),
        || format!("wait until {fs} is available, or recreate it"),
    )
}

/// The mount targets, or why they could not be read.
type Targets = Result<Vec<MountTargetDescription>, ReadFailed>;
/// Worker subnets by id: (Availability Zone, IPv4 CIDR), or why they could not be read.
pub type Subnets = Result<BTreeMap<String, (String, String)>, ReadFailed>;

async fn mount_targets(efs: &aws_sdk_efs::Client, fs: &str) -> Targets {
    (crate::observe::efs::mount_targets(efs, fs).await).map_err(ReadFailed::MountTargets)
}

pub async fn subnets(cx: &Context<'_>, ids: &BTreeSet<String>) -> Subnets {
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let out = (cx.ec2.describe_subnets())
        .set_subnet_ids(Some(ids.iter().cloned().collect()))
        .send()
        .await
        .map_err(|e| ReadFailed::Subnets(describe_error(&e)))?;
    Ok((out.subnets().iter())
        .filter_map(|s| {
            let id = s.subnet_id()?.to_string();
            let zone = s.availability_zone()?.to_string();
            Some((id, (zone, s.cidr_block().unwrap_or("").to_string())))
        })
        .collect())
}

fn zones_check(fs: &str, targets: &Targets, subnets: &Subnets) -> Check {
    let (targets, subnets) = match (targets, subnets) {
        (Err(e), _) | (_, Err(e)) => {
            return Check::fail(
                "efs.mount_targets",
                TARGETS,
                e.to_string(),
                "let the role read them",
            )
        }
        (Ok(t), Ok(s)) => (t, s),
    };
    if subnets.is_empty() {
        return Check::skip(
            "efs.mount_targets",
            TARGETS,
            "neither the launch template nor the group names a subnet, so the workers' zones \
             are unknown",
        );
    }
    let served: BTreeSet<&str> = (targets.iter())
        .filter(|t| t.life_cycle_state() == &LifeCycleState::Available)
        .filter_map(|t| t.availability_zone_name())
        .collect();
    let wanted: BTreeMap<&str, &str> = (subnets.iter())
        .map(|(id, (zone, _))| (zone.as_str(), id.as_str()))
        .collect();
    let lacking: Vec<(&str, &str)> = (wanted.iter())
        .filter(|(zone, _)| !served.contains(*zone))
        .map(|(z, s)| (*z, *s))
        .collect();
    let zones = wanted.keys().copied().collect::<Vec<_>>().join(", ");
    if lacking.is_empty() {
        return Check::pass(
            "efs.mount_targets",
            TARGETS,
            format!("one in every worker zone ({zones})"),
        );
    }
    let names = lacking
        .iter()
        .map(|(z, _)| *z)
        .collect::<Vec<_>>()
        .join(", ");
    let fix = (lacking.iter())
        .map(|(_, subnet)| {
            format!("aws efs create-mount-target --file-system-id {fs} --subnet-id {subnet} --security-groups SG")
        })
        .collect::<Vec<_>>()
        .join("; ");
    Check::fail(
        "efs.mount_targets",
        TARGETS,
        format!("no available mount target in {names}: workers there cannot mount {fs}"),
        fix,
    )
}

async fn tls_check(efs: &aws_sdk_efs::Client, fs: &str) -> Check {
    let fix = || {
        format!(
            "put a file system policy on {fs} with a statement that denies every action when \
             aws:SecureTransport is false (the stack's policy does; EFS console: \"Enforce \
             in-transit encryption for all clients\")"
        )
    };
    let policy = match efs
        .describe_file_system_policy()
        .file_system_id(fs)
        .send()
        .await
    {
        Ok(out) => out.policy().unwrap_or("").to_string(),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_policy_not_found()) =>
        {
            return Check::fail(
                "efs.tls_policy",
                TLS,
                format!("{fs} has no file system policy: any client may mount it without TLS"),
                fix(),
            );
        }
        Err(e) => {
            let text = format!(
                "DescribeFileSystemPolicy {fs} failed: {}",
                describe_error(&e)
            );
            return Check::fail(
                "efs.tls_policy",
                TLS,
                text,
                "let the role call elasticfilesystem:DescribeFileSystemPolicy",
            );
        }
    };
    let ok = serde_json::from_str::<Value>(&policy).is_ok_and(|p| denies_plain_nfs(&p));
    let detail = if ok {
        "the file system policy denies access without TLS".to_string()
    } else {
        format!("the file system policy of {fs} does not deny access without TLS")
    };
    Check::verdict("efs.tls_policy", TLS, ok, detail, fix)
}

/// A statement `Deny` to everyone, for every EFS client action, when `aws:SecureTransport` is
/// false ("Enforcing encryption in transit", Amazon EFS User Guide, "Data encryption in transit").
fn denies_plain_nfs(policy: &Value) -> bool {
    statements(policy).iter().any(|s| {
        let everyone = match &s["Principal"] {
            Value::String(p) => p == "*",
            Value::Object(p) => p.get("AWS").is_some_and(|a| one_of(a, "*")),
            _ => false,
        };
        let all_actions = ["*", "elasticfilesystem:*", "elasticfilesystem:ClientMount"]
            .iter()
            .any(|a| one_of(&s["Action"], a));
        let insecure = &s["Condition"]["Bool"]["aws:SecureTransport"];
        let when_plain = one_of(insecure, "false") || insecure == &Value::Bool(false);
        s["Effect"] == "Deny" && everyone && all_actions && when_plain
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_tls_policy_is_recognized() {
        let documented = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}}
            }]
        });
        assert!(denies_plain_nfs(&documented));
        let allow_only = serde_json::json!({"Statement": {
            "Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "elasticfilesystem:ClientMount"}});
        assert!(!denies_plain_nfs(&allow_only));
        let other_condition = serde_json::json!({"Statement": [{
            "Effect": "Deny", "Principal": "*", "Action": ["elasticfilesystem:ClientWrite"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]});
        assert!(!denies_plain_nfs(&other_condition));
    }
}
