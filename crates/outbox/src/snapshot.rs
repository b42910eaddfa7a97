//! The initial snapshot: rows already in the outbox table when the router first starts are
//! published exactly once, with no gap and no duplicate against what the slot streams.
//!
//! The slot is created on a replication session with `EXPORT_SNAPSHOT`: the exported snapshot
//! S sees exactly the transactions that committed before the slot's consistent point C, and
//! the slot streams exactly those that commit after it. S is imported on an ordinary
//! connection (`REPEATABLE READ`, `SET TRANSACTION SNAPSHOT`) and the table is read through one
//! cursor in chunks of `outbox.batch_size` rows ordered by `(outbox.snapshot_order_by, id)`
//! (default order column: `occurred_at`), so each aggregate's rows go out in the order they
//! were written when that column follows writes. Each chunk is published in one Kafka
//! transaction with the checkpoint `{lsn: C, snapshot: {S as pg_snapshot text, last order
//! value and id}}`, so a crash mid-snapshot resumes after the last committed chunk, in the
//! same order. The exported snapshot dies with
//! its session; a resumed snapshot reads with a fresh one and keeps only rows whose inserting
//! transaction S sees (`pg_visible_in_snapshot(xmin, S)`), which is the same set for rows
//! that are only inserted (an outbox row updated after C is not re-read by a resumed snapshot).
//! When the last chunk is in, a checkpoint without snapshot progress is written and streaming
//! starts after C.

use serde::{Deserialize, Serialize};

use super::avro::PayloadEncoder;
use super::publish::{lsn_text, parse_lsn, ClusterId, LsnCheckpoint, Publisher};
use super::router::EventRouter;
use super::{pg_err, quote_ident, quoted_table, OutboxError};
use eosflow::config::{Config, OutboxConfig};

/// How far the snapshot got: stored with the checkpoint while it runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SnapshotProgress {
    /// The exported snapshot as `pg_snapshot` text (`xmin:xmax:xip,…`): the rows it sees are
    /// the snapshot's, every later one comes from the slot.
    pub snapshot: String,
    /// The id of the last row published (ids are read in order); `None` before the first.
    pub after_id: Option<String>,
    /// Rows published by the snapshot so far.
    pub rows: u64,
    /// The served table being read (`outbox.table` when absent): several tables are read one
    /// after the other, in configuration order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The column rows are read in order of before the id (`outbox.snapshot_order_by` when the
    /// table's snapshot started); absent: id order (also in progress of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_by: Option<String>,
    /// The `order_by` value of the last row published, as Postgres prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_order: Option<String>,
}

/// Creates `slot` on a replication session with an exported snapshot (dropping a slot left by
/// an earlier attempt: with nothing stored, nothing was published from it), imports the
/// snapshot on a new connection, and stores the start of the snapshot in Kafka. Returns the
/// stored checkpoint and the connection whose transaction holds the imported snapshot.
pub async fn create_slot(
    config: &Config,
    pg: &tokio_postgres::Client,
    publisher: &mut Publisher,
    mut repl: pgwire_replication::ReplicationClient,
    cluster: &ClusterId,
) -> Result<(LsnCheckpoint, tokio_postgres::Client), OutboxError> {
    let o = &config.outbox;
    pg.batch_execute(&super::cdc::drop_released_slot_sql(&o.slot))
        .await
        .map_err(pg_err(
            "dropping the slot of an attempt that published nothing",
        ))?;
    let rows = repl
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT",
            quote_ident(&o.slot)
        ))
        .await
        .map_err(|e| OutboxError::Replication(format!("creating the slot: {e}")))?;
    let field = |i: usize| -> Option<String> {
        rows.first()?
            .get(i)?
            .as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let (Some(point), Some(exported)) = (field(1).and_then(|p| parse_lsn(&p)), field(2)) else {
        return Err(OutboxError::Replication(format!(
            "CREATE_REPLICATION_SLOT answered {rows:?}"
        )));
    };
    let snap_pg = super::connect(config.postgres.url.expose()).await?;
    snap_pg
        .batch_execute(&format!(
            "begin isolation level repeatable read read only; set transaction snapshot '{}'",
            exported.replace('\'', "''")
        ))
        .await
        .map_err(pg_err("importing the slot's snapshot"))?;
    let snapshot: String = snap_pg
        .query_one("select pg_current_snapshot()::text", &[])
        .await
        .map_err(pg_err("reading the imported snapshot"))?
        .get(0);
    // The snapshot is imported: the exporting session (gated, never started) can end.
    drop(repl);
    let progress = SnapshotProgress {
        snapshot,
        after_id: None,
        rows: 0,
        table: None,
        order_by: None,
        after_order: None,
    };
    publisher.set_snapshot(Some(progress.clone()));
    publisher.publish(&[], point).await?;
    tracing::info!(slot = %o.slot, consistent_point = %lsn_text(point), snapshot = %progress.snapshot, "created the slot with an exported snapshot; publishing the rows already in the table");
    Ok((
        LsnCheckpoint {
            slot: o.slot.clone(),
            lsn: point,
            lsn_text: lsn_text(point),
            system_id: Some(cluster.system_id.clone()),
            timeline: Some(cluster.timeline),
            snapshot: Some(progress),
            partial: None,
        },
        snap_pg,
    ))
}

