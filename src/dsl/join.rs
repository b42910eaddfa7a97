//! Joins of a [`KStream`]: with a table read from a topic (by key, co-partitioned), with a
//! global table (by any key the record maps to) and with another stream (within windows).

use super::builder::AddFn;
use super::options::StreamJoined;
use super::stream::KStream;
use super::table::{GlobalKTable, KTable};
use super::Data;
use crate::topology::windows::WindowStoreHandle;
use crate::topology::{JoinWindows, StreamJoin, TableHandle};

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

    /// Each record joined with the row of `global` whose key is `key_mapper(key, value)`
    /// (Kafka Streams' `join(GlobalKTable, KeyValueMapper, ValueJoiner)`): `joiner(value,
    /// row)`, keyed by the *stream* record's key. No row, no key or no value: nothing
    /// (counted in `eosflow_join_dropped_records_total`). Any key can be looked up, so the
    /// stream needs no repartition, whatever changed its key. See
    /// [`super::StreamsBuilder::global_table`] for an example.
    pub fn join_global<GK: Data, T: Data, R: Data>(
        &self,
        global: &GlobalKTable<'b, GK, T>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, &T) -> R + Send + Sync + 'static,
    ) -> KStream<'b, K, R> {
        self.check_same_builder(global.builder, "join_global");
        let handle = global.handle.clone();
        let add: AddFn = Box::new(move |b, w| {
            b.add_stream_global_table_join(
                w.name,
                &handle,
                move |k: &K, v: &V| Some(key_mapper(k, v)),
                move |_: &K, v: &V, t: &T| Some(joiner(v, t)),
                &w.parents,
            );
        });
        let id = self.builder.push("KSTREAM-JOIN-", None, vec![self.id], add);
        KStream::new(self.builder, id, self.rekeyed)
    }

    /// [`KStream::join_global`], but a record without a row is joined with `None` (Kafka
    /// Streams' `leftJoin(GlobalKTable, …)`).
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
    ///     .left_join_global(&countries, |_, code| code.clone(), |code, country| {
    ///         country.cloned().unwrap_or_else(|| format!("unknown country {code}"))
    ///     })
    ///     .to("shipments", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("orders", Some("o-2"), Some("xx")))?;
    /// let out = driver.read_output("shipments", &StringSerde, &StringSerde)?;
    /// assert_eq!(out, vec![(Some("o-2".to_string()), Some("unknown country xx".to_string()))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn left_join_global<GK: Data, T: Data, R: Data>(
        &self,
        global: &GlobalKTable<'b, GK, T>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&T>) -> R + Send + Sync + 'static,
    ) -> KStream<'b, K, R> {
        self.check_same_builder(global.builder, "left_join_global");
        let handle = global.handle.clone();
        let add: AddFn = Box::new(move |b, w| {
            b.add_stream_global_table_left_join(
                w.name,
                &handle,
                move |k: &K, v: &V| Some(key_mapper(k, v)),
                move |_: &K, v: &V, t: Option<&T>| Some(joiner(v, t)),
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
    /// by `stores` (changelogged, restored like every store). A record later than its
    /// window's grace joins nothing and goes to its input's DLT as `late-record`. See
    /// [`crate::topology::stream_joins`] for the windows and retention.
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
