//! Global tables and stream-global-table joins (Kafka Streams' `builder.globalTable(topic)`,
//! `KStream.join(GlobalKTable, keySelector, joiner)` and `leftJoin`).
//!
//! A **global table** holds *every* partition of its topic on *every* instance: reference
//! data (countries, products) a stream looks up by any key it can compute, not only by its
//! own. Unlike a [table](super::tables) it is not co-partitioned with the stream and has no
//! changelog of its own: the topic is its changelog. Before an instance joins its consumer
//! group, the runtime reads the topic to its end (read_committed, no consumer group, every
//! partition assigned) into a local RocksDB store under the state directory, and `/readyz`
//! answers 503 until that is done; then a thread of its own keeps the store current while the
//! stream is processed. The store checkpoints each partition's offset atomically with the rows
//! it wrote, so a restart reads only what the topic gained since.
//!
//! **Not synchronized with the stream** (as in Kafka Streams): a stream record sees the table
//! as the background thread has brought it so far — a row written to the topic after the
//! stream record may already be visible, or one written before it not yet. Use a
//! co-partitioned [table](super::tables) when a join must see exactly the row its key had at
//! the stream record's time, across restarts. Reference data that changes rarely is the use
//! case.
//!
//! Rows: a record is an upsert of its key, a null value deletes it. A record without a key,
//! or whose key or value the table's serdes cannot read, is skipped with an ERROR log and
//! counted in `eosflow_global_table_skipped_records_total{table, reason}`: a global table's
//! records are not inputs of a transaction, so they have no dead-letter topic, and one bad
//! row must not stop the table.
//!
//! A **stream-global-table join** node maps each stream record to the table's key with a key
//! extractor `(Option<key>, value) -> Option<table key>` and forwards the joiner's result keyed
//! by the *stream* key, with the stream record's timestamp and headers (the runtime stamps the
//! envelope with the stream record as cause):
//!
//! - inner ([`super::TopologyBuilder::add_stream_global_table_join`]): no row (or no key from
//!   the extractor) gives nothing, counted in `eosflow_join_dropped_records_total{node,
//!   reason}` (`no-global-value`, `no-global-key`);
//! - left ([`super::TopologyBuilder::add_stream_global_table_left_join`]): no row, the joiner
//!   gets `None`; no key from the extractor drops the record (`no-global-key`) as the inner
//!   join does, unless the stream record has no key either — then the joiner gets `None`.
//!
//! A stream record **without a key** is joined too (Kafka Streams 3.7, KIP-962): the extractor
//! gets `None` for its key and may still name a table key (one carried in the value), and the
//! result is keyless. Either kind drops stream records without a value (`no-value`).
//!
//! **From a plain [`Processor`](crate::processor::Processor)** (no topology): keep a
//! [`GlobalTableHandle`], declare it with
//! [`ProcessorSpec::global_table`](crate::processor::ProcessorSpec::global_table) and read rows
//! with [`GlobalTableHandle::get`] in `process`. The runtime bootstraps and tails the table exactly
//! as for a topology and binds its store to the handle (the test driver binds its in-memory
//! one, fed by `pipe_global`); binding again — the processor handed to a new driver or runtime
//! — replaces the store. The same consistency applies: the row as the tail thread has it now.
//! A topology's join nodes do not go through the handle: each topology built with a handle
//! gets a store slot of its own, so two topologies sharing a handle run side by side.
//!
//! ```
//! use eosflow::serdes::StringSerde;
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//! use eosflow::topology::{GlobalTableHandle, Topology};
//!
//! // Orders (keyed by order id, valued by a country code) enriched with the country's name.
//! let countries = GlobalTableHandle::new("countries", "countries", StringSerde, StringSerde);
//! let topology = Topology::builder()
//!     .add_source("orders", &["orders"], StringSerde, StringSerde)
//!     .add_global_table(&countries)
//!     .add_stream_global_table_join(
//!         "enrich",
//!         &countries,
//!         |_order: Option<&String>, code: &String| Some(code.clone()), // the table key
//!         |order: Option<&String>, _code: &String, name: &String| {
//!             Some(format!("{} ships to {name}", order.map_or("?", String::as_str)))
//!         },
//!         &["orders"],
//!     )
//!     .add_sink("out", "shipments", StringSerde, StringSerde, &["enrich"])
//!     .build()?;
//! assert_eq!(topology.global_table_topics(), vec!["countries".to_string()]);
//! // The countries topic is the table's changelog: no `<app>-countries-changelog`.
//! assert_eq!(topology.changelog_topics("app"), vec!["app-state-changelog".to_string()]);
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! driver.pipe_global(&countries, &"fr".to_string(), Some(&"France".to_string()))?;
//! driver.pipe(TestRecord::new("orders", Some("o-1"), Some("fr")).id("o-1"))?;
//! driver.pipe(TestRecord::new("orders", Some("o-2"), Some("xx")).id("o-2"))?; // no row: nothing
//! let out = driver.read_raw_output("shipments");
//! let values: Vec<String> = out.iter().map(|r| r.value_text()).collect();
//! assert_eq!(values, ["o-1 ships to France"]);
//! assert_eq!(out[0].header("causation_id"), Some("o-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use super::tables::join_output;
use crate::record::ProcessError;
use crate::serdes::Serde;
use crate::telemetry;

