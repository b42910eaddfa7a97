//! [`KStream`]: a typed stream of records and its stateless operations, each one node.

use super::builder::{AddFn, StreamsBuilder, Types};
use super::group::KGroupedStream;
use super::options::{Grouped, Materialized, PrintTarget, Printed, Produced};
use super::table::KTable;
use super::Data;
use crate::record::ProcessError;
use crate::topology::{NodeContext, TopologyBuilder, TypedRecord};

/// Attaches a step's stores to its node once the node is added.
pub(crate) type Attach = Box<dyn FnOnce(&mut TopologyBuilder, &str) + Send>;

/// A branch's predicate over a record's key and value.
type Predicate<K, V> = Box<dyn Fn(Option<&K>, &V) -> Result<bool, ProcessError> + Send + Sync>;

/// A record with the same timestamp and headers as `r`, and this key and value.
pub(crate) fn like<K, V, K2, V2>(
    r: &TypedRecord<K, V>,
    key: Option<K2>,
    value: Option<V2>,
) -> TypedRecord<K2, V2> {
    TypedRecord {
        key,
        value,
        timestamp: r.timestamp,
        headers: r.headers.clone(),
    }
}

/// A stream of `(K, V)` records (Kafka Streams' `KStream<K, V>`): the output of one node of the
/// topology being built. Each operation adds a node whose input is this stream and returns a
/// handle to its output; a stream can feed several operations (each gets every record).
///
/// The handle is typed end to end: an operation takes `(K, V)` and its closure says what
/// comes out, so the records reaching a node always have the types it was built for — a
/// DSL-built edge never fails a record at run time for its types. The handle is `Copy` and
/// borrows its [`StreamsBuilder`].
///
/// # Keys, values and tombstones
///
/// Keys may be absent (Kafka's null key, common for raw input), so stateless closures see the
/// key as `Option<&K>`; values are `&V`. A record without a value (a tombstone) is passed on
/// unchanged by the operations that keep the key (`filter`, `filter_not`, `peek`,
/// `map_values`, `map_values_with_key`, `flat_map_values`, `merge`, `to`: a delete read from a
/// compacted topic still deletes downstream), without calling the closure. The re-keying operations (`map`,
/// `select_key`, `flat_map`, `group_by`, `repartition` without a key) cannot compute a key
/// from it and do not pass it on, as [`TopologyBuilder::add_repartition`] does not.
/// Aggregations need both: a record without a key or a value is dead-lettered as permanent.
///
/// # Failures
///
/// Closures return plain values; each `try_` variant takes a closure returning
/// `Result<_, ProcessError>`: a [`ProcessError::transient`] sends the input record up the
/// retry ladder, a [`ProcessError::permanent`] to the input's dead-letter topic, and
/// everything the record did (outputs, store writes) is discarded — the runtime's rule for
/// every node. A panicking closure is a permanent failure.
pub struct KStream<'b, K, V> {
    pub(crate) builder: &'b StreamsBuilder,
    pub(crate) id: usize,
    /// Whether the key changed since the records were last partitioned by their key (at the
    /// source or a repartition): grouping by key then needs a repartition first.
    pub(crate) rekeyed: bool,
    _types: Types<K, V>,
}

impl<K, V> Clone for KStream<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for KStream<'_, K, V> {}

impl<K, V> std::fmt::Debug for KStream<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KStream")
            .field("node", &self.builder.name_of(self.id))
            .field("key", &std::any::type_name::<K>())
            .field("value", &std::any::type_name::<V>())
            .finish()
    }
}

impl<'b, K: Data, V: Data> KStream<'b, K, V> {
    pub(crate) fn new(builder: &'b StreamsBuilder, id: usize, rekeyed: bool) -> Self {
        Self {
            builder,
            id,
            rekeyed,
            _types: std::marker::PhantomData,
        }
    }

    /// The name of the node this stream comes out of.
    pub fn name(&self) -> String {
        self.builder.name_of(self.id)
    }

