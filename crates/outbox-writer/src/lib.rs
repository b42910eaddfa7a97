//! Appends outbox rows from a service, inside the service's own Postgres transaction.
//!
//! A service changes its state and records the event in one SQL transaction; the outbox router
//! (`eosflow outbox`) publishes the committed row to Kafka exactly once. This crate builds the
//! row the router expects (Debezium's Outbox Event Router shape: id, occurred_at,
//! aggregate_type, aggregate_id, type, payload, headers) from a typed event ([`OutboxEvent`])
//! and the caller's [`Context`], so every record carries the envelope headers `id`, `type`,
//! `occurred_at`, `aggregate_id`, `correlation_id`, `causation_id`, `traceparent` and `tenant`.
//!
//! - [`event`]: the event trait, its [`Payload`] (JSON, Avro, tombstone) and the [`Context`];
//! - [`row`]: the [`OutboxWriter`] (table, [`Columns`], optional [`AvroRegistry`]) and the
//!   [`OutboxRow`] it builds, with the one `INSERT` both drivers run;
//! - [`avro`]: Avro payloads registered in the schema registry, in the Confluent wire format
//!   (stored in a `bytea` payload column, published by the router byte for byte);
//! - `tokio_pg` (feature `tokio-postgres`): [`OutboxWriter::append_tokio_postgres`] on a
//!   `tokio_postgres::Transaction`;
//! - `sqlx_pg` (feature `sqlx`): [`OutboxWriter::append_sqlx`] on a `sqlx::PgConnection`
//!   (a `sqlx::Transaction` derefs to one).
//!
//! Nothing here talks to Kafka: a rolled-back transaction leaves no row, so nothing is
//! published.
//!
//! ```
//! use eosflow_outbox_writer::{Context, OutboxEvent, OutboxWriter, Payload};
//!
//! struct OrderPlaced { order_id: String, total_minor: i64 }
//!
//! impl OutboxEvent for OrderPlaced {
//!     fn aggregate_type(&self) -> &str { "Order" }
//!     fn aggregate_id(&self) -> &str { &self.order_id }
//!     fn event_type(&self) -> &str { "orders.order-placed.v1" }
//!     fn payload(&self) -> Payload {
//!         Payload::Json(serde_json::json!({"order_id": self.order_id, "total_minor": self.total_minor}))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let writer = OutboxWriter::new("outbox");
//! let ctx = Context::caused_by("request-7").for_tenant("acme");
//! let row = writer
//!     .row(&OrderPlaced { order_id: "o-1".into(), total_minor: 4200 }, &ctx)
//!     .await
//!     .unwrap();
//! assert_eq!(row.aggregate_id, "o-1");
//! assert_eq!(row.headers["causation_id"], "request-7");
//! assert_eq!(row.headers["tenant"], "acme");
//! // In the service: `writer.append_tokio_postgres(&tx, &event, &ctx).await?` (or
//! // `append_sqlx(&mut *tx, …)`), then the service commits its transaction.
//! # });
//! ```

pub mod avro;
pub mod event;
pub mod row;
#[cfg(feature = "sqlx")]
mod sqlx_pg;
#[cfg(feature = "tokio-postgres")]
mod tokio_pg;

pub use avro::AvroRegistry;
pub use event::{Context, OutboxEvent, Payload};
pub use row::{Columns, OutboxRow, OutboxWriter, StoredPayload};

/// Why an outbox row was not appended. The caller's transaction is untouched by the writer:
/// the caller decides to roll back or retry.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The `INSERT` failed (tokio-postgres).
    #[cfg(feature = "tokio-postgres")]
    #[error("postgres: inserting the outbox row: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The `INSERT` failed (sqlx).
    #[cfg(feature = "sqlx")]
    #[error("postgres (sqlx): inserting the outbox row: {0}")]
    Sqlx(#[from] sqlx::Error),
    /// The schema registry refused the schema or could not be reached.
    #[error("schema registry at {url}: {error}")]
    Registry {
        /// The registry's base URL.
        url: String,
        /// What it (or the transport) said.
        error: String,
        /// Whether trying again may help.
        retriable: bool,
    },
    /// The payload cannot be stored as asked (does not fit its Avro schema, Avro without a
    /// registry or into a `jsonb` column).
    #[error("payload: {0}")]
    Payload(String),
}