/// Reads a global table's current rows by key bytes: the runtime's RocksDB store, kept
/// current by its own thread, or the test driver's in-memory one.
pub(crate) trait GlobalReader: Send + Sync {
    /// The value bytes of `key`, if the table has it.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

/// Where a topology's join nodes (or a processor's [`GlobalTableHandle::get`]) find a global
/// table's store once the runtime (or the test driver) has opened it. Binding again replaces
/// the store: a processor handed to a new driver or runtime reads the new one.
#[derive(Clone, Default)]
pub(crate) struct GlobalSlot(Arc<RwLock<Option<Arc<dyn GlobalReader>>>>);

impl GlobalSlot {
    /// The bound store, if any.
    pub(crate) fn get(&self) -> Option<Arc<dyn GlobalReader>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Binds `reader`, replacing what was bound.
    fn set(&self, reader: Arc<dyn GlobalReader>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(reader);
    }
}

/// Checks that a record's key and value bytes decode with the table's serdes.
type CheckFn = dyn Fn(&[u8], Option<&[u8]>) -> Result<(), String> + Send + Sync;

/// A global table: its name, its topic and its key and value serdes. Added to a topology with
/// [`super::TopologyBuilder::add_global_table`] and joined with
/// [`super::TopologyBuilder::add_stream_global_table_join`] (or `_left_join`). Cheap to clone.
pub struct GlobalTableHandle<K, V> {
    name: Arc<str>,
    topic: Arc<str>,
    keys: Arc<dyn Serde<K>>,
    values: Arc<dyn Serde<V>>,
    /// The store [`GlobalTableHandle::get`] reads: bound through [`GlobalTableHandle::table`].
    slot: GlobalSlot,
}

impl<K, V> Clone for GlobalTableHandle<K, V> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            topic: self.topic.clone(),
            keys: self.keys.clone(),
            values: self.values.clone(),
            slot: self.slot.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for GlobalTableHandle<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalTableHandle")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .finish()
    }
}

impl<K, V> GlobalTableHandle<K, V> {
    /// The global table `name` of `topic` (every partition), whose keys and values use these
    /// serdes. The key serde must write keys as the topic's producers do: the join looks the
    /// extracted key up by its bytes.
    pub fn new(
        name: impl Into<String>,
        topic: impl Into<String>,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
    ) -> Self {
        Self {
            name: Arc::from(name.into()),
            topic: Arc::from(topic.into()),
            keys: Arc::new(keys),
            values: Arc::new(values),
            slot: GlobalSlot::default(),
        }
    }

    /// The table's name (its store's directory under `state.dir/global/`, its metrics' label).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The topic the table replicates (and restores from).
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The key serde.
    pub fn key_serde(&self) -> &dyn Serde<K> {
        &*self.keys
    }

    /// The value serde.
    pub fn value_serde(&self) -> &dyn Serde<V> {
        &*self.values
    }

    /// The table as [`crate::processor::ProcessorSpec::global_table`] declares it for a plain
    /// [`crate::processor::Processor`]: the runtime (or the test driver) binds
    /// its store to this handle (and its clones), which [`GlobalTableHandle::get`] then reads.
    /// A [`super::Topology`] does not need it ([`super::TopologyBuilder::add_global_table`]).
    pub fn table(&self) -> GlobalTable
    where
        K: 'static,
        V: 'static,
    {
        GlobalTable::with_slot(self, self.slot.clone())
    }

