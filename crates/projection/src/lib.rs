//! Exactly-once projections into Postgres: a batch of row operations derived from Kafka
//! records and the batch's input offsets are committed in **one** Postgres transaction, so a
//! crash anywhere replays nothing twice (issue 51).
//!
//! The store keeps its own bookkeeping beside the user's tables:
//!
//! - `eosflow_offsets(projection, topic, partition, next_offset, epoch, updated_at)`: where each
//!   partition resumes, and which claim (epoch) owns it. On assignment the consumer loop calls
//!   [`ProjectionStore::open`] and seeks to the returned positions instead of Kafka's committed
//!   offsets.
//! - `eosflow_inbox(projection, message_id)`: message ids already applied, for records that
//!   carry one ([`Record::message_id`]).
//!
//! Every [`ProjectionStore::apply`] locks its partitions' offset rows, checks that they are
//! still claimed by the batch's epoch (a zombie whose partitions moved to a newer claim gets
//! [`ProjectionError::Fenced`] and commits nothing), skips records below the stored positions
//! (replays) and already-seen message ids, applies the rest (multi-row upserts and inserts,
//! prepared once per statement shape and pipelined on the connection), advances the positions
//! and commits. A record that fails permanently (a constraint, a bad value, an unknown table)
//! is rolled back alone to a savepoint and reported in [`Applied::dead_lettered`]: the rest of
//! the batch commits and the partition never stalls. A transient failure (serialization
//! failure, deadlock, a lost connection, a Postgres restart) commits nothing and is reported
//! as [`ProjectionError::Transient`]; retrying the same batch is always safe, even when the
//! connection dropped during `COMMIT`, because the stored positions say what committed.
//!
//! ```no_run
//! use eosflow_projection::{Batch, PartitionBatch, ProjectionStore, Record, RowOp, Value};
//!
//! # async fn run() -> Result<(), eosflow_projection::ProjectionError> {
//! let store = ProjectionStore::connect("postgres://app@db/app?sslmode=require", "customers").await?;
//! store.ensure_schema().await?;
//! // On assignment: claim the partitions with the group generation, seek to the positions.
//! let positions = store.open("customers", &[0, 1], 7).await?;
//! let start = positions[&0].unwrap_or(0);
//! let batch = Batch {
//!     epoch: 7,
//!     partitions: vec![PartitionBatch {
//!         topic: "customers".into(),
//!         partition: 0,
//!         records: vec![Record {
//!             offset: start,
//!             message_id: Some("evt-1".into()),
//!             ops: vec![RowOp::Upsert {
//!                 table: "customers".into(),
//!                 key: vec![("id".into(), Value::Int(42))],
//!                 columns: vec![("name".into(), Value::from("Ada"))],
//!                 version: Some(3),
//!             }],
//!         }],
//!     }],
//! };
//! let applied = store.apply_retrying(&batch).await?;
//! for dead in &applied.dead_lettered {
//!     eprintln!("to {}.DLT: offset {} ({} {})", dead.topic, dead.offset, dead.sqlstate, dead.message);
//! }
//! # Ok(())
//! # }
//! ```
#![warn(unreachable_pub)]

mod ident;
mod op;
mod store;
mod tls;
mod value;

pub use op::{Applied, Batch, DeadLetter, PartitionBatch, Record, RowOp};
pub use store::{Positions, ProjectionStore, StoreOptions};
pub use value::{Value, ValueTypeError};

