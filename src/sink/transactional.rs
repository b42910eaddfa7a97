//! One transactional producer per instance (`transactional.id = <app>-<instance>`), with
//! librdkafka's transaction errors sorted into what the runtime must do: retry the call,
//! abort the batch, or stop because another instance took over (fenced).
//!
//! A commit whose outcome is unknown (the coordinator unreachable past the timeout, a fencing
//! answer to a retried `EndTxn`) is never treated as an abort: [`TxnSink::commit`] calls
//! `commit_transaction` again while librdkafka says the error is retriable, and otherwise
//! returns [`SinkError::CommitUnknown`], after which the runtime learns from the group's stable
//! committed offsets whether the batch landed. A record that can never be written (over the
//! size limit, an unknown topic) is reported as [`SinkError::Unwritable`], so the runtime can
//! dead-letter that one record instead of aborting the same batch forever.
//!
//! For `processor.guarantee = "at_least_once"` the same sink runs without transactions (an
//! idempotent producer; begin/abort do nothing and commit waits for every send to be
//! acknowledged), so both guarantees share one loop and differ only in what they pay for.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::FutureExt;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::TopicPartitionList;

use super::bounded::{CallThread, Elapsed};
use crate::kafka::{ClientRole, KafkaClients};
use crate::telemetry::{WaitingOn, Waits};

