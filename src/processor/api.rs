//! The handler-facing types: records in, state and emits through the context, typed failures out.

use super::stores::{layered_get, KeyValueStore, StoreHandle, StoreView};
use super::timers::{Lane, Layers, Timer, TimerKind};
pub use crate::record::{Emit, ProcessError, Record};
use crate::state::{Column, Overlay, Store};

/// What you implement for a handler over raw records (Kafka Streams' `Processor`, one level
/// below the [`crate::dsl`]): what handles records and timers, nothing else. One instance serves
/// every partition of its thread; per-key data belongs in the context's state, which moves with
/// the partition — never in the processor's fields, which a crash or a rebalance does not
/// restore.
///
/// The wiring — the stores it opens, the tables it reads, the message id dedup remembers,
/// whether a key's records wait behind a retried one, its event time — is declared beside it
/// with a [`ProcessorSpec`](super::ProcessorSpec), not implemented: a processor without one runs with the defaults
/// (the default store `state`, dedup by the `id` header, ordered, the Kafka timestamp).
///
/// ```
/// use eosflow::processor::{Context, ProcessError, Processor, ProcessorSpec, Record};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
///
/// /// Counts records per key and emits the running count.
/// struct Count;
///
/// impl Processor for Count {
///     fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
///         let key = r.key.ok_or_else(|| ProcessError::permanent("a count needs a key"))?;
///         let n = match ctx.get(key)? {
///             Some(b) => u64::from_le_bytes(b.try_into().map_err(|_| ProcessError::permanent("bad count"))?),
///             None => 0,
///         } + 1;
///         ctx.put(key, n.to_le_bytes().to_vec());
///         ctx.emit("counts", Some(key.to_vec()), Some(n.to_string().into_bytes()), vec![]);
///         Ok(())
///     }
/// }
///
/// // Declared: its store is `counts` (changelog `<app>-counts-changelog`), no dedup.
/// let app = ProcessorSpec::new(Count).store_name("counts").inputs(["clicks"]).no_dedup();
/// let mut driver = TopologyTestDriver::new(app)?;
/// driver.pipe(TestRecord::new("clicks", Some("a"), Some("x")))?;
/// driver.pipe(TestRecord::new("clicks", Some("a"), Some("y")))?;
/// let out: Vec<_> = driver.read_raw_output("counts").iter().map(|o| o.value_text()).collect();
/// assert_eq!(out, ["1", "2"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Processor: Send {
    /// Called once before the first record, with the application id the processor runs under
    /// (`app.id`): for what the processor derives from it. The default does nothing.
    fn init(&mut self, app_id: &str) {
        let _ = app_id;
    }

    /// Handles one record. Returning an error (or panicking) discards this record's state writes
    /// and emits, and routes the record to its dead-letter topic in the same transaction.
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError>;

    /// Called when a timer this processor scheduled ([`Context::schedule`]) is due, inside the
    /// batch's transaction: its state writes, emits and new timers commit with the batch that
    /// fired it, or it fires again after a crash. An error (or a panic) discards what the call
    /// did and dead-letters the timer (see [`super::Timer`]). The default does nothing.
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let _ = (ctx, timer);
        Ok(())
    }

    /// Called once when the thread running the processor stops (a clean shutdown or a fatal
    /// error), after its last commit: for releasing what `init` opened. Not called on a crash,
    /// so it must never hold state the next owner needs. The default does nothing.
    fn close(&mut self) {}
}

/// What the runtime ([`crate::run`]) and the test driver run: handlers plus their wiring. It
/// is implemented for every [`Processor`] (with the default wiring), for a [`ProcessorSpec`](super::ProcessorSpec)
/// (a processor with its wiring declared) and for a [`crate::topology::Topology`]; you do not
/// implement it. Its wiring methods are the runtime's questions, hidden from the docs.
pub trait Application: Send {
    /// Handles one record (see [`Processor::process`]).
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError>;

