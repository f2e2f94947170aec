//! Whether security groups admit TCP on a port from the workers: by a rule naming one of the
//! workers' groups, or by a CIDR that covers every worker subnet (the file system's NFS, the
//! launchers' rendezvous).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{IpPermission, SecurityGroup};

/// Whether any rule of `groups` lets TCP `port` in from one of `from` or from a CIDR covering
/// every worker subnet.
pub fn admits(
    groups: &[SecurityGroup],
    port: i32,
    from: &BTreeSet<String>,
    worker_cidrs: &[&str],
) -> bool {
    let rules = groups.iter().flat_map(|g| g.ip_permissions());
    rules.filter(|r| covers(r, port)).any(|r| {
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

fn covers(rule: &IpPermission, port: i32) -> bool {
    match rule.ip_protocol() {
        Some("-1") => true,
        Some("tcp") | Some("6") => {
            let from = rule.from_port().unwrap_or(0);
            let to = rule.to_port().unwrap_or(65535);
            from <= port && port <= to
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
    fn a_port_is_admitted_by_group_or_by_a_covering_cidr() {
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
        assert!(admits(&[group(by_group)], 2049, &workers, &["10.0.1.0/24"]));
        let wrong_port = from_workers(22);
        assert!(!admits(
            &[group(wrong_port)],
            2049,
            &workers,
            &["10.0.1.0/24"]
        ));
        let cidr = |c: &str| {
            IpPermission::builder()
                .ip_protocol("-1")
                .ip_ranges(IpRange::builder().cidr_ip(c).build())
                .build()
        };
        assert!(admits(
            &[group(cidr("10.0.0.0/16"))],
            2049,
            &workers,
            &["10.0.1.0/24", "10.0.2.0/24"]
        ));
        assert!(!admits(
            &[group(cidr("10.0.1.0/24"))],
            2049,
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