/// Publishes the table's rows that the snapshot in `progress` sees, after `progress.after_id`,
/// in chunks each committed with its progress at LSN `point`; then clears the progress.
/// Returns the rows this run wrote to their routed topics (dead letters not counted).
/// `imported`: the connection holding the exported snapshot (first run), else a fresh
/// connection reads and filters by the snapshot's visibility.
pub async fn run(
    config: &Config,
    publisher: &mut Publisher,
    point: u64,
    mut progress: SnapshotProgress,
    imported: Option<tokio_postgres::Client>,
) -> Result<u64, OutboxError> {
    let pg = match imported {
        Some(c) => c,
        None => {
            tracing::info!(table = ?progress.table, after_id = ?progress.after_id, rows = progress.rows, "resuming the snapshot after the last committed chunk");
            let pg = super::connect(config.postgres.url.expose()).await?;
            // The cursor lives in a transaction; the stored snapshot decides what is read.
            pg.batch_execute("begin isolation level repeatable read read only")
                .await
                .map_err(pg_err("starting the resumed snapshot's transaction"))?;
            pg
        }
    };
    let served = config.outbox.served();
    let at = match &progress.table {
        None => 0,
        Some(t) => served.iter().position(|s| &s.table == t).ok_or_else(|| {
            OutboxError::Config(format!(
                "the interrupted snapshot was of table {t}, which is no longer served \
                 (outbox.table / outbox.tables): serve it until the snapshot completes"
            ))
        })?,
    };
    let mut encoder = PayloadEncoder::from_config(config)?;
    let started = std::time::Instant::now();
    let mut log = ProgressLog {
        started,
        last: started,
        first: progress.rows,
    };
    let mut routed = 0u64;
    for (i, t) in served.iter().enumerate().skip(at) {
        if i > at {
            progress.table = Some(t.table.clone());
            progress.after_id = None;
            progress.after_order = None;
        }
        routed += publish_table(
            &pg,
            t,
            publisher,
            point,
            &mut progress,
            &mut encoder,
            &mut log,
        )
        .await?;
    }
    let _ = pg.batch_execute("commit").await;
    publisher.set_snapshot(None);
    publisher.publish(&[], point).await?;
    let secs = started.elapsed().as_secs_f64().max(0.001);
    tracing::info!(
        rows = progress.rows,
        rows_per_s = ((progress.rows - log.first) as f64 / secs) as u64,
        lsn = %lsn_text(point),
        "snapshot complete; streaming from the slot's consistent point"
    );
    Ok(routed)
}

/// When the snapshot started and last logged its progress.
struct ProgressLog {
    started: std::time::Instant,
    last: std::time::Instant,
    /// Rows published before this run (a resumed snapshot).
    first: u64,
}

/// The column the snapshot of `o` orders rows by, before the id: `outbox.snapshot_order_by`,
/// else the `occurred_at` column; `None` when that is the id column itself (id order).
pub fn order_column(o: &OutboxConfig) -> Option<&str> {
    let c = if o.snapshot_order_by.is_empty() {
        o.column_occurred_at.as_str()
    } else {
        o.snapshot_order_by.as_str()
    };
    (c != o.column_id).then_some(c)
}

/// A SQL string literal of `s`.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `(NOT NULL, type)` of `column` of `o`'s table, `None` when there is no such column.
async fn column_type(
    pg: &tokio_postgres::Client,
    o: &OutboxConfig,
    column: &str,
) -> Result<Option<(bool, String)>, OutboxError> {
    Ok(pg
        .query_opt(
            "select attnotnull, format_type(atttypid, atttypmod) from pg_attribute \
             where attrelid = $1::text::regclass and attname = $2 and attnum > 0 \
             and not attisdropped",
            &[&quoted_table(o), &column],
        )
        .await
        .map_err(pg_err("reading a column's type"))?
        .map(|r| (r.get(0), r.get(1))))
}

