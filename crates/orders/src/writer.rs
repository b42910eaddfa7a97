//! The order service the demo drives: it places orders in Postgres — the `orders` row and the
//! outbox row in one SQL transaction — at a steady rate, with a realistic mix: one to three
//! lines, a small share of customer cancellations (a second transaction a moment later), and
//! deliberately bad events (an invalid order, a cancel of an order that does not exist, a
//! second placement of an existing order, a re-sent event with the same event id).
//!
//! Before a customer's first order it registers the customer — a `customers` row (name, tier)
//! and a profile row in a second outbox table, one SQL transaction — which the same router
//! publishes to `<ns>.customer-profiles` keyed by customer id; now and then a registered
//! customer's tier changes (an update and another profile row, one transaction).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;

use super::aggregate::EVENT_ID_HEADER;
use super::catalog::{CustomerProfile, CUSTOMER_PROFILE_TYPE, TIERS};
use super::messages::types;
use super::now_ms;
use eosflow::config::OutboxConfig;
use eosflow_outbox::quote_ident;
use eosflow_outbox_writer::{Columns, Context, OutboxEvent, OutboxWriter, Payload};

/// Why the writer stopped.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// A statement failed.
    #[error("postgres: {what}: {source}")]
    Postgres {
        /// What was being done.
        what: String,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// The outbox row could not be appended.
    #[error("outbox: {0}")]
    Outbox(#[from] eosflow_outbox_writer::WriteError),
    /// Anything else (runtime, migration).
    #[error("{0}")]
    Other(String),
}

/// An order event as the outbox writer library takes it: aggregate `Order`, keyed by order id.
struct OrderEvent<'a> {
    order_id: &'a str,
    type_name: &'a str,
    payload: &'a serde_json::Value,
}

impl OutboxEvent for OrderEvent<'_> {
    fn aggregate_type(&self) -> &str {
        "Order"
    }
    fn aggregate_id(&self) -> &str {
        self.order_id
    }
    fn event_type(&self) -> &str {
        self.type_name
    }
    fn payload(&self) -> Payload {
        Payload::Json(self.payload.clone())
    }
}

/// A customer's profile as the outbox writer library takes it: aggregate `Customer`, keyed by
/// customer id.
struct ProfileEvent<'a>(&'a CustomerProfile);

impl OutboxEvent for ProfileEvent<'_> {
    fn aggregate_type(&self) -> &str {
        "Customer"
    }
    fn aggregate_id(&self) -> &str {
        &self.0.customer_id
    }
    fn event_type(&self) -> &str {
        CUSTOMER_PROFILE_TYPE
    }
    fn payload(&self) -> Payload {
        Payload::Json(json!({
            "customer_id": self.0.customer_id,
            "name": self.0.name,
            "tier": self.0.tier,
        }))
    }
}

/// The outbox writer of one served outbox table (`outbox.table` or an `outbox.tables` entry).
fn outbox_writer(outbox: &OutboxConfig) -> OutboxWriter {
    OutboxWriter::with_columns(
        &outbox.table,
        Columns {
            id: outbox.column_id.clone(),
            occurred_at: outbox.column_occurred_at.clone(),
            aggregate_type: outbox.column_aggregate_type.clone(),
            aggregate_id: outbox.column_aggregate_id.clone(),
            event_type: outbox.column_type.clone(),
            payload: outbox.column_payload.clone(),
            headers: outbox.column_headers.clone(),
            payload_bytea: false,
        },
    )
}

/// The demo's name of customer `id`: fixed, so a check can recompute it.
pub fn customer_name(id: &str) -> String {
    const FIRST: [&str; 8] = [
        "Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Leslie", "Frances",
    ];
    let n: usize = id.bytes().map(usize::from).sum();
    format!("{} {}", FIRST[n % FIRST.len()], id.to_uppercase())
}

fn pg(what: &str) -> impl FnOnce(tokio_postgres::Error) -> WriterError + '_ {
    move |source| WriterError::Postgres {
        what: what.to_string(),
        source,
    }
}

/// How much and what kind of traffic.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// Orders per second.
    pub rate: f64,
    /// Share of orders the customer cancels shortly after placing them.
    pub cancel_rate: f64,
    /// Share of orders followed by a poison event (invalid, unknown, duplicate order).
    pub poison_rate: f64,
    /// Share of events re-sent with the same event id (dedup drops them).
    pub resend_rate: f64,
    /// Distinct customers.
    pub customers: u32,
    /// Share of orders after which a registered customer's tier changes.
    pub tier_change_rate: f64,
}

