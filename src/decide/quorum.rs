//! The in-place strategy's quorum, as the job reports it in its progress file (`dt_torch`):
//! each change (who joined or left torchft's quorum, at which step, how many steps it cost and
//! how long the others paused) journaled once as `quorum_changed`, about the worker when one
//! node joined or left. The job's word: shown and counted, never acted on.

use super::draft::Draft;
use super::inputs::Inputs;
use crate::model::*;
use crate::protocol::progress::QuorumChangeLine;

pub(super) fn watch(p: &Inputs, st: &mut State, out: &mut Draft) {
    let Some(Ok(quorum)) = p.progress.map(|r| r.as_ref().map(|p| p.quorum.as_ref())) else {
        return;
    };
    let Some(q) = quorum else { return };
    for c in &q.changes {
        let key = (c.step, c.at.clone());
        if st.quorum_seen.as_ref().is_some_and(|seen| *seen >= key) {
            continue;
        }
        journal(p, out, c);
        st.quorum_seen = Some(key);
    }
}

fn journal(p: &Inputs, out: &mut Draft, c: &QuorumChangeLine) {
    let moved: Vec<_> = c.joined.iter().chain(&c.left).collect();
    let who = match moved.as_slice() {
        [ip] => p.at_ip(**ip).map(|at| p.who(at)),
        _ => None,
    };
    let list = |ips: &[std::net::IpAddr]| {
        let names: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
        names.join(", ")
    };
    let mut what = Vec::new();
    if !c.joined.is_empty() {
        what.push(format!("{} joined", list(&c.joined)));
    }
    if !c.left.is_empty() {
        what.push(format!("{} left", list(&c.left)));
    }
    let what = if what.is_empty() {
        "re-formed".to_string()
    } else {
        what.join(", ")
    };
    let msg = format!(
        "torchft's quorum {}: {what} at step {} ({} node(s)); {} step(s) lost, trained again after {:.2}s",
        c.quorum, c.step, c.nodes, c.lost_steps, c.paused_s
    );
    out.event(p, EventKind::QuorumChanged, who, None, msg)
        .quorum = Some(QuorumCost {
        quorum: c.quorum,
        step: c.step,
        nodes: c.nodes,
        lost_steps: c.lost_steps,
        paused_ms: (c.paused_s.max(0.0) * 1000.0).round() as u64,
    });
}
