//! The small values that carry serdes and names into the DSL: [`Consumed`] (a source topic),
//! [`Produced`] (a sink topic), [`Grouped`] (a repartition topic) and [`Materialized`] (a
//! store and its changelog). Each topic's serdes are given once, where its bytes are made.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::serdes::Serde;
use crate::topology::TimestampExtractor;

/// How a source topic is read: its key and value serdes, the source node's name, and how its
/// event time is read (Kafka Streams' `Consumed`).
pub struct Consumed<K, V> {
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V>>,
    pub(crate) name: Option<String>,
    pub(crate) extractor: Option<TimestampExtractor>,
}

impl<K, V> Consumed<K, V> {
    /// Keys read with `keys`, values with `values`; the Kafka timestamp is the event time.
    pub fn with(keys: impl Serde<K> + 'static, values: impl Serde<V> + 'static) -> Self {
        Self {
            keys: Arc::new(keys),
            values: Arc::new(values),
            name: None,
            extractor: None,
        }
    }

    /// Names the source node (instead of `KSTREAM-SOURCE-<n>`).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Reads the event time with `extractor` instead of the Kafka timestamp (windows and
    /// timers follow it).
    pub fn with_timestamp_extractor(mut self, extractor: TimestampExtractor) -> Self {
        self.extractor = Some(extractor);
        self
    }
}

/// Shares the serdes (cheap: they are reference-counted).
impl<K, V> Clone for Consumed<K, V> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            values: self.values.clone(),
            name: self.name.clone(),
            extractor: self.extractor.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for Consumed<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumed")
            .field("name", &self.name)
            .finish()
    }
}

/// How a sink topic is written: its key and value serdes and the sink node's name (Kafka
/// Streams' `Produced`). Records are partitioned by their key bytes, as every output.
pub struct Produced<K, V> {
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V>>,
    pub(crate) name: Option<String>,
}

impl<K, V> Produced<K, V> {
    /// Keys written with `keys`, values with `values`.
    pub fn with(keys: impl Serde<K> + 'static, values: impl Serde<V> + 'static) -> Self {
        Self {
            keys: Arc::new(keys),
            values: Arc::new(values),
            name: None,
        }
    }

    /// Names the sink node (instead of `KSTREAM-SINK-<n>`).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Shares the serdes (cheap: they are reference-counted).
impl<K, V> Clone for Produced<K, V> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            values: self.values.clone(),
            name: self.name.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for Produced<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Produced")
            .field("name", &self.name)
            .finish()
    }
}

/// How records are re-keyed through a repartition topic: the serdes of the new key and the
/// value, and the repartition's name (Kafka Streams' `Grouped` / `Repartitioned`). The topic
/// is `<application id>-<name>-repartition`; unnamed, `<name>` is `KSTREAM-REPARTITION-<n>`.
pub struct Grouped<K, V> {
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V>>,
    pub(crate) name: Option<String>,
}

impl<K, V> Grouped<K, V> {
    /// The repartition topic's keys written with `keys`, values with `values`.
    pub fn with(keys: impl Serde<K> + 'static, values: impl Serde<V> + 'static) -> Self {
        Self {
            keys: Arc::new(keys),
            values: Arc::new(values),
            name: None,
        }
    }

    /// Names the repartition (its topic is `<application id>-<name>-repartition`): a name
    /// that stays when the topology changes.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Shares the serdes (cheap: they are reference-counted).
impl<K, V> Clone for Grouped<K, V> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            values: self.values.clone(),
            name: self.name.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for Grouped<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grouped").field("name", &self.name).finish()
    }
}

/// The store an aggregation keeps its state in: its key and value serdes and its name
/// (Kafka Streams' `Materialized`). The store is a named RocksDB store per partition with its
/// own compacted changelog `<application id>-<name>-changelog`, written in the transaction
/// of the input that changed it: the state survives crashes and moves with its partition.
/// Unnamed, the store is `KSTREAM-AGGREGATE-STATE-STORE-<n>` (or `…-REDUCE-…`).
pub struct Materialized<K, V> {
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V>>,
    pub(crate) name: Option<String>,
}

impl<K: 'static, V: 'static> Materialized<K, V> {
    /// The key-value store this names (else `prefix` + `STATE-STORE-` + the builder's next
    /// number), and what attaches it to the node that writes it.
    pub(crate) fn key_value_store(
        self,
        builder: &super::StreamsBuilder,
        prefix: &str,
    ) -> (crate::processor::StoreHandle<K, V>, super::stream::Attach) {
        let Materialized { keys, values, name } = self;
        let name = name.unwrap_or_else(|| builder.next_name(&format!("{prefix}STATE-STORE-")));
        check_name(builder, "store", &name);
        let store = crate::processor::StoreHandle::new(name, keys, values);
        let attached = store.clone();
        let attach: super::stream::Attach = Box::new(move |b, node| {
            b.add_state_store(&attached, &[node]);
        });
        (store, attach)
    }
}

