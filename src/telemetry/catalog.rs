//! The one authoritative list of the metrics eosflow exports: name, kind, unit and the HELP
//! text `/metrics` shows. Each crate that emits metrics keeps one such table ([`FRAMEWORK`]
//! here); [`register`] hands a table to the exporter, which describes it (`# HELP`) once the
//! recorder is installed. Tests check the names used in `ops/` (dashboard, alert rules) and in
//! the emitting code against these tables, so a rename cannot leave an alert watching nothing.

use std::sync::Mutex;

/// The units a metric is described with (re-exported so tables need no `metrics` dependency).
pub use metrics::Unit;

/// The Prometheus type a metric is exported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (resets when the process restarts): `rate()` / `increase()` it.
    Counter,
    /// A current value that goes up and down.
    Gauge,
    /// Observations in buckets: `_bucket`, `_sum` and `_count` series.
    Histogram,
}

/// One exported metric, as operators see it on `/metrics`.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// The Prometheus name (framework metrics start with `eosflow_`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// What one unit of the value is.
    pub unit: Unit,
    /// The `# HELP` line: what the metric means to an operator.
    pub help: &'static str,
}

/// A table entry, for the `const` tables of each crate.
///
/// ```
/// use eosflow::metric_catalog::{metric, MetricDef, MetricKind, Unit};
/// const MINE: &[MetricDef] = &[metric("myapp_things_total", MetricKind::Counter, Unit::Count, "Things done.")];
/// assert_eq!(MINE[0].kind, MetricKind::Counter);
/// ```
pub const fn metric(
    name: &'static str,
    kind: MetricKind,
    unit: Unit,
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind,
        unit,
        help,
    }
}

use MetricKind::{Counter, Gauge, Histogram};