/// Everything that can go wrong in the store, classified so the consumer loop knows what to do.
///
/// Exists because the three outcomes need different reactions: `Transient` → retry the same
/// batch (with backoff); `Fenced` → stop, the partitions belong to a newer claim (rejoin);
/// anything else → a bug or a misconfiguration to surface. Record-level permanent failures are
/// not errors at all: they come back in [`Applied::dead_lettered`].
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// Bad settings (URL, TLS parameters, projection name).
    #[error("projection config: {0}")]
    Config(String),
    /// A table or column name outside `[A-Za-z_][A-Za-z0-9_$]*` (at most 63 bytes).
    #[error("refused identifier {0:?}: names must match [A-Za-z_][A-Za-z0-9_$]* (at most 63 bytes, optionally schema.table)")]
    InvalidIdentifier(String),
    /// A malformed batch (offsets not ascending, a partition twice).
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// A newer claim owns the partition: this store (a zombie, or an older generation) must not
    /// commit, and nothing of the batch or claim was committed.
    #[error("projection {projection:?}: {topic}[{partition}] is claimed by epoch {current}, ours is {ours}: fenced, nothing committed")]
    Fenced {
        /// The projection.
        projection: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The epoch this store used.
        ours: i64,
        /// The epoch that owns the partition.
        current: i64,
    },
    /// `apply` for a partition that `open` never claimed at the batch's epoch.
    #[error("projection {projection:?}: {topic}[{partition}] is not claimed at the batch's epoch (call open first)")]
    NotClaimed {
        /// The projection.
        projection: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// Retry the same call: a serialization failure, a deadlock, a lost connection, a Postgres
    /// shutdown or restart. Nothing of the batch was committed, or — when the connection
    /// dropped during `COMMIT` — all of it was, which the stored positions tell on retry.
    #[error("transient Postgres failure while {context} (retry the batch): {message}")]
    Transient {
        /// What the store was doing.
        context: String,
        /// SQLSTATE, when the server sent one.
        sqlstate: Option<String>,
        /// The error.
        message: String,
    },
    /// A Postgres error outside any record (the bookkeeping tables, a permission): not retried.
    #[error("Postgres error while {context}: {message}")]
    Postgres {
        /// What the store was doing.
        context: String,
        /// SQLSTATE, when the server sent one.
        sqlstate: Option<String>,
        /// The error.
        message: String,
    },
}

/// The name the issue's brief uses for `apply`'s error.
pub type ApplyError = ProjectionError;

impl ProjectionError {
    /// True when retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ProjectionError::Transient { .. })
    }
}

/// How a driver error is treated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    /// Retry the batch.
    Transient,
    /// The record is at fault: dead-letter it.
    Permanent {
        /// SQLSTATE.
        sqlstate: String,
        /// Message.
        message: String,
    },
    /// Neither: surface it.
    Fatal,
}

/// Full error text: the server's message with its detail, or the driver's chain.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        match db.detail() {
            Some(d) => format!("{} ({d})", db.message()),
            None => db.message().to_string(),
        }
    } else {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(inner) = src {
            s.push_str(": ");
            s.push_str(&inner.to_string());
            src = inner.source();
        }
        s
    }
}

pub(crate) fn classify(e: &tokio_postgres::Error) -> Class {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let class = code.get(..2).unwrap_or("");
        return match (class, code) {
            (_, "55P03") | ("40" | "08" | "53" | "57" | "58", _) => Class::Transient,
            (
                "21" | "22" | "23" | "27" | "2F" | "38" | "39" | "42" | "44" | "P0" | "0A" | "2B",
                _,
            ) => Class::Permanent {
                sqlstate: code.to_string(),
                message: describe(e),
            },
            _ => Class::Fatal,
        };
    }
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        if inner.downcast_ref::<ValueTypeError>().is_some() {
            return Class::Permanent {
                sqlstate: "42804".into(),
                message: describe(e),
            };
        }
        src = inner.source();
    }
    if e.to_string().starts_with("error serializing parameter") {
        return Class::Permanent {
            sqlstate: "42804".into(),
            message: describe(e),
        };
    }
    // I/O, a closed connection, a connect failure, a timeout.
    Class::Transient
}

pub(crate) fn transient(context: &str, e: &tokio_postgres::Error) -> ProjectionError {
    ProjectionError::Transient {
        context: context.to_string(),
        sqlstate: e.code().map(|c| c.code().to_string()),
        message: describe(e),
    }
}

/// The error for `e` outside any record: transient ones stay retryable, the rest surface.
pub(crate) fn pg_error(context: &str, e: &tokio_postgres::Error) -> ProjectionError {
    match classify(e) {
        Class::Transient => transient(context, e),
        _ => ProjectionError::Postgres {
            context: context.to_string(),
            sqlstate: e.code().map(|c| c.code().to_string()),
            message: describe(e),
        },
    }
}
