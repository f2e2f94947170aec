//! The worker launch template: it exists, its instances carry the elastic and worker tags (else
//! `dtd` never sees them as workers), and it requires IMDSv2 (the agent reads the instance
//! metadata with a session token, and a template without it leaves IMDSv1 open to every process).

use crate::config::TemplateRef;
use std::collections::BTreeSet;

use aws_sdk_ec2::types::{LaunchTemplateHttpTokensState, ResourceType, ResponseLaunchTemplateData};

use super::{Check, Context};
use crate::aws::describe_error;

/// Where workers launch, which security groups they carry and which instance types they may
/// be, as far as the template and the group tell: the file system and GPU checks need them.
#[derive(Debug, Default, Clone)]
pub struct Workers {
    pub subnets: BTreeSet<String>,
    pub security_groups: BTreeSet<String>,
    pub instance_types: BTreeSet<String>,
}

impl Workers {
    /// The workers' security groups, for a check's line: `sg-1, sg-2`.
    pub fn groups_text(&self) -> String {
        let groups: Vec<&str> = self.security_groups.iter().map(String::as_str).collect();
        groups.join(", ")
    }

    /// With the types and subnets `workers.capacity` may launch as well.
    pub fn with_capacity(mut self, capacity: Option<&crate::config::Capacity>) -> Workers {
        for c in capacity.iter().flat_map(|c| &c.choices) {
            self.instance_types.insert(c.instance_type.clone());
            self.subnets.extend(c.subnet.clone());
        }
        self
    }

    pub fn merge(a: &Workers, b: &Workers) -> Workers {
        let union = |x: &BTreeSet<String>, y: &BTreeSet<String>| x.union(y).cloned().collect();
        Workers {
            subnets: union(&a.subnets, &b.subnets),
            security_groups: union(&a.security_groups, &b.security_groups),
            instance_types: union(&a.instance_types, &b.instance_types),
        }
    }
}

pub struct TemplateChecks {
    pub checks: Vec<Check>,
    /// The template's id when it was found (the RunInstances dry run launches from it).
    pub found: Option<String>,
    pub workers: Workers,
}

const EXISTS: &str = "launch template";
const TAGS: &str = "template: worker tags";
const IMDS: &str = "template: IMDSv2";

pub async fn checks(cx: &Context<'_>) -> TemplateChecks {
    let Some(template) = cx.cfg.workers.launch_template.as_ref() else {
        return TemplateChecks {
            checks: vec![Check::skip(
                "template.exists",
                EXISTS,
                "none configured (workers.launch_template)",
            )],
            found: None,
            workers: Workers::default(),
        };
    };
    let mut call = cx
        .ec2
        .describe_launch_template_versions()
        .versions("$Default");
    call = match template {
        TemplateRef::Id(id) => call.launch_template_id(id),
        TemplateRef::Name(name) => call.launch_template_name(name),
    };
    let name = template.as_str();
    let version = match call.send().await {
        Ok(out) => out.launch_template_versions().first().cloned(),
        Err(e) => {
            let text = describe_error(&e);
            return missing(
                name,
                format!("DescribeLaunchTemplateVersions failed: {text}"),
            );
        }
    };
    let Some(version) = version else {
        return missing(name, format!("{name} has no default version"));
    };
    let data = (version.launch_template_data().cloned())
        .unwrap_or_else(|| ResponseLaunchTemplateData::builder().build());
    let detail = format!(
        "{name} ({}, default version {})",
        version.launch_template_id().unwrap_or("?"),
        version.version_number().unwrap_or(0)
    );
    TemplateChecks {
        checks: vec![
            Check::pass("template.exists", EXISTS, detail),
            tags(cx, name, &data),
            imds(name, &data),
        ],
        found: version.launch_template_id().map(str::to_string),
        workers: workers(&data),
    }
}

fn missing(name: &str, detail: String) -> TemplateChecks {
    let fix = format!(
        "create the launch template {name} (the stack does), or name an existing one in \
         workers.launch_template"
    );
    TemplateChecks {
        checks: vec![
            Check::fail("template.exists", EXISTS, detail, fix),
            Check::skip("template.tags", TAGS, "needs the launch template"),
            Check::skip("template.imdsv2", IMDS, "needs the launch template"),
        ],
        found: None,
        workers: Workers::default(),
    }
}

fn tags(cx: &Context<'_>, name: &str, data: &ResponseLaunchTemplateData) -> Check {
    let on_instances: Vec<(&str, &str)> = (data.tag_specifications().iter())
        .filter(|s| s.resource_type() == Some(&ResourceType::Instance))
        .flat_map(|s| s.tags())
        .map(|t| (t.key().unwrap_or(""), t.value().unwrap_or("")))
        .collect();
    let elastic = cx.cfg.workers.elastic_tag.as_str();
    let mut missing: Vec<String> = Vec::new();
    if !on_instances.iter().any(|(k, _)| *k == elastic) {
        missing.push(elastic.to_string());
    }
    for (k, v) in &cx.cfg.workers.tags {
        if !on_instances.contains(&(k.as_str(), v.as_str())) {
            missing.push(format!("{k}={v}"));
        }
    }
    let want = (cx.cfg.workers.tags.iter().map(|(k, v)| format!("{k}={v}")))
        .chain([elastic.to_string()])
        .collect::<Vec<_>>()
        .join(", ");
    if missing.is_empty() {
        return Check::pass("template.tags", TAGS, format!("instances get {want}"));
    }
    Check::fail(
        "template.tags",
        TAGS,
        format!(
            "instances launched from {name} lack {}: dtd would never see them as workers",
            missing.join(", ")
        ),
        format!(
            "add a TagSpecification for ResourceType instance with {want} to a new version of \
             {name} and make it the default"
        ),
    )
}

fn imds(name: &str, data: &ResponseLaunchTemplateData) -> Check {
    let tokens = (data.metadata_options()).and_then(|m| m.http_tokens());
    let ok = tokens == Some(&LaunchTemplateHttpTokensState::Required);
    let shown = tokens.map_or("not set, so the account default", |t| t.as_str());
    Check::verdict(
        "template.imdsv2",
        IMDS,
        ok,
        format!("HttpTokens: {shown}"),
        || {
            format!(
                "set MetadataOptions.HttpTokens to required in a new version of {name} and make \
                 it the default (aws ec2 create-launch-template-version, then \
                 modify-launch-template --default-version)"
            )
        },
    )
}

fn workers(data: &ResponseLaunchTemplateData) -> Workers {
    let mut w = Workers::default();
    for nic in data.network_interfaces() {
        w.subnets.extend(nic.subnet_id().map(str::to_string));
        w.security_groups.extend(nic.groups().iter().cloned());
    }
    w.security_groups
        .extend(data.security_group_ids().iter().cloned());
    w.instance_types
        .extend(data.instance_type().map(|t| t.as_str().to_string()));
    w
}
