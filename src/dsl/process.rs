//! [`KStream::process`]: dropping from the DSL into a node of the processor API, typed in and
//! out, with the stores it reads and writes attached.

use super::builder::{AddFn, Types};
use super::stream::KStream;
use super::table::KTable;
use super::Data;
use crate::processor::{KeyValueStore, StoreHandle, Timer, TimerKind};
use crate::record::{ProcessError, Record};
use crate::topology::windows::{WindowStore, WindowStoreHandle};
use crate::topology::{NodeContext, NodeProcessor, TableHandle, TopologyBuilder, TypedRecord};

/// A node written by hand for [`KStream::process`] (Kafka Streams' `api.Processor<KIn, VIn,
/// KOut, VOut>`): takes `(K, V)` records, forwards `(K2, V2)` ones through its
/// [`ProcessorContext`] — typed, so a DSL user never meets a run-time type mismatch — and
/// keeps its state in the stores it was given, never in its fields: a crash, a retry or a
/// rebalance restores stores, not structs. A closure
/// `FnMut(&mut ProcessorContext<'_, '_, '_, K2, V2>, TypedRecord<K, V>) -> Result<(), ProcessError>`
/// is one.
///
/// An error (or a panic) discards everything the record did — outputs, store writes, timers
/// — and sends it up the retry ladder (transient) or to its input's DLT (permanent).
pub trait StreamProcessor<K, V, K2, V2>: Send {
    /// Handles one record.
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, K2, V2>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError>;

    /// Called when a timer this node scheduled is due; what it writes, forwards and
    /// schedules commits with the batch that fired it. The default does nothing.
    fn on_timer(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, K2, V2>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let _ = (ctx, timer);
        Ok(())
    }
}

impl<K, V, K2, V2, F> StreamProcessor<K, V, K2, V2> for F
where
    F: FnMut(
            &mut ProcessorContext<'_, '_, '_, K2, V2>,
            TypedRecord<K, V>,
        ) -> Result<(), ProcessError>
        + Send,
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, '_, K2, V2>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        self(ctx, record)
    }
}

/// What a [`StreamProcessor`] sees of one call (Kafka Streams' `ProcessorContext<KOut,
/// VOut>`): the [`NodeContext`] of its node, with forwarding typed to the output stream's
/// `(K, V)`.
pub struct ProcessorContext<'c, 'n, 'a, K, V> {
    ctx: &'c mut NodeContext<'n, 'a>,
    /// Whether this is a [`StreamProcessor::on_timer`] call (no input record of its own).
    in_timer: bool,
    _types: Types<K, V>,
}

impl<K, V> std::fmt::Debug for ProcessorContext<'_, '_, '_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorContext")
            .field("node", &self.ctx.node_name())
            .finish()
    }
}

