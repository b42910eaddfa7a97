//! The streams DSL: typed streams and tables over the topology builder, with the names Kafka
//! Streams users know — [`StreamsBuilder`], [`KStream`], [`KGroupedStream`], [`KTable`],
//! [`GlobalKTable`], [`TimeWindowedKStream`] — compiling to the nodes of [`crate::topology::TopologyBuilder`].
//!
//! [`StreamsBuilder::build`] returns the existing [`crate::topology::Topology`]: `eosflow::run`
//! runs it and `TopologyTestDriver` tests it unchanged, with the runtime's guarantees (dedup,
//! retry ladder, dead letters, transactions, changelogged stores) on every DSL node.
//!
//! # Streams
//!
//! A [`KStream<K, V>`] is the typed output of one node. Stateless operations (`filter`,
//! `map_values`, `map_values_with_key`, `map`, `select_key`, `flat_map_values`, `flat_map`,
//! `peek`, `merge`, `split`) each add one node and return the next stream; `to` writes it to a
//! topic. Serdes are given once per topic, where bytes are made: [`Consumed`] at a source,
//! [`Produced`] at a sink, [`Grouped`] at a repartition topic, [`Materialized`] at a store.
//!
//! ```
//! use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
//! use eosflow::serdes::StringSerde;
//! use eosflow::testing::TopologyTestDriver;
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("greetings", Consumed::with(StringSerde, StringSerde))
//!     .filter_not(|_, text| text.is_empty())
//!     .map_values(|text| text.to_uppercase())
//!     .to("shouts", Produced::with(StringSerde, StringSerde));
//! let mut driver = TopologyTestDriver::new(builder.build()?)?;
//! let (ann, hi) = ("ann".to_string(), "hi".to_string());
//! driver.pipe_input("greetings", &StringSerde, &StringSerde, &ann, &hi)?;
//! let out = driver.read_output("shouts", &StringSerde, &StringSerde)?;
//! assert_eq!(out, vec![(Some(ann), Some("HI".to_string()))]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Aggregations and tables
//!
//! [`KStream::group_by_key`] or [`KStream::group_by`] (which re-keys through a repartition
//! topic) gives a [`KGroupedStream`]; `count`, `reduce` and `aggregate` give a [`KTable`]
//! whose state is in a named RocksDB store with its own changelog, written in the transaction
//! of the record that changed it — never in a closure or a struct field.
//!
//! ```
//! use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
//! use eosflow::serdes::{I64Serde, StringSerde};
//! use eosflow::testing::TopologyTestDriver;
//!
//! let builder = StreamsBuilder::new();
//! let totals = builder
//!     .stream("payments", Consumed::with(StringSerde, I64Serde))
//!     .group_by_key()
//!     .reduce(|total, amount| total + amount, Materialized::with(StringSerde, I64Serde).named("totals"));
//! totals.to_stream().to("totals", Produced::with(StringSerde, I64Serde));
//! let store = totals.store().clone();
//! let topology = builder.build()?;
//! assert_eq!(topology.changelog_topics("pay")[1], "pay-totals-changelog");
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! driver.pipe_input("payments", &StringSerde, &I64Serde, &"ann".to_string(), &30)?;
//! driver.pipe_input("payments", &StringSerde, &I64Serde, &"ann".to_string(), &12)?;
//! assert_eq!(driver.store_get(&store, &"ann".to_string())?, Some(42));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Windows
//!
//! [`KGroupedStream::windowed_by`] (tumbling or hopping [`TimeWindows`](crate::topology::windows::TimeWindows))
//! and [`KGroupedStream::windowed_by_session`] aggregate per key and window with the
//! topology's windowed aggregate: stream time, grace, late records to the DLT, and
//! [`EmitStrategy`](crate::topology::windows::EmitStrategy) `OnWindowUpdate` or
//! `OnWindowClose` (Kafka Streams' `suppress(untilWindowCloses)`). See
//! [`TimeWindowedKStream`] for an example.
//!
//! # Tables and joins
//!
//! [`StreamsBuilder::table`] reads a compacted topic as a [`KTable`] (co-partitioned with the
//! streams, its topic its changelog), [`StreamsBuilder::global_table`] replicates a topic on
//! every instance as a [`GlobalKTable`]. A stream joins a table by key
//! ([`KStream::join_table`], [`KStream::left_join_table`]), a global table by any key it maps
//! to ([`KStream::join_global`], [`KStream::left_join_global`]), and another stream within
//! [`JoinWindows`](crate::topology::JoinWindows) ([`KStream::join_stream`],
//! [`KStream::left_join_stream`], [`KStream::outer_join_stream`], stores named by
//! [`StreamJoined`]). Rust has no overloading: each join is named after what it joins. A join
//! by key of a re-keyed stream fails at [`StreamsBuilder::build`], naming the stream, until it
//! is repartitioned.
//!
//! # Processors
//!
//! [`KStream::process`] adds a node written by hand, a [`StreamProcessor`] whose
//! [`ProcessorContext`] forwards only the output stream's types and opens the [`Stores`] given
//! to it: timers and state the DSL has no operation for, still exactly once.
//!
//! # Failures
//!
//! A closure that can fail comes in a `try_` variant returning `Result<_, ProcessError>`:
//! transient errors go up the retry ladder, permanent ones to the input's dead-letter topic,
//! and the record's outputs and store writes are discarded. A panic is a permanent failure.
//! See [`KStream`]'s *Failures* and *Keys, values and tombstones*.
//!
//! ```
//! use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
//! use eosflow::processor::ProcessError;
//! use eosflow::serdes::{I64Serde, StringSerde};
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream("readings", Consumed::with(StringSerde, StringSerde))
//!     .try_map_values(|text| text.trim().parse::<i64>().map_err(ProcessError::permanent))
//!     .to("parsed", Produced::with(StringSerde, I64Serde));
//! let mut driver = TopologyTestDriver::new(builder.build()?)?;
//! driver.pipe(TestRecord::new("readings", Some("s1"), Some("21")))?;
//! driver.pipe(TestRecord::new("readings", Some("s1"), Some("warm")))?;
//! assert_eq!(driver.read_output("parsed", &StringSerde, &I64Serde)?, vec![(Some("s1".into()), Some(21))]);
//! assert_eq!(driver.read_raw_output("readings.DLT")[0].dlt_class(), Some("permanent"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Names
//!
//! Nodes, stores and repartitions get Kafka Streams' generated names
//! (`KSTREAM-FILTER-0000000001`, `KSTREAM-AGGREGATE-STATE-STORE-0000000003`, …) unless named:
//! `named` on a stream or table, [`Consumed::named`], [`Produced::named`], [`Grouped::named`],
//! [`Materialized::named`]. Name stores and repartitions in an application that will change:
//! their internal topics carry the name.

mod builder;
mod cogroup;
mod group;
mod grouped_table;
mod join;
mod options;
mod process;
mod stream;
mod suppress;
mod table;
#[cfg(test)]
mod tests;

pub use builder::StreamsBuilder;
pub use cogroup::CogroupedKStream;
pub use group::{KGroupedStream, SessionWindowedKStream, TimeWindowedKStream};
pub use grouped_table::KGroupedTable;
pub use join::JoinableTable;
pub use options::{Consumed, Grouped, Joined, Materialized, Printed, Produced, StreamJoined};
pub use process::{ProcessorContext, Stores, StreamProcessor};
pub use stream::{BranchedKStream, KStream};
pub use suppress::{BufferConfig, SuppressBuffer, Suppressed};
pub use table::{GlobalKTable, KTable};

/// What a key or value of a DSL stream is: cloned when a record goes to several nodes, moved
/// between threads with its task. Implemented for every `Clone + Send + 'static` type.
pub trait Data: Clone + Send + 'static {}

impl<T: Clone + Send + 'static> Data for T {}
