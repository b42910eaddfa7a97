//! [`KTable`]: each key's latest value — the result of an aggregation, or a compacted topic
//! read with [`super::StreamsBuilder::table`] — and [`GlobalKTable`], a topic replicated on
//! every instance ([`super::StreamsBuilder::global_table`]).

use super::builder::StreamsBuilder;
use super::grouped_table::KGroupedTable;
use super::join::JoinableTable;
use super::options::{Grouped, Materialized};
use super::stream::{like, KStream};
use super::suppress::{suppress, SuppressBuffer, Suppressed};
use super::Data;
use crate::processor::StoreHandle;
use crate::record::ProcessError;
use crate::topology::windows::{WindowStoreHandle, Windowed};
use crate::topology::{GlobalTableHandle, TableHandle};

/// A table of each key's latest value (Kafka Streams' `KTable<K, V>`). `S` says where the
/// values are and what the table can do:
///
/// - [`StoreHandle<K, V>`] (the default): the result of `count`, `reduce` or `aggregate` — a
///   node that forwards every update ([`KTable::to_stream`]) and the store it writes;
/// - [`WindowStoreHandle<K, A>`]: a windowed aggregation, keyed by [`Windowed<K>`];
/// - [`TableHandle<K, V>`]: a compacted topic read with [`StreamsBuilder::table`], which a
///   stream joins ([`KStream::join_table`], [`KStream::left_join_table`]) or a processor
///   reads ([`super::Stores::table`]). Its topic is its changelog and no node forwards its
///   updates, so it has no `to_stream` (a compile error, not a run-time one).
///
/// Read the store in tests with `TopologyTestDriver::store_get(table.store(), &key)` (or
/// `window_fetch_range`, or `table_get` and `pipe_table` for a table read from a topic).
pub struct KTable<'b, K, V, S = StoreHandle<K, V>> {
    pub(crate) stream: KStream<'b, K, V>,
    pub(crate) store: S,
}

impl<K, V, S> std::fmt::Debug for KTable<'_, K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KTable")
            .field("stream", &self.stream)
            .finish()
    }
}

impl<K, V, S: Clone> Clone for KTable<'_, K, V, S> {
    fn clone(&self) -> Self {
        Self {
            stream: self.stream,
            store: self.store.clone(),
        }
    }
}

impl<'b, K: Data, V: Data, S> KTable<'b, K, V, S> {
    pub(crate) fn new(stream: KStream<'b, K, V>, store: S) -> Self {
        Self { stream, store }
    }

    /// The store the table is materialized in: its name is the one
    /// [`super::Materialized::named`] gave (or the generated one), its changelog
    /// `<application id>-<name>-changelog`.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The table's name: the node that forwards its updates (an aggregation), or the table
    /// itself (a table read from a topic: its store's name).
    pub fn name(&self) -> String {
        self.stream.name()
    }
}

impl<'b, K: Data, V: Data> KTable<'b, K, V> {
    /// Names the node that forwards the table's updates (instead of its generated name).
    pub fn named(self, name: impl Into<String>) -> Self {
        Self {
            stream: self.stream.named(name),
            store: self.store,
        }
    }

