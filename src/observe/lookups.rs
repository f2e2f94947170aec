//! What a report may make `dtd` ask EC2. A file (`workers.reports: unsigned`) anyone can create
//! for any IP, so a read prompted by one is bounded: an IP no known worker has is looked up only
//! when it is in one of the workers' subnets, each IP with a backoff, and all of them within a
//! budget of calls: at most [`BURST`] at once, then one per [`REFILL`]. An instance its own agent
//! proved with EC2's identity document is read by its id at once, outside the budget: only a
//! real instance has such a document, and each id waits longer after each miss. A worker that is
//! really new is found by the next complete listing (`resync`) at the latest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::clock::millis;
use crate::model::Millis;

/// Calls that may be spent at once on lookups a report prompted.
pub const BURST: u32 = 6;
/// One more call may be spent every this long.
pub const REFILL: Duration = Duration::from_secs(12);
/// Values per DescribeInstances filter (see `observe::ec2`): one call reads this many.
const PER_CALL: usize = 100;
/// The first wait before asking again about an IP no instance had.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// How long after a failed read of the subnets it is tried again.
const SUBNETS_RETRY: Duration = Duration::from_secs(60);

/// Times are the daemon's clock's (`crate::clock`), so a test's clock drives the backoffs and
/// the budget.
pub struct Lookups {
    /// The longest wait before asking about the same IP again (the listing's period).
    max_wait: Millis,
    /// IPs no instance had when last read, and when to ask again.
    absent: Backoff<IpAddr>,
    /// Instances their agents proved that EC2 did not list when last read.
    proved: Backoff<String>,
    budget: Budget,
    pub subnets: Subnets,
}

/// The workers' subnets' address ranges, read once per subnet.
#[derive(Default)]
pub struct Subnets {
    cidrs: BTreeMap<String, Vec<IpNet>>,
    unread: BTreeSet<String>,
    asked: Option<Millis>,
}

/// What a pass may read because of reports.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub ips: Vec<IpAddr>,
    pub ids: Vec<String>,
}

impl Lookups {
    pub fn new(max_wait: Duration, now: Millis) -> Lookups {
        Lookups {
            max_wait: millis(max_wait),
            absent: Backoff::default(),
            proved: Backoff::default(),
            budget: Budget::full(now),
            subnets: Subnets::default(),
        }
    }

    /// From `unknown` (reported IPs no listed instance has), what is due, in the workers'
    /// subnets, and within the budget; from `proved` (instances their agents proved, not
    /// listed), what is due. Both are forgotten once no report names them.
    pub fn wanted(&mut self, unknown: &[IpAddr], proved: &[String], now: Millis) -> Wanted {
        self.absent.keep(unknown);
        self.proved.keep(proved);
        let mut ips: Vec<IpAddr> = (unknown.iter())
            .filter(|ip| self.subnets.contains(**ip) && self.absent.due(ip, now))
            .copied()
            .collect();
        let ids: Vec<String> = (proved.iter())
            .filter(|id| self.proved.due(id, now))
            .cloned()
            .collect();
        let calls = ips.len().div_ceil(PER_CALL);
        let allowed = self.budget.take(calls as u32, now) as usize;
        ips.truncate(allowed * PER_CALL);
        Wanted { ips, ids }
    }

    /// After a read of `asked`: those found are forgotten, the others asked again later.
    pub fn found(
        &mut self,
        asked: &Wanted,
        found_ips: &[IpAddr],
        found_ids: &[String],
        now: Millis,
    ) {
        for ip in &asked.ips {
            match found_ips.contains(ip) {
                true => self.absent.forget(ip),
                false => self.absent.missed(*ip, now, self.max_wait),
            }
        }
        for id in &asked.ids {
            match found_ids.contains(id) {
                true => self.proved.forget(id),
                false => self.proved.missed(id.clone(), now, self.max_wait),
            }
        }
    }
}

impl Subnets {
    /// Subnets to read the ranges of (a worker's, a capacity choice's), once each.
    pub fn note<'a>(&mut self, subnets: impl IntoIterator<Item = &'a str>) {
        for s in subnets {
            if !self.cidrs.contains_key(s) {
                self.unread.insert(s.to_string());
            }
        }
    }

    /// The subnets still to read, when a read is due (a failed one is tried a minute later).
    pub fn due(&mut self, now: Millis) -> Option<Vec<String>> {
        let due = self
            .asked
            .is_none_or(|at| now.saturating_sub(at) >= millis(SUBNETS_RETRY));
        if self.unread.is_empty() || !due {
            return None;
        }
        self.asked = Some(now);
        Some(self.unread.iter().cloned().collect())
    }

    pub fn read(&mut self, cidrs: BTreeMap<String, Vec<IpNet>>) {
        for (subnet, ranges) in cidrs {
            self.unread.remove(&subnet);
            self.cidrs.insert(subnet, ranges);
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        self.cidrs.values().flatten().any(|net| net.contains(&ip))
    }
}

/// A token bucket of calls.
struct Budget {
    tokens: u32,
    refilled: Millis,
}

impl Budget {
    fn full(now: Millis) -> Budget {
        Budget {
            tokens: BURST,
            refilled: now,
        }
    }

