//! What the front refused, by source and kind: journaled once (the first time), shown in
//! `dtctl status` while it goes on and for [`SHOWN`] after, then forgotten, so an attempt that
//! comes back later is journaled again. Bounded: a flood from many addresses keeps the newest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::admit::Refusal;

/// How long a refusal stays in the status after the last attempt.
pub const SHOWN: Duration = Duration::from_secs(600);
/// Sources and kinds kept at once.
const KEPT: usize = 64;

pub struct Refusals {
    seen: HashMap<(IpAddr, &'static str), Seen>,
}

/// One source's refusals of one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub from: IpAddr,
    /// The last refusal's words.
    pub why: String,
    pub count: u64,
    pub last: Instant,
    journaled: bool,
}

impl Refusals {
    pub fn new() -> Refusals {
        Refusals {
            seen: HashMap::new(),
        }
    }

    pub fn note(&mut self, from: IpAddr, refusal: &Refusal, now: Instant) {
        self.forget(now);
        let key = (from, refusal.class());
        if !self.seen.contains_key(&key) && self.seen.len() >= KEPT {
            self.drop_oldest();
        }
        let seen = self.seen.entry(key).or_insert_with(|| Seen {
            from,
            why: String::new(),
            count: 0,
            last: now,
            journaled: false,
        });
        seen.why = refusal.to_string();
        seen.count += 1;
        seen.last = now;
    }

    /// The refusals not journaled yet, now marked journaled.
    pub fn take_unjournaled(&mut self) -> Vec<Seen> {
        let fresh = self.seen.values_mut().filter(|s| !s.journaled);
        fresh
            .map(|s| {
                s.journaled = true;
                s.clone()
            })
            .collect()
    }

    /// The status's lines, the most recent first.
    pub fn lines(&mut self, now: Instant) -> Vec<String> {
        self.forget(now);
        let mut seen: Vec<&Seen> = self.seen.values().collect();
        seen.sort_by_key(|s| std::cmp::Reverse(s.last));
        let line = |s: &&Seen| {
            let ago = humantime::format_duration(Duration::from_secs(
                now.duration_since(s.last).as_secs(),
            ));
            format!(
                "torchft's Lighthouse (dtd's front): {} {}; {} time(s), the last {ago} ago",
                s.from, s.why, s.count
            )
        };
        seen.iter().map(line).collect()
    }

    fn forget(&mut self, now: Instant) {
        self.seen.retain(|_, s| now.duration_since(s.last) < SHOWN);
    }

    fn drop_oldest(&mut self) {
        let oldest = self.seen.iter().min_by_key(|(_, s)| s.last);
        if let Some(key) = oldest.map(|(k, _)| *k) {
            self.seen.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 1, n])
    }

    #[test]
    fn each_source_and_kind_is_journaled_once_and_shown_while_it_goes_on() {
        let (mut r, t0) = (Refusals::new(), Instant::now());
        let kill = Refusal::Route("/replica/x/kill".into());
        r.note(ip(1), &kill, t0);
        r.note(ip(1), &kill, t0 + Duration::from_secs(1));
        r.note(ip(1), &Refusal::NotANode, t0);
        let journaled = r.take_unjournaled();
        assert_eq!(journaled.len(), 2);
        r.note(ip(1), &kill, t0 + Duration::from_secs(2));
        assert!(r.take_unjournaled().is_empty(), "once per source and kind");
        let lines = r.lines(t0 + Duration::from_secs(62));
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].contains("10.0.1.1 asked for /replica/x/kill"),
            "{lines:?}"
        );
        assert!(lines[0].contains("3 time(s), the last 1m ago"), "{lines:?}");
    }

    #[test]
    fn a_refusal_quiet_for_long_is_forgotten_and_journaled_again_when_it_comes_back() {
        let (mut r, t0) = (Refusals::new(), Instant::now());
        r.note(ip(1), &Refusal::NotANode, t0);
        assert_eq!(r.take_unjournaled().len(), 1);
        assert!(r.lines(t0 + SHOWN).is_empty());
        r.note(ip(1), &Refusal::NotANode, t0 + SHOWN);
        assert_eq!(r.take_unjournaled().len(), 1);
    }

    #[test]
    fn a_flood_from_many_addresses_keeps_the_newest() {
        let (mut r, t0) = (Refusals::new(), Instant::now());
        for n in 0..=200u8 {
            r.note(
                ip(n),
                &Refusal::NotANode,
                t0 + Duration::from_millis(n.into()),
            );
        }
        let lines = r.lines(t0 + Duration::from_secs(1));
        assert_eq!(lines.len(), KEPT);
        assert!(lines[0].starts_with("torchft's Lighthouse (dtd's front): 10.0.1.200 "));
    }
}
