//! Whether the file system's mount targets in the workers' zones admit NFS from the workers:
//! by their security group, or by a CIDR that covers every worker subnet.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{IpPermission, SecurityGroup};

use super::{Subnets, Targets};
use crate::aws::describe_error;
use crate::ctl::doctor::template::Workers;
use crate::ctl::doctor::{Check, Context};

pub(super) const NFS: &str = "file system: NFS from workers";
const NFS_PORT: i32 = 2049;

pub(super) async fn check(
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

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{IpRange, UserIdGroupPair};

    fn group(rule: IpPermission) -> SecurityGroup {
        SecurityGroup::builder().ip_permissions(rule).build()
    }

    #[test]
    fn nfs_is_admitted_by_group_or_by_a_covering_cidr() {
        let workers: BTreeSet<String> = ["sg-w".to_string()].into();
        let from_workers = |port: i32| {
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(port)
                .to_port(port)
                .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-w").build())
                .build()
        };
        let by_group = from_workers(2049);
        assert!(admits_nfs(&[group(by_group)], &workers, &["10.0.1.0/24"]));
        let wrong_port = from_workers(22);
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
