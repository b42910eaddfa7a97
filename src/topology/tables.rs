//! Tables and stream-table joins (Kafka Streams' `builder.table(topic)`, `KStream.join(KTable)`
//! and `KStream.leftJoin(KTable)`).
//!
//! A **table** materializes a compacted topic, co-partitioned with the stream, into a store per
//! partition: each record of the topic is an upsert of its key (a null value deletes it). The
//! topic is the table's changelog — there is no `<app>-<table>-changelog` copy: on assignment
//! the store is restored from the topic up to the group's committed offset of it, then the
//! runtime consumes the topic with the inputs and writes its records into the store inside
//! the batch's transaction, committed with the offsets. The store's checkpoint is the topic's
//! offset, applied only after the commit; so across `kill -9` a table record is applied once
//! to the state every later stream record sees, never skipped.
//!
//! A **stream-table join** node looks each stream record's key up in the table as it stands
//! when the record is processed and forwards the joiner's result, keyed by the stream key,
//! with the stream record's timestamp and headers (the runtime stamps the envelope with the
//! stream record as cause). Only the stream side triggers output: a table update joins
//! nothing by itself, and does not change results already sent.
//!
//! - inner ([`super::TopologyBuilder::add_stream_table_join`]): a stream record whose key is
//!   not in the table gives nothing, counted in
//!   `eosflow_join_dropped_records_total{node, reason="no-table-value"}` (Kafka Streams drops it
//!   silently);
//! - left ([`super::TopologyBuilder::add_stream_table_left_join`]): the joiner gets `None`.
//!
//! A **versioned table** ([`TableHandle::versioned`]) also keeps every version of each key
//! within a configurable history, and a join
//! against it looks the key up *as of the stream record's timestamp* (a temporal join, Kafka
//! Streams' KIP-889/KIP-914): a stream record that arrives after a table update with a later
//! timestamp still meets the row valid at its own time. A stream record older than the
//! history is dropped by inner and left joins alike and counted with reason
//! `history-too-short` (with a WARN at most every ten seconds): a left join's `None` means
//! "no row at that time", which the table can no longer tell.
//!
//! **A grace period** (the DSL's [`crate::dsl::Joined::with_grace_period`], Kafka Streams'
//! `Joined.withGracePeriod`, versioned tables only): each stream record waits in a durable
//! buffer — the partition's event-time timers, changelogged with the batch — until stream time
//! passes its timestamp by the grace, then joins the version valid at its timestamp, so table
//! records up to the grace late are seen; one already later than the grace is joined at once.
//!
//! Either kind drops stream records without a key (`reason="no-key"`) or without a value
//! (`reason="no-value"`), as Kafka Streams does. The joiner returning `None` forwards nothing.
//!
//! Order between the two topics is by timestamp: within one partition number, the runtime
//! handles the table's and the inputs' records in timestamp order (a table record before a
//! stream record of the same time) and handles a record only once the other partitions have
//! shown they hold nothing earlier — a later record of theirs polled, or read to their end —
//! so a stream record joins the row its key had at the stream record's time, across restarts
//! too. Each partition is assumed to be in timestamp order (Kafka Streams' choice of the
//! record with the lowest timestamp across a task's partitions).
//!
//! ```
//! use eosflow::serdes::StringSerde;
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//! use eosflow::topology::{TableHandle, Topology};
//!
//! // Page views enriched with the user's name from the compacted `users` topic.
//! let users = TableHandle::new("users", "users", StringSerde, StringSerde);
//! let topology = Topology::builder()
//!     .add_source("views", &["views"], StringSerde, StringSerde)
//!     .add_table(&users)
//!     .add_stream_table_left_join("enrich", &users, |_user, page: &String, name: Option<&String>| {
//!         Some(format!("{page} by {}", name.map_or("someone", String::as_str)))
//!     }, &["views"])
//!     .add_sink("out", "enriched-views", StringSerde, StringSerde, &["enrich"])
//!     .build()?;
//! assert_eq!(topology.table_topics(), vec!["users".to_string()]);
//! // The users topic is the table's changelog: no `<app>-users-changelog` is needed.
//! assert_eq!(topology.changelog_topics("app"), vec!["app-state-changelog".to_string()]);
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! driver.pipe(TestRecord::new("views", Some("ann"), Some("/home")).id("view-1"))?;
//! driver.pipe_table(&users, &"ann".to_string(), Some(&"Ann".to_string()))?; // joins nothing
//! driver.pipe(TestRecord::new("views", Some("ann"), Some("/cart")).id("view-2"))?;
//! driver.pipe_table(&users, &"ann".to_string(), None)?; // a tombstone deletes the row
//! driver.pipe(TestRecord::new("views", Some("ann"), Some("/exit")).id("view-3"))?;
//! let out = driver.read_raw_output("enriched-views");
//! let values: Vec<String> = out.iter().map(|r| r.value_text()).collect();
//! assert_eq!(values, ["/home by someone", "/cart by Ann", "/exit by someone"]);
//! // Each result is caused by its stream record.
//! assert_eq!(out[1].header("causation_id"), Some("view-2"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use super::stream_joins::{put_bytes, take_bytes};
use crate::codec::envelope::EnvelopeRef;
use crate::processor::{AsOf, StoreHandle};
use crate::record::ProcessError;
use crate::serdes::Serde;
use crate::telemetry;

