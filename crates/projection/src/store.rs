//! The store: a connection, the bookkeeping tables, claims (`open`) and batches (`apply`).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement, Transaction};

use crate::ident::{quote_ident, quote_table};
use crate::op::{Applied, Batch, DeadLetter, Record, RowOp};
use crate::tls::PgTarget;
use crate::value::Value;
use crate::{classify, pg_error, transient, Class, ProjectionError};

/// Each claimed partition's stored next offset: `None` when nothing was committed yet (start
/// from the beginning, or wherever the loop's reset policy says).
pub type Positions = BTreeMap<i32, Option<i64>>;

/// How long the store keeps trying through a lost connection.
///
/// Exists so a Postgres restart or fail-over is ridden out (`apply_retrying` and the lazy
/// reconnect) without retrying forever against a database that is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// How long one reconnect attempt series may take before the call fails as transient.
    pub reconnect_deadline: Duration,
    /// How long [`ProjectionStore::apply_retrying`] retries a batch failing transiently.
    pub retry_deadline: Duration,
    /// The first pause between attempts; doubled each time up to `max_backoff`.
    pub initial_backoff: Duration,
    /// The longest pause between attempts.
    pub max_backoff: Duration,
    /// Postgres ends this store's session when a transaction of it stays idle this long
    /// (`idle_in_transaction_session_timeout`): a process frozen mid-batch (SIGSTOP, a VM
    /// pause, a partition) would otherwise hold its partitions' offset rows locked, and the
    /// new owner's claim would wait on them for as long as the zombie stays frozen. `ZERO`
    /// leaves the server's setting.
    pub idle_in_transaction_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            reconnect_deadline: Duration::from_secs(30),
            retry_deadline: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            idle_in_transaction_timeout: Duration::from_secs(15),
        }
    }
}

struct Conn {
    client: Client,
    /// Prepared statements by SQL text: prepared once per connection and statement shape.
    cache: HashMap<String, Statement>,
}

/// One projection's connection to Postgres: claims partitions and applies batches with their
/// offsets in one transaction.
///
/// One store holds one connection (statements on it are pipelined); the loop uses one store per
/// partition group. Calls are serialised on the connection. When the connection is lost the
/// failing call returns [`ProjectionError::Transient`] and the next call reconnects (with
/// backoff, up to [`StoreOptions::reconnect_deadline`]).
pub struct ProjectionStore {
    name: String,
    target: PgTarget,
    options: StoreOptions,
    conn: Mutex<Option<Conn>>,
}

