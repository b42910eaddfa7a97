//! eosflow-orders — the reference orders application, built on the `eosflow` core's public API
//! (and the outbox router's SQL helpers for its order service): an order aggregate with its fulfilment saga, two
//! simulated services (stock, payment) behind command/reply topics, and a per-customer read
//! model — each a Processor on the exactly-once runtime, all keyed so one order's decisions
//! happen in one partition.
//!
//! ```text
//! order service ─(orders row + outbox row, one SQL txn)─▶ outbox router ─▶ <ns>.orders
//!               └(customers row + profile outbox row)──▶ outbox router ─▶ <ns>.customer-profiles
//! catalog service ─▶ <ns>.products (compacted; a global table of the order processor)
//! <ns>.orders ┐                                   ┌─▶ <ns>.order-status   (status changes)
//!             ├─▶ orders (aggregate + saga) ──────┼─▶ <ns>.saga-events    (saga outcomes)
//! <ns>.saga-replies ┘      │   ▲  (products)      └─▶ <ns>.customer-feed ─▶ customers ─▶ <ns>.customers
//!                          ▼   │                    (+ table <ns>.customer-profiles) ─┘
//!          <ns>.stock-commands ─▶ stock ─┤
//!          <ns>.payment-commands ─▶ payment
//! ```
//!
//! Enrichment ([`catalog`]): the order processor looks each line's sku up in the products
//! global table when an order is placed and stamps the product's name and category into the
//! read model's feed; the read model joins the customer's profile (name, tier) from the
//! co-partitioned `customer-profiles` table into the customer's view.
//!
//! Two order state machines live here, for different jobs: [`aggregate`] (with [`model`] and
//! [`saga`]) is the application above; [`poison_lifecycle`] is the fault suite's `poison`
//! target (`--topology order-lifecycle`), a small Avro order-status machine.

pub mod aggregate;
pub mod catalog;
pub mod check;
pub mod contracts;
pub mod launch;
pub mod messages;
pub mod model;
pub mod poison_lifecycle;
pub mod projection;
pub mod saga;
pub mod services;
pub mod telemetry;
pub mod writer;

use std::str::FromStr;

use eosflow::config::Config;
use eosflow::kafka::topics::TopicSpec;

/// One of the orders application's processors, as `eosflow run --topology <name>` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// The order aggregate and its fulfilment saga (inputs: orders, saga replies).
    Orders,
    /// The simulated stock/warehouse service (reserve, release, ship).
    Stock,
    /// The simulated payment service (charge).
    Payment,
    /// The per-customer read model (CQRS projection).
    Customers,
}

impl Topology {
    /// Every topology, in start order.
    pub const ALL: [Topology; 4] = [Self::Orders, Self::Stock, Self::Payment, Self::Customers];

    /// The name on the command line and in group ids.
    pub fn name(self) -> &'static str {
        match self {
            Self::Orders => "orders",
            Self::Stock => "stock",
            Self::Payment => "payment",
            Self::Customers => "customers",
        }
    }

    /// The store name (`<app>-<store>-changelog`).
    pub fn store(self) -> &'static str {
        match self {
            Self::Orders => "aggregate",
            Self::Stock => "reservations",
            Self::Payment => "charges",
            Self::Customers => "readmodel",
        }
    }
}

impl FromStr for Topology {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown topology {s:?}: expected count, orders, stock, payment or customers"
                )
            })
    }
}

/// Topic names of one deployment of the application, all under a namespace (`<ns>.orders`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// The namespace.
    pub ns: String,
    /// Order events from the outbox (placed, cancelled), keyed by order id.
    pub orders: String,
    /// Replies of the stock and payment services to the saga, keyed by order id.
    pub replies: String,
    /// Commands to the stock service.
    pub stock: String,
    /// Commands to the payment service.
    pub payment: String,
    /// `orders.order-status-changed.v1`, keyed by order id.
    pub status: String,
    /// Per-order updates re-keyed by customer: the read model's input.
    pub feed: String,
    /// The read model: one compacted record per customer.
    pub customers: String,
    /// One `fulfilment.saga-ended.v1` per saga, keyed by order id.
    pub saga_events: String,
    /// The product catalog (compacted, keyed by sku): the order processor's global table.
    pub products: String,
    /// Customer profiles from the order service's outbox (compacted, keyed by customer id,
    /// co-partitioned with `feed`): the read model's table.
    pub profiles: String,
}

