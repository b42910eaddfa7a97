//! Joins of a [`KStream`]: with a table read from a topic (by key, co-partitioned), with a
//! global table (by any key the record maps to) and with another stream (within windows); and
//! joins of a [`KTable`] with another table (by key, co-partitioned), into a table.

use std::sync::Arc;

use super::builder::{AddFn, StreamsBuilder};
use super::options::{Joined, Materialized, StreamJoined};
use super::stream::KStream;
use super::table::{GlobalKTable, KTable};
use super::Data;
use crate::processor::StoreHandle;
use crate::serdes::Serde;
use crate::topology::tables::{JoinGrace, Joiner};
use crate::topology::windows::WindowStoreHandle;
use crate::topology::{ForeignKeyJoin, JoinWindows, StreamJoin, TableHandle, TableJoin};

impl<'b, K: Data, V: Data> KStream<'b, K, V> {
    /// Records a mistake when this stream's records are not partitioned by their key (it
    /// changed since): a join by key would miss the rows or records of the other partitions.
    fn check_partitioned(&self, what: &str) {
        if self.rekeyed {
            self.builder.error(format!(
                "{what}: the key of {name} was changed (map, select_key, flat_map or process) since its records were partitioned by it, so a key's records can be in another partition than what they join with; call repartition(Grouped::with(..)) on {name} first",
                name = self.name()
            ));
        }
    }

    /// Records a mistake when `other` is a handle of another builder.
    fn check_same_builder(&self, other: &super::StreamsBuilder, what: &str) {
        if !std::ptr::eq(self.builder, other) {
            self.builder.error(format!(
                "{what} of {}: a handle of another StreamsBuilder",
                self.name()
            ));
        }
    }