impl std::fmt::Debug for ProjectionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectionStore")
            .field("name", &self.name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

const LOCK_SQL: &str = "SELECT partition, next_offset, epoch FROM eosflow_offsets \
     WHERE projection = $1 AND topic = $2 AND partition = ANY($3) ORDER BY partition FOR UPDATE";
const READ_SQL: &str = "SELECT partition, next_offset FROM eosflow_offsets \
     WHERE projection = $1 AND topic = $2 AND partition = ANY($3)";
const CLAIM_SQL: &str = "INSERT INTO eosflow_offsets \
     (projection, topic, partition, next_offset, epoch, updated_at) \
     SELECT $1, $2, p, NULL, $4, now() FROM unnest($3::int4[]) AS p \
     ON CONFLICT (projection, topic, partition) DO UPDATE \
     SET epoch = EXCLUDED.epoch, updated_at = now() WHERE eosflow_offsets.epoch <= EXCLUDED.epoch";
const ADVANCE_SQL: &str = "UPDATE eosflow_offsets o SET next_offset = v.n, updated_at = now() \
     FROM unnest($3::int4[], $4::int8[]) AS v(p, n) \
     WHERE o.projection = $1 AND o.topic = $2 AND o.partition = v.p AND o.epoch = $5";
const INBOX_SEEN_SQL: &str =
    "SELECT message_id FROM eosflow_inbox WHERE projection = $1 AND message_id = ANY($2)";
const INBOX_ADD_SQL: &str = "INSERT INTO eosflow_inbox (projection, message_id) \
     SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING";
const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS eosflow_offsets (
    projection text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    next_offset bigint,
    epoch bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, topic, partition)
);
CREATE TABLE IF NOT EXISTS eosflow_inbox (
    projection text NOT NULL,
    message_id text NOT NULL,
    PRIMARY KEY (projection, message_id)
);
CREATE TABLE IF NOT EXISTS eosflow_epochs (
    projection text PRIMARY KEY,
    epoch bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS eosflow_dead_letters (
    projection text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    \"offset\" bigint NOT NULL,
    sqlstate text NOT NULL,
    message text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    PRIMARY KEY (projection, topic, partition, \"offset\")
);";
/// The next claim epoch: above every epoch handed out or claimed before for the projection.
const NEXT_EPOCH_SQL: &str = "INSERT INTO eosflow_epochs AS e (projection, epoch) \
     SELECT $1, coalesce(max(epoch), 0) + 1 FROM eosflow_offsets WHERE projection = $1 \
     ON CONFLICT (projection) DO UPDATE SET epoch = greatest(e.epoch + 1, EXCLUDED.epoch) \
     RETURNING epoch";
const DEAD_LETTER_SQL: &str = "INSERT INTO eosflow_dead_letters \
     (projection, topic, partition, \"offset\", sqlstate, message) \
     SELECT $1, t, p, o, s, m FROM unnest($2::text[], $3::int4[], $4::int8[], $5::text[], $6::text[]) \
     AS v(t, p, o, s, m) ON CONFLICT DO NOTHING";
const UNPUBLISHED_SQL: &str = "SELECT topic, partition, \"offset\", sqlstate, message \
     FROM eosflow_dead_letters WHERE projection = $1 AND topic = $2 AND partition = ANY($3) \
     AND published_at IS NULL ORDER BY partition, \"offset\"";
const PUBLISHED_SQL: &str = "UPDATE eosflow_dead_letters SET published_at = now() \
     FROM unnest($2::text[], $3::int4[], $4::int8[]) AS v(t, p, o) \
     WHERE projection = $1 AND topic = v.t AND partition = v.p AND \"offset\" = v.o";
/// Prepared statements kept per connection before the cache is emptied.
const MAX_CACHED: usize = 1024;
/// Serialises concurrent `ensure_schema` calls (`CREATE TABLE IF NOT EXISTS` races otherwise).
const SCHEMA_LOCK: i64 = 0x656f_7366_6c6f_7770; // "eosflowp"

impl ProjectionStore {
    /// Connects to `url` (a `postgres://` URL or key-value DSN; `sslmode`/`sslrootcert` as
    /// libpq reads them) for the projection `name`, which keys its rows in the bookkeeping
    /// tables.
    pub async fn connect(url: &str, name: &str) -> Result<Self, ProjectionError> {
        Self::connect_with(PgTarget::parse(url)?, name, StoreOptions::default()).await
    }

    /// Connects with a `tokio_postgres::Config` built in code (its `ssl_mode` decides TLS:
    /// `prefer`/`require` encrypt without verifying; use a URL with `sslrootcert` to verify).
    pub async fn connect_config(
        config: tokio_postgres::Config,
        name: &str,
        options: StoreOptions,
    ) -> Result<Self, ProjectionError> {
        Self::connect_with(PgTarget::from_config(config), name, options).await
    }

    /// Like [`connect`](Self::connect), with explicit reconnect and retry bounds.
    pub async fn connect_with_options(
        url: &str,
        name: &str,
        options: StoreOptions,
    ) -> Result<Self, ProjectionError> {
        Self::connect_with(PgTarget::parse(url)?, name, options).await
    }

    async fn connect_with(
        target: PgTarget,
        name: &str,
        options: StoreOptions,
    ) -> Result<Self, ProjectionError> {
        if name.is_empty() {
            return Err(ProjectionError::Config(
                "the projection name must not be empty".into(),
            ));
        }
        let client = target.connect().await?;
        session(&client, &options).await?;
        Ok(Self {
            name: name.to_string(),
            target,
            options,
            conn: Mutex::new(Some(Conn {
                client,
                cache: HashMap::new(),
            })),
        })
    }

    /// The projection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the bookkeeping tables (`eosflow_offsets`, `eosflow_inbox`, `eosflow_epochs`,
    /// `eosflow_dead_letters`) when missing; safe to call from every
    /// instance at start-up, concurrently.
    pub async fn ensure_schema(&self) -> Result<(), ProjectionError> {
        self.on_conn(async |conn| {
            let tx = conn
                .client
                .transaction()
                .await
                .map_err(|e| pg_error("creating the schema", &e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .await
                .map_err(|e| pg_error("creating the schema", &e))?;
            tx.batch_execute(SCHEMA_SQL)
                .await
                .map_err(|e| pg_error("creating the schema", &e))?;
            tx.commit()
                .await
                .map_err(|e| pg_error("creating the schema", &e))
        })
        .await
    }

    /// Claims `partitions` of `topic` for `epoch` and returns where each resumes.
    ///
    /// The loop calls it on assignment with the consumer-group generation (or any number that
    /// grows with each claim). In one transaction: a partition held by a higher epoch refuses
    /// the claim with [`ProjectionError::Fenced`] (and nothing is claimed); otherwise the
    /// partitions are recorded as ours, so every `apply` from an older epoch fails from now on.
    pub async fn open(
        &self,
        topic: &str,
        partitions: &[i32],
        epoch: i64,
    ) -> Result<Positions, ProjectionError> {
        let mut parts: Vec<i32> = partitions.to_vec();
        parts.sort_unstable();
        parts.dedup();
        self.on_conn(async |conn| self.open_on(conn, topic, &parts, epoch).await)
            .await
    }

    async fn open_on(
        &self,
        conn: &mut Conn,
        topic: &str,
        parts: &[i32],
        epoch: i64,
    ) -> Result<Positions, ProjectionError> {
        let ctx = "claiming partitions";
        let lock = prepared(conn, LOCK_SQL, ctx).await?;
        let claim = prepared(conn, CLAIM_SQL, ctx).await?;
        let tx = conn
            .client
            .transaction()
            .await
            .map_err(|e| pg_error(ctx, &e))?;
        let parts_vec = parts.to_vec();
        let rows = tx
            .query(&lock, &[&self.name, &topic, &parts_vec])
            .await
            .map_err(|e| pg_error(ctx, &e))?;
        let mut positions: Positions = parts.iter().map(|p| (*p, None)).collect();
        for row in &rows {
            let partition: i32 = row.get(0);
            let next: Option<i64> = row.get(1);
            let current: i64 = row.get(2);
            if current > epoch {
                return Err(self.fenced(topic, partition, epoch, current));
            }
            positions.insert(partition, next);
        }
        let n = tx
            .execute(&claim, &[&self.name, &topic, &parts_vec, &epoch])
            .await
            .map_err(|e| pg_error(ctx, &e))?;
        if n != parts.len() as u64 {
            // A concurrent claim created a row with a higher epoch after our read.
            let rows = tx
                .query(&lock, &[&self.name, &topic, &parts_vec])
                .await
                .map_err(|e| pg_error(ctx, &e))?;
            for row in &rows {
                let current: i64 = row.get(2);
                if current > epoch {
                    return Err(self.fenced(topic, row.get(0), epoch, current));
                }
            }
            return Err(ProjectionError::Transient {
                context: ctx.into(),
                sqlstate: None,
                message: "a concurrent claim changed the partitions".into(),
            });
        }
        tx.commit().await.map_err(|e| pg_error(ctx, &e))?;
        tracing::info!(projection = %self.name, topic, partitions = ?parts, epoch, "claimed partitions");
        Ok(positions)
    }

    /// Runs `f` on the live connection (reconnecting first if it was lost), and forgets the
    /// connection if it died meanwhile: the shape every call of the store shares.
    async fn on_conn<T>(
        &self,
        f: impl AsyncFnOnce(&mut Conn) -> Result<T, ProjectionError>,
    ) -> Result<T, ProjectionError> {
        let mut guard = self.conn().await?;
        let conn = live(&mut guard)?;
        let res = f(conn).await;
        forget_if_closed(&mut guard, res)
    }

    /// A claim epoch above every epoch this projection handed out or claimed before.
    ///
    /// Exists because a consumer group's own numbers do not order owners across members under
    /// every protocol (KIP-848 member epochs are per member): the loop takes a fresh epoch from
    /// the database at each assignment and claims its partitions with it, so the latest owner
    /// always fences the ones before it.
    pub async fn next_epoch(&self) -> Result<i64, ProjectionError> {
        self.on_conn(async |conn| {
            let ctx = "taking a claim epoch";
            let st = prepared(conn, NEXT_EPOCH_SQL, ctx).await?;
            let row = conn
                .client
                .query_one(&st, &[&self.name])
                .await
                .map_err(|e| pg_error(ctx, &e))?;
            Ok(row.get::<_, i64>(0))
        })
        .await
    }

    /// The dead letters of `partitions` committed (in `eosflow_dead_letters`, with their
    /// batch) but not yet marked published to Kafka: a loop that crashed between its commit and
    /// the dead-letter topic's acknowledgement publishes them when it owns the partitions again.
    pub async fn unpublished_dead_letters(
        &self,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<DeadLetter>, ProjectionError> {
        self.on_conn(async |conn| {
            let ctx = "reading unpublished dead letters";
            let st = prepared(conn, UNPUBLISHED_SQL, ctx).await?;
            let parts = partitions.to_vec();
            let rows = conn
                .client
                .query(&st, &[&self.name, &topic, &parts])
                .await
                .map_err(|e| pg_error(ctx, &e))?;
            Ok(rows
                .iter()
                .map(|r| DeadLetter {
                    topic: r.get(0),
                    partition: r.get(1),
                    offset: r.get(2),
                    sqlstate: r.get(3),
                    message: r.get(4),
                })
                .collect())
        })
        .await
    }

    /// Marks `letters` as published to the dead-letter topic.
    pub async fn mark_published(&self, letters: &[DeadLetter]) -> Result<(), ProjectionError> {
        if letters.is_empty() {
            return Ok(());
        }
        self.on_conn(async |conn| {
            let ctx = "marking dead letters published";
            let st = prepared(conn, PUBLISHED_SQL, ctx).await?;
            let (t, p, o) = dead_letter_columns(letters);
            conn.client
                .execute(&st, &[&self.name, &t, &p, &o])
                .await
                .map_err(|e| pg_error(ctx, &e))?;
            Ok(())
        })
        .await
    }

    /// Keeps the batch's dead letters in `eosflow_dead_letters`, in the batch's transaction:
    /// a crash before they reach the dead-letter topic loses none of them.
    async fn keep_dead_letters(
        &self,
        tx: &Transaction<'_>,
        letters: &[DeadLetter],
    ) -> Result<(), ProjectionError> {
        if letters.is_empty() {
            return Ok(());
        }
        let (t, p, o) = dead_letter_columns(letters);
        let s: Vec<&str> = letters.iter().map(|d| d.sqlstate.as_str()).collect();
        let m: Vec<&str> = letters.iter().map(|d| d.message.as_str()).collect();
        tx.execute(DEAD_LETTER_SQL, &[&self.name, &t, &p, &o, &s, &m])
            .await
            .map_err(|e| pg_error("keeping dead letters", &e))?;
        Ok(())
    }

    /// The stored positions of `partitions`, without claiming anything (monitoring, lag).
    pub async fn positions(
        &self,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Positions, ProjectionError> {
        self.on_conn(async |conn| {
            let ctx = "reading positions";
            let read = prepared(conn, READ_SQL, ctx).await?;
            let parts = partitions.to_vec();
            let rows = conn
                .client
                .query(&read, &[&self.name, &topic, &parts])
                .await
                .map_err(|e| pg_error(ctx, &e))?;
            let mut positions: Positions = partitions.iter().map(|p| (*p, None)).collect();
            for row in &rows {
                positions.insert(row.get(0), row.get(1));
            }
            Ok(positions)
        })
        .await
    }

    /// Applies `batch` and advances its partitions' positions in one transaction.
    ///
    /// Records below a partition's stored position are skipped (a replay after a crash), as
    /// are records whose message id the inbox already holds; the others' ops are applied in
    /// order. A record failing permanently is rolled back alone and reported in
    /// [`Applied::dead_lettered`]; the positions still move past it. Errors: `Fenced` when a
    /// newer claim owns a partition (nothing committed), `Transient` when the batch should be
    /// retried as is (nothing committed, or all of it if the connection died in `COMMIT`).
    pub async fn apply(&self, batch: &Batch) -> Result<Applied, ProjectionError> {
        check_batch(batch)?;
        let started = Instant::now();
        let res = self
            .on_conn(async |conn| match self.apply_fast(conn, batch).await {
                Ok(Some(applied)) => Ok(applied),
                Ok(None) => self.apply_per_record(conn, batch).await,
                Err(e) => Err(e),
            })
            .await;
        if let Ok(a) = &res {
            tracing::debug!(
                projection = %self.name,
                applied = a.applied,
                replayed = a.replayed,
                duplicates = a.duplicates,
                dead_lettered = a.dead_lettered.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "batch committed"
            );
        }
        res
    }

    /// [`apply`](Self::apply), retrying transient failures with backoff for up to
    /// [`StoreOptions::retry_deadline`] (a Postgres restart, a deadlock, a serialization
    /// failure). Retrying is exactly-once: the stored positions skip what already committed.
    pub async fn apply_retrying(&self, batch: &Batch) -> Result<Applied, ProjectionError> {
        let deadline = Instant::now() + self.options.retry_deadline;
        let mut backoff = self.options.initial_backoff;
        loop {
            match self.apply(batch).await {
                Err(e) if e.is_transient() && Instant::now() + backoff < deadline => {
                    tracing::warn!(projection = %self.name, error = %e, "batch failed transiently; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.options.max_backoff);
                }
                other => return other,
            }
        }
    }

    fn fenced(&self, topic: &str, partition: i32, ours: i64, current: i64) -> ProjectionError {
        ProjectionError::Fenced {
            projection: self.name.clone(),
            topic: topic.to_string(),
            partition,
            ours,
            current,
        }
    }

    /// The connection, reconnecting (with backoff, up to the deadline) when it was lost.
    async fn conn(&self) -> Result<MutexGuard<'_, Option<Conn>>, ProjectionError> {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_some_and(|c| !c.client.is_closed()) {
            return Ok(guard);
        }
        *guard = None;
        let deadline = Instant::now() + self.options.reconnect_deadline;
        let mut backoff = self.options.initial_backoff;
        loop {
            let connected = match self.target.connect().await {
                Ok(client) => session(&client, &self.options).await.map(|()| client),
                Err(e) => Err(e),
            };
            match connected {
                Ok(client) => {
                    tracing::info!(projection = %self.name, "reconnected to Postgres");
                    *guard = Some(Conn {
                        client,
                        cache: HashMap::new(),
                    });
                    return Ok(guard);
                }
                Err(e) if e.is_transient() && Instant::now() + backoff < deadline => {
                    tracing::warn!(projection = %self.name, error = %e, "reconnecting to Postgres");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.options.max_backoff);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Locks the batch's offset rows, checks the epoch, and reads positions and seen ids.
    async fn begin_batch(
        &self,
        tx: &Transaction<'_>,
        stmts: &Fixed,
        batch: &Batch,
    ) -> Result<Start, ProjectionError> {
        let ctx = "locking the batch's partitions";
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for p in &batch.partitions {
            by_topic.entry(&p.topic).or_default().push(p.partition);
        }
        for parts in by_topic.values_mut() {
            parts.sort_unstable();
        }
        let mut positions: HashMap<(String, i32), Option<i64>> = HashMap::new();
        for (topic, parts) in &by_topic {
            let rows = tx
                .query(&stmts.lock, &[&self.name, topic, parts])
                .await
                .map_err(|e| pg_error(ctx, &e))?;
            let mut found = HashSet::new();
            for row in &rows {
                let partition: i32 = row.get(0);
                let current: i64 = row.get(2);
                if current > batch.epoch {
                    return Err(self.fenced(topic, partition, batch.epoch, current));
                }
                if current < batch.epoch {
                    return Err(ProjectionError::NotClaimed {
                        projection: self.name.clone(),
                        topic: topic.to_string(),
                        partition,
                    });
                }
                found.insert(partition);
                positions.insert((topic.to_string(), partition), row.get(1));
            }
            if let Some(missing) = parts.iter().find(|p| !found.contains(p)) {
                return Err(ProjectionError::NotClaimed {
                    projection: self.name.clone(),
                    topic: topic.to_string(),
                    partition: *missing,
                });
            }
        }
        let ids: Vec<String> = batch
            .partitions
            .iter()
            .flat_map(|p| p.records.iter().filter_map(|r| r.message_id.clone()))
            .collect();
        let mut seen = HashSet::new();
        if !ids.is_empty() {
            let rows = tx
                .query(&stmts.inbox_seen, &[&self.name, &ids])
                .await
                .map_err(|e| pg_error("reading the inbox", &e))?;
            seen = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        }
        Ok(Start { positions, seen })
    }

    /// Sorts the batch's records into replays, duplicates, invalid ones and the ones to apply.
    fn triage<'b>(&self, batch: &'b Batch, start: &Start, out: &mut Applied) -> Vec<Todo<'b>> {
        let mut todo = Vec::new();
        let mut ids_in_batch: HashSet<&str> = HashSet::new();
        for p in &batch.partitions {
            let next = start
                .positions
                .get(&(p.topic.clone(), p.partition))
                .copied()
                .flatten();
            for r in &p.records {
                if next.is_some_and(|n| r.offset < n) {
                    out.replayed += 1;
                    continue;
                }
                if let Some(id) = &r.message_id {
                    if start.seen.contains(id) || !ids_in_batch.insert(id) {
                        out.duplicates += 1;
                        continue;
                    }
                }
                if let Err((sqlstate, message)) = validate_ops(&r.ops) {
                    out.dead_lettered.push(DeadLetter {
                        topic: p.topic.clone(),
                        partition: p.partition,
                        offset: r.offset,
                        sqlstate,
                        message,
                    });
                    continue;
                }
                todo.push(Todo {
                    topic: &p.topic,
                    partition: p.partition,
                    record: r,
                });
            }
        }
        todo
    }

    /// The advance statements' parameters: per topic, partitions and their new positions.
    fn advances(&self, batch: &Batch, start: &Start, out: &mut Applied) -> Vec<Advance> {
        let mut by_topic: BTreeMap<String, Advance> = BTreeMap::new();
        for p in &batch.partitions {
            let stored = start
                .positions
                .get(&(p.topic.clone(), p.partition))
                .copied()
                .flatten();
            let next = match p.records.last() {
                Some(last) => stored.map_or(last.offset + 1, |s| s.max(last.offset + 1)),
                None => match stored {
                    Some(s) => s,
                    None => continue,
                },
            };
            out.positions.push((p.topic.clone(), p.partition, next));
            if stored != Some(next) {
                let a = by_topic.entry(p.topic.clone()).or_insert_with(|| Advance {
                    topic: p.topic.clone(),
                    partitions: Vec::new(),
                    next: Vec::new(),
                });
                a.partitions.push(p.partition);
                a.next.push(next);
            }
        }
        by_topic.into_values().collect()
    }

    /// The whole batch in one pipeline. `Ok(None)`: a record failed permanently; the
    /// transaction was rolled back and the per-record path must find which.
    async fn apply_fast(
        &self,
        conn: &mut Conn,
        batch: &Batch,
    ) -> Result<Option<Applied>, ProjectionError> {
        if conn.cache.len() > MAX_CACHED {
            // User SQL with values formatted into the text would grow it without bound.
            conn.cache.clear();
        }
        let stmts = Fixed::prepare(conn).await?;
        let Conn { client, cache } = conn;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("beginning the batch", &e))?;
        let start = self.begin_batch(&tx, &stmts, batch).await?;
        let mut out = Applied::default();
        let todo = self.triage(batch, &start, &mut out);
        let mut planner = Planner::default();
        for t in &todo {
            for op in &t.record.ops {
                planner.add(op)?;
            }
        }
        let planned = planner.finish();
        // Prepare the statement shapes not seen yet on this connection (pipelined).
        let missing: Vec<String> = {
            let mut m: Vec<String> = planned
                .iter()
                .filter(|s| !cache.contains_key(&s.sql))
                .map(|s| s.sql.clone())
                .collect();
            m.sort();
            m.dedup();
            m
        };
        let prepares: Vec<PgFut<'_, Statement>> = missing
            .iter()
            .map(|sql| Box::pin(tx.prepare(sql)) as PgFut<'_, Statement>)
            .collect();
        let results = pipeline(prepares).await;
        for (sql, r) in missing.iter().zip(results) {
            match r {
                Ok(st) => {
                    cache.insert(sql.clone(), st);
                }
                Err(e) => return self.abandon(tx, &e).await,
            }
        }
        // Records the triage refused (a bad name, an empty key): kept with the batch.
        self.keep_dead_letters(&tx, &out.dead_lettered).await?;
        let ids: Vec<String> = todo
            .iter()
            .filter_map(|t| t.record.message_id.clone())
            .collect();
        let advances = self.advances(batch, &start, &mut out);
        let params = param_refs(&planned);
        let inbox_params: [&(dyn ToSql + Sync); 2] = [&self.name, &ids];
        let advance_params: Vec<[&(dyn ToSql + Sync); 5]> = advances
            .iter()
            .map(|a| {
                [
                    &self.name as &(dyn ToSql + Sync),
                    &a.topic,
                    &a.partitions,
                    &a.next,
                    &batch.epoch,
                ]
            })
            .collect();
        let mut futs: Vec<PgFut<'_, u64>> = Vec::with_capacity(planned.len() + 2);
        if !ids.is_empty() {
            futs.push(Box::pin(tx.execute(&stmts.inbox_add, &inbox_params)));
        }
        for (s, p) in planned.iter().zip(&params) {
            futs.push(Box::pin(
                tx.execute(prepared_for(cache, s, "applying the batch")?, p),
            ));
        }
        for p in &advance_params {
            futs.push(Box::pin(tx.execute(&stmts.advance, p)));
        }
        let results = pipeline(futs).await;
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            return self.abandon(tx, e).await;
        }
        if !ids.is_empty()
            && results.first().and_then(|r| r.as_ref().ok()) != Some(&(ids.len() as u64))
        {
            // Another instance of this projection applied one of the ids concurrently.
            tx.rollback()
                .await
                .map_err(|e| pg_error("rolling back", &e))?;
            return Ok(None);
        }
        if let Err(e) = tx.commit().await {
            // A deferred constraint fails at COMMIT: the per-record path checks constraints
            // immediately and finds the record. Anything else here is retryable (the
            // connection may have died after the commit; the positions tell on retry).
            return match classify(&e) {
                Class::Permanent { .. } => Ok(None),
                _ => Err(transient("committing the batch", &e)),
            };
        }
        out.applied = todo.len();
        Ok(Some(out))
    }

    /// Rolls back after `e`: a permanent record error hands over to the per-record path.
    async fn abandon(
        &self,
        tx: Transaction<'_>,
        e: &tokio_postgres::Error,
    ) -> Result<Option<Applied>, ProjectionError> {
        match classify(e) {
            Class::Permanent { .. } => {
                tx.rollback()
                    .await
                    .map_err(|e| pg_error("rolling back", &e))?;
                Ok(None)
            }
            Class::Transient => Err(transient("applying the batch", e)),
            Class::Fatal => Err(pg_error("applying the batch", e)),
        }
    }

    /// The batch record by record, each under a savepoint: a permanent failure rolls back
    /// that record alone and dead-letters it.
    async fn apply_per_record(
        &self,
        conn: &mut Conn,
        batch: &Batch,
    ) -> Result<Applied, ProjectionError> {
        let stmts = Fixed::prepare(conn).await?;
        let Conn { client, cache } = conn;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("beginning the batch", &e))?;
        // Deferred constraints would fail only at COMMIT, for no record in particular.
        tx.batch_execute("SET CONSTRAINTS ALL IMMEDIATE")
            .await
            .map_err(|e| pg_error("beginning the batch", &e))?;
        let start = self.begin_batch(&tx, &stmts, batch).await?;
        let mut out = Applied::default();
        let todo = self.triage(batch, &start, &mut out);
        let savepoint = |sql: &'static str| {
            let tx = &tx;
            async move {
                tx.batch_execute(sql)
                    .await
                    .map_err(|e| pg_error("managing a savepoint", &e))
            }
        };
        for t in &todo {
            savepoint("SAVEPOINT eosflow_record").await?;
            match self.apply_record(&tx, cache, &stmts, t.record).await? {
                Outcome::Applied => {
                    savepoint("RELEASE SAVEPOINT eosflow_record").await?;
                    out.applied += 1;
                }
                Outcome::Duplicate => {
                    savepoint(
                        "ROLLBACK TO SAVEPOINT eosflow_record; RELEASE SAVEPOINT eosflow_record",
                    )
                    .await?;
                    out.duplicates += 1;
                }
                Outcome::Failed { sqlstate, message } => {
                    savepoint(
                        "ROLLBACK TO SAVEPOINT eosflow_record; RELEASE SAVEPOINT eosflow_record",
                    )
                    .await?;
                    tracing::warn!(
                        projection = %self.name,
                        topic = t.topic,
                        partition = t.partition,
                        offset = t.record.offset,
                        sqlstate,
                        message,
                        "record failed permanently; dead-lettered"
                    );
                    out.dead_lettered.push(DeadLetter {
                        topic: t.topic.to_string(),
                        partition: t.partition,
                        offset: t.record.offset,
                        sqlstate,
                        message,
                    });
                }
            }
        }
        out.dead_lettered.sort_by(|a, b| {
            (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset))
        });
        self.keep_dead_letters(&tx, &out.dead_lettered).await?;
        let advances = self.advances(batch, &start, &mut out);
        for a in &advances {
            tx.execute(
                &stmts.advance,
                &[&self.name, &a.topic, &a.partitions, &a.next, &batch.epoch],
            )
            .await
            .map_err(|e| pg_error("advancing positions", &e))?;
        }
        tx.commit()
            .await
            .map_err(|e| transient("committing the batch", &e))?;
        Ok(out)
    }

    async fn apply_record(
        &self,
        tx: &Transaction<'_>,
        cache: &mut HashMap<String, Statement>,
        stmts: &Fixed,
        record: &Record,
    ) -> Result<Outcome, ProjectionError> {
        let mut planner = Planner::default();
        for op in &record.ops {
            planner.add(op)?;
        }
        let planned = planner.finish();
        for s in &planned {
            if !cache.contains_key(&s.sql) {
                match tx.prepare(&s.sql).await {
                    Ok(st) => {
                        cache.insert(s.sql.clone(), st);
                    }
                    Err(e) => return outcome(&e),
                }
            }
        }
        let ids: Vec<String> = record.message_id.iter().cloned().collect();
        let params = param_refs(&planned);
        let inbox_params: [&(dyn ToSql + Sync); 2] = [&self.name, &ids];
        let mut futs: Vec<PgFut<'_, u64>> = Vec::with_capacity(planned.len() + 1);
        if !ids.is_empty() {
            futs.push(Box::pin(tx.execute(&stmts.inbox_add, &inbox_params)));
        }
        for (s, p) in planned.iter().zip(&params) {
            futs.push(Box::pin(
                tx.execute(prepared_for(cache, s, "applying a record")?, p),
            ));
        }
        let results = pipeline(futs).await;
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            return outcome(e);
        }
        if !ids.is_empty() && results.first().and_then(|r| r.as_ref().ok()) == Some(&0) {
            return Ok(Outcome::Duplicate);
        }
        Ok(Outcome::Applied)
    }
}

enum Outcome {
    Applied,
    Duplicate,
    Failed { sqlstate: String, message: String },
}

fn outcome(e: &tokio_postgres::Error) -> Result<Outcome, ProjectionError> {
    match classify(e) {
        Class::Permanent { sqlstate, message } => Ok(Outcome::Failed { sqlstate, message }),
        Class::Transient => Err(transient("applying a record", e)),
        Class::Fatal => Err(pg_error("applying a record", e)),
    }
}

/// The bookkeeping statements, prepared once per connection.
struct Fixed {
    lock: Statement,
    advance: Statement,
    inbox_seen: Statement,
    inbox_add: Statement,
}

impl Fixed {
    async fn prepare(conn: &mut Conn) -> Result<Self, ProjectionError> {
        let ctx = "preparing the bookkeeping statements";
        Ok(Self {
            lock: prepared(conn, LOCK_SQL, ctx).await?,
            advance: prepared(conn, ADVANCE_SQL, ctx).await?,
            inbox_seen: prepared(conn, INBOX_SEEN_SQL, ctx).await?,
            inbox_add: prepared(conn, INBOX_ADD_SQL, ctx).await?,
        })
    }
}

async fn prepared(conn: &mut Conn, sql: &str, ctx: &str) -> Result<Statement, ProjectionError> {
    if let Some(st) = conn.cache.get(sql) {
        return Ok(st.clone());
    }
    let st = conn
        .client
        .prepare(sql)
        .await
        .map_err(|e| pg_error(ctx, &e))?;
    conn.cache.insert(sql.to_string(), st.clone());
    Ok(st)
}

fn live<'g>(guard: &'g mut MutexGuard<'_, Option<Conn>>) -> Result<&'g mut Conn, ProjectionError> {
    guard.as_mut().ok_or_else(|| ProjectionError::Transient {
        context: "connecting".into(),
        sqlstate: None,
        message: "no connection".into(),
    })
}

/// Drops a connection that died so the next call reconnects.
fn forget_if_closed<T>(
    guard: &mut MutexGuard<'_, Option<Conn>>,
    res: Result<T, ProjectionError>,
) -> Result<T, ProjectionError> {
    if res.is_err() && guard.as_ref().is_some_and(|c| c.client.is_closed()) {
        **guard = None;
    }
    res
}

struct Start {
    positions: HashMap<(String, i32), Option<i64>>,
    seen: HashSet<String>,
}

struct Todo<'b> {
    topic: &'b str,
    partition: i32,
    record: &'b Record,
}

