//! Publishing routed rows in Kafka transactions that also carry the slot's LSN checkpoint.
//!
//! One transaction = the routed records of whole Postgres transactions + one record on the
//! compacted offsets topic (`key` = slot name, value = the last commit's end LSN). Either all
//! of it is visible to `read_committed` readers or none of it; the LSN is confirmed to Postgres
//! only after the commit, and a restarted router resumes after the LSN it reads back here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures::channel::oneshot::Canceled;
use rdkafka::error::KafkaError;
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::DeliveryFuture;
use rdkafka::Message;
use serde::{Deserialize, Serialize};

use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::sink::{SinkError, TxnSink};
use eosflow::internals::telemetry::Waits;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::kafka::KafkaClients;

use super::router::RoutedRecord;
use super::OutboxError;

/// The offsets topic's value for one slot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LsnCheckpoint {
    /// The replication slot.
    pub slot: String,
    /// End LSN of the last published Postgres transaction, as a number.
    pub lsn: u64,
    /// The same, as Postgres prints it (`0/16B3748`), for people.
    pub lsn_text: String,
    /// The Postgres cluster's system identifier (`IDENTIFY_SYSTEM`) the LSN belongs to: an LSN
    /// means nothing on another cluster. Absent in checkpoints of older versions (accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_id: Option<String>,
    /// The timeline the LSN was read on: after a failover or a point-in-time recovery the WAL
    /// past the fork differs. Absent in checkpoints of older versions (accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// Progress of the initial snapshot while it runs (absent once it completed, and in
    /// checkpoints of older versions): a restart resumes it after the last committed chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<super::snapshot::SnapshotProgress>,
    /// A Postgres transaction over `outbox.max_rows_per_transaction` rows is published in
    /// several Kafka transactions: while it is, how far it got (absent otherwise, and in
    /// checkpoints of older versions). `lsn` stays the last whole transaction's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialTx>,
}

/// The part of one Postgres transaction already in Kafka: its first `rows` outbox rows, in WAL
/// order (the order a replay delivers them in again).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartialTx {
    /// The transaction's end LSN; its commit LSN (the Begin message's final LSN) when
    /// `streamed`.
    pub end_lsn: u64,
    /// Its rows published so far.
    pub rows: u64,
    /// The parts were published while the transaction's rows were still arriving (before its
    /// Commit message, which carries the end LSN): `end_lsn` is then the commit LSN, known from
    /// Begin, so a replay drops the rows already in Kafka as they arrive. Absent in
    /// checkpoints of older versions (parts published after the Commit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streamed: bool,
}

impl LsnCheckpoint {
    /// How far the checkpoint reaches, comparable across whole and partial ones: after the
    /// whole transaction ending at `lsn`, or inside the transaction ending at
    /// `partial.end_lsn` (always past `lsn`) after its first `partial.rows` rows.
    pub fn position(&self) -> (u64, u64) {
        position(self.lsn, self.partial)
    }
}

/// [`LsnCheckpoint::position`] of a checkpoint at `lsn` with `partial`.
fn position(lsn: u64, partial: Option<PartialTx>) -> (u64, u64) {
    match partial {
        Some(p) => (p.end_lsn, p.rows),
        None => (lsn, u64::MAX),
    }
}

/// Which WAL history an LSN belongs to: the cluster's system identifier and timeline, as the
/// replication session's `IDENTIFY_SYSTEM` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterId {
    /// `pg_control_system().system_identifier`, decimal.
    pub system_id: String,
    /// The server's current timeline.
    pub timeline: u32,
}

/// Formats an LSN the way Postgres does (`X/Y`, hex).
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses `X/Y` (hex) into an LSN.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.trim().split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// The declaration of the offsets topic (also in `topics/outbox.toml`).
pub fn offsets_topic_spec(name: &str) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions: 1,
        replication: None,
        cleanup_policy: "compact".into(),
        retention_ms: None,
        config: BTreeMap::from([("min.compaction.lag.ms".to_string(), "0".to_string())]),
    }
}

/// Creates `names` that are missing (routed topics get `partitions`, delete policy).
pub async fn ensure_topics(
    clients: &KafkaClients,
    specs: Vec<TopicSpec>,
) -> Result<(), OutboxError> {
    topics::apply(clients, &specs, Duration::from_secs(30)).await?;
    Ok(())
}

