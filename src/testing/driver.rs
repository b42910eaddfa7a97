//! The test driver: a processor or topology run in-process, record by record, without a
//! broker — through the same per-record engine as the runtime, over RocksDB in a temporary
//! directory, with a clock only the test moves.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::memory::{exact_policy, DriverStamps, Topics};
use super::records::{OutputRecord, TestRecord};
use crate::config::Config;
use crate::processor::engine::{Engine, NamedStore, Task};
use crate::processor::runtime::{RunSummary, RuntimeOptions};
use crate::processor::stores::StoreView;
use crate::processor::timers::{self, Timer};
use crate::processor::{Application, AsOf, KeyValueStore, StoreHandle};
use crate::record::{ProcessError, Record};
use crate::retry::base_and_level;
use crate::serdes::{Serde, SerdeError};
use crate::sink::SinkError;
use crate::state::{dedup, Column, Overlay, StateError, Store, StoreCache};
use crate::topology::globals::MemoryGlobal;
use crate::topology::windows::{Window, WindowStore, WindowStoreHandle};
use crate::topology::{GlobalTableHandle, TableHandle};

/// Why the driver could not do what the test asked.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A store could not be opened, read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The engine failed the batch (a store read error).
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A typed read or write did not (de)serialize.
    #[error(transparent)]
    Serde(#[from] SerdeError),
    /// A typed store read failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A global table is not part of the topology, or its store cannot be read.
    #[error("{0}")]
    Global(String),
    /// The temporary state directory could not be made.
    #[error("state dir {path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Typed records read back: key and value, `None` where Kafka has null.
pub type KeyValues<K, V> = Vec<(Option<K>, Option<V>)>;

/// Where the driver starts its wall clock (ms since the epoch): 2023-11-14T22:13:20Z.
pub const START_MS: i64 = 1_700_000_000_000;

/// Runs a [`crate::topology::Topology`] (or any [`crate::processor::Processor`] or [`crate::processor::ProcessorSpec`]) without a broker: each piped
/// record is handled and committed before `pipe` returns — dedup, the retry ladder's routing, parked keys and the
/// stores behave as in the runtime, whose per-record engine this is. Deterministic: time moves
/// only through [`TopologyTestDriver::advance_wall_clock`], output ids count up, no threads.
///
/// ```
/// use eosflow::processor::{ProcessError, StoreHandle};
/// use eosflow::serdes::{I64Serde, StringSerde};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::{ProcessorContext, Topology, TypedRecord};
///
/// let totals = StoreHandle::new("totals", StringSerde, I64Serde);
/// let store = totals.clone();
/// let sum = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, i64>| {
///     let key = r.key.ok_or_else(|| ProcessError::permanent("no key"))?;
///     let amount = r.value.ok_or_else(|| ProcessError::permanent("no amount"))?;
///     if amount < 0 {
///         return Err(ProcessError::permanent("negative amount"));
///     }
///     let mut s = ctx.store(&store)?;
///     let total = s.get(&key)?.unwrap_or(0) + amount;
///     s.put(&key, &total)?;
///     ctx.forward(TypedRecord::new(Some(key), Some(total)));
///     Ok(())
/// };
/// let topology = Topology::builder()
///     .add_source("amounts", &["amounts"], StringSerde, I64Serde)
///     .add_processor("sum", sum, &["amounts"])
///     .add_state_store(&totals, &["sum"])
///     .add_sink("out", "totals", StringSerde, I64Serde, &["sum"])
///     .build()?;
/// let mut driver = TopologyTestDriver::new(topology)?;
/// driver.pipe_input("amounts", &StringSerde, &I64Serde, &"a".to_string(), &5)?;
/// driver.pipe_input("amounts", &StringSerde, &I64Serde, &"a".to_string(), &7)?;
/// driver.pipe_input("amounts", &StringSerde, &I64Serde, &"b".to_string(), &-1)?;
/// let out = driver.read_output("totals", &StringSerde, &I64Serde)?;
/// assert_eq!(out, vec![(Some("a".into()), Some(5)), (Some("a".into()), Some(12))]);
/// assert_eq!(driver.store_get(&totals, &"a".to_string())?, Some(12));
/// let dead = driver.read_raw_output("amounts.DLT");
/// assert_eq!(dead[0].dlt_reason(), Some("negative amount"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TopologyTestDriver<P: Application> {
    processor: P,
    config: Config,
    opts: RuntimeOptions,
    dir: PathBuf,
    cache: StoreCache,
    tasks: BTreeMap<i32, Task>,
    summary: RunSummary,
    isolated: HashMap<(String, i32, i64), crate::processor::engine::Isolated>,
    forced: Option<(crate::retry::dlt::DltClass, u8)>,
    produced: BTreeMap<String, u64>,
    processed: BTreeMap<String, u64>,
    stamps: DriverStamps,
    /// Everything written, by topic, not yet read by the test.
    written: BTreeMap<String, Vec<OutputRecord>>,
    /// Retry forwards not yet piped back (the ladder the runtime would consume when due).
    ladder: Vec<OutputRecord>,
    /// Next offset of each (topic, partition) piped.
    offsets: BTreeMap<(String, i32), i64>,
    /// Records handled since the overlays were last applied to RocksDB.
    uncommitted: usize,
    /// The global tables' stores, by table name (in memory: `pipe_global` writes them).
    globals: BTreeMap<String, Arc<MemoryGlobal>>,
    /// The repartition topics: what is written to them is piped back in at once.
    repartitions: Vec<String>,
    /// Per repartition topic, how many of its unread written records were piped back.
    routed: BTreeMap<String, usize>,
}