struct Advance {
    topic: String,
    partitions: Vec<i32>,
    next: Vec<i64>,
}

fn check_batch(batch: &Batch) -> Result<(), ProjectionError> {
    let mut seen = HashSet::new();
    for p in &batch.partitions {
        if !seen.insert((p.topic.as_str(), p.partition)) {
            return Err(ProjectionError::InvalidBatch(format!(
                "{}[{}] appears twice",
                p.topic, p.partition
            )));
        }
        for w in p.records.windows(2) {
            if w[1].offset <= w[0].offset {
                return Err(ProjectionError::InvalidBatch(format!(
                    "{}[{}]: offset {} follows {} (offsets must ascend)",
                    p.topic, p.partition, w[1].offset, w[0].offset
                )));
            }
        }
    }
    Ok(())
}

/// Checks a record's ops before any SQL is built: `Err((sqlstate, message))` dead-letters it.
fn validate_ops(ops: &[RowOp]) -> Result<(), (String, String)> {
    let bad = |e: ProjectionError| ("42602".to_string(), e.to_string());
    for op in ops {
        match op {
            RowOp::Upsert {
                table,
                key,
                columns,
                ..
            } => {
                quote_table(table).map_err(bad)?;
                if key.is_empty() {
                    return Err((
                        "42P10".into(),
                        format!("upsert into {table:?} without key columns"),
                    ));
                }
                for (c, _) in key.iter().chain(columns) {
                    quote_ident(c).map_err(bad)?;
                }
            }
            RowOp::Delete { table, key, .. } => {
                quote_table(table).map_err(bad)?;
                if key.is_empty() {
                    return Err((
                        "42P10".into(),
                        format!("delete from {table:?} without key columns"),
                    ));
                }
                for (c, _) in key {
                    quote_ident(c).map_err(bad)?;
                }
            }
            RowOp::Insert { table, columns } => {
                quote_table(table).map_err(bad)?;
                for (c, _) in columns {
                    quote_ident(c).map_err(bad)?;
                }
            }
            RowOp::Sql { .. } => {}
        }
    }
    Ok(())
}

