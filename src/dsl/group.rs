//! Grouped streams and their aggregations: [`KGroupedStream`] (per key, into a key-value
//! store), [`TimeWindowedKStream`] and [`SessionWindowedKStream`] (per key and window, into a
//! windowed store), each resulting in a [`KTable`].

use std::sync::Arc;

use super::builder::AddFn;
use super::cogroup::CogroupedKStream;
use super::options::Materialized;
use super::stream::KStream;
use super::table::KTable;
use super::Data;
use crate::record::ProcessError;
use crate::serdes::{Serde, SerdeError};
use crate::topology::windows::{
    EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, WindowStoreHandle, Windowed,
    WindowedAggregate,
};
use crate::topology::TypedRecord;

/// A stream grouped by key, ready to be aggregated (Kafka Streams' `KGroupedStream<K, V>`):
/// made by [`KStream::group_by_key`] or [`KStream::group_by`].
///
/// Each aggregation keeps its state in a named store ([`Materialized`]): RocksDB per
/// partition, changelogged in the transaction of the record that changed it. Its closures
/// are `Fn`: whatever they capture is shared by every key and never part of the state, so the
/// state is only what the store holds — what makes a crash, a retry or a rebalance give the
/// same counts as a clean run.
pub struct KGroupedStream<'b, K, V> {
    stream: KStream<'b, K, V>,
}

impl<K, V> std::fmt::Debug for KGroupedStream<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedStream")
            .field("stream", &self.stream)
            .finish()
    }
}

/// A fold step: the new aggregate of a key from its value and the key's aggregate so far.
type Fold<K, V, A> = dyn Fn(&K, &V, Option<A>) -> Result<A, ProcessError> + Send + Sync;

impl<'b, K: Data, V: Data> KGroupedStream<'b, K, V> {
    pub(crate) fn new(stream: KStream<'b, K, V>) -> Self {
        Self { stream }
    }