/// A table: its store's name, its topic and its key and value serdes. Added to a topology
/// with [`super::TopologyBuilder::add_table`] and joined with
/// [`super::TopologyBuilder::add_stream_table_join`] (or `_left_join`); processors it is
/// attached to read it with [`super::ProcessorContext::store`]`(table.store())` (read-only).
/// Cheap to clone.
pub struct TableHandle<K, V> {
    store: StoreHandle<K, V>,
    topic: Arc<str>,
    /// A versioned table's history (see [`TableHandle::versioned`]).
    history: Option<Duration>,
}

impl<K, V> Clone for TableHandle<K, V> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            topic: self.topic.clone(),
            history: self.history,
        }
    }
}

impl<K, V> std::fmt::Debug for TableHandle<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableHandle")
            .field("name", &self.store.name())
            .field("topic", &self.topic)
            .field("history", &self.history)
            .finish()
    }
}

impl<K, V> TableHandle<K, V> {
    /// The table `name` (its store's name) of `topic`, whose keys and values use these serdes.
    /// The key serde must write keys as the stream's key serde does: the join looks the
    /// stream key up by its bytes.
    pub fn new(
        name: impl Into<String>,
        topic: impl Into<String>,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
    ) -> Self {
        Self {
            store: StoreHandle::new(name, keys, values),
            topic: Arc::from(topic.into()),
            history: None,
        }
    }

    /// A **versioned** table `name` of `topic` (Kafka Streams'
    /// `Stores.persistentVersionedKeyValueStore(name, historyRetention)`): besides its latest
    /// rows it keeps every version — a record's value (or tombstone) from its timestamp until
    /// the next version's — within `history` of the newest timestamp its topic has shown, so a
    /// stream-table join looks each stream record's key up *as of the stream record's
    /// timestamp* (a temporal join), and a processor it is attached to can read
    /// [`crate::processor::KeyValueStore::get_as_of`]. A table record with an earlier
    /// timestamp than its key's latest version goes into the history; one older than the
    /// history is dropped (counted in `eosflow_table_records_skipped_total`). A stream record
    /// older than the history is dropped by inner and left joins alike, counted as
    /// `eosflow_join_dropped_records_total{reason="history-too-short"}`.
    ///
    /// The topic is still the table's only changelog: set its `min.compaction.lag.ms` to at
    /// least `history`, or a rebuild from the topic after compaction lacks the versions
    /// compaction removed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::processor::AsOf;
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::{TableHandle, Topology};
    ///
    /// // Orders priced with the price list as it stood at each order's time.
    /// let prices =
    ///     TableHandle::versioned("prices", "prices", StringSerde, StringSerde, Duration::from_secs(3600));
    /// let topology = Topology::builder()
    ///     .add_source("orders", &["orders"], StringSerde, StringSerde)
    ///     .add_table(&prices)
    ///     .add_stream_table_join("price", &prices, |_item, order: &String, price: &String| {
    ///         Some(format!("{order} at {price}"))
    ///     }, &["orders"])
    ///     .add_sink("out", "priced", StringSerde, StringSerde, &["price"])
    ///     .build()?;
    ///
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// let tea = "tea".to_string();
    /// driver.pipe_table_at(&prices, &tea, Some(&"3.00".to_string()), 1_000)?;
    /// driver.pipe_table_at(&prices, &tea, Some(&"3.50".to_string()), 5_000)?;
    /// // An order stamped before the price change, arriving after it, pays the old price.
    /// driver.pipe(TestRecord::new("orders", Some("tea"), Some("o-1")).timestamp(4_000))?;
    /// driver.pipe(TestRecord::new("orders", Some("tea"), Some("o-2")).timestamp(6_000))?;
    /// let out: Vec<String> = driver.read_raw_output("priced").iter().map(|r| r.value_text()).collect();
    /// assert_eq!(out, ["o-1 at 3.00", "o-2 at 3.50"]);
    /// // The latest row, and the row as of a time.
    /// assert_eq!(driver.table_get(&prices, &tea)?.as_deref(), Some("3.50"));
    /// assert_eq!(
    ///     driver.table_get_as_of(&prices, &tea, 4_999)?,
    ///     AsOf::Value { value: "3.00".to_string(), valid_from: 1_000 }
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn versioned(
        name: impl Into<String>,
        topic: impl Into<String>,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
        history: Duration,
    ) -> Self {
        Self {
            history: Some(history),
            ..Self::new(name, topic, keys, values)
        }
    }

