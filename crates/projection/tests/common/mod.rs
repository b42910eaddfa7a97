//! Shared test support: the real Postgres of `dev/stack`, unique names, batch builders.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use eosflow_projection::{Batch, PartitionBatch, ProjectionStore, Record, RowOp};

/// `EOSFLOW_POSTGRES_URL` (`eval "$(dev/stack env)"`); the tests fail without it rather than
/// pass without having run.
pub fn pg_url() -> String {
    std::env::var("EOSFLOW_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "EOSFLOW_POSTGRES_URL is not set: these tests need the dev stack's Postgres \
             (eval \"$(dev/stack env)\")"
        )
    })
}

/// A name no other test or earlier run uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!(
        "{prefix}_{}_{:x}_{}",
        std::process::id(),
        nanos % 0xffff_ffff_ffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plain client for setting up tables and reading them back.
pub async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .expect("connecting to EOSFLOW_POSTGRES_URL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A store for projection `name`, with the bookkeeping schema in place.
pub async fn store(name: &str) -> ProjectionStore {
    let s = ProjectionStore::connect(&pg_url(), name)
        .await
        .expect("connecting the store");
    s.ensure_schema().await.expect("ensure_schema");
    s
}

/// A one-partition batch.
pub fn batch(epoch: i64, topic: &str, partition: i32, records: Vec<Record>) -> Batch {
    Batch {
        epoch,
        partitions: vec![PartitionBatch {
            topic: topic.into(),
            partition,
            records,
        }],
    }
}

/// A record without message id.
pub fn rec(offset: i64, ops: Vec<RowOp>) -> Record {
    Record {
        offset,
        message_id: None,
        ops,
    }
}

/// `SELECT count(*)` of a table.
pub async fn count(c: &tokio_postgres::Client, table: &str) -> i64 {
    c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
        .get(0)
}
