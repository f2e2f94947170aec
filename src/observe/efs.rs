//! The shared file system's mount targets: the Availability Zones where a worker can mount it.
//!
//! The answer rarely changes, so the daemon keeps it in a [`MountTargetCache`] and re-reads it on
//! a period, and sooner when a worker shows up in a zone the last answer lacks (a person may just
//! have created the mount target it waits for). A read that fails or is incomplete is "unknown":
//! nothing is concluded from it. [`MountTargetWatch`] does the reading without letting a slow
//! EFS endpoint hold up a pass.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_efs::types::{LifeCycleState, MountTargetDescription};
use aws_sdk_efs::Client;
use tokio::task::JoinHandle;

use crate::aws::describe_error;
use crate::clock::millis;
use crate::model::{Millis, MountTargets};

/// A read triggered by a worker in an unexplained zone comes at most this often.
pub const MIN_GAP: Duration = Duration::from_secs(60);

/// A file system has at most one mount target per zone, so a handful of pages at most; more
/// means the service keeps answering with new markers, and the read is given up as partial.
const MAX_PAGES: usize = 100;

/// How long a pass waits for a read it started. A read normally answers well within it, so the
/// pass decides on a fresh answer; a slower one finishes in the background, and until then the
/// zones are unknown rather than the pass (and any interruption it heeds) being held up.
const PASS_WAIT: Duration = Duration::from_secs(2);

/// Zone names, as this account sees them.
pub type Zones = BTreeSet<String>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountTargetError {
    #[error("DescribeMountTargets {fs_id}: {message}")]
    Describe { fs_id: String, message: String },
    #[error("DescribeMountTargets {fs_id}: {why}; the answer is incomplete")]
    Partial { fs_id: String, why: Incomplete },
    #[error("reading the mount targets of {fs_id}: {why}")]
    Task { fs_id: String, why: String },
    #[error("{fs_id}: not read yet")]
    NotRead { fs_id: String },
}

/// What makes an answer that came incomplete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incomplete {
    #[error("mount target {0} has no AvailabilityZoneName")]
    NoZone(String),
    #[error("marker {0} came back twice")]
    MarkerAgain(String),
    #[error("still more after {max} pages", max = MAX_PAGES)]
    TooManyPages,
}

/// The zones (names, as this account sees them) where `fs_id` has a mount target that is, or is
/// about to be, usable; an incomplete answer is an `Err`, never a smaller set.
pub async fn mount_target_zones(client: &Client, fs_id: &str) -> Result<Zones, MountTargetError> {
    let mut zones = BTreeSet::new();
    for mt in mount_targets(client, fs_id).await? {
        if let Some(zone) = usable_zone(&mt).map_err(|why| partial(fs_id, why))? {
            zones.insert(zone.to_string());
        }
    }
    Ok(zones)
}

/// Every mount target of `fs_id`, from every page (DescribeMountTargets, Amazon EFS API
/// Reference: https://docs.aws.amazon.com/efs/latest/ug/API_DescribeMountTargets.html, paginated
/// by `Marker` / `NextMarker`); an error or an incomplete answer is an `Err`.
pub async fn mount_targets(
    client: &Client,
    fs_id: &str,
) -> Result<Vec<MountTargetDescription>, MountTargetError> {
    let mut all = Vec::new();
    let mut seen_markers = BTreeSet::new();
    let mut marker: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = client
            .describe_mount_targets()
            .file_system_id(fs_id)
            .set_marker(marker.clone())
            .send()
            .await
            .map_err(|e| MountTargetError::Describe {
                fs_id: fs_id.to_string(),
                message: describe_error(&e),
            })?;
        all.extend(page.mount_targets().iter().cloned());
        // The SDK's paginator ends quietly on a repeated marker; here that is a partial read.
        match page.next_marker().filter(|m| !m.is_empty()) {
            None => return Ok(all),
            Some(next) if !seen_markers.insert(next.to_string()) => {
                return Err(partial(fs_id, Incomplete::MarkerAgain(next.to_string())));
            }
            Some(next) => marker = Some(next.to_string()),
        }
    }
    Err(partial(fs_id, Incomplete::TooManyPages))
}

fn partial(fs_id: &str, why: Incomplete) -> MountTargetError {
    MountTargetError::Partial {
        fs_id: fs_id.to_string(),
        why,
    }
}

