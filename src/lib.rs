//! eosflow: Kafka-native, exactly-once stream processing — the core library.
//!
//! A user's `main` loads the [`Config`], builds a topology (or a processor) and calls [`run`]
//! (`examples/hello.rs` is the whole thing in under 60 lines; `examples/word_count/` the same on
//! the topology builder, with two stores, scans and test-driver tests; the guide
//! `docs/write-your-own-topology.md` walks through it; `examples/dsl_word_count/` a word count
//! in the streams DSL). The data path, in folder order:
//! - [`dsl`] — the streams DSL (`StreamsBuilder`, `KStream`, `KTable`), compiling to a topology;
//! - [`topology`] — the builder: sources, processor nodes, named stores, sinks, with [`serdes`];
//! - [`processor`] — the Processor API (`Processor`, `Context`, store handles, timers);
//! - [`serdes`] — how keys and values become bytes (strings, numbers, JSON, Avro);
//! - [`config`] — [`Config`], the typed settings every eosflow process loads;
//! - [`kafka`] — broker clients and topic declarations (for an application's own topics);
//! - [`run`] / [`run_threads`] — endpoints, signals, graceful shutdown around the
//!   exactly-once loop; [`init_logging`];
//! - [`testing`] — `TopologyTestDriver`: a topology in-process, no broker;
//! - [`record`] — `Record`, `Emit`, `ProcessError`, shared by every layer;
//! - [`contracts`] — an application's event contracts: the schema catalog, compatibility,
//!   upcasters and the `Decoder`;
//! - [`metric_catalog`] — an application's own metrics, described on `/metrics`;
//! - [`clock`] — the wall clock (`now_ms`).
//!
//! That is the public line (docs/architecture.md, "The public line"); the reference application
//! (`crates/orders`) is written against it alone, and a test keeps it so. The runtime behind it —
//! the exactly-once loop, RocksDB stores, changelog and restore, the retry ladder and
//! dead-letter topics, the transactional sink, the schema registry codec, metrics — is private;
//! eosflow's own crates and tests reach it through the hidden `eosflow::internals`, which is
//! not covered by semver.
//!
//! Other crates of the workspace build on this one (docs/layout.md): `eosflow-outbox` (the
//! source side, Postgres outbox → Kafka), `eosflow-orders` (the reference application),
//! `eosflow-verify` (the exactly-once verifier), `eosflow-bench` and `eosflow-cli` (the
//! `eosflow` binary).

// `pub` means reachable from outside: the public line or `internals` (docs/architecture.md).
#![warn(unreachable_pub)]

pub mod clock;
mod codec;
pub mod config;
pub mod contracts;
pub mod dsl;
mod fast_hash;
pub mod kafka;
pub mod metric_catalog;
pub mod processor;
pub mod projection;
pub mod query;
pub mod record;
mod retry;
mod runner;
pub mod serdes;
mod sink;
mod state;
mod telemetry;
pub mod testing;
pub mod topology;

pub use config::Config;
pub use runner::{init_logging, run, run_threads, start, start_threads, Instance, RunError};
pub use telemetry::http::HttpError;

/// The runtime's own modules, for eosflow's other crates (`eosflow-cli`, `eosflow-verify`,
/// `eosflow-outbox`, `eosflow-bench`, `eosflow-orders`) and its integration tests: the
/// exactly-once loop, the transactional sink, the state layer, the retry ladder, the schema
/// registry codec, metrics and the broker helpers.
///
/// Not part of the public line: hidden from the documentation and not covered by semver —
/// anything here may change or go away in any release. An application writes against the
/// public modules (docs/architecture.md, "The public line").
#[doc(hidden)]
pub mod internals {
    /// The wall clock (`now_ms`).
    pub mod clock {
        pub use crate::clock::*;
    }
    /// Schema registry, Avro decoding and contracts.
    pub mod codec {
        pub use crate::codec::*;
    }
    /// The retry ladder and dead-letter topics.
    pub mod retry {
        pub use crate::retry::*;
    }
    /// `run` and what surrounds it: endpoints, signals, logging.
    pub mod runner {
        pub use crate::runner::*;
    }
    /// The transactional producer.
    pub mod sink {
        pub use crate::sink::*;
    }
    /// RocksDB stores, changelog, checkpoint, restore.
    pub mod state {
        pub use crate::state::*;
    }
    /// Metrics, health, traces.
    pub mod telemetry {
        pub use crate::telemetry::*;
    }
    /// The broker helpers behind the public `eosflow::kafka`.
    pub mod kafka {
        pub use crate::kafka::*;
        /// Client settings per role.
        pub mod client {
            pub use crate::kafka::client::*;
        }
        /// `KafkaConfig` and its parts.
        pub mod config {
            pub use crate::kafka::config::*;
        }
        /// Consumer-group and topic descriptions.
        pub mod describe {
            pub use crate::kafka::describe::*;
        }
        /// Committed reads of whole topics.
        pub mod reader {
            pub use crate::kafka::reader::*;
        }
    }
    /// The exactly-once runtime behind the public Processor API.
    pub mod processor {
        pub use crate::processor::runtime::{Runtime, RuntimeOptions};
        pub use crate::processor::threads::ProcessorThreads;
        pub use crate::processor::*;
        /// `ProcessorConfig` and its parts.
        pub mod config {
            pub use crate::processor::config::*;
        }
        /// The stream threads, task manager and group membership.
        pub mod runtime {
            pub use crate::processor::runtime::*;
        }
        /// The headers a repartition record carries (for the `hot_path` bench).
        pub mod engine {
            pub use crate::processor::engine::{Mark, Origin};
        }
        /// Standby replicas.
        pub mod standby {
            pub use crate::processor::standby::*;
        }
        /// Processor threads.
        pub mod threads {
            pub use crate::processor::threads::*;
        }
        /// The timer queue.
        pub mod timers {
            pub use crate::processor::timers::*;
        }
        /// Typed store handles and views.
        pub mod stores {
            pub use crate::processor::stores::*;
        }
    }
}
