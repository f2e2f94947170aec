//! The shared file system through the EFS API: it is available, every Availability Zone the
//! workers launch in has a mount target (a worker elsewhere can never mount it, so its marker
//! never comes), those mount targets admit NFS from the workers' security groups, and the file
//! system policy refuses connections without TLS.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{IpPermission, SecurityGroup};
use aws_sdk_efs::types::{LifeCycleState, MountTargetDescription};
use serde_json::Value;

use super::policy::{one_of, statements};
use super::template::Workers;
use super::{Check, Context};
use crate::aws::describe_error;

const AVAILABLE: &str = "file system";
const TARGETS: &str = "file system: mount targets";
const NFS: &str = "file system: NFS from workers";
const TLS: &str = "file system: TLS required";
const NFS_PORT: i32 = 2049;

pub async fn checks(cx: &Context<'_>, workers: &Workers) -> Vec<Check> {
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
            Check::skip("efs.security_groups", NFS, needs),
            Check::skip("efs.tls_policy", TLS, needs),
        ];
    }
    let targets = mount_targets(&efs, fs).await;
    let subnets = subnets(cx, &workers.subnets).await;
    vec![
        available,
        zones_check(fs, &targets, &subnets),
        nfs_check(cx, &efs, fs, &targets, &subnets, workers).await,
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
type Targets = Result<Vec<MountTargetDescription>, String>;
/// Worker subnets by id: (Availability Zone, IPv4 CIDR), or why they could not be read.
type Subnets = Result<BTreeMap<String, (String, String)>, String>;

async fn mount_targets(efs: &aws_sdk_efs::Client, fs: &str) -> Targets {
    (crate::observe::efs::mount_targets(efs, fs).await).map_err(|e| e.to_string())
}

async fn subnets(cx: &Context<'_>, ids: &BTreeSet<String>) -> Subnets {
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let out = (cx.ec2.describe_subnets())
        .set_subnet_ids(Some(ids.iter().cloned().collect()))
        .send()
        .await
        .map_err(|e| format!("DescribeSubnets failed: {}", describe_error(&e)))?;
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
                e.clone(),
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

async fn nfs_check(
    cx: &Context<'_>,
    efs: &aws_sdk_efs::Client,
    fs: &str,
    targets: &Targets,
    subnets: &Subnets,
    workers: &Workers,
) -> Check {
    let (Ok(targets), Ok(subnets)) = (targets, subnets) else {
        return Check::skip(
            "efs.security_groups",
            NFS,
            "needs the mount targets and subnets",
        );
    };
    if workers.security_groups.is_empty() {
        return Check::skip(
            "efs.security_groups",
            NFS,
            "the launch template names no security group, so the workers' groups are unknown",
        );
    }
    let zones: BTreeSet<&str> = subnets.values().map(|(z, _)| z.as_str()).collect();
    let cidrs: Vec<&str> = subnets.values().map(|(_, c)| c.as_str()).collect();
    let mut closed = Vec::new();
    for t in targets {
        if !t
            .availability_zone_name()
            .is_some_and(|z| zones.contains(z))
        {
            continue;
        }
        let id = t.mount_target_id();
        match target_groups(cx, efs, id).await {
            Ok(groups) if admits_nfs(&groups, &workers.security_groups, &cidrs) => {}
            Ok(_) => closed.push(id.to_string()),
            Err(e) => return Check::fail("efs.security_groups", NFS, e, "let the role read them"),
        }
    }
    let from = workers
        .security_groups
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if closed.is_empty() {
        return Check::pass(
            "efs.security_groups",
            NFS,
            format!("TCP {NFS_PORT} open to {from}"),
        );
    }
    Check::fail(
        "efs.security_groups",
        NFS,
        format!(
            "mount target {} of {fs} admits no NFS (TCP {NFS_PORT}) from {from}",
            closed.join(", ")
        ),
        format!(
            "aws ec2 authorize-security-group-ingress --group-id MOUNT_TARGET_SG --protocol tcp \
             --port {NFS_PORT} --source-group {}",
            workers
                .security_groups
                .first()
                .map_or("WORKER_SG", String::as_str)
        ),
    )
}

async fn target_groups(
    cx: &Context<'_>,
    efs: &aws_sdk_efs::Client,
    target: &str,
) -> Result<Vec<SecurityGroup>, String> {
    let ids = (efs
        .describe_mount_target_security_groups()
        .mount_target_id(target))
    .send()
    .await
    .map_err(|e| {
        format!(
            "DescribeMountTargetSecurityGroups {target}: {}",
            describe_error(&e)
        )
    })?
    .security_groups()
    .to_vec();
    let out = (cx.ec2.describe_security_groups())
        .set_group_ids(Some(ids))
        .send()
        .await
        .map_err(|e| {
            format!(
                "DescribeSecurityGroups for {target}: {}",
                describe_error(&e)
            )
        })?;
    Ok(out.security_groups().to_vec())
}

/// Whether any rule of `groups` lets TCP 2049 in from one of `from` or from a CIDR covering every
/// worker subnet.
fn admits_nfs(groups: &[SecurityGroup], from: &BTreeSet<String>, worker_cidrs: &[&str]) -> bool {
    let rules = groups.iter().flat_map(|g| g.ip_permissions());
    rules.filter(|r| covers_nfs(r)).any(|r| {
        let by_group = (r.user_id_group_pairs().iter())
            .any(|p| p.group_id().is_some_and(|g| from.contains(g)));
        let by_cidr = !worker_cidrs.is_empty()
            && worker_cidrs.iter().all(|w| {
                (r.ip_ranges().iter())
                    .any(|range| range.cidr_ip().is_some_and(|c| cidr_contains(c, w)))
            });
        by_group || by_cidr
    })
}

fn covers_nfs(rule: &IpPermission) -> bool {
    match rule.ip_protocol() {
        Some("-1") => true,
        Some("tcp") | Some("6") => {
            let from = rule.from_port().unwrap_or(0);
            let to = rule.to_port().unwrap_or(65535);
            from <= NFS_PORT && NFS_PORT <= to
        }
        _ => false,
    }
}

/// Whether IPv4 network `outer` contains network `inner` (both `a.b.c.d/n`).
fn cidr_contains(outer: &str, inner: &str) -> bool {
    let parse = |c: &str| -> Option<(u32, u32)> {
        let (ip, len) = c.split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
        Some((u32::from(ip), len))
    };
    let (Some((o, ol)), Some((i, il))) = (parse(outer), parse(inner)) else {
        return false;
    };
    let mask = if ol == 0 { 0 } else { u32::MAX << (32 - ol) };
    ol <= il && (o & mask) == (i & mask)
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
    use aws_sdk_ec2::types::{IpRange, UserIdGroupPair};

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

    fn group(rule: IpPermission) -> SecurityGroup {
        SecurityGroup::builder().ip_permissions(rule).build()
    }

    #[test]
    fn nfs_is_admitted_by_group_or_by_a_covering_cidr() {
        let workers: BTreeSet<String> = ["sg-w".to_string()].into();
        let by_group = IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(2049)
            .to_port(2049)
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-w").build())
            .build();
        assert!(admits_nfs(&[group(by_group)], &workers, &["10.0.1.0/24"]));
        let wrong_port = IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(22)
            .to_port(22)
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-w").build())
            .build();
        assert!(!admits_nfs(
            &[group(wrong_port)],
            &workers,
            &["10.0.1.0/24"]
        ));
        let cidr = |c: &str| {
            IpPermission::builder()
                .ip_protocol("-1")
                .ip_ranges(IpRange::builder().cidr_ip(c).build())
                .build()
        };
        assert!(admits_nfs(
            &[group(cidr("10.0.0.0/16"))],
            &workers,
            &["10.0.1.0/24", "10.0.2.0/24"]
        ));
        assert!(!admits_nfs(
            &[group(cidr("10.0.1.0/24"))],
            &workers,
            &["10.0.1.0/24", "10.0.2.0/24"]
        ));
    }

    #[test]
    fn cidr_containment() {
        assert!(cidr_contains("0.0.0.0/0", "10.0.1.0/24"));
        assert!(cidr_contains("10.0.0.0/16", "10.0.255.0/24"));
        assert!(!cidr_contains("10.0.1.0/24", "10.0.0.0/16"));
        assert!(!cidr_contains("10.1.0.0/16", "10.0.1.0/24"));
        assert!(!cidr_contains("nonsense", "10.0.1.0/24"));
    }
}
