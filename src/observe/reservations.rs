//! The Capacity Reservations and Capacity Blocks `workers.capacity` names by id, as
//! DescribeCapacityReservations says: what each reserves, where, how many instances are left,
//! until when, and whether it is a Capacity Block (launched with its own market type, drained
//! before its end). Read again every [`REREAD`]: launches and terminations change what is left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_ec2::types::{CapacityReservation, CapacityReservationType};
use aws_sdk_ec2::Client;

use crate::aws::AwsError;
use crate::clock::millis;
use crate::model::{Choice, Millis, Reservation};

/// How often the reservations are read again, and a failed read tried again.
pub const REREAD: Duration = Duration::from_secs(20);

/// Why the reservations are unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReservationError {
    #[error("DescribeCapacityReservations: {0}")]
    Describe(AwsError),
    #[error("not read yet")]
    NotRead,
}

/// The reservations read, by id.
pub type Reservations = BTreeMap<String, Reservation>;

/// The reservations as last read (or why they could not be), read again when due.
pub struct ReservationWatch {
    client: Client,
    ids: Vec<String>,
    last: Option<Result<Reservations, ReservationError>>,
    read_at: Option<Millis>,
}

impl ReservationWatch {
    /// `None` when no choice names a reservation by id.
    pub fn new(client: Client, ids: Vec<String>) -> Option<ReservationWatch> {
        (!ids.is_empty()).then_some(ReservationWatch {
            client,
            ids,
            last: None,
            read_at: None,
        })
    }

    /// This pass's view: read again when due.
    pub async fn poll(&mut self, now: Millis) -> Result<Reservations, ReservationError> {
        let due = self
            .read_at
            .is_none_or(|at| now.saturating_sub(at) >= millis(REREAD));
        if due {
            self.read_at = Some(now);
            let read = read(&self.client, &self.ids).await;
            if let Err(e) = &read {
                tracing::warn!("capacity reservations unknown: {e}");
            }
            self.last = Some(read);
        }
        (self.last.clone()).unwrap_or(Err(ReservationError::NotRead))
    }
}

/// The reservations these choices name by id, each once (a resource group is not read).
pub fn ids<'a>(choices: impl IntoIterator<Item = &'a Choice>) -> Vec<String> {
    let ids: BTreeSet<&str> = (choices.into_iter())
        .filter_map(Choice::reservation_id)
        .collect();
    ids.into_iter().map(str::to_string).collect()
}

/// Every reservation in `ids`, by id. EC2 refuses the whole call when one id is unknown, and
/// says which.
pub async fn read(client: &Client, ids: &[String]) -> Result<Reservations, ReservationError> {
    let mut pages = (client.describe_capacity_reservations())
        .set_capacity_reservation_ids(Some(ids.to_vec()))
        .into_paginator()
        .send();
    let mut found = BTreeMap::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| ReservationError::Describe(AwsError::of(&e)))?;
        for r in page.capacity_reservations().iter().filter_map(reservation) {
            found.insert(r.id.clone(), r);
        }
    }
    Ok(found)
}

fn reservation(r: &CapacityReservation) -> Option<Reservation> {
    let count = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    Some(Reservation {
        id: r.capacity_reservation_id()?.to_string(),
        instance_type: r.instance_type().unwrap_or_default().to_string(),
        zone: r.availability_zone().unwrap_or_default().to_string(),
        total: count(r.total_instance_count()),
        available: count(r.available_instance_count()),
        state: (r.state()).map_or("unknown", |s| s.as_str()).to_string(),
        end: (r.end_date())
            .and_then(|d| d.to_millis().ok())
            .and_then(|ms| u64::try_from(ms).ok()),
        capacity_block: r.reservation_type() == Some(&CapacityReservationType::CapacityBlock),
    })
}

/// The reservations the capacity choices name, read again when due; `None` when they name none.
pub async fn read_when_due(
    watch: Option<&mut ReservationWatch>,
    now: Millis,
) -> Option<Result<Reservations, ReservationError>> {
    Some(watch?.poll(now).await)
}