/// Each planned statement's parameters as the driver takes them (the batch and the per-record
/// paths both run planned statements).
fn param_refs<'p>(planned: &'p [Planned<'_>]) -> Vec<Vec<&'p (dyn ToSql + Sync)>> {
    planned
        .iter()
        .map(|s| {
            s.params
                .iter()
                .map(|v| v.as_ref() as &(dyn ToSql + Sync))
                .collect()
        })
        .collect()
}

/// The prepared statement of `s`: every planned statement is prepared before it runs, so a
/// missing one is a bug, reported rather than skipped (a skipped statement would be a lost
/// write committed with its offsets).
fn prepared_for<'c>(
    cache: &'c HashMap<String, Statement>,
    s: &Planned<'_>,
    context: &str,
) -> Result<&'c Statement, ProjectionError> {
    cache.get(&s.sql).ok_or_else(|| ProjectionError::Postgres {
        context: context.into(),
        sqlstate: None,
        message: "a statement was not prepared".into(),
    })
}

/// A statement to run: SQL text (the cache key) and its parameters.
struct Planned<'a> {
    sql: String,
    params: Vec<Cow<'a, Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GroupKind {
    Upsert { guarded: bool },
    Insert,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    kind: GroupKind,
    table: String,
    key: Vec<String>,
    columns: Vec<String>,
}