impl<'n, 'a, K: Data, V: Data> ProcessorContext<'_, 'n, 'a, K, V> {
    /// Sends `record` to every operation fed by the output stream.
    pub fn forward(&mut self, record: TypedRecord<K, V>) {
        self.ctx.forward(record);
    }

    /// The input record's coordinates (topic, partition, offset, raw bytes); in `on_timer`,
    /// the record that fired the timer's batch.
    pub fn input(&self) -> &Record<'n> {
        self.ctx.input()
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        self.ctx.node_name()
    }

    /// Opens a key-value store given to the node ([`Stores::store`]) or a table
    /// ([`Stores::table`], read-only).
    pub fn store<'s, SK, SV>(
        &'s mut self,
        handle: &'s StoreHandle<SK, SV>,
    ) -> Result<KeyValueStore<'s, 'a, SK, SV>, ProcessError> {
        self.ctx.store(handle)
    }

    /// Opens a windowed store given to the node ([`Stores::window_store`]).
    pub fn window_store<'s, SK, SV>(
        &'s mut self,
        handle: &'s WindowStoreHandle<SK, SV>,
    ) -> Result<WindowStore<'s, 'a, SK, SV>, ProcessError> {
        self.ctx.window_store(handle)
    }

    /// The batch's wall-clock time (ms).
    pub fn wall_clock_ms(&self) -> i64 {
        self.ctx.wall_clock_ms()
    }

    /// The input record's event time, or in `on_timer` the timer's due time.
    pub fn event_time_ms(&self) -> Option<i64> {
        self.ctx.event_time_ms()
    }

    /// The partition's stream time: the largest event time it has seen.
    pub fn stream_time_ms(&self) -> Option<i64> {
        self.ctx.stream_time_ms()
    }

    /// Schedules this node's event-time timer of `key` at `at_ms` (replacing its pending
    /// one): [`StreamProcessor::on_timer`] is called once stream time reaches it.
    pub fn schedule_event_time(&mut self, key: &[u8], at_ms: i64) -> Result<(), ProcessError> {
        self.ctx.schedule_event_time(key, at_ms)
    }

    /// Schedules this node's wall-clock timer of `key` at `at_ms` (replacing its pending one).
    pub fn schedule_wall_clock(&mut self, key: &[u8], at_ms: i64) -> Result<(), ProcessError> {
        self.ctx.schedule_wall_clock(key, at_ms)
    }

    /// Schedules `timer` (with its payload) for this node.
    pub fn schedule(&mut self, timer: Timer) -> Result<(), ProcessError> {
        self.ctx.schedule(timer)
    }

    /// Cancels this node's timer of `kind` for `key`; whether one was pending.
    pub fn cancel(&mut self, kind: TimerKind, key: &[u8]) -> Result<bool, ProcessError> {
        self.ctx.cancel(kind, key)
    }

    /// When this node's timer of `kind` for `key` is due, if one is pending.
    pub fn timer_due(&self, kind: TimerKind, key: &[u8]) -> Result<Option<i64>, ProcessError> {
        self.ctx.timer_due(kind, key)
    }

    /// The message id dedup uses for the input record, if any.
    pub fn message_id(&self) -> Option<&[u8]> {
        self.ctx.message_id()
    }

    /// Sends the input record to its input's DLT as too late — class `late-record`, counted
    /// in `eosflow_late_records_total{node}`, `reason` as `eosflow.dlt.error.message`, the
    /// stream time and this node's name in `eosflow.dlt.late.*` headers — while the call
    /// succeeds (what it wrote and forwarded is kept). For a processor with an event-time
    /// bound of its own (a dedup TTL with grace, a hand-made window) that meets a record too
    /// far behind stream time to judge: the class the windowed aggregate and the stream-stream
    /// join give such records, so a late record is not reported as a `permanent` failure.
    ///
    /// Only for an input record: in [`StreamProcessor::on_timer`] there is none, and it fails.
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, ProcessorContext, Produced, Stores, StreamsBuilder};
    /// use eosflow::processor::ProcessError;
    /// use eosflow::serdes::StringSerde;
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::TypedRecord;
    ///
    /// // Readings more than 5 s behind stream time are dead-lettered as late.
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("readings", Consumed::with(StringSerde, StringSerde))
    ///     .process(
    ///         |ctx: &mut ProcessorContext<'_, '_, '_, String, String>, r: TypedRecord<String, String>| {
    ///             let (at, now) = (ctx.event_time_ms().unwrap_or(0), ctx.stream_time_ms().unwrap_or(0));
    ///             if at + 5_000 < now {
    ///                 return ctx.dead_letter_late(format!("{} ms behind stream time", now - at));
    ///             }
    ///             ctx.forward(r);
    ///             Ok::<(), ProcessError>(())
    ///         },
    ///         Stores::new(),
    ///     )
    ///     .to("on-time", Produced::with(StringSerde, StringSerde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for ms in [10_000, 4_000, 6_000] {
    ///     driver.pipe(TestRecord::new("readings", Some("s1"), Some("21")).timestamp(ms))?;
    /// }
    /// assert_eq!(driver.read_output("on-time", &StringSerde, &StringSerde)?.len(), 2);
    /// let dead = driver.read_raw_output("readings.DLT");
    /// assert_eq!(dead[0].dlt_class(), Some("late-record"));
    /// assert_eq!(dead[0].dlt_reason(), Some("6000 ms behind stream time"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dead_letter_late(&mut self, reason: impl Into<String>) -> Result<(), ProcessError> {
        if self.in_timer {
            return Err(ProcessError::permanent(format!(
                "{}: dead_letter_late in on_timer: a timer has no input record to dead-letter",
                self.ctx.node_name()
            )));
        }
        let stream = self.ctx.stream_time_ms().or(self.ctx.event_time_ms());
        self.ctx
            .dead_letter_late(reason.into(), &[], stream.unwrap_or_default());
        Ok(())
    }
}

/// Attaches one store to a node, by the node's final name.
type AttachOne = Box<dyn FnOnce(&mut TopologyBuilder, &str) + Send>;

/// The stores a [`KStream::process`] node reads and writes (Kafka Streams'
/// `process(supplier, storeNames…)` with `addStateStore`): each key-value or windowed store
/// is created for it — a RocksDB store per partition with its changelog
/// `<application id>-<name>-changelog` — and a table read from a topic is attached
/// read-only. A store belongs to one node: giving it to two fails at build.
#[derive(Default)]
pub struct Stores {
    attach: Vec<AttachOne>,
    names: Vec<String>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("names", &self.names)
            .finish()
    }
}

