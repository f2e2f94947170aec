//! `dtctl` commands that act on AWS exactly as a person at the EC2 console would.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use anyhow::{anyhow, bail, Context};
use aws_sdk_ec2::types::Tag;

use crate::aws::{describe_error, ec2_client};
use crate::config::{Config, TemplateRef};
use crate::decide::Rules;
use crate::model::{Instance, WorkerStatus};
use crate::observe::ec2::{resolve_launch_template, Ec2Observer};

use crate::act::capacity;
use crate::clock::now_millis;
use crate::ctl::local::load_status;
use crate::fsutil::write_atomic;
use crate::model::{CapacityStatus, Choice, LaunchChoice, Reservation};
use crate::observe::ec2::subnet_zones;
use crate::observe::reservations;
use crate::protocol::capacity_refusals::{self, CapacityRefusal, CapacityRefusals};
use crate::store::Paths;
use crate::untrusted;

pub async fn add(cfg: &Config, count: u32) -> anyhow::Result<()> {
    let Some(template) = cfg.workers.launch_template.as_ref() else {
        bail!("workers.launch_template is not set in the config: nothing to launch from");
    };
    let client = ec2_client(cfg).await;
    launch_workers(cfg, &client, template, count).await
}

/// Launches `count` workers from the template, as the first capacity choice that has them.
async fn launch_workers(
    cfg: &Config,
    client: &aws_sdk_ec2::Client,
    template: &TemplateRef,
    count: u32,
) -> anyhow::Result<()> {
    let choices = launch_choices(client, usable_choices(cfg)).await?;
    let count = i32::try_from(count).context("too many workers to launch at once")?;
    let tried = capacity::launch(client, template, &choices, None, count).await;
    for (choice, code, message) in &tried.no_capacity {
        println!(
            "no capacity for {}: {code} ({message}); trying the next choice",
            choice.name()
        );
    }
    tell_dtd(cfg, &tried.no_capacity);
    let launched = tried.launched.map_err(|e| anyhow!(e))?;
    for l in &launched {
        let as_what = (l.choice.as_ref()).map_or(String::new(), |c| format!(" as {}", c.name()));
        let ip = l.ip.as_deref().unwrap_or("no IP yet");
        println!("launched {} ({ip}) from {template}{as_what}", l.id);
    }
    println!("they join the job once their prepare-data marker appears; watch `dtctl status`");
    Ok(())
}

/// Launch-template workers: launches or removals until `replicas` of them stay (those with
/// the elastic tag, in the job or on their way into it). Those not training yet leave first,
/// then the newest: the least training is redone.
pub async fn scale(cfg: &Config, template: &TemplateRef, replicas: usize) -> anyhow::Result<()> {
    let client = ec2_client(cfg).await;
    let (rules, instances) = cluster_workers(cfg, &client).await?;
    let mut staying: Vec<&Instance> = (instances.iter())
        .filter(|i| rules.is_cluster_worker(i) && !rules.is_protected(i.ip))
        .filter(|i| i.tags.contains_key(&rules.elastic_tag) && stays(i))
        .collect();
    let now = staying.len();
    println!("{template}: {now} workers -> {replicas}");
    if replicas > now {
        let more = u32::try_from(replicas - now).context("too many workers to launch")?;
        return launch_workers(cfg, &client, template, more).await;
    }
    if replicas == now {
        println!("nothing to do");
        return Ok(());
    }
    let training = |i: &Instance| i.status_tag() == Some(WorkerStatus::Added.as_tag());
    staying.sort_by(|a, b| {
        (training(a).cmp(&training(b)))
            .then(b.launched_at.cmp(&a.launched_at))
            .then(a.id.cmp(&b.id))
    });
    let leaving = staying[..now - replicas].iter().map(|i| i.id.clone());
    let_go(&client, &rules, leaving.collect()).await
}

