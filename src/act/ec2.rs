//! Status tags and terminations, batched: one call for many instances; the launch template as
//! a launch names it.

use crate::config::TemplateRef;
use std::collections::BTreeMap;

use aws_sdk_ec2::types::{LaunchTemplateSpecification, Tag};
use aws_sdk_ec2::Client;

use crate::aws::AwsError;
use crate::model::{WorkerStatus, STATUS_TAG};

/// Well under the API's limits on resource ids per request.
const BATCH: usize = 500;

/// Which EC2 call failed, and AWS's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ec2ActionError {
    #[error("CreateTags {tag}: {why}")]
    Tag { tag: &'static str, why: AwsError },
    #[error("TerminateInstances: {0}")]
    Terminate(AwsError),
}

pub async fn set_status_tags(
    client: &Client,
    tags: &BTreeMap<WorkerStatus, Vec<String>>,
) -> Result<(), Ec2ActionError> {
    for (status, ids) in tags {
        for chunk in ids.chunks(BATCH) {
            let tag = Tag::builder()
                .key(STATUS_TAG)
                .value(status.as_tag())
                .build();
            client
                .create_tags()
                .set_resources(Some(chunk.to_vec()))
                .tags(tag)
                .send()
                .await
                .map_err(|e| Ec2ActionError::Tag {
                    tag: status.as_tag(),
                    why: AwsError::of(&e),
                })?;
        }
    }
    Ok(())
}

/// A launch template named by id (`lt-...`) or by name, as the config may give it.
pub fn template_spec(template: &TemplateRef) -> LaunchTemplateSpecification {
    let b = LaunchTemplateSpecification::builder();
    match template {
        TemplateRef::Id(id) => b.launch_template_id(id).build(),
        TemplateRef::Name(name) => b.launch_template_name(name).build(),
    }
}

/// Returns the ids whose termination AWS accepted, and the error that stopped the rest.
pub async fn terminate(client: &Client, ids: &[String]) -> (Vec<String>, Option<Ec2ActionError>) {
    let mut done = Vec::new();
    for chunk in ids.chunks(BATCH) {
        let result = client
            .terminate_instances()
            .set_instance_ids(Some(chunk.to_vec()))
            .send()
            .await;
        match result {
            Ok(_) => done.extend_from_slice(chunk),
            Err(e) => return (done, Some(Ec2ActionError::Terminate(AwsError::of(&e)))),
        }
    }
    (done, None)
}
