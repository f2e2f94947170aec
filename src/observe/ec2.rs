//! EC2 worker instances: paginated DescribeInstances with server-side tag and state filters, so
//! the number of calls grows with pages, never with instances; and reads of just the instances
//! an event or a marker names, which cost one call however large the fleet.

use crate::config::TemplateRef;
use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, Instance as Ec2Instance};
use aws_sdk_ec2::Client;

use crate::aws::AwsError;
use crate::model::Instance;
use crate::observe::fleet::Targets;

const MAX_FILTER_VALUES: usize = 100;

/// Why EC2's view of the workers, or what it is read with, could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ec2Error {
    /// A page of a listing or of a targeted read; the view is not complete without it.
    #[error("{what} page {page} failed: {why}")]
    Page {
        what: &'static str,
        page: u32,
        why: AwsError,
    },
    #[error("looking up launch template {name}: {why}")]
    LaunchTemplate { name: String, why: AwsError },
    #[error("launch template {0} not found")]
    NoLaunchTemplate(String),
    #[error("DescribeSubnets: {0}")]
    Subnets(AwsError),
    /// The background listing's task ended without an answer.
    #[error("the listing task failed: {0}")]
    ListingTask(String),
    #[error("no complete listing yet")]
    NotListed,
}

#[derive(Clone)]
pub struct Ec2Observer {
    client: Client,
    filters: Vec<Filter>,
    page_size: i32,
}

/// One complete listing and the number of DescribeInstances calls it took.
pub struct Listing {
    pub instances: Vec<Instance>,
    pub calls: u32,
}

