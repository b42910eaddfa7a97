//! The per-customer read model (CQRS projection). Input: `<ns>.customer-feed`, one record per
//! order state change keyed by customer, carrying the order aggregate's version. Each update
//! is applied only if its version is newer than what the view holds for that order, so a
//! replayed, duplicated or reordered update can never move an order back. Output: the view,
//! one compacted record per customer on `<ns>.customers`.
//!
//! Enrichment: the view carries the customer's profile (name, tier) from the
//! `<ns>.customer-profiles` table — the order service's second outbox table, co-partitioned
//! with the feed, read with [`Context::store`] — and each order's products as the order
//! processor stamped them from the catalog. A customer whose profile is not there yet gets
//! `None` (counted in `orders_readmodel_missing_profiles_total`); the next update of that
//! customer fills it in. It should not happen: the order service commits the profile before the
//! customer's first order, the router publishes them in that order, and the runtime applies a
//! table record before a stream record of the same or a later timestamp. A tier change reaches
//! the view with the customer's next update.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::catalog::{self, CustomerProfile};
use super::messages::{types, CustomerOrderUpdated, OrderedProduct};
use super::model::OrderStatus;
use super::{telemetry, Topics};
use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record};
use eosflow::topology::TableHandle;

/// One order in a customer's view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEntry {
    /// Its latest status.
    pub status: OrderStatus,
    /// The aggregate version that status came with.
    pub version: u64,
    /// Its total, minor units.
    pub total_minor: i64,
    /// Its lines with the catalog's product names (see [`OrderedProduct`]).
    #[serde(default)]
    pub products: Vec<OrderedProduct>,
}

/// What a customer's page shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerView {
    /// The customer.
    pub customer_id: String,
    /// Their orders by id.
    pub orders: BTreeMap<String, OrderEntry>,
    /// Sum of the totals of shipped orders.
    pub shipped_total_minor: i64,
    /// The customer's name from their profile (`None`: no profile yet).
    #[serde(default)]
    pub name: Option<String>,
    /// The customer's tier from their profile as it was at the view's last update.
    #[serde(default)]
    pub tier: Option<String>,
}

impl CustomerView {
    /// Applies `u` if it is newer than the view's version of that order; `false` (nothing
    /// changed) for a stale or repeated update.
    pub fn apply(&mut self, u: &CustomerOrderUpdated) -> bool {
        if let Some(e) = self.orders.get(&u.order_id) {
            if e.version >= u.version {
                return false;
            }
        }
        self.customer_id.clone_from(&u.customer_id);
        self.orders.insert(
            u.order_id.clone(),
            OrderEntry {
                status: u.status,
                version: u.version,
                total_minor: u.total_minor,
                products: u.products.clone(),
            },
        );
        self.shipped_total_minor = self
            .orders
            .values()
            .filter(|e| e.status == OrderStatus::Shipped)
            .map(|e| e.total_minor)
            .sum();
        true
    }

    /// Puts `profile`'s name and tier into the view (`None` clears them).
    pub fn set_profile(&mut self, profile: Option<&CustomerProfile>) {
        self.name = profile.map(|p| p.name.clone());
        self.tier = profile.map(|p| p.tier.clone());
    }
}

/// The projection processor.
#[derive(Debug, Clone)]
pub struct CustomersProcessor {
    topics: Topics,
    profiles: TableHandle<String, CustomerProfile>,
}

impl CustomersProcessor {
    /// Writes views to `topics.customers`, reading profiles from `topics.profiles`.
    pub fn new(topics: Topics) -> Self {
        Self {
            profiles: catalog::profiles(&topics),
            topics,
        }
    }

    /// The customer profiles table (the test driver pipes rows with it).
    pub fn profiles(&self) -> &TableHandle<String, CustomerProfile> {
        &self.profiles
    }
}

impl Processor for CustomersProcessor {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        if r.header("type") != Some(types::CUSTOMER_ORDER_UPDATED.as_bytes()) {
            return Err(ProcessError::Permanent(format!(
                "unknown-type: expected {}, got {:?}",
                types::CUSTOMER_ORDER_UPDATED,
                r.header("type").map(String::from_utf8_lossy)
            )));
        }
        let v = r
            .value
            .ok_or_else(|| ProcessError::permanent("missing-value: an update without a value"))?;
        let u: CustomerOrderUpdated = serde_json::from_slice(v).map_err(|e| {
            ProcessError::Permanent(format!(
                "bad-payload: {} does not match its contract: {e}",
                types::CUSTOMER_ORDER_UPDATED
            ))
        })?;
        let key = format!("customer/{}", u.customer_id);
        let mut view: CustomerView = match ctx.get(key.as_bytes())? {
            Some(b) => serde_json::from_slice(&b)
                .map_err(|e| ProcessError::permanent(format!("stored {key} is corrupt: {e}")))?,
            None => CustomerView::default(),
        };
        if !view.apply(&u) {
            telemetry::stale_projection_update();
            return Ok(());
        }
        let profile = ctx.store(self.profiles.store())?.get(&u.customer_id)?;
        if profile.is_none() {
            telemetry::missing_profile();
        }
        view.set_profile(profile.as_ref());
        let bytes = serde_json::to_vec(&view).unwrap_or_default();
        ctx.put(key.as_bytes(), bytes.clone());
        ctx.emit(
            self.topics.customers.clone(),
            Some(u.customer_id.into_bytes()),
            Some(bytes),
            vec![],
        );
        Ok(())
    }
}

impl CustomersProcessor {
    /// The read model as it runs: updates of one customer commute under the version guard
    /// (unordered: no need to hold later ones behind a retried one), dedup is by the update's
    /// own identity (a re-sent update is stale anyway: none), and it reads the customer
    /// profiles, co-partitioned with the feed (both keyed by customer id).
    pub fn spec(self) -> ProcessorSpec<Self> {
        let profiles = self.profiles.clone();
        ProcessorSpec::new(self)
            .store_name(super::Topology::Customers.store())
            .unordered()
            .no_dedup()
            .table(&profiles)
    }
}