    /// The grouped records.
    pub(crate) fn stream(&self) -> KStream<'b, K, V> {
        self.stream
    }

    /// Starts a cogroup (Kafka Streams' `cogroup(aggregator)`): this stream's records fold
    /// into an aggregate of type `A` with `aggregator(key, value, aggregate)`, beside other
    /// grouped streams added with [`CogroupedKStream::cogroup`], each with its own value type
    /// and aggregator; [`CogroupedKStream::aggregate`] makes the table.
    pub fn cogroup<A: Data>(
        &self,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
    ) -> CogroupedKStream<'b, K, A> {
        CogroupedKStream::new(self.stream, aggregator)
    }

    /// How many records each key has had (Kafka Streams' `count`): a table of the counts,
    /// which forwards each key's new count after every record.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// let clicks = builder
    ///     .stream("clicks", Consumed::with(StringSerde, StringSerde))
    ///     .group_by_key()
    ///     .count(Materialized::with(StringSerde, I64Serde).named("clicks-per-user"));
    /// let store = clicks.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for page in ["/a", "/b", "/a"] {
    ///     driver.pipe_input("clicks", &StringSerde, &StringSerde, &"ann".to_string(), &page.to_string())?;
    /// }
    /// assert_eq!(driver.store_get(&store, &"ann".to_string())?, Some(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count(&self, materialized: Materialized<K, i64>) -> KTable<'b, K, i64> {
        let fold = |_: &K, _: &V, n: Option<i64>| Ok(n.unwrap_or(0) + 1);
        self.fold("KSTREAM-AGGREGATE-", materialized, Box::new(fold))
    }

    /// Each key's values combined with `reducer(aggregate, value)`, the first value as it is
    /// (Kafka Streams' `reduce`).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("amounts", Consumed::with(StringSerde, I64Serde))
    ///     .group_by_key()
    ///     .reduce(|total, amount| total + amount, Materialized::with(StringSerde, I64Serde))
    ///     .to_stream()
    ///     .to("totals", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for amount in [5, 7] {
    ///     driver.pipe_input("amounts", &StringSerde, &I64Serde, &"a".to_string(), &amount)?;
    /// }
    /// let totals = driver.read_output("totals", &StringSerde, &I64Serde)?;
    /// assert_eq!(totals, vec![(Some("a".into()), Some(5)), (Some("a".into()), Some(12))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reduce(
        &self,
        reducer: impl Fn(V, &V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, K, V> {
        let fold = move |_: &K, v: &V, acc: Option<V>| {
            Ok(match acc {
                Some(acc) => reducer(acc, v),
                None => v.clone(),
            })
        };
        self.fold("KSTREAM-REDUCE-", materialized, Box::new(fold))
    }

    /// Each key's values folded into an aggregate: `init()` for a key's first record, then
    /// `aggregator(key, value, aggregate)` for each (Kafka Streams' `aggregate`).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, StreamsBuilder};
    /// use eosflow::serdes::{JsonSerde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// // The distinct pages each user visited, in first-visit order.
    /// let builder = StreamsBuilder::new();
    /// let pages = builder
    ///     .stream("clicks", Consumed::with(StringSerde, StringSerde))
    ///     .group_by_key()
    ///     .aggregate(
    ///         Vec::new,
    ///         |_user, page: &String, mut seen: Vec<String>| {
    ///             if !seen.contains(page) {
    ///                 seen.push(page.clone());
    ///             }
    ///             seen
    ///         },
    ///         Materialized::with(StringSerde, JsonSerde::new()),
    ///     );
    /// let store = pages.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for page in ["/a", "/b", "/a"] {
    ///     driver.pipe_input("clicks", &StringSerde, &StringSerde, &"ann".to_string(), &page.to_string())?;
    /// }
    /// assert_eq!(driver.store_get(&store, &"ann".to_string())?, Some(vec!["/a".into(), "/b".into()]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn aggregate<A: Data>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, K, A> {
        self.try_aggregate(
            move || Ok(init()),
            move |k, v, a| Ok(aggregator(k, v, a)),
            materialized,
        )
    }

    /// [`KGroupedStream::aggregate`] with an initializer and aggregator that can fail: an
    /// error leaves the key's aggregate as it was and sends the record up the retry ladder
    /// (transient) or to the dead-letter topic (permanent).
    pub fn try_aggregate<A: Data>(
        &self,
        init: impl Fn() -> Result<A, ProcessError> + Send + Sync + 'static,
        aggregator: impl Fn(&K, &V, A) -> Result<A, ProcessError> + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, K, A> {
        let fold = move |k: &K, v: &V, acc: Option<A>| {
            let acc = match acc {
                Some(acc) => acc,
                None => init()?,
            };
            aggregator(k, v, acc)
        };
        self.fold("KSTREAM-AGGREGATE-", materialized, Box::new(fold))
    }

    /// One aggregation node over a key-value store: reads the key's aggregate, folds the
    /// record in, writes it back and forwards it — all in the input record's transaction.
    fn fold<A: Data>(
        &self,
        prefix: &str,
        materialized: Materialized<K, A>,
        fold: Box<Fold<K, V, A>>,
    ) -> KTable<'b, K, A> {
        let (store, attach) = materialized.key_value_store(self.stream.builder, prefix);
        let handle = store.clone();
        let stream = self.stream.then(
            prefix,
            false,
            move |ctx, r, out| {
                let (Some(key), Some(value)) = (&r.key, &r.value) else {
                    return Err(ProcessError::permanent(format!(
                        "{} aggregates into store {} by key: a record without a key or a value cannot be aggregated",
                        ctx.node_name(),
                        handle.name()
                    )));
                };
                let mut s = ctx.store(&handle)?;
                let agg = fold(key, value, s.get(key)?)?;
                s.put(key, &agg)?;
                out.push(TypedRecord {
                    key: r.key,
                    value: Some(agg),
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
                Ok(())
            },
            Some(attach),
        );
        KTable::new(stream, store)
    }

    /// The records grouped by key and by fixed event-time windows — tumbling or hopping —
    /// (Kafka Streams' `windowedBy(TimeWindows)`), for [`TimeWindowedKStream::count`] or
    /// [`TimeWindowedKStream::aggregate`]. See [`crate::topology::windows`] for stream time,
    /// grace and late records.
    pub fn windowed_by(&self, windows: TimeWindows) -> TimeWindowedKStream<'b, K, V> {
        TimeWindowedKStream {
            stream: self.stream,
            windows: FixedOrSliding::Fixed(windows),
            emit: EmitStrategy::default(),
        }
    }

    /// The records grouped by key and by sliding windows (Kafka Streams'
    /// `windowedBy(SlidingWindows)`, which also gives a `TimeWindowedKStream`): for each key,
    /// one window per distinct set of records within the time difference of each other. See
    /// [`SlidingWindows`] for which windows exist and when they close.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::windows::{EmitStrategy, SlidingWindows, Windowed, WindowedSerde};
    ///
    /// // Payments per card within 10 s of each other, the final count of each window.
    /// let ten = SlidingWindows::of_time_difference_no_grace(Duration::from_secs(10));
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("payments", Consumed::with(StringSerde, StringSerde))
    ///     .group_by_key()
    ///     .windowed_by_sliding(ten)
    ///     .emit_strategy(EmitStrategy::OnWindowClose)
    ///     .count(Materialized::with(StringSerde, I64Serde).named("payments-within-10s"))
    ///     .to_stream()
    ///     .to("bursts", Produced::with(WindowedSerde::new(StringSerde), I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for ms in [50_000, 55_000, 90_000] {
    ///     driver.pipe(TestRecord::new("payments", Some("card-1"), Some("9.99")).timestamp(ms))?;
    /// }
    /// let out = driver.read_output("bursts", &WindowedSerde::new(StringSerde), &I64Serde)?;
    /// let w = |start, end| Some(Windowed::new("card-1".to_string(), start, end));
    /// assert_eq!(
    ///     out,
    ///     vec![
    ///         (w(40_000, 50_000), Some(1)),
    ///         (w(45_000, 55_000), Some(2)),
    ///         (w(50_001, 60_001), Some(1)), // 50 s's right window: 55 s alone
    ///     ]
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn windowed_by_sliding(&self, windows: SlidingWindows) -> TimeWindowedKStream<'b, K, V> {
        TimeWindowedKStream {
            stream: self.stream,
            windows: FixedOrSliding::Sliding(windows),
            emit: EmitStrategy::default(),
        }
    }

    /// The records grouped by key and by session (Kafka Streams'
    /// `windowedBy(SessionWindows)`): a key's records closer than the inactivity gap form one
    /// session.
    pub fn windowed_by_session(&self, windows: SessionWindows) -> SessionWindowedKStream<'b, K, V> {
        SessionWindowedKStream {
            stream: self.stream,
            windows,
            emit: EmitStrategy::default(),
        }
    }
}