/// Records whose writes the driver keeps in the batch overlays before applying them to
/// RocksDB: reads see the overlays either way (as in the runtime), and one write per record
/// would make RocksDB's write path most of the driver's time.
const RECORDS_PER_APPLY: usize = 1_000;

impl<P: Application> TopologyTestDriver<P> {
    /// A driver with the default configuration (application id `test`; retry delays 1 s, 10 s,
    /// 60 s).
    pub fn new(processor: P) -> Result<Self, DriverError> {
        let mut config = Config::default();
        config.app.id = "test".into();
        Self::with_config(processor, config)
    }

    /// A driver with `config`'s application id, retry ladder and dedup settings.
    pub fn with_config(mut processor: P, config: Config) -> Result<Self, DriverError> {
        processor.bind_application(&config.app.id);
        let dir = std::env::temp_dir().join(format!("eosflow-driver-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|source| DriverError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let inputs = processor
            .input_topics()
            .unwrap_or_else(|| config.processor.input_topics.clone());
        let opts = RuntimeOptions {
            app_id: config.app.id.clone(),
            instance_id: "driver".into(),
            retry: inputs
                .iter()
                .map(|t| (t.clone(), exact_policy(&config, t)))
                .collect(),
            input_topics: inputs,
            commit_interval: Duration::ZERO,
            max_batch_records: 1,
            max_batch_bytes: usize::MAX,
            transaction_timeout: Duration::from_millis(config.processor.transaction_timeout_ms),
            session_timeout: Duration::from_millis(config.processor.session_timeout_ms),
            restore_timeout: Duration::ZERO,
            restore_threads: 1,
            static_membership: false,
            create_topics: false,
            state_dir: dir.clone(),
            memory_bytes: 8 << 20,
            cache_bytes: config.state.cache_bytes,
            dedup_retention: Duration::from_secs(config.state.dedup_retention_secs),
            dedup_purge_interval: Duration::from_secs(config.state.dedup_purge_interval_secs),
            dlt_depth_interval: Duration::ZERO,
            exactly_once: true,
            tables: processor.tables(),
            versioned_tables: processor.versioned_tables(),
            thread: 0,
            group_protocol: config.processor.group_protocol,
            max_task_idle_ms: config.processor.max_task_idle_ms,
            repartition_purge_interval: Duration::ZERO,
        };
        let processor_repartitions = processor.repartition_topics();
        let mut globals = BTreeMap::new();
        for g in processor.global_tables() {
            let store = Arc::new(MemoryGlobal::default());
            g.bind(store.clone()).map_err(DriverError::Global)?;
            globals.insert(g.name().to_string(), store);
        }
        Ok(Self {
            cache: StoreCache::new(opts.memory_bytes).with_record_cache(opts.cache_bytes),
            processor,
            config,
            opts,
            dir,
            tasks: BTreeMap::new(),
            summary: RunSummary::default(),
            isolated: HashMap::new(),
            forced: None,
            produced: BTreeMap::new(),
            processed: BTreeMap::new(),
            stamps: DriverStamps {
                now_ms: START_MS,
                text_ms: 0,
                text: String::new(),
                ids: 0,
            },
            written: BTreeMap::new(),
            ladder: Vec::new(),
            offsets: BTreeMap::new(),
            uncommitted: 0,
            globals,
            repartitions: processor_repartitions,
            routed: BTreeMap::new(),
        })
    }

    /// Opens partition `p`'s stores (empty: the driver starts from nothing).
    fn task(&mut self, p: i32) -> Result<(), DriverError> {
        if self.tasks.contains_key(&p) {
            return Ok(());
        }
        let open = |name: &str| -> Result<Store, DriverError> {
            let topic = format!("{}-{name}-changelog", self.opts.app_id);
            let path = self.dir.join(format!("{topic}-{p}"));
            Ok(Store::open(&path, &format!("{topic}[{p}]"), &self.cache)?.0)
        };
        let store = open(self.processor.store_name())?;
        let mut named = Vec::new();
        for name in self.processor.stores() {
            named.push(NamedStore {
                store: open(&name)?,
                name,
                overlay: Overlay::default(),
                table: false,
                history_ms: None,
            });
        }
        // Tables after the named stores, as in the runtime; piped records of a table's topic
        // update its store (the engine's own rule).
        for (name, topic) in self.opts.tables.clone() {
            let path = self
                .dir
                .join(format!("{}-{name}-table-{p}", self.opts.app_id));
            let history_ms = self
                .opts
                .table_history(&name)
                .map(crate::state::changelog::history_ms);
            named.push(NamedStore {
                store: Store::open(&path, &format!("{topic}[{p}]"), &self.cache)?.0,
                name,
                overlay: Overlay::default(),
                table: true,
                history_ms,
            });
        }
        let subs = self.processor.sub_topology_count();
        self.tasks.insert(p, Task::open(p, store, named, subs)?);
        Ok(())
    }

    /// Pipes one record in and commits it: its outputs, forwards and store writes are visible
    /// when this returns. Retry forwards come back by themselves once the clock reaches them
    /// ([`TopologyTestDriver::advance_wall_clock`]).
    pub fn pipe(&mut self, record: TestRecord) -> Result<(), DriverError> {
        self.task(record.partition)?;
        let base = base_and_level(&record.topic).0.to_string();
        if !self.opts.retry.contains_key(&base) {
            let policy = exact_policy(&self.config, &base);
            self.opts.retry.insert(base, policy);
        }
        let offset = self
            .offsets
            .entry((record.topic.clone(), record.partition))
            .or_insert(0);
        let at = *offset;
        *offset += 1;
        let now = self.stamps.now_ms;
        let timestamp = record.timestamp.unwrap_or(now);
        let input = Record {
            topic: &record.topic,
            partition: record.partition,
            offset: at,
            timestamp: Some(timestamp),
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &record.headers,
        };
        let partition = input.partition;
        self.with_engine(|engine| {
            engine.drain_parked(now)?;
            engine.handle(&input, now)
        })?;
        self.summary.records += 1;
        self.uncommitted += 1;
        // Event-time timers the record's event time reached fire right after it.
        self.fire_in_chunks(|e, chunk| e.fire_event_time(partition, chunk, now))?;
        self.route_repartitions()
    }

    /// Pipes back in what was written to a repartition topic and not yet piped back, each
    /// record to partition 0 (the driver keeps every new key in one task) with its key, value,
    /// headers and timestamp: its downstream result is there when `pipe` returns. The records
    /// stay readable with [`TopologyTestDriver::read_raw_output`].
    fn route_repartitions(&mut self) -> Result<(), DriverError> {
        for topic in self.repartitions.clone() {
            loop {
                let done = self.routed.get(&topic).copied().unwrap_or(0);
                let Some(r) = self.written.get(&topic).and_then(|w| w.get(done)).cloned() else {
                    break;
                };
                self.routed.insert(topic.clone(), done + 1);
                self.pipe(TestRecord {
                    topic: r.topic,
                    partition: 0,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                    timestamp: r.timestamp,
                })?;
            }
        }
        Ok(())
    }

    /// Fires timers with `fire` a chunk at a time, committing between chunks (as the runtime's
    /// batch limit does): a clock jump over a million timers never holds them all in memory.
    fn fire_in_chunks(
        &mut self,
        mut fire: impl FnMut(&mut Engine<'_, P, Topics<'_>>, usize) -> Result<usize, SinkError>,
    ) -> Result<(), DriverError> {
        loop {
            let fired = self.with_engine(|e| fire(e, RECORDS_PER_APPLY))?;
            self.uncommitted += fired;
            if self.uncommitted >= RECORDS_PER_APPLY {
                self.commit(self.stamps.now_ms)?;
            }
            if fired < RECORDS_PER_APPLY {
                return Ok(());
            }
        }
    }

    /// Runs `f` on the engine over the driver's state, with its in-memory topics as output.
    fn with_engine<T>(
        &mut self,
        f: impl FnOnce(&mut Engine<'_, P, Topics<'_>>) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        let mut out = Topics {
            written: &mut self.written,
            ladder: &mut self.ladder,
        };
        let mut engine = Engine {
            opts: &self.opts,
            processor: &mut self.processor,
            tasks: &mut self.tasks,
            summary: &mut self.summary,
            isolated: &self.isolated,
            forced_dead_letter: &mut self.forced,
            produced: &mut self.produced,
            processed: &mut self.processed,
            stamps: &mut self.stamps,
            out: &mut out,
        };
        f(&mut engine)
    }

    /// The batch commits: dedup ids sealed, every overlay applied to its store.
    fn commit(&mut self, now: i64) -> Result<(), DriverError> {
        if self.uncommitted == 0 {
            return Ok(());
        }
        for task in self.tasks.values_mut() {
            dedup::seal(&mut task.overlay, now);
            task.apply_committed(|_| None)?;
        }
        self.summary.commits += 1;
        self.uncommitted = 0;
        Ok(())
    }

    /// Pipes a typed record (key and value through the given serdes) into `topic`.
    pub fn pipe_input<K, V>(
        &mut self,
        topic: &str,
        keys: &dyn Serde<K>,
        values: &dyn Serde<V>,
        key: &K,
        value: &V,
    ) -> Result<(), DriverError> {
        let record = TestRecord::new(
            topic,
            Some(keys.serialize(key)?),
            Some(values.serialize(value)?),
        );
        self.pipe(record)
    }

    /// Pipes one row into `table`'s topic, partition 0: `Some(value)` sets `key`, `None` is a
    /// tombstone that deletes it (serialized with the table's serdes).
    pub fn pipe_table<K, V>(
        &mut self,
        table: &TableHandle<K, V>,
        key: &K,
        value: Option<&V>,
    ) -> Result<(), DriverError> {
        let key = table.store().key_serde().serialize(key)?;
        let value = value
            .map(|v| table.store().value_serde().serialize(v))
            .transpose()?;
        self.pipe(TestRecord::new(table.topic(), Some(key), value))
    }

    /// Pipes one row into `table`'s topic, partition 0, with timestamp `timestamp`: a
    /// versioned table ([`TableHandle::versioned`]) keeps it as a version from that time on
    /// (before its key's latest version: into the history). `None` is a tombstone.
    pub fn pipe_table_at<K, V>(
        &mut self,
        table: &TableHandle<K, V>,
        key: &K,
        value: Option<&V>,
        timestamp: i64,
    ) -> Result<(), DriverError> {
        let key = table.store().key_serde().serialize(key)?;
        let value = value
            .map(|v| table.store().value_serde().serialize(v))
            .transpose()?;
        self.pipe(TestRecord::new(table.topic(), Some(key), value).timestamp(timestamp))
    }

    /// The committed row of `key` in `table` (partition 0).
    pub fn table_get<K, V>(
        &mut self,
        table: &TableHandle<K, V>,
        key: &K,
    ) -> Result<Option<V>, DriverError> {
        self.store_get(table.store(), key)
    }

    /// The row `key` had at `timestamp` in versioned table `table` (partition 0), as
    /// [`crate::processor::KeyValueStore::get_as_of`] reads it.
    pub fn table_get_as_of<K, V>(
        &mut self,
        table: &TableHandle<K, V>,
        key: &K,
        timestamp: i64,
    ) -> Result<AsOf<V>, DriverError> {
        self.with_store(0, table.store(), |s| s.get_as_of(key, timestamp))
    }

    /// Writes a row of global table `table` (`None` deletes `key`): applied at once, as if the
    /// runtime's global thread had read it before the next piped record (the driver runs no
    /// thread, so the order of rows and stream records is the order of the calls).
    pub fn pipe_global<K, V>(
        &mut self,
        table: &GlobalTableHandle<K, V>,
        key: &K,
        value: Option<&V>,
    ) -> Result<(), DriverError> {
        let store = self.global(table.name())?;
        let key = table.key_serde().serialize(key)?;
        let value = value
            .map(|v| table.value_serde().serialize(v))
            .transpose()?;
        store.apply(key, value);
        Ok(())
    }

    /// The row of `key` in global table `table`.
    pub fn global_get<K, V>(
        &mut self,
        table: &GlobalTableHandle<K, V>,
        key: &K,
    ) -> Result<Option<V>, DriverError> {
        use crate::topology::globals::GlobalReader;
        let store = self.global(table.name())?;
        let key = table.key_serde().serialize(key)?;
        let row = store.get(&key).map_err(DriverError::Global)?;
        Ok(row
            .map(|v| table.value_serde().deserialize(&v))
            .transpose()?)
    }

    fn global(&self, name: &str) -> Result<Arc<MemoryGlobal>, DriverError> {
        self.globals.get(name).cloned().ok_or_else(|| {
            DriverError::Global(format!(
                "global table {name:?} is not part of the topology (add_global_table)"
            ))
        })
    }

    /// Pipes raw bytes into `topic`, partition 0.
    pub fn pipe_raw(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<(), DriverError> {
        self.pipe(TestRecord::new(topic, key, value))
    }

    /// Moves the wall clock on by `by`, fires every wall-clock timer now due (in due order, on
    /// every partition), then pipes back every retry forward now due, oldest due first (as the
    /// runtime resumes a retry level once its head is due).
    pub fn advance_wall_clock(&mut self, by: Duration) -> Result<(), DriverError> {
        self.stamps.now_ms += by.as_millis() as i64;
        let now = self.stamps.now_ms;
        self.fire_in_chunks(|e, chunk| e.fire_due(chunk, now))?;
        self.route_repartitions()?;
        loop {
            let now = self.stamps.now_ms;
            let due = self
                .ladder
                .iter()
                .enumerate()
                .filter(|(_, r)| r.due_at().unwrap_or(i64::MIN) <= now)
                .min_by_key(|(i, r)| (r.due_at().unwrap_or(i64::MIN), *i))
                .map(|(i, _)| i);
            let Some(i) = due else {
                return Ok(());
            };
            let r = self.ladder.remove(i);
            self.pipe(TestRecord {
                topic: r.topic,
                partition: r.partition.unwrap_or(0),
                key: r.key,
                value: r.value,
                headers: r.headers,
                timestamp: r.timestamp,
            })?;
        }
    }

    /// The driver's wall clock (ms since the epoch; starts at [`START_MS`]).
    pub fn wall_clock_ms(&self) -> i64 {
        self.stamps.now_ms
    }

    /// The largest event time piped so far over every partition (each partition's stream time
    /// is its own: [`TopologyTestDriver::partition_stream_time_ms`]).
    pub fn stream_time_ms(&self) -> Option<i64> {
        self.tasks
            .values()
            .filter_map(|t| t.latest_stream_time())
            .max()
    }

    /// Partition `partition`'s stream time: the largest event time its tasks have seen (each
    /// sub-topology's is its own: [`TopologyTestDriver::task_stream_time_ms`]).
    pub fn partition_stream_time_ms(&self, partition: i32) -> Option<i64> {
        self.tasks
            .get(&partition)
            .and_then(|t| t.latest_stream_time())
    }

    /// The stream time of the task of sub-topology `sub` on `partition` (see
    /// [`crate::topology::Topology::sub_topologies`]): what its windows and event-time timers
    /// go by.
    pub fn task_stream_time_ms(&self, sub: usize, partition: i32) -> Option<i64> {
        self.tasks.get(&partition).and_then(|t| t.stream_time(sub))
    }

    /// The timers pending on `partition`, both kinds, each in due order (event time first).
    pub fn pending_timers(&mut self, partition: i32) -> Result<Vec<Timer>, DriverError> {
        self.commit(self.stamps.now_ms)?;
        match self.tasks.get(&partition) {
            Some(t) => Ok(timers::committed(&t.store)?),
            None => Ok(Vec::new()),
        }
    }

    /// Takes every record written to `topic` since the last read (outputs, `<t>.retry.<n>`
    /// forwards, `<t>.DLT` dead letters), with all their headers.
    pub fn read_raw_output(&mut self, topic: &str) -> Vec<OutputRecord> {
        self.routed.remove(topic);
        self.written.remove(topic).unwrap_or_default()
    }

    /// Takes every record written to `topic` since the last read, as typed key and value.
    pub fn read_output<K, V>(
        &mut self,
        topic: &str,
        keys: &dyn Serde<K>,
        values: &dyn Serde<V>,
    ) -> Result<KeyValues<K, V>, DriverError> {
        let mut out = Vec::new();
        for r in self.read_raw_output(topic) {
            let k = r.key.as_deref().map(|k| keys.deserialize(k)).transpose()?;
            let v = r
                .value
                .as_deref()
                .map(|v| values.deserialize(v))
                .transpose()?;
            out.push((k, v));
        }
        Ok(out)
    }

    /// The topics written to and not yet read, with how many records each.
    pub fn pending_outputs(&self) -> BTreeMap<String, usize> {
        self.written
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(t, r)| (t.clone(), r.len()))
            .collect()
    }

    /// Runs `f` on a named store of `partition` as the next record would see it.
    fn with_store<K, V, T>(
        &mut self,
        partition: i32,
        handle: &StoreHandle<K, V>,
        f: impl FnOnce(&KeyValueStore<'_, '_, K, V>) -> Result<T, ProcessError>,
    ) -> Result<T, DriverError> {
        self.with_view(partition, handle.name(), |view| {
            f(&KeyValueStore::new(view, handle))
        })
    }

    /// Runs `f` on the committed view of named store `name` of `partition`.
    fn with_view<T>(
        &mut self,
        partition: i32,
        name: &str,
        f: impl FnOnce(&mut StoreView<'_>) -> Result<T, ProcessError>,
    ) -> Result<T, DriverError> {
        self.commit(self.stamps.now_ms)?;
        self.task(partition)?;
        let empty = Overlay::default();
        let task = self.tasks.get(&partition);
        let named = task.and_then(|t| t.named.iter().find(|n| n.name == name));
        let Some(n) = named else {
            return Err(ProcessError::permanent(format!(
                "store {name} is not attached to the processor"
            ))
            .into());
        };
        let mut view = StoreView::new(&n.name, &n.store, &empty).versioned(n.history_ms);
        Ok(f(&mut view)?)
    }

    /// The committed windows of `key` in a windowed store (partition 0) whose start lies in
    /// `from..=to`, in start order.
    pub fn window_fetch_range<K, V>(
        &mut self,
        handle: &WindowStoreHandle<K, V>,
        key: &K,
        from: i64,
        to: i64,
    ) -> Result<Vec<(Window, V)>, DriverError> {
        self.with_view(0, handle.name(), |view| {
            WindowStore::new(view, handle).fetch_range(key, from, to)
        })
    }

    /// Every committed window of every key in a windowed store (partition 0), in key then
    /// start order.
    pub fn window_all<K, V>(
        &mut self,
        handle: &WindowStoreHandle<K, V>,
    ) -> Result<Vec<(K, Window, V)>, DriverError> {
        self.with_view(0, handle.name(), |view| {
            WindowStore::new(view, handle).all()
        })
    }

    /// The committed value of `key` in a named store (partition 0).
    pub fn store_get<K, V>(
        &mut self,
        handle: &StoreHandle<K, V>,
        key: &K,
    ) -> Result<Option<V>, DriverError> {
        self.with_store(0, handle, |s| s.get(key))
    }

    /// Every committed entry of a named store (partition 0), in key order.
    pub fn store_entries<K, V>(
        &mut self,
        handle: &StoreHandle<K, V>,
    ) -> Result<Vec<(K, V)>, DriverError> {
        self.with_store(0, handle, |s| s.all()?.collect())
    }

    /// The committed entries of a named store (partition 0) whose key starts with `prefix`.
    pub fn store_prefix<K, V>(
        &mut self,
        handle: &StoreHandle<K, V>,
        prefix: &K,
    ) -> Result<Vec<(K, V)>, DriverError> {
        self.with_store(0, handle, |s| s.prefix(prefix)?.collect())
    }

    /// The committed entries of a named store (partition 0) with keys in `[from, to)`.
    pub fn store_range<K, V>(
        &mut self,
        handle: &StoreHandle<K, V>,
        from: &K,
        to: &K,
    ) -> Result<Vec<(K, V)>, DriverError> {
        self.with_store(0, handle, |s| s.range(from..to)?.collect())
    }

    /// The default store's committed value of `key` (what `Context::get` reads), partition 0.
    pub fn state_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, DriverError> {
        self.commit(self.stamps.now_ms)?;
        self.task(0)?;
        match self.tasks.get(&0) {
            Some(t) => Ok(t.store.get(Column::State, key)?),
            None => Ok(None),
        }
    }

    /// Bytes of every store on disk after a commit and a flush (measurements).
    #[cfg(test)]
    pub(crate) fn flushed_state_bytes(&mut self) -> Result<u64, DriverError> {
        self.commit(self.stamps.now_ms)?;
        for t in self.tasks.values() {
            t.store.flush()?;
        }
        fn size(p: &std::path::Path) -> u64 {
            match std::fs::read_dir(p) {
                Ok(entries) => entries
                    .filter_map(Result::ok)
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => size(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum(),
                Err(_) => 0,
            }
        }
        Ok(size(&self.dir))
    }

    /// The counters of the run so far (records, dedup hits, retried, dead-lettered …).
    pub fn summary(&self) -> &RunSummary {
        &self.summary
    }

    /// The processor under test.
    pub fn processor(&self) -> &P {
        &self.processor
    }

    /// Swaps in `processor` over the same stores, dedup marks and timers, as a redeploy of a
    /// changed topology would (a larger grace, a fixed extractor); returns the old one.
    #[cfg(test)]
    pub(crate) fn replace_processor(&mut self, processor: P) -> P {
        std::mem::replace(&mut self.processor, processor)
    }
}

/// What survives a simulated `kill -9`: the topics as of the last commit (outputs, dead
/// letters, retry forwards, the input positions). The stores need no copy: the driver applies a
/// batch to RocksDB only when it commits, so what is on disk is what the changelogs hold.
#[derive(Clone)]
pub(super) struct Committed {
    written: BTreeMap<String, Vec<OutputRecord>>,
    ladder: Vec<OutputRecord>,
    offsets: BTreeMap<(String, i32), i64>,
    routed: BTreeMap<String, usize>,
    now_ms: i64,
}

/// Committed store entries by `store[partition] column`, each in key order.
pub(super) type StoreContents = BTreeMap<String, Vec<crate::state::Entry>>;

/// One task's batch as the changelogs received it: committed in Kafka, not yet applied to the
/// local RocksDB (the overlays of its default store and of each named store, in order).
pub(super) struct ChangelogBatch {
    partition: i32,
    overlay: Overlay,
    named: Vec<Overlay>,
}

/// Support for the typed topics and the crash simulation (`super::topics`, `super::crashes`).
impl<P: Application> TopologyTestDriver<P> {
    /// Takes the oldest unread record of `topic`, if any.
    pub(super) fn take_first(&mut self, topic: &str) -> Option<OutputRecord> {
        let records = self.written.get_mut(topic)?;
        if records.is_empty() {
            return None;
        }
        if let Some(n) = self.routed.get_mut(topic) {
            *n = n.saturating_sub(1);
        }
        Some(records.remove(0))
    }

    /// How many records of `topic` are unread.
    pub(super) fn unread(&self, topic: &str) -> usize {
        self.written.get(topic).map_or(0, Vec::len)
    }

    /// Every unread record of every topic, without taking them.
    pub(super) fn written(&self) -> &BTreeMap<String, Vec<OutputRecord>> {
        &self.written
    }

    /// Every committed store entry (handler state and pending timers) of every open task, by
    /// `store[partition]` and then `state`/`timers`: what a crash must not change.
    pub(super) fn store_contents(&mut self) -> Result<StoreContents, DriverError> {
        self.commit(self.stamps.now_ms)?;
        let mut out = BTreeMap::new();
        let default = self.processor.store_name().to_string();
        for (p, task) in &self.tasks {
            out.insert(
                format!("{default}[{p}] state"),
                task.store.entries(Column::State)?,
            );
            out.insert(
                format!("{default}[{p}] timers"),
                task.store.entries(Column::Timer)?,
            );
            for n in &task.named {
                out.insert(
                    format!("{}[{p}] state", n.name),
                    n.store.entries(Column::State)?,
                );
            }
        }
        Ok(out)
    }

    /// Commits the open batch (dedup ids sealed, overlays applied) and returns what a crash
    /// from now on keeps.
    pub(super) fn commit_point(&mut self) -> Result<Committed, DriverError> {
        self.commit(self.stamps.now_ms)?;
        Ok(Committed {
            written: self.written.clone(),
            ladder: self.ladder.clone(),
            offsets: self.offsets.clone(),
            routed: self.routed.clone(),
            now_ms: self.stamps.now_ms,
        })
    }

    /// Commits the open batch "in Kafka" only: dedup ids sealed, the overlays taken as the
    /// batch's changelog records, nothing applied to RocksDB. With [`Self::crash`] right after,
    /// this is a `kill -9` between the transaction's commit and the local apply.
    pub(super) fn commit_to_changelog(
        &mut self,
    ) -> Result<(Committed, Vec<ChangelogBatch>), DriverError> {
        let now = self.stamps.now_ms;
        let mut batches = Vec::new();
        for (p, task) in self.tasks.iter_mut() {
            dedup::seal(&mut task.overlay, now);
            batches.push(ChangelogBatch {
                partition: *p,
                overlay: std::mem::take(&mut task.overlay),
                named: task
                    .named
                    .iter_mut()
                    .map(|n| std::mem::take(&mut n.overlay))
                    .collect(),
            });
        }
        self.uncommitted = 0;
        let committed = Committed {
            written: self.written.clone(),
            ladder: self.ladder.clone(),
            offsets: self.offsets.clone(),
            routed: self.routed.clone(),
            now_ms: now,
        };
        Ok((committed, batches))
    }

    /// A `kill -9` and a restart: the processor (struct fields and all) is replaced by
    /// `processor`, every open batch's writes are lost (outputs, store overlays, dedup marks,
    /// stream time not committed), the topics go back to `committed`, and the stores reopen from
    /// disk, then replay `changelog` (batches committed in Kafka but not applied locally), as
    /// the runtime's restore from the changelog topics would.
    pub(super) fn crash(
        &mut self,
        mut processor: P,
        committed: &Committed,
        changelog: Vec<ChangelogBatch>,
    ) -> Result<(), DriverError> {
        let open: Vec<i32> = self.tasks.keys().copied().collect();
        self.tasks.clear();
        processor.bind_application(&self.config.app.id);
        for g in processor.global_tables() {
            if let Some(store) = self.globals.get(g.name()) {
                g.bind(store.clone()).map_err(DriverError::Global)?;
            }
        }
        self.processor = processor;
        self.written = committed.written.clone();
        self.ladder = committed.ladder.clone();
        self.offsets = committed.offsets.clone();
        self.routed = committed.routed.clone();
        self.stamps.now_ms = committed.now_ms;
        self.isolated.clear();
        self.forced = None;
        self.uncommitted = 0;
        for batch in changelog {
            self.task(batch.partition)?;
            if let Some(task) = self.tasks.get_mut(&batch.partition) {
                task.overlay = batch.overlay;
                for (n, o) in task.named.iter_mut().zip(batch.named) {
                    n.overlay = o;
                }
                task.apply_committed(|_| None)?;
            }
        }
        // Reopen from disk, so each task's clocks are the restored ones.
        self.tasks.clear();
        for p in open {
            self.task(p)?;
        }
        Ok(())
    }
}

impl<P: Application> Drop for TopologyTestDriver<P> {
    fn drop(&mut self) {
        self.processor.close();
        self.tasks.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