/// What went wrong with a transaction, by what the caller must do about it.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Another producer with our `transactional.id` (or a newer epoch) exists: stop, do not retry.
    #[error("fenced: transactional.id {id} is now used by another instance ({source})")]
    Fenced {
        /// Our transactional.id.
        id: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// The batch cannot commit: abort it and process it again.
    #[error("transaction must be aborted: {0}")]
    Abortable(KafkaError),
    /// The consumer has no group metadata (not in a group right now): abort and poll again.
    #[error("the consumer is not in a group generation; the batch cannot commit its offsets")]
    NoGroupMetadata,
    /// The producer is unusable (e.g. a timed-out transaction): recreate it.
    #[error("producer must be recreated: {0}")]
    Fatal(KafkaError),
    /// This one record can never be written as it is (over the size limit, a topic that does
    /// not exist or may not be written): retrying the batch meets the same error.
    #[error("record to {topic} cannot be written: {source}")]
    Unwritable {
        /// Destination topic.
        topic: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// `commit_transaction` failed in a way that does not tell whether the transaction
    /// committed: the caller must learn it (stable committed offsets) before doing anything else.
    #[error("transaction commit outcome unknown: {0}")]
    CommitUnknown(KafkaError),
    /// A state store read inside the batch failed (dedup or parked lookup): the batch cannot
    /// be trusted, so it is aborted and processed again, never read as "not seen".
    #[error("state read failed; the batch must be aborted: {0}")]
    StateRead(#[from] crate::state::StateError),
    /// A blocking transactional call missed its deadline (librdkafka ignores some of its own
    /// timeouts while a coordinator is away): the producer is wedged and must be recreated.
    /// When the stuck call was the commit, its outcome is unknown as with
    /// [`SinkError::CommitUnknown`].
    #[error("producer stuck, it must be recreated: {0}")]
    Stuck(Elapsed),
}

impl SinkError {
    /// Whether this error says another producer took our `transactional.id` (or a newer epoch
    /// exists): either a true successor or the coordinator aborting a timed-out transaction.
    pub fn is_fenced(&self) -> bool {
        matches!(self, SinkError::Fenced { .. })
    }

    /// Whether a commit may or may not have happened: the caller must learn which before it
    /// keeps or redoes the batch (an unknown answer, or a commit call that got stuck).
    pub fn commit_outcome_unknown(&self) -> bool {
        match self {
            SinkError::CommitUnknown(_) => true,
            SinkError::Stuck(stuck) => stuck.call == COMMIT_CALL,
            _ => false,
        }
    }

    /// What this failure says the loop waits for the cluster to give back (a leader, in-sync
    /// replicas, a coordinator), with what to print; `None` for a failure of the record's or the
    /// producer's own (see [`crate::telemetry::Waits`]).
    ///
    /// ```
    /// use eosflow::internals::sink::SinkError;
    /// use eosflow::internals::telemetry::WaitingOn;
    /// let rebalancing = SinkError::NoGroupMetadata.waiting_on();
    /// assert_eq!(rebalancing.map(|(on, _)| on), Some(WaitingOn::GroupCoordinator));
    /// ```
    pub fn waiting_on(&self) -> Option<(WaitingOn, String)> {
        if let Some(e) = self.kafka_error() {
            let text = e.to_string();
            let on = if text.contains("TxnCoordinator") {
                // librdkafka names the broker a failed request went to.
                Some(WaitingOn::TxnCoordinator)
            } else {
                e.rdkafka_error_code().and_then(WaitingOn::of_code)
            };
            return on.map(|on| (on, text));
        }
        match self {
            SinkError::NoGroupMetadata => Some((WaitingOn::GroupCoordinator, self.to_string())),
            SinkError::Stuck(stuck) => {
                Some((WaitingOn::of_stuck_call(stuck.call), stuck.to_string()))
            }
            _ => None,
        }
    }

    /// librdkafka's error behind an abortable, fatal or unknown-outcome failure.
    pub fn kafka_error(&self) -> Option<&KafkaError> {
        match self {
            SinkError::Abortable(e) | SinkError::Fatal(e) | SinkError::CommitUnknown(e) => Some(e),
            _ => None,
        }
    }
}

/// Errors that belong to one record, not to the transaction: the same record fails the same
/// way every time it is sent, however often the batch is retried.
pub fn is_record_error(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::MessageBatchTooLarge
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownPartition
            | RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::TopicAuthorizationFailed
    )
}

/// How long `init_transactions` is retried while the coordinator is away: a broker restart
/// takes tens of seconds, and a processor that starts (or recreates its producer) during one
/// must wait for it rather than exit. (Three transaction timeouts — 30 s by default — was too
/// short: found by the broker-restart fault scenario.)
pub const INIT_RETRY_FOR: Duration = Duration::from_secs(120);

/// How long a retriable `commit_transaction` (or `send_offsets_to_transaction`) is called again
/// before the outcome is declared unknown: a broker pause or restart takes tens of seconds, and
/// librdkafka keeps the commit as the current operation until it answers.
pub const COMMIT_RETRY_FOR: Duration = Duration::from_secs(120);

/// librdkafka's name for the commit, as a stuck call reports it.
const COMMIT_CALL: &str = "commit_transaction";

/// What a blocking call may take beyond the timeout it is given before it counts as stuck.
const CALL_GRACE: Duration = Duration::from_secs(5);

/// How long a blocking call (or the wait for acknowledgements before a commit) runs before
/// the loop says, while still waiting, what it waits on: well above a healthy call's
/// milliseconds, well below `message.timeout.ms` and the transaction timeout.
const SLOW_CALL: Duration = Duration::from_secs(3);

/// The transactional producer and its settings (to recreate it).
pub struct TxnSink {
    producer: FutureProducer,
    /// Runs the producer's blocking transactional calls with a deadline.
    calls: CallThread,
    /// Set once a call on this producer missed its deadline: every later call fails at once.
    wedged: OnceLock<Elapsed>,
    clients: KafkaClients,
    id: String,
    timeout: Duration,
    /// False: at-least-once, no transactions.
    transactional: bool,
    /// What the owning loop waits for, started by the retry loops here and ended by the next
    /// commit that lands (see [`crate::telemetry::Waits`]).
    waits: Waits,
}

impl std::fmt::Debug for TxnSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnSink").field("id", &self.id).finish()
    }
}

fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
    )
}

impl TxnSink {
    /// Creates the producer and calls `init_transactions`, fencing any previous instance with the
    /// same id and aborting its open transaction.
    pub fn new(clients: &KafkaClients, id: &str, timeout: Duration) -> Result<Self, SinkError> {
        Self::transactional_with(clients, id, timeout, Waits::default())
    }

