//! How the runtime drives the Kafka-free per-record logic ([`super::engine`]): the
//! transactional producer is its output (each send's delivery report kept to blame a record
//! if the transaction fails), the system clock and random ids stamp the envelope.

use std::collections::BTreeSet;

use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::DeliveryFuture;
use rdkafka::Message;

use super::engine::{work_pending, Engine, Output, Stamps};
use super::runtime::{Rfc3339Clock, Runtime};
use super::{Processor, Record};
use crate::sink::{SinkError, TxnSink};

/// The producer as the engine's output.
pub(super) struct KafkaOut<'r> {
    sink: &'r TxnSink,
    deliveries: &'r mut Vec<(DeliveryFuture, usize)>,
    current: usize,
    known_topics: &'r mut BTreeSet<String>,
}

impl KafkaOut<'_> {
    /// Confirms `topic` exists before the first output to it: librdkafka would hold a record
    /// for an unknown topic in its queue past the commit (the batch then fails with no record
    /// to blame); asking the broker names the record at once.
    fn confirm_topic(&mut self, topic: &str) -> Result<(), SinkError> {
        let md = self.sink.metadata(topic).map_err(SinkError::Abortable)?;
        let known = md
            .topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
        if !known {
            return Err(SinkError::Unwritable {
                topic: topic.to_string(),
                source: rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
                ),
            });
        }
        self.known_topics.insert(topic.to_string());
        Ok(())
    }
}

impl Output for KafkaOut<'_> {
    fn emit<'h>(
        &mut self,
        topic: &str,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    ) -> Result<(), SinkError> {
        if !self.known_topics.contains(topic) {
            self.confirm_topic(topic)?;
        }
        let f = self
            .sink
            .send_at(topic, None, timestamp, key, value, headers)?;
        self.deliveries.push((f, self.current));
        Ok(())
    }

    fn forward(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(String, Vec<u8>)],
    ) -> Result<(), SinkError> {
        let headers = headers.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
        let f = self
            .sink
            .send_at(topic, Some(partition), timestamp, key, value, headers)?;
        self.deliveries.push((f, self.current));
        Ok(())
    }
}

impl Stamps for Rfc3339Clock {
    fn occurred_at(&mut self) -> &str {
        self.rfc3339_now()
    }
    fn new_id(&mut self) -> uuid::Uuid {
        uuid::Uuid::new_v4()
    }
}

/// The record's Kafka headers as owned pairs (a header without a value becomes empty).
pub(super) fn owned_headers(m: &OwnedMessage) -> Vec<(String, Vec<u8>)> {
    m.headers()
        .map(|hs| {
            hs.iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The polled message `m` as the record a processor sees, over its owned `headers`.
pub(super) fn record_of<'m>(m: &'m OwnedMessage, headers: &'m [(String, Vec<u8>)]) -> Record<'m> {
    Record {
        topic: m.topic(),
        partition: m.partition(),
        offset: m.offset(),
        timestamp: m.timestamp().to_millis(),
        key: m.key(),
        value: m.payload(),
        headers,
    }
}

impl<P: Processor> Runtime<P> {
    /// Runs `f` on the engine over this runtime's state, with the producer as its output.
    fn with_engine<T>(&mut self, f: impl FnOnce(&mut Engine<'_, P, KafkaOut<'_>>) -> T) -> T {
        let mut out = KafkaOut {
            sink: &self.sink,
            deliveries: &mut self.deliveries,
            current: self.current,
            known_topics: &mut self.known_topics,
        };
        let mut engine = Engine {
            opts: &self.opts,
            processor: &mut self.processor,
            tasks: &mut self.tasks,
            summary: &mut self.summary,
            isolated: &self.isolated,
            forced_dead_letter: &mut self.forced_dead_letter,
            produced: &mut self.produced,
            processed: &mut self.processed,
            stamps: &mut self.clock,
            out: &mut out,
        };
        f(&mut engine)
    }

    /// Processes one polled record inside the open transaction.
    pub(super) fn handle(&mut self, m: &OwnedMessage, now: i64) -> Result<(), SinkError> {
        let headers = owned_headers(m);
        let record = record_of(m, &headers);
        self.with_engine(|e| e.handle(&record, now))
    }

    /// Fires the timers due at the start of a batch (at most `budget`); how many fired.
    pub(super) fn fire_due(&mut self, budget: usize, now: i64) -> Result<usize, SinkError> {
        self.current = usize::MAX;
        self.with_engine(|e| e.fire_due(budget, now))
    }

    /// Fires the event-time timers the last record's partition reached (at most `budget`).
    pub(super) fn fire_event_time(
        &mut self,
        partition: i32,
        budget: usize,
        now: i64,
    ) -> Result<usize, SinkError> {
        self.with_engine(|e| e.fire_event_time(partition, budget, now))
    }

    /// Continues draining parked keys left draining by earlier batches (a chunk each).
    pub(super) fn drain_parked(&mut self, now: i64) -> Result<(), SinkError> {
        self.with_engine(|e| e.drain_parked(now))
    }

    /// Whether a batch must run even when no record arrived (parked keys still draining, or a
    /// timer due at `now`).
    pub(super) fn work_pending(&self, now: i64) -> bool {
        work_pending(&self.tasks, now)
    }
}
