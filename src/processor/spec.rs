//! [`ProcessorSpec`]: a [`Processor`] with its wiring declared beside it, not implemented.

use std::sync::Arc;
use std::time::Duration;

use super::api::{Application, Context, ProcessError, Processor, Record};
use super::timers::Timer;
use crate::topology::{GlobalTable, GlobalTableHandle, TableHandle};

/// Reads a record's message id (see [`ProcessorSpec::message_id`]).
type MessageIdFn = dyn Fn(&Record<'_>) -> Option<Vec<u8>> + Send + Sync;
/// Reads a record's event time (see [`ProcessorSpec::event_time`]).
type EventTimeFn = dyn Fn(&Record<'_>) -> Option<i64> + Send + Sync;

/// A [`Processor`] and the wiring it runs with (Kafka Streams declares the same things when it
/// adds a processor and its stores to a `Topology`): the stores it opens, the tables it reads,
/// the message id dedup remembers, whether a key's records wait behind a retried one, and its
/// event time. [`crate::run`], [`crate::run_threads`] and the test driver take it where they
/// take a processor; what is not declared keeps its default.
///
/// | declared with | default |
/// |---|---|
/// | [`store_name`](Self::store_name) | `state` (changelog `<app>-state-changelog`) |
/// | [`store`](Self::store) | no named stores |
/// | [`table`](Self::table), [`global_table`](Self::global_table) | none |
/// | [`message_id`](Self::message_id), [`no_dedup`](Self::no_dedup) | the `id` header |
/// | [`unordered`](Self::unordered) | ordered: a key's records wait behind a retried one |
/// | [`event_time`](Self::event_time) | the Kafka timestamp |
/// | [`inputs`](Self::inputs) | `processor.input_topics` from the configuration |
///
/// ```
/// use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
///
/// /// Emits a reading only when it is new for its sensor; the last one is in the store.
/// struct Changes;
///
/// impl Processor for Changes {
///     fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
///         let (Some(k), Some(v)) = (r.key, r.value) else { return Ok(()) };
///         if ctx.get(k)?.as_deref() != Some(v) {
///             ctx.put(k, v.to_vec());
///             ctx.emit("changes", Some(k.to_vec()), Some(v.to_vec()), vec![]);
///         }
///         Ok(())
///     }
/// }
///
/// let app = ProcessorSpec::new(Changes)
///     .store_name("last-reading")
///     .inputs(["readings"])
///     // Dedup by the reading's own id header, and readings of one sensor commute.
///     .message_id(|r| r.header("reading-id").map(<[u8]>::to_vec))
///     .unordered();
/// let mut driver = TopologyTestDriver::new(app)?;
/// for v in ["20", "20", "21"] {
///     driver.pipe(TestRecord::new("readings", Some("s1"), Some(v)))?;
/// }
/// assert_eq!(driver.read_raw_output("changes").len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ProcessorSpec<P> {
    processor: P,
    store_name: String,
    stores: Vec<String>,
    tables: Vec<(String, String)>,
    versioned: Vec<(String, Duration)>,
    globals: Vec<GlobalTable>,
    inputs: Option<Vec<String>>,
    ordered: bool,
    message_id: Option<Arc<MessageIdFn>>,
    event_time: Option<Arc<EventTimeFn>>,
}

impl<P> std::fmt::Debug for ProcessorSpec<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorSpec")
            .field("processor", &std::any::type_name::<P>())
            .field("store_name", &self.store_name)
            .field("stores", &self.stores)
            .field("tables", &self.tables)
            .field("global_tables", &self.globals.len())
            .field("inputs", &self.inputs)
            .field("ordered", &self.ordered)
            .field("message_id", &self.message_id.is_some())
            .field("event_time", &self.event_time.is_some())
            .finish()
    }
}

impl<P: Processor> ProcessorSpec<P> {
    /// `processor` with the default wiring (the table above).
    pub fn new(processor: P) -> Self {
        Self {
            processor,
            store_name: "state".to_string(),
            stores: Vec::new(),
            tables: Vec::new(),
            versioned: Vec::new(),
            globals: Vec::new(),
            inputs: None,
            ordered: true,
            message_id: None,
            event_time: None,
        }
    }

    /// Names the default store ([`Context::get`], [`Context::put`]) and so its changelog,
    /// `<app>-<name>-changelog`. Renaming it later starts from an empty store.
    pub fn store_name(mut self, name: impl Into<String>) -> Self {
        self.store_name = name.into();
        self
    }

    /// A named store beside the default one, opened with [`Context::store`]: its own RocksDB
    /// store per partition and changelog `<app>-<name>-changelog`.
    pub fn store(mut self, name: impl Into<String>) -> Self {
        self.stores.push(name.into());
        self
    }

    /// A table the processor reads with [`Context::store`]`(table.store())` and cannot write:
    /// its topic is consumed with the inputs (co-partitioned with them) and each record goes
    /// straight into the store — never to the processor, dedup or the retry ladder; a null
    /// value deletes the key. A [`TableHandle::versioned`] one keeps its history.
    pub fn table<K, V>(mut self, table: &TableHandle<K, V>) -> Self {
        self.tables
            .push((table.name().to_string(), table.topic().to_string()));
        if let Some(history) = table.history() {
            self.versioned.push((table.name().to_string(), history));
        }
        self
    }

    /// A global table (every partition of its topic, on every instance), read whole before the
    /// instance joins its group and kept current by a thread of its own; read with
    /// [`GlobalTableHandle::get`].
    pub fn global_table<K: 'static, V: 'static>(mut self, table: &GlobalTableHandle<K, V>) -> Self {
        self.globals.push(table.table());
        self
    }