    fn transactional_with(
        clients: &KafkaClients,
        id: &str,
        timeout: Duration,
        waits: Waits,
    ) -> Result<Self, SinkError> {
        let (producer, calls) = Self::create(clients, id, timeout, &waits)?;
        Ok(Self {
            producer,
            calls,
            wedged: OnceLock::new(),
            clients: clients.clone(),
            id: id.to_string(),
            timeout,
            transactional: true,
            waits,
        })
    }

    /// Reports this sink's waits for the cluster (a coordinator away, a partition without a
    /// leader) to `waits`, the owning loop's (its `/healthz` and `eosflow_waiting`).
    pub fn set_waits(&mut self, waits: Waits) {
        self.waits = waits;
    }

    /// An at-least-once sink: idempotent producer, no transaction; `id` only names it in errors.
    pub fn plain(clients: &KafkaClients, id: &str, timeout: Duration) -> Result<Self, SinkError> {
        let producer: FutureProducer = clients
            .config(ClientRole::Idempotent)
            .create()
            .map_err(SinkError::Fatal)?;
        Ok(Self {
            producer,
            calls: CallThread::start("kafka-calls"),
            wedged: OnceLock::new(),
            clients: clients.clone(),
            id: id.to_string(),
            timeout,
            transactional: false,
            waits: Waits::default(),
        })
    }

    /// Whether batches commit as Kafka transactions (exactly-once).
    pub fn is_transactional(&self) -> bool {
        self.transactional
    }