impl Stores {
    /// No stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// A key-value store, opened in the node with [`ProcessorContext::store`].
    pub fn store<K: 'static, V: 'static>(mut self, handle: &StoreHandle<K, V>) -> Self {
        let handle = handle.clone();
        self.names.push(handle.name().to_string());
        self.attach.push(Box::new(move |b, node| {
            b.add_state_store(&handle, &[node]);
        }));
        self
    }

    /// A windowed store, opened in the node with [`ProcessorContext::window_store`].
    pub fn window_store<K: 'static, V: 'static>(
        mut self,
        handle: &WindowStoreHandle<K, V>,
    ) -> Self {
        let handle = handle.clone();
        self.names.push(handle.name().to_string());
        self.attach.push(Box::new(move |b, node| {
            b.add_window_store(&handle, &[node]);
        }));
        self
    }

    /// A table read from a topic ([`super::StreamsBuilder::table`]), read-only, opened with
    /// [`ProcessorContext::store`]`(table.store().store())`.
    pub fn table<K: 'static, V: 'static>(
        mut self,
        table: &KTable<'_, K, V, TableHandle<K, V>>,
    ) -> Self {
        let handle = table.store.clone();
        self.names.push(handle.name().to_string());
        self.attach.push(Box::new(move |b, node| {
            b.attach_table(&handle, &[node]);
        }));
        self
    }
}

/// A [`StreamProcessor`] as a node of the topology.
struct Node<P, K2, V2> {
    inner: P,
    _types: Types<K2, V2>,
}

impl<K, V, K2, V2, P> NodeProcessor<K, V> for Node<P, K2, V2>
where
    P: StreamProcessor<K, V, K2, V2>,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        let mut ctx = ProcessorContext {
            ctx,
            in_timer: false,
            _types: std::marker::PhantomData,
        };
        self.inner.process(&mut ctx, record)
    }

    fn on_timer(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let mut ctx = ProcessorContext {
            ctx,
            in_timer: true,
            _types: std::marker::PhantomData,
        };
        self.inner.on_timer(&mut ctx, timer)
    }
}

impl<'b, K: Data, V: Data> KStream<'b, K, V> {
    /// Drops into the processor API (Kafka Streams' `process`): `processor` handles each
    /// record with the `stores` attached to its node, and what it forwards is the returned
    /// stream of `(K2, V2)`. For what the DSL has no operation for: timers, state read and
    /// written by hand, several outputs per record.
    ///
    /// The processor may change the key, so grouping or joining its output by key needs a
    /// repartition first ([`super::StreamsBuilder::build`] says so otherwise).
    ///
    /// ```
    /// use eosflow::dsl::{Consumed, ProcessorContext, Produced, Stores, StreamsBuilder};
    /// use eosflow::processor::{ProcessError, StoreHandle};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::TypedRecord;
    ///
    /// // Each payment's amount, forwarded only when it is a new maximum for its account.
    /// let best = StoreHandle::new("best", StringSerde, I64Serde);
    /// let store = best.clone();
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("payments", Consumed::with(StringSerde, I64Serde))
    ///     .process(
    ///         move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>, r: TypedRecord<String, i64>| {
    ///             let (Some(account), Some(amount)) = (&r.key, r.value) else { return Ok(()) };
    ///             let mut s = ctx.store(&store)?;
    ///             if s.get(account)?.is_some_and(|max| max >= amount) {
    ///                 return Ok(());
    ///             }
    ///             s.put(account, &amount)?;
    ///             ctx.forward(r);
    ///             Ok::<(), ProcessError>(())
    ///         },
    ///         Stores::new().store(&best),
    ///     )
    ///     .to("new-maxima", Produced::with(StringSerde, I64Serde));
    /// let mut driver = TopologyTestDriver::new(builder.build()?)?;
    /// for amount in [5, 3, 9] {
    ///     driver.pipe_input("payments", &StringSerde, &I64Serde, &"acc".to_string(), &amount)?;
    /// }
    /// let out = driver.read_output("new-maxima", &StringSerde, &I64Serde)?;
    /// assert_eq!(out, vec![(Some("acc".into()), Some(5)), (Some("acc".into()), Some(9))]);
    /// assert_eq!(driver.store_get(&best, &"acc".to_string())?, Some(9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn process<K2: Data, V2: Data>(
        &self,
        processor: impl StreamProcessor<K, V, K2, V2> + 'static,
        stores: Stores,
    ) -> KStream<'b, K2, V2> {
        let node = Node {
            inner: processor,
            _types: std::marker::PhantomData,
        };
        let add: AddFn = Box::new(move |b, w| {
            b.add_processor(w.name, node, &w.parents);
            b.forwards::<K2, V2>(w.name);
            for attach in stores.attach {
                attach(b, w.name);
            }
        });
        let id = self
            .builder
            .push("KSTREAM-PROCESSOR-", None, vec![self.id], add);
        KStream::new(self.builder, id, true)
    }
}
