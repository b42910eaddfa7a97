//! What a topology node sees: typed records in, a context to read stores and forward records
//! to its children (and through them to sinks).

use std::any::Any;

use crate::processor::{Context, KeyValueStore, StoreHandle, Timer, TimerKind};
use crate::record::{ProcessError, Record};

/// A record between the nodes of a topology: typed key and value (`None` is Kafka's null),
/// the input record's timestamp, and headers the nodes set (the runtime adds the envelope).
#[derive(Debug, Clone, PartialEq)]
pub struct TypedRecord<K, V> {
    /// The key; `None` for a record without one.
    pub key: Option<K>,
    /// The value; `None` is a tombstone.
    pub value: Option<V>,
    /// Timestamp of the input record (ms since the epoch).
    pub timestamp: Option<i64>,
    /// Headers to write with the output (the envelope headers are added by the runtime).
    pub headers: Vec<(String, Vec<u8>)>,
}

impl<K, V> TypedRecord<K, V> {
    /// A record of `key` and `value` with no timestamp or headers.
    pub fn new(key: Option<K>, value: Option<V>) -> Self {
        Self {
            key,
            value,
            timestamp: None,
            headers: Vec::new(),
        }
    }
}

/// A node of a topology (Kafka Streams' `Processor<KIn, VIn, KOut, VOut>`): handles each
/// record its parents forward, reads and writes the stores attached to it, and forwards
/// records to its children. An error (or a panic) discards everything the input record did
/// and routes it up the retry ladder or to the dead-letter topic.
pub(crate) trait NodeProcessor<K, V>: Send {
    /// Handles one record.
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError>;

    /// Called when a timer this node scheduled ([`NodeContext::schedule_event_time`] …) is
    /// due; what it writes, forwards and schedules commits with the batch that fired it. An
    /// error (or a panic) discards that and dead-letters the timer. The default does nothing.
    fn on_timer(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let _ = (ctx, timer);
        Ok(())
    }
}

impl<K, V, F> NodeProcessor<K, V> for F
where
    F: FnMut(&mut NodeContext<'_, '_>, TypedRecord<K, V>) -> Result<(), ProcessError> + Send,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        self(ctx, record)
    }
}

/// A typed record with its types erased, as it travels between nodes.
pub(crate) trait AnyRecord: Send {
    fn clone_box(&self) -> Box<dyn AnyRecord>;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    fn type_names(&self) -> (&'static str, &'static str);
}

impl<K, V> AnyRecord for TypedRecord<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn clone_box(&self) -> Box<dyn AnyRecord> {
        Box::new(self.clone())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn type_names(&self) -> (&'static str, &'static str) {
        (std::any::type_name::<K>(), std::any::type_name::<V>())
    }
}

/// Takes a record back to its types; a parent that forwarded other types fails the record.
pub(crate) fn downcast<K: 'static, V: 'static>(
    node: &str,
    record: Box<dyn AnyRecord>,
) -> Result<TypedRecord<K, V>, ProcessError> {
    let (k, v) = record.type_names();
    record
        .into_any()
        .downcast::<TypedRecord<K, V>>()
        .map(|r| *r)
        .map_err(|_| {
            ProcessError::permanent(format!(
                "node {node} takes ({}, {}) but was forwarded ({k}, {v})",
                std::any::type_name::<K>(),
                std::any::type_name::<V>()
            ))
        })
}

/// A record a node forwarded: to every child, or to the one named.
pub(crate) struct Forward {
    pub(crate) child: Option<String>,
    /// A child left out of a forward to every child (a windowed aggregate's late-record sink).
    pub(crate) except: Option<String>,
    pub(crate) record: Box<dyn AnyRecord>,
}

/// A node's view of one call (Kafka Streams' `ProcessorContext`): the input record's
/// coordinates, the stores attached to the node, forwarding, and the clock.
pub(crate) struct NodeContext<'n, 'a> {
    pub(crate) inner: &'n mut Context<'a>,
    pub(crate) input: &'n Record<'n>,
    pub(crate) node: &'n str,
    pub(crate) stores: &'n [String],
    pub(crate) forwards: Vec<Forward>,
}

