//! The record collector (Kafka Streams' `RecordCollector`): the loop's transactional producer
//! and what the open transaction sent through it — outputs and forwards with their delivery
//! reports (a failed transaction names its culprit from these), changelog records, the
//! per-topic counts published when it commits — and the producer's recovery in place after a
//! fencing answer, a fatal error or an unknown commit outcome.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::producer::DeliveryFuture;
use rdkafka::TopicPartitionList;

use super::group_member::GroupMember;
use super::task_manager::TaskManager;
use super::{RuntimeError, RuntimeOptions};
use crate::kafka::{topics, KafkaClients};
use crate::processor::engine::{Output, Stamps};
use crate::sink::{SinkError, TxnSink};
use crate::state::dedup;
use crate::telemetry::{self, Health, WaitingOn};

/// The start of the ERROR line logged when the producer is recreated in place: the fault suite
/// counts these lines to show a fault was met and survived.
pub const IN_PLACE_RECOVERY_LOG: &str = "recreating the producer in place";

/// How many in-place producer recoveries after a fencing answer that no timed-out transaction
/// explains are tolerated within [`FENCE_WINDOW`] before the instance concludes another live
/// process shares its id.
const MAX_FENCE_RECOVERIES: usize = 10;
/// See [`MAX_FENCE_RECOVERIES`].
const FENCE_WINDOW: Duration = Duration::from_secs(600);

/// The current time as RFC 3339 text with milliseconds (`occurred_at`), formatted again only
/// when the millisecond changes: thousands of outputs a second share a handful of stamps.
#[derive(Debug, Default)]
pub(crate) struct Rfc3339Clock {
    ms: i64,
    text: String,
}

impl Rfc3339Clock {
    /// Now, as `2026-12-03T10:00:00.123Z`.
    pub(crate) fn rfc3339_now(&mut self) -> &str {
        let now = chrono::Utc::now();
        let ms = now.timestamp_millis();
        if ms != self.ms || self.text.is_empty() {
            self.ms = ms;
            self.text = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        }
        &self.text
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

/// What the engine writes through while it runs a record or a timer: the producer, the
/// envelope's stamps and the open batch's per-topic counts.
pub(super) struct EngineOutput<'c> {
    /// The producer as the engine's output.
    pub(super) out: KafkaOut<'c>,
    /// `occurred_at` text and ids of outputs.
    pub(super) stamps: &'c mut Rfc3339Clock,
    /// Outputs sent in the open batch, per topic.
    pub(super) produced: &'c mut BTreeMap<String, u64>,
    /// Records the handler processed in the open batch, per input topic.
    pub(super) processed: &'c mut BTreeMap<String, u64>,
}

/// The loop's producer and the open transaction's sends.
pub(super) struct RecordCollector {
    sink: TxnSink,
    /// Delivery reports of the open batch's outputs and forwards, with the index in the batch
    /// of the record that caused them: a failed transaction names its culprit from these.
    deliveries: Vec<(DeliveryFuture, usize)>,
    /// Index in the batch of the record being handled (`usize::MAX`: a timer).
    current: usize,
    /// Topics confirmed to exist: an output to a topic the broker does not know would otherwise
    /// wait in librdkafka's queue past the commit instead of failing on its record.
    known_topics: BTreeSet<String>,
    /// `occurred_at` text of outputs, formatted once per millisecond.
    clock: Rfc3339Clock,
    /// Outputs sent in the open batch, per topic: counted as produced once it commits.
    produced: BTreeMap<String, u64>,
    /// Records the handler processed in the open batch, per input topic (counted at commit).
    processed: BTreeMap<String, u64>,
    /// When the producer was last recreated in place after a fencing answer (recent ones).
    fence_recoveries: Vec<Instant>,
    transactional_id: String,
    /// For [`Self::diagnose`]: the cluster's clients and the topics' `min.insync.replicas`.
    clients: KafkaClients,
    min_insync: BTreeMap<String, usize>,
    /// No metadata diagnosis before this instant ([`RecordCollector::diagnose`]).
    next_diagnosis: Option<Instant>,
    session_timeout: Duration,
    transaction_timeout: Duration,
}

impl RecordCollector {
    /// Creates the producer of `opts`: transactional (fencing a previous incarnation of this
    /// instance) under exactly-once, plain under at-least-once.
    pub(super) fn new(clients: &KafkaClients, opts: &RuntimeOptions) -> Result<Self, SinkError> {
        let id = opts.transactional_id();
        let sink = if opts.exactly_once {
            TxnSink::new(clients, &id, opts.transaction_timeout)?
        } else {
            TxnSink::plain(clients, &id, opts.transaction_timeout)?
        };
        Ok(Self {
            sink,
            clients: clients.clone(),
            min_insync: BTreeMap::new(),
            next_diagnosis: None,
            deliveries: Vec::new(),
            current: 0,
            known_topics: BTreeSet::new(),
            clock: Rfc3339Clock::default(),
            produced: BTreeMap::new(),
            processed: BTreeMap::new(),
            fence_recoveries: Vec::new(),
            transactional_id: id,
            session_timeout: opts.session_timeout,
            transaction_timeout: opts.transaction_timeout,
        })
    }

