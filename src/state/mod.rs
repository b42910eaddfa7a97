//! Local state: one RocksDB store per assigned partition, written through a per-batch overlay,
//! mirrored to a compacted changelog topic, checkpointed, and restored on assignment.
//!
//! The rule that makes it exactly-once: an overlay reaches RocksDB only after the Kafka
//! transaction that carried its changelog records committed, in one `WriteBatch` together with
//! the changelog offset reached. An aborted batch never touches RocksDB, and a crash costs only
//! the changelog tail after the last checkpoint.

pub mod changelog;
pub mod config;
pub mod dedup;
mod id_filter;
pub mod merge;
pub mod overlay;
pub mod record_cache;
pub mod store;
pub(crate) mod versioned;

pub use changelog::{restore, restore_known_end, restore_table, RestoreStats};
pub use overlay::{Column, Overlay};
pub use store::{CheckpointAt, Entry, Store, StoreCache, StoreReader};

/// Why a state operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// RocksDB refused an operation.
    #[error("rocksdb at {path}: {source}")]
    Rocks {
        /// The store's directory.
        path: String,
        /// RocksDB's error.
        source: rocksdb::Error,
    },
    /// The store's directory could not be prepared.
    #[error("state dir {path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Reading the changelog failed.
    #[error("changelog {topic}[{partition}]: {message}")]
    Changelog {
        /// Changelog topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// What went wrong.
        message: String,
    },
    /// The store's checkpoint lies past the changelog's end: the topic was recreated.
    #[error("store checkpoint {checkpoint} is beyond {topic}[{partition}]'s end {end}: the changelog was recreated")]
    CheckpointAhead {
        /// Changelog topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// The store's checkpoint.
        checkpoint: i64,
        /// The changelog's end.
        end: i64,
    },
    /// The store's checkpoint is older than the changelog's `delete.retention.ms` (less a safety
    /// margin): tombstones written since may already be compacted away, so replaying the tail
    /// could resurrect deleted keys. The store must be rebuilt from the changelog alone.
    #[error("store checkpoint of {topic}[{partition}] was reached at {checkpoint_at_ms} ms ({how}), {age_ms} ms ago, more than the changelog's delete.retention.ms {retention_ms} less a {margin_ms} ms margin: tombstones may have been compacted away since")]
    StaleCheckpoint {
        /// Changelog topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// When the checkpoint was reached (ms since the epoch).
        checkpoint_at_ms: i64,
        /// How that time is known (`recorded`, or `file-mtime` for an older store).
        how: &'static str,
        /// Now minus that time.
        age_ms: i64,
        /// The changelog's `delete.retention.ms`.
        retention_ms: i64,
        /// Safety margin subtracted from the retention.
        margin_ms: i64,
    },
    /// Restoring did not reach the changelog's end in time.
    #[error("restoring {topic}[{partition}] did not reach offset {target} within {seconds}s (at {position}): an open transaction of a dead instance blocks it until transaction.timeout.ms")]
    RestoreTimeout {
        /// Changelog topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Offset restore had to reach.
        target: i64,
        /// Offset it reached.
        position: i64,
        /// The deadline.
        seconds: u64,
    },
}
