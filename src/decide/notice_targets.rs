//! The workers a notice is about: those EC2 lists this pass, or the state remembers.

use std::net::IpAddr;

use super::inputs::Inputs;
use crate::model::*;

/// A worker a notice is about: an instance seen this pass, or one the state remembers.
pub(super) struct Target {
    pub id: String,
    pub ip: IpAddr,
}

pub(super) fn targets(p: &Inputs, st: &State, target: &NoticeTarget) -> Vec<Target> {
    let listed = |at: usize| Target {
        id: p.list[at].id.clone(),
        ip: p.list[at].ip,
    };
    match target {
        NoticeTarget::Instance(id) | NoticeTarget::Agent { instance: id, .. } => {
            if let Some(at) = p.at(id) {
                return vec![listed(at)];
            }
            remembered(st, |id2, _| id2 == id)
        }
        NoticeTarget::Ip(ip) => match p.at_ip(*ip) {
            Some(at) => vec![listed(at)],
            None => remembered(st, |_, ip2| ip2 == *ip),
        },
        NoticeTarget::CapacityReservation(cr) => (0..p.list.len())
            .filter(|&at| p.facts[at].cluster)
            .filter(|&at| p.list[at].capacity_reservation.as_deref() == Some(cr))
            .map(listed)
            .collect(),
    }
}

/// A member the EC2 view did not show this pass (it failed): the state still knows it.
fn remembered(st: &State, matches: impl Fn(&str, IpAddr) -> bool) -> Vec<Target> {
    let member = st.members.iter().map(|m| (&m.id, m.ip));
    let removal = st.removals.iter().map(|r| (&r.id, r.ip));
    member
        .chain(removal)
        .find(|(id, ip)| matches(id, *ip))
        .map(|(id, ip)| Target { id: id.clone(), ip })
        .into_iter()
        .collect()
}
