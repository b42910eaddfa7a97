//! The handler-facing types: records in, state and emits through the context, typed failures out.

use super::stores::{layered_get, KeyValueStore, StoreHandle, StoreView};
use super::timers::{Lane, Layers, Timer, TimerKind};
pub use crate::record::{Emit, ProcessError, Record};
use crate::state::{Column, Overlay, Store};

/// What a handler implements. One instance serves every partition of the runtime; per-key
/// data belongs in the context's state, which moves with the partition.
pub trait Processor: Send {
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

    /// The record's event time (ms since the epoch): what moves the partition's stream time,
    /// fires event-time timers and stamps the outputs the record causes. By default the
    /// record's Kafka timestamp; a topology applies its sources' timestamp extractors.
    fn event_time(&self, record: &Record<'_>) -> Option<i64> {
        record.timestamp
    }

    /// [`Self::event_time`] checked against the supported range (years 1 to 9999,
    /// [`crate::topology::time::MIN_EVENT_TIME_MS`]): a record outside it is dead-lettered as
    /// `bad-timestamp` before it reaches [`Self::process`] or moves stream time, so no window,
    /// join or timer arithmetic ever sees it. A topology names the source and extractor that
    /// read the value; override only to name your own.
    fn checked_event_time(
        &self,
        record: &Record<'_>,
    ) -> Result<Option<i64>, crate::topology::time::BadEventTime> {
        crate::topology::time::check_event_time(self.event_time(record), || {
            "Processor::event_time (the Kafka timestamp by default)".to_string()
        })
    }

    /// The id dedup remembers: by default the `id` header; override to name a business key.
    /// `None` disables dedup for the record.
    fn message_id(&self, record: &Record<'_>) -> Option<Vec<u8>> {
        record.header("id").map(<[u8]>::to_vec)
    }

    /// Whether a key's later records must wait behind one in the retry ladder. Handlers whose
    /// records commute (idempotent upserts, counters) return `false` and skip the parked set.
    fn ordered(&self) -> bool {
        true
    }

    /// Names the store and so its changelog topic, `<app>-<store>-changelog`.
    fn store_name(&self) -> &str {
        "state"
    }

    /// The named stores the handler opens with [`Context::store`], beside the default one:
    /// each gets its own RocksDB store per partition and changelog `<app>-<name>-changelog`.
    fn stores(&self) -> Vec<String> {
        Vec::new()
    }

    /// The tables the processor reads, as `(store name, topic)`: each topic is consumed with
    /// the inputs (co-partitioned with them) and its records go straight into the store of
    /// that name — never to the handler, the dedup store or the retry ladder; a null value
    /// deletes the key. The topic is the store's changelog (no `<app>-<name>-changelog`): on
    /// assignment the store is restored from it up to the group's committed offset. The
    /// handler reads the store with [`Context::store`] and cannot write it. See
    /// [`crate::topology::TableHandle`].
    fn tables(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The versioned tables among [`Processor::tables`], as `(store name, history)`: their
    /// records are kept as versions within `history` of the table's newest timestamp, and
    /// [`crate::processor::KeyValueStore::get_as_of`] reads them as of a time. See
    /// [`crate::topology::TableHandle::versioned`].
    fn versioned_tables(&self) -> Vec<(String, std::time::Duration)> {
        Vec::new()
    }

    /// The global tables the processor reads (see [`crate::topology::globals`]): each topic is
    /// read whole into a local store before the instance joins its group, then kept current
    /// by a thread of its own. A [`crate::topology::Topology`] lists its own; a plain processor
    /// lists [`crate::topology::GlobalTableHandle::table`]s and reads them with
    /// [`crate::topology::GlobalTableHandle::get`].
    fn global_tables(&self) -> Vec<crate::topology::GlobalTable> {
        Vec::new()
    }

    /// The input topics, when the processor knows them (a [`crate::topology::Topology`]
    /// does); `None` takes `processor.input_topics` from the configuration.
    fn input_topics(&self) -> Option<Vec<String>> {
        None
    }

    /// Tells the processor the application id it runs under, before anything else is asked
    /// of it: a [`crate::topology::Topology`] names its repartition topics
    /// `<app>-<name>-repartition` from it. The runtime and the test driver call it with the
    /// configuration's `app.id`. The default does nothing.
    fn bind_application(&mut self, app_id: &str) {
        let _ = app_id;
    }

    /// The topics the processor writes and reads back itself (a topology's repartition
    /// topics, once bound): inputs too ([`Processor::input_topics`] lists them), and what
    /// the test driver pipes back in as soon as they are written. None by default.
    fn repartition_topics(&self) -> Vec<String> {
        Vec::new()
    }

    /// How many sub-topologies the processor has: a topology is split at its repartition
    /// topics, and each sub-topology on each partition number is a task of its own (its own
    /// stream time, timers and timestamp alignment). A plain processor is one.
    #[doc(hidden)]
    fn sub_topology_count(&self) -> usize {
        1
    }

    /// The sub-topology reading `topic` (an input, a repartition topic or a table's topic; a
    /// retry level counts as its input). `0` for a plain processor.
    #[doc(hidden)]
    fn sub_topology(&self, topic: &str) -> usize {
        let _ = topic;
        0
    }

    /// The sub-topology writing the repartition topic `topic` (one of
    /// [`Processor::repartition_topics`]), if the processor writes it.
    #[doc(hidden)]
    fn repartition_writer(&self, topic: &str) -> Option<usize> {
        let _ = topic;
        None
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
    /// processor did not list the store in [`Processor::stores`].
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
                    "store {} is not attached to this processor (list it in Processor::stores or Topology::add_state_store)",
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