    /// The row of `key` as the table's store holds it now, for a plain
    /// [`crate::processor::Processor`] declared with
    /// [`crate::processor::ProcessorSpec::global_table`]. Not synchronized with the stream (see
    /// the [module docs](self)). Errors: transient while no store is bound (the processor did
    /// not declare the table, or it is not bootstrapped yet) or the store cannot be read;
    /// permanent when the key cannot be serialized or the row cannot be read by the value
    /// serde — a `?` in `process` hands either to the retry ladder or the DLT.
    ///
    /// ```
    /// use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record};
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::GlobalTableHandle;
    ///
    /// /// Stamps each order (valued by a sku) with the product's name from the catalog.
    /// struct Stamp {
    ///     products: GlobalTableHandle<String, String>,
    /// }
    ///
    /// impl Processor for Stamp {
    ///     fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
    ///         let sku = String::from_utf8_lossy(r.value.unwrap_or_default()).to_string();
    ///         let name = self.products.get(&sku)?.unwrap_or_else(|| "unknown".into());
    ///         ctx.emit("stamped", r.key.map(<[u8]>::to_vec), Some(name.into_bytes()), vec![]);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let products = GlobalTableHandle::new("products", "products", StringSerde, StringSerde);
    /// let stamp = ProcessorSpec::new(Stamp { products: products.clone() }).global_table(&products);
    /// let mut driver = TopologyTestDriver::new(stamp)?;
    /// driver.pipe_global(&products, &"sku-1".to_string(), Some(&"Teapot".to_string()))?;
    /// driver.pipe(TestRecord::new("orders", Some("o-1"), Some("sku-1")).id("o-1"))?;
    /// driver.pipe(TestRecord::new("orders", Some("o-2"), Some("sku-9")).id("o-2"))?;
    /// let out: Vec<String> = driver.read_raw_output("stamped").iter().map(|r| r.value_text()).collect();
    /// assert_eq!(out, ["Teapot", "unknown"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get(&self, key: &K) -> Result<Option<V>, ProcessError> {
        lookup(&self.slot, &self.name, &*self.keys, &*self.values, key)
    }

    pub(crate) fn key_serde_arc(&self) -> Arc<dyn Serde<K>> {
        self.keys.clone()
    }

    pub(crate) fn value_serde_arc(&self) -> Arc<dyn Serde<V>> {
        self.values.clone()
    }
}

/// A global table as the runtime sees it: name and topic, a check of its records, and where to
/// put its store. [`crate::processor::ProcessorSpec::global_table`] declares one for a plain
/// processor (through [`GlobalTableHandle::table`]); a [`super::Topology`] builds them from its
/// [`super::TopologyBuilder::add_global_table`]s.
#[derive(Clone)]
pub struct GlobalTable {
    name: String,
    topic: String,
    pub(crate) slot: GlobalSlot,
    check: Arc<CheckFn>,
}

impl std::fmt::Debug for GlobalTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalTable")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .finish()
    }
}

impl GlobalTable {
    /// A topology's copy of `handle`: a store slot of its own, so two topologies built with
    /// one handle run side by side.
    pub(crate) fn of<K: 'static, V: 'static>(handle: &GlobalTableHandle<K, V>) -> Self {
        Self::with_slot(handle, GlobalSlot::default())
    }