impl Topics {
    /// The topics under `ns`.
    pub fn new(ns: &str) -> Self {
        let t = |s: &str| format!("{ns}.{s}");
        Self {
            ns: ns.to_string(),
            orders: t("orders"),
            replies: t("saga-replies"),
            stock: t("stock-commands"),
            payment: t("payment-commands"),
            status: t("order-status"),
            feed: t("customer-feed"),
            customers: t("customers"),
            saga_events: t("saga-events"),
            products: t("products"),
            profiles: t("customer-profiles"),
        }
    }

    /// The inputs `topology` consumes (co-partitioned).
    pub fn inputs(&self, topology: Topology) -> Vec<String> {
        match topology {
            Topology::Orders => vec![self.orders.clone(), self.replies.clone()],
            Topology::Stock => vec![self.stock.clone()],
            Topology::Payment => vec![self.payment.clone()],
            Topology::Customers => vec![self.feed.clone()],
        }
    }

    /// Every topic the application needs with `app_id` as the base application id: inputs with
    /// `levels` retry levels and a DLT, outputs, changelogs — one partition count for all.
    pub fn specs(&self, app_id: &str, partitions: i32, levels: u32) -> Vec<TopicSpec> {
        let inputs: Vec<String> = Topology::ALL.iter().flat_map(|t| self.inputs(*t)).collect();
        let mut specs: Vec<TopicSpec> = eosflow::kafka::topics::ladder_topics(&inputs, levels)
            .into_iter()
            .chain([self.status.clone(), self.saga_events.clone()])
            .map(|t| TopicSpec::new(t, partitions, "delete"))
            .collect();
        // The read model's view and its two reference tables: compacted, the latest row per
        // key is all that matters. The profiles are co-partitioned with the feed (the runtime
        // checks it); the catalog, a global table, could have any count.
        for t in [&self.customers, &self.profiles, &self.products] {
            specs.push(TopicSpec::new(t.clone(), partitions, "compact"));
        }
        for t in Topology::ALL {
            specs.push(TopicSpec::new(changelog(app_id, t), partitions, "compact"));
        }
        specs
    }
}

/// The group / `transactional.id` prefix of `topology` under the base application id.
pub fn app_id(base: &str, topology: Topology) -> String {
    format!("{base}-{}", topology.name())
}

/// The changelog of `topology`'s store.
pub fn changelog(base: &str, topology: Topology) -> String {
    format!("{}-{}-changelog", app_id(base, topology), topology.store())
}

/// `config` for one `topology` instance: its own group (`<app.id>-<topology>`) and inputs.
pub fn configure(config: &Config, topology: Topology, topics: &Topics) -> Config {
    let mut c = config.clone();
    c.app.id = app_id(&config.app.id, topology);
    c.processor.input_topics = topics.inputs(topology);
    c
}

/// How long the fulfilment saga waits for each step's reply before it gives up on it (see
/// [`saga::Saga::on_timeout`]): per step, each `--<step>-timeout-ms` (default 30 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct SagaTimeouts {
    /// Milliseconds the saga waits for the stock reservation's reply (then: release, cancel).
    #[arg(long, default_value_t = 30_000)]
    pub reserve_timeout_ms: u64,
    /// Milliseconds it waits for the payment's reply (then: void, release, cancel).
    #[arg(long, default_value_t = 30_000)]
    pub charge_timeout_ms: u64,
    /// Milliseconds it waits for a shipment's reply (then: alert, ship again).
    #[arg(long, default_value_t = 30_000)]
    pub ship_timeout_ms: u64,
    /// Milliseconds it waits for a release's reply (then: as a failed release).
    #[arg(long, default_value_t = 30_000)]
    pub release_timeout_ms: u64,
}

impl Default for SagaTimeouts {
    fn default() -> Self {
        Self::uniform(30_000)
    }
}

impl SagaTimeouts {
    /// The same timeout for every step.
    ///
    /// ```
    /// use eosflow_orders::{saga::TimedStep, SagaTimeouts};
    ///
    /// let t = SagaTimeouts { ship_timeout_ms: 60_000, ..SagaTimeouts::uniform(2_000) };
    /// assert_eq!(t.for_step(TimedStep::Reserve), 2_000);
    /// assert_eq!(t.for_step(TimedStep::Ship), 60_000);
    /// ```
    pub fn uniform(ms: u64) -> Self {
        Self {
            reserve_timeout_ms: ms,
            charge_timeout_ms: ms,
            ship_timeout_ms: ms,
            release_timeout_ms: ms,
        }
    }