struct Group<'a> {
    shape: Shape,
    rows: Vec<Vec<Cow<'a, Value>>>,
    keys: HashSet<String>,
}

/// Multi-row statement sizes: a bounded set of shapes per table, so the statement cache stays
/// small while most rows go in 64 at a time.
const CHUNKS: [usize; 4] = [64, 16, 4, 1];
/// Stay well under Postgres' 65535 parameters per statement.
const MAX_PARAMS: usize = 30_000;

/// Turns ops into statements: consecutive upserts (inserts) into one table with the same
/// columns become multi-row statements. Ops on different tables may be reordered relative to
/// each other (never across an `Sql` op); ops on one table keep their order, and a key
/// repeated within a group starts a new statement (`ON CONFLICT DO UPDATE` cannot touch a row
/// twice).
#[derive(Default)]
struct Planner<'a> {
    out: Vec<Planned<'a>>,
    open: Vec<Group<'a>>,
}

impl<'a> Planner<'a> {
    fn add(&mut self, op: &'a RowOp) -> Result<(), ProjectionError> {
        match op {
            RowOp::Upsert {
                table,
                key,
                columns,
                version,
            } => {
                let shape = Shape {
                    kind: GroupKind::Upsert {
                        guarded: version.is_some(),
                    },
                    table: quote_table(table)?,
                    key: key
                        .iter()
                        .map(|(c, _)| quote_ident(c))
                        .collect::<Result<_, _>>()?,
                    columns: columns
                        .iter()
                        .map(|(c, _)| quote_ident(c))
                        .collect::<Result<_, _>>()?,
                };
                let key_repr = format!("{:?}", key.iter().map(|(_, v)| v).collect::<Vec<_>>());
                let mut row: Vec<Cow<'a, Value>> = key
                    .iter()
                    .chain(columns)
                    .map(|(_, v)| Cow::Borrowed(v))
                    .collect();
                if let Some(v) = version {
                    row.push(Cow::Owned(Value::Int(*v)));
                }
                self.push_row(shape, Some(key_repr), row);
            }
            RowOp::Insert { table, columns } if !columns.is_empty() => {
                let shape = Shape {
                    kind: GroupKind::Insert,
                    table: quote_table(table)?,
                    key: Vec::new(),
                    columns: columns
                        .iter()
                        .map(|(c, _)| quote_ident(c))
                        .collect::<Result<_, _>>()?,
                };
                self.push_row(
                    shape,
                    None,
                    columns.iter().map(|(_, v)| Cow::Borrowed(v)).collect(),
                );
            }
            RowOp::Insert { table, .. } => {
                let t = quote_table(table)?;
                self.flush_table(&t);
                self.out.push(Planned {
                    sql: format!("INSERT INTO {t} DEFAULT VALUES"),
                    params: Vec::new(),
                });
            }
            RowOp::Delete {
                table,
                key,
                version,
            } => {
                let t = quote_table(table)?;
                let mut conds = Vec::new();
                let mut params: Vec<Cow<'a, Value>> = Vec::new();
                for (c, v) in key {
                    params.push(Cow::Borrowed(v));
                    conds.push(format!("{} = ${}", quote_ident(c)?, params.len()));
                }
                if let Some(v) = version {
                    params.push(Cow::Owned(Value::Int(*v)));
                    conds.push(format!(
                        "(\"version\" IS NULL OR \"version\" < ${})",
                        params.len()
                    ));
                }
                self.flush_table(&t);
                self.out.push(Planned {
                    sql: format!("DELETE FROM {t} WHERE {}", conds.join(" AND ")),
                    params,
                });
            }
            RowOp::Sql { statement, params } => {
                self.flush_all();
                self.out.push(Planned {
                    sql: statement.clone(),
                    params: params.iter().map(Cow::Borrowed).collect(),
                });
            }
        }
        Ok(())
    }