    /// Names the node this stream comes out of (Kafka Streams' `Named.as`), instead of its
    /// generated name: metrics, dead letters and timers name nodes.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    ///
    /// let builder = StreamsBuilder::new();
    /// let lines = builder.stream("lines", Consumed::with(StringSerde, StringSerde));
    /// let long = lines.filter(|_, line| line.len() > 80).named("long-lines");
    /// assert_eq!(long.name(), "long-lines");
    /// assert_eq!(lines.filter(|_, _| true).name(), "KSTREAM-FILTER-0000000002");
    /// ```
    pub fn named(self, name: impl Into<String>) -> Self {
        self.builder.rename(self.id, name.into());
        self
    }

    /// Adds a node taking this stream's records: `f` pushes what it outputs, which the node
    /// forwards (typed: the output stream's types are the pushed records' types).
    pub(crate) fn then<K2: Data, V2: Data>(
        &self,
        prefix: &str,
        rekeyed: bool,
        f: impl Fn(
                &mut NodeContext<'_, '_>,
                TypedRecord<K, V>,
                &mut Vec<TypedRecord<K2, V2>>,
            ) -> Result<(), ProcessError>
            + Send
            + 'static,
        attach: Option<Attach>,
    ) -> KStream<'b, K2, V2> {
        // The node keeps nothing between records: its outputs are collected per call.
        let node = move |ctx: &mut NodeContext<'_, '_>, r: TypedRecord<K, V>| {
            let mut out = Vec::new();
            f(ctx, r, &mut out)?;
            for r in out {
                ctx.forward(r);
            }
            Ok(())
        };
        let add: AddFn = Box::new(move |b, w| {
            b.add_node(w.name, node, &w.parents);
            b.forwards::<K2, V2>(w.name);
            if let Some(attach) = attach {
                attach(b, w.name);
            }
        });
        let id = self.builder.push(prefix, None, vec![self.id], add);
        KStream::new(self.builder, id, rekeyed)
    }

    /// The records for which `predicate(key, value)` holds (Kafka Streams' `filter`).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("amounts", Consumed::with(StringSerde, I64Serde))
    ///     .filter(|_, amount| *amount >= 100)
    ///     .to("large", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe_input("amounts", &StringSerde, &I64Serde, &"a".to_string(), &5)?;
    /// driver.pipe_input("amounts", &StringSerde, &I64Serde, &"b".to_string(), &500)?;
    /// let large = driver.read_output("large", &StringSerde, &I64Serde)?;
    /// assert_eq!(large, vec![(Some("b".to_string()), Some(500))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn filter(
        &self,
        predicate: impl Fn(Option<&K>, &V) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.try_filter(move |k, v| Ok(predicate(k, v)))
    }

    /// [`KStream::filter`] with a predicate that can fail (see the type's *Failures*).
    pub fn try_filter(
        &self,
        predicate: impl Fn(Option<&K>, &V) -> Result<bool, ProcessError> + Send + Sync + 'static,
    ) -> Self {
        self.then(
            "KSTREAM-FILTER-",
            self.rekeyed,
            move |_, r, out| {
                let keep = match &r.value {
                    Some(v) => predicate(r.key.as_ref(), v)?,
                    None => true,
                };
                if keep {
                    out.push(r);
                }
                Ok(())
            },
            None,
        )
    }

    /// The records for which `predicate(key, value)` does not hold (Kafka Streams'
    /// `filterNot`).
    pub fn filter_not(
        &self,
        predicate: impl Fn(Option<&K>, &V) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.try_filter(move |k, v| Ok(!predicate(k, v)))
    }

    /// Each value replaced by `f(value)`, the key kept (Kafka Streams' `mapValues`): the
    /// records stay in their partitions, so no repartition follows.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("names", Consumed::with(StringSerde, StringSerde))
    ///     .map_values(|name| name.len() as i64)
    ///     .to("lengths", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe_input("names", &StringSerde, &StringSerde, &"k".to_string(), &"anna".to_string())?;
    /// let out = driver.read_output("lengths", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("k".to_string()), Some(4))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn map_values<V2: Data>(
        &self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
    ) -> KStream<'b, K, V2> {
        self.try_map_values(move |v| Ok(f(v)))
    }

    /// [`KStream::map_values`] with a mapper that can fail (see the type's *Failures*).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::processor::ProcessError;
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("amounts", Consumed::with(StringSerde, StringSerde))
    ///     .try_map_values(|text| {
    ///         text.parse::<i64>()
    ///             .map_err(|e| ProcessError::permanent(format!("not an amount: {e}")))
    ///     })
    ///     .to("parsed", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let key = "k".to_string();
    /// driver.pipe_input("amounts", &StringSerde, &StringSerde, &key, &"12".to_string())?;
    /// driver.pipe_input("amounts", &StringSerde, &StringSerde, &key, &"twelve".to_string())?;
    /// assert_eq!(driver.read_output("parsed", &StringSerde, &I64Serde)?.len(), 1);
    /// let dead = driver.read_raw_output("amounts.DLT");
    /// assert!(dead[0].dlt_reason().unwrap_or_default().starts_with("not an amount"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_map_values<V2: Data>(
        &self,
        f: impl Fn(&V) -> Result<V2, ProcessError> + Send + Sync + 'static,
    ) -> KStream<'b, K, V2> {
        self.try_map_values_with_key(move |_, v| f(v))
    }

    /// Each value replaced by `f(key, value)`, the key kept (Kafka Streams' `mapValues` with a
    /// `ValueMapperWithKey`): to format a result with its key — a windowed count with its
    /// window, say — without re-keying the stream.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::TestRecord;
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("greetings", Consumed::with(StringSerde, StringSerde))
    ///     .map_values_with_key(|name, text| format!("{text}, {}", name.map_or("you", |n| n)))
    ///     .to("out", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("greetings", Some("ann"), Some("hello")))?;
    /// let out = driver.read_output("out", &StringSerde, &StringSerde)?;
    /// assert_eq!(out, vec![(Some("ann".to_string()), Some("hello, ann".to_string()))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn map_values_with_key<V2: Data>(
        &self,
        f: impl Fn(Option<&K>, &V) -> V2 + Send + Sync + 'static,
    ) -> KStream<'b, K, V2> {
        self.try_map_values_with_key(move |k, v| Ok(f(k, v)))
    }

    /// [`KStream::map_values_with_key`] with a mapper that can fail (see the type's
    /// *Failures*).
    pub fn try_map_values_with_key<V2: Data>(
        &self,
        f: impl Fn(Option<&K>, &V) -> Result<V2, ProcessError> + Send + Sync + 'static,
    ) -> KStream<'b, K, V2> {
        self.then(
            "KSTREAM-MAPVALUES-",
            self.rekeyed,
            move |_, r, out| {
                let value = r.value.as_ref().map(|v| f(r.key.as_ref(), v)).transpose()?;
                out.push(TypedRecord {
                    key: r.key,
                    value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
                Ok(())
            },
            None,
        )
    }

    /// Each record replaced by `f(key, value)`: a new key and value (Kafka Streams' `map`).
    /// The key changes, so grouping the result by key needs a repartition first
    /// ([`KStream::repartition`]; [`KStream::group_by_key`] says so at build).
    pub fn map<K2: Data, V2: Data>(
        &self,
        f: impl Fn(Option<&K>, &V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<'b, K2, V2> {
        self.try_map(move |k, v| Ok(f(k, v)))
    }

    /// [`KStream::map`] with a mapper that can fail (see the type's *Failures*).
    pub fn try_map<K2: Data, V2: Data>(
        &self,
        f: impl Fn(Option<&K>, &V) -> Result<(K2, V2), ProcessError> + Send + Sync + 'static,
    ) -> KStream<'b, K2, V2> {
        self.then(
            "KSTREAM-MAP-",
            true,
            move |_, r, out| {
                if let Some(v) = &r.value {
                    let (k, v) = f(r.key.as_ref(), v)?;
                    out.push(like(&r, Some(k), Some(v)));
                }
                Ok(())
            },
            None,
        )
    }

    /// Each record re-keyed by `f(key, value)`, the value kept (Kafka Streams' `selectKey`).
    /// Grouping the result by key needs a repartition first, as after [`KStream::map`].
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("orders", Consumed::with(StringSerde, StringSerde))
    ///     .select_key(|_, order| order.split(':').next().unwrap_or_default().to_string())
    ///     .to("by-customer", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("orders", None::<&str>, Some("ann:book")))?;
    /// let out = driver.read_output("by-customer", &StringSerde, &StringSerde)?;
    /// assert_eq!(out, vec![(Some("ann".to_string()), Some("ann:book".to_string()))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn select_key<K2: Data>(
        &self,
        f: impl Fn(Option<&K>, &V) -> K2 + Send + Sync + 'static,
    ) -> KStream<'b, K2, V> {
        self.then(
            "KSTREAM-KEY-SELECT-",
            true,
            move |_, r, out| {
                if let Some(v) = &r.value {
                    let key = Some(f(r.key.as_ref(), v));
                    out.push(TypedRecord {
                        key,
                        value: r.value,
                        timestamp: r.timestamp,
                        headers: r.headers,
                    });
                }
                Ok(())
            },
            None,
        )
    }

    /// Each value replaced by the values `f(value)` yields, each with the record's key,
    /// timestamp and headers (Kafka Streams' `flatMapValues`); none if it yields none.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("lines", Consumed::with(StringSerde, StringSerde))
    ///     .flat_map_values(|line| line.split_whitespace().map(String::from).collect::<Vec<_>>())
    ///     .to("words", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// let (ann, line) = ("ann".to_string(), "hello world".to_string());
    /// driver.pipe_input("lines", &StringSerde, &StringSerde, &ann, &line)?;
    /// let words = driver.read_output("words", &StringSerde, &StringSerde)?;
    /// assert_eq!(words.len(), 2);
    /// assert_eq!(words[1], (Some(ann), Some("world".to_string())));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flat_map_values<V2: Data, I>(
        &self,
        f: impl Fn(&V) -> I + Send + Sync + 'static,
    ) -> KStream<'b, K, V2>
    where
        I: IntoIterator<Item = V2>,
    {
        self.try_flat_map_values(move |v| Ok(f(v)))
    }

    /// [`KStream::flat_map_values`] with a mapper that can fail (see the type's *Failures*).
    pub fn try_flat_map_values<V2: Data, I>(
        &self,
        f: impl Fn(&V) -> Result<I, ProcessError> + Send + Sync + 'static,
    ) -> KStream<'b, K, V2>
    where
        I: IntoIterator<Item = V2>,
    {
        self.then(
            "KSTREAM-FLATMAPVALUES-",
            self.rekeyed,
            move |_, r, out| {
                match &r.value {
                    Some(v) => {
                        for v2 in f(v)? {
                            out.push(like(&r, r.key.clone(), Some(v2)));
                        }
                    }
                    None => out.push(TypedRecord {
                        key: r.key,
                        value: None,
                        timestamp: r.timestamp,
                        headers: r.headers,
                    }),
                }
                Ok(())
            },
            None,
        )
    }

    /// Each record replaced by the `(key, value)` pairs `f(key, value)` yields (Kafka Streams'
    /// `flatMap`). The key changes, as after [`KStream::map`].
    pub fn flat_map<K2: Data, V2: Data, I>(
        &self,
        f: impl Fn(Option<&K>, &V) -> I + Send + Sync + 'static,
    ) -> KStream<'b, K2, V2>
    where
        I: IntoIterator<Item = (K2, V2)>,
    {
        self.then(
            "KSTREAM-FLATMAP-",
            true,
            move |_, r, out| {
                if let Some(v) = &r.value {
                    for (k2, v2) in f(r.key.as_ref(), v) {
                        out.push(like(&r, Some(k2), Some(v2)));
                    }
                }
                Ok(())
            },
            None,
        )
    }

    /// Calls `f(key, value)` on each record and passes it on unchanged (Kafka Streams'
    /// `peek`): for logging or metrics. A batch that aborts runs again, so `f` may see a
    /// record more than once; nothing it does is part of the exactly-once output.
    pub fn peek(&self, f: impl Fn(Option<&K>, &V) + Send + Sync + 'static) -> Self {
        self.then(
            "KSTREAM-PEEK-",
            self.rekeyed,
            move |_, r, out| {
                if let Some(v) = &r.value {
                    f(r.key.as_ref(), v);
                }
                out.push(r);
                Ok(())
            },
            None,
        )
    }

    /// Calls `f(key, value)` on each record (Kafka Streams' `foreach`), a terminal
    /// operation: for side effects outside Kafka. As with [`KStream::peek`], a batch that
    /// aborts runs again, so `f` may see a record more than once, and nothing it does is part
    /// of the exactly-once output. A tombstone does not call `f`.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use eosflow::dsl::{Consumed, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("alerts", Consumed::with(StringSerde, StringSerde))
    ///     .foreach(move |_, alert| sink.lock().unwrap().push(alert.clone()));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe_input("alerts", &StringSerde, &StringSerde, &"h1".to_string(), &"disk full".to_string())?;
    /// assert_eq!(*seen.lock().unwrap(), ["disk full"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn foreach(&self, f: impl Fn(Option<&K>, &V) + Send + Sync + 'static) {
        self.then::<K, V>(
            "KSTREAM-FOREACH-",
            self.rekeyed,
            move |_, r, _| {
                if let Some(v) = &r.value {
                    f(r.key.as_ref(), v);
                }
                Ok(())
            },
            None,
        );
    }

    /// Prints each record (Kafka Streams' `print(Printed)`) to standard output or appends it
    /// to a file, as `[label]: key, value` (see [`Printed`]), a terminal operation for
    /// debugging. Like [`KStream::foreach`], a record may be printed more than once when a
    /// batch aborts. A file that cannot be written is a transient failure of the record.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Printed, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let path = std::env::temp_dir().join(format!("eosflow-print-doc-{}.txt", std::process::id()));
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("greetings", Consumed::with(StringSerde, StringSerde))
    ///     .print(Printed::to_file(&path).with_label("greetings"));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe_input("greetings", &StringSerde, &StringSerde, &"ann".to_string(), &"hi".to_string())?;
    /// assert_eq!(std::fs::read_to_string(&path)?, "[greetings]: \"ann\", \"hi\"\n");
    /// std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn print(&self, printed: Printed<K, V>) {
        let Printed {
            target,
            label,
            mapper,
        } = printed;
        self.then::<K, V>(
            "KSTREAM-PRINTER-",
            self.rekeyed,
            move |ctx, r, _| {
                let Some(v) = &r.value else { return Ok(()) };
                let label = label.as_deref().unwrap_or(ctx.node_name());
                let line = format!("[{label}]: {}", mapper(r.key.as_ref(), v));
                match &target {
                    PrintTarget::SysOut => println!("{line}"),
                    PrintTarget::File(path) => {
                        use std::io::Write;
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)
                            .and_then(|mut f| writeln!(f, "{line}"))
                            .map_err(|e| {
                                ProcessError::transient(format!(
                                    "{} prints to {}: {e}",
                                    ctx.node_name(),
                                    path.display()
                                ))
                            })?;
                    }
                }
                Ok(())
            },
            None,
        );
    }

    /// This stream as a table (Kafka Streams' `toTable(Materialized)`): each record an upsert
    /// of its key, a tombstone a delete, kept in the store `materialized` names (changelogged
    /// in the record's transaction). The table forwards each change ([`KTable::to_stream`]):
    /// an upsert as it is, a tombstone only for a key it had. The records must be partitioned
    /// by their key: after a key change, [`StreamsBuilder::build`] fails until a
    /// [`KStream::repartition`]. A record without a key is dead-lettered as permanent.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Materialized, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// let builder = StreamsBuilder::new();
    /// let status = builder
    ///     .stream("status", Consumed::with(StringSerde, StringSerde))
    ///     .to_table(Materialized::with(StringSerde, StringSerde).named("latest-status"));
    /// let store = status.store().clone();
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("status", Some("h1"), Some("up")))?;
    /// driver.pipe(TestRecord::new("status", Some("h2"), Some("up")))?;
    /// driver.pipe(TestRecord::new("status", Some("h1"), None::<&str>))?; // h1 removed
    /// assert_eq!(driver.store_get(&store, &"h1".to_string())?, None);
    /// assert_eq!(driver.store_get(&store, &"h2".to_string())?, Some("up".to_string()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_table(&self, materialized: Materialized<K, V>) -> KTable<'b, K, V> {
        if self.rekeyed {
            self.builder.error(format!(
                "to_table after {}: its key was changed (map, select_key or flat_map) since the records were partitioned by it, so one key's rows can be in several partitions; call repartition(Grouped::with(..)) first",
                self.name()
            ));
        }
        let (store, attach) = materialized.key_value_store(self.builder, "KSTREAM-TOTABLE-");
        let handle = store.clone();
        let stream = self.then(
            "KSTREAM-TOTABLE-",
            false,
            move |ctx, r: TypedRecord<K, V>, out| {
                let Some(key) = &r.key else {
                    return Err(ProcessError::permanent(format!(
                        "{} keeps table {} by key: a record without a key cannot be a row",
                        ctx.node_name(),
                        handle.name()
                    )));
                };
                let mut s = ctx.store(&handle)?;
                match &r.value {
                    Some(v) => s.put(key, v)?,
                    None if s.get(key)?.is_some() => s.delete(key)?,
                    // Not in the table: a delete changes nothing.
                    None => return Ok(()),
                }
                out.push(r);
                Ok(())
            },
            Some(attach),
        );
        KTable::new(stream, store)
    }

    /// The records of this stream and of `other`, as they come (Kafka Streams' `merge`).
    /// Both must be handles of the same builder.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::TestRecord;
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// let web = builder.stream("web-clicks", Consumed::with(StringSerde, StringSerde));
    /// let app = builder.stream("app-clicks", Consumed::with(StringSerde, StringSerde));
    /// web.merge(&app).to("clicks", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// driver.pipe(TestRecord::new("web-clicks", Some("ann"), Some("/home")))?;
    /// driver.pipe(TestRecord::new("app-clicks", Some("bob"), Some("/cart")))?;
    /// assert_eq!(driver.read_output("clicks", &StringSerde, &StringSerde)?.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn merge(&self, other: &KStream<'b, K, V>) -> Self {
        if !std::ptr::eq(self.builder, other.builder) {
            self.builder.error(format!(
                "merge of {} with {}, a stream of another StreamsBuilder",
                self.name(),
                other.name()
            ));
        }
        let node = |ctx: &mut NodeContext<'_, '_>, r: TypedRecord<K, V>| {
            ctx.forward(r);
            Ok(())
        };
        let add: AddFn = Box::new(move |b, w| {
            b.add_node(w.name, node, &w.parents);
            b.forwards::<K, V>(w.name);
        });
        let id = self
            .builder
            .push("KSTREAM-MERGE-", None, vec![self.id, other.id], add);
        KStream::new(self.builder, id, self.rekeyed || other.rekeyed)
    }

    /// Writes this stream to `topic` with `produced`'s serdes (Kafka Streams' `to`), in the
    /// transaction of the input record that caused each output.
    pub fn to(&self, topic: impl AsRef<str>, produced: Produced<K, V>) {
        let topic = topic.as_ref().to_string();
        let Produced { keys, values, name } = produced;
        let add: AddFn = Box::new(move |b, w| {
            b.add_sink(w.name, &topic, keys, values, &w.parents);
        });
        self.builder.push("KSTREAM-SINK-", name, vec![self.id], add);
    }

    /// Re-partitions this stream by its current key through an internal topic (Kafka Streams'
    /// `repartition`): after a `map` or `select_key`, every record of a key is then in one
    /// partition, so it can be grouped by key. Records without a key are not written. See
    /// [`TopologyBuilder::add_repartition`] for the topic and its guarantees.
    pub fn repartition(&self, grouped: Grouped<K, V>) -> Self {
        self.repartition_by(
            "KSTREAM-REPARTITION-",
            move |k: Option<&K>, _: &V| k.cloned(),
            grouped,
        )
    }

    /// Adds a repartition of this stream re-keyed by `key_fn` (nothing written for `None`).
    pub(crate) fn repartition_by<K2: Data>(
        &self,
        prefix: &str,
        key_fn: impl Fn(Option<&K>, &V) -> Option<K2> + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KStream<'b, K2, V> {
        let Grouped { keys, values, name } = grouped;
        let add: AddFn = Box::new(move |b, w| {
            let parent = w.parents.first().copied().unwrap_or_default();
            b.add_repartition(w.name, key_fn, keys, values, &[parent]);
        });
        let id = self.builder.push(prefix, name, vec![self.id], add);
        KStream::new(self.builder, id, false)
    }

    /// Groups the records by their key, for an aggregation (Kafka Streams' `groupByKey`). The
    /// records must be partitioned by that key: after an operation that changed the key
    /// (`map`, `select_key`, `flat_map`), [`StreamsBuilder::build`] fails and names this
    /// stream — call [`KStream::repartition`] first, or use [`KStream::group_by`].
    pub fn group_by_key(&self) -> KGroupedStream<'b, K, V> {
        if self.rekeyed {
            self.builder.error(format!(
                "group_by_key after {}: its key was changed (map, select_key or flat_map) since the records were partitioned by it, so one key's records can be in several partitions; call repartition(Grouped::with(..)) first, or group_by",
                self.name()
            ));
        }
        KGroupedStream::new(*self)
    }

    /// Groups the records by a new key `key_fn(key, value)` (Kafka Streams' `groupBy`): the
    /// records are re-keyed and written through a repartition topic with `grouped`'s serdes,
    /// so each new key's records meet in one partition.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    ///
    /// // Orders keyed by order id, valued `customer:item`, counted per customer.
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("orders", Consumed::with(StringSerde, StringSerde))
    ///     .group_by(
    ///         |_, order| order.split(':').next().unwrap_or_default().to_string(),
    ///         Grouped::with(StringSerde, StringSerde).named("by-customer"),
    ///     )
    ///     .count(Materialized::with(StringSerde, I64Serde).named("orders-per-customer"))
    ///     .to_stream()
    ///     .to("order-counts", Produced::with(StringSerde, I64Serde));
    /// let topology = builder.build()?;
    /// assert_eq!(topology.repartition_topics_for("shop"), vec!["shop-by-customer-repartition"]);
    ///
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// driver.pipe(TestRecord::new("orders", Some("o-1"), Some("ann:book")).partition(0))?;
    /// driver.pipe(TestRecord::new("orders", Some("o-2"), Some("ann:pen")).partition(3))?;
    /// let out = driver.read_output("order-counts", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("ann".into()), Some(1)), (Some("ann".into()), Some(2))]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn group_by<K2: Data>(
        &self,
        key_fn: impl Fn(Option<&K>, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KGroupedStream<'b, K2, V> {
        let by = self.repartition_by(
            "KSTREAM-REPARTITION-",
            move |k: Option<&K>, v: &V| Some(key_fn(k, v)),
            grouped,
        );
        KGroupedStream::new(by)
    }

    /// Splits the stream into branches by predicates (Kafka Streams' `split`): each record
    /// goes to the first branch whose predicate holds, or to the default branch.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, Produced, StreamsBuilder};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::TopologyTestDriver;
    ///
    /// let builder = StreamsBuilder::new();
    /// let amounts = builder.stream("amounts", Consumed::with(StringSerde, I64Serde));
    /// let branches = amounts
    ///     .split()
    ///     .branch(|_, a| *a < 0)
    ///     .branch(|_, a| *a >= 1_000)
    ///     .default_branch();
    /// let out = ["refunds", "large", "ordinary"];
    /// for (branch, topic) in branches.iter().zip(out) {
    ///     branch.to(topic, Produced::with(StringSerde, I64Serde));
    /// }
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for amount in [-5, 5_000, 20, 30] {
    ///     driver.pipe_input("amounts", &StringSerde, &I64Serde, &"k".to_string(), &amount)?;
    /// }
    /// assert_eq!(driver.read_output("refunds", &StringSerde, &I64Serde)?.len(), 1);
    /// assert_eq!(driver.read_output("large", &StringSerde, &I64Serde)?.len(), 1);
    /// assert_eq!(driver.read_output("ordinary", &StringSerde, &I64Serde)?.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn split(&self) -> BranchedKStream<'b, K, V> {
        BranchedKStream {
            stream: *self,
            predicates: Vec::new(),
        }
    }
}