    /// A producer with its transactions initialised, and the worker its blocking calls run on.
    /// A producer whose `init_transactions` is stuck is given up on and another one created.
    fn create(
        clients: &KafkaClients,
        id: &str,
        timeout: Duration,
        waits: &Waits,
    ) -> Result<(FutureProducer, CallThread), SinkError> {
        let deadline = Instant::now() + (timeout * 3).max(INIT_RETRY_FOR);
        'producer: loop {
            let producer: FutureProducer = clients
                .config(ClientRole::Transactional { id, timeout })
                .create()
                .map_err(SinkError::Fatal)?;
            let calls = CallThread::start("kafka-calls");
            loop {
                let p = producer.clone();
                let called = calls.run("init_transactions", timeout + CALL_GRACE, move || {
                    p.init_transactions(timeout)
                });
                match called {
                    Ok(Ok(())) => {
                        waits.clear_if(WaitingOn::TxnCoordinator);
                        return Ok((producer, calls));
                    }
                    Ok(Err(e)) => match classify(id, e) {
                        // The coordinator may still be loading or the previous epoch aborting.
                        SinkError::Abortable(e) if Instant::now() < deadline => {
                            tracing::warn!(error = %e, "init_transactions failed; retrying");
                            waits.start(
                                WaitingOn::TxnCoordinator,
                                format!("init_transactions of {id}: {e}"),
                            );
                            std::thread::sleep(Duration::from_millis(500));
                        }
                        other => return Err(other),
                    },
                    Err(stuck) => {
                        waits.start(
                            WaitingOn::TxnCoordinator,
                            format!("init_transactions of {id}: {stuck}"),
                        );
                        calls.finish(move || drop(producer));
                        if Instant::now() >= deadline {
                            return Err(SinkError::Stuck(stuck));
                        }
                        continue 'producer;
                    }
                }
            }
        }
    }

    /// Replaces the producer after a fatal error (same id, new epoch). The old producer is
    /// dropped on its worker thread, after any call of it still running (a stuck one) returns.
    pub fn reset(&mut self) -> Result<(), SinkError> {
        let new = if self.transactional {
            Self::transactional_with(&self.clients, &self.id, self.timeout, self.waits.clone())?
        } else {
            let mut plain = Self::plain(&self.clients, &self.id, self.timeout)?;
            plain.waits = self.waits.clone();
            plain
        };
        let old = std::mem::replace(self, new);
        let TxnSink {
            producer, calls, ..
        } = old;
        calls.finish(move || drop(producer));
        Ok(())
    }

    /// Runs a blocking call of the producer on its worker, waiting at most `limit`; a call that
    /// misses it wedges this sink (see [`SinkError::Stuck`]).
    fn bounded<T: Send + 'static>(
        &self,
        call: &'static str,
        limit: Duration,
        job: impl FnOnce(FutureProducer) -> T + Send + 'static,
    ) -> Result<T, SinkError> {
        if let Some(stuck) = self.wedged.get() {
            return Err(SinkError::Stuck(*stuck));
        }
        let producer = self.producer.clone();
        let note = || self.note_slow(call, SLOW_CALL);
        self.calls
            .run_noting_slow(call, limit, Some((SLOW_CALL, &note)), move || job(producer))
            .map_err(|stuck| {
                let _ = self.wedged.set(stuck);
                self.waits
                    .start(WaitingOn::of_stuck_call(call), stuck.to_string());
                SinkError::Stuck(stuck)
            })
    }

    /// A call (or the wait for acknowledgements before a commit) has blocked for `waited`:
    /// says what the loop waits on while it still blocks, so `/healthz` names it during an
    /// outage instead of only after the call fails (a send can wait out its whole
    /// `message.timeout.ms` on a partition without a leader). The next commit that lands ends
    /// it.
    fn note_slow(&self, call: &'static str, waited: Duration) {
        let secs = waited.as_secs();
        self.note_waiting(
            |unacked| format!("{call}: {unacked} records not acknowledged after {secs} s (a partition without a leader or in-sync replicas)"),
            || (WaitingOn::of_stuck_call(call), format!("{call}: no answer after {secs} s")),
        );
    }

    /// Opens the wait a blocked or failed commit step means: records not acknowledged mean
    /// their partitions (no leader; unless too few in-sync replicas already explain it), with
    /// `unacked(n)` as the detail; none, the coordinator and detail `coordinator()` names.
    fn note_waiting(
        &self,
        unacked: impl FnOnce(i32) -> String,
        coordinator: impl FnOnce() -> (WaitingOn, String),
    ) {
        let n = self.producer.in_flight_count();
        if n == 0 {
            let (on, detail) = coordinator();
            self.waits.start(on, detail);
        } else if !self.waits.is_waiting_on(WaitingOn::InSyncReplicas) {
            self.waits.start(WaitingOn::PartitionLeader, unacked(n));
        }
    }

    /// The broker's metadata of one topic (does it exist, how many partitions), asked through
    /// the producer's own connection. Does not create the topic.
    pub fn metadata(&self, topic: &str) -> Result<rdkafka::metadata::Metadata, KafkaError> {
        self.producer
            .client()
            .fetch_metadata(Some(topic), self.timeout)
    }

    /// The broker's metadata of every topic, waiting at most `timeout` (to tell which
    /// partition lacks a leader or in-sync replicas while commits cannot land).
    pub fn cluster_metadata(
        &self,
        timeout: Duration,
    ) -> Result<rdkafka::metadata::Metadata, KafkaError> {
        self.producer.client().fetch_metadata(None, timeout)
    }

    /// The `transactional.id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Opens a transaction.
    pub fn begin(&self) -> Result<(), SinkError> {
        if !self.transactional {
            return Ok(());
        }
        self.producer
            .begin_transaction()
            .map_err(|e| classify(&self.id, e))
    }

    /// Queues a record in the open transaction without waiting for it (sends are pipelined;
    /// the commit is the only sync point). Waits while librdkafka's queue is full.
    pub fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(String, Vec<u8>)],
    ) -> Result<DeliveryFuture, SinkError> {
        self.send_parts(
            topic,
            partition,
            key,
            value,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        )
    }

    /// As [`TxnSink::send`], with headers from borrowed parts (the processor's outputs: the
    /// handler's own headers and the envelope, without building owned pairs per output).
    pub fn send_parts<'h>(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    ) -> Result<DeliveryFuture, SinkError> {
        self.send_at(topic, partition, None, key, value, headers)
    }

    /// As [`TxnSink::send_parts`], with the record's Kafka timestamp (ms since the epoch) set
    /// instead of left to the producer's clock: outputs carry the event time of what caused
    /// them.
    pub fn send_at<'h>(
        &self,
        topic: &str,
        partition: Option<i32>,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    ) -> Result<DeliveryFuture, SinkError> {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic);
        let mut headers = headers.peekable();
        // No header list at all for a record without headers (librdkafka allocates one).
        if headers.peek().is_some() {
            let mut h = OwnedHeaders::new_with_capacity(headers.size_hint().0.max(8));
            for (k, v) in headers {
                h = h.insert(Header {
                    key: k,
                    value: Some(v),
                });
            }
            record = record.headers(h);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        if let Some(t) = timestamp {
            record = record.timestamp(t);
        }
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(v) = value {
            record = record.payload(v);
        }
        // The clock is read only once the queue is full: not once per output.
        let mut deadline = None;
        loop {
            match self.producer.send_result(record) {
                Ok(f) => return Ok(f),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                    if Instant::now()
                        < *deadline.get_or_insert_with(|| Instant::now() + self.timeout) =>
                {
                    record = r;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => {
                    return Err(match e.rdkafka_error_code() {
                        Some(code) if is_record_error(code) => SinkError::Unwritable {
                            topic: topic.to_string(),
                            source: e,
                        },
                        _ => classify(&self.id, e),
                    })
                }
            }
        }
    }

    /// Adds the consumer's next offsets to the transaction, bound to its group generation
    /// (KIP-447: a zombie from an older generation is rejected here).
    /// A retriable failure (the coordinator away) is retried for [`COMMIT_RETRY_FOR`].
    /// The call runs bounded (it ignores its own timeout while the group coordinator is away):
    /// stuck, it fails with [`SinkError::Stuck`].
    pub fn send_offsets(
        &self,
        offsets: &TopicPartitionList,
        group: ConsumerGroupMetadata,
    ) -> Result<(), SinkError> {
        let deadline = Instant::now() + COMMIT_RETRY_FOR.max(self.timeout);
        let group = std::sync::Arc::new(group);
        loop {
            let (offsets, group, timeout) = (offsets.clone(), group.clone(), self.timeout);
            let sent = self.bounded(
                "send_offsets_to_transaction",
                timeout + CALL_GRACE,
                move |p| p.send_offsets_to_transaction(&offsets, &group, timeout),
            )?;
            match sent {
                Ok(()) => return Ok(()),
                Err(KafkaError::Transaction(e))
                    if e.is_retriable() && Instant::now() < deadline =>
                {
                    tracing::warn!(error = %e, "sending offsets to the transaction failed with a retriable error; retrying");
                    let on = WaitingOn::of_coordinator_call(
                        e.code(),
                        &e.to_string(),
                        WaitingOn::GroupCoordinator,
                    );
                    self.waits
                        .start(on, format!("send_offsets_to_transaction: {e}"));
                }
                Err(e) => return Err(classify(&self.id, e)),
            }
        }
    }

    /// Commits. A retriable failure is retried for [`COMMIT_RETRY_FOR`] (librdkafka keeps the
    /// commit as the current operation, so calling again resumes it rather than starting a new
    /// one). An abortable error means the transaction did not commit; any other failure (still
    /// retriable at the deadline, fenced, fatal) leaves the outcome unknown:
    /// [`SinkError::CommitUnknown`].
    pub fn commit(&self) -> Result<(), SinkError> {
        let started = Instant::now();
        let deadline = started + self.timeout;
        // rust-rdkafka's commit_transaction flushes first, and that flush polls in 100 ms steps
        // while anything is in flight (the delivery events belong to FutureProducer's thread):
        // a 100 ms floor on every transaction. Waiting for the out-queue to drain here, in
        // fine steps, makes that flush return at once.
        let mut noted = false;
        while self.producer.in_flight_count() > 0 && Instant::now() < deadline {
            if !noted && started.elapsed() >= SLOW_CALL {
                noted = true;
                self.note_slow(COMMIT_CALL, SLOW_CALL);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        if !self.transactional {
            // At-least-once: every send acknowledged (or failed) before the offsets move on.
            self.producer
                .flush(self.timeout)
                .map_err(|e| classify(&self.id, e))?;
            self.waits.clear();
            return Ok(());
        }
        let deadline = Instant::now() + COMMIT_RETRY_FOR.max(self.timeout);
        loop {
            // rust-rdkafka flushes (up to the timeout) before committing (up to the timeout).
            let timeout = self.timeout;
            let committed = self.bounded(COMMIT_CALL, timeout * 2 + CALL_GRACE, move |p| {
                p.commit_transaction(timeout)
            })?;
            match committed {
                Ok(()) => {
                    self.waits.clear();
                    return Ok(());
                }
                Err(KafkaError::Transaction(e))
                    if e.is_retriable() && Instant::now() < deadline =>
                {
                    tracing::warn!(error = %e, "commit failed with a retriable error; calling it again");
                    // Records still unacknowledged: the commit waits on their partitions (no
                    // leader, too few in-sync replicas), not on the coordinator.
                    self.note_waiting(
                        |unacked| {
                            format!(
                                "commit_transaction: {unacked} records not acknowledged yet: {e}"
                            )
                        },
                        || {
                            let on = WaitingOn::of_coordinator_call(
                                e.code(),
                                &e.to_string(),
                                WaitingOn::TxnCoordinator,
                            );
                            (on, format!("commit_transaction: {e}"))
                        },
                    );
                }
                Err(e) => {
                    // Only "abort now" is a known outcome: the transaction did not commit.
                    let must_abort = matches!(&e, KafkaError::Transaction(t)
                        if t.txn_requires_abort() && !t.is_retriable() && !t.is_fatal());
                    return Err(if must_abort {
                        SinkError::Abortable(e)
                    } else {
                        SinkError::CommitUnknown(e)
                    });
                }
            }
        }
    }

    /// Aborts the open transaction: none of its records become visible to `read_committed`.
    pub fn abort(&self) -> Result<(), SinkError> {
        if !self.transactional {
            // Nothing to take back: at-least-once outputs of a failed batch stay (and repeat).
            return Ok(());
        }
        let timeout = self.timeout;
        self.bounded("abort_transaction", timeout + CALL_GRACE, move |p| {
            p.abort_transaction(timeout)
        })?
        .map_err(|e| classify(&self.id, e))
    }

    /// Messages and delivery reports librdkafka still holds (`rd_kafka_outq_len`): zero means
    /// a commit's flush returns at once instead of polling in 100 ms steps.
    pub fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }

    /// Waits for a delivery the committed transaction already guarantees; `(partition, offset)`.
    pub fn delivered(&self, future: DeliveryFuture) -> Option<(i32, i64)> {
        let deadline = Instant::now() + self.timeout;
        let mut future = future;
        loop {
            match (&mut future).now_or_never() {
                Some(Ok(Ok(d))) => return Some((d.partition, d.offset)),
                Some(_) => return None,
                None if Instant::now() >= deadline => return None,
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }
}

fn classify(id: &str, e: KafkaError) -> SinkError {
    match &e {
        KafkaError::Transaction(t) => {
            if is_fencing(t.code()) {
                SinkError::Fenced {
                    id: id.to_string(),
                    source: e,
                }
            } else if t.is_fatal() {
                SinkError::Fatal(e)
            } else {
                SinkError::Abortable(e)
            }
        }
        other => match other.rdkafka_error_code() {
            Some(code) if is_fencing(code) => SinkError::Fenced {
                id: id.to_string(),
                source: e,
            },
            _ => SinkError::Abortable(e),
        },
    }
}
