//! The exactly-once read-process-write loop (KIP-447).
//!
//! One consumer-group member and one transactional producer per loop (an instance runs one
//! loop per processing thread). Each turn: poll a batch (bounded by records and by the commit
//! interval) with no transaction open → begin → process every record (state into the
//! partition's overlay, emits sent pipelined) → changelog records → input offsets with the
//! group's metadata → commit → apply the overlays to RocksDB with the changelog offsets
//! reached. Any failure aborts, drops the overlays and seeks back to the batch's first
//! offsets. Transactions open and close between two polls, so none ever spans a rebalance
//! (rebalance callbacks only run inside `poll`).
//!
//! # Owners
//!
//! The loop is split the way Kafka Streams' internals are; each part owns its fields and is
//! asked through methods:
//!
//! ```text
//!                      ┌──────────────── Runtime (stream_thread.rs) ────────────────┐
//!   group ◀── poll ──▶ │ GroupMember     consumer, assignment, paused retry levels, │
//!                      │ (group_member)  protocol fall-back, committed offsets      │
//!                      │ TaskManager     tasks by partition number: open + restore, │
//!                      │ (task_manager)  close, standbys, leases, block cache       │
//!                      │   └ Task        (engine.rs) stores, overlays; per          │
//!                      │                 sub-topology: stream time, timers, marks   │
//!   broker ◀─ txn ───▶ │ RecordCollector producer, sends + delivery reports,        │
//!                      │ (record_collector) changelogs, in-place recovery           │
//!                      │ Isolation       records that fail a batch, batch bounds    │
//!                      │ Alignment       (align.rs) event-time order inside a task  │
//!                      │ Watermarks      (watermarks.rs) marks to repartition topics│
//!                      └────────────────────────────────────────────────────────────┘
//! ```
//!
//! - [`Runtime`] (`stream_thread.rs`): the loop itself — poll, rebalance, one batch's
//!   transaction, commit or recovery — calling on the owners below.
//! - `group_member.rs`: the group consumer and everything asked of the group; the consumer
//!   is a [`crate::kafka::seams::GroupConsumer`] (librdkafka's, or an in-memory Kafka's in
//!   unit tests).
//! - `task_manager.rs`: the tasks and their lifecycle.
//! - `record_collector.rs`: the producer and what the open transaction sent.
//! - `isolation.rs`: which record made a batch fail, so it never fails the same way twice.
//! - `options.rs`, `summary.rs`, `error.rs`: what the loop is given, returns, and fails with.
//!
//! A record's own path (dedup, per-key order, the handler call, retry and dead-letter
//! routing, timers) is Kafka-free and lives in `engine.rs`, `handle.rs` and `fire.rs`, shared
//! with the [`crate::testing::TopologyTestDriver`].

mod error;
#[doc(hidden)]
pub mod faults;
mod group_member;
pub(crate) mod internal_topics;
mod isolation;
mod options;
mod record_collector;
mod stream_thread;
mod summary;
mod task_manager;

pub use error::RuntimeError;
pub use options::RuntimeOptions;
pub use record_collector::IN_PLACE_RECOVERY_LOG;
pub use stream_thread::Runtime;
pub use summary::{RunSummary, MAX_RESTORES_KEPT};
