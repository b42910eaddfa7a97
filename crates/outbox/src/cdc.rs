//! CDC mode: the replication stream (pgoutput over a logical slot) → whole Postgres
//! transactions → Kafka transactions with the LSN checkpoint → confirmed LSN.
//!
//! The rules that make it exactly-once into Kafka:
//! - a Postgres transaction's rows are buffered until its Commit; the checkpoint of a Kafka
//!   transaction is the last included commit's end LSN. A transaction over
//!   `outbox.max_rows_per_transaction` rows (or [`PART_BYTES`]) is published in parts as its
//!   rows arrive (pgoutput v1 sends only committed transactions; Begin carries the commit LSN),
//!   whose checkpoints add how many of its rows (in WAL order) are in Kafka; a replay drops
//!   those, so memory stays bounded whatever the transaction's size;
//! - the LSN is confirmed to Postgres (`update_applied_lsn`) only after the Kafka commit, so
//!   the slot never moves past what Kafka holds;
//! - on (re)start the committed LSN is read back from the offsets topic (`read_committed`) and
//!   every transaction whose end LSN is at or below it is skipped: what Postgres re-sends
//!   after a crash (it replays from the slot's confirmed position) is dropped here;
//! - one active router per slot: a session-level advisory lock, held on a plain connection for
//!   the life of the session (a second instance waits for it; a dead instance's connection
//!   drops and releases it), and the stable `transactional.id` fences a zombie's producer.
//!
//! Heartbeats (`pg_logical_emit_message`) come back through the stream as transactions with no
//! outbox rows; their end LSN is confirmed at once when nothing is pending, so an idle outbox
//! does not pin WAL. Losing Postgres (restart, network) ends the session; pending rows are
//! dropped (never committed) and a new session resumes from the committed LSN.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent};

use eosflow::config::Config;
use eosflow::kafka::KafkaClients;

use super::avro::PayloadEncoder;
use super::identity::{self, Resume};
use super::pgoutput::{self, Message, Relation, Value};
use super::publish::{
    self, lsn_text, read_checkpoint, ClusterId, LsnCheckpoint, PartialTx, Publisher,
};
use super::router::{EventRouter, RoutedRecord, Row};
use super::{migrate, pg_err, quote_ident, quoted_table, telemetry, OutboxError};
use eosflow::internals::telemetry::Health;

/// What a CDC run did, for the log line at exit.
#[derive(Debug, Default, Clone)]
pub struct CdcSummary {
    /// Rows published.
    pub rows: u64,
    /// Rows sent to the outbox's dead-letter topic (cannot be written where they route).
    pub dead_lettered: u64,
    /// Kafka transactions committed.
    pub commits: u64,
    /// Rows skipped because their transaction was at or below the committed LSN.
    pub skipped: u64,
    /// UPDATE/DELETE/TRUNCATE changes ignored.
    pub ignored: u64,
    /// Sessions started (1 + reconnects).
    pub sessions: u64,
    /// The last committed LSN.
    pub committed_lsn: u64,
}

/// Most bytes (as librdkafka counts records) of one part of a transaction published as its
/// rows arrive: a part is cut at `outbox.max_rows_per_transaction` rows or at this size,
/// whichever comes first, so the router holds a bounded amount whatever the rows' size (a
/// routed record takes about four times its wire size in the router and librdkafka together).
pub const PART_BYTES: usize = 8 << 20;

/// Postgres epoch (2000-01-01) in Unix microseconds: pgoutput's timestamps count from it.
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

fn since_pg_micros(pg_micros: i64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default();
    Duration::from_micros((now - PG_EPOCH_UNIX_MICROS - pg_micros).max(0) as u64)
}

/// Runs the CDC router until `shutdown` is set or a non-transient error; reconnects after
/// transient ones (Postgres restarts, a slot still held by a dying predecessor).
/// `health`: beats while the loop turns (also while standing by for the slot); ready while
/// streaming or standing by, not while reconnecting after an error.
pub fn run(
    config: &Config,
    shutdown: Arc<AtomicBool>,
    health: &Health,
) -> Result<CdcSummary, OutboxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| OutboxError::Other(format!("tokio runtime: {e}")))?;
    rt.block_on(run_async(config, shutdown, health))
}

