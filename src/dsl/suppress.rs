//! [`KTable::suppress`]: a table's updates held back per key and emitted later (Kafka Streams'
//! `KTable.suppress(Suppressed)`), with [`Suppressed`] saying how long and [`BufferConfig`]
//! how much may wait.
//!
//! The buffer is a RocksDB store of the topology, changelogged like any other (see
//! [`SuppressBuffer`] and `crate::topology::suppress` for its layout): a restart, a rebalance
//! or a `kill -9` resumes it where the last committed transaction left it.

use std::sync::Arc;
use std::time::Duration;

use super::builder::AddFn;
use super::options::check_name;
use super::stream::KStream;
use super::table::KTable;
use super::Data;
use crate::processor::StoreHandle;
use crate::serdes::{BytesSerde, Serde};
use crate::topology::suppress::{Limits, Suppress};

/// How long a table's updates wait and how many may wait (Kafka Streams' `Suppressed`).
///
/// Only [`Suppressed::until_time_limit`]: Kafka Streams' `untilWindowCloses` is eosflow's
/// [`crate::topology::windows::EmitStrategy::OnWindowClose`] on the windowed aggregation
/// itself, whose window store is then the (unbounded) buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    limit: Duration,
    buffer: BufferConfig,
    name: Option<String>,
}

impl Suppressed {
    /// Each key's updates wait until the table's stream time (the largest update time the
    /// suppression has seen) is `limit` past the time of the key's first waiting update; then
    /// the key's latest update is emitted, with its own timestamp. A key updated again while
    /// waiting keeps its place: only its latest value comes out. `Duration::ZERO` emits every
    /// update at once.
    pub fn until_time_limit(limit: Duration, buffer: BufferConfig) -> Self {
        Self {
            limit,
            buffer,
            name: None,
        }
    }

    /// Names the suppression node (Kafka Streams' `withName`); its store is then
    /// `<name>-store`, its changelog `<application id>-<name>-store-changelog`.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    fn limits(&self) -> Limits {
        Limits {
            time_ms: i64::try_from(self.limit.as_millis()).unwrap_or(i64::MAX),
            max_records: self.buffer.max_records.unwrap_or(u64::MAX),
            max_bytes: self.buffer.max_bytes.unwrap_or(u64::MAX),
        }
    }
}

/// How much a suppression buffer may hold (Kafka Streams' `Suppressed.BufferConfig`): no bound,
/// or at most a number of keys and/or bytes.
///
/// When an update would take the buffer past a bound, the buffer emits its oldest entries —
/// earliest first-buffered time first — until it is within bounds again, before their time
/// limit (Kafka Streams' `emitEarlyWhenFull`, its default for bounded buffers and eosflow's
/// only policy). Kafka Streams' other policy, `shutDownWhenFull`, has no counterpart: it
/// stops the instance on a condition the instance could recover from, and an eosflow instance
/// does not exit while it can go on.
///
/// A key's size is what its entry takes in the buffer's store: its serialized key twice
/// (entry and time index), its serialized value and headers, and 32 bytes of prefixes, times
/// and flags (8 more per header) — not Kafka Streams' estimate of its heap size, so a
/// `max_bytes` bound holds a different number of keys than in Kafka Streams.
///
/// ```
/// use std::time::Duration;
/// use eosflow::dsl::{BufferConfig, Consumed, Materialized, Produced, StreamsBuilder, Suppressed};
/// use eosflow::serdes::StringSerde;
/// use eosflow::testing::TopologyTestDriver;
///
/// // Each sensor's latest reading, held an hour, at most two sensors waiting.
/// let builder = StreamsBuilder::new();
/// builder
///     .stream("readings", Consumed::with(StringSerde, StringSerde))
///     .to_table(Materialized::with(StringSerde, StringSerde).named("latest"))
///     .suppress(Suppressed::until_time_limit(
///         Duration::from_secs(3600),
///         BufferConfig::max_records(2).emit_early_when_full(),
///     ))
///     .to_stream()
///     .to("held-readings", Produced::with(StringSerde, StringSerde));
/// let mut driver = TopologyTestDriver::new(builder.build()?)?;
/// let s = |t: &str| t.to_string();
/// for (sensor, reading) in [("s1", "20"), ("s2", "21"), ("s1", "22"), ("s3", "19")] {
///     driver.pipe_input("readings", &StringSerde, &StringSerde, &s(sensor), &s(reading))?;
/// }
/// // s3 is a third sensor waiting: the oldest, s1, goes out early with its latest reading.
/// let out = driver.read_output("held-readings", &StringSerde, &StringSerde)?;
/// assert_eq!(out, vec![(Some(s("s1")), Some(s("22")))]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufferConfig {
    max_records: Option<u64>,
    max_bytes: Option<u64>,
}