/// Whether a worker counts toward the size: not one that failed, was interrupted or is leaving.
fn stays(i: &Instance) -> bool {
    match i.status_tag().and_then(WorkerStatus::from_tag) {
        None | Some(WorkerStatus::Preparing | WorkerStatus::AddQueued | WorkerStatus::Added) => {
            true
        }
        Some(_) => false,
    }
}

/// The capacity choices in order, without those dtd skips now (its status says which): a
/// choice EC2 just refused is not asked again before its cool-down ends.
fn usable_choices(cfg: &Config) -> Vec<Choice> {
    let Some(capacity) = cfg.workers.capacity.as_ref() else {
        return Vec::new();
    };
    let skipped: Vec<CapacityStatus> = load_status(cfg).map(|s| s.capacity).unwrap_or_default();
    let usable: Vec<Choice> = (capacity.choices.iter())
        .filter(|c| {
            let skip = skipped
                .iter()
                .find(|s| s.choice == c.name() && s.skipped.is_some());
            if let Some(s) = skip {
                let why = s.skipped.as_deref().unwrap_or_default();
                println!("skipping {}: {why} (dtctl status)", s.choice);
            }
            skip.is_none()
        })
        .cloned()
        .collect();
    if usable.is_empty() {
        println!("every choice is skipped by dtd now; trying them all, as asked");
        return capacity.choices.clone();
    }
    usable
}

/// Each choice with what a launch needs to know of its reservation: whether it is a Capacity
/// Block (launched with its own market type). Read from EC2 here, as dtd reads it; a choice
/// whose reservation is in another zone than its subnet is skipped (EC2 would refuse it).
async fn launch_choices(
    client: &aws_sdk_ec2::Client,
    choices: Vec<Choice>,
) -> anyhow::Result<Vec<LaunchChoice>> {
    let asked = choices.len();
    let read = read_reservations(client, &choices).await;
    let zones = reserved_subnet_zones(client, &choices, &read).await;
    let usable: Vec<LaunchChoice> = (choices.into_iter())
        .filter_map(|choice| {
            let r = (choice.reservation_id()).and_then(|id| read.get(id));
            let zone = (choice.subnet.as_ref()).and_then(|s| zones.get(s));
            if let Some(why) = r.zip(zone).and_then(|(r, z)| r.zone_conflict(z)) {
                println!("skipping {}: {why}", choice.name());
                return None;
            }
            let capacity_block = r.is_some_and(|r| r.capacity_block);
            Some(LaunchChoice {
                choice,
                capacity_block,
            })
        })
        .collect();
    if asked > 0 && usable.is_empty() {
        bail!("no capacity choice can take a launch (each is skipped above)");
    }
    Ok(usable)
}

async fn read_reservations(
    client: &aws_sdk_ec2::Client,
    choices: &[Choice],
) -> BTreeMap<String, Reservation> {
    let ids = reservations::ids(choices);
    if ids.is_empty() {
        return BTreeMap::new();
    }
    reservations::read(client, &ids).await.unwrap_or_else(|e| {
        println!("the reservations could not be read ({e}): each is launched into as an On-Demand Capacity Reservation");
        BTreeMap::new()
    })
}

/// The zone of each subnet a choice names beside a reservation that was read: only those
/// can conflict. Unknown zones conclude nothing (the launch is sent).
async fn reserved_subnet_zones(
    client: &aws_sdk_ec2::Client,
    choices: &[Choice],
    read: &BTreeMap<String, Reservation>,
) -> BTreeMap<String, String> {
    let subnets: BTreeSet<String> = (choices.iter())
        .filter(|c| c.reservation_id().is_some_and(|id| read.contains_key(id)))
        .filter_map(|c| c.subnet.clone())
        .collect();
    if subnets.is_empty() {
        return BTreeMap::new();
    }
    let wanted = subnets.into_iter().collect();
    subnet_zones(client, wanted).await.unwrap_or_else(|e| {
        println!("the choices' subnets could not be read ({e}): their zones are not checked");
        BTreeMap::new()
    })
}