    /// The id dedup remembers for a record (a business key, an event id header): a second
    /// record with the same id is skipped. `None` for a record disables dedup for it.
    pub fn message_id(
        mut self,
        id: impl Fn(&Record<'_>) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        self.message_id = Some(Arc::new(id));
        self
    }

    /// No dedup: for a processor whose effect is idempotent anyway (an upsert guarded by a
    /// version), so no dedup entry is written per record.
    pub fn no_dedup(self) -> Self {
        self.message_id(|_| None)
    }

    /// A key's later records do not wait behind one in the retry ladder: for records that
    /// commute (counters, upserts under a version guard). The parked set is skipped.
    pub fn unordered(mut self) -> Self {
        self.ordered = false;
        self
    }

    /// The record's event time (ms since the epoch), read from the record instead of its Kafka
    /// timestamp: what moves stream time, fires event-time timers and stamps outputs. A value
    /// outside years 1 to 9999 is dead-lettered as `bad-timestamp`.
    pub fn event_time(
        mut self,
        time: impl Fn(&Record<'_>) -> Option<i64> + Send + Sync + 'static,
    ) -> Self {
        self.event_time = Some(Arc::new(time));
        self
    }

    /// The topics the processor reads, instead of `processor.input_topics` in the
    /// configuration.
    pub fn inputs<T: Into<String>>(mut self, topics: impl IntoIterator<Item = T>) -> Self {
        self.inputs = Some(topics.into_iter().map(Into::into).collect());
        self
    }

    /// The processor.
    pub fn processor(&self) -> &P {
        &self.processor
    }

    /// The processor, to change it before it runs.
    pub fn processor_mut(&mut self) -> &mut P {
        &mut self.processor
    }
}

impl<P: Processor> Application for ProcessorSpec<P> {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        Processor::process(&mut self.processor, ctx, record)
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        Processor::on_timer(&mut self.processor, ctx, timer)
    }

    fn close(&mut self) {
        Processor::close(&mut self.processor)
    }

    fn event_time(&self, record: &Record<'_>) -> Option<i64> {
        match &self.event_time {
            Some(time) => time(record),
            None => record.timestamp,
        }
    }

    fn checked_event_time(
        &self,
        record: &Record<'_>,
    ) -> Result<Option<i64>, crate::topology::time::BadEventTime> {
        crate::topology::time::check_event_time(self.event_time(record), || match self.event_time {
            Some(_) => "ProcessorSpec::event_time".to_string(),
            None => "the Kafka timestamp".to_string(),
        })
    }

    fn message_id(&self, record: &Record<'_>) -> Option<Vec<u8>> {
        match &self.message_id {
            Some(id) => id(record),
            None => record.header("id").map(<[u8]>::to_vec),
        }
    }

    fn ordered(&self) -> bool {
        self.ordered
    }

    fn store_name(&self) -> &str {
        &self.store_name
    }

    fn stores(&self) -> Vec<String> {
        self.stores.clone()
    }

    fn tables(&self) -> Vec<(String, String)> {
        self.tables.clone()
    }

    fn versioned_tables(&self) -> Vec<(String, Duration)> {
        self.versioned.clone()
    }

    fn global_tables(&self) -> Vec<GlobalTable> {
        self.globals.clone()
    }

    fn input_topics(&self) -> Option<Vec<String>> {
        self.inputs.clone()
    }

    fn bind_application(&mut self, app_id: &str) {
        Processor::init(&mut self.processor, app_id)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::ProcessorSpec;
    use crate::processor::{Context, ProcessError, Processor, Record};
    use crate::testing::{TestRecord, TopologyTestDriver};

    /// Echoes each record to `out`, and notes what `init` and `close` were given.
    struct Echo(Arc<Mutex<Vec<String>>>);

    impl Processor for Echo {
        fn init(&mut self, app_id: &str) {
            self.0.lock().expect("log").push(format!("init {app_id}"));
        }
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            ctx.emit("out", None, r.value.map(<[u8]>::to_vec), vec![]);
            Ok(())
        }
        fn close(&mut self) {
            self.0.lock().expect("log").push("close".to_string());
        }
    }

    #[test]
    fn init_gets_the_application_id_and_close_comes_when_the_driver_is_dropped() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let app = ProcessorSpec::new(Echo(log.clone())).inputs(["in"]);
        let mut driver = TopologyTestDriver::new(app).expect("driver");
        driver
            .pipe(TestRecord::new("in", Some("k"), Some("v")))
            .expect("pipe");
        assert_eq!(*log.lock().expect("log"), ["init test"]);
        drop(driver);
        assert_eq!(*log.lock().expect("log"), ["init test", "close"]);
    }

    #[test]
    fn a_declared_event_time_moves_stream_time_and_a_bad_one_is_dead_lettered_naming_the_spec() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let app = ProcessorSpec::new(Echo(log))
            .inputs(["in"])
            .event_time(|r| {
                r.header("at")
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            });
        let mut driver = TopologyTestDriver::new(app).expect("driver");
        let at = |ms: &str| TestRecord::new("in", Some("k"), Some(ms)).header("at", ms);
        driver.pipe(at("5000")).expect("pipe");
        assert_eq!(driver.stream_time_ms(), Some(5_000));
        driver.pipe(at("-9223372036854775808")).expect("pipe");
        assert_eq!(driver.stream_time_ms(), Some(5_000));
        let dead = driver.read_raw_output("in.DLT");
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].dlt_class(), Some("bad-timestamp"));
        assert!(
            dead[0]
                .dlt_reason()
                .is_some_and(|r| r.contains("ProcessorSpec::event_time")),
            "{:?}",
            dead[0].dlt_reason()
        );
    }
}