/// What the writer did, counted as it goes (read by the progress line).
#[derive(Debug, Default)]
pub struct Tally {
    /// Orders placed (valid, committed).
    pub placed: AtomicU64,
    /// Customer cancellations requested.
    pub cancels: AtomicU64,
    /// Invalid orders written (expected in the DLT as `invalid-order`).
    pub invalid: AtomicU64,
    /// Cancels of orders that do not exist (`unknown-order`).
    pub unknown: AtomicU64,
    /// Second placements of existing orders (`duplicate-order`).
    pub duplicate_orders: AtomicU64,
    /// Events re-sent with the same event id (dropped by dedup).
    pub resent: AtomicU64,
    /// Customers registered (a profile row each, before their first order).
    pub profiles: AtomicU64,
    /// Tier changes of registered customers.
    pub tier_changes: AtomicU64,
}

impl Tally {
    /// Poison events written, by the DLT code they must end up under.
    pub fn poison(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("invalid-order", self.invalid.load(Ordering::Relaxed)),
            ("unknown-order", self.unknown.load(Ordering::Relaxed)),
            (
                "duplicate-order",
                self.duplicate_orders.load(Ordering::Relaxed),
            ),
        ])
    }
}

/// The order service's connection and tables.
pub struct Writer {
    client: tokio_postgres::Client,
    rt: tokio::runtime::Runtime,
    orders: String,
    customers: String,
    outbox: OutboxWriter,
    /// The profiles' outbox table: `outbox.tables`' first entry, else `outbox.table`.
    profiles: OutboxWriter,
    /// Every tier each registered customer has had, oldest first.
    tiers: BTreeMap<String, Vec<String>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("orders", &self.orders)
            .field("outbox", &self.outbox)
            .finish()
    }
}