    fn with_slot<K: 'static, V: 'static>(
        handle: &GlobalTableHandle<K, V>,
        slot: GlobalSlot,
    ) -> Self {
        let (keys, values) = (handle.keys.clone(), handle.values.clone());
        let check = move |key: &[u8], value: Option<&[u8]>| -> Result<(), String> {
            keys.deserialize(key).map_err(|e| format!("key: {e}"))?;
            if let Some(v) = value {
                values.deserialize(v).map_err(|e| format!("value: {e}"))?;
            }
            Ok(())
        };
        Self {
            name: handle.name.to_string(),
            topic: handle.topic.to_string(),
            slot,
            check: Arc::new(check),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether the table's serdes read a record's key and value (`Err` says which failed).
    pub(crate) fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), String> {
        (self.check)(key, value)
    }

    /// Hands the table's store to the join nodes (or the handle's `get`), replacing a store
    /// bound before: a processor run again (a new driver, a restarted runtime) reads the new
    /// one.
    pub(crate) fn bind(&self, reader: Arc<dyn GlobalReader>) -> Result<(), String> {
        self.slot.set(reader);
        Ok(())
    }
}

/// The test driver's global table store: rows in memory, written by `pipe_global`.
#[derive(Default)]
pub(crate) struct MemoryGlobal {
    rows: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryGlobal {
    /// Upserts `key` (`None` deletes it).
    pub(crate) fn apply(&self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        match value {
            Some(v) => rows.insert(key, v),
            None => rows.remove(&key),
        };
    }
}

impl GlobalReader for MemoryGlobal {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        Ok(rows.get(key).cloned())
    }
}

/// The key extractor of a stream-global-table join: the stream key and value to the table's
/// key (`None`: no lookup).
pub(crate) type KeyExtractor<K, V, GK> = Box<dyn Fn(Option<&K>, &V) -> Option<GK> + Send>;
/// The joiner: the stream key (`None` for a keyless record, which a global join can still
/// join: its table key comes from the extractor) and value and the table's row (`None` only
/// in a left join), to the result (`None`: forward nothing).
pub(crate) type GlobalJoiner<K, V, T, R> =
    Box<dyn Fn(Option<&K>, &V, Option<&T>) -> Option<R> + Send>;

/// The node of a stream-global-table join.
pub(crate) struct StreamGlobalTableJoin<K, V, GK, T, R> {
    pub(crate) table: String,
    pub(crate) slot: GlobalSlot,
    pub(crate) keys: Arc<dyn Serde<GK>>,
    pub(crate) values: Arc<dyn Serde<T>>,
    pub(crate) extractor: KeyExtractor<K, V, GK>,
    pub(crate) joiner: GlobalJoiner<K, V, T, R>,
    /// Left join: a stream record without a row is joined with `None`.
    pub(crate) left: bool,
    pub(crate) _types: PhantomData<fn(K, V, R)>,
}

/// The row of `key` in the store bound to `slot` (table `table`), decoded with the serdes.
fn lookup<K, T>(
    slot: &GlobalSlot,
    table: &str,
    keys: &dyn Serde<K>,
    values: &dyn Serde<T>,
    key: &K,
) -> Result<Option<T>, ProcessError> {
    let reader = slot.get().ok_or_else(|| {
        ProcessError::transient(format!(
            "global table {table} is not bootstrapped yet (is it in the processor's global_tables()?)"
        ))
    })?;
    let bytes = keys
        .serialize(key)
        .map_err(|e| ProcessError::permanent(format!("global table {table} key: {e}")))?;
    let row = reader
        .get(&bytes)
        .map_err(|e| ProcessError::transient(format!("reading global table {table}: {e}")))?;
    row.map(|v| values.deserialize(&v))
        .transpose()
        .map_err(|e| ProcessError::permanent(format!("global table {table} value: {e}")))
}

impl<K, V, GK, T, R> StreamGlobalTableJoin<K, V, GK, T, R> {
    /// The row of `key` as the table's store holds it now.
    fn lookup(&self, key: &GK) -> Result<Option<T>, ProcessError> {
        lookup(&self.slot, &self.table, &*self.keys, &*self.values, key)
    }
}

impl<K, V, GK, T, R> NodeProcessor<K, V> for StreamGlobalTableJoin<K, V, GK, T, R>
where
    K: Clone + Send + 'static,
    V: Send + 'static,
    GK: 'static,
    T: 'static,
    R: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        mut record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        // Kafka Streams (KIP-962): a keyless record is joined when the extractor maps it to
        // a table key, and a left join joins it even when it does not; a record with a key
        // but no table key is dropped by both.
        let key = record.key.take();
        let Some(value) = record.value.take() else {
            telemetry::join_dropped(ctx.node_name(), "no-value");
            return Ok(());
        };
        let row = match (self.extractor)(key.as_ref(), &value) {
            Some(table_key) => self.lookup(&table_key)?,
            None if self.left && key.is_none() => None,
            None => {
                telemetry::join_dropped(ctx.node_name(), "no-global-key");
                return Ok(());
            }
        };
        join_output(
            ctx,
            (key, value, record),
            row,
            self.left,
            "no-global-value",
            &self.joiner,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::{Application, Context, Processor, ProcessorSpec, Record};
    use crate::serdes::StringSerde;
    use crate::testing::{TestRecord, TopologyTestDriver};
    use crate::topology::Topology;

    /// Emits the table's row for each record's value, `-` when there is none.
    struct Reads(GlobalTableHandle<String, String>);

    impl Processor for Reads {
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            let key = String::from_utf8_lossy(r.value.unwrap_or_default()).to_string();
            let row = self.0.get(&key)?.unwrap_or_else(|| "-".into());
            ctx.emit("out", None, Some(row.into_bytes()), vec![]);
            Ok(())
        }
    }

