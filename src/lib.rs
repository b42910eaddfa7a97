//! eosflow: Kafka-native, exactly-once stream processing — the core library.
//!
//! A user's `main` loads the [`Config`], builds a topology (or a processor) and calls [`run`]
//! (`examples/hello.rs` is the whole thing in under 60 lines; `examples/word_count/` the same on
//! the topology builder, with two stores, scans and test-driver tests; the guide
//! `docs/write-your-own-topology.md` walks through it). The data path, in folder order:
//! - [`topology`] — the builder: sources, processor nodes, named stores, sinks, with [`serdes`];
//! - [`processor`] (transform) — the Processor API and the exactly-once loop;
//! - [`state`] — RocksDB stores, changelog, checkpoint, restore;
//! - [`retry`] — the retry ladder and dead-letter topics;
//! - [`sink`] — the transactional producer everything commits through;
//! - [`kafka`] — client settings, topic declarations and checks, committed reads;
//! - [`codec`] — schema registry and Avro;
//! - [`telemetry`] — metrics, health;
//! - [`runner`] — [`run`]: endpoints, signals, graceful shutdown around the loop;
//! - [`testing`] — `TopologyTestDriver`: a topology in-process, no broker;
//! - [`record`] — `Record`, `Emit`, `ProcessError`, shared by every layer.
//!
//! Other crates of the workspace build on this one (docs/layout.md): `eosflow-outbox` (the
//! source side, Postgres outbox → Kafka), `eosflow-orders` (the reference application),
//! `eosflow-verify` (the exactly-once verifier), `eosflow-bench` and `eosflow-cli` (the
//! `eosflow` binary).

pub mod clock;
pub mod codec;
pub mod config;
pub mod kafka;
pub mod processor;
pub mod record;
pub mod retry;
pub mod runner;
pub mod serdes;
pub mod sink;
pub mod state;
pub mod telemetry;
pub mod testing;
pub mod topology;

pub use config::Config;
pub use runner::{init_logging, run, run_threads, RunError};
