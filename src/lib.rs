//! eosflow: Kafka-native, exactly-once stream processing.
//!
//! The data path, in folder order:
//! - [`outbox`] (source): Postgres WAL → Kafka, Debezium Outbox Event Router semantics;
//! - [`processor`] (transform) — the Processor API and the exactly-once loop;
//! - [`state`] — RocksDB stores, changelog, checkpoint, restore;
//! - [`retry`] — dead-letter topics (and the retry ladder);
//! - [`sink`] — the transactional producer everything commits through;
//! - [`kafka`] — client settings, topic declarations, committed reads;
//! - [`codec`] — schema registry and Avro;
//! - [`telemetry`] — metrics;
//! - [`app`] — topologies that ship with eosflow; [`verify`] — the exactly-once verifier;
//!   [`bench`] — benchmarks against the raw pipe and Kafka Streams.

pub mod app;
pub mod bench;
pub mod codec;
pub mod config;
pub mod kafka;
pub mod outbox;
pub mod processor;
pub mod record;
pub mod retry;
pub mod serdes;
pub mod sink;
pub mod state;
pub mod telemetry;
pub mod testing;
pub mod topology;
pub mod verify;

pub use config::Config;
