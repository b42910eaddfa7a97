//! The outbox router: the source side of the data path, Postgres → Kafka.
//!
//! Services write their state and an outbox row in one Postgres transaction; this module
//! publishes each row as a Kafka record with Debezium's Outbox Event Router mapping
//! ([`router`]): topic from the aggregate type, key = aggregate id, value = the JSON payload,
//! headers = `id`, `type`, `occurred_at`, `aggregate_id` and the row's `headers` object.
//!
//! Two modes:
//! - **CDC** ([`cdc`], default): a logical replication slot (`pgoutput`) on a publication of the
//!   outbox table, decoded by [`pgoutput`]. Rows are published in Kafka transactions that also
//!   write the last commit LSN to a compacted offsets topic ([`publish`]); the LSN is confirmed
//!   to Postgres only after the Kafka commit, and a restart skips every transaction at or below
//!   the committed LSN: exactly-once into Kafka across crashes.
//! - **Poll** ([`poll`]): `SELECT … FOR UPDATE SKIP LOCKED`, publish, mark `sent_at`, commit.
//!   At-least-once: a crash between the Kafka acknowledgment and the SQL commit re-sends rows.
//!
//! [`migrate`] creates the table and its index of unsent rows; [`avro`] turns payloads of
//! types with a contract into registered Avro (`outbox.payload_format = "avro"`).

pub mod avro;
pub mod cdc;
pub mod expand;
pub mod identity;
pub mod migrate;
pub mod pgoutput;
pub mod pgtls;
pub mod poll;
pub mod publish;
pub mod router;
pub mod snapshot;
pub mod telemetry;

use eosflow::config::OutboxConfig;
use eosflow::internals::sink::SinkError;