impl BufferConfig {
    /// No bound: every key waits its full time limit, however many there are (the store is on
    /// disk, so memory does not bound it; disk and restore time do).
    pub fn unbounded() -> Self {
        Self::default()
    }

    /// At most `n` keys waiting (`0`: every update is emitted at once).
    pub fn max_records(n: u64) -> Self {
        Self::unbounded().with_max_records(n)
    }

    /// At most `n` bytes waiting (see the type's doc for how a key's size is counted).
    pub fn max_bytes(n: u64) -> Self {
        Self::unbounded().with_max_bytes(n)
    }

    /// This bound and at most `n` keys.
    pub fn with_max_records(mut self, n: u64) -> Self {
        self.max_records = Some(n);
        self
    }

    /// This bound and at most `n` bytes.
    pub fn with_max_bytes(mut self, n: u64) -> Self {
        self.max_bytes = Some(n);
        self
    }

    /// The full-buffer policy, spelled as in Kafka Streams for readers coming from it: emit
    /// the oldest entries early. It is the only policy, so this returns the config unchanged.
    pub fn emit_early_when_full(self) -> Self {
        self
    }
}

/// The store of a suppressed table ([`KTable::suppress`]): the buffer of updates waiting,
/// changelogged as `<application id>-<name>-changelog`. It holds the buffer, not the table's
/// rows: read the table upstream of the suppression for those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuppressBuffer {
    name: String,
}

impl SuppressBuffer {
    /// The store's name (`KTABLE-SUPPRESS-STATE-STORE-<n>`, or `<name>-store` when the
    /// suppression is [`Suppressed::named`]).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Adds a suppression node after `table` (the node that forwards its updates), buffering in a
/// store of its own.
pub(crate) fn suppress<'b, K: Data, V: Data>(
    table: KStream<'b, K, V>,
    keys: Arc<dyn Serde<K>>,
    values: Arc<dyn Serde<V>>,
    suppressed: Suppressed,
) -> KTable<'b, K, V, SuppressBuffer> {
    let builder = table.builder;
    let limits = suppressed.limits();
    let (node, store) = match suppressed.name {
        Some(name) => {
            let store = format!("{name}-store");
            (name, store)
        }
        None => {
            let node = builder.next_name("KTABLE-SUPPRESS-");
            (node, builder.next_name("KTABLE-SUPPRESS-STATE-STORE-"))
        }
    };
    check_name(builder, "store", &store);
    let handle = StoreHandle::new(store.clone(), BytesSerde, BytesSerde);
    let processor = Suppress::new(keys, values, handle.clone(), limits);
    let add: AddFn = Box::new(move |b, w| {
        b.add_node(w.name, processor, &w.parents);
        b.forwards::<K, V>(w.name);
        b.add_state_store(&handle, &[w.name]);
    });
    let id = builder.push("KTABLE-SUPPRESS-", Some(node), vec![table.id], add);
    KTable::new(
        KStream::new(builder, id, table.rekeyed),
        SuppressBuffer { name: store },
    )
}