/// Adds a windowed aggregate node over `stream` into the windowed store that `materialized`
/// names, and returns its table of per-window results.
fn windowed<'b, K: Data, V: Data, A: Data>(
    stream: KStream<'b, K, V>,
    materialized: Materialized<K, A>,
    make: impl FnOnce(WindowStoreHandle<K, A>) -> WindowedAggregate<K, V, A>,
) -> KTable<'b, Windowed<K>, A, WindowStoreHandle<K, A>> {
    let builder = stream.builder;
    let Materialized { keys, values, name } = materialized;
    let name = name.unwrap_or_else(|| builder.next_name("KSTREAM-AGGREGATE-STATE-STORE-"));
    let store = WindowStoreHandle::new(name, keys, values);
    let aggregate = make(store.clone());
    let add: AddFn = Box::new(move |b, w| {
        b.add_windowed_aggregate(w.name, aggregate, &w.parents);
    });
    let id = builder.push("KSTREAM-AGGREGATE-", None, vec![stream.id], add);
    KTable::new(KStream::new(builder, id, false), store)
}

/// A windowed reduce's aggregate: the windowed aggregate starts each window from an initial
/// aggregate, which a reduce does not have — `Empty` is that start, never stored (a window's
/// first record makes it `Value`) and never forwarded.
#[derive(Debug, Clone)]
enum Reduced<V> {
    Empty,
    Value(V),
}

impl<V: Clone> Reduced<V> {
    fn empty() -> Self {
        Reduced::Empty
    }

    /// The aggregate with `v` added: `v` itself for an empty one.
    fn add(self, v: &V, reducer: &(impl Fn(V, &V) -> V + ?Sized)) -> Self {
        match self {
            Reduced::Empty => Reduced::Value(v.clone()),
            Reduced::Value(agg) => Reduced::Value(reducer(agg, v)),
        }
    }