async fn run_async(
    config: &Config,
    shutdown: Arc<AtomicBool>,
    health: &Health,
) -> Result<CdcSummary, OutboxError> {
    let mut summary = CdcSummary::default();
    let mut backoff = Duration::from_millis(200);
    while !shutdown.load(Ordering::Relaxed) {
        summary.sessions += 1;
        match session(config, &shutdown, &mut summary, health).await {
            Ok(()) => break,
            Err(e) if e.is_transient() => {
                health.set_ready(false);
                health.beat();
                telemetry::reconnect();
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "outbox session ended; reconnecting");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(summary)
}

/// SQL answering `'true'` once a walsender streams from `slot`: what a writer waits for before
/// its rows can be routed. Not `pg_replication_slots.active`, which is also true while an
/// ordinary backend is still creating the slot, before its consistent point — rows committed
/// then are never streamed.
pub fn streaming_sql(slot: &str) -> String {
    format!(
        "select 'true' from pg_replication_slots s join pg_stat_replication r \
         on r.pid = s.active_pid where s.slot_name = '{}'",
        slot.replace('\'', "''")
    )
}

/// SQL dropping `slot` once no walsender holds it (a killed router's walsender notices late);
/// run it until the slot is gone, or it pins WAL.
pub fn drop_released_slot_sql(slot: &str) -> String {
    format!(
        "select pg_drop_replication_slot(slot_name) from pg_replication_slots \
         where slot_name = '{}' and not active",
        slot.replace('\'', "''")
    )
}

/// Creates the publication when absent (a concurrent creator winning is fine) and checks it
/// publishes the outbox table.
pub async fn ensure_publication(
    pg: &tokio_postgres::Client,
    config: &Config,
) -> Result<(), OutboxError> {
    let o = &config.outbox;
    let served = o.served();
    let has_pub = pg
        .query_opt(
            "select 1 from pg_publication where pubname = $1",
            &[&o.publication],
        )
        .await
        .map_err(pg_err("looking up the publication"))?
        .is_some();
    if !has_pub {
        let tables: Vec<String> = served.iter().map(quoted_table).collect();
        let sql = format!(
            "create publication {} for table {}",
            quote_ident(&o.publication),
            tables.join(", ")
        );
        if let Err(e) = pg.batch_execute(&sql).await {
            if e.code() != Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) {
                return Err(pg_err("creating the publication")(e));
            }
        }
        tracing::info!(publication = %o.publication, tables = ?tables, "created publication");
    }
    for t in &served {
        let (schema, table) = super::schema_table(t);
        let covers = pg
            .query_opt(
                "select 1 from pg_publication_tables where pubname = $1 and schemaname = $2 and tablename = $3",
                &[&o.publication, &schema, &table],
            )
            .await
            .map_err(pg_err("checking the publication's tables"))?
            .is_some();
        if !covers {
            return Err(OutboxError::Config(format!(
                "publication {} exists but does not publish {} (outbox.publication / outbox.table / \
                 outbox.tables): ALTER PUBLICATION … ADD TABLE, or name another publication",
                o.publication, t.table
            )));
        }
    }
    Ok(())
}

/// Creates the slot when absent, without a snapshot: what commits from now on is streamed.
pub async fn ensure_slot(pg: &tokio_postgres::Client, config: &Config) -> Result<(), OutboxError> {
    let o = &config.outbox;
    let has_slot = pg
        .query_opt(
            "select 1 from pg_replication_slots where slot_name = $1",
            &[&o.slot],
        )
        .await
        .map_err(pg_err("looking up the slot"))?
        .is_some();
    if !has_slot {
        match pg
            .query_one(
                "select lsn::text from pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&o.slot],
            )
            .await
        {
            Ok(row) => {
                let lsn: String = row.get(0);
                tracing::info!(slot = %o.slot, %lsn, "created logical replication slot");
            }
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {}
            Err(e) => return Err(pg_err("creating the slot")(e)),
        }
    }
    Ok(())
}

fn replication_config(config: &Config, start: u64) -> Result<ReplicationConfig, OutboxError> {
    let target = super::pgtls::PgTarget::parse(config.postgres.url.expose())?;
    let pc = &target.config;
    let host = match pc.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = pc.get_ports().first().copied().unwrap_or(5432);
    let user = pc.get_user().unwrap_or("postgres").to_string();
    let password = pc
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let db = pc.get_dbname().unwrap_or(&user).to_string();
    let o = &config.outbox;
    Ok(ReplicationConfig::new(
        host,
        user,
        password,
        db,
        o.slot.clone(),
        o.publication.clone(),
    )
    .with_port(port)
    .with_tls(target.replication_tls()?)
    .with_start_lsn(Lsn::from_u64(start))
    .with_status_interval(Duration::from_millis(o.status_interval_ms))
    .with_wakeup_interval(Duration::from_millis(o.status_interval_ms))
    .with_buffer_size(o.replication_buffer_events)
    .with_application_name(format!("eosflow-outbox-{}", o.slot)))
}

/// Waits for the advisory lock of `slot` on `pg` (one active router per slot).
async fn lock_slot(
    pg: &tokio_postgres::Client,
    slot: &str,
    shutdown: &AtomicBool,
    health: &Health,
) -> Result<bool, OutboxError> {
    let key = format!("eosflow.outbox.{slot}");
    let mut logged = false;
    loop {
        let got: bool = pg
            .query_one("select pg_try_advisory_lock(hashtext($1))", &[&key])
            .await
            .map_err(pg_err("taking the slot's advisory lock"))?
            .get(0);
        if got {
            return Ok(true);
        }
        if !logged {
            tracing::info!(%slot, "another router holds the slot; waiting to take over");
            logged = true;
        }
        // A standby is doing its job: alive and ready.
        health.beat();
        health.set_ready(true);
        if shutdown.load(Ordering::Relaxed) {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One served outbox table in a session: rows of other tables of the publication are not routed.
struct Served {
    /// (schema, table), as pgoutput's Relation message names it.
    name: (String, String),
    /// Its payload column (a `bytea` one is published as its bytes).
    payload: String,
    /// Its mapping.
    router: EventRouter,
}

struct Session<'a> {
    config: &'a Config,
    /// Every served table (`outbox.table`, then `outbox.tables`).
    tables: Vec<Served>,
    relations: HashMap<u32, Relation>,
    /// Rows of the Postgres transaction being received.
    open_tx: Vec<RoutedRecord>,
    open_ignored: u64,
    open_commit_micros: i64,
    /// The open transaction's commit LSN (Begin's final LSN): pgoutput v1 sends a transaction
    /// only once it committed, so parts of it can be published before its last row arrives.
    open_final: u64,
    /// Rows of the open transaction already in Kafka (published as streamed parts, or by a
    /// predecessor: see `open_skip`).
    open_done: u64,
    /// Rows of the open transaction still to drop as they arrive: a predecessor published them.
    open_skip: u64,
    /// Bytes of `open_tx` (keys, values, headers): a part is published when they reach
    /// [`PART_BYTES`], whatever the row count.
    open_bytes: usize,
    /// A streamed part's checkpoint is the last one in Kafka: the transaction's end must be
    /// written even when no row of it remains to publish.
    streamed_checkpoint: bool,
    /// Whole transactions waiting for their Kafka transaction.
    batch: Vec<RoutedRecord>,
    batch_end: Option<u64>,
    batch_oldest_commit: Option<i64>,
    batch_since: Instant,
    committed: u64,
    /// Rows of a split Postgres transaction already in Kafka (from the stored checkpoint):
    /// dropped from the front of that transaction when the stream replays it.
    resume_partial: Option<PartialTx>,
    /// Rows of a transaction in `batch` that were dropped so (its end LSN, how many): the
    /// parts of it published next count from there.
    batch_offset: Option<PartialTx>,
    /// Commit time of the newest transaction received (Postgres epoch µs).
    last_commit_micros: Option<i64>,
    /// `payload_format = "avro"`: encodes each batch before its Kafka transaction.
    encoder: Option<PayloadEncoder>,
}

impl<'a> Session<'a> {
    fn new(
        config: &'a Config,
        committed: u64,
        resume_partial: Option<PartialTx>,
        encoder: Option<PayloadEncoder>,
    ) -> Self {
        let o = &config.outbox;
        Session {
            encoder,
            config,
            tables: o
                .served()
                .iter()
                .map(|t| {
                    let (schema, table) = super::schema_table(t);
                    Served {
                        name: (schema.to_string(), table.to_string()),
                        payload: t.column_payload.clone(),
                        router: EventRouter::new(t),
                    }
                })
                .collect(),
            relations: HashMap::new(),
            open_tx: vec![],
            open_ignored: 0,
            open_commit_micros: 0,
            open_final: 0,
            open_done: 0,
            open_skip: 0,
            open_bytes: 0,
            streamed_checkpoint: false,
            batch: vec![],
            batch_end: None,
            batch_oldest_commit: None,
            batch_since: Instant::now(),
            committed,
            // A streamed partial's commit LSN may equal the last whole transaction's end.
            resume_partial: resume_partial
                .filter(|p| p.end_lsn > committed || (p.streamed && p.end_lsn == committed)),
            batch_offset: None,
            last_commit_micros: None,
        }
    }

    /// The served table named (schema, table), if it is one.
    fn served_mut(&mut self, schema: &str, table: &str) -> Option<&mut Served> {
        self.tables
            .iter_mut()
            .find(|t| t.name.0 == schema && t.name.1 == table)
    }

    fn on_begin(&mut self, final_lsn: u64, commit_time_micros: i64) {
        self.open_tx.clear();
        self.open_ignored = 0;
        self.open_commit_micros = commit_time_micros;
        self.open_final = final_lsn;
        self.open_done = 0;
        self.open_skip = 0;
        self.open_bytes = 0;
        if let Some(p) = self.resume_partial.filter(|p| p.streamed) {
            if p.end_lsn == final_lsn {
                // Its first rows are in Kafka: drop them as they arrive, count on from there.
                tracing::info!(
                    rows = p.rows,
                    commit_lsn = %lsn_text(final_lsn),
                    "resuming a split transaction (streamed parts) after its rows already in Kafka"
                );
                self.resume_partial = None;
                self.open_skip = p.rows;
                self.open_done = p.rows;
            } else if p.end_lsn < final_lsn {
                self.resume_partial = None;
                tracing::error!(
                    partial = %lsn_text(p.end_lsn),
                    received = %lsn_text(final_lsn),
                    "the stream passed the partly published transaction of the checkpoint without replaying it"
                );
            }
        }
    }

    fn on_change(&mut self, data: &[u8]) -> Result<(), OutboxError> {
        match pgoutput::decode(data)? {
            Message::Relation(r) => {
                if let Some(t) = self.served_mut(&r.namespace, &r.name) {
                    let binary = r
                        .columns
                        .iter()
                        .any(|c| c.name == t.payload && c.type_oid == super::router::BYTEA_OID);
                    t.router.set_binary_payload(binary);
                    t.router.set_column_types(
                        r.columns
                            .iter()
                            .map(|c| (c.name.clone(), c.type_oid))
                            .collect(),
                    );
                }
                self.relations.insert(r.id, r);
            }
            Message::Insert { relation, new } => {
                let Some(rel) = self.relations.get(&relation) else {
                    return Err(OutboxError::Replication(format!(
                        "insert into relation {relation} before its Relation message"
                    )));
                };
                let Some(t) = self
                    .tables
                    .iter()
                    .find(|t| t.name.0 == rel.namespace && t.name.1 == rel.name)
                else {
                    return Ok(());
                };
                let row: Row = rel
                    .columns
                    .iter()
                    .zip(new)
                    .map(|(c, v)| {
                        let v = match v {
                            Value::Text(s) => Some(s),
                            Value::Binary(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                            Value::Null | Value::Unchanged => None,
                        };
                        (c.name.clone(), v)
                    })
                    .collect();
                if self.open_skip > 0 {
                    self.open_skip -= 1;
                    telemetry::skipped_replayed(1);
                    return Ok(());
                }
                let r = t.router.route(&row);
                self.open_bytes += publish::wire_size(&r);
                self.open_tx.push(r);
            }
            Message::Update { .. } => {
                telemetry::ignored("update", 1);
                self.open_ignored += 1;
            }
            Message::Delete { .. } => {
                telemetry::ignored("delete", 1);
                self.open_ignored += 1;
            }
            Message::Truncate { relations, .. } => {
                telemetry::ignored("truncate", 1);
                tracing::warn!(?relations, "TRUNCATE of the outbox ignored");
            }
            // Begin/Commit/Message arrive as their own events; Type/Origin need nothing.
            _ => {}
        }
        Ok(())
    }

    fn on_commit(&mut self, end_lsn: u64, summary: &mut CdcSummary) {
        let rows = std::mem::take(&mut self.open_tx);
        if self.open_ignored > 0 {
            tracing::warn!(
                changes = self.open_ignored,
                lsn = %lsn_text(end_lsn),
                "UPDATE/DELETE on the outbox ignored (only INSERTs are routed)"
            );
            summary.ignored += self.open_ignored;
            self.open_ignored = 0;
        }
        if end_lsn <= self.committed {
            // Already in Kafka: a replay after a restart.
            if !rows.is_empty() {
                tracing::info!(
                    rows = rows.len(),
                    lsn = %lsn_text(end_lsn),
                    committed = %lsn_text(self.committed),
                    "skipped a replayed transaction already in Kafka"
                );
                telemetry::skipped_replayed(rows.len());
                summary.skipped += rows.len() as u64;
            }
            return;
        }
        let mut rows = rows;
        if self.open_done > 0 {
            // Parts of it are in Kafka with a partial checkpoint: its end must be stored even
            // when no row remains.
            self.streamed_checkpoint = true;
        }
        if let Some(p) = self.resume_partial.take_if(|p| !p.streamed) {
            if p.end_lsn == end_lsn {
                // Its first parts are in Kafka already: the rest follows from there.
                let done = (p.rows as usize).min(rows.len());
                tracing::info!(
                    rows = done,
                    of = rows.len(),
                    lsn = %lsn_text(end_lsn),
                    "resuming a split transaction after its parts already in Kafka"
                );
                telemetry::skipped_replayed(done);
                summary.skipped += done as u64;
                rows.drain(..done);
                self.batch_offset = Some(p);
            } else if p.end_lsn > end_lsn {
                // Not reached yet (transactions before it had no rows to publish again).
                self.resume_partial = Some(p);
            } else {
                tracing::error!(
                    partial = %lsn_text(p.end_lsn),
                    received = %lsn_text(end_lsn),
                    "the stream passed the split transaction of the checkpoint without replaying it; its remaining rows are published as received"
                );
            }
        }
        if self.batch_end.is_none() {
            self.batch_since = Instant::now();
        }
        if !rows.is_empty() && self.batch_oldest_commit.is_none() {
            self.batch_oldest_commit = Some(self.open_commit_micros);
        }
        self.batch.extend(rows.into_iter().map(|mut r| {
            r.commit_lsn = Some(end_lsn);
            r
        }));
        self.batch_end = Some(end_lsn);
    }

    /// Publishes the rows of the open transaction received so far as one Kafka transaction
    /// (after the whole transactions received before it), its checkpoint saying how many of
    /// its rows are in Kafka (`partial`, `streamed`): pgoutput v1 sends only committed
    /// transactions, so its rows can go before its last one arrives, and the router holds at
    /// most one part (`outbox.max_rows_per_transaction` rows, [`PART_BYTES`]) whatever the
    /// transaction's size. The slot is confirmed only after its Commit.
    async fn flush_open_part(
        &mut self,
        publisher: &mut Publisher,
        repl: &ReplicationClient,
        summary: &mut CdcSummary,
    ) -> Result<(), OutboxError> {
        self.flush(publisher, repl, summary).await?;
        let mut rows = std::mem::take(&mut self.open_tx);
        self.open_bytes = 0;
        if rows.is_empty() {
            return Ok(());
        }
        if let Some(enc) = self.encoder.as_mut() {
            enc.encode_all(&mut rows).await?;
        }
        for r in &mut rows {
            // What a dead letter names: the commit's LSN (its end is not known yet).
            r.commit_lsn = Some(self.open_final);
        }
        let partial = PartialTx {
            end_lsn: self.open_final,
            rows: self.open_done + rows.len() as u64,
            streamed: true,
        };
        if self.open_done == 0 {
            tracing::info!(
                commit_lsn = %lsn_text(self.open_final),
                "a Postgres transaction over outbox.max_rows_per_transaction rows: publishing it in parts as its rows arrive"
            );
        }
        let published = publisher
            .publish_part(&rows, self.committed, Some(partial))
            .await?;
        self.open_done = partial.rows;
        self.streamed_checkpoint = true;
        summary.dead_lettered += published.dead_lettered as u64;
        telemetry::routed(published.routed, "cdc");
        summary.rows += published.routed as u64;
        summary.commits += 1;
        tracing::debug!(
            rows = published.routed,
            split_rows_done = partial.rows,
            "published a part of an open transaction"
        );
        Ok(())
    }

    async fn flush(
        &mut self,
        publisher: &mut Publisher,
        repl: &ReplicationClient,
        summary: &mut CdcSummary,
    ) -> Result<(), OutboxError> {
        let Some(end) = self.batch_end else {
            return Ok(());
        };
        if !self.batch.is_empty() {
            if let Some(enc) = self.encoder.as_mut() {
                enc.encode_all(&mut self.batch).await?;
            }
            let parts = split(
                &self.batch,
                end,
                self.committed,
                self.batch_offset,
                self.config.outbox.max_rows_per_transaction,
            );
            if parts.len() > 1 {
                tracing::info!(
                    rows = self.batch.len(),
                    parts = parts.len(),
                    lsn = %lsn_text(end),
                    "a Postgres transaction over outbox.max_rows_per_transaction rows: publishing it in parts"
                );
            }
            for (range, lsn, partial) in parts {
                let kafka_started = Instant::now();
                let published = publisher
                    .publish_part(&self.batch[range], lsn, partial)
                    .await?;
                let kafka_ms = kafka_started.elapsed().as_millis() as u64;
                let rows = published.routed;
                summary.dead_lettered += published.dead_lettered as u64;
                let latency = self
                    .batch_oldest_commit
                    .map(since_pg_micros)
                    .unwrap_or_default();
                telemetry::routed(rows, "cdc");
                telemetry::committed(rows, latency);
                summary.rows += rows as u64;
                summary.commits += 1;
                tracing::debug!(
                    rows,
                    lsn = %lsn_text(lsn),
                    split_rows_done = partial.map(|p| p.rows),
                    since_commit_ms = latency.as_millis() as u64,
                    kafka_ms,
                    "published"
                );
            }
        }
        if self.batch.is_empty() && self.streamed_checkpoint {
            // The end of a transaction published in streamed parts, none of its rows left.
            publisher.publish(&[], end).await?;
        }
        self.streamed_checkpoint = false;
        self.batch_offset = None;
        self.committed = end;
        summary.committed_lsn = end;
        repl.update_applied_lsn(Lsn::from_u64(end));
        let server_end = repl.metrics().last_wal_end().as_u64();
        telemetry::replication_lag(
            server_end.saturating_sub(end),
            self.last_commit_micros
                .map(|m| since_pg_micros(m).as_secs_f64())
                .unwrap_or(0.0),
        );
        self.batch.clear();
        self.batch_end = None;
        self.batch_oldest_commit = None;
        Ok(())
    }
}

/// The Kafka transactions `batch` (whole Postgres transactions received after `committed`,
/// ending at `end`) is published in: one when it holds at most `limit` rows, else parts of at
/// most `limit` rows. Each part comes with its checkpoint: the end LSN of the last transaction
/// it completes (or the one before, `committed` at first), and, when it ends inside a
/// transaction, that transaction's rows in Kafka after it (counting the `offset` rows of a
/// transaction resumed after a crash).
fn split(
    batch: &[RoutedRecord],
    end: u64,
    committed: u64,
    offset: Option<PartialTx>,
    limit: usize,
) -> Vec<(std::ops::Range<usize>, u64, Option<PartialTx>)> {
    if batch.len() <= limit {
        return vec![(0..batch.len(), end, None)];
    }
    let lsn_of = |i: usize| batch[i].commit_lsn.unwrap_or(end);
    let mut parts = vec![];
    let mut whole = committed;
    let mut start = 0;
    while start < batch.len() {
        let stop = (start + limit.max(1)).min(batch.len());
        let last = lsn_of(stop - 1);
        if stop == batch.len() {
            parts.push((start..stop, end, None));
        } else if lsn_of(stop) != last {
            whole = last;
            parts.push((start..stop, last, None));
        } else {
            // Ends inside the transaction `last`: its rows up to `stop`.
            let first = batch[..stop]
                .iter()
                .rposition(|r| r.commit_lsn.unwrap_or(end) != last)
                .map_or(0, |i| i + 1);
            if first > 0 {
                whole = lsn_of(first - 1);
            }
            let before = offset.filter(|p| p.end_lsn == last).map_or(0, |p| p.rows);
            let partial = PartialTx {
                end_lsn: last,
                rows: before + (stop - first) as u64,
                streamed: false,
            };
            parts.push((start..stop, whole, Some(partial)));
        }
        start = stop;
    }
    parts
}

/// A fence seen while this session's connection — which holds the slot's advisory lock — still
/// answers cannot come from a successor router (it would need the lock): the coordinator
/// aborted a transaction that outlived `transaction.timeout.ms` (a long coordinator outage) and
/// bumped the epoch. That is no reason to stop: the session ends as transient, and the next one
/// reads the stored LSN back and continues from it.
async fn unfenced(
    r: Result<(), OutboxError>,
    pg: &tokio_postgres::Client,
) -> Result<(), OutboxError> {
    match r {
        Err(OutboxError::Sink(eosflow::internals::sink::SinkError::Fenced { id, source }))
            if pg.simple_query("select 1").await.is_ok() =>
        {
            tracing::warn!(%id, error = %source, "fenced while this router still holds the slot's lock: a timed-out transaction, not a successor; starting a new session");
            Err(OutboxError::Other(format!(
                "fenced without a successor (the slot's lock is still held): {source}"
            )))
        }
        r => r,
    }
}

/// `IDENTIFY_SYSTEM` on a gated (not yet streaming) replication session.
async fn identify(repl: &mut ReplicationClient) -> Result<identity::Server, OutboxError> {
    let id = repl
        .identify_system()
        .await
        .map_err(|e| OutboxError::Replication(format!("IDENTIFY_SYSTEM: {e}")))?;
    Ok(identity::Server {
        cluster: ClusterId {
            system_id: id.system_id,
            timeline: id.timeline,
        },
        wal_end: id.xlogpos.as_u64(),
    })
}

/// Opens the replication stream after the stored checkpoint, once `IDENTIFY_SYSTEM` on the
/// very session that streams shows the checkpoint belongs to this server's WAL history
/// ([`identity::check`]). A checkpoint the operator discarded (`outbox.discard_checkpoint`) is
/// replaced, in a Kafka transaction of its own, by the slot's position on this server with
/// this server's identity; so is one without identity (older versions). Returns the stream and
/// the LSN at or below which transactions are already in Kafka.
async fn open_stream(
    config: &Config,
    pg: &tokio_postgres::Client,
    publisher: &mut Publisher,
    mut stored: Option<LsnCheckpoint>,
    mut imported: Option<tokio_postgres::Client>,
    summary: &mut CdcSummary,
) -> Result<(ReplicationClient, u64, Option<PartialTx>), OutboxError> {
    let o = &config.outbox;
    loop {
        let start = stored
            .as_ref()
            .map_or(0, |c| c.lsn)
            .max(summary.committed_lsn);
        let mut repl = ReplicationClient::connect_gated(replication_config(config, start)?)
            .await
            .map_err(|e| OutboxError::Replication(e.to_string()))?;
        let server = identify(&mut repl).await?;
        publisher.set_cluster(Some(server.cluster.clone()));
        let rewrite_at = match identity::check(
            stored.as_ref(),
            &server,
            &o.discard_checkpoint,
            &o.slot,
        )? {
            Resume::After {
                record_identity, ..
            } => {
                let snapshot = stored.as_ref().and_then(|c| c.snapshot.clone());
                publisher.set_snapshot(snapshot.clone());
                if record_identity {
                    publisher.publish(&[], start).await?;
                    tracing::info!(slot = %o.slot, system_id = %server.cluster.system_id, timeline = server.cluster.timeline, "recorded the cluster identity with the stored LSN");
                }
                if let Some(progress) = snapshot {
                    summary.rows +=
                        super::snapshot::run(config, publisher, start, progress, imported.take())
                            .await?;
                }
                tracing::info!(slot = %o.slot, lsn = %lsn_text(start), system_id = %server.cluster.system_id, timeline = server.cluster.timeline, "resuming after the committed LSN");
                repl.start()
                    .await
                    .map_err(|e| OutboxError::Replication(e.to_string()))?;
                repl.wait_started()
                    .await
                    .map_err(|e| OutboxError::Replication(e.to_string()))?;
                return Ok((repl, start, stored.as_ref().and_then(|c| c.partial)));
            }
            Resume::Discard => slot_position(pg, &o.slot).await?,
        };
        // The stream must start from the new checkpoint: this session was opened for the old.
        drop(repl);
        publisher.set_snapshot(None);
        publisher.publish(&[], rewrite_at).await?;
        tracing::warn!(slot = %o.slot, lsn = %lsn_text(rewrite_at), system_id = %server.cluster.system_id, timeline = server.cluster.timeline, "discarded the stored checkpoint; resuming from the slot's position on this server");
        summary.committed_lsn = rewrite_at;
        stored = Some(LsnCheckpoint {
            slot: o.slot.clone(),
            lsn: rewrite_at,
            lsn_text: lsn_text(rewrite_at),
            system_id: Some(server.cluster.system_id),
            timeline: Some(server.cluster.timeline),
            snapshot: None,
            partial: None,
        });
    }
}

/// The slot's confirmed position on this server: where a stream without a usable checkpoint
/// starts (the server sends nothing committed at or before it).
async fn slot_position(pg: &tokio_postgres::Client, slot: &str) -> Result<u64, OutboxError> {
    let row = pg
        .query_opt(
            "select confirmed_flush_lsn::text from pg_replication_slots where slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(pg_err("reading the slot's position"))?;
    row.and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|t| super::publish::parse_lsn(&t))
        .ok_or_else(|| OutboxError::Replication(format!("slot {slot} has no confirmed position")))
}

async fn session(
    config: &Config,
    shutdown: &AtomicBool,
    summary: &mut CdcSummary,
    health: &Health,
) -> Result<(), OutboxError> {
    let o = &config.outbox;
    let pg = super::connect(config.postgres.url.expose()).await?;
    for t in o.served() {
        if migrate::ensure(&pg, &t).await? {
            tracing::info!(table = %t.table, "created the outbox table");
        }
    }
    ensure_publication(&pg, config).await?;
    if !lock_slot(&pg, &o.slot, shutdown, health).await? {
        return Ok(());
    }
    let clients = KafkaClients::new(config.kafka.clone());
    let offsets_topic = super::offsets_topic(&config.app.id);
    let timeout = Duration::from_millis(o.transaction_timeout_ms);
    let mut publisher = Publisher::new(
        &clients,
        &super::transactional_id(&config.app.id, &o.slot),
        timeout,
        &offsets_topic,
        &super::dlt_topic(&config.app.id),
        &o.slot,
        o.topic_partitions,
    )
    .await?;
    publisher.set_waits(health.waits());
    // After init_transactions: a predecessor's open transaction is aborted, so what we read
    // now is final.
    let mut stored = tokio::task::block_in_place(|| {
        read_checkpoint(&clients, &offsets_topic, &o.slot, Duration::from_secs(60))
    })?;
    let mut imported = None;
    if o.snapshot == eosflow::config::OutboxSnapshot::Initial && stored.is_none() {
        // Nothing was ever published for this slot: (re)create it with an exported snapshot
        // and publish the rows already in the table before streaming.
        let mut repl = ReplicationClient::connect_gated(replication_config(config, 0)?)
            .await
            .map_err(|e| OutboxError::Replication(e.to_string()))?;
        let server = identify(&mut repl).await?;
        publisher.set_cluster(Some(server.cluster.clone()));
        let (checkpoint, snap_pg) =
            super::snapshot::create_slot(config, &pg, &mut publisher, repl, &server.cluster)
                .await?;
        stored = Some(checkpoint);
        imported = Some(snap_pg);
    } else {
        ensure_slot(&pg, config).await?;
    }
    let (mut repl, committed, partial) =
        open_stream(config, &pg, &mut publisher, stored, imported, summary).await?;
    let mut s = Session::new(
        config,
        committed,
        partial,
        PayloadEncoder::from_config(config)?,
    );
    health.set_ready(true);
    let commit_interval = Duration::from_millis(o.commit_interval_ms);
    let heartbeat_every = Duration::from_millis(o.heartbeat_interval_ms);
    let mut last_heartbeat = Instant::now();
    let prune_every = Duration::from_secs(o.prune_interval_secs);
    let mut last_prune = Instant::now();
    let tick = Duration::from_millis(100);
    loop {
        health.beat();
        if shutdown.load(Ordering::Relaxed) {
            // Finish what is complete; an open Postgres transaction is re-sent next time.
            unfenced(s.flush(&mut publisher, &repl, summary).await, &pg).await?;
            tokio::time::sleep(Duration::from_millis(s.config.outbox.status_interval_ms)).await;
            let _ = repl.shutdown().await;
            return Ok(());
        }
        // Wake exactly when the pending batch is due, else every `tick` (heartbeat, shutdown).
        let wait = match s.batch_end {
            Some(_) => commit_interval
                .saturating_sub(s.batch_since.elapsed())
                .max(Duration::from_millis(1)),
            None => tick,
        };
        match tokio::time::timeout(wait, repl.recv()).await {
            Err(_elapsed) => {}
            Ok(Err(e)) => return Err(OutboxError::Replication(e.to_string())),
            Ok(Ok(None)) => {
                return Err(OutboxError::Replication(
                    "the server ended the stream".into(),
                ))
            }
            Ok(Ok(Some(ev))) => match ev {
                ReplicationEvent::Begin {
                    final_lsn,
                    commit_time_micros,
                    ..
                } => s.on_begin(final_lsn.as_u64(), commit_time_micros),
                ReplicationEvent::XLogData { data, .. } => {
                    s.on_change(&data)?;
                    if s.open_tx.len() >= o.max_rows_per_transaction || s.open_bytes >= PART_BYTES {
                        unfenced(s.flush_open_part(&mut publisher, &repl, summary).await, &pg)
                            .await?;
                    }
                }
                ReplicationEvent::Commit {
                    end_lsn,
                    commit_time_micros,
                    ..
                } => {
                    tracing::trace!(
                        lsn = %lsn_text(end_lsn.as_u64()),
                        since_commit_ms = since_pg_micros(commit_time_micros).as_millis() as u64,
                        "commit received"
                    );
                    s.on_commit(end_lsn.as_u64(), summary);
                    s.last_commit_micros = Some(commit_time_micros);
                    if s.batch.len() >= o.batch_size {
                        unfenced(s.flush(&mut publisher, &repl, summary).await, &pg).await?;
                    }
                }
                ReplicationEvent::KeepAlive { wal_end, .. } => {
                    let bytes = wal_end.as_u64().saturating_sub(s.committed);
                    // Nothing pending: caught up. Else as old as the newest commit received.
                    let secs = if s.batch_end.is_none() && s.open_tx.is_empty() {
                        0.0
                    } else {
                        s.last_commit_micros
                            .map(|m| since_pg_micros(m).as_secs_f64())
                            .unwrap_or(0.0)
                    };
                    telemetry::replication_lag(bytes, secs);
                }
                ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
            },
        }
        if s.batch_end.is_some() && s.batch_since.elapsed() >= commit_interval {
            unfenced(s.flush(&mut publisher, &repl, summary).await, &pg).await?;
        }
        if !heartbeat_every.is_zero() && last_heartbeat.elapsed() >= heartbeat_every {
            pg.execute(
                "select pg_logical_emit_message(true, 'eosflow.outbox.heartbeat', $1)",
                &[&o.slot],
            )
            .await
            .map_err(pg_err("writing a heartbeat"))?;
            telemetry::heartbeat();
            last_heartbeat = Instant::now();
        }
        if !prune_every.is_zero() && last_prune.elapsed() >= prune_every {
            prune(&pg, config).await?;
            last_prune = Instant::now();
        }
    }
}

/// Deletes rows older than `outbox.prune_after_secs` (by `occurred_at`; in poll mode only
/// rows already sent). In CDC mode a row's INSERT is in the WAL (held by the slot) whatever
/// happens to the row, and the DELETE it causes is ignored by the router.
pub async fn prune(pg: &tokio_postgres::Client, config: &Config) -> Result<u64, OutboxError> {
    let mut pruned = 0;
    for o in config.outbox.served() {
        let only_sent = if o.mode == eosflow::config::OutboxMode::Poll {
            format!(" and {} is not null", quote_ident(&o.column_sent_at))
        } else {
            String::new()
        };
        let sql = format!(
            "delete from {} where {} < now() - make_interval(secs => $1){only_sent}",
            quoted_table(&o),
            quote_ident(&o.column_occurred_at),
        );
        let n = pg
            .execute(&sql, &[&(o.prune_after_secs as f64)])
            .await
            .map_err(pg_err("pruning old rows"))?;
        if n > 0 {
            telemetry::pruned(n);
            tracing::info!(rows = n, table = %o.table, "pruned old outbox rows");
        }
        pruned += n;
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of transactions (end LSN, rows), in order.
    fn batch(txs: &[(u64, usize)]) -> Vec<RoutedRecord> {
        txs.iter()
            .flat_map(|&(lsn, n)| {
                (0..n).map(move |i| RoutedRecord {
                    id: format!("{lsn}-{i}"),
                    commit_lsn: Some(lsn),
                    ..RoutedRecord::default()
                })
            })
            .collect()
    }

    #[test]
    fn a_batch_within_the_limit_is_one_kafka_transaction_at_its_end() {
        let b = batch(&[(10, 2), (20, 5)]);
        assert_eq!(split(&b, 25, 5, None, 7), vec![(0..7, 25, None)]);
    }

    #[test]
    fn a_transaction_over_the_limit_is_split_and_each_part_says_how_far_it_got() {
        // A(2 rows, end 10), B(5, end 20), C(1, end 30); committed 5; the batch ends at 35.
        let b = batch(&[(10, 2), (20, 5), (30, 1)]);
        let part = |end_lsn, rows| {
            Some(PartialTx {
                end_lsn,
                rows,
                streamed: false,
            })
        };
        assert_eq!(
            split(&b, 35, 5, None, 3),
            vec![
                (0..3, 10, part(20, 1)),
                (3..6, 10, part(20, 4)),
                (6..8, 35, None),
            ]
        );
        // A part ending at a transaction's end is whole there.
        assert_eq!(split(&b, 35, 5, None, 2)[0], (0..2, 10, None));
        // B resumed after its first 3 rows (dropped from the batch): its parts count on.
        let resumed = batch(&[(20, 2), (30, 3)]);
        assert_eq!(
            split(&resumed, 30, 5, part(20, 3), 3),
            vec![(0..3, 20, part(30, 1)), (3..5, 30, None)]
        );
        let resumed = batch(&[(20, 4)]);
        assert_eq!(
            split(&resumed, 20, 5, part(20, 1), 3),
            vec![(0..3, 5, part(20, 4)), (3..4, 20, None)]
        );
    }

    /// Feeds the captured real pgoutput stream (see pgoutput's tests) through a session, the
    /// way the replication loop does (Begin/Commit arrive as their own events).
    fn feed(committed: u64) -> (Vec<RoutedRecord>, CdcSummary) {
        let mut config = Config::default();
        config.outbox.table = "cap_outbox".into();
        let mut s = Session::new(&config, committed, None, None);
        let mut summary = CdcSummary::default();
        for line in include_str!("testdata/pgoutput_v1.hex").lines() {
            let bytes: Vec<u8> = (0..line.trim().len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line.trim()[i..i + 2], 16).expect("hex"))
                .collect();
            match pgoutput::decode(&bytes).expect("decodes") {
                Message::Begin {
                    final_lsn,
                    commit_time_micros,
                    ..
                } => s.on_begin(final_lsn, commit_time_micros),
                Message::Commit { end_lsn, .. } => s.on_commit(end_lsn, &mut summary),
                _ => s.on_change(&bytes).expect("change"),
            }
        }
        (s.batch, summary)
    }

    fn first_commit_end() -> u64 {
        include_str!("testdata/pgoutput_v1.hex")
            .lines()
            .filter_map(|l| {
                let b: Vec<u8> = (0..l.trim().len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&l.trim()[i..i + 2], 16).expect("hex"))
                    .collect();
                match pgoutput::decode(&b) {
                    Ok(Message::Commit { end_lsn, .. }) => Some(end_lsn),
                    _ => None,
                }
            })
            .next()
            .expect("a commit")
    }

    #[test]
    fn inserts_are_routed_and_updates_deletes_are_ignored() {
        let (batch, summary) = feed(0);
        let ids: Vec<&str> = batch.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "11111111-1111-1111-1111-111111111111",
                "22222222-2222-2222-2222-222222222222"
            ]
        );
        assert_eq!(batch[0].topic, "outbox.event.Order");
        assert_eq!(batch[0].key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(batch[1].value, None, "NULL payload: tombstone");
        assert_eq!(summary.ignored, 2, "one UPDATE, one DELETE");
        assert_eq!(summary.skipped, 0);
    }

    #[test]
    fn replayed_transactions_at_or_below_the_committed_lsn_are_skipped() {
        let (batch, summary) = feed(first_commit_end());
        let ids: Vec<&str> = batch.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["22222222-2222-2222-2222-222222222222"]);
        assert_eq!(summary.skipped, 1);
    }
}