    /// Handles a due timer (see [`Processor::on_timer`]). The default does nothing.
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let _ = (ctx, timer);
        Ok(())
    }

    /// The runtime stopped (see [`Processor::close`]).
    #[doc(hidden)]
    fn close(&mut self) {}

    /// The record's event time (ms since the epoch): what moves the partition's stream time,
    /// fires event-time timers and stamps the outputs the record causes. By default the
    /// record's Kafka timestamp; a topology applies its sources' timestamp extractors.
    #[doc(hidden)]
    fn event_time(&self, record: &Record<'_>) -> Option<i64> {
        record.timestamp
    }

    /// [`Self::event_time`] checked against the supported range (years 1 to 9999,
    /// [`crate::topology::time::MIN_EVENT_TIME_MS`]): a record outside it is dead-lettered as
    /// `bad-timestamp` before it reaches [`Self::process`] or moves stream time, so no window,
    /// join or timer arithmetic ever sees it. The message names what read the value.
    #[doc(hidden)]
    fn checked_event_time(
        &self,
        record: &Record<'_>,
    ) -> Result<Option<i64>, crate::topology::time::BadEventTime> {
        crate::topology::time::check_event_time(self.event_time(record), || {
            "the Kafka timestamp (ProcessorSpec::event_time not set)".to_string()
        })
    }

    /// The id dedup remembers: by default the `id` header. `None` disables dedup for the record.
    #[doc(hidden)]
    fn message_id(&self, record: &Record<'_>) -> Option<Vec<u8>> {
        record.header("id").map(<[u8]>::to_vec)
    }

    /// Whether a key's later records must wait behind one in the retry ladder.
    #[doc(hidden)]
    fn ordered(&self) -> bool {
        true
    }

    /// Names the default store and so its changelog topic, `<app>-<store>-changelog`.
    #[doc(hidden)]
    fn store_name(&self) -> &str {
        "state"
    }

    /// The named stores opened with [`Context::store`], beside the default one: each gets its
    /// own RocksDB store per partition and changelog `<app>-<name>-changelog`.
    #[doc(hidden)]
    fn stores(&self) -> Vec<String> {
        Vec::new()
    }

    /// The tables read, as `(store name, topic)`: each topic is consumed with the inputs
    /// (co-partitioned with them) and its records go straight into the store of that name —
    /// never to the handler, the dedup store or the retry ladder; a null value deletes the
    /// key. The topic is the store's changelog. See [`crate::topology::TableHandle`].
    #[doc(hidden)]
    fn tables(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The versioned tables among [`Application::tables`], as `(store name, history)`.
    #[doc(hidden)]
    fn versioned_tables(&self) -> Vec<(String, std::time::Duration)> {
        Vec::new()
    }

    /// The global tables read (see [`crate::topology::globals`]): each topic is read whole
    /// into a local store before the instance joins its group, then kept current by a thread
    /// of its own.
    #[doc(hidden)]
    fn global_tables(&self) -> Vec<crate::topology::GlobalTable> {
        Vec::new()
    }

    /// The input topics, when known; `None` takes `processor.input_topics` from the
    /// configuration.
    #[doc(hidden)]
    fn input_topics(&self) -> Option<Vec<String>> {
        None
    }

    /// Tells the application id it runs under, before anything else is asked: a topology
    /// names its repartition topics `<app>-<name>-repartition` from it; a processor's
    /// [`Processor::init`] gets it.
    #[doc(hidden)]
    fn bind_application(&mut self, app_id: &str) {
        let _ = app_id;
    }

    /// The topics written and read back (a topology's repartition topics, once bound).
    #[doc(hidden)]
    fn repartition_topics(&self) -> Vec<String> {
        Vec::new()
    }

    /// How many sub-topologies: each sub-topology on each partition number is a task of its
    /// own (its own stream time, timers and timestamp alignment). A processor is one.
    #[doc(hidden)]
    fn sub_topology_count(&self) -> usize {
        1
    }

    /// The sub-topology reading `topic`. `0` for a processor.
    #[doc(hidden)]
    fn sub_topology(&self, topic: &str) -> usize {
        let _ = topic;
        0
    }

    /// The sub-topology writing the repartition topic `topic`, if any.
    #[doc(hidden)]
    fn repartition_writer(&self, topic: &str) -> Option<usize> {
        let _ = topic;
        None
    }

    /// The sub-topology writing store `store` (a processor's or a table's): an interactive
    /// query's positions for that store are the ones this sub-topology's records reached.
    /// `0` for a processor, and for a store the topology does not know.
    #[doc(hidden)]
    fn store_writer(&self, store: &str) -> usize {
        let _ = store;
        0
    }
}

/// A processor alone runs with the default wiring.
impl<P: Processor> Application for P {
    fn process(&mut self, ctx: &mut Context<'_>, record: &Record<'_>) -> Result<(), ProcessError> {
        Processor::process(self, ctx, record)
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        Processor::on_timer(self, ctx, timer)
    }

    fn close(&mut self) {
        Processor::close(self)
    }

    fn bind_application(&mut self, app_id: &str) {
        Processor::init(self, app_id)
    }
}