    fn push_row(&mut self, shape: Shape, key: Option<String>, row: Vec<Cow<'a, Value>>) {
        if let Some(i) = self.open.iter().position(|g| g.shape.table == shape.table) {
            let g = &self.open[i];
            let repeated = key.as_ref().is_some_and(|k| g.keys.contains(k));
            if g.shape != shape || repeated {
                let g = self.open.remove(i);
                self.emit(g);
            }
        }
        match self.open.iter_mut().find(|g| g.shape.table == shape.table) {
            Some(g) => {
                if let Some(k) = key {
                    g.keys.insert(k);
                }
                g.rows.push(row);
            }
            None => {
                let mut keys = HashSet::new();
                if let Some(k) = key {
                    keys.insert(k);
                }
                self.open.push(Group {
                    shape,
                    rows: vec![row],
                    keys,
                });
            }
        }
    }

    fn flush_table(&mut self, table: &str) {
        if let Some(i) = self.open.iter().position(|g| g.shape.table == table) {
            let g = self.open.remove(i);
            self.emit(g);
        }
    }

    fn flush_all(&mut self) {
        for g in std::mem::take(&mut self.open) {
            self.emit(g);
        }
    }

    fn finish(mut self) -> Vec<Planned<'a>> {
        self.flush_all();
        self.out
    }

    fn emit(&mut self, g: Group<'a>) {
        let width = g.rows.first().map_or(1, Vec::len).max(1);
        let mut rows = g.rows.into_iter().peekable();
        let mut left = rows.len();
        while left > 0 {
            let n = CHUNKS
                .iter()
                .copied()
                .find(|c| *c <= left && c * width <= MAX_PARAMS)
                .unwrap_or(1);
            let mut params = Vec::with_capacity(n * width);
            for _ in 0..n {
                if let Some(r) = rows.next() {
                    params.extend(r);
                }
            }
            left -= n;
            self.out.push(Planned {
                sql: shape_sql(&g.shape, n, width),
                params,
            });
        }
    }
}