    /// Each record joined with its key's row in `table` (Kafka Streams'
    /// `join(KTable, ValueJoiner)`): `joiner(value, row)` keyed by the record's key, with its
    /// timestamp. A record whose key has no row gives nothing (counted in
    /// `eosflow_join_dropped_records_total{reason="no-table-value"}`), nor does one without a
    /// key or a value. Only the stream triggers output: a table update joins nothing by itself.
    ///
    /// The records must be partitioned by their key, as the table is: after a key change
    /// (`map`, `select_key`, `flat_map`, `process`) [`super::StreamsBuilder::build`] fails and
    /// names this stream — call [`KStream::repartition`] first.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// // Orders (keyed by sku, valued by quantity) priced from the `prices` table.
    /// let builder = StreamsBuilder::new();
    /// let prices = builder.table("prices", Consumed::with(StringSerde, I64Serde));
    /// builder
    ///     .stream("orders", Consumed::with(StringSerde, I64Serde))
    ///     .join_table(&prices, |quantity, price| quantity * price)
    ///     .to("totals", Produced::with(StringSerde, I64Serde));
    /// let prices = prices.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe_table(&prices, &"tea".to_string(), Some(&3))?;
    /// driver.pipe_input("orders", &StringSerde, &I64Serde, &"tea".to_string(), &4)?;
    /// driver.pipe_input("orders", &StringSerde, &I64Serde, &"cake".to_string(), &1)?; // no price
    /// let out = driver.read_output("totals", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("tea".to_string()), Some(12))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join_table<T: Data, R: Data>(
        &self,
        table: &KTable<'b, K, T, TableHandle<K, T>>,
        joiner: impl Fn(&V, &T) -> R + Send + Sync + 'static,
    ) -> KStream<'b, K, R> {
        self.check_partitioned(&format!(
            "join_table of {} with table {}",
            self.name(),
            table.name()
        ));
        self.check_same_builder(table.stream.builder, "join_table");
        self.builder.table_lookup(
            table.stream.id,
            format!("join_table of {} with table {}", self.name(), table.name()),
        );
        let handle = table.store().clone();
        let add: AddFn = Box::new(move |b, w| {
            b.add_stream_table_join(
                w.name,
                &handle,
                move |_: &K, v: &V, t: &T| Some(joiner(v, t)),
                &w.parents,
            );
        });
        let id = self.builder.push("KSTREAM-JOIN-", None, vec![self.id], add);
        KStream::new(self.builder, id, false)
    }

    /// Each record joined with its key's row in `table`, or with `None` when the key has no
    /// row (Kafka Streams' `leftJoin(KTable, ValueJoiner)`); otherwise as
    /// [`KStream::join_table`] (records without a key or a value give nothing).
    pub fn left_join_table<T: Data, R: Data>(
        &self,
        table: &KTable<'b, K, T, TableHandle<K, T>>,
        joiner: impl Fn(&V, Option<&T>) -> R + Send + Sync + 'static,
    ) -> KStream<'b, K, R> {
        self.check_partitioned(&format!(
            "left_join_table of {} with table {}",
            self.name(),
            table.name()
        ));
        self.check_same_builder(table.stream.builder, "left_join_table");
        self.builder.table_lookup(
            table.stream.id,
            format!(
                "left_join_table of {} with table {}",
                self.name(),
                table.name()
            ),
        );
        let handle = table.store().clone();
        let add: AddFn = Box::new(move |b, w| {
            b.add_stream_table_left_join(
                w.name,
                &handle,
                move |_: &K, v: &V, t: Option<&T>| Some(joiner(v, t)),
                &w.parents,
            );
        });
        let id = self
            .builder
            .push("KSTREAM-LEFTJOIN-", None, vec![self.id], add);
        KStream::new(self.builder, id, false)
    }

    /// [`KStream::join_table`] with [`Joined`] options (Kafka Streams' `join(KTable,
    /// ValueJoiner, Joined)`): with [`Joined::with_grace_period`], each record waits in a
    /// durable buffer until stream time passes its timestamp by the grace, then joins the
    /// versioned table's row *as of its timestamp*, so table updates up to the grace late are
    /// still seen (see [`Joined`] for an example and the cost). [`super::StreamsBuilder::build`]
    /// fails when the table is not versioned ([`super::StreamsBuilder::versioned_table`]) or
    /// its history is shorter than the grace.
    pub fn join_table_with<T: Data, R: Data>(
        &self,
        table: &KTable<'b, K, T, TableHandle<K, T>>,
        joiner: impl Fn(&V, &T) -> R + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<'b, K, R> {
        self.table_join_with(
            "join_table_with",
            table,
            Box::new(move |_: &K, v: &V, t: Option<&T>| t.map(|t| joiner(v, t))),
            false,
            joined,
        )
    }

    /// [`KStream::left_join_table`] with [`Joined`] options (Kafka Streams' `leftJoin(KTable,
    /// ValueJoiner, Joined)`); the grace period as in [`KStream::join_table_with`].
    pub fn left_join_table_with<T: Data, R: Data>(
        &self,
        table: &KTable<'b, K, T, TableHandle<K, T>>,
        joiner: impl Fn(&V, Option<&T>) -> R + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<'b, K, R> {
        self.table_join_with(
            "left_join_table_with",
            table,
            Box::new(move |_: &K, v: &V, t: Option<&T>| Some(joiner(v, t))),
            true,
            joined,
        )
    }

    /// The node of [`KStream::join_table_with`] and [`KStream::left_join_table_with`].
    fn table_join_with<T: Data, R: Data>(
        &self,
        what: &str,
        table: &KTable<'b, K, T, TableHandle<K, T>>,
        joiner: Joiner<K, V, T, R>,
        left: bool,
        joined: Joined<K, V>,
    ) -> KStream<'b, K, R> {
        let describe = format!("{what} of {} with table {}", self.name(), table.name());
        self.check_partitioned(&describe);
        self.check_same_builder(table.stream.builder, what);
        self.builder.table_lookup(table.stream.id, describe);
        let handle = table.store().clone();
        let Joined {
            keys,
            values,
            grace,
            name,
        } = joined;
        let add: AddFn = Box::new(move |b, w| {
            let grace = grace.map(|g| JoinGrace::new(g, keys, values));
            b.add_stream_table_join_with(w.name, &handle, joiner, left, grace, &w.parents);
        });
        let prefix = if left {
            "KSTREAM-LEFTJOIN-"
        } else {
            "KSTREAM-JOIN-"
        };
        let id = self.builder.push(prefix, name, vec![self.id], add);
        KStream::new(self.builder, id, false)
    }

    /// Each record joined with the row of `global` whose key is `key_mapper(key, value)`
    /// (Kafka Streams' `join(GlobalKTable, KeyValueMapper, ValueJoiner)`): `joiner(value,
    /// row)`, keyed by the *stream* record's key. The mapper gets the key as an `Option`: a
    /// record without a key is joined too when its value names the row (Kafka Streams 3.7,
    /// KIP-962), and its result has no key. No row or no value: nothing (counted in
    /// `eosflow_join_dropped_records_total`). Any key can be looked up, so the stream needs
    /// no repartition, whatever changed its key. See [`super::StreamsBuilder::global_table`]
    /// for an example.
    pub fn join_global<GK: Data, T: Data, R: Data>(
        &self,
        global: &GlobalKTable<'b, GK, T>,
        key_mapper: impl Fn(Option<&K>, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, &T) -> R + Send + Sync + 'static,
    ) -> KStream<'b, K, R> {
        self.check_same_builder(global.builder, "join_global");
        let handle = global.handle.clone();
        let add: AddFn = Box::new(move |b, w| {
            b.add_stream_global_table_join(
                w.name,
                &handle,
                move |k: Option<&K>, v: &V| Some(key_mapper(k, v)),
                move |_: Option<&K>, v: &V, t: &T| Some(joiner(v, t)),
                &w.parents,
            );
        });
        let id = self.builder.push("KSTREAM-JOIN-", None, vec![self.id], add);
        KStream::new(self.builder, id, self.rekeyed)
    }

    /// [`KStream::join_global`], but a record without a row is joined with `None` (Kafka
    /// Streams' `leftJoin(GlobalKTable, …)`). A keyless record is joined as by `join_global`.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// let builder = StreamsBuilder::new();
    /// let countries = builder.global_table("countries", Consumed::with(StringSerde, StringSerde));
    /// builder
    ///     .stream("orders", Consumed::with(StringSerde, StringSerde))
    ///     .left_join_global(&countries, |_order, code| code.clone(), |code, country| {
    ///         country.cloned().unwrap_or_else(|| format!("unknown country {code}"))
    ///     })
    ///     .to("shipments", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("orders", Some("o-2"), Some("xx")))?;
    /// // A record without a key is joined too (the mapper gets `None`), its result keyless.
    /// driver.pipe(TestRecord::new("orders", None::<&str>, Some("yy")))?;
    /// let out = driver.read_output("shipments", &StringSerde, &StringSerde)?;
    /// assert_eq!(out, vec![
    ///     (Some("o-2".to_string()), Some("unknown country xx".to_string())),
    ///     (None, Some("unknown country yy".to_string())),
    /// ]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn left_join_global<GK: Data, T: Data, R: Data>(
        &self,
        global: &GlobalKTable<'b, GK, T>,
        key_mapper: impl Fn(Option<&K>, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&T>) -> R + Send + Sync + 'static,
    ) -> KStream<'b, K, R> {
        self.check_same_builder(global.builder, "left_join_global");
        let handle = global.handle.clone();
        let add: AddFn = Box::new(move |b, w| {
            b.add_stream_global_table_left_join(
                w.name,
                &handle,
                move |k: Option<&K>, v: &V| Some(key_mapper(k, v)),
                move |_: Option<&K>, v: &V, t: Option<&T>| Some(joiner(v, t)),
                &w.parents,
            );
        });
        let id = self
            .builder
            .push("KSTREAM-LEFTJOIN-", None, vec![self.id], add);
        KStream::new(self.builder, id, self.rekeyed)
    }

    /// Each pair of records of this stream and `other` with the same key and event times
    /// within `windows` (Kafka Streams' `join(KStream, ValueJoiner, JoinWindows,
    /// StreamJoined)`): `joiner(value, other_value)`, stamped with the later of the two
    /// times. Either side triggers results; each side is buffered in a windowed store named
    /// by `stores` (changelogged, restored like every store). A record behind stream time
    /// still joins the other side's records in its window that are buffered; one that joins
    /// nothing and that no later record could find any more goes to its input's DLT as
    /// `late-record`. See [`crate::topology::stream_joins`] for the windows and retention.
    ///
    /// Both streams must be partitioned by their key: after a key change
    /// [`super::StreamsBuilder::build`] fails and names the stream — repartition it first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::dsl::{Consumed, Produced, StreamJoined, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::JoinWindows;
    ///
    /// // Ad impressions and the clicks on them, at most 10 s apart.
    /// let builder = StreamsBuilder::new();
    /// let shown = builder.stream("impressions", Consumed::with(StringSerde, StringSerde));
    /// let clicks = builder.stream("clicks", Consumed::with(StringSerde, StringSerde));
    /// shown
    ///     .join_stream(
    ///         &clicks,
    ///         |imp, click| format!("{imp}+{click}"),
    ///         JoinWindows::of_time_difference_no_grace(Duration::from_secs(10)),
    ///         StreamJoined::with(StringSerde, StringSerde, StringSerde).named("shown-clicked"),
    ///     )
    ///     .to("clicked", Produced::with(StringSerde, StringSerde));
    /// let topology = builder.build()?;
    /// assert!(topology.changelog_topics("ads").contains(&"ads-shown-clicked-this-join-store-changelog".to_string()));
    ///
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// let at = |topic: &str, v: &str, ms: i64| TestRecord::new(topic, Some("ad-1"), Some(v)).timestamp(ms);
    /// driver.pipe(at("impressions", "i1", 1_000))?;
    /// driver.pipe(at("clicks", "c1", 4_000))?; // 3 s later: joins
    /// driver.pipe(at("clicks", "c2", 30_000))?; // 29 s later: does not
    /// let out = driver.read_output("clicked", &StringSerde, &StringSerde)?;
    /// assert_eq!(out, vec![(Some("ad-1".to_string()), Some("i1+c1".to_string()))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join_stream<V2: Data, R: Data>(
        &self,
        other: &KStream<'b, K, V2>,
        joiner: impl Fn(&V, &V2) -> R + Send + Sync + 'static,
        windows: JoinWindows,
        stores: StreamJoined<K, V, V2>,
    ) -> KStream<'b, K, R> {
        self.stream_join(
            "KSTREAM-JOIN-",
            "join_stream",
            other,
            stores,
            move |this, that| {
                StreamJoin::inner(windows, this, that, move |_: &K, v: &V, o: &V2| {
                    Some(joiner(v, o))
                })
            },
        )
    }

    /// [`KStream::join_stream`], and each record of this stream that joined nothing as
    /// `joiner(value, None)` once no record of `other` can join it any more (its window and
    /// grace are over, by a durable timer: final, never contradicted by a later pair; Kafka
    /// Streams' `leftJoin(KStream, …)`).
    pub fn left_join_stream<V2: Data, R: Data>(
        &self,
        other: &KStream<'b, K, V2>,
        joiner: impl Fn(&V, Option<&V2>) -> R + Send + Sync + 'static,
        windows: JoinWindows,
        stores: StreamJoined<K, V, V2>,
    ) -> KStream<'b, K, R> {
        self.stream_join(
            "KSTREAM-LEFTJOIN-",
            "left_join_stream",
            other,
            stores,
            move |this, that| {
                StreamJoin::left(windows, this, that, move |_: &K, v: &V, o: Option<&V2>| {
                    Some(joiner(v, o))
                })
            },
        )
    }

    /// [`KStream::join_stream`], and each record of either side that joined nothing, with
    /// `None` for the other side, once its window and grace are over (Kafka Streams'
    /// `outerJoin(KStream, …)`).
    pub fn outer_join_stream<V2: Data, R: Data>(
        &self,
        other: &KStream<'b, K, V2>,
        joiner: impl Fn(Option<&V>, Option<&V2>) -> R + Send + Sync + 'static,
        windows: JoinWindows,
        stores: StreamJoined<K, V, V2>,
    ) -> KStream<'b, K, R> {
        self.stream_join(
            "KSTREAM-OUTERJOIN-",
            "outer_join_stream",
            other,
            stores,
            move |this, that| {
                StreamJoin::outer(
                    windows,
                    this,
                    that,
                    move |_: &K, v: Option<&V>, o: Option<&V2>| Some(joiner(v, o)),
                )
            },
        )
    }

    /// One stream-stream join step: its nodes (`<name>-left`, `<name>-right`, `<name>`) and
    /// the two stores, named once the node's final name is known.
    fn stream_join<V2: Data, R: Data>(
        &self,
        prefix: &str,
        what: &str,
        other: &KStream<'b, K, V2>,
        stores: StreamJoined<K, V, V2>,
        make: impl FnOnce(WindowStoreHandle<K, V>, WindowStoreHandle<K, V2>) -> StreamJoin<K, V, V2, R>
            + Send
            + 'static,
    ) -> KStream<'b, K, R> {
        let join = format!("{what} of {} with {}", self.name(), other.name());
        self.check_partitioned(&join);
        other.check_partitioned(&join);
        self.check_same_builder(other.builder, what);
        let StreamJoined {
            keys,
            values,
            other_values,
            name,
        } = stores;
        let add: AddFn = Box::new(move |b, w| {
            let base = name.as_deref().unwrap_or(w.name);
            let this =
                WindowStoreHandle::new(format!("{base}-this-join-store"), keys.clone(), values);
            let that =
                WindowStoreHandle::new(format!("{base}-other-join-store"), keys, other_values);
            let left = w.parents.first().copied().unwrap_or_default();
            let right = w.parents.get(1).copied().unwrap_or_default();
            b.add_stream_stream_join(w.name, make(this, that), &[left], &[right]);
        });
        let id = self
            .builder
            .push(prefix, None, vec![self.id, other.id], add);
        KStream::new(self.builder, id, false)
    }
}

