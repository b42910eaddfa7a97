//! What a projection applies: row operations grouped into records, records into batches.

use crate::Value;

/// One change to the projection's tables, derived from one Kafka record.
///
/// The projection function turns a record into a few of these; the store applies them in
/// order, in the same transaction as the record's offset. Table and column names are checked
/// (`[A-Za-z_][A-Za-z0-9_$]*`, optionally `schema.table`) and always double-quoted, so they are
/// case-sensitive and can never inject SQL; an op with a bad name dead-letters its record.
#[derive(Debug, Clone, PartialEq)]
pub enum RowOp {
    /// Insert the row, or update its `columns` when a row with the same `key` exists
    /// (`INSERT … ON CONFLICT (key) DO UPDATE`). The key columns need a primary key or unique
    /// constraint. With `version: Some(v)` the table needs a `version bigint` column: the row
    /// is written only when absent or when its `version` is `NULL` or lower than `v`, and
    /// `version` is set to `v`, so a replayed or reordered older event never regresses it.
    Upsert {
        /// The table, `name` or `schema.name`.
        table: String,
        /// The key columns and their values (the conflict target).
        key: Vec<(String, Value)>,
        /// The other columns to write.
        columns: Vec<(String, Value)>,
        /// Optional version guard (see above).
        version: Option<i64>,
    },
    /// Delete the row with this `key`. With `version: Some(v)` only a row whose `version` column
    /// is `NULL` or lower than `v` is deleted. A deleted row leaves no version behind, so an
    /// older upsert arriving after the delete re-creates it: keep a tombstone (an upsert with a
    /// `deleted` column) where events can be reordered across a delete.
    Delete {
        /// The table, `name` or `schema.name`.
        table: String,
        /// The key columns and their values.
        key: Vec<(String, Value)>,
        /// Optional version guard (see above).
        version: Option<i64>,
    },
    /// Append a row (append-only tables: an event log, an audit trail).
    Insert {
        /// The table, `name` or `schema.name`.
        table: String,
        /// The columns and their values.
        columns: Vec<(String, Value)>,
    },
    /// A statement the user wrote, with `$1…$n` bound to `params` (never interpolated): for
    /// increments (`… DO UPDATE SET n = t.n + $2`) and whatever the other ops cannot say. It is
    /// a barrier: the store never reorders other ops across it.
    Sql {
        /// The statement, with `$n` placeholders.
        statement: String,
        /// The parameters, in order.
        params: Vec<Value>,
    },
}

/// One input record: its offset, its optional message id, and the ops it produces.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// The record's Kafka offset.
    pub offset: i64,
    /// A message id for inbox deduplication: a record whose id the projection has already
    /// applied (at any offset, in any partition) is skipped. `None`: no dedup by id.
    pub message_id: Option<String>,
    /// The row operations, applied in order.
    pub ops: Vec<RowOp>,
}

/// The records of one topic partition in a batch, in ascending offset order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PartitionBatch {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The records, offsets strictly ascending (gaps are fine: compacted topics, transaction
    /// markers).
    pub records: Vec<Record>,
}

/// Everything one transaction applies: records from partitions this store claimed with
/// [`ProjectionStore::open`](crate::ProjectionStore::open) at `epoch`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    /// The epoch the partitions were claimed with; a newer claim fences this batch.
    pub epoch: i64,
    /// Per topic partition, each at most once.
    pub partitions: Vec<PartitionBatch>,
}

/// A record that failed permanently (a constraint, a bad value, an unknown table or column)
/// and was left out of the commit; the loop writes it to `<topic>.DLT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The record's topic.
    pub topic: String,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// Postgres' SQLSTATE (`23514` for a CHECK constraint, `42P01` for an unknown table; `42602`
    /// for a name eosflow refused, `42804` for a value that does not fit its column).
    pub sqlstate: String,
    /// The error message.
    pub message: String,
}

/// What one committed batch did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Records whose ops were committed.
    pub applied: usize,
    /// Records skipped because their offset was below the stored position (a replay).
    pub replayed: usize,
    /// Records skipped because their message id was already in the inbox.
    pub duplicates: usize,
    /// Records that failed permanently; the rest of the batch committed without them and the
    /// positions moved past them.
    pub dead_lettered: Vec<DeadLetter>,
    /// Each partition's stored next offset after the commit: `(topic, partition, next_offset)`.
    pub positions: Vec<(String, i32, i64)>,
}
