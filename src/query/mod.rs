//! Interactive queries: a service asks eosflow's state directly instead of materialising it
//! again elsewhere (Kafka Streams' interactive queries, with routing and HTTP built in).
//!
//! # Reading from the library
//!
//! [`crate::start`] runs an instance in the background and returns an [`crate::Instance`];
//! [`crate::Instance::store`] gives a [`ReadOnlyKeyValueStore`] (`get`, `range`, `prefix`,
//! `all`) and [`crate::Instance::window_store`] a [`ReadOnlyWindowStore`] (`fetch(key, from,
//! to)`), over every task open on this instance. A `get` goes to the partition the key lives in
//! (by `queries.partitioner`, the [`Partitioner`] the inputs were produced with — Kafka's murmur2
//! by default — over the inputs' partition count): a key whose partition another instance owns
//! is [`QueryError::NotLocal`], one restoring here [`QueryError::Restoring`].
//!
//! ```no_run
//! use eosflow::processor::StoreHandle;
//! use eosflow::serdes::{I64Serde, StringSerde};
//! # fn topology() -> eosflow::topology::Topology { unimplemented!() }
//!
//! let counts: StoreHandle<String, i64> = StoreHandle::new("counts", StringSerde, I64Serde);
//! let config = eosflow::Config::load(None)?;
//! let instance = eosflow::start(&config, topology())?;
//! let store = instance.store(&counts);
//! match store.get(&"ann".to_string()) {
//!     Ok(answer) => println!("ann: {:?} as of {:?}", answer.value, answer.positions),
//!     Err(e) => println!("not here: {e}"),
//! }
//! instance.queries().serve_store(&counts); // GET /stores/counts/keys/ann on queries.listen
//! let summary = instance.wait()?; // until SIGTERM, like eosflow::run
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Consistency
//!
//! Reads see **committed** state only: a batch's writes reach the store RocksDB holds only
//! after its transaction committed, and a query reads RocksDB directly (never the open batch,
//! never the record cache). Each answer is [`Queried`]: the value, the partitions read and
//! their **positions** — the next input offset of each (topic, partition) whose records that
//! reach the store read are all reflected, from the sub-topology writing that store (behind a
//! repartition: the inputs its records came from). A client that wrote a record at offset `n` reads its own write once
//! [`Queried::reached`] says so ("wait until offset ≥ n"). A store is read only while its task
//! is open here: once the partition is revoked its readers are withdrawn before its stores
//! close, so a query never sees a store its instance no longer owns.
//!
//! # HTTP and routing
//!
//! The query listener (`queries.listen`, off unless set; never the operations port) answers
//! `/stores/...` for the stores the application serves ([`QueryService`]), over TLS and only to
//! authenticated clients (a bearer token and/or a client certificate: [`QueriesConfig`]), at
//! most `queries.max_concurrent` at once, each within `queries.request_timeout_ms`. Each
//! instance advertises `processor.application_server` (host:port) on the compacted
//! `<app.id>-endpoints` topic; the group's current assignment (DescribeGroups, both group
//! protocols) says which instance owns a partition. A key owned elsewhere is proxied to its
//! owner with this instance's credentials ([`QueryClient`]; the answer names it in
//! `Eosflow-Owner`); a partition restoring or rebalancing, or an owner that does not answer,
//! gives `503` with `Retry-After`.
//!
//! # Limits
//!
//! Standby copies are read only when asked for (`with_standbys(max_lag)`, `max_standby_lag=`);
//! range queries are per instance, as in Kafka Streams: ask each instance (`GET /stores`
//! lists what it holds). Over HTTP a range returns at most `queries.max_limit` entries, merged
//! across partitions in key order, and `next` to resume after; every scan reads a chunk of
//! entries per take of its task's read lock, so a revocation never waits for a whole scan.

pub(crate) mod config;
pub(crate) mod http;
mod local;
mod partitioner;
mod read;
mod routing;
mod service;

pub use config::{QueriesConfig, MAX_LIMIT_CEILING};
pub use http::{QueryClient, QueryClientError, QueryListenerError};
pub(crate) use local::LocalStores;
pub use local::Positions;
pub use partitioner::{crc32, fnv1a, murmur2, partition_for, Partitioner};
pub use read::{Queried, QueryError, ReadOnlyKeyValueStore, ReadOnlyWindowStore};
pub(crate) use routing::{endpoints_topic, Router};
pub use service::{HttpAnswer, QueryService, FORWARDED_HEADER};

/// docs/interactive-queries.md, whose example compiles as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/interactive-queries.md")]
pub struct InteractiveQueriesPage;
