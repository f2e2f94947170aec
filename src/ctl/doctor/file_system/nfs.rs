//! Whether the file system's mount targets in the workers' zones admit NFS from the workers:
//! by their security group, or by a CIDR that covers every worker subnet.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::SecurityGroup;

use super::{Subnets, Targets};
use crate::aws::describe_error;
use crate::ctl::doctor::ingress;
use crate::ctl::doctor::template::Workers;
use crate::ctl::doctor::{Check, Context, ReadFailed};

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
            Ok(groups) if ingress::admits(&groups, NFS_PORT, &workers.security_groups, &cidrs) => {}
            Ok(_) => closed.push(id.to_string()),
            Err(e) => {
                let detail = e.to_string();
                return Check::fail("efs.security_groups", NFS, detail, "let the role read them");
            }
        }
    }
    let from = workers.groups_text();
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
) -> Result<Vec<SecurityGroup>, ReadFailed> {
    let ids = (efs
        .describe_mount_target_security_groups()
        .mount_target_id(target))
    .send()
    .await
    .map_err(|e| ReadFailed::MountTargetGroups {
        target: target.into(),
        said: describe_error(&e),
    })?
    .security_groups()
    .to_vec();
    let out = (cx.ec2.describe_security_groups())
        .set_group_ids(Some(ids))
        .send()
        .await
        .map_err(|e| ReadFailed::SecurityGroups {
            target: target.into(),
            said: describe_error(&e),
        })?;
    Ok(out.security_groups().to_vec())
}