/// A table another table can be joined with by key ([`KTable::join`], [`KTable::left_join`],
/// [`KTable::outer_join`]): the result of an aggregation or of a table operation
/// ([`StoreHandle`]), or a table read from a topic ([`TableHandle`]). Windowed tables are
/// not: their keys are windows. Sealed: implemented by those two only.
pub trait JoinableTable<K, V>: sealed::Sealed {
    /// The serdes of the table's keys and rows: the join keeps a copy of each row in a
    /// changelogged store of its own, written with them.
    #[doc(hidden)]
    fn row_serdes(&self) -> (Arc<dyn Serde<K>>, Arc<dyn Serde<V>>);

    /// Makes step `step` (this table) forward its updates to the join `what`, or records
    /// why it cannot.
    #[doc(hidden)]
    fn prepare_join(&self, builder: &StreamsBuilder, step: usize, what: &str);
}

mod sealed {
    /// Keeps [`super::JoinableTable`] to the DSL's own table stores.
    pub trait Sealed {}
    impl<K, V> Sealed for crate::processor::StoreHandle<K, V> {}
    impl<K, V> Sealed for crate::topology::TableHandle<K, V> {}
}

/// An aggregation's or a table operation's result: its node forwards every update already.
impl<K, V> JoinableTable<K, V> for StoreHandle<K, V> {
    fn row_serdes(&self) -> (Arc<dyn Serde<K>>, Arc<dyn Serde<V>>) {
        self.serde_arcs()
    }

