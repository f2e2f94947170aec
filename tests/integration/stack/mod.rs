//! The CloudFormation stack, deployed into the emulator's CloudFormation (moto) with `aws
//! cloudformation deploy --s3-bucket`, checked resource by resource, and then used: `dtd run`
//! with the config the stack generates, a worker launched from the stack's launch template with
//! the AWS CLI, its prepare-data step, and the worker joining. in_place.rs makes a second stack,
//! with the in-place strategy, from the template's S3 URL.
//!
//! Stand-ins, each named where it is used: moto's CloudFormation does not create
//! `AWS::SQS::QueuePolicy`, ignores the group's `LifecycleHookSpecificationList` and
//! `CapacityRebalance`, and leaves a change-set-created stack without outputs; EC2's
//! `resolve:ssm:` AMI lookup does not exist in moto, so the stack's own `ImageId` parameter pins
//! an emulator AMI.
//!
//! One file per part of the stack; support.rs holds what they share.

mod delivery;
mod deploy;
mod events;
mod file_system;
mod groups;
mod iam;
mod in_place;
mod joining;
mod launch_templates;
mod policies;
mod security_groups;
mod support;

use crate::support::Moto;
use deploy::{deploy, outputs};
use events::check_events;
use file_system::check_file_system;
use groups::check_worker_group;
use iam::check_iam;
use launch_templates::{check_launch_template, check_master};
use security_groups::check_security_groups;
use support::STACK;

#[test]
fn the_stack_deploys_and_a_worker_from_its_template_joins() {
    let moto = Moto::start();
    deploy(&moto);
    let out = outputs(&moto);
    for key in [
        "MasterGroup",
        "WorkerLaunchTemplateId",
        "WorkerLaunchTemplateName",
        "WorkerGroup",
        "EventQueueUrl",
        "FileSystemId",
    ] {
        assert!(
            out.get(key).is_some_and(|v| !v.is_empty()),
            "output {key}: {out:?}"
        );
    }
    assert_eq!(out["WorkerLaunchTemplateName"], format!("{STACK}-worker"));
    check_launch_template(&moto, &out);
    check_master(&moto, &out);
    check_worker_group(&moto, &out);
    check_events(&moto, &out);
    check_iam(&moto, &out);
    check_security_groups(&moto, &out);
    check_file_system(&moto, &out);

    joining::a_worker_joins(&moto, &out);
}
