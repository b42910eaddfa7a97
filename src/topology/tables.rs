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
    pub(crate) _types: PhantomData<fn(V, R)>,
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
            (key, value, record),
            row,
            self.left,
            "no-table-value",
            &self.joiner,
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
/// record's key with its timestamp and headers.
pub(crate) fn join_output<K, V, T, R>(
    ctx: &mut NodeContext<'_, '_>,
    (key, value, record): (K, V, TypedRecord<K, V>),
    row: Option<T>,
    left: bool,
    missing: &'static str,
    joiner: &Joiner<K, V, T, R>,
) where
    K: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    if row.is_none() && !left {
        telemetry::join_dropped(ctx.node_name(), missing);
        return;
    }
    if let Some(out) = joiner(&key, &value, row.as_ref()) {
        ctx.forward(TypedRecord {
            key: Some(key),
            value: Some(out),
            timestamp: record.timestamp,
            headers: record.headers,
        });
    }
}
