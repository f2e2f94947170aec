//! The price each Spot worker is paid at, from EC2's Spot price history
//! (`workers.spot_price_history`): the goodput ledger's dollars for the Spot workers whose
//! instance type has no price in `workers.prices`. Read for the Spot workers' types every
//! [`REREAD`], and again at most every [`RETRY`] while a Spot worker's type and zone have none
//! (a new type or zone, or a failed read). No pass depends on it: the ledger only prices time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types::{InstanceType, SpotPrice};
use aws_sdk_ec2::Client;

use crate::aws::AwsError;
use crate::clock::millis;
use crate::model::{Instance, Millis};

/// Spot prices change at most a few times a day per type and zone.
pub const REREAD: Duration = Duration::from_secs(3600);
pub const RETRY: Duration = Duration::from_secs(60);

/// Linux Spot prices: the history has one series per operating system, and a GPU worker runs
/// Linux (`Linux/UNIX`, or `Linux/UNIX (Amazon VPC)` as some answers name it).
const LINUX: &str = "Linux/UNIX";

/// Dollars an hour by instance type, then zone: looked up by an instance's own names, with no
/// key built per worker and pass.
pub type SpotPrices = BTreeMap<String, BTreeMap<String, f64>>;

/// The prices as last read, read again when due.
pub struct SpotPriceWatch {
    client: Client,
    prices: SpotPrices,
    read_at: Option<Millis>,
    asked_at: Option<Millis>,
}

impl SpotPriceWatch {
    pub fn new(client: Client) -> SpotPriceWatch {
        SpotPriceWatch {
            client,
            prices: SpotPrices::new(),
            read_at: None,
            asked_at: None,
        }
    }

    /// Every price as last read.
    pub fn prices(&self) -> &SpotPrices {
        &self.prices
    }

    /// The price of `i`'s type in its zone, when it is a Spot worker and EC2 gave one.
    pub fn price(&self, i: &Instance) -> Option<f64> {
        let zones = (i.market == "spot").then(|| self.prices.get(&i.instance_type))??;
        zones.get(&i.az).copied()
    }

    /// Reads the Spot workers' prices in `list` when due (see the module's note).
    pub async fn poll(&mut self, list: &[Instance], now: Millis) {
        let since = |at: Option<Millis>| at.map(|at| now.saturating_sub(at));
        let may_ask = since(self.asked_at).is_none_or(|ms| ms >= millis(RETRY));
        let stale = since(self.read_at).is_none_or(|ms| ms >= millis(REREAD));
        let spot = || list.iter().filter(|i| i.market == "spot");
        let due = stale || spot().any(|i| self.price(i).is_none());
        if !may_ask || spot().next().is_none() || !due {
            return;
        }
        let types: BTreeSet<&str> = spot().map(|i| i.instance_type.as_str()).collect();
        self.asked_at = Some(now);
        match read(&self.client, &types, now).await {
            Ok(prices) => {
                self.prices = prices;
                self.read_at = Some(now);
            }
            Err(e) => tracing::warn!("Spot prices unknown (the ledger's dollars wait): {e}"),
        }
    }
}

/// The newest Linux price of each of `types` in each zone, in effect at `now`.
pub async fn read(
    client: &Client,
    types: &BTreeSet<&str>,
    now: Millis,
) -> Result<SpotPrices, AwsError> {
    let at = DateTime::from_millis(i64::try_from(now).unwrap_or(i64::MAX));
    let mut pages = (client.describe_spot_price_history())
        .set_instance_types(Some(types.iter().map(|t| InstanceType::from(*t)).collect()))
        .product_descriptions(LINUX)
        .start_time(at)
        .end_time(at)
        .into_paginator()
        .send();
    let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::of(&e))?;
        for (key, at, price) in page.spot_price_history().iter().filter_map(entry) {
            let older = newest.get(&key).is_some_and(|(seen, _)| *seen > at);
            if !older {
                newest.insert(key, (at, price));
            }
        }
    }
    let mut prices = SpotPrices::new();
    for ((kind, zone), (_, price)) in newest {
        prices.entry(kind).or_default().insert(zone, price);
    }
    Ok(prices)
}

/// A Linux entry's (type, zone), time and price; `None` for another system's or a price that
/// is not a number above 0.
fn entry(p: &SpotPrice) -> Option<((String, String), i64, f64)> {
    let linux = p.product_description()?.as_str().starts_with(LINUX);
    let price: f64 = p.spot_price()?.parse().ok()?;
    if !(linux && price.is_finite() && price > 0.0) {
        return None;
    }
    let kind = p.instance_type()?.as_str().to_string();
    let zone = p.availability_zone()?.to_string();
    let at = p.timestamp().map_or(0, |t| t.to_millis().unwrap_or(0));
    Some(((kind, zone), at, price))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::RiProductDescription;

    fn spot_price(system: &str, price: &str, at: i64) -> SpotPrice {
        SpotPrice::builder()
            .instance_type(InstanceType::P4d24xlarge)
            .availability_zone("us-east-1a")
            .product_description(RiProductDescription::from(system))
            .spot_price(price)
            .timestamp(DateTime::from_millis(at))
            .build()
    }

    #[test]
    fn only_a_linux_price_above_zero_is_taken() {
        let key = ("p4d.24xlarge".to_string(), "us-east-1a".to_string());
        let got = entry(&spot_price("Linux/UNIX (Amazon VPC)", "9.8304", 5));
        assert_eq!(got, Some((key, 5, 9.8304)));
        assert_eq!(entry(&spot_price("Windows", "12.1", 5)), None);
        assert_eq!(entry(&spot_price("Linux/UNIX", "0", 5)), None);
        assert_eq!(entry(&spot_price("Linux/UNIX", "NaN", 5)), None);
        assert_eq!(entry(&spot_price("Linux/UNIX", "cheap", 5)), None);
    }
}