    /// Two sessions' aggregates combined, the earlier first.
    fn merge(self, later: Self, reducer: &(impl Fn(V, &V) -> V + ?Sized)) -> Self {
        match (self, later) {
            (Reduced::Empty, later) => later,
            (earlier, Reduced::Empty) => earlier,
            (Reduced::Value(a), Reduced::Value(b)) => Reduced::Value(reducer(a, &b)),
        }
    }
}

/// Stores a [`Reduced`] as its value's bytes, so the store reads as a store of `V`.
struct ReducedSerde<V>(Arc<dyn Serde<V>>);

impl<V> Serde<Reduced<V>> for ReducedSerde<V> {
    fn serialize(&self, value: &Reduced<V>) -> Result<Vec<u8>, SerdeError> {
        match value {
            Reduced::Value(v) => self.0.serialize(v),
            Reduced::Empty => Err(SerdeError::new(
                "a windowed reduce's window without a value is never stored",
            )),
        }
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Reduced<V>, SerdeError> {
        self.0.deserialize(bytes).map(Reduced::Value)
    }
}

/// A windowed aggregate of [`Reduced`] values into the store `materialized` names (as bytes
/// of `V`), then a node passing on each result's value: the table of a windowed `reduce`.
fn windowed_reduce<'b, K: Data, V: Data>(
    stream: KStream<'b, K, V>,
    materialized: Materialized<K, V>,
    make: impl FnOnce(WindowStoreHandle<K, Reduced<V>>) -> WindowedAggregate<K, V, Reduced<V>>,
) -> KTable<'b, Windowed<K>, V, WindowStoreHandle<K, V>> {
    let builder = stream.builder;
    let Materialized { keys, values, name } = materialized;
    let name = name.unwrap_or_else(|| builder.next_name("KSTREAM-REDUCE-STATE-STORE-"));
    let store = WindowStoreHandle::new(name.clone(), keys.clone(), values.clone());
    let reduced = Materialized {
        keys,
        values: Arc::new(ReducedSerde(values)) as Arc<dyn Serde<Reduced<V>>>,
        name: Some(name),
    };
    let table = windowed(stream, reduced, make);
    let values = table.stream.then(
        "KSTREAM-REDUCE-",
        false,
        |ctx, r: TypedRecord<Windowed<K>, Reduced<V>>, out| {
            let value = match r.value {
                Some(Reduced::Value(v)) => Some(v),
                None => None,
                Some(Reduced::Empty) => {
                    return Err(ProcessError::permanent(format!(
                        "{}: a windowed reduce forwarded a window without a value",
                        ctx.node_name()
                    )))
                }
            };
            out.push(TypedRecord {
                key: r.key,
                value,
                timestamp: r.timestamp,
                headers: r.headers,
            });
            Ok(())
        },
        None,
    );
    KTable::new(values, store)
}

/// A grouped stream in fixed or sliding event-time windows (Kafka Streams'
/// `TimeWindowedKStream<K, V>`): made by [`KGroupedStream::windowed_by`] or
/// [`KGroupedStream::windowed_by_sliding`]. Its results are keyed by [`Windowed<K>`]; write
/// them with a [`crate::topology::windows::WindowedSerde`].
///
/// ```
/// use std::time::Duration;
/// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
/// use eosflow::serdes::{I64Serde, StringSerde};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::windows::{EmitStrategy, TimeWindows, Windowed, WindowedSerde};
///
/// // Clicks per user per minute, one final count per window (`suppress(untilWindowCloses)`).
/// let builder = StreamsBuilder::new();
/// builder
///     .stream("clicks", Consumed::with(StringSerde, StringSerde))
///     .group_by_key()
///     .windowed_by(TimeWindows::of_size_no_grace(Duration::from_secs(60)))
///     .emit_strategy(EmitStrategy::OnWindowClose)
///     .count(Materialized::with(StringSerde, I64Serde).named("clicks-per-minute"))
///     .to_stream()
///     .to("clicks-per-minute", Produced::with(WindowedSerde::new(StringSerde), I64Serde));
/// let mut driver = TopologyTestDriver::new(builder.build()?)?;
/// for ms in [1_000, 59_000, 61_000] {
///     driver.pipe(TestRecord::new("clicks", Some("ann"), Some("/a")).timestamp(ms))?;
/// }
/// let out = driver.read_output("clicks-per-minute", &WindowedSerde::new(StringSerde), &I64Serde)?;
/// assert_eq!(out, vec![(Some(Windowed::new("ann".to_string(), 0, 60_000)), Some(2))]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TimeWindowedKStream<'b, K, V> {
    stream: KStream<'b, K, V>,
    windows: FixedOrSliding,
    emit: EmitStrategy,
}

