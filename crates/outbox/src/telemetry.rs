//! Every metric the outbox router emits, one function each (names and labels in one place),
//! and [`METRICS`], their table with HELP texts, registered when `eosflow outbox` starts.
//! `tests/ops_pack.rs` checks the table against the names emitted here, so the two cannot
//! drift apart.

use std::time::Duration;

use eosflow::internals::telemetry::catalog::{metric, MetricDef, MetricKind, Unit};
use MetricKind::{Counter, Gauge, Histogram};

/// Rows published to Kafka in a committed transaction.
pub fn routed(rows: usize, mode: &'static str) {
    metrics::counter!("eosflow_outbox_rows_routed_total", "mode" => mode).increment(rows as u64);
}

/// A Kafka transaction of the router committed after waiting `commit_to_kafka` since the
/// oldest Postgres commit in it.
pub fn committed(rows: usize, commit_to_kafka: Duration) {
    metrics::counter!("eosflow_outbox_transactions_committed_total").increment(1);
    metrics::histogram!("eosflow_outbox_batch_rows").record(rows as f64);
    metrics::histogram!("eosflow_outbox_commit_to_kafka_seconds")
        .record(commit_to_kafka.as_secs_f64());
}

/// Replication lag: WAL bytes the server has past our confirmed LSN, and the age of the
/// newest commit we confirmed.
pub fn replication_lag(bytes: u64, seconds: f64) {
    metrics::gauge!("eosflow_outbox_replication_lag_bytes").set(bytes as f64);
    metrics::gauge!("eosflow_outbox_replication_lag_seconds").set(seconds);
}

/// An UPDATE, DELETE or TRUNCATE on the outbox table was ignored (only INSERTs are routed).
pub fn ignored(kind: &'static str, n: u64) {
    metrics::counter!("eosflow_outbox_changes_ignored_total", "kind" => kind).increment(n);
}

/// A transaction at or below the committed LSN was skipped (replayed after a restart).
pub fn skipped_replayed(rows: usize) {
    metrics::counter!("eosflow_outbox_replayed_rows_skipped_total").increment(rows as u64);
}

/// A heartbeat was written to the WAL.
pub fn heartbeat() {
    metrics::counter!("eosflow_outbox_heartbeats_total").increment(1);
}

/// Old rows were pruned.
pub fn pruned(rows: u64) {
    metrics::counter!("eosflow_outbox_rows_pruned_total").increment(rows);
}

/// The router lost its Postgres session and reconnects.
pub fn reconnect() {
    metrics::counter!("eosflow_outbox_reconnects_total").increment(1);
}

/// What `payload_format = "avro"` did with one row's payload.
pub fn payload(outcome: &super::avro::Outcome) {
    let kind = match outcome {
        super::avro::Outcome::Avro => "avro",
        super::avro::Outcome::Json => "json",
        super::avro::Outcome::Prebuilt => "prebuilt",
        super::avro::Outcome::DeadLettered(_) => "dead_lettered",
    };
    metrics::counter!("eosflow_outbox_payloads_total", "format" => kind).increment(1);
}

/// A row that cannot be written (`reason`: `oversize` or `unwritable`) went to the outbox's
/// dead-letter topic instead of blocking every later row.
pub fn dead_lettered(reason: &'static str) {
    metrics::counter!("eosflow_outbox_dead_lettered_total", "reason" => reason).increment(1);
}

/// Rows published by the initial snapshot (progress of a snapshot that is running).
pub fn snapshot_rows(rows: usize) {
    metrics::counter!("eosflow_outbox_snapshot_rows_total").increment(rows as u64);
}

/// Every metric the outbox router emits.
pub const METRICS: &[MetricDef] = &[
    metric(
        "eosflow_outbox_rows_routed_total",
        Counter,
        Unit::Count,
        "Outbox rows published to Kafka in committed transactions, by mode (cdc or poll).",
    ),
    metric(
        "eosflow_outbox_transactions_committed_total",
        Counter,
        Unit::Count,
        "Kafka transactions the router committed.",
    ),
    metric(
        "eosflow_outbox_batch_rows",
        Histogram,
        Unit::Count,
        "Rows per router transaction.",
    ),
    metric(
        "eosflow_outbox_commit_to_kafka_seconds",
        Histogram,
        Unit::Seconds,
        "Time from the oldest Postgres commit in a batch to its Kafka commit.",
    ),
    metric(
        "eosflow_outbox_replication_lag_bytes",
        Gauge,
        Unit::Bytes,
        "WAL bytes the server holds past the slot's confirmed LSN (slot lag).",
    ),
    metric(
        "eosflow_outbox_replication_lag_seconds",
        Gauge,
        Unit::Seconds,
        "Age of the newest Postgres commit the router confirmed.",
    ),
    metric(
        "eosflow_outbox_changes_ignored_total",
        Counter,
        Unit::Count,
        "UPDATE, DELETE or TRUNCATE changes on the outbox table ignored, by kind.",
    ),
    metric(
        "eosflow_outbox_replayed_rows_skipped_total",
        Counter,
        Unit::Count,
        "Rows skipped on reconnect because Kafka already had them.",
    ),
    metric(
        "eosflow_outbox_heartbeats_total",
        Counter,
        Unit::Count,
        "Heartbeats that keep the slot's LSN moving on a quiet database.",
    ),
    metric(
        "eosflow_outbox_rows_pruned_total",
        Counter,
        Unit::Count,
        "Old outbox rows pruned.",
    ),
    metric(
        "eosflow_outbox_reconnects_total",
        Counter,
        Unit::Count,
        "Postgres sessions lost and reconnected.",
    ),
    metric(
        "eosflow_outbox_payloads_total",
        Counter,
        Unit::Count,
        "Row payloads by what payload_format avro did (avro, json, dead_lettered).",
    ),
    metric(
        "eosflow_outbox_dead_lettered_total",
        Counter,
        Unit::Count,
        "Rows sent to the outbox's dead-letter topic, by reason.",
    ),
    metric(
        "eosflow_outbox_snapshot_rows_total",
        Counter,
        Unit::Count,
        "Rows published by the initial snapshot.",
    ),
];
