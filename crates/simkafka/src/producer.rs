//! The producer: idempotent sends, and transactions with their state machine.
//!
//! Modelled: partitioning (explicit, murmur2 of the key, round-robin for keyless records),
//! offsets assigned at send, the transactional state machine of a Java/librdkafka producer
//! (`init_transactions` → `begin_transaction` → sends and offsets → commit or abort), fencing
//! by epoch, the abortable state after a failed send, and the retry rules after a timed-out
//! commit or abort (only the same call may be retried, and it then succeeds if the first
//! attempt took effect).
//!
//! Not modelled: batching, `linger.ms`, buffer limits, compression, per-record sequence
//! numbers (the internal retries they make safe are not simulated: a send that timed out
//! after its effect and is retried by the caller is a duplicate, exactly as an application
//! retry after a delivery timeout is), and the sticky partitioner (keyless records go
//! round-robin).

use std::collections::BTreeMap;

use crate::faults::ClientKind;
use crate::log::NewRecord;
use crate::partitioner::partition_for_key;
use crate::txn::Bump;
use crate::{Call, Cluster, Fault, GroupMetadata, SimError, TopicPartition};

/// Producer settings: exists to choose between an idempotent and a transactional producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// `client.id`: names the client in the trace and in scripted faults (empty: the
    /// transactional id, else `producer-N`).
    pub client_id: String,
    /// `transactional.id`: makes the producer transactional and fenceable.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: the coordinator aborts a transaction open longer than this.
    pub transaction_timeout_ms: i64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            client_id: String::new(),
            transactional_id: None,
            transaction_timeout_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// `init_transactions` not (successfully) called.
    Uninitialized,
    Ready,
    /// A transaction is open; `Some` once a send failed (only abort is allowed then).
    InTransaction(Option<String>),
    /// A commit timed out: only a retried commit is allowed.
    Committing,
    /// An abort timed out: only a retried abort is allowed.
    Aborting,
}

/// A producer client. Dropping it is a crash: an open transaction stays open until the
/// coordinator aborts it on its timeout (or a new instance calls `init_transactions`).
#[derive(Debug)]
pub struct Producer {
    cluster: Cluster,
    client: String,
    transactional_id: Option<String>,
    timeout_ms: i64,
    producer_id: i64,
    epoch: i16,
    phase: Phase,
    round_robin: BTreeMap<String, usize>,
}

impl Producer {
    pub(crate) fn new(cluster: Cluster, config: ProducerConfig) -> Self {
        let (client, producer_id) = {
            let mut state = cluster.lock();
            let given = if config.client_id.is_empty() {
                config.transactional_id.clone().unwrap_or_default()
            } else {
                config.client_id.clone()
            };
            let client = state.client_name(&given, "producer");
            let producer_id = if config.transactional_id.is_none() {
                state.txns.allocate_producer_id()
            } else {
                -1
            };
            (client, producer_id)
        };
        let phase = if config.transactional_id.is_some() {
            Phase::Uninitialized
        } else {
            Phase::Ready
        };
        Self {
            cluster,
            client,
            transactional_id: config.transactional_id,
            timeout_ms: config.transaction_timeout_ms,
            producer_id,
            epoch: 0,
            phase,
            round_robin: BTreeMap::new(),
        }
    }

    /// The client's name in the trace.
    pub fn client_id(&self) -> &str {
        &self.client
    }

    /// The producer id (−1 for a transactional producer before `init_transactions`).
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The epoch this instance holds.
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    fn kind(&self) -> ClientKind {
        if self.transactional_id.is_some() {
            ClientKind::TransactionalProducer
        } else {
            ClientKind::Producer
        }
    }

    fn transactional_id(&self) -> Result<&str, SimError> {
        self.transactional_id.as_deref().ok_or_else(|| {
            SimError::InvalidRequest(format!("{}: not a transactional producer", self.client))
        })
    }