/// The zone of a mount target a worker can mount through now or once it is created; `None` for
/// one going away or failed (`deleting`, `deleted`, `error`: MountTargetDescription, Amazon EFS
/// API Reference, https://docs.aws.amazon.com/efs/latest/ug/API_MountTargetDescription.html).
fn usable_zone(mt: &MountTargetDescription) -> Result<Option<&str>, Incomplete> {
    let usable = matches!(
        mt.life_cycle_state(),
        LifeCycleState::Available | LifeCycleState::Creating | LifeCycleState::Updating
    );
    if !usable {
        return Ok(None);
    }
    // AvailabilityZoneName is optional in the API: without it the target's zone is unknown,
    // and leaving it out would make its zone look uncovered.
    match mt.availability_zone_name().filter(|z| !z.is_empty()) {
        Some(zone) => Ok(Some(zone)),
        None => Err(Incomplete::NoZone(mt.mount_target_id().to_string())),
    }
}

/// The last complete answer and when to ask again. Time is passed in, so the schedule is tested
/// without a clock.
#[derive(Debug)]
pub struct MountTargetCache {
    fs_id: String,
    refresh: Duration,
    /// The last complete read; `None` before the first and after a failed one.
    known: Option<Zones>,
    error: Option<MountTargetError>,
    last_read: Option<Millis>,
}

impl MountTargetCache {
    pub fn new(fs_id: &str, refresh: Duration) -> MountTargetCache {
        MountTargetCache {
            fs_id: fs_id.to_string(),
            refresh,
            known: None,
            error: None,
            last_read: None,
        }
    }

    pub fn fs_id(&self) -> &str {
        &self.fs_id
    }

    /// Whether to read now: never read, the refresh period is over, or a worker is in a zone the
    /// last answer does not cover (or there is no answer), at most once per [`MIN_GAP`].
    pub fn due<'z>(&self, now: Millis, worker_zones: impl IntoIterator<Item = &'z str>) -> bool {
        let Some(last) = self.last_read else {
            return true;
        };
        let age = now.saturating_sub(last);
        if age >= millis(self.refresh) {
            return true;
        }
        let unexplained = match &self.known {
            Some(known) => worker_zones.into_iter().any(|z| !known.contains(z)),
            None => true,
        };
        unexplained && age >= millis(MIN_GAP.min(self.refresh))
    }

    /// A read starts at `now`: the schedule counts from here.
    pub fn begin(&mut self, now: Millis) {
        self.last_read = Some(now);
    }

    /// Records a read's answer: a failure forgets the previous answer rather than keep showing
    /// it as current.
    pub fn finish(&mut self, read: Result<Zones, MountTargetError>) {
        match read {
            Ok(zones) => {
                if self.known.as_ref() != Some(&zones) {
                    tracing::info!(fs = %self.fs_id, zones = ?zones, "EFS mount targets read");
                }
                self.known = Some(zones);
                self.error = None;
            }
            Err(e) => {
                self.known = None;
                self.error = Some(e);
            }
        }
    }

    /// What decide gets: `None` while unknown.
    pub fn view(&self) -> Option<MountTargets> {
        self.known.as_ref().map(|zones| MountTargets {
            fs_id: self.fs_id.clone(),
            zones: zones.clone(),
        })
    }

    pub fn error(&self) -> Option<&MountTargetError> {
        self.error.as_ref()
    }

    /// One line for `dtctl status`: the zones, or why they are unknown.
    pub fn summary(&self) -> Result<String, MountTargetError> {
        match (&self.known, &self.error) {
            (Some(zones), _) if zones.is_empty() => Ok(format!("{}: no mount targets", self.fs_id)),
            (Some(zones), _) => {
                let list: Vec<&str> = zones.iter().map(String::as_str).collect();
                Ok(format!(
                    "{}: mount targets in {}",
                    self.fs_id,
                    list.join(", ")
                ))
            }
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Err(MountTargetError::NotRead {
                fs_id: self.fs_id.clone(),
            }),
        }
    }
}

/// The cache and the reads that fill it, one at a time, each on a task of its own.
pub struct MountTargetWatch {
    client: Client,
    cache: MountTargetCache,
    reading: Option<JoinHandle<Result<Zones, MountTargetError>>>,
}

impl MountTargetWatch {
    pub fn new(client: Client, fs_id: &str, refresh: Duration) -> MountTargetWatch {
        MountTargetWatch {
            client,
            cache: MountTargetCache::new(fs_id, refresh),
            reading: None,
        }
    }

    pub fn cache(&self) -> &MountTargetCache {
        &self.cache
    }