/// The handler's view of its partition during one call.
pub struct Context<'a> {
    store: &'a Store,
    batch: &'a Overlay,
    pending: Overlay,
    emits: Vec<Emit>,
    message_id: Option<&'a [u8]>,
    named: Vec<StoreView<'a>>,
    wall_clock_ms: i64,
    event_time_ms: Option<i64>,
    stream_time_ms: Option<i64>,
    dead_letter: Option<DeadLetterRequest>,
    /// The task of the call: its sub-topology (whose timer lanes it schedules in) and its
    /// partition number (`-1` when not known).
    sub: usize,
    partition: i32,
}

/// A handler's request to send its input record to the input's DLT while its call succeeds
/// (its writes and emits kept): a late record of a windowed aggregate. Sent in the same
/// transaction, counted as dead-lettered, never parks the key.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetterRequest {
    /// The DLT class (`eosflow.dlt.error.class`).
    pub(crate) class: crate::retry::dlt::DltClass,
    /// `eosflow.dlt.error.message`.
    pub(crate) reason: String,
    /// Extra `eosflow.dlt.*` headers.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(store: &'a Store, batch: &'a Overlay, message_id: Option<&'a [u8]>) -> Self {
        Self {
            store,
            batch,
            pending: Overlay::default(),
            emits: Vec::new(),
            message_id,
            named: Vec::new(),
            wall_clock_ms: 0,
            event_time_ms: None,
            stream_time_ms: None,
            dead_letter: None,
            sub: 0,
            partition: -1,
        }
    }

    /// Adds the task the call runs in: its sub-topology and partition number.
    pub(crate) fn in_task(mut self, sub: usize, partition: i32) -> Self {
        self.sub = sub;
        self.partition = partition;
        self
    }

    /// The partition number of the task the call runs in (`-1` when not known).
    pub(crate) fn task_partition(&self) -> i32 {
        self.partition
    }

    /// Adds the event time of what is handled (a record's, or a firing timer's due time) and
    /// the partition's stream time.
    pub(crate) fn at(mut self, event_time_ms: Option<i64>, stream_time_ms: Option<i64>) -> Self {
        self.event_time_ms = event_time_ms;
        self.stream_time_ms = stream_time_ms;
        self
    }

    /// Adds the named stores of the record's partition and the batch's wall-clock time.
    pub(crate) fn with(mut self, named: Vec<StoreView<'a>>, wall_clock_ms: i64) -> Self {
        self.named = named;
        self.wall_clock_ms = wall_clock_ms;
        self
    }

    /// Reads state: this call's writes, then the open batch's, then the committed store.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ProcessError> {
        layered_get(&self.pending, self.batch, self.store, Column::State, key)
    }

    /// Opens the named store `handle` names, typed by its serdes. Fails (permanently) when the
    /// processor did not declare the store ([`super::ProcessorSpec::store`]).
    pub fn store<'c, K, V>(
        &'c mut self,
        handle: &'c StoreHandle<K, V>,
    ) -> Result<KeyValueStore<'c, 'a, K, V>, ProcessError> {
        let view = self
            .named
            .iter_mut()
            .find(|v| v.name == handle.name())
            .ok_or_else(|| {
                ProcessError::permanent(format!(
                    "store {} is not attached to this processor (declare it with ProcessorSpec::store or Topology::add_state_store)",
                    handle.name()
                ))
            })?;
        Ok(KeyValueStore::new(view, handle))
    }

    /// The wall-clock time of the batch (ms since the epoch): the runtime's clock, or the test
    /// driver's, which only moves when the test advances it.
    pub fn wall_clock_ms(&self) -> i64 {
        self.wall_clock_ms
    }

    /// The event time of what is handled (ms since the epoch): the record's (its source's
    /// timestamp extractor, by default its Kafka timestamp), or in [`Processor::on_timer`] the
    /// timer's due time. Outputs carry it as their Kafka timestamp.
    pub fn event_time_ms(&self) -> Option<i64> {
        self.event_time_ms
    }

    /// The stream time of the call's task (its sub-topology on its partition): the largest
    /// event time the task has seen, this record's included (for a task reading a repartition
    /// topic, the least stream time of the tasks writing to it: see the architecture's task
    /// model). `None` before any record with an event time. It never goes back, survives
    /// restarts and moves with the partition.
    pub fn stream_time_ms(&self) -> Option<i64> {
        self.stream_time_ms
    }

    fn timers(&mut self) -> Layers<'_> {
        Layers {
            pending: &mut self.pending,
            batch: self.batch,
            store: self.store,
        }
    }

    /// Schedules `timer`, replacing the one pending for its kind, name and key: it fires in
    /// [`Processor::on_timer`] once its clock reaches its due time (a due time already passed
    /// fires right after this call). Committed with this call's other writes, or not at all.
    ///
    /// ```
    /// use eosflow::processor::{Context, ProcessError, Processor, Record, Timer};
    ///
    /// /// Says `expired` for a key that had no record for a minute of event time.
    /// struct Expiry;
    ///
    /// impl Processor for Expiry {
    ///     fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
    ///         let (Some(key), Some(now)) = (r.key, ctx.event_time_ms()) else {
    ///             return Ok(());
    ///         };
    ///         ctx.schedule_event_time(key, now + 60_000)
    ///     }
    ///
    ///     fn on_timer(&mut self, ctx: &mut Context<'_>, t: &Timer) -> Result<(), ProcessError> {
    ///         ctx.emit("expired", Some(t.key.clone()), Some(b"expired".to_vec()), vec![]);
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn schedule(&mut self, timer: Timer) -> Result<(), ProcessError> {
        let sub = self.sub;
        self.timers().schedule(&timer, sub)
    }

    /// Schedules the event-time timer of `key` at `at_ms` (replacing the pending one).
    pub fn schedule_event_time(&mut self, key: &[u8], at_ms: i64) -> Result<(), ProcessError> {
        self.schedule(Timer::event_time(key, at_ms))
    }

    /// Schedules the wall-clock timer of `key` at `at_ms` (replacing the pending one).
    pub fn schedule_wall_clock(&mut self, key: &[u8], at_ms: i64) -> Result<(), ProcessError> {
        self.schedule(Timer::wall_clock(key, at_ms))
    }

    /// Cancels the timer of `kind`, `name` and `key`; whether one was pending.
    pub fn cancel(
        &mut self,
        kind: TimerKind,
        name: &str,
        key: &[u8],
    ) -> Result<bool, ProcessError> {
        let lane = Lane::new(kind, self.sub);
        self.timers().cancel(lane, name, key)
    }

    /// Cancels the event-time timer of `key` (unnamed); whether one was pending.
    pub fn cancel_event_time(&mut self, key: &[u8]) -> Result<bool, ProcessError> {
        self.cancel(TimerKind::EventTime, "", key)
    }

    /// Cancels the wall-clock timer of `key` (unnamed); whether one was pending.
    pub fn cancel_wall_clock(&mut self, key: &[u8]) -> Result<bool, ProcessError> {
        self.cancel(TimerKind::WallClock, "", key)
    }

    /// When the timer of `kind`, `name` and `key` is due, if one is pending.
    pub fn timer_due(
        &self,
        kind: TimerKind,
        name: &str,
        key: &[u8],
    ) -> Result<Option<i64>, ProcessError> {
        let lane = Lane::new(kind, self.sub);
        super::timers::due((&self.pending, self.batch, self.store), lane, name, key)
    }

    /// Writes state (committed with the record's offset).
    pub fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.pending.put(Column::State, key, value);
    }

    /// Deletes state (a changelog tombstone).
    pub fn delete(&mut self, key: &[u8]) {
        self.pending.delete(Column::State, key);
    }

    /// Produces a record in the same transaction.
    pub fn emit(
        &mut self,
        topic: impl Into<String>,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<(String, Vec<u8>)>,
    ) {
        self.emits.push(Emit {
            topic: topic.into(),
            key,
            value,
            headers,
            timestamp: None,
        });
    }

    /// Produces `emit` in the same transaction, with its own timestamp if it has one.
    pub fn emit_record(&mut self, emit: Emit) {
        self.emits.push(emit);
    }

    /// The id dedup uses for this record, if any.
    pub fn message_id(&self) -> Option<&[u8]> {
        self.message_id
    }

    /// Asks for the input record to be dead-lettered once this call succeeds.
    pub(crate) fn request_dead_letter(&mut self, request: DeadLetterRequest) {
        self.dead_letter = Some(request);
    }

    /// The named store `name` as this call sees it, if the processor has it.
    pub(crate) fn named_view(&mut self, name: &str) -> Option<&mut StoreView<'a>> {
        self.named.iter_mut().find(|v| v.name == name)
    }

    /// The call's writes (default store, then each named store in order), emits and
    /// dead-letter request.
    pub(crate) fn into_parts(self) -> super::engine::CallParts {
        let named = self.named.into_iter().map(|v| v.pending).collect();
        (self.pending, named, self.emits, self.dead_letter)
    }
}