    /// The fencing check every transactional call makes first.
    fn check_epoch(&self, state: &crate::cluster::State) -> Result<(), SimError> {
        match (&self.transactional_id, &self.phase) {
            (Some(id), phase) if *phase != Phase::Uninitialized => state.txns.check(id, self.epoch),
            _ => Ok(()),
        }
    }

    /// Gets a producer id and epoch for the transactional id, fencing every older instance
    /// and aborting the transaction the id had open. Allowed once, and again after the
    /// coordinator timed out this instance's transaction (`InvalidProducerEpoch`).
    pub fn init_transactions(&mut self) -> Result<(), SimError> {
        let id = self.transactional_id()?.to_owned();
        let mut state = self.cluster.lock();
        match self.check_epoch(&state) {
            Ok(()) if self.phase != Phase::Uninitialized => {
                return Err(SimError::InvalidTxnState(format!(
                    "{id}: init_transactions called twice"
                )))
            }
            Err(e @ SimError::ProducerFenced(_)) => return Err(e),
            _ => {}
        }
        let fault = state.checkpoint(&self.client, self.kind(), Call::InitTransactions, &[])?;
        let after_effect = match fault {
            None => false,
            Some(Fault::TimeoutAfterEffect) => true,
            Some(other) => return Err(other.error(Call::InitTransactions)),
        };
        let (producer_id, epoch, aborted) = state.txns.init(&id, self.timeout_ms);
        if let Some(ongoing) = aborted {
            state.end_transaction(producer_id, &ongoing, false);
        }
        if after_effect {
            // The epoch was bumped but this instance never learnt it: it must retry.
            self.phase = Phase::Uninitialized;
            return Err(SimError::RequestTimedOut {
                call: Call::InitTransactions,
            });
        }
        self.producer_id = producer_id;
        self.epoch = epoch;
        self.phase = Phase::Ready;
        Ok(())
    }

    /// Starts a transaction (client-side in Kafka; the coordinator learns of it at the first
    /// send or `send_offsets_to_transaction`, which also starts its timeout).
    pub fn begin_transaction(&mut self) -> Result<(), SimError> {
        let id = self.transactional_id()?.to_owned();
        let mut state = self.cluster.lock();
        self.check_epoch(&state)?;
        if self.phase != Phase::Ready {
            return Err(self.state_error("begin_transaction"));
        }
        match state.checkpoint(&self.client, self.kind(), Call::BeginTransaction, &[])? {
            None => {}
            Some(Fault::ProducerFenced) => {
                state.fence(&id, Bump::NewInstance);
                return Err(Fault::ProducerFenced.error(Call::BeginTransaction));
            }
            Some(other) => return Err(other.error(Call::BeginTransaction)),
        }
        self.phase = Phase::InTransaction(None);
        Ok(())
    }

    fn state_error(&self, call: &str) -> SimError {
        SimError::InvalidTxnState(format!("{}: {call} in state {:?}", self.client, self.phase))
    }

    fn partition_for(
        &mut self,
        state: &crate::cluster::State,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
    ) -> Result<i32, SimError> {
        let t = state.topic(topic)?;
        if t.config().compacted && key.is_none() {
            return Err(SimError::InvalidRecord(format!(
                "{topic}: compacted topic cannot accept a record without a key"
            )));
        }
        let count = t.partition_count();
        match (partition, key) {
            (Some(p), _) => {
                state.log(topic, p)?;
                Ok(p)
            }
            (None, Some(key)) => Ok(partition_for_key(key, count)),
            (None, None) => {
                let next = self.round_robin.entry(topic.to_owned()).or_insert(0);
                let p = *next % count;
                *next = next.wrapping_add(1);
                Ok(p as i32)
            }
        }
    }