    /// Takes up to `want` calls; returns how many it may make.
    fn take(&mut self, want: u32, now: Millis) -> u32 {
        let earned = now.saturating_sub(self.refilled) / millis(REFILL);
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(BURST);
            self.refilled += millis(REFILL) * u64::from(earned.min(BURST));
            if self.tokens == BURST {
                self.refilled = now;
            }
        }
        let given = want.min(self.tokens);
        self.tokens -= given;
        given
    }
}

/// When to ask again about each key, and the last wait: the wait doubles at every miss, up to a
/// maximum.
struct Backoff<K> {
    next: HashMap<K, (Millis, Millis)>,
}

impl<K> Default for Backoff<K> {
    fn default() -> Self {
        Backoff {
            next: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Backoff<K> {
    fn keep(&mut self, named: &[K]) {
        let named: std::collections::HashSet<&K> = named.iter().collect();
        self.next.retain(|k, _| named.contains(k));
    }

    fn due(&self, k: &K, now: Millis) -> bool {
        self.next.get(k).is_none_or(|(at, _)| *at <= now)
    }

    fn forget(&mut self, k: &K) {
        self.next.remove(k);
    }

    fn missed(&mut self, k: K, now: Millis, max: Millis) {
        let wait = match self.next.get(&k) {
            Some((_, last)) => last.saturating_mul(2).min(max),
            None => millis(FIRST_RETRY),
        };
        self.next.insert(k, (now.saturating_add(wait), wait));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(n: usize) -> Vec<IpAddr> {
        (0..n)
            .map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1).parse().unwrap())
            .collect()
    }

    /// Any time: only the differences count.
    const START: Millis = 1_700_000_000_000;

    fn lookups(now: Millis) -> Lookups {
        let mut l = Lookups::new(Duration::from_secs(60), now);
        l.subnets.note(["subnet-a"]);
        assert_eq!(l.subnets.due(now), Some(vec!["subnet-a".to_string()]));
        l.subnets.read(BTreeMap::from([(
            "subnet-a".to_string(),
            vec!["10.0.0.0/16".parse().unwrap()],
        )]));
        l
    }

    /// Calls spent on 300 unknown IPs that stay, one pass every 200 ms.
    fn calls_per_half_minute(halves: usize) -> Vec<usize> {
        let mut l = lookups(START);
        let unknown = ips(300);
        let mut spent = vec![0; halves];
        for tick in 0..(halves * 150) {
            let now = START + 200 * tick as u64;
            let w = l.wanted(&unknown, &[], now);
            spent[tick / 150] += w.ips.len().div_ceil(PER_CALL);
            l.found(&w, &[], &[], now);
        }
        spent
    }

    #[test]
    fn three_hundred_unknown_ips_cost_at_most_ten_calls_then_three_per_half_minute() {
        let spent = calls_per_half_minute(6);
        assert!(spent[0] <= 10, "{spent:?}");
        assert!(spent[1..].iter().all(|&c| c <= 3), "{spent:?}");
        assert!(
            spent.iter().all(|&c| c > 0),
            "a new worker is still looked up: {spent:?}"
        );
    }

    #[test]
    fn ips_outside_the_workers_subnets_are_never_looked_up() {
        let now = START;
        let mut l = lookups(now);
        let outside: Vec<IpAddr> = vec!["192.168.1.5".parse().unwrap()];
        assert_eq!(l.wanted(&outside, &[], now), Wanted::default());
        let inside: Vec<IpAddr> = vec!["10.0.3.4".parse().unwrap()];
        assert_eq!(l.wanted(&inside, &[], now).ips, inside);
    }

    #[test]
    fn a_found_ip_is_forgotten_and_a_missed_one_waits_longer_each_time() {
        let now = START;
        let mut l = lookups(now);
        let ip: IpAddr = "10.0.3.4".parse().unwrap();
        let w = l.wanted(&[ip], &[], now);
        l.found(&w, &[], &[], now);
        assert!(l.wanted(&[ip], &[], now).ips.is_empty());
        let later = now + millis(FIRST_RETRY);
        let w = l.wanted(&[ip], &[], later);
        assert_eq!(w.ips, vec![ip]);
        l.found(&w, &[ip], &[], later);
        assert!(l.absent.next.is_empty());
        // No longer named: forgotten.
        l.absent.missed(ip, later, 60_000);
        l.wanted(&[], &[], later);
        assert!(l.absent.next.is_empty());
    }

    #[test]
    fn a_missed_ip_is_due_again_when_the_daemons_clock_passes_its_retry_and_not_before() {
        use crate::clock::{Clock, ManualClock};
        let clock = ManualClock::starting_at(START);
        let mut l = lookups(clock.now());
        let ip: IpAddr = "10.0.3.4".parse().unwrap();
        let w = l.wanted(&[ip], &[], clock.now());
        l.found(&w, &[], &[], clock.now());
        clock.advance(millis(FIRST_RETRY) - 1);
        assert!(l.wanted(&[ip], &[], clock.now()).ips.is_empty());
        clock.advance(1);
        assert_eq!(l.wanted(&[ip], &[], clock.now()).ips, vec![ip]);
    }
}