impl Writer {
    /// Connects and creates the `orders` and `customers` tables and every outbox table the
    /// router serves (its migration). Profiles go to the first of `outbox.tables` (the order
    /// events to `outbox.table`), or to `outbox.table` too when there is none.
    pub fn connect(
        url: &str,
        orders_table: &str,
        customers_table: &str,
        outbox: &OutboxConfig,
    ) -> Result<Self, WriterError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| WriterError::Other(format!("tokio runtime: {e}")))?;
        let client = rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .map_err(pg("connecting to postgres.url"))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::warn!(error = %e, "order service connection ended");
                }
            });
            for table in outbox.served() {
                eosflow_outbox::migrate::migrate(&client, &table)
                    .await
                    .map_err(|e| WriterError::Other(format!("outbox migration: {e}")))?;
            }
            let customers = quote_ident(customers_table);
            client
                .batch_execute(&format!(
                    "create table if not exists {customers} (customer_id text primary key, name text not null, \
                     tier text not null, updated_at timestamptz not null default now())"
                ))
                .await
                .map_err(pg("creating the customers table"))?;
            let orders = quote_ident(orders_table);
            client
                .batch_execute(&format!(
                    "create table if not exists {orders} (order_id text primary key, customer_id text not null, \
                     total_minor bigint not null, status text not null, placed_at timestamptz not null default now())"
                ))
                .await
                .map_err(pg("creating the orders table"))?;
            Ok::<_, WriterError>(client)
        })?;
        let served = outbox.served();
        Ok(Self {
            client,
            rt,
            orders: quote_ident(orders_table),
            customers: quote_ident(customers_table),
            outbox: outbox_writer(outbox),
            profiles: outbox_writer(served.get(1).unwrap_or(outbox)),
            tiers: BTreeMap::new(),
        })
    }

    /// Every registered customer's profile as the `customers` table holds it now.
    pub fn profiles(&self) -> Result<BTreeMap<String, CustomerProfile>, WriterError> {
        let rows = self
            .rt
            .block_on(self.client.query(
                &format!("select customer_id, name, tier from {}", self.customers),
                &[],
            ))
            .map_err(pg("reading the customers table"))?;
        Ok(rows
            .iter()
            .map(|r| {
                let p = CustomerProfile {
                    customer_id: r.get(0),
                    name: r.get(1),
                    tier: r.get(2),
                };
                (p.customer_id.clone(), p)
            })
            .collect())
    }

    /// Every tier each customer registered by this writer has had, oldest first.
    pub fn tier_history(&self) -> &BTreeMap<String, Vec<String>> {
        &self.tiers
    }

    /// Registers `customer_id` with `tier` (or changes their tier): the `customers` row and a
    /// profile outbox row in one SQL transaction.
    pub fn upsert_profile(&mut self, customer_id: &str, tier: &str) -> Result<(), WriterError> {
        let profile = CustomerProfile {
            customer_id: customer_id.to_string(),
            name: customer_name(customer_id),
            tier: tier.to_string(),
        };
        let sql = format!(
            "insert into {} (customer_id, name, tier) values ($1, $2, $3) \
             on conflict (customer_id) do update set tier = excluded.tier, updated_at = now()",
            self.customers
        );
        let (profiles, client) = (&self.profiles, &mut self.client);
        self.rt.block_on(async {
            let tx = client.transaction().await.map_err(pg("begin"))?;
            tx.execute(
                sql.as_str(),
                &[&profile.customer_id, &profile.name, &profile.tier],
            )
            .await
            .map_err(pg("writing the customers row"))?;
            let ctx = Context::default();
            profiles
                .append_tokio_postgres(&tx, &ProfileEvent(&profile), &ctx)
                .await?;
            tx.commit().await.map_err(pg("commit"))
        })?;
        self.tiers
            .entry(profile.customer_id)
            .or_default()
            .push(profile.tier);
        Ok(())
    }

    /// Runs `sql` (cleanup, slot checks).
    pub fn execute(&self, sql: &str) -> Result<(), WriterError> {
        self.rt
            .block_on(self.client.batch_execute(sql))
            .map_err(pg(sql))
    }

    /// The first column of the first row of `sql` as text, if any.
    pub fn text(&self, sql: &str) -> Result<Option<String>, WriterError> {
        let rows = self
            .rt
            .block_on(self.client.simple_query(sql))
            .map_err(pg(sql))?;
        Ok(rows.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        }))
    }

    /// Every placed order: id → customer (the ground truth the demo checks against).
    pub fn placed_orders(&self) -> Result<BTreeMap<String, String>, WriterError> {
        let rows = self
            .rt
            .block_on(self.client.query(
                &format!("select order_id, customer_id from {}", self.orders),
                &[],
            ))
            .map_err(pg("reading the orders table"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// One SQL transaction: optionally an `orders` statement, then one outbox row.
    fn write(
        &mut self,
        order_sql: Option<(String, Vec<String>)>,
        order_id: &str,
        type_name: &str,
        payload: &serde_json::Value,
        event_id: &str,
    ) -> Result<(), WriterError> {
        let outbox = &self.outbox;
        let client = &mut self.client;
        self.rt.block_on(async {
            let tx = client.transaction().await.map_err(pg("begin"))?;
            if let Some((sql, params)) = &order_sql {
                let p: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|s| s as &(dyn tokio_postgres::types::ToSql + Sync))
                    .collect();
                tx.execute(sql.as_str(), &p)
                    .await
                    .map_err(pg("writing the orders row"))?;
            }
            // The service's event, through the outbox writer library: the event id the
            // processor deduplicates by travels as a header of the context.
            let event = OrderEvent {
                order_id,
                type_name,
                payload,
            };
            let ctx = Context::default().header(EVENT_ID_HEADER, event_id);
            outbox.append_tokio_postgres(&tx, &event, &ctx).await?;
            tx.commit().await.map_err(pg("commit"))
        })
    }

    /// Places orders at `mix.rate` for `duration` (or until `stop`), with ids `<prefix>-<n>`.
    pub fn run(
        &mut self,
        prefix: &str,
        mix: Mix,
        duration: Duration,
        tally: &Tally,
        stop: &AtomicBool,
    ) -> Result<(), WriterError> {
        let mut rng = rand::thread_rng();
        let started = Instant::now();
        // Cancels and re-sends happen a moment after their order: (due, order id, kind).
        let mut later: Vec<(Instant, String, serde_json::Value, String, &'static str)> = Vec::new();
        let mut n: u64 = 0;
        while started.elapsed() < duration && !stop.load(Ordering::Relaxed) {
            let due = started + Duration::from_secs_f64(n as f64 / mix.rate.max(0.1));
            let now = Instant::now();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(50)));
                self.flush_later(&mut later, false, tally)?;
                continue;
            }
            n += 1;
            let order_id = format!("{prefix}-{n:06}");
            let customer = format!("c-{:04}", rng.gen_range(0..mix.customers.max(1)));
            if !self.tiers.contains_key(&customer) {
                // Registered before the first order: the profile's transaction commits first.
                self.upsert_profile(&customer, TIERS[rng.gen_range(0..TIERS.len())])?;
                tally.profiles.fetch_add(1, Ordering::Relaxed);
            }
            let lines: Vec<serde_json::Value> = (0..rng.gen_range(1..=3))
                .map(|_| json!({"sku": format!("sku-{:03}", rng.gen_range(0..50)), "quantity": rng.gen_range(1..=3), "unit_price_minor": rng.gen_range(100..5000)}))
                .collect();
            let total: i64 = lines
                .iter()
                .map(|l| {
                    l["quantity"].as_i64().unwrap_or(0)
                        * l["unit_price_minor"].as_i64().unwrap_or(0)
                })
                .sum();
            let channel = ["web", "app", "store"][rng.gen_range(0..3)];
            let placed = json!({"order_id": order_id, "customer_id": customer, "placed_at": now_ms(), "currency": "EUR", "total_minor": total, "lines": lines, "channel": channel});
            let event_id = uuid::Uuid::new_v4().to_string();
            self.write(
                Some((
                    format!("insert into {} (order_id, customer_id, total_minor, status) values ($1, $2, $3::text::bigint, 'PLACED')", self.orders),
                    vec![order_id.clone(), customer.clone(), total.to_string()],
                )),
                &order_id,
                types::ORDER_PLACED_V2,
                &placed,
                &event_id,
            )?;
            tally.placed.fetch_add(1, Ordering::Relaxed);
            let soon = |ms: u64| Instant::now() + Duration::from_millis(ms);
            if rng.gen_bool(mix.resend_rate.clamp(0.0, 1.0)) {
                later.push((
                    soon(rng.gen_range(0..2000)),
                    order_id.clone(),
                    placed.clone(),
                    event_id,
                    "resend",
                ));
            }
            if rng.gen_bool(mix.cancel_rate.clamp(0.0, 1.0)) {
                let cancel = json!({"order_id": order_id, "cancelled_at": now_ms(), "reason": "CUSTOMER_REQUEST", "note": null});
                later.push((
                    soon(rng.gen_range(0..400)),
                    order_id.clone(),
                    cancel,
                    uuid::Uuid::new_v4().to_string(),
                    "cancel",
                ));
            }
            if rng.gen_bool(mix.poison_rate.clamp(0.0, 1.0)) {
                self.poison(&mut rng, &order_id, &placed, tally)?;
            }
            if rng.gen_bool(mix.tier_change_rate.clamp(0.0, 1.0)) {
                // Some registered customer moves to another tier.
                let k = rng.gen_range(0..self.tiers.len());
                let picked = self
                    .tiers
                    .iter()
                    .nth(k)
                    .map(|(c, t)| (c.clone(), t.last().cloned()));
                if let Some((who, Some(old))) = picked {
                    let others: Vec<&str> = TIERS.iter().copied().filter(|t| *t != old).collect();
                    self.upsert_profile(&who, others[rng.gen_range(0..others.len())])?;
                    tally.tier_changes.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.flush_later(&mut later, false, tally)?;
        }
        self.flush_later(&mut later, true, tally)
    }

    fn flush_later(
        &mut self,
        later: &mut Vec<(Instant, String, serde_json::Value, String, &'static str)>,
        all: bool,
        tally: &Tally,
    ) -> Result<(), WriterError> {
        let now = Instant::now();
        let (due, wait): (Vec<_>, Vec<_>) = later.drain(..).partition(|e| all || e.0 <= now);
        *later = wait;
        for (_, order_id, payload, event_id, kind) in due {
            match kind {
                "cancel" => {
                    self.write(
                        Some((
                            format!(
                                "update {} set status = 'CANCEL_REQUESTED' where order_id = $1",
                                self.orders
                            ),
                            vec![order_id.clone()],
                        )),
                        &order_id,
                        types::ORDER_CANCELLED,
                        &payload,
                        &event_id,
                    )?;
                    tally.cancels.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    // The same event again (a client retry): same event id, new outbox row.
                    self.write(None, &order_id, types::ORDER_PLACED_V2, &payload, &event_id)?;
                    tally.resent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    fn poison(
        &mut self,
        rng: &mut impl Rng,
        order_id: &str,
        placed: &serde_json::Value,
        tally: &Tally,
    ) -> Result<(), WriterError> {
        let id = uuid::Uuid::new_v4().to_string();
        match rng.gen_range(0..3) {
            0 => {
                // A buggy client: a total that is not the sum of the lines.
                let bad_id = format!("{order_id}-bad");
                let mut bad = placed.clone();
                bad["order_id"] = json!(bad_id);
                bad["total_minor"] = json!(-1);
                self.write(None, &bad_id, types::ORDER_PLACED_V2, &bad, &id)?;
                tally.invalid.fetch_add(1, Ordering::Relaxed);
            }
            1 => {
                let ghost = format!("{order_id}-ghost");
                let cancel = json!({"order_id": ghost, "cancelled_at": now_ms(), "reason": "CUSTOMER_REQUEST", "note": null});
                self.write(None, &ghost, types::ORDER_CANCELLED, &cancel, &id)?;
                tally.unknown.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                // The same order placed again under a new event id: not a re-send, a conflict.
                self.write(None, order_id, types::ORDER_PLACED_V2, placed, &id)?;
                tally.duplicate_orders.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}