    /// The table's updates as a stream (Kafka Streams' `toStream`): each key's new value,
    /// after every record that changed it.
    pub fn to_stream(&self) -> KStream<'b, K, V> {
        updates(self.stream)
    }

    /// The rows for which `predicate(key, value)` holds (Kafka Streams'
    /// `filter(predicate, Materialized)`), kept in the store `materialized` names. An update
    /// that no longer passes deletes its key: the new table forwards a tombstone for it (and
    /// nothing for a key it never had), so what reads its changes — a `to_stream().to(…)` into
    /// a compacted topic — sees the row go.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // Accounts whose balance is negative, as a table.
    /// let builder = StreamsBuilder::new();
    /// let overdrawn = builder
    ///     .stream("movements", Consumed::with(StringSerde, I64Serde))
    ///     .group_by_key()
    ///     .reduce(|a, b| a + b, Materialized::with(StringSerde, I64Serde).named("balances"))
    ///     .filter(|_, balance| *balance < 0, Materialized::with(StringSerde, I64Serde).named("overdrawn"));
    /// overdrawn.to_stream().to("overdrawn", Produced::with(StringSerde, I64Serde));
    /// let store = overdrawn.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let ann = "ann".to_string();
    /// for amount in [10, -30, 50] {
    ///     driver.pipe_input("movements", &StringSerde, &I64Serde, &ann, &amount)?;
    /// }
    /// let out = driver.read_output("overdrawn", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some(ann.clone()), Some(-20)), (Some(ann.clone()), None)]);
    /// assert_eq!(driver.store_get(&store, &ann)?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn filter(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, K, V> {
        self.derive("KTABLE-FILTER-", materialized, move |k, v| {
            predicate(k, v).then(|| v.clone())
        })
    }

    /// The rows for which `predicate(key, value)` does not hold (Kafka Streams' `filterNot`);
    /// see [`KTable::filter`].
    pub fn filter_not(
        &self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, K, V> {
        self.derive("KTABLE-FILTER-", materialized, move |k, v| {
            (!predicate(k, v)).then(|| v.clone())
        })
    }

    /// Each row's value replaced by `f(value)` (Kafka Streams' `mapValues(mapper,
    /// Materialized)`), kept in the store `materialized` names; a deleted row stays deleted.
    pub fn map_values<V2: Data>(
        &self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
        materialized: Materialized<K, V2>,
    ) -> KTable<'b, K, V2> {
        self.derive("KTABLE-MAPVALUES-", materialized, move |_, v| Some(f(v)))
    }

    /// The table's updates held back per key and emitted later (Kafka Streams'
    /// `suppress(Suppressed)`): each key's latest update once the table's stream time is the
    /// time limit past the key's first waiting update, or earlier when the buffer is full
    /// (see [`Suppressed`], [`super::BufferConfig`]). Fewer, later updates downstream — a
    /// rate limit on a chatty table. The buffer is a changelogged store ([`SuppressBuffer`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::dsl::{BufferConfig, Consumed, Materialized, Produced, StreamsBuilder, Suppressed};
    /// use eosflow::serdes::{I64Serde, Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// // Running totals, at most one per account per minute of stream time.
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("payments", Consumed::with(StringSerde, I64Serde))
    ///     .group_by_key()
    ///     .reduce(|a, b| a + b, Materialized::with(StringSerde, I64Serde).named("totals"))
    ///     .suppress(Suppressed::until_time_limit(Duration::from_secs(60), BufferConfig::unbounded()))
    ///     .to_stream()
    ///     .to("totals-per-minute", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for (amount, at) in [(10, 0), (5, 20_000), (7, 59_000), (1, 60_000)] {
    ///     let amount = I64Serde.serialize(&amount)?;
    ///     driver.pipe(TestRecord::new("payments", Some("ann"), Some(amount)).timestamp(at))?;
    /// }
    /// // At stream time 60 s ann's first waiting update (at 0 s) is a minute old: her latest
    /// // total comes out with its own timestamp; nothing else is due yet.
    /// let out = driver.read_output("totals-per-minute", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("ann".to_string()), Some(23))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn suppress(&self, suppressed: Suppressed) -> KTable<'b, K, V, SuppressBuffer> {
        let (keys, values) = self.store.serde_arcs();
        suppress(self.stream, keys, values, suppressed)
    }

    /// A table derived row by row: `row(key, value)` is the key's new row (`None`: deleted),
    /// written to its own store and forwarded when it changes the table.
    fn derive<V2: Data>(
        &self,
        prefix: &str,
        materialized: Materialized<K, V2>,
        row: impl Fn(&K, &V) -> Option<V2> + Send + Sync + 'static,
    ) -> KTable<'b, K, V2> {
        let (store, attach) = materialized.key_value_store(self.stream.builder, prefix);
        let handle = store.clone();
        let stream = self.stream.then(
            prefix,
            false,
            move |ctx, r, out| {
                let Some(key) = &r.key else {
                    return Err(ProcessError::permanent(format!(
                        "{} keeps table {} by key: a row without a key cannot be kept",
                        ctx.node_name(),
                        handle.name()
                    )));
                };
                let new = r.value.as_ref().and_then(|v| row(key, v));
                let mut s = ctx.store(&handle)?;
                match &new {
                    Some(v) => s.put(key, v)?,
                    None if s.get(key)?.is_some() => s.delete(key)?,
                    // Not in the table before, not in it now: no change to forward.
                    None => return Ok(()),
                }
                out.push(like(&r, r.key.clone(), new));
                Ok(())
            },
            Some(attach),
        );
        KTable::new(stream, store)
    }
}

impl<'b, K: Data, V: Data, S: JoinableTable<K, V>> KTable<'b, K, V, S> {
    /// The table's rows grouped by a new key (Kafka Streams' `KTable.groupBy(selector,
    /// Grouped)`): `selector(key, row)` gives the row's group and the value it brings to it
    /// (`None`: the row is in no group), for [`KGroupedTable::count`],
    /// [`KGroupedTable::reduce`] or [`KGroupedTable::aggregate`], whose results follow the
    /// table — a row that changes leaves its old group and joins its new one. The groups go
    /// through a repartition topic written with `grouped`'s serdes (see [`KGroupedTable`]).
    ///
    /// The table may be an aggregation's (or a `filter`'s, a `map_values`') or a topic's
    /// ([`StreamsBuilder::table`]): grouped, a topic's table is read as a stream of its
    /// updates, as when it is joined with a table (see [`KTable::join`]): a
    /// [`KStream::join_table`] of it then fails at [`StreamsBuilder::build`], and in the test
    /// driver its rows are piped as records (`pipe`, `pipe_input`). A versioned table cannot
    /// be grouped (not supported yet).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// // Orders per customer, kept current as orders are re-assigned or cancelled.
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .table("order-owners", Consumed::with(StringSerde, StringSerde))
    ///     .group_by(|_order, customer: &String| Some((customer.clone(), 1)), Grouped::with(StringSerde, I64Serde))
    ///     .count(Materialized::with(StringSerde, I64Serde).named("orders-per-customer"))
    ///     .to_stream()
    ///     .to("order-counts", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let s = |t: &str| t.to_string();
    /// driver.pipe_input("order-owners", &StringSerde, &StringSerde, &s("o1"), &s("ann"))?;
    /// driver.pipe_input("order-owners", &StringSerde, &StringSerde, &s("o2"), &s("ann"))?;
    /// driver.pipe(TestRecord::new("order-owners", Some("o1"), None::<&str>))?; // o1 cancelled
    /// let out = driver.read_output("order-counts", &StringSerde, &I64Serde)?;
    /// let ann: Vec<_> = out.into_iter().map(|(_, n)| n.unwrap_or_default()).collect();
    /// assert_eq!(ann, [1, 2, 1]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn group_by<K2: Data, V2: Data>(
        &self,
        selector: impl Fn(&K, &V) -> Option<(K2, V2)> + Send + Sync + 'static,
        grouped: Grouped<K2, V2>,
    ) -> KGroupedTable<'b, K2, V2> {
        KGroupedTable::new(self, selector, grouped)
    }
}

