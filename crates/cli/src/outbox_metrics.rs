//! The table of the metrics the outbox router (`eosflow-outbox`, `crates/outbox/src/telemetry.rs`)
//! emits, with their HELP texts, registered when `eosflow outbox` starts. It lives here, beside
//! the command that starts the router; `tests/ops_pack.rs` checks it against the names the
//! router's code emits, so the two cannot drift apart.

use eosflow::telemetry::catalog::{metric, MetricDef, MetricKind, Unit};

use MetricKind::{Counter, Gauge, Histogram};

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