    fn prepare_join(&self, _: &StreamsBuilder, _: usize, _: &str) {}
}

/// A table read from a topic: joined with a table, its topic is read by a source that
/// forwards each upsert and tombstone (see [`KTable::join`]).
impl<K, V> JoinableTable<K, V> for TableHandle<K, V> {
    fn row_serdes(&self) -> (Arc<dyn Serde<K>>, Arc<dyn Serde<V>>) {
        self.store().serde_arcs()
    }

    fn prepare_join(&self, builder: &StreamsBuilder, step: usize, what: &str) {
        if self.history().is_some() {
            builder.error(format!(
                "{what}: table {} is versioned, and a table-table join keeps latest rows only (not supported yet: read its topic with builder.table)",
                self.name()
            ));
        }
        builder.read_as_updates(step);
    }
}

impl<'b, K: Data, V: Data, S: JoinableTable<K, V>> KTable<'b, K, V, S> {
    /// This table joined with `other` by key (Kafka Streams' `KTable.join(KTable, joiner,
    /// Materialized)`): a table with a row `joiner(row, other_row)` for each key both tables
    /// have, kept in the store `materialized` names and forwarded on every change
    /// ([`KTable::to_stream`]). An update of either table recomputes its key's row; when the
    /// key leaves either table its row is deleted and a tombstone forwarded. See
    /// [`crate::topology::table_joins`] for timestamps, causes and what is emitted.
    ///
    /// Either table may be an aggregation's (or a `filter`'s, a `map_values`') or a topic's
    /// ([`super::StreamsBuilder::table`]). Joined with a table, a topic's table is read by a
    /// source that forwards each upsert and tombstone (so a record its serdes cannot read goes
    /// to the topic's DLT), its rows kept by the join; it is then no longer materialized as a
    /// table a stream looks rows up in: a [`KStream::join_table`] of it fails at
    /// [`super::StreamsBuilder::build`], and in the test driver its rows are piped as records
    /// (`pipe`, `pipe_input`), not with `pipe_table`. Both tables must be co-partitioned
    /// (keyed alike, the same partition count: the runtime checks it at start), and neither
    /// re-keyed since it was partitioned.
    ///
    /// The join keeps each table's rows in stores of its own, `<name>-left-rows` and
    /// `<name>-right-rows` beside the result's `<name>`, each with its changelog.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // Each customer's order count beside the name from the compacted `customers` topic.
    /// let builder = StreamsBuilder::new();
    /// let names = builder.table("customers", Consumed::with(StringSerde, StringSerde));
    /// let orders = builder
    ///     .stream("orders", Consumed::with(StringSerde, StringSerde))
    ///     .group_by_key()
    ///     .count(Materialized::with(StringSerde, I64Serde).named("order-counts"));
    /// let summary = names.join(
    ///     &orders,
    ///     |name, n| format!("{name}: {n} orders"),
    ///     Materialized::with(StringSerde, StringSerde).named("summaries"),
    /// );
    /// summary.to_stream().to("summaries", Produced::with(StringSerde, StringSerde));
    /// let store = summary.store().clone();
    ///
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let (c1, s) = ("c1".to_string(), |v: &str| v.to_string());
    /// driver.pipe_input("orders", &StringSerde, &StringSerde, &c1, &s("o-1"))?; // no name yet
    /// driver.pipe_input("customers", &StringSerde, &StringSerde, &c1, &s("Ann"))?;
    /// driver.pipe_input("orders", &StringSerde, &StringSerde, &c1, &s("o-2"))?;
    /// driver.pipe(eosflow::testing::TestRecord::new("customers", Some("c1"), None::<&str>))?;
    /// let out = driver.read_output("summaries", &StringSerde, &StringSerde)?;
    /// assert_eq!(
    ///     out,
    ///     vec![
    ///         (Some(c1.clone()), Some(s("Ann: 1 orders"))),
    ///         (Some(c1.clone()), Some(s("Ann: 2 orders"))),
    ///         (Some(c1.clone()), None), // the customer deleted: the row goes
    ///     ]
    /// );
    /// assert_eq!(driver.store_get(&store, &c1)?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join<V2: Data, S2: JoinableTable<K, V2>, R: Data>(
        &self,
        other: &KTable<'b, K, V2, S2>,
        joiner: impl Fn(&V, &V2) -> R + Send + Sync + 'static,
        materialized: Materialized<K, R>,
    ) -> KTable<'b, K, R> {
        self.table_join(
            "KTABLE-JOIN-",
            "join",
            other,
            materialized,
            move |l, r, out| {
                TableJoin::inner(l, r, out, move |_: &K, v: &V, o: &V2| Some(joiner(v, o)))
            },
        )
    }

    /// This table left-joined with `other` by key (Kafka Streams' `KTable.leftJoin`): a row
    /// `joiner(row, other_row)` for each key of this table, with `None` while `other` lacks
    /// the key; deleted (a tombstone forwarded) when the key leaves this table. Otherwise as
    /// [`KTable::join`].
    pub fn left_join<V2: Data, S2: JoinableTable<K, V2>, R: Data>(
        &self,
        other: &KTable<'b, K, V2, S2>,
        joiner: impl Fn(&V, Option<&V2>) -> R + Send + Sync + 'static,
        materialized: Materialized<K, R>,
    ) -> KTable<'b, K, R> {
        self.table_join(
            "KTABLE-LEFTJOIN-",
            "left_join",
            other,
            materialized,
            move |l, r, out| {
                TableJoin::left(l, r, out, move |_: &K, v: &V, o: Option<&V2>| {
                    Some(joiner(v, o))
                })
            },
        )
    }

    /// This table outer-joined with `other` by key (Kafka Streams' `KTable.outerJoin`): a row
    /// `joiner(row, other_row)` for each key of either table, with `None` for the table that
    /// lacks it; deleted (a tombstone forwarded) when the key has left both. Otherwise as
    /// [`KTable::join`].
    pub fn outer_join<V2: Data, S2: JoinableTable<K, V2>, R: Data>(
        &self,
        other: &KTable<'b, K, V2, S2>,
        joiner: impl Fn(Option<&V>, Option<&V2>) -> R + Send + Sync + 'static,
        materialized: Materialized<K, R>,
    ) -> KTable<'b, K, R> {
        self.table_join(
            "KTABLE-OUTERJOIN-",
            "outer_join",
            other,
            materialized,
            move |l, r, out| {
                TableJoin::outer(l, r, out, move |_: &K, v: Option<&V>, o: Option<&V2>| {
                    Some(joiner(v, o))
                })
            },
        )
    }

    /// One table-table join step: its nodes (`<name>-left`, `<name>-right`, `<name>`) and its
    /// three stores, named after the result's store.
    fn table_join<V2: Data, S2: JoinableTable<K, V2>, R: Data>(
        &self,
        prefix: &str,
        what: &str,
        other: &KTable<'b, K, V2, S2>,
        materialized: Materialized<K, R>,
        make: impl FnOnce(
            StoreHandle<K, V>,
            StoreHandle<K, V2>,
            StoreHandle<K, R>,
        ) -> TableJoin<K, V, V2, R>,
    ) -> KTable<'b, K, R> {
        self.join_tables(prefix, what, other, materialized, |l, r, out| {
            let joined = make(l, r, out);
            Box::new(move |b, w| {
                let left = w.parents.first().copied().unwrap_or_default();
                let right = w.parents.get(1).copied().unwrap_or(left);
                b.add_table_table_join(w.name, joined, &[left], &[right]);
            })
        })
    }

    /// The step of a join of this table with `other` into a table (by key, or by a foreign
    /// key): the checks both tables must pass, the stores of each side's rows
    /// (`<name>-left-rows`, `<name>-right-rows`) and of the result (`<name>`, as `materialized`
    /// names it), and the nodes `wire` adds given those stores.
    fn join_tables<K2: Data, V2: Data, S2: JoinableTable<K2, V2>, R: Data>(
        &self,
        prefix: &str,
        what: &str,
        other: &KTable<'b, K2, V2, S2>,
        materialized: Materialized<K, R>,
        wire: impl FnOnce(StoreHandle<K, V>, StoreHandle<K2, V2>, StoreHandle<K, R>) -> AddFn,
    ) -> KTable<'b, K, R> {
        let join = format!(
            "{what} of table {} with table {}",
            self.name(),
            other.name()
        );
        self.stream.check_partitioned(&join);
        other.stream.check_partitioned(&join);
        self.stream.check_same_builder(other.stream.builder, what);
        let builder = self.stream.builder;
        self.store.prepare_join(builder, self.stream.id, &join);
        other.store.prepare_join(builder, other.stream.id, &join);
        let Materialized { keys, values, name } = materialized;
        let name = name.unwrap_or_else(|| builder.next_name(&format!("{prefix}STATE-STORE-")));
        let result = StoreHandle::new(name.as_str(), keys, values);
        let (left_keys, left_rows) = self.store.row_serdes();
        let (right_keys, right_rows) = other.store.row_serdes();
        let left = StoreHandle::new(format!("{name}-left-rows"), left_keys, left_rows);
        let right = StoreHandle::new(format!("{name}-right-rows"), right_keys, right_rows);
        let add = wire(left, right, result.clone());
        let id = builder.push(prefix, None, vec![self.stream.id, other.stream.id], add);
        KTable::new(KStream::new(builder, id, false), result)
    }
}