/// Publishes the rows of one served table `o` the snapshot sees after `progress`'s position,
/// chunk by chunk, in `(order column, id)` order ([`order_column`]): each aggregate's rows in
/// the order they were written when the order column follows writes (a sequence, a commit-time
/// clock). One cursor sorts the table once; a resumed snapshot restarts it after the stored
/// position. Returns the rows written to their routed topics.
async fn publish_table(
    pg: &tokio_postgres::Client,
    o: &OutboxConfig,
    publisher: &mut Publisher,
    point: u64,
    progress: &mut SnapshotProgress,
    encoder: &mut Option<PayloadEncoder>,
    log: &mut ProgressLog,
) -> Result<u64, OutboxError> {
    let columns = super::table_columns(pg, o).await?;
    let Some((_, id_type)) = column_type(pg, o, &o.column_id).await? else {
        return Err(OutboxError::Config(format!(
            "outbox.column_id: {} has no column {:?}",
            o.table, o.column_id
        )));
    };
    // A snapshot resumed keeps the order it started with (`order_by` absent: the id order of
    // older versions); a new one takes the configured order.
    let order = if progress.after_id.is_some() {
        progress.order_by.clone()
    } else {
        order_column(o).map(str::to_string)
    };
    let order_type = match &order {
        None => None,
        Some(c) => match column_type(pg, o, c).await? {
            Some((true, ty)) => Some(ty),
            found => {
                return Err(OutboxError::Config(format!(
                    "outbox.snapshot_order_by: {} column {c:?} {}: the initial snapshot orders \
                     each aggregate's rows by it (then by id), so it must be NOT NULL; name a \
                     NOT NULL column the writer fills in write order (a sequence, \
                     occurred_at), or the id column for id order",
                    o.table,
                    if found.is_some() {
                        "may be NULL"
                    } else {
                        "does not exist"
                    }
                )))
            }
        },
    };
    progress.order_by = order.clone();
    let position = |c: &str| columns.iter().position(|x| x == c);
    let (Some(id_at), order_at) = (position(&o.column_id), order.as_deref().map(position)) else {
        return Err(OutboxError::Config(format!(
            "outbox.column_id: {} has no column {:?}",
            o.table, o.column_id
        )));
    };
    // Qualified: an unqualified name in ORDER BY would be the select list's text of the column
    // (`seq::text` sorts "10" before "9").
    let id = format!("src.{}", quote_ident(&o.column_id));
    let keys = match &order {
        Some(c) => format!("src.{}, {id}", quote_ident(c)),
        None => id.clone(),
    };
    let bound = match (
        &progress.after_id,
        &order,
        &order_type,
        &progress.after_order,
    ) {
        (None, ..) => "true".to_string(),
        (Some(after), Some(_), Some(ty), Some(after_order)) => format!(
            "({keys}) > ({}::{ty}, {}::{id_type})",
            literal(after_order),
            literal(after)
        ),
        (Some(after), ..) => format!("{id} > {}::{id_type}", literal(after)),
    };
    // xmin as an xid8 (its epoch from the current xid: every live xmin is within 2^31 of it);
    // frozen/bootstrap xids (< 3) are visible to every snapshot.
    let cursor = "eosflow_outbox_snapshot";
    let declare = format!(
        "declare {cursor} no scroll cursor for \
         with now as (select pg_snapshot_xmax(pg_current_snapshot())::text::bigint as x) \
         select {cols} from {table} as src, now \
         where {bound} \
         and (src.xmin::text::bigint < 3 or pg_visible_in_snapshot((( \
              ((now.x >> 32) - case when src.xmin::text::bigint > (now.x & 4294967295) then 1 else 0 end) \
              << 32) + src.xmin::text::bigint)::text::xid8, {snapshot}::pg_snapshot)) \
         order by {keys}",
        cols = columns
            .iter()
            .map(|c| format!("src.{}::text", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", "),
        table = quoted_table(o),
        snapshot = literal(&progress.snapshot),
    );
    pg.batch_execute(&declare)
        .await
        .map_err(pg_err("opening the snapshot's cursor"))?;
    let fetch = format!("fetch {} from {cursor}", o.batch_size);
    let mut router = EventRouter::new(o);
    router.set_binary_payload(super::payload_is_bytea(pg, o).await?);
    router.set_column_types(super::column_type_oids(pg, o).await?);
    let mut routed = 0u64;
    loop {
        let rows: Vec<super::router::Row> = pg
            .simple_query(&fetch)
            .await
            .map_err(pg_err("reading a snapshot chunk"))?
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                    columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (c.clone(), r.get(i).map(str::to_string)))
                        .collect(),
                ),
                _ => None,
            })
            .collect();
        let Some(last) = rows.last() else {
            break;
        };
        let value = |at: usize| last.get(&columns[at]).cloned().flatten();
        let Some(last_id) = value(id_at) else {
            return Err(OutboxError::Config(format!(
                "outbox.column_id {} is NULL in {}",
                o.column_id, o.table
            )));
        };
        progress.after_order = order_at.flatten().and_then(value);
        progress.after_id = Some(last_id);
        let mut records: Vec<_> = rows.iter().map(|r| router.route(r)).collect();
        if let Some(enc) = encoder.as_mut() {
            enc.encode_all(&mut records).await?;
        }
        progress.rows += records.len() as u64;
        publisher.set_snapshot(Some(progress.clone()));
        let published = publisher.publish(&records, point).await?;
        super::telemetry::routed(published.routed, "snapshot");
        routed += published.routed as u64;
        super::telemetry::snapshot_rows(records.len());
        if log.last.elapsed().as_secs() >= 5 {
            let secs = log.started.elapsed().as_secs_f64().max(0.001);
            tracing::info!(
                table = %o.table,
                rows = progress.rows,
                rows_per_s = ((progress.rows - log.first) as f64 / secs) as u64,
                "snapshot in progress"
            );
            log.last = std::time::Instant::now();
        }
    }
    pg.batch_execute(&format!("close {cursor}"))
        .await
        .map_err(pg_err("closing the snapshot's cursor"))?;
    Ok(routed)
}
