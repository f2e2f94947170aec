//! What dtd may do, asked of EC2 itself without doing it: `DryRun` answers `DryRunOperation` when
//! the caller is allowed and `UnauthorizedOperation` when not (Amazon EC2 API Reference, "Common
//! parameters", DryRun). IAM conditions on tags and launch templates are evaluated as for a real
//! call, so this is the only check that sees the role's policy as AWS applies it.

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, LaunchTemplateSpecification, Tag};

use super::{Check, Context, ReadFailed};
use crate::aws::describe_error;
use crate::model::STATUS_TAG;

const TAG: &str = "may tag workers";
const UNTAG: &str = "may remove elastic tags";
const TERMINATE: &str = "may terminate workers";
const LAUNCH: &str = "may launch from template";

pub async fn checks(cx: &Context<'_>, template: Option<String>) -> Vec<Check> {
    let mut out = Vec::new();
    match some_worker(cx).await {
        Ok(Some(id)) => {
            out.push(create_tags(cx, &id).await);
            out.push(delete_tags(cx, &id).await);
            out.push(terminate(cx, &id).await);
        }
        Ok(None) => {
            let why = "no running worker to ask about (IAM conditions depend on its tags)";
            out.push(Check::skip("perm.create_tags", TAG, why));
            out.push(Check::skip("perm.delete_tags", UNTAG, why));
            out.push(Check::skip("perm.terminate", TERMINATE, why));
        }
        Err(e) => {
            let fix = "let the role call ec2:DescribeInstances";
            out.push(Check::fail("perm.create_tags", TAG, e.to_string(), fix));
            out.push(Check::skip("perm.delete_tags", UNTAG, "needs a worker"));
            out.push(Check::skip("perm.terminate", TERMINATE, "needs a worker"));
        }
    }
    out.push(match template {
        Some(t) => run_instances(cx, &t).await,
        None => Check::skip("perm.run_instances", LAUNCH, "needs the launch template"),
    });
    out
}

async fn some_worker(cx: &Context<'_>) -> Result<Option<String>, ReadFailed> {
    let mut call = cx.ec2.describe_instances().filters(
        Filter::builder()
            .name("instance-state-name")
            .values("running")
            .values("pending")
            .build(),
    );
    for (k, v) in &cx.cfg.workers.tags {
        call = call.filters(Filter::builder().name(format!("tag:{k}")).values(v).build());
    }
    let out = (call.max_results(5).send().await)
        .map_err(|e| ReadFailed::Instances(describe_error(&e)))?;
    let mut ids = out.reservations().iter().flat_map(|r| r.instances());
    Ok(ids.find_map(|i| i.instance_id().map(str::to_string)))
}

async fn create_tags(cx: &Context<'_>, id: &str) -> Check {
    let tag = Tag::builder().key(STATUS_TAG).value("ADDED").build();
    let r = cx
        .ec2
        .create_tags()
        .dry_run(true)
        .resources(id)
        .tags(tag)
        .send()
        .await;
    verdict("perm.create_tags", TAG, "ec2:CreateTags", id, r.err())
}

async fn delete_tags(cx: &Context<'_>, id: &str) -> Check {
    let tag = Tag::builder().key(&cx.cfg.workers.elastic_tag).build();
    let r = cx
        .ec2
        .delete_tags()
        .dry_run(true)
        .resources(id)
        .tags(tag)
        .send()
        .await;
    verdict("perm.delete_tags", UNTAG, "ec2:DeleteTags", id, r.err())
}

async fn terminate(cx: &Context<'_>, id: &str) -> Check {
    let r = cx
        .ec2
        .terminate_instances()
        .dry_run(true)
        .instance_ids(id)
        .send()
        .await;
    verdict(
        "perm.terminate",
        TERMINATE,
        "ec2:TerminateInstances",
        id,
        r.err(),
    )
}

async fn run_instances(cx: &Context<'_>, template: &str) -> Check {
    let spec = LaunchTemplateSpecification::builder()
        .launch_template_id(template)
        .build();
    let r = (cx.ec2.run_instances().dry_run(true).launch_template(spec))
        .min_count(1)
        .max_count(1)
        .send()
        .await;
    verdict(
        "perm.run_instances",
        LAUNCH,
        "ec2:RunInstances",
        template,
        r.err(),
    )
}

/// A dry run never succeeds: `DryRunOperation` is the yes.
fn verdict<E: ProvideErrorMetadata + std::error::Error>(
    id: &'static str,
    title: &'static str,
    action: &str,
    on: &str,
    err: Option<E>,
) -> Check {
    let Some(err) = err else {
        return Check::fail(
            id,
            title,
            format!("{action} on {on} ran instead of a dry run"),
            "report this as a bug",
        );
    };
    match err.code() {
        Some("DryRunOperation") => Check::pass(id, title, format!("{action} on {on} (dry run)")),
        Some("UnauthorizedOperation") | Some("AccessDenied") => Check::fail(
            id,
            title,
            format!("{action} on {on} is not allowed"),
            format!("grant {action} to this role (see the IAM policy in docs/deploy.md); `aws sts decode-authorization-message` explains the refusal"),
        ),
        _ => Check::fail(
            id,
            title,
            format!("{action} dry run on {on} failed: {}", describe_error(&err)),
            "see the error; the call dtd makes would fail the same way",
        ),
    }
}