    /// The timeout of `step`, in ms.
    pub fn for_step(&self, step: saga::TimedStep) -> u64 {
        match step {
            saga::TimedStep::Reserve => self.reserve_timeout_ms,
            saga::TimedStep::Charge => self.charge_timeout_ms,
            saga::TimedStep::Ship => self.ship_timeout_ms,
            saga::TimedStep::Release => self.release_timeout_ms,
        }
    }

    /// Every timeout above zero.
    pub fn validate(&self) -> Result<(), String> {
        match saga::TimedStep::ALL
            .into_iter()
            .find(|s| self.for_step(*s) == 0)
        {
            Some(s) => Err(format!("--{}-timeout-ms must be above 0", s.as_str())),
            None => Ok(()),
        }
    }
}

/// How often each simulated dependency fails; decided per order by a hash, so a replayed
/// command gets the same answer.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct FailureRates {
    /// Share of stock reservations rejected (out of stock): the saga cancels the order.
    #[arg(long, default_value_t = 0.05)]
    pub stock_failure_rate: f64,
    /// Share of payments declined: the saga compensates (releases the stock).
    #[arg(long, default_value_t = 0.05)]
    pub payment_failure_rate: f64,
    /// Share of shipping attempts that fail (after the pivot: retried, never compensated).
    #[arg(long, default_value_t = 0.1)]
    pub ship_failure_rate: f64,
    /// Share of stock releases that fail (a compensation failing: retried, then alerted).
    #[arg(long, default_value_t = 0.0)]
    pub release_failure_rate: f64,
    /// Share of commands a service carries out but never answers (the reply is lost): the
    /// saga's timeout for that step fires.
    #[arg(long, default_value_t = 0.01)]
    pub lost_reply_rate: f64,
    /// Share of commands a service answers only after `late_reply_delay_ms`: late if that is
    /// longer than the saga's timeout for the step (as in the demo).
    #[arg(long, default_value_t = 0.01)]
    pub late_reply_rate: f64,
    /// How long a late reply is held back, ms.
    #[arg(long, default_value_t = 3_000)]
    pub late_reply_delay_ms: u64,
}

impl Default for FailureRates {
    fn default() -> Self {
        Self {
            stock_failure_rate: 0.05,
            payment_failure_rate: 0.05,
            ship_failure_rate: 0.1,
            release_failure_rate: 0.0,
            lost_reply_rate: 0.01,
            late_reply_rate: 0.01,
            late_reply_delay_ms: 3_000,
        }
    }
}

impl FailureRates {
    /// Every rate in 0..=1, shipping below 1 (it is retried until it succeeds).
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("--stock-failure-rate", self.stock_failure_rate),
            ("--payment-failure-rate", self.payment_failure_rate),
            ("--release-failure-rate", self.release_failure_rate),
            ("--lost-reply-rate", self.lost_reply_rate),
            ("--late-reply-rate", self.late_reply_rate),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be within 0..=1, got {v}"));
            }
        }
        if self.lost_reply_rate + self.late_reply_rate > 0.95 {
            return Err(format!(
                "--lost-reply-rate + --late-reply-rate must be at most 0.95 (a shipment is retried until it is answered), got {}",
                self.lost_reply_rate + self.late_reply_rate
            ));
        }
        if !(0.0..=0.95).contains(&self.ship_failure_rate) {
            return Err(format!(
                "--ship-failure-rate must be within 0..=0.95 (shipping is retried until it succeeds), got {}",
                self.ship_failure_rate
            ));
        }
        Ok(())
    }
}

/// A deterministic draw in `[0, 1)` for (`order`, `step`, `attempt`): FNV-1a, so a service
/// asked the same question twice answers the same.
pub fn draw(order: &str, step: &str, attempt: u32) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in order
        .bytes()
        .chain([0])
        .chain(step.bytes())
        .chain(attempt.to_be_bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Final avalanche (splitmix64) so nearby ids spread over the whole range.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Milliseconds since the epoch (the core's one wall-clock read).
pub use eosflow::clock::now_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_deterministic_and_spread() {
        assert_eq!(draw("o-1", "charge", 0), draw("o-1", "charge", 0));
        let below: usize = (0..10_000)
            .filter(|i| draw(&format!("o-{i}"), "charge", 0) < 0.2)
            .count();
        assert!(
            (1_700..2_300).contains(&below),
            "{below} of 10000 below 0.2"
        );
    }

    #[test]
    fn topology_names_round_trip_and_unknown_ones_are_named() {
        for t in Topology::ALL {
            assert_eq!(t.name().parse::<Topology>(), Ok(t));
        }
        assert!("saga".parse::<Topology>().unwrap_err().contains("\"saga\""));
    }
}
