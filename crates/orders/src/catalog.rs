//! The reference data the orders application enriches with: the **product catalog** (a global
//! table on `<ns>.products`, sku → name, category, list price) and the **customer profiles**
//! (a co-partitioned table on `<ns>.customer-profiles`, customer id → name, tier), published by
//! the order service's second outbox table.
//!
//! In the demo the catalog is written by a small "catalog service" step at start
//! ([`publish_catalog`]): in production it would be the product-information system's own
//! compacted topic (a CDC feed of its catalog table, or its own outbox), which the orders
//! application only reads.
//!
//! ```
//! use eosflow_orders::{catalog, Topics};
//!
//! let topics = Topics::new("shop");
//! assert_eq!(catalog::products(&topics).topic(), "shop.products");
//! assert_eq!(catalog::profiles(&topics).topic(), "shop.customer-profiles");
//! let products = catalog::demo_catalog(45);
//! assert_eq!(products.len(), 45);
//! assert_eq!(products[44].sku, "sku-044"); // the order service also orders sku-045…sku-049
//! ```

use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer};
use serde::{Deserialize, Serialize};

use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::topology::{GlobalTableHandle, TableHandle};

use super::Topics;

/// A product of the catalog: the value of `<ns>.products`, keyed by its sku.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// Stock keeping unit (also the key).
    pub sku: String,
    /// What the customer sees.
    pub name: String,
    /// Its shelf: the read model's per-category view groups by it.
    pub category: String,
    /// The catalog's list price, minor units (an order line may carry a discounted one).
    pub list_price_minor: i64,
}

/// The tier of a customer.
pub const TIERS: [&str; 3] = ["gold", "silver", "bronze"];

/// A customer's profile: the value of `<ns>.customer-profiles`, keyed by customer id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerProfile {
    /// The customer (also the key).
    pub customer_id: String,
    /// Their name.
    pub name: String,
    /// `gold`, `silver` or `bronze`; changes now and then.
    pub tier: String,
}

/// The event type of a profile row in the order service's outbox.
pub const CUSTOMER_PROFILE_TYPE: &str = "customers.customer-profile.v1";

/// The products global table of `topics` (`<ns>.products`, JSON values).
pub fn products(topics: &Topics) -> GlobalTableHandle<String, Product> {
    GlobalTableHandle::new(
        "products",
        topics.products.clone(),
        StringSerde,
        JsonSerde::new(),
    )
}

/// The customer profiles table of `topics` (`<ns>.customer-profiles`, JSON values as the
/// outbox router publishes them).
pub fn profiles(topics: &Topics) -> TableHandle<String, CustomerProfile> {
    TableHandle::new(
        "profiles",
        topics.profiles.clone(),
        StringSerde,
        JsonSerde::new(),
    )
}

/// The demo's catalog: `sku-000` … `sku-0<n-1>`, the skus the order service orders
/// (`sku-000`…`sku-049`), each with a name and one of five categories derived from its number.
pub fn demo_catalog(n: u32) -> Vec<Product> {
    const CATEGORIES: [&str; 5] = ["kitchen", "garden", "office", "toys", "books"];
    const THINGS: [&str; 10] = [
        "teapot", "trowel", "stapler", "kite", "atlas", "kettle", "rake", "lamp", "puzzle", "novel",
    ];
    (0..n)
        .map(|i| Product {
            sku: format!("sku-{i:03}"),
            name: format!("{} no. {i}", THINGS[i as usize % THINGS.len()]),
            category: CATEGORIES[i as usize % CATEGORIES.len()].to_string(),
            list_price_minor: 100 + i64::from(i) * 37,
        })
        .collect()
}

/// The catalog service of the demo: writes `products` to `topic` (keyed by sku, JSON) and waits
/// until every record is acknowledged (deadline `timeout`).
pub fn publish_catalog(
    clients: &KafkaClients,
    topic: &str,
    products: &[Product],
    timeout: Duration,
) -> Result<(), String> {
    publish_json(
        clients,
        topic,
        products.iter().map(|p| (p.sku.clone(), p)),
        timeout,
    )
}

/// Writes `rows` (key, JSON value) to `topic` with an idempotent producer (librdkafka's
/// `murmur2_random` partitioner, as every eosflow producer) and waits until every record is
/// acknowledged (deadline `timeout`): reference data written by a tool or a test.
pub fn publish_json<T: Serialize>(
    clients: &KafkaClients,
    topic: &str,
    rows: impl IntoIterator<Item = (String, T)>,
    timeout: Duration,
) -> Result<(), String> {
    let producer: rdkafka::producer::BaseProducer = clients
        .config(ClientRole::Idempotent)
        .create()
        .map_err(|e| format!("producer for {topic}: {e}"))?;
    for (key, row) in rows {
        let value = serde_json::to_vec(&row).map_err(|e| format!("encoding {key}: {e}"))?;
        let mut record = BaseRecord::to(topic).key(key.as_bytes()).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    r,
                )) => {
                    record = r;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(format!("producing {key} to {topic}: {e}")),
            }
        }
    }
    producer
        .flush(timeout)
        .map_err(|e| format!("flushing to {topic}: {e}"))
}