    fn reads(h: &GlobalTableHandle<String, String>) -> ProcessorSpec<Reads> {
        ProcessorSpec::new(Reads(h.clone())).global_table(h)
    }

    fn handle() -> GlobalTableHandle<String, String> {
        GlobalTableHandle::new("t", "t-topic", StringSerde, StringSerde)
    }

    fn outputs<P: Application>(d: &mut TopologyTestDriver<P>, topic: &str) -> Vec<String> {
        d.read_raw_output(topic)
            .iter()
            .map(|r| r.value_text())
            .collect()
    }

    #[test]
    fn a_handle_reads_nothing_before_it_is_bound_then_the_store_bound_last() {
        let h = handle();
        match h.get(&"k".into()) {
            Err(ProcessError::Transient(m)) => assert!(m.contains("not bootstrapped"), "{m}"),
            other => panic!("expected a transient error, got {other:?}"),
        }
        let mut first = TopologyTestDriver::new(reads(&h)).expect("driver");
        first
            .pipe_global(&h, &"k".into(), Some(&"one".into()))
            .expect("row");
        first
            .pipe(TestRecord::new("in", Some("a"), Some("k")).id("1"))
            .expect("pipe");
        first
            .pipe(TestRecord::new("in", Some("a"), Some("x")).id("2"))
            .expect("pipe");
        assert_eq!(outputs(&mut first, "out"), ["one", "-"]);
        // The processor handed to another driver (a clone of its handle here) reads that
        // driver's store: binding again replaces.
        let mut second = TopologyTestDriver::new(reads(&h)).expect("driver");
        assert_eq!(h.get(&"k".into()).expect("bound"), None);
        second
            .pipe_global(&h, &"k".into(), Some(&"two".into()))
            .expect("row");
        second
            .pipe(TestRecord::new("in", Some("a"), Some("k")).id("1"))
            .expect("pipe");
        assert_eq!(outputs(&mut second, "out"), ["two"]);
        // A delete is seen too.
        second.pipe_global(&h, &"k".into(), None).expect("delete");
        assert_eq!(h.get(&"k".into()).expect("bound"), None);
    }

    #[test]
    fn two_topologies_built_with_one_handle_keep_their_own_stores() {
        let h = handle();
        let build = || {
            Topology::builder()
                .add_source("in", &["in"], StringSerde, StringSerde)
                .add_global_table(&h)
                .add_stream_global_table_join(
                    "join",
                    &h,
                    |_k: Option<&String>, v: &String| Some(v.clone()),
                    |_k: Option<&String>, _v: &String, row: &String| Some(row.clone()),
                    &["in"],
                )
                .add_sink("out", "out", StringSerde, StringSerde, &["join"])
                .build()
                .expect("topology")
        };
        let mut a = TopologyTestDriver::new(build()).expect("driver");
        let mut b = TopologyTestDriver::new(build()).expect("driver");
        a.pipe_global(&h, &"k".into(), Some(&"a-row".into()))
            .expect("row");
        b.pipe_global(&h, &"k".into(), Some(&"b-row".into()))
            .expect("row");
        for d in [&mut a, &mut b] {
            d.pipe(TestRecord::new("in", Some("x"), Some("k")).id("1"))
                .expect("pipe");
        }
        assert_eq!(outputs(&mut a, "out"), ["a-row"]);
        assert_eq!(outputs(&mut b, "out"), ["b-row"]);
        // The topologies do not bind the handle itself.
        assert!(h.get(&"k".into()).is_err());
    }
}