    /// Whether the producer is transactional (exactly-once).
    pub(super) fn is_transactional(&self) -> bool {
        self.sink.is_transactional()
    }

    /// Begins the batch's transaction.
    pub(super) fn begin(&self) -> Result<(), SinkError> {
        self.sink.begin()
    }

    /// Aborts the open transaction.
    pub(super) fn abort(&self) -> Result<(), SinkError> {
        self.sink.abort()
    }

    /// Adds the input offsets to the open transaction (KIP-447: with the group's metadata).
    pub(super) fn send_offsets(
        &self,
        offsets: &TopicPartitionList,
        group: ConsumerGroupMetadata,
    ) -> Result<(), SinkError> {
        self.sink.send_offsets(offsets, group)
    }

    /// Commits the open transaction (at-least-once: waits for every send's acknowledgement).
    pub(super) fn commit(&self) -> Result<(), SinkError> {
        self.sink.commit()
    }

    /// The (partition, offset) a committed send landed at, if its report is in.
    pub(super) fn delivered(&self, f: DeliveryFuture) -> Option<(i32, i64)> {
        self.sink.delivered(f)
    }

    /// Sends a record to `topic[partition]` in the open transaction (watermarks, say).
    pub(super) fn send_to(
        &self,
        topic: &str,
        partition: i32,
        timestamp: Option<i64>,
        headers: &[(String, Vec<u8>)],
    ) -> Result<(), SinkError> {
        let h = headers.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
        self.sink
            .send_at(topic, Some(partition), timestamp, None, None, h)
            .map(|_| ())
    }

    /// Reports the producer's waits for the cluster to the loop's `waits` (its `/healthz`).
    pub(super) fn set_waits(&mut self, waits: telemetry::Waits) {
        self.sink.set_waits(waits);
    }