    /// A versioned table's history; `None` for a plain table (latest rows only).
    pub fn history(&self) -> Option<Duration> {
        self.history
    }

    /// The table's name (its store's).
    pub fn name(&self) -> &str {
        self.store.name()
    }

    /// The topic the table materializes (and restores from).
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The table's store, to read it from a processor it is attached to.
    pub fn store(&self) -> &StoreHandle<K, V> {
        &self.store
    }
}

/// The joiner of a stream-table join: the stream key and value and the table's value (`None`
/// only in a left join), to the result (`None`: forward nothing).
pub(crate) type Joiner<K, V, T, R> = Box<dyn Fn(&K, &V, Option<&T>) -> Option<R> + Send>;

/// The node of a stream-table join.
pub(crate) struct StreamTableJoin<K, V, T, R> {
    pub(crate) table: StoreHandle<K, T>,
    pub(crate) joiner: Joiner<K, V, T, R>,
    /// Left join: a stream record whose key the table lacks is joined with `None`.
    pub(crate) left: bool,
    /// The table is versioned: look the key up as of the stream record's timestamp.
    pub(crate) as_of: bool,
    /// A grace period (versioned tables only): stream records wait in a durable buffer.
    pub(crate) grace: Option<JoinGrace<K, V>>,
    pub(crate) _types: PhantomData<fn(V, R)>,
}

/// A stream-table join's grace period (Kafka Streams' `Joined.withGracePeriod`) and the serdes
/// its buffer writes stream records with.
///
/// The buffer is the partition's event-time timers: a stream record not behind stream time
/// by more than the grace is scheduled as a timer due at `timestamp + grace`, keyed
/// `stream key · offset · source hash · sequence` (so timers of one due time fire in Kafka
/// Streams' buffer order: key bytes, then arrival) and carrying the record (timestamp, key,
/// value, the envelope it was caused by, its headers) as payload. The timer fires once stream
/// time reaches its due time, after the record that moved stream time there, and the record
/// is joined then with the table's version at its timestamp. Timers are written through the
/// batch overlay and changelogged in the batch's transaction, so a buffered record is joined
/// exactly once across crashes: the removal of its timer commits with the result.
pub(crate) struct JoinGrace<K, V> {
    pub(crate) ms: i64,
    pub(crate) keys: Arc<dyn Serde<K>>,
    pub(crate) values: Arc<dyn Serde<V>>,
    /// The input a sequence number was last given for, and that number: several stream
    /// records of one input (a `flat_map` upstream) get distinct buffer keys.
    pub(crate) last: Option<(u64, u32)>,
}

impl<K, V> JoinGrace<K, V> {
    /// The grace period of `grace`, buffering with these serdes.
    pub(crate) fn new(grace: Duration, keys: Arc<dyn Serde<K>>, values: Arc<dyn Serde<V>>) -> Self {
        Self {
            ms: i64::try_from(grace.as_millis()).unwrap_or(i64::MAX),
            keys,
            values,
            last: None,
        }
    }

