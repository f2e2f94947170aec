//! The host files' lines: base hosts first, in the config's order, then the members in join
//! order, each with its type's slots.

use super::inputs::Inputs;
use crate::model::*;
use crate::protocol::host_files::Host;

pub(super) fn hosts(p: &Inputs, st: &State) -> Vec<Host> {
    let slots = &p.rules.slots;
    let base = (p.rules.base_hosts.iter()).map(|ip| Host {
        ip: *ip,
        slots: slots.for_type("default"),
    });
    // A member whose IP became a base host (config changed) is listed once, as a base host.
    let members = (st.members.iter()).filter(|m| !p.rules.is_protected(m.ip));
    let members = members.map(|m| Host {
        ip: m.ip,
        slots: slots.for_type(&m.instance_type),
    });
    base.chain(members).collect()
}