impl<K, V> Materialized<K, V> {
    /// A store whose keys use `keys` and values `values`.
    pub fn with(keys: impl Serde<K> + 'static, values: impl Serde<V> + 'static) -> Self {
        Self {
            keys: Arc::new(keys),
            values: Arc::new(values),
            name: None,
        }
    }

    /// Names the store (Kafka Streams' `Materialized.as(name)`): its changelog is
    /// `<application id>-<name>-changelog`, and the name stays when the topology changes.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Shares the serdes (cheap: they are reference-counted).
impl<K, V> Clone for Materialized<K, V> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            values: self.values.clone(),
            name: self.name.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for Materialized<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Materialized")
            .field("name", &self.name)
            .finish()
    }
}

/// Reports at build a store or repartition name that cannot be part of a topic's name (its
/// changelog's or repartition topic's): Kafka's legal characters are ASCII letters, digits,
/// `.`, `_` and `-` (Kafka Streams' `TopologyException` for an invalid store name).
pub(crate) fn check_name(builder: &super::StreamsBuilder, what: &str, name: &str) {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(legal) || name.len() > 200 {
        builder.error(format!(
            "{what} name {name:?} cannot be part of a Kafka topic name (ASCII letters, digits, '.', '_' and '-', at most 200)"
        ));
    }
}

/// The stores a stream-stream join buffers each side in (Kafka Streams' `StreamJoined`): the
/// key serde, this side's and the other side's value serdes, and the name the stores are
/// named after: `<name>-this-join-store` and `<name>-other-join-store`, each a windowed store
/// with its changelog `<application id>-<store>-changelog`. Unnamed, `<name>` is the join's
/// node name (`KSTREAM-JOIN-<n>`, …): name it in an application that will change.
pub struct StreamJoined<K, V1, V2> {
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V1>>,
    pub(crate) other_values: Arc<dyn Serde<V2>>,
    pub(crate) name: Option<String>,
}

impl<K, V1, V2> StreamJoined<K, V1, V2> {
    /// Keys stored with `keys`, this side's values with `values`, the other side's with
    /// `other_values`.
    pub fn with(
        keys: impl Serde<K> + 'static,
        values: impl Serde<V1> + 'static,
        other_values: impl Serde<V2> + 'static,
    ) -> Self {
        Self {
            keys: Arc::new(keys),
            values: Arc::new(values),
            other_values: Arc::new(other_values),
            name: None,
        }
    }

    /// Names the join's stores `<name>-this-join-store` and `<name>-other-join-store`
    /// (Kafka Streams' `withStoreName`).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Shares the serdes (cheap: they are reference-counted).
impl<K, V1, V2> Clone for StreamJoined<K, V1, V2> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            values: self.values.clone(),
            other_values: self.other_values.clone(),
            name: self.name.clone(),
        }
    }
}

impl<K, V1, V2> std::fmt::Debug for StreamJoined<K, V1, V2> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamJoined")
            .field("name", &self.name)
            .finish()
    }
}