    /// The timer of a stream record to buffer: due at `timestamp + grace`, keyed and carrying
    /// the record as [`JoinGrace`] says.
    fn timer(
        &mut self,
        ctx: &NodeContext<'_, '_>,
        key: &K,
        value: &V,
        timestamp: i64,
        headers: &[(String, Vec<u8>)],
    ) -> Result<crate::processor::Timer, ProcessError> {
        let permanent = |e: crate::serdes::SerdeError| {
            ProcessError::permanent(format!("buffering a stream record of the join: {e}"))
        };
        let key_bytes = self.keys.serialize(key).map_err(permanent)?;
        let value_bytes = self.values.serialize(value).map_err(permanent)?;
        let input = ctx.input();
        let source = input_hash(input);
        let seq = match self.last {
            Some((h, n)) if h == source => n.wrapping_add(1),
            _ => 0,
        };
        self.last = Some((source, seq));
        let mut timer_key = key_bytes.clone();
        timer_key.extend_from_slice(&(input.offset as u64 ^ (1 << 63)).to_be_bytes());
        timer_key.extend_from_slice(&source.to_be_bytes());
        timer_key.extend_from_slice(&seq.to_be_bytes());

        let cause = EnvelopeRef::of(input.headers);
        let mut payload = timestamp.to_be_bytes().to_vec();
        for field in [
            Some(key_bytes.as_slice()),
            Some(value_bytes.as_slice()),
            cause.id,
            cause.correlation_id,
            cause.tenant,
        ] {
            put_bytes(&mut payload, field).map_err(permanent)?;
        }
        for (name, value) in headers {
            put_bytes(&mut payload, Some(name.as_bytes())).map_err(permanent)?;
            put_bytes(&mut payload, Some(value)).map_err(permanent)?;
        }
        let due = timestamp.saturating_add(self.ms);
        Ok(crate::processor::Timer::event_time(timer_key, due).with_payload(payload))
    }

    /// The stream record a buffer timer carries: key, value, and a record with its timestamp
    /// and headers (the envelope of the record that caused it first).
    fn record(&self, payload: &[u8]) -> Result<(K, V, TypedRecord<K, V>), ProcessError> {
        let bad = |what: String| {
            ProcessError::permanent(format!("a join buffer timer's payload: {what}"))
        };
        let timestamp = payload
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_be_bytes)
            .ok_or_else(|| bad("cut short".into()))?;
        let mut at = 8;
        let next = |at: &mut usize| take_bytes(payload, at).map_err(|e| bad(e.to_string()));
        let key = next(&mut at)?.ok_or_else(|| bad("no key".into()))?;
        let key = self.keys.deserialize(key).map_err(|e| bad(e.to_string()))?;
        let value = next(&mut at)?.ok_or_else(|| bad("no value".into()))?;
        let value = self
            .values
            .deserialize(value)
            .map_err(|e| bad(e.to_string()))?;
        let (id, correlation, tenant) = (next(&mut at)?, next(&mut at)?, next(&mut at)?);
        let mut headers = Vec::new();
        if let Some(id) = id {
            headers.push(("causation_id".to_string(), id.to_vec()));
        }
        if let Some(c) = correlation.or(id) {
            headers.push(("correlation_id".to_string(), c.to_vec()));
        }
        if let Some(t) = tenant {
            headers.push(("tenant".to_string(), t.to_vec()));
        }
        while at < payload.len() {
            let name = next(&mut at)?.ok_or_else(|| bad("a header without a name".into()))?;
            let name = String::from_utf8(name.to_vec()).map_err(|e| bad(e.to_string()))?;
            let value = next(&mut at)?.ok_or_else(|| bad("a header without a value".into()))?;
            headers.push((name, value.to_vec()));
        }
        let record = TypedRecord {
            key: None,
            value: None,
            timestamp: Some(timestamp),
            headers,
        };
        Ok((key, value, record))
    }
}

/// A stable hash (FNV-1a) of where an input record comes from: topic, partition, offset and,
/// for a timer's call (offset -1), its key and due time.
fn input_hash(input: &crate::record::Record<'_>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(input.topic.as_bytes());
    eat(&input.partition.to_be_bytes());
    eat(&input.offset.to_be_bytes());
    eat(input.key.unwrap_or_default());
    eat(&input.timestamp.unwrap_or_default().to_be_bytes());
    h
}