    /// This pass's zones: starts a read when one is due, waits for it a little, and says
    /// "unknown" while one is still out (it may be re-checking a zone just seen uncovered).
    pub async fn poll<'z>(
        &mut self,
        now: Millis,
        worker_zones: impl IntoIterator<Item = &'z str>,
    ) -> Option<MountTargets> {
        if self.reading.is_none() && self.cache.due(now, worker_zones) {
            self.cache.begin(now);
            let (client, fs_id) = (self.client.clone(), self.cache.fs_id.clone());
            let read = async move { mount_target_zones(&client, &fs_id).await };
            self.reading = Some(tokio::spawn(read));
        }
        if let Some(handle) = self.reading.as_mut() {
            let joined = tokio::time::timeout(PASS_WAIT, handle).await.ok()?;
            self.reading = None;
            let read = joined.unwrap_or_else(|e| {
                Err(MountTargetError::Task {
                    fs_id: self.cache.fs_id.clone(),
                    why: e.to_string(),
                })
            });
            self.cache.finish(read);
        }
        self.cache.view()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFRESH: Duration = Duration::from_secs(300);

    fn zones(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn failed() -> MountTargetError {
        MountTargetError::Describe {
            fs_id: "fs-0123abcd".into(),
            message: "throttled".into(),
        }
    }

    #[test]
    fn read_first_then_only_on_the_period_while_every_zone_is_covered() {
        let t0: Millis = 1_700_000_000_000;
        let mut c = MountTargetCache::new("fs-0123abcd", REFRESH);
        assert!(c.due(t0, ["us-east-1a"]));
        assert_eq!(c.view(), None, "unknown before the first read");
        c.begin(t0);
        c.finish(Ok(zones(&["us-east-1a"])));
        assert!(!c.due(t0 + 299_000, ["us-east-1a"]));
        assert!(c.due(t0 + millis(REFRESH), ["us-east-1a"]));
        assert_eq!(c.view().unwrap().zones, zones(&["us-east-1a"]));
    }

    #[test]
    fn a_worker_in_an_uncovered_zone_triggers_a_read_at_most_once_a_minute() {
        let t0: Millis = 1_700_000_000_000;
        let mut c = MountTargetCache::new("fs-0123abcd", REFRESH);
        c.begin(t0);
        c.finish(Ok(zones(&["us-east-1a"])));
        let both = ["us-east-1a", "us-east-1c"];
        assert!(!c.due(t0 + 59_000, both));
        assert!(c.due(t0 + millis(MIN_GAP), both));
        // A short refresh period bounds it too (the tests use one).
        let mut short = MountTargetCache::new("fs-0123abcd", Duration::from_secs(2));
        short.begin(t0);
        short.finish(Ok(zones(&["us-east-1a"])));
        assert!(short.due(t0 + 2_000, both));
    }

    #[test]
    fn a_failed_read_is_unknown_and_retried_after_the_gap() {
        let t0: Millis = 1_700_000_000_000;
        let mut c = MountTargetCache::new("fs-0123abcd", REFRESH);
        c.begin(t0);
        c.finish(Ok(zones(&["us-east-1a"])));
        c.begin(t0);
        c.finish(Err(failed()));
        assert_eq!(c.view(), None, "never a smaller set from a failed read");
        assert!(c.summary().unwrap_err().to_string().contains("throttled"));
        assert!(!c.due(t0 + 30_000, ["us-east-1a"]));
        assert!(c.due(t0 + millis(MIN_GAP), ["us-east-1a"]));
        c.begin(t0 + millis(MIN_GAP));
        c.finish(Ok(zones(&["us-east-1a", "us-east-1b"])));
        assert_eq!(c.error(), None);
        assert_eq!(
            c.summary().unwrap(),
            "fs-0123abcd: mount targets in us-east-1a, us-east-1b"
        );
    }

    fn target(state: LifeCycleState, zone: Option<&str>) -> MountTargetDescription {
        MountTargetDescription::builder()
            .mount_target_id("fsmt-0123abcd")
            .file_system_id("fs-0123abcd")
            .subnet_id("subnet-0123abcd")
            .life_cycle_state(state)
            .set_availability_zone_name(zone.map(str::to_string))
            .build()
            .unwrap()
    }

    #[test]
    fn only_live_mount_targets_count_and_one_without_a_zone_makes_the_read_partial() {
        let a = Some("us-east-1a");
        assert_eq!(usable_zone(&target(LifeCycleState::Available, a)), Ok(a));
        assert_eq!(usable_zone(&target(LifeCycleState::Creating, a)), Ok(a));
        assert_eq!(usable_zone(&target(LifeCycleState::Deleting, a)), Ok(None));
        assert_eq!(usable_zone(&target(LifeCycleState::Error, a)), Ok(None));
        assert!(usable_zone(&target(LifeCycleState::Available, None)).is_err());
    }
}