/// What EC2 refused for lack of capacity, told to dtd (its state directory), which skips those
/// choices for their cool-down and journals them as if its own launch had been refused.
fn tell_dtd(cfg: &Config, refused: &[(Choice, String, String)]) {
    if refused.is_empty() {
        return;
    }
    let path = Paths::new(&cfg.state_dir).capacity_refusals();
    let at = now_millis();
    let new = (refused.iter()).map(|(choice, code, message)| CapacityRefusal {
        at,
        choice: choice.name(),
        code: code.clone(),
        message: message.clone(),
    });
    let held = match untrusted::read(&path, capacity_refusals::MAX_BYTES) {
        Ok(Some(bytes)) => CapacityRefusals::parse(&bytes),
        _ => CapacityRefusals::default(),
    };
    let written = write_atomic(&path, &held.with(new).render());
    match written {
        Ok(()) => println!("dtd skips the refused choices for their cool-down too"),
        Err(e) => println!(
            "dtd was not told ({}: {e}): it skips those choices once its own launch is refused",
            path.display()
        ),
    }
}

pub async fn remove(cfg: &Config, targets: &[String]) -> anyhow::Result<()> {
    let client = ec2_client(cfg).await;
    let (rules, instances) = cluster_workers(cfg, &client).await?;
    let mut ids = Vec::new();
    for target in targets {
        let inst = find(&instances, target)?;
        check_removable(&rules, inst, target)?;
        if !inst.tags.contains_key(&rules.elastic_tag) {
            println!("{target}: already leaving (no elastic tag)");
            continue;
        }
        ids.push(inst.id.clone());
    }
    let_go(&client, &rules, ids).await
}

/// The rules as dtd applies them, and every running instance with the worker tags.
async fn cluster_workers(
    cfg: &Config,
    client: &aws_sdk_ec2::Client,
) -> anyhow::Result<(Rules, Vec<Instance>)> {
    let template = match cfg.workers.launch_template.as_ref() {
        Some(t) => Some(
            resolve_launch_template(client, t)
                .await
                .map_err(|e| anyhow!(e))?,
        ),
        None => None,
    };
    let rules = Rules::from_config(cfg, template);
    let listing = Ec2Observer::new(client.clone(), &cfg.workers.tags, cfg.workers.page_size)
        .list()
        .await
        .map_err(|e| anyhow!(e))
        .context("listing the cluster's workers")?;
    Ok((rules, listing.instances))
}

/// Deletes the elastic tag of each: what a person does in the EC2 console to let a worker go.
async fn let_go(
    client: &aws_sdk_ec2::Client,
    rules: &Rules,
    ids: Vec<String>,
) -> anyhow::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    client
        .delete_tags()
        .set_resources(Some(ids.clone()))
        .tags(Tag::builder().key(&rules.elastic_tag).build())
        .send()
        .await
        .map_err(|e| anyhow!("DeleteTags {}: {}", rules.elastic_tag, describe_error(&e)))?;
    for id in ids {
        println!("{id}: elastic tag deleted; dtd removes it from the job, then terminates it once the job acknowledges");
    }
    Ok(())
}

fn find<'a>(instances: &'a [Instance], target: &str) -> anyhow::Result<&'a Instance> {
    let by_ip = target.parse::<IpAddr>().ok();
    if by_ip.is_none() && !crate::model::is_ec2_instance_id(target) {
        bail!("{target}: not a private IP or an instance id (i-...)");
    }
    instances
        .iter()
        .find(|i| Some(i.ip) == by_ip || i.id == target)
        .ok_or_else(|| {
            anyhow!("{target}: no running worker instance with the worker tags has this IP or id")
        })
}

fn check_removable(rules: &Rules, inst: &Instance, target: &str) -> anyhow::Result<()> {
    if rules.is_protected(inst.ip) {
        bail!(
            "{target}: {} is a base host or the master, which are never removed",
            inst.ip
        );
    }
    if !rules.is_cluster_worker(inst) {
        bail!(
            "{target}: {} does not come from this cluster's launch template or group",
            inst.id
        );
    }
    Ok(())
}