    /// Sends one record; returns its partition and offset. Inside a transaction the record is
    /// in the log at once but invisible to `read_committed` consumers until the commit
    /// marker. A send that fails with a timeout inside a transaction makes it abortable.
    /// `timestamp_ms` defaults to the virtual time.
    pub fn send(
        &mut self,
        topic: &str,
        partition: Option<i32>,
        timestamp_ms: Option<i64>,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<(String, Option<Vec<u8>>)>,
    ) -> Result<(i32, i64), SimError> {
        let cluster = self.cluster.clone();
        let mut state = cluster.lock();
        self.check_epoch(&state)?;
        let txn = match (&self.transactional_id, &self.phase) {
            (None, _) => None,
            (Some(id), Phase::InTransaction(None)) => Some(id.clone()),
            (Some(_), Phase::InTransaction(Some(why))) => {
                return Err(SimError::TransactionAbortable(why.clone()))
            }
            (Some(_), _) => return Err(self.state_error("send")),
        };
        let partition = self.partition_for(&state, topic, partition, key.as_deref())?;
        let tp: TopicPartition = (topic.to_owned(), partition);
        let fault = match state.checkpoint(
            &self.client,
            self.kind(),
            Call::Send,
            std::slice::from_ref(&tp),
        ) {
            Ok(fault) => fault,
            Err(e) => {
                self.poison(&e);
                return Err(e);
            }
        };
        let after_effect = match fault {
            None => false,
            Some(Fault::TimeoutAfterEffect) => true,
            Some(Fault::ProducerFenced) => {
                if let Some(id) = &txn {
                    state.fence(id, Bump::NewInstance);
                }
                return Err(Fault::ProducerFenced.error(Call::Send));
            }
            Some(other) => return Err(other.error(Call::Send)),
        };
        let now = state.now_ms;
        let record = NewRecord {
            timestamp_ms: timestamp_ms.unwrap_or(now),
            key,
            value,
            headers,
        };
        let txn_producer = match &txn {
            Some(id) => {
                state.txns.add_partition(id, &tp, now);
                Some(self.producer_id)
            }
            None => None,
        };
        let offset = state
            .log_mut(topic, partition)?
            .append(record, txn_producer);
        if after_effect {
            let e = SimError::RequestTimedOut { call: Call::Send };
            self.poison(&e);
            return Err(e);
        }
        Ok((partition, offset))
    }

    /// A timed-out send inside a transaction: the record may be in the log, so the
    /// transaction can only be aborted.
    fn poison(&mut self, error: &SimError) {
        if let (Phase::InTransaction(poisoned @ None), SimError::RequestTimedOut { .. }) =
            (&mut self.phase, error)
        {
            *poisoned = Some(format!("a send failed: {error}"));
        }
    }

    /// Waits for outstanding sends: a no-op (sends complete at once) unless a fault fails it.
    pub fn flush(&mut self) -> Result<(), SimError> {
        let mut state = self.cluster.lock();
        match state.checkpoint(&self.client, self.kind(), Call::Flush, &[])? {
            None => Ok(()),
            Some(other) => Err(other.error(Call::Flush)),
        }
    }