/// The windows of a [`TimeWindowedKStream`]: Kafka Streams gives one type for both.
#[derive(Debug, Clone, Copy)]
enum FixedOrSliding {
    Fixed(TimeWindows),
    Sliding(SlidingWindows),
}

impl<K, V> std::fmt::Debug for TimeWindowedKStream<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeWindowedKStream")
            .field("stream", &self.stream)
            .field("windows", &self.windows)
            .field("emit", &self.emit)
            .finish()
    }
}

impl<'b, K: Data, V: Data> TimeWindowedKStream<'b, K, V> {
    /// When results are forwarded (Kafka Streams' `emitStrategy`): after every record
    /// ([`EmitStrategy::OnWindowUpdate`], the default) or once per window when it closes
    /// ([`EmitStrategy::OnWindowClose`], Kafka Streams' `suppress(untilWindowCloses)`), by a
    /// durable timer: exactly once across crashes and rebalances.
    pub fn emit_strategy(mut self, emit: EmitStrategy) -> Self {
        self.emit = emit;
        self
    }

    /// How many records each key has had in each window.
    pub fn count(
        &self,
        materialized: Materialized<K, i64>,
    ) -> KTable<'b, Windowed<K>, i64, WindowStoreHandle<K, i64>> {
        self.aggregate(|| 0, |_, _, n| n + 1, materialized)
    }

    /// Each key's values in each window combined with `reducer(aggregate, value)`, the
    /// window's first value as it is (Kafka Streams' windowed `reduce`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::windows::{TimeWindows, Windowed, WindowedSerde};
    ///
    /// // The largest reading per sensor per 10 s.
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("readings", Consumed::with(StringSerde, I64Serde))
    ///     .group_by_key()
    ///     .windowed_by(TimeWindows::of_size_no_grace(Duration::from_secs(10)))
    ///     .reduce(|max, v| max.max(*v), Materialized::with(StringSerde, I64Serde).named("max-per-10s"))
    ///     .to_stream()
    ///     .to("maxima", Produced::with(WindowedSerde::new(StringSerde), I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for (ms, v) in [(1_000, 7i64), (2_000, 3), (11_000, 5)] {
    ///     driver.pipe(TestRecord::new("readings", Some("s1"), Some(v.to_be_bytes())).timestamp(ms))?;
    /// }
    /// let out = driver.read_output("maxima", &WindowedSerde::new(StringSerde), &I64Serde)?;
    /// let w = |start| Some(Windowed::new("s1".to_string(), start, start + 10_000));
    /// assert_eq!(out, vec![(w(0), Some(7)), (w(0), Some(7)), (w(10_000), Some(5))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reduce(
        &self,
        reducer: impl Fn(V, &V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, Windowed<K>, V, WindowStoreHandle<K, V>> {
        let windows = self.windows;
        let emit = self.emit;
        windowed_reduce(self.stream, materialized, move |store| {
            let add = move |_: &K, v: &V, agg: Reduced<V>| agg.add(v, &reducer);
            match windows {
                FixedOrSliding::Fixed(w) => WindowedAggregate::time(store, w, Reduced::empty, add),
                FixedOrSliding::Sliding(w) => {
                    WindowedAggregate::sliding(store, w, Reduced::empty, add)
                }
            }
            .emit(emit)
        })
    }

    /// Each key's values in each window folded into an aggregate: `init()` for the window's
    /// first record, then `aggregator(key, value, aggregate)`.
    pub fn aggregate<A: Data>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, Windowed<K>, A, WindowStoreHandle<K, A>> {
        let (windows, emit) = (self.windows, self.emit);
        windowed(self.stream, materialized, move |store| {
            match windows {
                FixedOrSliding::Fixed(w) => WindowedAggregate::time(store, w, init, aggregator),
                FixedOrSliding::Sliding(w) => {
                    WindowedAggregate::sliding(store, w, init, aggregator)
                }
            }
            .emit(emit)
        })
    }
}

