//! The node API of a topology, one for the lower-level builder and the DSL alike:
//! a [`StreamProcessor`] handles `(K, V)` records and forwards `(K2, V2)` ones through its
//! [`ProcessorContext`] (Kafka Streams' `api.Processor<KIn, VIn, KOut, VOut>` and
//! `ProcessorContext<KOut, VOut>`).

use std::marker::PhantomData;

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use super::windows::{WindowStore, WindowStoreHandle};
use crate::processor::{KeyValueStore, StoreHandle, Timer, TimerKind};
use crate::record::{ProcessError, Record};

/// The output types of a node, carried without owning any.
type Types<K, V> = PhantomData<fn() -> (K, V)>;

/// A node written by hand, for [`super::TopologyBuilder::add_processor`] and the DSL's
/// [`crate::dsl::KStream::process`] (Kafka Streams' `api.Processor<KIn, VIn, KOut, VOut>`):
/// takes `(K, V)` records, forwards `(K2, V2)` ones through its [`ProcessorContext`] — typed,
/// so the builder checks every edge at `build()` and no record meets a type mismatch at run
/// time — and
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
/// VOut>`): its node's stores, timers and clock, with forwarding typed to the output stream's
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

impl<'n, 'a, K, V> ProcessorContext<'_, 'n, 'a, K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    /// Sends `record` to every child of this node (in the DSL: every operation fed by the
    /// output stream).
    pub fn forward(&mut self, record: TypedRecord<K, V>) {
        self.ctx.forward(record);
    }

    /// Sends `record` to the child named `child` only (Kafka Streams' `forward(record,
    /// childName)`); a name that is no child of this node fails the record.
    pub fn forward_to(&mut self, child: &str, record: TypedRecord<K, V>) {
        self.ctx.forward_to(child, record);
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

    /// Opens a key-value store given to the node ([`crate::dsl::Stores::store`] or [`super::TopologyBuilder::add_state_store`]) or a table
    /// ([`crate::dsl::Stores::table`], read-only).
    pub fn store<'s, SK, SV>(
        &'s mut self,
        handle: &'s StoreHandle<SK, SV>,
    ) -> Result<KeyValueStore<'s, 'a, SK, SV>, ProcessError> {
        self.ctx.store(handle)
    }

    /// Opens a windowed store given to the node ([`crate::dsl::Stores::window_store`]).
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

/// A [`StreamProcessor`] as a node of the topology.
pub(crate) struct ProcessorNode<P, K2, V2> {
    inner: P,
    _types: Types<K2, V2>,
}

impl<P, K2, V2> ProcessorNode<P, K2, V2> {
    /// `inner` as a node forwarding `(K2, V2)` records.
    pub(crate) fn new(inner: P) -> Self {
        Self {
            inner,
            _types: PhantomData,
        }
    }
}

impl<K, V, K2, V2, P> NodeProcessor<K, V> for ProcessorNode<P, K2, V2>
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