/// Every metric the core library (`eosflow`, `telemetry`) emits.
pub const FRAMEWORK: &[MetricDef] = &[
    metric(
        "eosflow_transactions_committed_total",
        Counter,
        Unit::Count,
        "Kafka transactions committed (one per batch).",
    ),
    metric(
        "eosflow_transactions_aborted_total",
        Counter,
        Unit::Count,
        "Kafka transactions aborted; their batch is processed again.",
    ),
    metric(
        "eosflow_records_committed_total",
        Counter,
        Unit::Count,
        "Input records whose batch committed.",
    ),
    metric(
        "eosflow_batch_records",
        Histogram,
        Unit::Count,
        "Input records per committed batch.",
    ),
    metric(
        "eosflow_batch_seconds",
        Histogram,
        Unit::Seconds,
        "Time from a batch's first record to its commit.",
    ),
    metric(
        "eosflow_records_processed_total",
        Counter,
        Unit::Count,
        "Records of an input topic the handler processed in committed batches.",
    ),
    metric(
        "eosflow_dedup_hits_total",
        Counter,
        Unit::Count,
        "Records skipped because their message id was already processed.",
    ),
    metric(
        "eosflow_dlt_depth_records",
        Gauge,
        Unit::Count,
        "Dead letters waiting in a dead-letter topic (committed, not purged).",
    ),
    metric(
        "eosflow_dlt_oldest_age_seconds",
        Gauge,
        Unit::Seconds,
        "Age of the oldest dead letter waiting in a dead-letter topic (committed, not purged; 0 when empty).",
    ),
    metric(
        "eosflow_dlt_records_total",
        Counter,
        Unit::Count,
        "Records dead-lettered, by dead-letter topic.",
    ),
    metric(
        "eosflow_retries_total",
        Counter,
        Unit::Count,
        "Records sent up a retry ladder, by topic and level.",
    ),
    metric(
        "eosflow_parked_followers_total",
        Counter,
        Unit::Count,
        "Records of a parked key forwarded behind their key's head.",
    ),
    metric(
        "eosflow_parked_overflow_total",
        Counter,
        Unit::Count,
        "Records dead-lettered because too many records already waited behind their key's head.",
    ),
    metric(
        "eosflow_id_conflicts_total",
        Counter,
        Unit::Count,
        "Records that reused a processed message id with another key or value (dead-lettered).",
    ),
    metric(
        "eosflow_restore_records_total",
        Counter,
        Unit::Count,
        "Changelog records replayed into state stores, by partition (every store and table of it).",
    ),
    metric(
        "eosflow_restore_seconds",
        Histogram,
        Unit::Seconds,
        "Duration of a partition's state restore.",
    ),
    metric(
        "eosflow_restore_in_progress",
        Gauge,
        Unit::Count,
        "1 while a state restore runs in this process, else 0.",
    ),
    metric(
        "eosflow_waiting",
        Gauge,
        Unit::Count,
        "Loops (processing threads, outbox routers) that cannot commit until the cluster gives back `on`: partition-leader, in-sync-replicas, txn-coordinator or group-coordinator. /healthz names the partition or call and since when.",
    ),
    metric(
        "eosflow_waits_total",
        Counter,
        Unit::Count,
        "Waits for the cluster started, by what was waited on (`on`, as eosflow_waiting).",
    ),
    metric(
        "eosflow_wait_seconds",
        Histogram,
        Unit::Seconds,
        "How long each ended wait for the cluster lasted (first failure to the next landed commit), by `on`.",
    ),
    metric(
        "eosflow_ready",
        Gauge,
        Unit::Count,
        "1 when /readyz answers 200 (every assigned partition restored), else 0.",
    ),
    metric(
        "eosflow_rebalances_total",
        Counter,
        Unit::Count,
        "Consumer group rebalances, by kind (assign or revoke).",
    ),
    metric(
        "eosflow_query_requests_total",
        Counter,
        Unit::Count,
        "Interactive query requests on /stores, by store and outcome: local (answered from a task open here), standby (from a warm copy, asked for with max_standby_lag), proxied (the owner's answer passed on), unavailable (503: restoring, rebalancing, owner not answering), bad-request, error.",
    ),
    metric(
        "eosflow_standby_lag_records",
        Gauge,
        Unit::Count,
        "Changelog records a standby replica has not applied yet (the partition's end minus what its warm copy holds), by changelog topic and partition.",
    ),
    metric(
        "eosflow_record_cache_hits_total",
        Counter,
        Unit::Count,
        "Reads of a store's committed values answered by the record cache (state.cache_bytes), per processing thread.",
    ),
    metric(
        "eosflow_record_cache_misses_total",
        Counter,
        Unit::Count,
        "Reads of a store's committed values that went to RocksDB (not in the record cache), per processing thread.",
    ),
    metric(
        "eosflow_record_cache_evictions_total",
        Counter,
        Unit::Count,
        "Record cache entries dropped to stay within state.cache_bytes, per processing thread.",
    ),
    metric(
        "eosflow_record_cache_bytes",
        Gauge,
        Unit::Bytes,
        "Bytes the record cache holds now (keys, values and per-entry overhead), per processing thread.",
    ),
    metric(
        "eosflow_orphaned_changelogs",
        Gauge,
        Unit::Count,
        "Changelog topics of this application that no store of its topology owns (a store renamed or removed: the new store started empty), found at start; each is named in a WARN with the command to delete it.",
    ),
    metric(
        "eosflow_standby_partitions",
        Gauge,
        Unit::Count,
        "Partitions this instance keeps warm as a standby replica (processor.standby_replicas).",
    ),
    metric(
        "eosflow_consumer_lag_records",
        Gauge,
        Unit::Count,
        "Records between a partition's high watermark and the consumer's position.",
    ),
    metric(
        "eosflow_records_produced_total",
        Counter,
        Unit::Count,
        "Output records produced in committed transactions, by topic.",
    ),
    metric(
        "eosflow_records_consumed_total",
        Counter,
        Unit::Count,
        "Records consumed, by topic and partition.",
    ),
    metric(
        "eosflow_commit_seconds",
        Histogram,
        Unit::Seconds,
        "Time from a transaction's begin to its commit returning.",
    ),
    metric(
        "eosflow_end_to_end_latency_seconds",
        Histogram,
        Unit::Seconds,
        "Time from an input record's Kafka timestamp to the commit that made its effects visible, per committed input record.",
    ),
    metric(
        "eosflow_consumer_errors_total",
        Counter,
        Unit::Count,
        "Errors the Kafka consumer reported.",
    ),
    metric(
        "eosflow_seek_failures_total",
        Counter,
        Unit::Count,
        "Seeks of a partition that failed; the partition stays paused and nothing past its records is committed until a seek succeeds.",
    ),
    metric(
        "eosflow_records_isolated_total",
        Counter,
        Unit::Count,
        "Unwritable records isolated from their batch and dead-lettered.",
    ),
    metric(
        "eosflow_dead_letters_reduced_total",
        Counter,
        Unit::Count,
        "Dead letters cut down to fit (stage truncated or pointer).",
    ),
    metric(
        "eosflow_records_skipped_unwritable_total",
        Counter,
        Unit::Count,
        "Records skipped because not even a pointer could be dead-lettered (see the ERROR log).",
    ),
    metric(
        "eosflow_producer_recoveries_total",
        Counter,
        Unit::Count,
        "Transactional producers recreated in place, by cause (epoch-bumped = fenced).",
    ),
    metric(
        "eosflow_commit_outcome_resolved_total",
        Counter,
        Unit::Count,
        "Commits with an unknown outcome resolved from the group's offsets, by outcome.",
    ),
    metric(
        "eosflow_batches_closed_early_total",
        Counter,
        Unit::Count,
        "Batches closed early at half of transaction.timeout.ms.",
    ),
    metric(
        "eosflow_slow_handler_calls_total",
        Counter,
        Unit::Count,
        "Handler calls that outlived half the transaction timeout in a failed batch.",
    ),
    metric(
        "eosflow_state_expired_total",
        Counter,
        Unit::Count,
        "Store entries expired by their time to live, by store (a named store's TTL; dedup: ids past state.dedup_retention_secs); a batch that aborts and is redone counts its expiry again.",
    ),
    metric(
        "eosflow_timers_fired_total",
        Counter,
        Unit::Count,
        "Durable timers fired inside a batch, by kind (event-time, wall-clock); a batch that aborts and is redone counts its timers again.",
    ),
    metric(
        "eosflow_timers_failed_total",
        Counter,
        Unit::Count,
        "Timer callbacks that failed or whose outputs were refused; each such timer was dead-lettered to the first input's DLT, by kind.",
    ),
    metric(
        "eosflow_repartition_purges_total",
        Counter,
        Unit::Count,
        "DeleteRecords calls on a repartition topic partition once its reader committed past the records, by topic and outcome (deleted, failed).",
    ),
    metric(
        "eosflow_watermarks_sent_total",
        Counter,
        Unit::Count,
        "Watermark-only records an upstream task broadcast to every partition of the repartition topics it writes (its stream time moved, or it became idle).",
    ),
    metric(
        "eosflow_table_records_skipped_total",
        Counter,
        Unit::Count,
        "Records of a table's topic without a key, skipped (a table row needs one), and records of a versioned table older than its history or without a timestamp, by table.",
    ),
    metric(
        "eosflow_join_dropped_records_total",
        Counter,
        Unit::Count,
        "Stream records a stream-table or stream-global-table join produced no result for, by node and reason: no-key, no-value (a stream tombstone), no-table-value (an inner join whose key the table lacks at that point), no-global-value (an inner global join without a row), no-global-key (an inner global join whose key extractor returned none), history-too-short (a stream record older than a versioned table's history: dropped by inner and left joins).",
    ),
    metric(
        "eosflow_global_table_lag_records",
        Gauge,
        Unit::Count,
        "Records a global table is behind the end of its topic, summed over its partitions, by table; refreshed about every second while it bootstraps and while it runs.",
    ),
    metric(
        "eosflow_global_table_bootstrap_seconds",
        Gauge,
        Unit::Seconds,
        "How long the last bootstrap of a global table took (reading its topic from the checkpoint to the end before the instance joined its group), by table.",
    ),
    metric(
        "eosflow_global_table_bootstrap_records",
        Gauge,
        Unit::Count,
        "Records the last bootstrap of a global table read (from its checkpoint on: a restart reads only what the topic gained), by table.",
    ),
    metric(
        "eosflow_global_table_skipped_records_total",
        Counter,
        Unit::Count,
        "Records of a global table's topic skipped with an ERROR log, by table and reason: no-key, undecodable (the table's serdes cannot read the key or value). A global table has no DLT.",
    ),
    metric(
        "eosflow_late_records_total",
        Counter,
        Unit::Count,
        "Records a windowed aggregate could not count because stream time had passed the end plus grace of every window they belong to; each went to the input's DLT (class late-record) or the node's late-record sink, by node.",
    ),
    metric(
        "eosflow_projection_batch_seconds",
        Histogram,
        Unit::Seconds,
        "Time to apply and commit one projection batch (row operations and offsets in one Postgres transaction), by projection.",
    ),
    metric(
        "eosflow_projection_records_applied_total",
        Counter,
        Unit::Count,
        "Records whose row operations a projection committed to Postgres, by projection.",
    ),
    metric(
        "eosflow_projection_retries_total",
        Counter,
        Unit::Count,
        "Projection batches or claims that failed (Postgres unreachable, a deadlock) and are tried again, by projection.",
    ),
    metric(
        "eosflow_projection_fenced_total",
        Counter,
        Unit::Count,
        "Times a projection instance found its partitions claimed by a newer owner, dropped its batch and rejoined.",
    ),
    metric(
        "eosflow_projection_dead_letters_total",
        Counter,
        Unit::Count,
        "Records a projection sent to their topic's DLT (rejected by the projection function or by Postgres).",
    ),
    metric(
        "eosflow_projection_unpublished_dead_letters_total",
        Counter,
        Unit::Count,
        "Dead letters kept in eosflow_dead_letters that could not be published to the DLT (look there: published_at IS NULL).",
    ),
    metric(
        "eosflow_kafka_calls_stuck_total",
        Counter,
        Unit::Count,
        "Blocking Kafka calls that missed their deadline, by librdkafka call.",
    ),
    metric(
        "eosflow_restore_broker_waits_total",
        Counter,
        Unit::Count,
        "Changelog restore attempts that could not reach the broker, by partition.",
    ),
];

