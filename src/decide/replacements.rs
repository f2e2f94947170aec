//! Launches owed for unhealthy launch-template workers, sent until one is launched, each with
//! the `workers.capacity` choices to try in order: those EC2 has not refused within their
//! cool-down, and none in a subnet whose zone the shared file system cannot serve. Settle
//! starts a cool-down when act reports a choice refused.

use super::draft::Draft;
use super::pass::Pass;
use crate::model::*;

pub(super) fn send(p: &Pass, st: &mut State, out: &mut Draft) {
    st.no_capacity.retain(|_, u| u.until > p.now);
    show_unavailable(p, st, out);
    if st.replacements.is_empty() {
        return;
    }
    let choices = match usable(p, st) {
        Ok(choices) => choices,
        Err(why) => {
            for r in &st.replacements {
                let msg = format!("replacement launch for unhealthy {}: {why}", r.replaces);
                out.outcome.holds.push(msg);
            }
            return;
        }
    };
    for r in &st.replacements {
        if let Some(e) = &r.last_error {
            let e: String = e.chars().take(300).collect();
            let next = rfc3339(r.retry_at.max(p.now));
            let msg = format!(
                "replacement launch for unhealthy {}: {e} (sent again from {next})",
                r.replaces
            );
            out.outcome.holds.push(msg);
        }
        if p.now >= r.retry_at {
            out.act(Action::Launch {
                replaces: r.replaces.clone(),
                token: r.token.clone(),
                choices: choices.clone(),
            });
        }
    }
}

/// The choices a launch may try now, in order (empty: the template as it is), or why none.
fn usable(p: &Pass, st: &State) -> Result<Vec<Choice>, String> {
    let all = &p.rules.capacity;
    if all.is_empty() {
        return Ok(Vec::new());
    }
    let usable: Vec<Choice> = (all.iter())
        .filter(|c| !st.no_capacity.contains_key(&c.name()) && unmountable(p, c).is_none())
        .cloned()
        .collect();
    if !usable.is_empty() {
        return Ok(usable);
    }
    let back = st.no_capacity.values().map(|u| u.until).min();
    Err(match back {
        Some(at) => format!(
            "no capacity choice is usable; the first back is tried at {}",
            rfc3339(at)
        ),
        None => "no capacity choice is in a zone the shared file system can serve".into(),
    })
}

/// Why a choice's subnet cannot be used: its zone has no mount target. `None` when it can, or
/// when the zones are unknown (nothing is concluded from what was not read).
fn unmountable(p: &Pass, c: &Choice) -> Option<String> {
    let mt = p.mount_targets?;
    let zone = mt.subnet_zones.get(c.subnet.as_ref()?)?;
    (!mt.zones.contains(zone)).then(|| {
        format!(
            "{} is in {zone}, where {} has no mount target",
            c.subnet.as_deref().unwrap_or_default(),
            mt.fs_id
        )
    })
}

/// Every choice in order, and why it is skipped now, for `dtctl status`.
fn show_unavailable(p: &Pass, st: &State, out: &mut Draft) {
    for c in &p.rules.capacity {
        let name = c.name();
        let why = match (st.no_capacity.get(&name), unmountable(p, c)) {
            (Some(u), _) => Some(format!("{} until {}", u.code, rfc3339(u.until))),
            (None, why) => why,
        };
        out.outcome.capacity.push((name, why));
    }
}