fn shape_sql(shape: &Shape, rows: usize, width: usize) -> String {
    let mut cols: Vec<String> = shape.key.iter().chain(&shape.columns).cloned().collect();
    let guarded = shape.kind == GroupKind::Upsert { guarded: true };
    if guarded {
        cols.push("\"version\"".into());
    }
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let ps: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
            format!("({})", ps.join(", "))
        })
        .collect();
    let mut sql = format!(
        "INSERT INTO {} AS eosflow_t ({}) VALUES {}",
        shape.table,
        cols.join(", "),
        values.join(", ")
    );
    if let GroupKind::Upsert { .. } = shape.kind {
        let mut sets: Vec<String> = shape
            .columns
            .iter()
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        if guarded {
            sets.push("\"version\" = EXCLUDED.\"version\"".into());
        }
        sql.push_str(&format!(" ON CONFLICT ({}) ", shape.key.join(", ")));
        if sets.is_empty() {
            sql.push_str("DO NOTHING");
        } else {
            sql.push_str(&format!("DO UPDATE SET {}", sets.join(", ")));
            if guarded {
                sql.push_str(
                    " WHERE eosflow_t.\"version\" IS NULL OR eosflow_t.\"version\" < EXCLUDED.\"version\"",
                );
            }
        }
    }
    sql
}