impl<'b, K: Data, V: Data, S: JoinableTable<K, V>> KTable<'b, K, V, S> {
    /// This table joined with `other` by a **foreign key** (Kafka Streams' KIP-213,
    /// `KTable.join(other, foreignKeyExtractor, joiner, Materialized)`): each row names a key of
    /// `other` through `foreign_key` (`None`: it names none), and the result is a table keyed
    /// like this one with a row `joiner(row, other_row)` for each row whose foreign key names a
    /// row of `other`, kept in the store `materialized` names and forwarded on every change. It
    /// follows updates of either table, a row moving to another foreign key (its old result is
    /// replaced or retracted) and tombstones. See [`crate::topology::fk_join`] for how the two
    /// tables meet (two repartition topics named after the join) and what is eventually
    /// consistent.
    ///
    /// The tables may be keyed differently; their topics need the same partition count (the
    /// runtime checks it at start). The join keeps each table's rows in stores of its own,
    /// `<name>-left-rows` and `<name>-right-rows`, and the subscriptions in
    /// `<name>-subscriptions`, beside the result's `<name>`.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// // Orders ("customer:item" by order id) with their customer's name.
    /// let builder = StreamsBuilder::new();
    /// let orders = builder.table("orders", Consumed::with(StringSerde, StringSerde));
    /// let customers = builder.table("customers", Consumed::with(StringSerde, StringSerde));
    /// let enriched = orders.join_on_foreign_key(
    ///     &customers,
    ///     |order: &String| order.split_once(':').map(|(c, _)| c.to_string()),
    ///     |order, name| format!("{order} for {name}"),
    ///     Materialized::with(StringSerde, StringSerde).named("enriched-orders"),
    /// );
    /// enriched.to_stream().to("enriched", Produced::with(StringSerde, StringSerde));
    ///
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("customers", Some("c1"), Some("Ann")))?;
    /// driver.pipe(TestRecord::new("orders", Some("o1"), Some("c1:book")))?;
    /// driver.pipe(TestRecord::new("customers", Some("c1"), Some("Ann B.")))?;
    /// let out = driver.read_output("enriched", &StringSerde, &StringSerde)?;
    /// let values: Vec<Option<String>> = out.into_iter().map(|(_, v)| v).collect();
    /// assert_eq!(values, [Some("c1:book for Ann".into()), Some("c1:book for Ann B.".into())]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join_on_foreign_key<KO: Data, VO: Data, SO: JoinableTable<KO, VO>, R: Data>(
        &self,
        other: &KTable<'b, KO, VO, SO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> R + Send + Sync + 'static,
        materialized: Materialized<K, R>,
    ) -> KTable<'b, K, R> {
        self.foreign_key_join(
            "KTABLE-FK-JOIN-",
            "join_on_foreign_key",
            other,
            materialized,
            move |l, r, out| {
                ForeignKeyJoin::inner(l, r, out, foreign_key, move |_: &K, v: &V, o: &VO| {
                    Some(joiner(v, o))
                })
            },
        )
    }

    /// This table left-joined with `other` by a foreign key (Kafka Streams'
    /// `KTable.leftJoin(other, foreignKeyExtractor, joiner)`): a row `joiner(row, other_row)`
    /// for each row of this table, with `None` while its foreign key names no row of `other`
    /// (or it has none); deleted when the row leaves this table. Otherwise as
    /// [`KTable::join_on_foreign_key`].
    pub fn left_join_on_foreign_key<KO: Data, VO: Data, SO: JoinableTable<KO, VO>, R: Data>(
        &self,
        other: &KTable<'b, KO, VO, SO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> R + Send + Sync + 'static,
        materialized: Materialized<K, R>,
    ) -> KTable<'b, K, R> {
        self.foreign_key_join(
            "KTABLE-FK-LEFTJOIN-",
            "left_join_on_foreign_key",
            other,
            materialized,
            move |l, r, out| {
                ForeignKeyJoin::left(
                    l,
                    r,
                    out,
                    foreign_key,
                    move |_: &K, v: &V, o: Option<&VO>| Some(joiner(v, o)),
                )
            },
        )
    }

    /// One foreign-key join step: its nodes (see
    /// [`crate::topology::TopologyBuilder::add_foreign_key_join`]) and its stores, named after
    /// the result's store.
    fn foreign_key_join<KO: Data, VO: Data, SO: JoinableTable<KO, VO>, R: Data>(
        &self,
        prefix: &str,
        what: &str,
        other: &KTable<'b, KO, VO, SO>,
        materialized: Materialized<K, R>,
        make: impl FnOnce(
            StoreHandle<K, V>,
            StoreHandle<KO, VO>,
            StoreHandle<K, R>,
        ) -> ForeignKeyJoin<K, V, KO, VO, R>,
    ) -> KTable<'b, K, R> {
        self.join_tables(prefix, what, other, materialized, |l, r, out| {
            let joined = make(l, r, out);
            Box::new(move |b, w| {
                let left = w.parents.first().copied().unwrap_or_default();
                let right = w.parents.get(1).copied().unwrap_or(left);
                b.add_foreign_key_join(w.name, joined, &[left], &[right]);
            })
        })
    }
}