    /// Which partition the loop waits for, from fresh metadata of the topics it writes (its
    /// outputs and `also`: changelogs, repartition topics): one without a leader, else one
    /// whose in-sync replicas are below its topic's `min.insync.replicas` (the broker refuses
    /// `acks=all` writes). `None` when every partition is writable, the metadata did not come
    /// within 2 s, or the last look was under 10 s ago (3 s when it got no metadata).
    pub(super) fn diagnose<'a>(
        &mut self,
        also: impl Iterator<Item = &'a str>,
    ) -> Option<(WaitingOn, String)> {
        // At most one look per 10 s: a batch fails every few seconds while the cluster is away,
        // and each look can take its 2 s timeouts.
        let now = Instant::now();
        if self.next_diagnosis.is_some_and(|t| now < t) {
            return None;
        }
        self.next_diagnosis = Some(now + Duration::from_secs(10));
        let mut written = self.known_topics.clone();
        written.extend(also.map(str::to_string));
        let Ok(metadata) = self.sink.cluster_metadata(Duration::from_secs(2)) else {
            // The broker asked was away too (paused, say): look again after 3 s, not 10, or a
            // short outage passes with its cause never named.
            self.next_diagnosis = Some(Instant::now() + Duration::from_secs(3));
            return None;
        };
        // min.insync.replicas per topic, asked once (a topic's setting rarely changes).
        let unknown: Vec<String> = written
            .iter()
            .filter(|t| !self.min_insync.contains_key(*t))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            if let Ok(described) =
                topics::describe_blocking(&self.clients, &unknown, Duration::from_secs(2))
            {
                for (t, b) in described {
                    if let Some(n) = b.min_insync_replicas {
                        self.min_insync.insert(t, n);
                    }
                }
            }
        }
        let mut short = None;
        for t in metadata
            .topics()
            .iter()
            .filter(|t| written.contains(t.name()))
        {
            for p in t.partitions() {
                if p.leader() < 0 {
                    return Some((
                        WaitingOn::PartitionLeader,
                        format!(
                            "{}-{} has no leader (replicas {:?}, in sync {:?})",
                            t.name(),
                            p.id(),
                            p.replicas(),
                            p.isr()
                        ),
                    ));
                }
                // Unknown setting: the broker default of most production clusters, 2.
                let min = self
                    .min_insync
                    .get(t.name())
                    .copied()
                    .unwrap_or(2)
                    .min(p.replicas().len());
                if short.is_none() && p.isr().len() < min {
                    short = Some((
                        WaitingOn::InSyncReplicas,
                        format!(
                            "{}-{}: in sync {:?} of replicas {:?}, below min.insync.replicas={min}",
                            t.name(),
                            p.id(),
                            p.isr(),
                            p.replicas()
                        ),
                    ));
                }
            }
        }
        short
    }

    /// Index `i` of the batch is the record being handled: its sends are blamed on it.
    pub(super) fn set_current(&mut self, i: usize) {
        self.current = i;
    }

    /// The output the engine writes through.
    pub(super) fn engine_output(&mut self) -> EngineOutput<'_> {
        EngineOutput {
            out: KafkaOut {
                sink: &self.sink,
                deliveries: &mut self.deliveries,
                current: self.current,
                known_topics: &mut self.known_topics,
            },
            stamps: &mut self.clock,
            produced: &mut self.produced,
            processed: &mut self.processed,
        }
    }

    /// The delivery reports of the batch just ended.
    pub(super) fn take_deliveries(&mut self) -> Vec<(DeliveryFuture, usize)> {
        std::mem::take(&mut self.deliveries)
    }

    /// After a commit: the batch's per-topic counts become the `produced` and `processed`
    /// metrics.
    pub(super) fn publish_counts(&mut self) {
        for (topic, n) in std::mem::take(&mut self.produced) {
            telemetry::produced(&topic, n);
        }
        for (topic, n) in std::mem::take(&mut self.processed) {
            telemetry::processed(&topic, n);
        }
    }

    /// After an abort: the batch's counts are dropped (its records are read again).
    pub(super) fn forget_counts(&mut self) {
        self.produced.clear();
        self.processed.clear();
    }

    /// Seals every task's dedup batch and sends the open batch's state changes to the
    /// changelogs (tables have none: their topic is one). Returns the last send per (store,
    /// partition) — store 0 the default one, `i + 1` the named store `i` — whose offsets become
    /// the checkpoints once the transaction commits.
    pub(super) fn send_changelogs(
        &self,
        tasks: &mut TaskManager,
        now: i64,
    ) -> Result<HashMap<(usize, i32), DeliveryFuture>, SinkError> {
        let changelog = tasks.changelog().to_string();
        let named: Vec<String> = tasks.store_changelogs().map(str::to_string).collect();
        let mut last = HashMap::new();
        for (p, task) in tasks.tasks_mut() {
            dedup::seal(&mut task.overlay, now);
            for (col, key, value) in task.overlay.iter() {
                let Some(k) = dedup::changelog_key(col, key, value) else {
                    continue;
                };
                let f = self.sink.send(&changelog, Some(*p), Some(&k), value, &[])?;
                last.insert((0, *p), f);
            }
            for (i, n) in task.named.iter().enumerate().take(named.len()) {
                // Its state, and the expiry index of a store with a TTL (its timer columns).
                for (col, key, value) in n.overlay.iter() {
                    let k = col.changelog_key(key);
                    let f = self.sink.send(&named[i], Some(*p), Some(&k), value, &[])?;
                    last.insert((i + 1, *p), f);
                }
            }
        }
        Ok(last)
    }

    /// Replaces the producer after a fencing answer, a fatal error or an unknown commit
    /// outcome, under the same `transactional.id` — unless a live process with this instance's
    /// id has taken over, which the group tells: its consumer is then fenced too
    /// (`FENCED_INSTANCE_ID` under static membership), and recreating the producer would fence
    /// the successor. An epoch the coordinator bumped itself (it aborts a transaction that
    /// outlived `transaction.timeout.ms`, as after a broker pause) is no successor: the
    /// instance recovers in place. Input offsets stay where the group's committed offsets say,
    /// so nothing that committed is processed again.
    pub(super) fn recover_producer(
        &mut self,
        error: &SinkError,
        cause: &'static str,
        txn_age: Duration,
        member: &GroupMember,
        health: &Health,
    ) -> Result<(), RuntimeError> {
        if error.is_fenced() {
            // A successor's consumer replaces ours within two heartbeats of joining.
            let grace = self.session_timeout * 2 / 5 + Duration::from_millis(500);
            let deadline = Instant::now() + grace;
            loop {
                if let Some((code, reason)) = member.fatal_error() {
                    tracing::error!(?code, %reason, "another process with this instance id took over: stopping");
                    return Err(RuntimeError::Superseded {
                        id: self.transactional_id.clone(),
                        reason: format!("the group fenced this consumer ({code:?}: {reason}) and the producer was fenced ({error})"),
                    });
                }
                if Instant::now() >= deadline {
                    break;
                }
                health.beat();
                std::thread::sleep(Duration::from_millis(100));
            }
            // A transaction open longer than the timeout explains the fencing: the coordinator
            // aborted it and bumped the epoch. Only the unexplained ones hint at a second
            // process with this id.
            let now = Instant::now();
            self.fence_recoveries
                .retain(|t| now.duration_since(*t) < FENCE_WINDOW);
            if txn_age < self.transaction_timeout {
                self.fence_recoveries.push(now);
            }
            if self.fence_recoveries.len() > MAX_FENCE_RECOVERIES {
                tracing::error!(
                    recoveries = self.fence_recoveries.len(),
                    window_s = FENCE_WINDOW.as_secs(),
                    "fenced again and again: another live process seems to use transactional.id {}; stopping",
                    self.transactional_id
                );
                return Err(RuntimeError::Superseded {
                    id: self.transactional_id.clone(),
                    reason: format!(
                        "fenced {} times within {} s although the group never fenced this consumer: is another process running with this instance id? (last: {error})",
                        self.fence_recoveries.len(),
                        FENCE_WINDOW.as_secs()
                    ),
                });
            }
        }
        tracing::error!(error = %error, cause, "{IN_PLACE_RECOVERY_LOG} (same transactional.id); the group's committed offsets decide what is processed again");
        telemetry::producer_recovered(cause);
        self.sink.reset()?;
        Ok(())
    }
}
