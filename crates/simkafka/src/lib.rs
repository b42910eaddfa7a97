//! An in-memory, deterministic Kafka for eosflow's simulator (issue 50).
//!
//! The exactly-once runtime relies on a handful of Kafka semantics: transactions whose
//! records stay invisible to `read_committed` consumers until their commit marker, epochs
//! that fence zombie producers, KIP-447 offset commits fenced by the group generation,
//! consumer-group rebalances, and the error classes a client must handle. This crate
//! implements those semantics in memory, behind one mutex, so the runtime can be run against
//! a seeded simulation (as FoundationDB and TigerBeetle do) beside — never instead of — real
//! brokers. It knows nothing of eosflow or rdkafka.
//!
//! - **Deterministic.** No threads, no wall clock: virtual time moves only by
//!   [`Cluster::advance`]; every map that can leak order is a `BTreeMap`; randomness comes
//!   only from the cluster's seeded SplitMix64. The same seed and the same calls give the same
//!   results and the same faults.
//! - **Faults at every call.** Each client call passes one checkpoint ([`Call`]) where a
//!   scripted or random [`Fault`] can fail it, before or after its effect. Every injected
//!   fault is in [`Cluster::trace`].
//! - **Oracle views.** [`Cluster::committed_records`], [`Cluster::all_records`],
//!   [`Cluster::group_offsets`] and the offset views read the truth without faults, for
//!   checkers.
//!
//! Each module documents what it models and what it deliberately does not. Across the crate,
//! not modelled: replication and ISR, multiple brokers and leader movement (beyond injected
//! `NotLeader` errors), quotas, ACLs, compression, batching, retention by time or size, and
//! the internal topics (`__consumer_offsets`, `__transaction_state`).
//!
//! # Example: a transactional produce seen by a `read_committed` consumer
//!
//! ```
//! use eosflow_simkafka::{
//!     AutoOffsetReset, Cluster, ConsumerConfig, GroupEvent, ProducerConfig, SimError,
//!     TopicConfig,
//! };
//!
//! let cluster = Cluster::new(42);
//! cluster.create_topic("orders", 1, TopicConfig::default())?;
//!
//! let mut consumer = cluster.consumer(ConsumerConfig {
//!     group_id: "billing".into(),
//!     auto_offset_reset: AutoOffsetReset::Earliest,
//!     ..ConsumerConfig::default() // read_committed
//! });
//! consumer.subscribe(&["orders"]);
//! let poll = consumer.poll()?;
//! assert_eq!(poll.events, vec![GroupEvent::Assigned(vec![("orders".into(), 0)])]);
//!
//! let mut producer = cluster.producer(ProducerConfig {
//!     transactional_id: Some("orders-tx".into()),
//!     ..ProducerConfig::default()
//! });
//! producer.init_transactions()?;
//! producer.begin_transaction()?;
//! let (partition, offset) =
//!     producer.send("orders", None, None, Some(b"o-1".to_vec()), Some(b"42".to_vec()), vec![])?;
//! assert_eq!((partition, offset), (0, 0));
//!
//! // Open: in the log, but not visible to read_committed.
//! assert!(consumer.poll()?.records.is_empty());
//! assert_eq!(cluster.last_stable_offset("orders", 0), Some(0));
//!
//! producer.commit_transaction()?;
//! let records = consumer.poll()?.records;
//! assert_eq!(records.len(), 1);
//! assert_eq!(records[0].value.as_deref(), Some(&b"42"[..]));
//! // The commit marker took offset 1: the consumer's position is past it.
//! assert_eq!(cluster.high_watermark("orders", 0), Some(2));
//! assert_eq!(consumer.position("orders", 0), Some(2));
//! # Ok::<(), SimError>(())
//! ```

#![warn(unreachable_pub)]

mod admin;
mod cluster;
mod consumer;
mod error;
mod faults;
mod group;
mod log;
mod partitioner;
mod producer;
mod rng;
mod txn;

pub use admin::{Admin, NewTopic, PartitionOffsets, PartitionResults, TopicResults};
pub use cluster::{Cluster, TopicConfig};
pub use consumer::{
    AutoOffsetReset, Consumer, ConsumerConfig, GroupEvent, GroupMetadata, Isolation, Poll,
    RebalanceProtocol,
};
pub use error::SimError;
pub use faults::{Call, Fault, FaultCause, FaultKind, Faults, TraceEvent};
pub use group::{GroupDescription, GroupState, MemberDescription};
pub use partitioner::{murmur2, partition_for_key};
pub use producer::{Producer, ProducerConfig};

/// A partition by topic name and index, as Kafka's `TopicPartition`.
pub type TopicPartition = (String, i32);

/// One record as a consumer (or an oracle view) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// The create time the producer gave (default: virtual time of the send).
    pub timestamp_ms: i64,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value (`None`: a tombstone).
    pub value: Option<Vec<u8>>,
    /// The headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}