impl<K, V, T, R> NodeProcessor<K, V> for StreamTableJoin<K, V, T, R>
where
    K: Clone + Send + 'static,
    V: Send + 'static,
    T: 'static,
    R: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        let Some(JoinInput { key, value, record }) = JoinInput::of(ctx, record) else {
            return Ok(());
        };
        // With a grace period, a record within it of stream time waits in the buffer; one
        // later than that is joined at once (Kafka Streams' buffer refuses it).
        if let (Some(grace), Some(ts)) = (self.grace.as_mut(), record.timestamp) {
            let stream = ctx.stream_time_ms().unwrap_or(ts);
            if stream.saturating_sub(grace.ms) <= ts {
                let timer = grace.timer(ctx, &key, &value, ts, &record.headers)?;
                return ctx.schedule(timer);
            }
        }
        self.join(ctx, key, value, record)
    }

    /// A buffered stream record whose grace has passed: joined with the table's version at its
    /// timestamp, its result stamped with that timestamp and caused by its own envelope.
    fn on_timer(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &crate::processor::Timer,
    ) -> Result<(), ProcessError> {
        let Some(grace) = &self.grace else {
            return Ok(());
        };
        let (key, value, record) = grace.record(&timer.payload)?;
        self.join(ctx, key, value, record)
    }
}

impl<K, V, T, R> StreamTableJoin<K, V, T, R>
where
    K: Clone + Send + 'static,
    V: Send + 'static,
    T: 'static,
    R: Clone + Send + 'static,
{
    /// Joins one stream record with its key's row (as of its timestamp on a versioned table).
    fn join(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        key: K,
        value: V,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        let row = match (self.as_of, record.timestamp) {
            (true, Some(ts)) => match ctx.store(&self.table)?.get_as_of(&key, ts)? {
                AsOf::Value { value, .. } => Some(value),
                AsOf::Absent => None,
                AsOf::BeyondHistory { cutoff } => {
                    history_too_short(ctx.node_name(), self.table.name(), ts, cutoff);
                    return Ok(());
                }
            },
            _ => ctx.store(&self.table)?.get(&key)?,
        };
        join_output(
            ctx,
            (Some(key), value, record),
            row,
            self.left,
            "no-table-value",
            |k, v, t| k.and_then(|k| (self.joiner)(k, v, t)),
        );
        Ok(())
    }
}

/// A stream record older than a versioned table's history: dropped by inner and left joins
/// alike, counted as `history-too-short`, with a WARN at most every ten seconds.
fn history_too_short(node: &str, table: &str, timestamp: i64, cutoff: i64) {
    telemetry::join_dropped(node, "history-too-short");
    crate::state::versioned::warn_limited(|| {
        tracing::warn!(
            node,
            table,
            timestamp,
            cutoff,
            "stream record older than the versioned table's history dropped by the join (raise the table's history)"
        );
    });
}

/// A stream record a join node handles: its key and value taken out, the rest (timestamp and
/// headers: the cause the result carries) kept.
pub(crate) struct JoinInput<K, V> {
    pub(crate) key: K,
    pub(crate) value: V,
    pub(crate) record: TypedRecord<K, V>,
}

impl<K, V> JoinInput<K, V> {
    /// The record's key and value; `None` (counted in `eosflow_join_dropped_records_total`
    /// with reason `no-key` or `no-value`) when it lacks either: a join needs both.
    pub(crate) fn of(ctx: &NodeContext<'_, '_>, mut record: TypedRecord<K, V>) -> Option<Self> {
        let Some(key) = record.key.take() else {
            telemetry::join_dropped(ctx.node_name(), "no-key");
            return None;
        };
        let Some(value) = record.value.take() else {
            telemetry::join_dropped(ctx.node_name(), "no-value");
            return None;
        };
        Some(Self { key, value, record })
    }
}

/// The end of every stream-side join: no `row` on an inner join drops the record (counted
/// with `missing`), else the joiner's result, if any, goes downstream under the stream
/// record's key (none for a keyless record a global join let through) with its timestamp
/// and headers.
pub(crate) fn join_output<K, V, T, R>(
    ctx: &mut NodeContext<'_, '_>,
    (key, value, record): (Option<K>, V, TypedRecord<K, V>),
    row: Option<T>,
    left: bool,
    missing: &'static str,
    joiner: impl FnOnce(Option<&K>, &V, Option<&T>) -> Option<R>,
) where
    K: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    if row.is_none() && !left {
        telemetry::join_dropped(ctx.node_name(), missing);
        return;
    }
    if let Some(out) = joiner(key.as_ref(), &value, row.as_ref()) {
        ctx.forward(TypedRecord {
            key,
            value: Some(out),
            timestamp: record.timestamp,
            headers: record.headers,
        });
    }
}