impl<'n, 'a> NodeContext<'n, 'a> {
    /// The input record being processed (topic, partition, offset, headers, raw bytes).
    pub(crate) fn input(&self) -> &Record<'n> {
        self.input
    }

    /// This node's name.
    pub(crate) fn node_name(&self) -> &str {
        self.node
    }

    /// Opens a store attached to this node (`Topology::add_state_store`).
    pub(crate) fn store<'c, K, V>(
        &'c mut self,
        handle: &'c StoreHandle<K, V>,
    ) -> Result<KeyValueStore<'c, 'a, K, V>, ProcessError> {
        if !self.stores.iter().any(|s| s == handle.name()) {
            return Err(ProcessError::permanent(format!(
                "store {} is not attached to node {}",
                handle.name(),
                self.node
            )));
        }
        self.inner.store(handle)
    }

    /// Sends `record` to every child of this node.
    pub(crate) fn forward<K, V>(&mut self, record: TypedRecord<K, V>)
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        self.forwards.push(Forward {
            child: None,
            except: None,
            record: Box::new(record),
        });
    }

    /// Sends `record` to the child named `child` only.
    pub(crate) fn forward_to<K, V>(&mut self, child: &str, record: TypedRecord<K, V>)
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        self.forwards.push(Forward {
            child: Some(child.to_string()),
            except: None,
            record: Box::new(record),
        });
    }

    /// Sends `record` to every child of this node but `except`.
    pub(crate) fn forward_except<K, V>(&mut self, except: Option<&str>, record: TypedRecord<K, V>)
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        self.forwards.push(Forward {
            child: None,
            except: except.map(str::to_string),
            record: Box::new(record),
        });
    }

    /// Dead-letters the input record as too late (class `late-record`, counted in
    /// `eosflow_late_records_total{node}`): `reason` in `eosflow.dlt.reason`, then `extra`
    /// headers, the stream time and this node's name as `eosflow.dlt.late.*` headers. The
    /// windowed aggregate and the stream-stream join share it.
    pub(crate) fn dead_letter_late(
        &mut self,
        reason: String,
        extra: &[(&str, String)],
        stream: i64,
    ) {
        crate::telemetry::late_record(self.node);
        let headers = extra
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .chain([
                ("late.stream.time", stream.to_string()),
                ("late.node", self.node.to_string()),
            ])
            .map(|(k, v)| (format!("{}{k}", crate::retry::dlt::PREFIX), v.into_bytes()))
            .collect();
        self.inner
            .request_dead_letter(crate::processor::DeadLetterRequest {
                class: crate::retry::dlt::DltClass::LateRecord,
                reason,
                headers,
            });
    }

    /// In [`NodeProcessor::on_timer`]: gives up on the timer after cleaning up what it owned
    /// (the call's writes are kept): the timer is dead-lettered as `permanent` with `reason`
    /// and `eosflow.dlt.timer.*` headers, marked not redrivable.
    pub(crate) fn give_up_timer(&mut self, reason: String) {
        self.inner
            .request_dead_letter(crate::processor::DeadLetterRequest {
                class: crate::retry::dlt::DltClass::Permanent,
                reason,
                headers: Vec::new(),
            });
    }

    /// The batch's wall-clock time (ms): the runtime's clock, or the test driver's.
    pub(crate) fn wall_clock_ms(&self) -> i64 {
        self.inner.wall_clock_ms()
    }

    /// The event time of the input record (its source's timestamp extractor), or in
    /// [`NodeProcessor::on_timer`] the timer's due time. Outputs carry it unless a forwarded
    /// record sets its own `timestamp`.
    pub(crate) fn event_time_ms(&self) -> Option<i64> {
        self.inner.event_time_ms()
    }

    /// The partition's stream time: the largest event time it has seen (this record's
    /// included).
    pub(crate) fn stream_time_ms(&self) -> Option<i64> {
        self.inner.stream_time_ms()
    }

    /// Schedules this node's event-time timer of `key` at `at_ms` (replacing its pending one):
    /// [`NodeProcessor::on_timer`] is called once stream time reaches it.
    pub(crate) fn schedule_event_time(
        &mut self,
        key: &[u8],
        at_ms: i64,
    ) -> Result<(), ProcessError> {
        self.schedule(Timer::event_time(key, at_ms))
    }

    /// Schedules this node's wall-clock timer of `key` at `at_ms` (replacing its pending one).
    pub(crate) fn schedule_wall_clock(
        &mut self,
        key: &[u8],
        at_ms: i64,
    ) -> Result<(), ProcessError> {
        self.schedule(Timer::wall_clock(key, at_ms))
    }

    /// Schedules `timer` (with its payload) for this node: its name becomes the node's.
    pub(crate) fn schedule(&mut self, timer: Timer) -> Result<(), ProcessError> {
        self.inner.schedule(timer.named(self.node))
    }

    /// Cancels this node's timer of `kind` for `key`; whether one was pending.
    pub(crate) fn cancel(&mut self, kind: TimerKind, key: &[u8]) -> Result<bool, ProcessError> {
        self.inner.cancel(kind, self.node, key)
    }

    /// When this node's timer of `kind` for `key` is due, if one is pending.
    pub(crate) fn timer_due(
        &self,
        kind: TimerKind,
        key: &[u8],
    ) -> Result<Option<i64>, ProcessError> {
        self.inner.timer_due(kind, self.node, key)
    }

    /// The message id dedup uses for the input record, if any.
    pub(crate) fn message_id(&self) -> Option<&[u8]> {
        self.inner.message_id()
    }
}