type PgFut<'a, T> = Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'a>>;

/// Drives the futures together, first polls in order: tokio-postgres sends each request on its
/// first poll, so the statements go out back to back in this order (one round trip for all)
/// and Postgres runs them in this order.
async fn pipeline<T>(mut futs: Vec<PgFut<'_, T>>) -> Vec<Result<T, tokio_postgres::Error>> {
    let mut out: Vec<Option<Result<T, tokio_postgres::Error>>> =
        futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// The session settings every connection of a store gets.
async fn session(client: &Client, options: &StoreOptions) -> Result<(), ProjectionError> {
    let ms = options.idle_in_transaction_timeout.as_millis();
    if ms == 0 {
        return Ok(());
    }
    client
        .batch_execute(&format!("SET idle_in_transaction_session_timeout = {ms}"))
        .await
        .map_err(|e| pg_error("setting idle_in_transaction_session_timeout", &e))
}

/// The coordinates of `letters` as three parallel arrays (`unnest` parameters).
fn dead_letter_columns(letters: &[DeadLetter]) -> (Vec<&str>, Vec<i32>, Vec<i64>) {
    (
        letters.iter().map(|d| d.topic.as_str()).collect(),
        letters.iter().map(|d| d.partition).collect(),
        letters.iter().map(|d| d.offset).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(table: &str, k: i64, v: i64, version: Option<i64>) -> RowOp {
        RowOp::Upsert {
            table: table.into(),
            key: vec![("k".into(), Value::Int(k))],
            columns: vec![("v".into(), Value::Int(v))],
            version,
        }
    }

    #[test]
    fn upserts_into_one_table_become_multi_row_statements_and_repeated_keys_split_them() {
        let ops: Vec<RowOp> = (0..5)
            .map(|i| upsert("t", i, i, None))
            .chain([upsert("t", 0, 9, None)])
            .collect();
        let mut p = Planner::default();
        for op in &ops {
            p.add(op).unwrap();
        }
        let out = p.finish();
        let sizes: Vec<usize> = out.iter().map(|s| s.params.len() / 2).collect();
        assert_eq!(
            sizes,
            vec![4, 1, 1],
            "{:?}",
            out.iter().map(|s| &s.sql).collect::<Vec<_>>()
        );
        assert!(out[0]
            .sql
            .contains("ON CONFLICT (\"k\") DO UPDATE SET \"v\" = EXCLUDED.\"v\""));
    }

    #[test]
    fn a_guarded_upsert_only_overwrites_older_versions() {
        let op = upsert("t", 1, 1, Some(3));
        let mut p = Planner::default();
        p.add(&op).unwrap();
        let out = p.finish();
        assert!(out[0].sql.ends_with(
            "WHERE eosflow_t.\"version\" IS NULL OR eosflow_t.\"version\" < EXCLUDED.\"version\""
        ));
        assert_eq!(
            out[0].params.last().map(|v| v.as_ref()),
            Some(&Value::Int(3))
        );
    }

    #[test]
    fn sql_ops_are_barriers() {
        let ops = vec![
            upsert("t", 1, 1, None),
            RowOp::Sql {
                statement: "SELECT 1".into(),
                params: vec![],
            },
            upsert("t", 2, 2, None),
        ];
        let mut p = Planner::default();
        for op in &ops {
            p.add(op).unwrap();
        }
        assert_eq!(p.finish().len(), 3);
    }
}