/// A routed topic's declaration.
pub fn routed_topic_spec(name: &str, partitions: i32) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions,
        replication: None,
        cleanup_policy: "delete".into(),
        retention_ms: None,
        config: BTreeMap::new(),
    }
}

/// The last committed LSN of `slot` in the offsets topic (`read_committed`), if any.
pub fn read_committed_lsn(
    clients: &KafkaClients,
    topic: &str,
    slot: &str,
    timeout: Duration,
) -> Result<Option<u64>, OutboxError> {
    Ok(read_checkpoint(clients, topic, slot, timeout)?.map(|c| c.lsn))
}

/// The last committed checkpoint of `slot` in the offsets topic (`read_committed`), if any:
/// the LSN with the cluster identity it belongs to.
pub fn read_checkpoint(
    clients: &KafkaClients,
    topic: &str,
    slot: &str,
    timeout: Duration,
) -> Result<Option<LsnCheckpoint>, OutboxError> {
    let mut last = None;
    read_all(clients, topic, timeout, |m| {
        if m.key() == Some(slot.as_bytes()) {
            match m.payload() {
                Some(p) => {
                    let c: LsnCheckpoint = serde_json::from_slice(p)
                        .map_err(|e| format!("offset {} of {topic}: {e}", m.offset()))?;
                    last = Some(c);
                }
                None => last = None,
            }
        }
        Ok(())
    })
    .map_err(|e| OutboxError::Offsets(e.to_string()))?;
    Ok(last)
}

/// Whether a delivery failed because a newer producer with our `transactional.id` exists.
fn is_fencing(e: &KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::ProducerFenced | C::InvalidProducerEpoch | C::Fenced)
    )
}

/// librdkafka's default `message.max.bytes`: the producer refuses a bigger record.
pub const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Most bytes of a row's payload its dead letter keeps (less when `message.max.bytes` is
/// small): the copy must always be writable, and the row itself stays in Postgres.
pub const DLT_VALUE_MAX: usize = 64 * 1024;

/// Most bytes of a key, header name or header value a dead letter keeps.
const DLT_FIELD_MAX: usize = 1024;

/// Most of the row's own headers a dead letter keeps.
const DLT_HEADERS_MAX: usize = 32;

/// How long a commit is retried while its error is retriable (coordinator away, request
/// timed out) before the producer is replaced and the outcome read back from the offsets topic.
pub const COMMIT_RETRY_FOR: Duration = Duration::from_secs(180);

/// Bytes of Kafka's zig-zag varint encoding of `n` (record v2 length fields).
fn varint_len(n: usize) -> usize {
    let mut v = (n as u64) << 1;
    let mut len = 1;
    while v >= 0x80 {
        v >>= 7;
        len += 1;
    }
    len
}

/// The size librdkafka compares with `message.max.bytes` before it accepts a record
/// (`rd_kafka_msg_max_wire_size`: the worst-case record v2 overhead of 36 bytes, key, value and
/// each header's name, value and their varint lengths). Checking it first tells exactly which
/// row is too big, without a failed transaction.
pub fn wire_size(r: &RoutedRecord) -> usize {
    let headers: usize = r
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.len() + varint_len(k.len()) + varint_len(v.len()))
        .sum();
    36 + r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len) + headers
}

/// Why a row cannot be written to its routed topic (it goes to the outbox's DLT instead).
#[derive(Debug, Clone, PartialEq)]
pub struct Unwritable {
    /// `oversize` or `unwritable`: the metric's `reason` label.
    pub kind: &'static str,
    /// The whole reason, as written in the dead letter's `eosflow.dlt.reason` header.
    pub reason: String,
}

impl Unwritable {
    fn oversize(size: usize, limit: usize) -> Self {
        Self {
            kind: "oversize",
            reason: format!("oversize: {size} bytes > limit {limit} (message.max.bytes)"),
        }
    }

    fn topic(detail: String) -> Self {
        Self {
            kind: "unwritable",
            reason: format!("unwritable: {detail}"),
        }
    }
}

