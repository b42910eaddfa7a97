//! Order totals per customer on the streams DSL (docs/dsl.md): orders come in on
//! `dsl-order-totals.orders` (key = order id, value = JSON `{"customer_id":"c-1",
//! "amount_cents":1250}`), customers on the compacted `dsl-order-totals.customers` (key =
//! customer id, value = JSON `{"name":"Ann"}`). Each order is re-keyed by its customer id
//! through a repartition topic (so it lands in the partition of its customer's row), joined
//! with the customers table, and added to its customer's total; after each order, the
//! customer's new total goes to `dsl-order-totals.totals` as JSON, keyed by customer id:
//! `{"customer_id":"c-1","name":"Ann","orders":2,"total_cents":3000}`. An order of a customer
//! not in the table yet still counts (left join; `name` stays what it was, `null` at first).
//! An order without a customer id or with an amount that is not positive goes to
//! `dsl-order-totals.orders.DLT`, and so does a value that is not JSON. `tests.rs` runs it in
//! the test driver, no broker.
//!
//! ```text
//! eval "$(dev/stack env)"
//! cargo run --example dsl_order_totals
//! ```
//!
//! It creates its inputs and output when they are missing (`orders` and `customers` with the
//! same partition count: the repartition topic gets the inputs' count, and the join needs it
//! co-partitioned with `customers`); the instance creates the internal topics when it starts
//! (the repartition topic, the totals store's changelog, retry levels and DLTs).

#[cfg(test)]
mod tests;

use std::time::Duration;

use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::processor::ProcessError;
use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::topology::{Topology, TopologyError};

/// Input: key = order id, value = an [`Order`] as JSON.
const ORDERS: &str = "dsl-order-totals.orders";
/// Input (compacted): key = customer id, value = a [`Customer`] as JSON.
const CUSTOMERS: &str = "dsl-order-totals.customers";
/// Output: key = customer id, value = the customer's [`CustomerTotal`] after each order.
const TOTALS: &str = "dsl-order-totals.totals";

/// One order.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Order {
    customer_id: String,
    amount_cents: i64,
}

/// One row of the customers table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Customer {
    name: String,
}

/// A customer's orders so far.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct CustomerTotal {
    customer_id: String,
    name: Option<String>,
    orders: i64,
    total_cents: i64,
}

/// orders → checked → re-keyed by customer → ⋈ customers → summed per customer → totals.
fn topology() -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let customers = builder.table(CUSTOMERS, Consumed::with(StringSerde, JsonSerde::new()));
    builder
        .stream(
            ORDERS,
            Consumed::with(StringSerde, JsonSerde::<Order>::new()),
        )
        .try_filter(|_, order| {
            if order.customer_id.is_empty() || order.amount_cents <= 0 {
                let why = "an order needs a customer id and a positive amount";
                return Err(ProcessError::permanent(why));
            }
            Ok(true)
        })
        .select_key(|_, order| order.customer_id.clone())
        .repartition(Grouped::with(StringSerde, JsonSerde::new()).named("orders-by-customer"))
        .left_join_table(&customers, |order, customer: Option<&Customer>| {
            (order.amount_cents, customer.map(|c| c.name.clone()))
        })
        .group_by_key()
        .aggregate(
            CustomerTotal::default,
            |customer_id, (amount_cents, name), total| CustomerTotal {
                customer_id: customer_id.clone(),
                name: name.clone().or(total.name),
                orders: total.orders + 1,
                total_cents: total.total_cents + amount_cents,
            },
            Materialized::with(StringSerde, JsonSerde::new()).named("customer-totals"),
        )
        .to_stream()
        .to(TOTALS, Produced::with(StringSerde, JsonSerde::new()));
    builder.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let mut config = eosflow::Config::load(None)?;
    config.app.id = "dsl-order-totals".into();
    let topology = topology()?;
    // The inputs and output are ours; `run` creates the internal topics.
    let ours = [
        TopicSpec::new(ORDERS, 4, "delete"),
        TopicSpec::new(CUSTOMERS, 4, "compact"),
        TopicSpec::new(TOTALS, 4, "delete"),
    ];
    let clients = KafkaClients::new(config.kafka.clone());
    topics::apply_blocking(&clients, &ours, Duration::from_secs(30))?;
    let summary = eosflow::run(&config, topology)?;
    println!("stopped after {} records", summary.records);
    Ok(())
}