/// Why the outbox router stopped or a step of it failed.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// A SQL statement failed or the connection broke.
    #[error("postgres: {context}: {source}")]
    Postgres {
        /// What was being done.
        context: String,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// The replication stream failed or ended.
    #[error("replication stream: {0}")]
    Replication(String),
    /// A pgoutput message could not be decoded: a bug or an unsupported protocol, not transient.
    #[error("decoding pgoutput: {0}")]
    Decode(#[from] pgoutput::DecodeError),
    /// Kafka refused the transaction.
    #[error("kafka: {0}")]
    Sink(#[from] SinkError),
    /// Reading the committed LSN from the offsets topic failed.
    #[error("reading the offsets topic: {0}")]
    Offsets(String),
    /// Creating topics failed.
    #[error("topics: {0}")]
    Topics(#[from] eosflow::kafka::topics::TopicsError),
    /// The configuration cannot work (e.g. an unparsable Postgres URL).
    #[error("configuration: {0}")]
    Config(String),
    /// The stored LSN does not belong to the Postgres the router is connected to (another
    /// system identifier or timeline, or ahead of its WAL): resuming would skip or repeat rows,
    /// so the router stops until the operator accepts the server (`outbox.discard_checkpoint`).
    #[error("the stored checkpoint does not match this Postgres: {0}")]
    ClusterMismatch(String),
    /// Anything else on the I/O path (runtime creation, producer delivery).
    #[error("{0}")]
    Other(String),
}

impl OutboxError {
    /// A failure a reconnect can cure (Postgres restarted, network, slot still held by a
    /// dying predecessor), as opposed to one that must stop the router (fenced, bad config).
    pub fn is_transient(&self) -> bool {
        match self {
            OutboxError::Postgres { .. } | OutboxError::Replication(_) => true,
            OutboxError::Offsets(_) | OutboxError::Topics(_) | OutboxError::Other(_) => true,
            OutboxError::Sink(SinkError::Fenced { .. }) => false,
            OutboxError::Sink(_) => true,
            OutboxError::Decode(_) | OutboxError::Config(_) => false,
            OutboxError::ClusterMismatch(_) => false,
        }
    }
}

pub(crate) fn pg_err(
    context: impl Into<String>,
) -> impl FnOnce(tokio_postgres::Error) -> OutboxError {
    let context = context.into();
    move |source| OutboxError::Postgres { context, source }
}

/// Quotes an identifier for SQL (`"name"`), doubling embedded quotes.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The configured table, quoted (`"schema"."table"` or `"table"`).
pub fn quoted_table(cfg: &OutboxConfig) -> String {
    match cfg.table.split_once('.') {
        Some((s, t)) => format!("{}.{}", quote_ident(s), quote_ident(t)),
        None => quote_ident(&cfg.table),
    }
}

/// The table name without its schema (what pgoutput's Relation message carries).
pub fn bare_table(cfg: &OutboxConfig) -> &str {
    cfg.table
        .split_once('.')
        .map_or(cfg.table.as_str(), |(_, t)| t)
}

/// The configured table as (schema, table); an unqualified name is in `public`. pgoutput's
/// Relation messages carry both, and a publication may hold a same-named table of another
/// schema, so rows are matched on the pair.
pub fn schema_table(cfg: &OutboxConfig) -> (&str, &str) {
    cfg.table
        .split_once('.')
        .unwrap_or(("public", cfg.table.as_str()))
}

/// Every column of the outbox table, in table order.
pub(crate) async fn table_columns(
    pg: &tokio_postgres::Client,
    cfg: &OutboxConfig,
) -> Result<Vec<String>, OutboxError> {
    let (schema, table) = schema_table(cfg);
    Ok(pg
        .query(
            "select column_name::text from information_schema.columns \
             where table_schema = $1 and table_name = $2 order by ordinal_position",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err("reading the outbox columns"))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Whether the payload column is `bytea` (its text is then published as the bytes).
pub(crate) async fn payload_is_bytea(
    pg: &tokio_postgres::Client,
    cfg: &OutboxConfig,
) -> Result<bool, OutboxError> {
    let (schema, table) = schema_table(cfg);
    Ok(pg
        .query_opt(
            "select 1 from information_schema.columns where table_schema = $1 \
             and table_name = $2 and column_name = $3 and data_type = 'bytea'",
            &[&schema, &table, &cfg.column_payload],
        )
        .await
        .map_err(pg_err("reading the payload column's type"))?
        .is_some())
}

/// The type OID of every column of the outbox table (an envelope field is written as its
/// column's type).
pub(crate) async fn column_type_oids(
    pg: &tokio_postgres::Client,
    cfg: &OutboxConfig,
) -> Result<std::collections::HashMap<String, u32>, OutboxError> {
    Ok(pg
        .query(
            "select attname::text, atttypid::oid::int8 from pg_attribute \
             where attrelid = $1::text::regclass and attnum > 0 and not attisdropped",
            &[&quoted_table(cfg)],
        )
        .await
        .map_err(pg_err("reading the outbox column types"))?
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u32))
        .collect())
}

/// The select list reading `columns` as text: the same text the CDC stream carries.
pub(crate) fn text_columns(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| format!("{}::text", quote_ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A row selected with [`text_columns`] as the router's [`router::Row`].
pub(crate) fn text_row(columns: &[String], r: &tokio_postgres::Row) -> router::Row {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), r.get::<_, Option<String>>(i)))
        .collect()
}

/// Opens a SQL connection to `url` with the TLS its `sslmode`/`sslrootcert` ask for (its
/// driver task runs on the current tokio runtime).
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, OutboxError> {
    pgtls::PgTarget::parse(url)?.connect().await
}

/// The Kafka `transactional.id` of the router of `slot`: stable, so a restarted router fences
/// a zombie predecessor.
pub fn transactional_id(app: &str, slot: &str) -> String {
    format!("{app}-outbox-{slot}")
}

/// The compacted topic holding each slot's last published LSN.
pub fn offsets_topic(app: &str) -> String {
    format!("{app}-outbox-offsets")
}

/// The outbox's dead-letter topic: rows the router cannot write (over `message.max.bytes`,
/// their routed topic cannot be created or written) go there as bounded copies, in the same
/// Kafka transaction that moves the LSN past them, so one bad row never blocks the outbox.
pub fn dlt_topic(app: &str) -> String {
    format!("{app}-outbox.DLT")
}

/// Runs the router in the configured mode until `shutdown` is set.
pub fn run(
    config: &eosflow::Config,
    shutdown: std::sync::Arc<std::sync::atomic::AtomicBool>,
    health: &eosflow::internals::telemetry::Health,
) -> Result<String, OutboxError> {
    let config = &effective(config)?;
    if config.outbox.mode == eosflow::config::OutboxMode::Poll {
        let s = poll::run(config, shutdown, health)?;
        Ok(format!("poll: rows={} batches={}", s.rows, s.batches))
    } else {
        let s = cdc::run(config, shutdown, health)?;
        Ok(format!(
            "cdc: rows={} dead_lettered={} commits={} skipped_replayed={} ignored={} sessions={} lsn={}",
            s.rows,
            s.dead_lettered,
            s.commits,
            s.skipped,
            s.ignored,
            s.sessions,
            publish::lsn_text(s.committed_lsn)
        ))
    }
}

/// `eosflow outbox migrate`: creates every served table and its index if absent (`true` if
/// one was created).
pub fn migrate_cmd(config: &eosflow::Config) -> Result<bool, OutboxError> {
    let config = &effective(config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| OutboxError::Other(format!("tokio runtime: {e}")))?;
    rt.block_on(async {
        let pg = connect(config.postgres.url.expose()).await?;
        let mut created = false;
        for t in config.outbox.served() {
            created |= migrate::migrate(&pg, &t).await?;
        }
        Ok(created)
    })
}

/// `config` with the outbox's Debezium option names applied (`outbox.debezium`): every part of
/// the router reads the `outbox.*` keys only.
fn effective(config: &eosflow::Config) -> Result<eosflow::Config, OutboxError> {
    let mut c = config.clone();
    c.outbox = config.outbox.effective().map_err(|(option, reason)| {
        OutboxError::Config(format!("outbox.debezium {option:?}: {reason}"))
    })?;
    for t in c.outbox.served() {
        router::check(&t).map_err(|e| {
            OutboxError::Config(if t.table == c.outbox.table {
                e.to_string()
            } else {
                format!("outbox.tables ({}): {e}", t.table)
            })
        })?;
    }
    Ok(c)
}