/// Whether the broker refused a record for what it is or where it goes: retrying the same
/// record cannot help, so it is dead-lettered (any other failure aborts and retries the batch).
/// The flag says the refusal is of the whole produce batch (size, invalid record): librdkafka
/// batches a partition's records, so the culprit is only known once the record was sent alone.
fn record_error(e: &KafkaError, size: usize) -> Option<(Unwritable, bool)> {
    use rdkafka::error::RDKafkaErrorCode as C;
    match e.rdkafka_error_code()? {
        C::MessageSizeTooLarge | C::MessageBatchTooLarge | C::InvalidMessageSize => Some((
            Unwritable {
                kind: "oversize",
                reason: format!("oversize: {size} bytes refused: {e}"),
            },
            true,
        )),
        C::InvalidRecord => Some((Unwritable::topic(format!("InvalidRecord: {e}")), true)),
        code @ (C::UnknownPartition
        | C::UnknownTopic
        | C::UnknownTopicOrPartition
        | C::TopicAuthorizationFailed
        | C::InvalidTopic
        | C::PolicyViolation) => Some((Unwritable::topic(format!("{code:?}: {e}")), false)),
        _ => None,
    }
}

/// Whether creating a routed topic failed for good (its rows are dead-lettered) rather than
/// for now (the session retries).
fn permanent_create_error(code: rdkafka::error::RDKafkaErrorCode) -> bool {
    use rdkafka::error::RDKafkaErrorCode as C;
    matches!(
        code,
        C::InvalidTopic
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::PolicyViolation
            | C::InvalidPartitions
            | C::InvalidReplicationFactor
            | C::InvalidConfig
            | C::InvalidRequest
    )
}

/// `bytes`, cut to `max` (and whether it was cut).
fn bounded(bytes: &[u8], max: usize) -> (&[u8], bool) {
    (&bytes[..bytes.len().min(max)], bytes.len() > max)
}

/// The dead letter of `r`: a bounded copy (key, payload prefix, the row's headers) on `dlt`,
/// with `eosflow.dlt.*` headers saying where it was going, how big it was, its commit LSN and
/// why it could not be written. Keyed by the aggregate id, so one aggregate's dead letters
/// keep their order.
pub fn dead_letter(
    r: &RoutedRecord,
    why: &Unwritable,
    size: usize,
    lsn: u64,
    dlt: &str,
    limit: usize,
) -> RoutedRecord {
    let value_max = DLT_VALUE_MAX.min(limit / 4);
    let value = r.value.as_deref().map(|v| bounded(v, value_max));
    let truncated = value.is_some_and(|(_, cut)| cut);
    let mut headers: Vec<(String, Vec<u8>)> = r
        .headers
        .iter()
        .filter(|(k, _)| !k.starts_with(eosflow::internals::retry::dlt::PREFIX))
        .take(DLT_HEADERS_MAX)
        .map(|(k, v)| {
            let k = String::from_utf8_lossy(bounded(k.as_bytes(), DLT_FIELD_MAX).0).into_owned();
            (k, bounded(v, DLT_FIELD_MAX).0.to_vec())
        })
        .collect();
    // Poll mode has no LSN (0): the header is left out rather than say `0/0`.
    let lsn = r.commit_lsn.unwrap_or(lsn);
    let lsn = (lsn > 0).then(|| ("original.lsn", lsn_text(lsn)));
    for (k, v) in [
        ("original.topic", r.topic.clone()),
        ("original.size", size.to_string()),
        ("reason", why.reason.clone()),
        ("error.class", "permanent".to_string()),
        ("error.message", why.reason.clone()),
        ("truncated", truncated.to_string()),
        ("source", "outbox".to_string()),
    ]
    .into_iter()
    .chain(lsn)
    {
        headers.push((
            format!("{}{k}", eosflow::internals::retry::dlt::PREFIX),
            bounded(v.as_bytes(), DLT_FIELD_MAX).0.to_vec(),
        ));
    }
    RoutedRecord {
        topic: dlt.to_string(),
        key: r
            .key
            .as_deref()
            .map(|k| bounded(k, DLT_FIELD_MAX).0.to_vec()),
        value: value.map(|(v, _)| v.to_vec()),
        headers,
        id: r.id.clone(),
        commit_lsn: r.commit_lsn,
        ..RoutedRecord::default()
    }
}

/// The declaration of the outbox's dead-letter topic (also in `topics/outbox.toml`).
pub fn dlt_topic_spec(name: &str) -> TopicSpec {
    TopicSpec {
        name: name.to_string(),
        partitions: 1,
        replication: None,
        cleanup_policy: "delete".into(),
        retention_ms: Some(1_209_600_000),
        config: BTreeMap::new(),
    }
}

/// What one committed publish did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Published {
    /// Rows written to their routed topics.
    pub routed: usize,
    /// Rows written to the dead-letter topic instead.
    pub dead_lettered: usize,
}