    /// Adds a consumer group's offsets to the open transaction (KIP-447): the coordinator
    /// rejects a stale `group` generation or member (`IllegalGeneration`, `UnknownMemberId`,
    /// `FencedInstanceId`); the offsets become the group's committed offsets only if the
    /// transaction commits. A `GroupMetadata` with a negative generation skips the check
    /// (the pre-KIP-447 `sendOffsetsToTransaction(offsets, groupId)`).
    pub fn send_offsets_to_transaction(
        &mut self,
        offsets: &[(String, i32, i64)],
        group: &GroupMetadata,
    ) -> Result<(), SimError> {
        let id = self.transactional_id()?.to_owned();
        let mut state = self.cluster.lock();
        self.check_epoch(&state)?;
        match &self.phase {
            Phase::InTransaction(None) => {}
            Phase::InTransaction(Some(why)) => {
                return Err(SimError::TransactionAbortable(why.clone()))
            }
            _ => return Err(self.state_error("send_offsets_to_transaction")),
        }
        let offsets: Vec<(TopicPartition, i64)> = offsets
            .iter()
            .map(|(t, p, o)| ((t.clone(), *p), *o))
            .collect();
        let tps: Vec<TopicPartition> = offsets.iter().map(|(tp, _)| tp.clone()).collect();
        let after_effect =
            match state.checkpoint(&self.client, self.kind(), Call::SendOffsets, &tps)? {
                None => false,
                Some(Fault::TimeoutAfterEffect) => true,
                Some(Fault::ProducerFenced) => {
                    state.fence(&id, Bump::NewInstance);
                    return Err(Fault::ProducerFenced.error(Call::SendOffsets));
                }
                Some(other) => return Err(other.error(Call::SendOffsets)),
            };
        let now = state.now_ms;
        let producer_id = self.producer_id;
        let g = state.group_mut(&group.group_id);
        if group.generation_id >= 0 {
            g.check_member(
                &group.member_id,
                group.group_instance_id.as_deref(),
                group.generation_id,
            )?;
        }
        g.hold_pending(producer_id, tps.into_iter());
        state.txns.add_offsets(&id, &group.group_id, &offsets, now);
        if after_effect {
            return Err(SimError::RequestTimedOut {
                call: Call::SendOffsets,
            });
        }
        Ok(())
    }

    /// Commits the open transaction: writes a commit marker in every partition it touched
    /// and makes its offsets the group's committed offsets. After a timeout (outcome unknown)
    /// only `commit_transaction` may be called again; it succeeds at once if the first
    /// attempt took effect.
    pub fn commit_transaction(&mut self) -> Result<(), SimError> {
        self.end(true)
    }

    /// Aborts the open transaction: writes an abort marker in every partition it touched and
    /// drops its offsets. After a timeout only `abort_transaction` may be called again.
    pub fn abort_transaction(&mut self) -> Result<(), SimError> {
        self.end(false)
    }

    fn end(&mut self, commit: bool) -> Result<(), SimError> {
        let call = if commit {
            Call::CommitTransaction
        } else {
            Call::AbortTransaction
        };
        let id = self.transactional_id()?.to_owned();
        let mut state = self.cluster.lock();
        self.check_epoch(&state)?;
        match (&self.phase, commit) {
            (Phase::InTransaction(Some(why)), true) => {
                return Err(SimError::TransactionAbortable(why.clone()))
            }
            (Phase::InTransaction(_), _) | (Phase::Committing, true) | (Phase::Aborting, false) => {
            }
            _ => {
                return Err(self.state_error(if commit {
                    "commit_transaction"
                } else {
                    "abort_transaction"
                }))
            }
        }
        let pending = if commit {
            Phase::Committing
        } else {
            Phase::Aborting
        };
        let after_effect = match state.checkpoint(&self.client, self.kind(), call, &[]) {
            Ok(None) => false,
            Ok(Some(Fault::TimeoutAfterEffect)) => true,
            Ok(Some(Fault::ProducerFenced)) => {
                state.fence(&id, Bump::NewInstance);
                return Err(Fault::ProducerFenced.error(call));
            }
            Ok(Some(other)) => return Err(other.error(call)),
            Err(e) => {
                if matches!(e, SimError::RequestTimedOut { .. }) {
                    self.phase = pending;
                }
                return Err(e);
            }
        };
        if let Some((producer_id, ongoing)) = state.txns.take_ongoing(&id) {
            state.end_transaction(producer_id, &ongoing, commit);
        }
        if after_effect {
            self.phase = pending;
            return Err(SimError::RequestTimedOut { call });
        }
        self.phase = Phase::Ready;
        Ok(())
    }

    /// Closes the producer. Like dropping it: an open transaction is left to the coordinator
    /// (aborted at its timeout or by the next `init_transactions` of the same id).
    pub fn close(self) {}
}