static REGISTERED: Mutex<Vec<&'static [MetricDef]>> = Mutex::new(Vec::new());

/// Adds `table` to what `/metrics` describes: now if the recorder is installed, and again when
/// one is installed later. Call it once at a component's start with the component's table
/// (an application's own: `eosflow::metric_catalog::register(METRICS)`).
///
/// ```
/// use eosflow::metric_catalog::{metric, register, MetricDef, MetricKind, Unit};
///
/// const METRICS: &[MetricDef] = &[metric("myapp_runs_total", MetricKind::Counter, Unit::Count, "Runs.")];
/// register(METRICS); // harmless before a recorder exists: described again at install
/// register(METRICS); // and a table registered twice is described once more, not listed twice
/// ```
pub fn register(table: &'static [MetricDef]) {
    if let Ok(mut tables) = REGISTERED.lock() {
        if !tables.iter().any(|t| std::ptr::eq(*t, table)) {
            tables.push(table);
        }
    }
    describe(table);
}

/// Describes every registered table and [`FRAMEWORK`] to the installed recorder.
pub fn describe_registered() {
    describe(FRAMEWORK);
    let tables = REGISTERED.lock().map(|t| t.clone()).unwrap_or_default();
    for table in tables {
        describe(table);
    }
}

/// Sends `table`'s HELP texts and units to the current global recorder.
pub fn describe(table: &[MetricDef]) {
    for m in table {
        match m.kind {
            Counter => metrics::describe_counter!(m.name, m.unit, m.help),
            Gauge => metrics::describe_gauge!(m.name, m.unit, m.help),
            Histogram => metrics::describe_histogram!(m.name, m.unit, m.help),
        }
    }
}
