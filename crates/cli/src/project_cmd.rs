//! `eosflow project`: a built-in projection into Postgres, exactly once (docs/projections.md).
//!
//! Each record's JSON value is upserted into a table by the record's key (`key text PRIMARY
//! KEY, doc jsonb`), a tombstone deletes the row, a value that is not JSON goes to
//! `<topic>.DLT`. It is the JDBC sinks' upsert mode with the offsets in the same transaction;
//! applications with their own row shapes use `eosflow::projection::Projector` as a library.

use std::time::Duration;

use anyhow::{Context as _, Result};
use eosflow::kafka::KafkaClients;
use eosflow::projection::{Projected, Projector, ProjectorOptions, RowOp, Value};
use eosflow::record::{ProcessError, Record};
use eosflow::Config;

/// `eosflow project` arguments.
#[derive(clap::Args)]
pub(crate) struct ProjectArgs {
    /// The projection's name: its rows in the bookkeeping tables and its consumer group.
    #[arg(long)]
    name: String,
    /// The topics read (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    topics: Vec<String>,
    /// The table written, created beforehand: `CREATE TABLE t (key text PRIMARY KEY, doc jsonb
    /// NOT NULL)`.
    #[arg(long)]
    table: String,
    /// The Postgres URL (`sslmode`/`sslrootcert` as libpq reads them).
    #[arg(long, env = "EOSFLOW_POSTGRES_URL")]
    postgres_url: String,
    /// The most records one transaction applies.
    #[arg(long, default_value_t = 1000)]
    max_batch_records: usize,
}

/// The projection: the value as JSON under the record's key.
fn upsert_json(table: String) -> impl Fn(&Record<'_>) -> Result<Projected, ProcessError> {
    move |r: &Record<'_>| {
        let key = std::str::from_utf8(r.key.unwrap_or_default())
            .map_err(|e| ProcessError::permanent(format!("the key is not UTF-8: {e}")))?;
        if key.is_empty() {
            return Err(ProcessError::permanent("a record without a key has no row"));
        }
        let key = vec![("key".to_string(), Value::from(key))];
        let op = match r.value {
            None => RowOp::Delete {
                table: table.clone(),
                key,
                version: None,
            },
            Some(v) => {
                let doc: serde_json::Value = serde_json::from_slice(v).map_err(|e| {
                    ProcessError::permanent(format!(
                        "the value is not JSON ({e}): produce JSON or leave the topic out"
                    ))
                })?;
                RowOp::Upsert {
                    table: table.clone(),
                    key,
                    columns: vec![("doc".to_string(), Value::Json(doc))],
                    version: None,
                }
            }
        };
        Ok(Projected::ops(vec![op]))
    }
}

/// Runs the projection until SIGINT/SIGTERM.
pub(crate) fn cmd(config: &Config, args: ProjectArgs) -> Result<std::process::ExitCode> {
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let mut opts = ProjectorOptions::new(&args.name, &topics, &args.postgres_url);
    opts.max_batch_records = args.max_batch_records;
    // `/metrics` (the `eosflow_projection_*` series), `/healthz`, `/readyz` on `metrics.listen`.
    let health = std::sync::Arc::new(eosflow::internals::telemetry::Health::new(
        Duration::from_millis(config.processor.stuck_after_ms),
    ));
    let _endpoints =
        eosflow::internals::runner::serve_endpoints(config, health).context("serving /metrics")?;
    let clients = KafkaClients::new(config.kafka.clone());
    let handle = Projector::start(clients, opts, upsert_json(args.table.clone()))
        .context("starting the projection")?;
    eosflow::internals::runner::wait_for_signal_or_until(|| handle.is_finished())
        .context("waiting for a signal")?;
    let summary = handle
        .stop()
        .context("the projection stopped with an error")?;
    tracing::info!(?summary, "projection stopped");
    println!(
        "applied={} replayed={} duplicates={} dead_lettered={} batches={} claims={} fenced={}",
        summary.applied,
        summary.replayed,
        summary.duplicates,
        summary.dead_lettered,
        summary.batches,
        summary.claims,
        summary.fenced
    );
    Ok(std::process::ExitCode::SUCCESS)
}