impl Ec2Observer {
    pub fn new(client: Client, worker_tags: &BTreeMap<String, String>, page_size: i32) -> Self {
        let mut filters: Vec<Filter> = worker_tags
            .iter()
            .map(|(k, v)| Filter::builder().name(format!("tag:{k}")).values(v).build())
            .collect();
        filters.push(
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        );
        Ec2Observer {
            client,
            filters,
            page_size,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Every page or an error: a listing that stopped half-way is never returned as complete.
    pub async fn list(&self) -> Result<Listing, Ec2Error> {
        self.describe(self.filters.clone(), "DescribeInstances")
            .await
    }

    /// The workers among the instances `targets` names, by id and by private IP. Complete for
    /// what it asked, like a listing: one it asked for and did not return is not a worker.
    /// Ids go in an `instance-id` filter rather than `InstanceIds`, which fails the whole call
    /// for an id that no longer exists ("DescribeInstances", Amazon EC2 API Reference).
    pub async fn read(&self, targets: &Targets) -> Result<Listing, Ec2Error> {
        let ids: Vec<String> = targets.ids.iter().cloned().collect();
        let ips: Vec<String> = targets.ips.iter().map(|ip| ip.to_string()).collect();
        let (by_id, by_ip) = tokio::join!(
            self.read_by("instance-id", &ids),
            self.read_by("private-ip-address", &ips)
        );
        let (mut listing, by_ip) = (by_id?, by_ip?);
        listing.instances.extend(by_ip.instances);
        listing.calls += by_ip.calls;
        Ok(listing)
    }

    /// The EC2 API Reference gives no limit on a filter's values, but requests with more than
    /// about 200 are refused (apache/druid#1954 hit it): 100 per call.
    async fn read_by(&self, filter: &str, values: &[String]) -> Result<Listing, Ec2Error> {
        let mut listing = Listing {
            instances: Vec::new(),
            calls: 0,
        };
        for chunk in values.chunks(MAX_FILTER_VALUES) {
            // First: where filters are tried in order and the first miss rejects an instance (as
            // moto does), the others cost one comparison each instead of a tag lookup per worker
            // tag: 10 ms instead of 760 ms at 1,000 instances. AWS ANDs them in any order.
            let by = Filter::builder()
                .name(filter)
                .set_values(Some(chunk.to_vec()));
            let filters: Vec<Filter> = std::iter::once(by.build())
                .chain(self.filters.iter().cloned())
                .collect();
            let part = self
                .describe(filters, "DescribeInstances by id or IP")
                .await?;
            listing.instances.extend(part.instances);
            listing.calls += part.calls;
        }
        Ok(listing)
    }

    async fn describe(
        &self,
        filters: Vec<Filter>,
        what: &'static str,
    ) -> Result<Listing, Ec2Error> {
        let mut pages = self
            .client
            .describe_instances()
            .set_filters(Some(filters))
            .max_results(self.page_size)
            .into_paginator()
            .send();
        let mut listing = Listing {
            instances: Vec::new(),
            calls: 0,
        };
        while let Some(page) = pages.next().await {
            listing.calls += 1;
            let page = page.map_err(|e| Ec2Error::Page {
                what,
                page: listing.calls,
                why: AwsError::of(&e),
            })?;
            for r in page.reservations() {
                listing
                    .instances
                    .extend(r.instances().iter().filter_map(convert));
            }
        }
        Ok(listing)
    }
}

/// An instance without an id or a parseable private IP cannot be a worker; it is skipped.
fn convert(i: &Ec2Instance) -> Option<Instance> {
    let id = i.instance_id()?.to_string();
    let Some(ip) = i.private_ip_address().and_then(|a| a.parse().ok()) else {
        tracing::debug!(instance = %id, "no private IP yet; skipped this pass");
        return None;
    };
    let tags = i
        .tags()
        .iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect();
    Some(Instance {
        id,
        ip,
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        az: i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        market: i
            .instance_lifecycle()
            .map(|l| l.as_str().to_string())
            .unwrap_or_else(|| "on-demand".into()),
        launched_at: i
            .launch_time()
            .and_then(|t| t.to_millis().ok())
            .map_or(0, |ms| ms.max(0) as u64),
        tags,
        capacity_reservation: i.capacity_reservation_id().map(str::to_string),
        subnet: i.subnet_id().map(str::to_string),
    })
}

/// Instances carry their template's id in `aws:ec2launchtemplate:id`; the config may name it.
pub async fn resolve_launch_template(
    client: &Client,
    wanted: &TemplateRef,
) -> Result<String, Ec2Error> {
    let wanted = match wanted {
        TemplateRef::Id(id) => return Ok(id.clone()),
        TemplateRef::Name(name) => name,
    };
    let out = client
        .describe_launch_templates()
        .launch_template_names(wanted)
        .send()
        .await
        .map_err(|e| Ec2Error::LaunchTemplate {
            name: wanted.clone(),
            why: AwsError::of(&e),
        })?;
    out.launch_templates()
        .first()
        .and_then(|t| t.launch_template_id())
        .map(str::to_string)
        .ok_or_else(|| Ec2Error::NoLaunchTemplate(wanted.clone()))
}

/// The address ranges (IPv4 and IPv6) of each subnet, by a filter: a subnet since deleted is
/// left out rather than failing the call.
pub async fn subnet_cidrs(
    client: &Client,
    subnets: Vec<String>,
) -> Result<BTreeMap<String, Vec<ipnet::IpNet>>, Ec2Error> {
    let by_id = Filter::builder()
        .name("subnet-id")
        .set_values(Some(subnets))
        .build();
    let out = (client.describe_subnets().filters(by_id))
        .send()
        .await
        .map_err(|e| Ec2Error::Subnets(AwsError::of(&e)))?;
    Ok((out.subnets().iter())
        .filter_map(|s| {
            let v4 = s.cidr_block().into_iter();
            let v6 =
                (s.ipv6_cidr_block_association_set().iter()).filter_map(|a| a.ipv6_cidr_block());
            let ranges = v4.chain(v6).filter_map(|c| c.parse().ok()).collect();
            Some((s.subnet_id()?.to_string(), ranges))
        })
        .collect())
}

/// Each subnet's Availability Zone, by subnet id.
pub type SubnetZones = BTreeMap<String, String>;

/// The Availability Zone of each subnet: read once, since a subnet never moves.
pub async fn subnet_zones(client: &Client, subnets: Vec<String>) -> Result<SubnetZones, Ec2Error> {
    let out = (client.describe_subnets().set_subnet_ids(Some(subnets)))
        .send()
        .await
        .map_err(|e| Ec2Error::Subnets(AwsError::of(&e)))?;
    Ok((out.subnets().iter())
        .filter_map(|s| {
            Some((
                s.subnet_id()?.to_string(),
                s.availability_zone()?.to_string(),
            ))
        })
        .collect())
}