/// A grouped stream in session windows (Kafka Streams' `SessionWindowedKStream<K, V>`): made
/// by [`KGroupedStream::windowed_by_session`]. A record that bridges two sessions merges them.
pub struct SessionWindowedKStream<'b, K, V> {
    stream: KStream<'b, K, V>,
    windows: SessionWindows,
    emit: EmitStrategy,
}

impl<K, V> std::fmt::Debug for SessionWindowedKStream<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWindowedKStream")
            .field("stream", &self.stream)
            .field("windows", &self.windows)
            .field("emit", &self.emit)
            .finish()
    }
}

impl<'b, K: Data, V: Data> SessionWindowedKStream<'b, K, V> {
    /// When results are forwarded: after every record (every session the record replaces,
    /// merged away or grown at either end, is forwarded as a tombstone first, as in Kafka
    /// Streams) or once per session when it closes (see
    /// [`TimeWindowedKStream::emit_strategy`]).
    pub fn emit_strategy(mut self, emit: EmitStrategy) -> Self {
        self.emit = emit;
        self
    }

    /// How many records each key's session has had.
    pub fn count(
        &self,
        materialized: Materialized<K, i64>,
    ) -> KTable<'b, Windowed<K>, i64, WindowStoreHandle<K, i64>> {
        self.aggregate(|| 0, |_, _, n| n + 1, |_, a, b| a + b, materialized)
    }

    /// Each key's values in each session combined with `reducer(aggregate, value)`, the
    /// session's first value as it is; sessions a record bridges are combined with
    /// `reducer(earlier, later)` too (Kafka Streams' session `reduce`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::windows::{SessionWindows, Windowed, WindowedSerde};
    ///
    /// // The total spent per user session (30 s of inactivity closes it).
    /// let builder = StreamsBuilder::new();
    /// let totals = builder
    ///     .stream("spend", Consumed::with(StringSerde, I64Serde))
    ///     .group_by_key()
    ///     .windowed_by_session(SessionWindows::with_inactivity_gap_no_grace(Duration::from_secs(30)))
    ///     .reduce(|total, v| total + v, Materialized::with(StringSerde, I64Serde).named("session-spend"));
    /// totals.to_stream().to("session-spend", Produced::with(WindowedSerde::new(StringSerde), I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for (ms, v) in [(1_000, 5i64), (20_000, 7)] {
    ///     driver.pipe(TestRecord::new("spend", Some("ann"), Some(v.to_be_bytes())).timestamp(ms))?;
    /// }
    /// let out = driver.read_output("session-spend", &WindowedSerde::new(StringSerde), &I64Serde)?;
    /// let session = |start, end| Some(Windowed::new("ann".to_string(), start, end));
    /// assert_eq!(out.first(), Some(&(session(1_000, 1_000), Some(5))));
    /// assert_eq!(out.last(), Some(&(session(1_000, 20_000), Some(12))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reduce(
        &self,
        reducer: impl Fn(V, &V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<'b, Windowed<K>, V, WindowStoreHandle<K, V>> {
        let (windows, emit) = (self.windows, self.emit);
        let reducer = std::sync::Arc::new(reducer);
        let merger = reducer.clone();
        windowed_reduce(self.stream, materialized, move |store| {
            WindowedAggregate::session(
                store,
                windows,
                Reduced::empty,
                move |_: &K, v: &V, agg: Reduced<V>| agg.add(v, &*reducer),
                move |_: &K, a: Reduced<V>, b: Reduced<V>| a.merge(b, &*merger),
            )
            .emit(emit)
        })
    }

    /// Each key's values in each session folded into an aggregate: `init()`, then
    /// `aggregator(key, value, aggregate)`; sessions a record bridges are combined first with
    /// `merger(key, earlier, later)`.
    pub fn aggregate<A: Data>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, &V, A) -> A + Send + Sync + 'static,
        merger: impl Fn(&K, A, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<'b, Windowed<K>, A, WindowStoreHandle<K, A>> {
        let (windows, emit) = (self.windows, self.emit);
        windowed(self.stream, materialized, move |store| {
            WindowedAggregate::session(store, windows, init, aggregator, merger).emit(emit)
        })
    }
}
