//! A worker in an Availability Zone where the shared file system has no mount target cannot
//! mount it, so its prepare-data marker can never appear: its wait says so instead of waiting
//! silently. This only explains a wait; nothing is removed, terminated or held because of it.

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;

/// What a worker without a marker waits for when its zone has no mount target, journaled once
/// per instance. `None` when the zones are unknown (not configured, or the last read failed)
/// or its zone has one.
pub(super) fn missing(p: &Inputs, st: &mut State, out: &mut Draft, at: usize) -> Option<String> {
    let mt = p.mount_targets?;
    let inst = &p.list[at];
    // Names are compared within one account: EC2 and EFS both answer with this account's
    // mapping of zone names ("AZ IDs", AWS Regions and Availability Zones:
    // https://docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html).
    if inst.az.is_empty() || mt.zones.contains(&inst.az) {
        return None;
    }
    let (az, fs) = (&inst.az, &mt.fs_id);
    if st.pending_mut(&inst.id).no_mount_target_once() {
        let message = format!(
            "{} ({}) is in {az}, where {fs} has no mount target: it cannot mount the shared \
             directory, so its prepare-data marker cannot appear until a mount target is \
             created in {az}",
            inst.ip, inst.id
        );
        out.outcome.events.push(Event {
            instance: Some(inst.id.clone()),
            ip: Some(inst.ip),
            az: Some(az.clone()),
            fs_id: Some(fs.clone()),
            ..Event::new(p.now, EventKind::NoMountTarget, message)
        });
    }
    Some(format!(
        "an EFS mount target in {az}: {fs} has none there, so it cannot mount the shared directory"
    ))
}