impl<'b, K: Data, A: Data> KTable<'b, Windowed<K>, A, WindowStoreHandle<K, A>> {
    /// Names the node that forwards the table's updates (instead of its generated name).
    pub fn named(self, name: impl Into<String>) -> Self {
        Self {
            stream: self.stream.named(name),
            store: self.store,
        }
    }

    /// The table's updates as a stream (Kafka Streams' `toStream`): each window's new
    /// result after every record that changed it, or once per window when it closes
    /// ([`crate::topology::windows::EmitStrategy::OnWindowClose`]).
    pub fn to_stream(&self) -> KStream<'b, Windowed<K>, A> {
        updates(self.stream)
    }

    /// Each window's updates held back and emitted later (Kafka Streams'
    /// `suppress(untilTimeLimit(…))` on a windowed table): as [`KTable::suppress`], keyed by
    /// key and window. For one final result per window use
    /// [`crate::topology::windows::EmitStrategy::OnWindowClose`] on the aggregation instead
    /// (Kafka Streams' `untilWindowCloses`).
    pub fn suppress(&self, suppressed: Suppressed) -> KTable<'b, Windowed<K>, A, SuppressBuffer> {
        let (keys, values) = self.store.store_handle().serde_arcs();
        let keys: std::sync::Arc<dyn crate::serdes::Serde<Windowed<K>>> =
            std::sync::Arc::new(crate::topology::windows::WindowedSerde::new(keys));
        suppress(self.stream, keys, values, suppressed)
    }
}

/// A suppressed table ([`KTable::suppress`]): its updates are what the buffer emits.
impl<'b, K: Data, V: Data> KTable<'b, K, V, SuppressBuffer> {
    /// Names the suppression node (instead of its generated name; its store keeps its name:
    /// use [`Suppressed::named`] to name both).
    pub fn named(self, name: impl Into<String>) -> Self {
        Self {
            stream: self.stream.named(name),
            store: self.store,
        }
    }

    /// The updates the buffer emits, as a stream (Kafka Streams' `toStream`).
    pub fn to_stream(&self) -> KStream<'b, K, V> {
        updates(self.stream)
    }
}

/// A `KTABLE-TOSTREAM-` node passing on what the table's node forwards.
fn updates<'b, K: Data, V: Data>(stream: KStream<'b, K, V>) -> KStream<'b, K, V> {
    stream.then(
        "KTABLE-TOSTREAM-",
        false,
        |_, r, out| {
            out.push(r);
            Ok(())
        },
        None,
    )
}

/// A table read from a compacted topic ([`StreamsBuilder::table`]).
impl<'b, K: Data, V: Data> KTable<'b, K, V, TableHandle<K, V>> {
    /// The table's topic.
    pub fn topic(&self) -> &str {
        self.store.topic()
    }
}

/// A table replicated whole on every instance (Kafka Streams' `GlobalKTable<K, V>`): every
/// partition of its topic, read to the end before processing starts and kept current by a
/// thread of its own. Made by [`StreamsBuilder::global_table`]; joined by any key a stream
/// record maps to ([`KStream::join_global`], [`KStream::left_join_global`]), not only its own,
/// so no co-partitioning is needed — but a stream record sees the table as that thread has
/// brought it so far, not as it was at the record's time (see [`crate::topology::globals`]).
pub struct GlobalKTable<'b, K, V> {
    pub(crate) builder: &'b StreamsBuilder,
    pub(crate) handle: GlobalTableHandle<K, V>,
}

impl<K, V> Clone for GlobalKTable<'_, K, V> {
    fn clone(&self) -> Self {
        Self {
            builder: self.builder,
            handle: self.handle.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for GlobalKTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalKTable")
            .field("handle", &self.handle)
            .finish()
    }
}

impl<K, V> GlobalKTable<'_, K, V> {
    /// The table's handle: its name, topic and serdes (`TopologyTestDriver::pipe_global`
    /// writes rows through it in tests).
    pub fn handle(&self) -> &GlobalTableHandle<K, V> {
        &self.handle
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }
}