/// Why an attempt did not commit, by what `publish` does next.
enum AttemptError {
    /// The broker refused rows (now dead-lettered, or to be sent alone): abort and retry.
    Refused,
    /// Fenced, abortable or fatal: as classified by the sink.
    Sink(SinkError),
    /// The commit was requested and may or may not have happened.
    CommitUnknown(SinkError),
}

impl From<SinkError> for AttemptError {
    fn from(e: SinkError) -> Self {
        AttemptError::Sink(e)
    }
}

/// What is known before sending about where rows can go: the producer's `message.max.bytes`,
/// the routed topics made sure of, and those that cannot be created. Shared by both modes.
#[derive(Debug)]
pub struct Gate {
    clients: KafkaClients,
    partitions: i32,
    /// The producer's `message.max.bytes`.
    limit: usize,
    known: HashSet<String>,
    /// Routed topics that cannot be created, with the broker's reason.
    unwritable: HashMap<String, String>,
}

impl Gate {
    /// A gate for a producer built from `config` (whose `message.max.bytes` it enforces);
    /// routed topics it creates get `partitions`.
    pub fn new(clients: &KafkaClients, config: &rdkafka::ClientConfig, partitions: i32) -> Self {
        Self {
            clients: clients.clone(),
            partitions,
            limit: config
                .get("message.max.bytes")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES),
            known: HashSet::new(),
            unwritable: HashMap::new(),
        }
    }

    /// The largest record the producer accepts (`message.max.bytes`).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Makes sure `dlt` exists (created when missing, like the offsets topic): a router that
    /// could not dead-letter a row would block the outbox on it, so it refuses to start.
    pub async fn ensure_dlt(&mut self, dlt: &str) -> Result<(), OutboxError> {
        match ensure_topics(&self.clients, vec![dlt_topic_spec(dlt)]).await {
            Ok(()) => {
                self.known.insert(dlt.to_string());
                Ok(())
            }
            Err(OutboxError::Topics(topics::TopicsError::Create { code, .. }))
                if permanent_create_error(code) =>
            {
                Err(OutboxError::Config(format!(
                    "the outbox dead-letter topic {dlt} does not exist and cannot be created \
                     ({code:?}): declare it (topics/outbox.toml) and run `eosflow topics apply`, \
                     or fix what stops it (a colliding name, ACLs)"
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the routed topics of `records` that are missing, one at a time: a topic that
    /// cannot be created (a name colliding with another, a policy, ACLs) is remembered as
    /// unwritable and its rows are dead-lettered; a transient failure is returned.
    pub async fn ensure_routed_topics(
        &mut self,
        records: &[RoutedRecord],
    ) -> Result<(), OutboxError> {
        let mut missing: Vec<&str> = records
            .iter()
            .map(|r| r.topic.as_str())
            .filter(|t| !self.known.contains(*t) && !self.unwritable.contains_key(*t))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for t in missing {
            match ensure_topics(&self.clients, vec![routed_topic_spec(t, self.partitions)]).await {
                Ok(()) => {
                    self.known.insert(t.to_string());
                }
                Err(OutboxError::Topics(topics::TopicsError::Create { code, .. }))
                    if permanent_create_error(code) =>
                {
                    tracing::error!(
                        topic = t,
                        ?code,
                        "a routed topic cannot be created; its rows go to the outbox DLT"
                    );
                    self.unwritable
                        .insert(t.to_string(), format!("cannot create topic {t}: {code:?}"));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Why `r` cannot be written, as far as is known before sending, with its size.
    pub fn check(&self, r: &RoutedRecord) -> Option<(Unwritable, usize)> {
        let size = wire_size(r);
        if let Some(why) = &r.unroutable {
            return Some((Unwritable::topic(why.clone()), size));
        }
        if size > self.limit {
            return Some((Unwritable::oversize(size, self.limit), size));
        }
        self.unwritable
            .get(&r.topic)
            .map(|why| (Unwritable::topic(why.clone()), size))
    }

    /// The ERROR line and the metric of a dead-lettered row (after its commit).
    pub fn report(&self, r: &RoutedRecord, why: &Unwritable, size: usize, dlt: &str) {
        tracing::error!(
            id = %r.id,
            topic = %r.topic,
            size,
            lsn = %r.commit_lsn.map(lsn_text).unwrap_or_default(),
            dlt,
            reason = %why.reason,
            "outbox row cannot be written; sent to the outbox DLT"
        );
        super::telemetry::dead_lettered(why.kind);
    }
}

/// The router's transactional producer plus the topics it has made sure exist.
#[derive(Debug)]
pub struct Publisher {
    sink: TxnSink,
    clients: KafkaClients,
    offsets_topic: String,
    dlt_topic: String,
    slot: String,
    gate: Gate,
    /// Written into every checkpoint (`None` until the session identified the server).
    cluster: Option<ClusterId>,
    /// The initial snapshot's progress, written into every checkpoint while it runs.
    snapshot: Option<super::snapshot::SnapshotProgress>,
    /// The router's waits for the cluster (its `/healthz`, `eosflow_waiting`).
    waits: Waits,
}

impl Publisher {
    /// Creates the producer (`init_transactions` fences a predecessor with the same id and
    /// aborts its open transaction), the offsets topic if missing, and checks the dead-letter
    /// topic `dlt_topic` (created when missing, like the offsets topic): a router that could
    /// not dead-letter a row would block the outbox on it, so it refuses to start instead.
    pub async fn new(
        clients: &KafkaClients,
        transactional_id: &str,
        timeout: Duration,
        offsets_topic: &str,
        dlt_topic: &str,
        slot: &str,
        partitions: i32,
    ) -> Result<Self, OutboxError> {
        ensure_topics(clients, vec![offsets_topic_spec(offsets_topic)]).await?;
        let config = clients.config(eosflow::kafka::ClientRole::Transactional {
            id: transactional_id,
            timeout,
        });
        let mut gate = Gate::new(clients, &config, partitions);
        gate.ensure_dlt(dlt_topic).await?;
        gate.known.insert(offsets_topic.to_string());
        let sink =
            tokio::task::block_in_place(|| TxnSink::new(clients, transactional_id, timeout))?;
        Ok(Self {
            sink,
            clients: clients.clone(),
            offsets_topic: offsets_topic.to_string(),
            dlt_topic: dlt_topic.to_string(),
            slot: slot.to_string(),
            gate,
            cluster: None,
            snapshot: None,
            waits: Waits::default(),
        })
    }

    /// The cluster identity written with every following checkpoint, so a restart can tell
    /// whether the stored LSN belongs to the server it reconnected to.
    pub fn set_cluster(&mut self, cluster: Option<ClusterId>) {
        self.cluster = cluster;
    }

    /// The initial snapshot's progress written with every following checkpoint (`None` once
    /// the snapshot is complete).
    pub fn set_snapshot(&mut self, progress: Option<super::snapshot::SnapshotProgress>) {
        self.snapshot = progress;
    }

    /// Reports what the router waits for (a partition leader, a coordinator) to `waits`, the
    /// router's health: `/healthz` names it and `eosflow_waiting{on}` counts it.
    pub fn set_waits(&mut self, waits: Waits) {
        self.sink.set_waits(waits.clone());
        self.waits = waits;
    }

    /// The largest record the producer accepts (`message.max.bytes`).
    pub fn limit(&self) -> usize {
        self.gate.limit
    }

    /// Publishes `records` and the checkpoint `end_lsn` in one Kafka transaction. A row that
    /// cannot be written (over `message.max.bytes`, refused by the broker, its topic cannot be
    /// created) goes to the dead-letter topic as a bounded copy in the same transaction, so the
    /// LSN moves past it and later rows flow. An abortable failure is aborted and retried
    /// (nothing of an aborted attempt is visible); a commit whose outcome is unknown is retried
    /// while retriable, else the producer is replaced and the stored LSN read back: a batch
    /// that committed is never published again. Fencing is returned.
    pub async fn publish(
        &mut self,
        records: &[RoutedRecord],
        end_lsn: u64,
    ) -> Result<Published, OutboxError> {
        self.publish_part(records, end_lsn, None).await
    }

    /// [`Self::publish`] of one part of a Postgres transaction too large for one Kafka
    /// transaction: the checkpoint stays at the last whole transaction (`end_lsn`) and says
    /// how many rows of the split one are in Kafka (`partial`).
    pub async fn publish_part(
        &mut self,
        records: &[RoutedRecord],
        end_lsn: u64,
        partial: Option<PartialTx>,
    ) -> Result<Published, OutboxError> {
        self.gate.ensure_routed_topics(records).await?;
        let mut dead: Vec<Option<(Unwritable, usize)>> =
            records.iter().map(|r| self.gate.check(r)).collect();
        let mut suspect = vec![false; records.len()];
        let checkpoint = serde_json::to_vec(&LsnCheckpoint {
            slot: self.slot.clone(),
            lsn: end_lsn,
            lsn_text: lsn_text(end_lsn),
            system_id: self.cluster.as_ref().map(|c| c.system_id.clone()),
            timeline: self.cluster.as_ref().map(|c| c.timeline),
            snapshot: self.snapshot.clone(),
            partial,
        })
        .map_err(|e| OutboxError::Other(format!("encoding the checkpoint: {e}")))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = tokio::task::block_in_place(|| {
                self.attempt(records, &mut dead, &mut suspect, end_lsn, &checkpoint)
            });
            let replace = match result {
                Ok(()) => break,
                Err(AttemptError::Sink(e @ SinkError::Fenced { .. }))
                | Err(AttemptError::CommitUnknown(e @ SinkError::Fenced { .. })) => {
                    return Err(e.into())
                }
                Err(AttemptError::Refused) => {
                    // Not a failure of the batch: each round marks at least one more row.
                    attempt -= 1;
                    tracing::warn!("rows refused by the broker; aborting to dead-letter them");
                    self.abort_or_replace()?
                }
                Err(AttemptError::Sink(e)) if attempt >= 5 => return Err(e.into()),
                Err(AttemptError::CommitUnknown(e)) => {
                    tracing::warn!(error = %e, lsn = %lsn_text(end_lsn), "commit outcome unknown; replacing the producer and reading the stored LSN back");
                    true
                }
                Err(AttemptError::Sink(SinkError::Fatal(e))) => {
                    tracing::warn!(error = %e, "producer unusable; recreating it");
                    true
                }
                Err(AttemptError::Sink(e)) => {
                    tracing::warn!(error = %e, attempt, "outbox transaction aborted; retrying");
                    if let Some((on, detail)) = e.waiting_on() {
                        self.waits.start(on, detail);
                    }
                    self.abort_or_replace()?
                }
            };
            if replace && self.replace_and_check(position(end_lsn, partial))? {
                break;
            }
        }
        let mut published = Published::default();
        for (r, d) in records.iter().zip(&dead) {
            match d {
                None => published.routed += 1,
                Some((why, size)) => {
                    published.dead_lettered += 1;
                    self.gate.report(r, why, *size, &self.dlt_topic);
                }
            }
        }
        Ok(published)
    }

    /// Aborts the open transaction, retrying a retriable failure for [`COMMIT_RETRY_FOR`];
    /// `true` when the producer had to be replaced (which aborts it too).
    fn abort_or_replace(&mut self) -> Result<bool, OutboxError> {
        let deadline = std::time::Instant::now() + COMMIT_RETRY_FOR;
        loop {
            match self.sink.abort() {
                Ok(()) => return Ok(false),
                // Never recreate the producer of a fenced instance: a new epoch would fence
                // the successor that legitimately took over.
                Err(e @ SinkError::Fenced { .. }) => return Err(e.into()),
                Err(SinkError::Abortable(KafkaError::Transaction(e)))
                    if e.is_retriable() && std::time::Instant::now() < deadline =>
                {
                    tracing::warn!(error = %e, "abort failed with a retriable error; retrying");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "abort failed; recreating the producer");
                    return Ok(true);
                }
            }
        }
    }

    /// Replaces the producer (its `init_transactions` completes or aborts what the old one
    /// left open) and reads the stored checkpoint back: `true` when the batch reaching
    /// `target` ([`LsnCheckpoint::position`]) did commit, so it must not be published again.
    fn replace_and_check(&mut self, target: (u64, u64)) -> Result<bool, OutboxError> {
        tokio::task::block_in_place(|| {
            self.sink.reset()?;
            let stored = read_checkpoint(
                &self.clients,
                &self.offsets_topic,
                &self.slot,
                Duration::from_secs(60),
            )?
            .map_or((0, u64::MAX), |c| c.position());
            let committed = stored >= target;
            tracing::warn!(
                stored = %lsn_text(stored.0),
                stored_rows_of_split = (stored.1 != u64::MAX).then_some(stored.1),
                batch = %lsn_text(target.0),
                batch_rows_of_split = (target.1 != u64::MAX).then_some(target.1),
                committed,
                "producer replaced; the stored LSN tells whether the last commit happened"
            );
            Ok(committed)
        })
    }

    /// Commits, calling `commit_transaction` again while its error is retriable (the
    /// transactional API's contract: the commit may still be completing), for at most
    /// [`COMMIT_RETRY_FOR`] overall.
    fn commit(&self) -> Result<(), AttemptError> {
        let deadline = std::time::Instant::now() + COMMIT_RETRY_FOR;
        let mut tries = 0u32;
        loop {
            tries += 1;
            match self.sink.commit() {
                Ok(()) => return Ok(()),
                Err(e @ SinkError::Fenced { .. }) => return Err(AttemptError::Sink(e)),
                Err(SinkError::Abortable(KafkaError::Transaction(e)))
                    if e.is_retriable() && std::time::Instant::now() < deadline =>
                {
                    tracing::warn!(error = %e, tries, "commit not confirmed yet (retriable); calling commit again");
                }
                // The broker said no: nothing of it is visible, abort and retry the batch.
                Err(SinkError::Abortable(KafkaError::Transaction(e))) if e.txn_requires_abort() => {
                    return Err(AttemptError::Sink(SinkError::Abortable(
                        KafkaError::Transaction(e),
                    )))
                }
                Err(e) => return Err(AttemptError::CommitUnknown(e)),
            }
        }
    }

    /// Queues `r` in the open transaction (partition by key).
    fn send(&self, r: &RoutedRecord) -> Result<DeliveryFuture, SinkError> {
        self.sink.send(
            &r.topic,
            r.partition,
            r.key.as_deref(),
            r.value.as_deref(),
            &r.headers,
        )
    }

    /// One transaction: every row (or its dead letter), then the checkpoint, then the
    /// commit. `suspect` rows (in a batch the broker refused) are sent alone, each waited for,
    /// so their delivery result is theirs; a refusal found here marks rows and fails the
    /// attempt with [`AttemptError::Refused`].
    fn attempt(
        &self,
        records: &[RoutedRecord],
        dead: &mut [Option<(Unwritable, usize)>],
        suspect: &mut [bool],
        end_lsn: u64,
        checkpoint: &[u8],
    ) -> Result<(), AttemptError> {
        /// Queued records by index (`None`: a dead letter or the checkpoint).
        type Pending = Vec<(Option<usize>, DeliveryFuture)>;
        type Delivered = Vec<(Option<usize>, Result<OwnedDeliveryResult, Canceled>)>;
        fn wait(pending: &mut Pending) -> Delivered {
            let (at, futures): (Vec<_>, Vec<_>) = pending.drain(..).unzip();
            at.into_iter()
                .zip(futures::executor::block_on(futures::future::join_all(
                    futures,
                )))
                .collect()
        }
        fn failed_yet(results: &Delivered) -> bool {
            results.iter().any(|(_, r)| !matches!(r, Ok(Ok(_))))
        }
        self.sink.begin()?;
        let mut pending: Pending = Vec::with_capacity(records.len() + 1);
        let mut results: Delivered = Vec::with_capacity(records.len() + 1);
        // A send refused for the transaction's state (after a failed delivery, librdkafka
        // takes no more records): what was delivered so far still says who is to blame.
        let mut stopped: Option<SinkError> = None;
        for (i, r) in records.iter().enumerate() {
            if dead[i].is_none() {
                if suspect[i] {
                    results.extend(wait(&mut pending));
                }
                match self.send(r) {
                    Ok(d) => {
                        pending.push((Some(i), d));
                        if suspect[i] {
                            results.extend(wait(&mut pending));
                            if failed_yet(&results) {
                                break;
                            }
                        }
                        continue;
                    }
                    // Refused before it was queued (the transaction is unharmed): its dead
                    // letter takes its place below.
                    Err(SinkError::Abortable(e)) if record_error(&e, 0).is_some() => {
                        let size = wire_size(r);
                        dead[i] = record_error(&e, size).map(|(w, _)| (w, size));
                    }
                    Err(e) => {
                        stopped = Some(e);
                        break;
                    }
                }
            }
            if let Some((why, size)) = &dead[i] {
                let d = dead_letter(r, why, *size, end_lsn, &self.dlt_topic, self.gate.limit);
                match self.send(&d) {
                    Ok(f) => pending.push((None, f)),
                    Err(e) => {
                        stopped = Some(e);
                        break;
                    }
                }
            }
        }
        if stopped.is_none() && !failed_yet(&results) {
            match self.sink.send(
                &self.offsets_topic,
                Some(0),
                Some(self.slot.as_bytes()),
                Some(checkpoint),
                &[],
            ) {
                Ok(f) => pending.push((None, f)),
                Err(e) => stopped = Some(e),
            }
        }
        // Wait for the acknowledgments here rather than in commit: rust-rdkafka's
        // commit_transaction first flushes, and while rd_kafka_outq_len() > 0 its flush polls
        // for a full 100 ms (the events go to FutureProducer's own thread) — a ~100 ms floor on
        // every transaction. A delivery future completes a moment before its report leaves the
        // out-queue, so wait for the queue to be empty too; then the flush returns at once.
        results.extend(wait(&mut pending));
        let deadline = std::time::Instant::now() + Duration::from_millis(100);
        while self.sink.in_flight() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut failed = None;
        let mut refused = false;
        for (at, d) in results {
            match d {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) if is_fencing(&e) => {
                    return Err(AttemptError::Sink(SinkError::Fenced {
                        id: self.sink.id().to_string(),
                        source: e,
                    }))
                }
                Ok(Err((e, _))) => {
                    // The delivery result names the culprit: only a routed row's own refusal
                    // marks it; anything else fails the attempt.
                    let why = at.and_then(|i| {
                        let size = wire_size(&records[i]);
                        record_error(&e, size).map(|(w, batch)| (i, w, size, batch))
                    });
                    match why {
                        // Refused in a batch with others: send it alone next time to be sure.
                        Some((i, _, _, true)) if !suspect[i] => {
                            suspect[i] = true;
                            refused = true;
                        }
                        Some((i, w, size, _)) => {
                            dead[i] = Some((w, size));
                            refused = true;
                        }
                        None => failed = failed.or(Some(SinkError::Abortable(e))),
                    }
                }
                Err(_) => failed = failed.or(Some(SinkError::Abortable(KafkaError::Canceled))),
            }
        }
        if refused {
            return Err(AttemptError::Refused);
        }
        if let Some(e) = failed.or(stopped) {
            return Err(e.into());
        }
        self.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trips_in_postgres_notation() {
        assert_eq!(lsn_text(0x0192_6DE0), "0/1926DE0");
        assert_eq!(parse_lsn("0/1926DE0"), Some(0x1926DE0));
        assert_eq!(parse_lsn("16/B374D848"), Some((0x16 << 32) | 0xB374_D848));
        assert_eq!(parse_lsn("nope"), None);
    }

    #[test]
    fn a_dead_letter_is_bounded_whatever_the_row_and_says_where_it_was_going() {
        let huge = |n: usize| vec![b'x'; n];
        let r = RoutedRecord {
            topic: "app.Order".into(),
            key: Some(huge(10_000)),
            value: Some(huge(3_000_000)),
            headers: (0..100)
                .map(|i| (format!("h{i}-{}", "k".repeat(5_000)), huge(50_000)))
                .chain([("id".into(), b"row-1".to_vec())])
                .collect(),
            id: "row-1".into(),
            commit_lsn: Some(0x16_B374_D848),
            ..RoutedRecord::default()
        };
        let size = wire_size(&r);
        let why = Unwritable::oversize(size, DEFAULT_MESSAGE_MAX_BYTES);
        let d = dead_letter(
            &r,
            &why,
            size,
            0,
            "app-outbox.DLT",
            DEFAULT_MESSAGE_MAX_BYTES,
        );
        assert_eq!(d.topic, "app-outbox.DLT");
        assert!(wire_size(&d) < 200_000, "{}", wire_size(&d));
        assert_eq!(d.value.as_ref().map(Vec::len), Some(DLT_VALUE_MAX));
        let h = |k: &str| {
            d.headers
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            h("eosflow.dlt.original.topic").as_deref(),
            Some("app.Order")
        );
        assert_eq!(h("eosflow.dlt.original.size"), Some(size.to_string()));
        assert_eq!(
            h("eosflow.dlt.original.lsn").as_deref(),
            Some("16/B374D848")
        );
        assert_eq!(h("eosflow.dlt.truncated").as_deref(), Some("true"));
        assert_eq!(h("eosflow.dlt.reason"), Some(why.reason.clone()));
        // Poll mode has no LSN: no header rather than `0/0`.
        let poll = RoutedRecord {
            commit_lsn: None,
            ..r
        };
        let d = dead_letter(&poll, &why, size, 0, "app-outbox.DLT", 1_000_000);
        assert!(d
            .headers
            .iter()
            .all(|(k, _)| k != "eosflow.dlt.original.lsn"));
    }
}
