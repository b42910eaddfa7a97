//! Polling mode, for databases without logical replication: at-least-once.
//!
//! Each turn, in one SQL transaction: `SELECT … WHERE sent_at IS NULL ORDER BY occurred_at
//! LIMIT n FOR UPDATE SKIP LOCKED`, publish the rows with an idempotent producer and wait for
//! every acknowledgment, `UPDATE … SET sent_at = now()`, `COMMIT`. Several instances can run:
//! SKIP LOCKED hands each row to one of them at a time. A crash after the acknowledgments and
//! before the COMMIT publishes those rows again: consumers dedup by the `id` header. Order per
//! aggregate holds within an instance, not across instances that interleave.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use eosflow::config::Config;
use eosflow::kafka::{ClientRole, KafkaClients};

use super::publish::{dead_letter, Gate};
use super::router::{EventRouter, RoutedRecord};
use super::{migrate, pg_err, quote_ident, quoted_table, telemetry, OutboxError};

/// What a polling run did.
#[derive(Debug, Default, Clone)]
pub struct PollSummary {
    /// Rows published and marked sent.
    pub rows: u64,
    /// SQL transactions committed with rows.
    pub batches: u64,
}

/// Runs the polling publisher until `shutdown` (reconnecting after Postgres errors).
/// `health` beats while the loop turns and is ready while polling.
pub fn run(
    config: &Config,
    shutdown: Arc<AtomicBool>,
    health: &eosflow::internals::telemetry::Health,
) -> Result<PollSummary, OutboxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| OutboxError::Other(format!("tokio runtime: {e}")))?;
    rt.block_on(async {
        let mut summary = PollSummary::default();
        let mut backoff = Duration::from_millis(200);
        while !shutdown.load(Ordering::Relaxed) {
            match session(config, &shutdown, &mut summary, health).await {
                Ok(()) => break,
                Err(e) if e.is_transient() => {
                    health.set_ready(false);
                    health.beat();
                    telemetry::reconnect();
                    tracing::warn!(error = %e, "polling session ended; reconnecting");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(summary)
    })
}

/// Poll mode marks rows sent by id as `uuid[]` (the index of unsent rows serves it): with any
/// other id type the marking fails after the rows were published, and they would be published
/// again every turn. So refuse to start, before anything is published, naming the fix.
async fn check_id_is_uuid(
    pg: &tokio_postgres::Client,
    o: &eosflow::config::OutboxConfig,
    schema: &str,
    table: &str,
) -> Result<(), OutboxError> {
    let found: Option<String> = pg
        .query_opt(
            "select udt_name::text from information_schema.columns \
             where table_schema = $1 and table_name = $2 and column_name = $3",
            &[&schema, &table, &o.column_id],
        )
        .await
        .map_err(pg_err("reading the id column's type"))?
        .map(|r| r.get(0));
    match found.as_deref() {
        Some("uuid") => Ok(()),
        Some(other) => Err(OutboxError::Config(format!(
            "poll mode needs the id column {col} of table {t} to be a uuid, but it is {other} \
             (outbox.table / outbox.column_id): ALTER TABLE {t} ALTER COLUMN {col} TYPE uuid \
             USING {col}::uuid, or run the router in CDC mode (outbox.mode = \"cdc\")",
            col = quote_ident(&o.column_id),
            t = quoted_table(o),
        ))),
        None => Err(OutboxError::Config(format!(
            "table {} has no column {} (outbox.table / outbox.column_id)",
            quoted_table(o),
            quote_ident(&o.column_id)
        ))),
    }
}

async fn session(
    config: &Config,
    shutdown: &AtomicBool,
    summary: &mut PollSummary,
    health: &eosflow::internals::telemetry::Health,
) -> Result<(), OutboxError> {
    let o = &config.outbox;
    let mut pg = super::connect(config.postgres.url.expose()).await?;
    migrate::ensure(&pg, o).await?;
    let clients = KafkaClients::new(config.kafka.clone());
    let producer_config = clients.config(ClientRole::Idempotent);
    let producer: FutureProducer = producer_config
        .create()
        .map_err(|e| OutboxError::Other(format!("creating the producer: {e}")))?;
    let mut gate = Gate::new(&clients, &producer_config, o.topic_partitions);
    let dlt = super::dlt_topic(&config.app.id);
    gate.ensure_dlt(&dlt).await?;
    let mut router = EventRouter::new(o);
    router.set_binary_payload(super::payload_is_bytea(&pg, o).await?);
    router.set_column_types(super::column_type_oids(&pg, o).await?);
    // Every column, as text (the same text the CDC stream carries).
    let columns = super::table_columns(&pg, o).await?;
    let (schema, table) = super::schema_table(o);
    check_id_is_uuid(&pg, o, schema, table).await?;
    let select = format!(
        "select {} from {} where {} is null order by {} limit $1 for update skip locked",
        super::text_columns(&columns),
        quoted_table(o),
        quote_ident(&o.column_sent_at),
        quote_ident(&o.column_occurred_at),
    );
    let mark = format!(
        "update {} set {} = now() where {} = any($1::text[]::uuid[])",
        quoted_table(o),
        quote_ident(&o.column_sent_at),
        quote_ident(&o.column_id),
    );
    let mut encoder = super::avro::PayloadEncoder::from_config(config)?;
    let prune_every = Duration::from_secs(o.prune_interval_secs);
    let mut last_prune = Instant::now();
    let timeout = Duration::from_millis(o.transaction_timeout_ms);
    health.set_ready(true);
    while !shutdown.load(Ordering::Relaxed) {
        health.beat();
        let tx = pg.transaction().await.map_err(pg_err("begin"))?;
        let rows = tx
            .query(&select, &[&(o.batch_size as i64)])
            .await
            .map_err(pg_err("selecting unsent rows"))?;
        if rows.is_empty() {
            tx.rollback().await.map_err(pg_err("rollback"))?;
            if !prune_every.is_zero() && last_prune.elapsed() >= prune_every {
                super::cdc::prune(&pg, config).await?;
                last_prune = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(o.poll_interval_ms)).await;
            continue;
        }
        let records: Vec<_> = rows
            .iter()
            .map(|r| router.route(&super::text_row(&columns, r)))
            .collect();
        let mut records = records;
        if let Some(enc) = encoder.as_mut() {
            enc.encode_all(&mut records).await?;
        }
        gate.ensure_routed_topics(&records).await?;
        let mut dead = vec![];
        for r in &mut records {
            if let Some((why, size)) = gate.check(r) {
                // What the log line names: the row and where it was going.
                let original = RoutedRecord {
                    id: r.id.clone(),
                    topic: r.topic.clone(),
                    ..RoutedRecord::default()
                };
                *r = dead_letter(r, &why, size, 0, &dlt, gate.limit());
                dead.push((original, why, size));
            }
        }
        let mut deliveries = Vec::with_capacity(records.len());
        for r in &records {
            let mut h = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                h = h.insert(Header {
                    key: k,
                    value: Some(v.as_slice()),
                });
            }
            let mut rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&r.topic).headers(h);
            if let Some(k) = &r.key {
                rec = rec.key(k.as_slice());
            }
            if let Some(p) = r.partition {
                rec = rec.partition(p);
            }
            if let Some(v) = &r.value {
                rec = rec.payload(v.as_slice());
            }
            deliveries.push(producer.send(rec, timeout));
        }
        for d in futures::future::join_all(deliveries).await {
            if let Err((e, _)) = d {
                // Nothing is marked: the rows are picked up again (at-least-once).
                return Err(OutboxError::Other(format!("delivery failed: {e}")));
            }
        }
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        tx.execute(&mark, &[&ids])
            .await
            .map_err(pg_err("marking rows sent"))?;
        tx.commit().await.map_err(pg_err("commit"))?;
        for (original, why, size) in &dead {
            gate.report(original, why, *size, &dlt);
        }
        telemetry::routed(records.len() - dead.len(), "poll");
        summary.rows += records.len() as u64;
        summary.batches += 1;
    }
    Ok(())
}
