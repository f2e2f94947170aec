//! With `job.launcher`: the workers' security groups admit the rendezvous port (TCP
//! `job.launcher.rdzv.port`) from the workers, or torchrun on every node but the first waits out
//! its join timeout and the job never starts.

use super::{file_system, ingress, template::Workers, Check, Context};
use crate::aws::describe_error;

const ID: &str = "workers.rendezvous";
const TITLE: &str = "workers: rendezvous port";

/// `None` without a launcher: nothing to check, and nothing to skip either.
pub async fn check(
    cx: &Context<'_>,
    workers: &Workers,
    subnets: &file_system::Subnets,
) -> Option<Check> {
    let port = i32::from(cx.cfg.job.launcher.as_ref()?.rdzv.port);
    if workers.security_groups.is_empty() {
        let why = "the launch template and the group name no security group";
        return Some(Check::skip(ID, TITLE, why));
    }
    let call = (cx.ec2.describe_security_groups())
        .set_group_ids(Some(workers.security_groups.iter().cloned().collect()));
    let groups = match call.send().await {
        Ok(out) => out.security_groups().to_vec(),
        Err(e) => {
            let text = format!("DescribeSecurityGroups failed: {}", describe_error(&e));
            return Some(Check::fail(
                ID,
                TITLE,
                text,
                "let the role call ec2:DescribeSecurityGroups",
            ));
        }
    };
    // Without the subnets only a rule naming a worker group can be seen to admit the port.
    let cidrs: Vec<&str> = (subnets.iter().flat_map(|s| s.values()))
        .map(|(_, c)| c.as_str())
        .collect();
    let from = workers.groups_text();
    if ingress::admits(&groups, port, &workers.security_groups, &cidrs) {
        return Some(Check::pass(
            ID,
            TITLE,
            format!("TCP {port} open between workers ({from})"),
        ));
    }
    let sg = workers
        .security_groups
        .first()
        .map_or("WORKER_SG", String::as_str);
    Some(Check::fail(
        ID,
        TITLE,
        format!("no rule of {from} admits TCP {port} (job.launcher.rdzv.port) from the workers"),
        format!(
            "aws ec2 authorize-security-group-ingress --group-id {sg} --protocol tcp --port {port} --source-group {sg}"
        ),
    ))
}