/// Options of a stream-table join (Kafka Streams' `Joined`): the serdes its grace buffer
/// writes stream records with, a grace period, and the join node's name — for
/// [`super::KStream::join_table_with`] and [`super::KStream::left_join_table_with`].
///
/// **The grace period** (`Joined.withGracePeriod`, versioned tables only): each stream record
/// waits in a durable buffer until stream time passes its timestamp by `grace`, then joins the
/// table's version *at its timestamp* — so a table update that arrives out of order, up to
/// `grace` late, is still seen by the stream records stamped after it. A stream record already
/// later than `grace` behind stream time is joined at once (against its timestamp's version).
/// What it costs: every result is delayed until stream time has moved `grace` past its
/// record, and each buffered record is written (and changelogged) twice — scheduled and
/// removed — as an event-time timer of the partition. [`super::StreamsBuilder::build`] fails
/// when the table is not versioned or its history is shorter than `grace` (the version a
/// record needs must still be kept when it leaves the buffer).
///
/// ```
/// use std::time::Duration;
/// use eosflow::dsl::{Consumed, Joined, Produced, StreamsBuilder};
/// use eosflow::serdes::StringSerde;
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
///
/// let builder = StreamsBuilder::new();
/// let prices = builder.versioned_table(
///     "prices",
///     Consumed::with(StringSerde, StringSerde),
///     Duration::from_secs(60),
/// );
/// builder
///     .stream("orders", Consumed::with(StringSerde, StringSerde))
///     .join_table_with(
///         &prices,
///         |order, price| format!("{order} at {price}"),
///         Joined::with(StringSerde, StringSerde).with_grace_period(Duration::from_secs(5)),
///     )
///     .to("priced", Produced::with(StringSerde, StringSerde));
/// let prices = prices.store().clone();
/// let mut driver = TopologyTestDriver::new(builder.build()?)?;
/// let tea = "tea".to_string();
/// driver.pipe_table_at(&prices, &tea, Some(&"3.00".to_string()), 1_000)?;
/// driver.pipe(TestRecord::new("orders", Some("tea"), Some("o-1")).timestamp(4_000))?;
/// // Nothing yet: o-1 waits until stream time passes 4 s + 5 s of grace.
/// assert!(driver.read_raw_output("priced").is_empty());
/// // A price change stamped 3 s arrives late, within the grace: o-1 (at 4 s) sees it.
/// driver.pipe_table_at(&prices, &tea, Some(&"3.50".to_string()), 3_000)?;
/// driver.pipe(TestRecord::new("orders", Some("tea"), Some("o-2")).timestamp(9_000))?;
/// let out: Vec<String> = driver.read_raw_output("priced").iter().map(|r| r.value_text()).collect();
/// assert_eq!(out, ["o-1 at 3.50"]); // o-2 waits for 14 s
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Joined<K, V> {
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V>>,
    pub(crate) grace: Option<Duration>,
    pub(crate) name: Option<String>,
}

impl<K, V> Joined<K, V> {
    /// The stream's keys and values written with `keys` and `values` (in the grace buffer);
    /// no grace period.
    pub fn with(keys: impl Serde<K> + 'static, values: impl Serde<V> + 'static) -> Self {
        Self {
            keys: Arc::new(keys),
            values: Arc::new(values),
            grace: None,
            name: None,
        }
    }

    /// Buffers stream records for `grace` before joining them (see [`Joined`]).
    pub fn with_grace_period(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Names the join node (a buffered record's timers are the node's: name it in an
    /// application that will change).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Shares the serdes (cheap: they are reference-counted).
impl<K, V> Clone for Joined<K, V> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            values: self.values.clone(),
            grace: self.grace,
            name: self.name.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for Joined<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joined")
            .field("grace", &self.grace)
            .field("name", &self.name)
            .finish()
    }
}

/// Where [`super::KStream::print`] writes (Kafka Streams' `Printed` and its mapper).
///
/// Each record is one line `[label]: text`: `label` is [`Printed::with_label`]'s, else the
/// print node's name (as Kafka Streams'); `text` is `key, value` with both in their `Debug`
/// form (`None` for a record without a key), or what [`Printed::with_key_value_mapper`] makes.
pub struct Printed<K, V> {
    pub(crate) target: PrintTarget,
    pub(crate) label: Option<String>,
    pub(crate) mapper: PrintMapper<K, V>,
}

/// The text of a printed record, from its key and value.
pub(crate) type PrintMapper<K, V> = Arc<dyn Fn(Option<&K>, &V) -> String + Send + Sync>;

/// Standard output or a file appended to.
pub(crate) enum PrintTarget {
    SysOut,
    File(PathBuf),
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> Printed<K, V> {
    /// Prints to standard output (Kafka Streams' `Printed.toSysOut()`).
    pub fn to_sys_out() -> Self {
        Self::with_target(PrintTarget::SysOut)
    }

    /// Appends to the file at `path`, created if missing (Kafka Streams' `Printed.toFile`).
    pub fn to_file(path: impl Into<PathBuf>) -> Self {
        Self::with_target(PrintTarget::File(path.into()))
    }

    fn with_target(target: PrintTarget) -> Self {
        Self {
            target,
            label: None,
            mapper: Arc::new(|k, v| match k {
                Some(k) => format!("{k:?}, {v:?}"),
                None => format!("None, {v:?}"),
            }),
        }
    }
}

impl<K, V> Printed<K, V> {
    /// The label between brackets at the start of each line (Kafka Streams' `withLabel`).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The text after the label, from the record's key and value (Kafka Streams'
    /// `withKeyValueMapper`).
    pub fn with_key_value_mapper(
        mut self,
        mapper: impl Fn(Option<&K>, &V) -> String + Send + Sync + 'static,
    ) -> Self {
        self.mapper = Arc::new(mapper);
        self
    }
}

impl<K, V> std::fmt::Debug for Printed<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            PrintTarget::SysOut => "stdout".to_string(),
            PrintTarget::File(p) => p.display().to_string(),
        };
        f.debug_struct("Printed")
            .field("target", &target)
            .field("label", &self.label)
            .finish()
    }
}