/// A stream being split into branches ([`KStream::split`]; Kafka Streams'
/// `BranchedKStream`): add branches in order, then finish with
/// [`BranchedKStream::default_branch`] or [`BranchedKStream::no_default_branch`].
pub struct BranchedKStream<'b, K, V> {
    stream: KStream<'b, K, V>,
    predicates: Vec<Predicate<K, V>>,
}

impl<K, V> std::fmt::Debug for BranchedKStream<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BranchedKStream")
            .field("branches", &self.predicates.len())
            .finish()
    }
}

impl<'b, K: Data, V: Data> BranchedKStream<'b, K, V> {
    /// A branch of the records `predicate(key, value)` holds for and no earlier branch took.
    pub fn branch(
        self,
        predicate: impl Fn(Option<&K>, &V) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.try_branch(move |k, v| Ok(predicate(k, v)))
    }

    /// [`BranchedKStream::branch`] with a predicate that can fail (see [`KStream`]'s
    /// *Failures*).
    pub fn try_branch(
        mut self,
        predicate: impl Fn(Option<&K>, &V) -> Result<bool, ProcessError> + Send + Sync + 'static,
    ) -> Self {
        self.predicates.push(Box::new(predicate));
        self
    }

    /// The branches, in the order they were added, then one of the records no branch took
    /// (tombstones, which no predicate can judge, included).
    pub fn default_branch(self) -> Vec<KStream<'b, K, V>> {
        self.finish(true)
    }

    /// The branches, in the order they were added; a record no branch takes (and a
    /// tombstone) goes nowhere, as in Kafka Streams.
    pub fn no_default_branch(self) -> Vec<KStream<'b, K, V>> {
        self.finish(false)
    }

    /// One split node forwarding each record to its branch's node, by the branch's name.
    fn finish(self, default: bool) -> Vec<KStream<'b, K, V>> {
        let Self { stream, predicates } = self;
        let builder = stream.builder;
        let count = predicates.len() + usize::from(default);
        let split = builder.next_name("KSTREAM-BRANCH-");
        let add: AddFn = Box::new(move |b, w| {
            // The branches are the `count` steps pushed right after the split.
            let branches: Vec<String> = (w.id + 1..w.id + 1 + count)
                .filter_map(|i| w.names.get(i).cloned())
                .collect();
            let node = move |ctx: &mut NodeContext<'_, '_>, r: TypedRecord<K, V>| {
                let mut to = None;
                if let Some(v) = &r.value {
                    for (i, p) in predicates.iter().enumerate() {
                        if p(r.key.as_ref(), v)? {
                            to = Some(i);
                            break;
                        }
                    }
                }
                let to = to.or(if default { Some(count - 1) } else { None });
                if let Some(branch) = to.and_then(|i| branches.get(i)) {
                    ctx.forward_to(branch, r);
                }
                Ok(())
            };
            b.add_node(w.name, node, &w.parents);
            b.forwards::<K, V>(w.name);
        });
        let id = builder.push("", Some(split), vec![stream.id], add);
        (0..count)
            .map(|_| {
                let pass = |ctx: &mut NodeContext<'_, '_>, r: TypedRecord<K, V>| {
                    ctx.forward(r);
                    Ok(())
                };
                let add: AddFn = Box::new(move |b, w| {
                    b.add_node(w.name, pass, &w.parents);
                    b.forwards::<K, V>(w.name);
                });
                let branch = builder.push("KSTREAM-BRANCHCHILD-", None, vec![id], add);
                KStream::new(builder, branch, stream.rekeyed)
            })
            .collect()
    }
}
