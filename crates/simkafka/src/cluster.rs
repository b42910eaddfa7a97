//! The cluster: topics, coordinators, virtual time and the oracle views checkers read.
//!
//! One [`Cluster`] is one simulated Kafka cluster behind a mutex; clients are handles into it.
//! Everything happens at the moment of the call (there are no threads and no background
//! work): virtual time moves only by [`Cluster::advance`], which is also when timers fire
//! (transaction timeouts first, then consumer sessions).
//!
//! Not modelled: brokers (there is one logical broker per role, always the leader and
//! coordinator), replication, quotas, ACLs, topic deletion, adding partitions, and
//! auto-creation of topics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::faults::{Checkpoint, ClientKind, FaultPlan};
use crate::group::Group;
use crate::log::PartitionLog;
use crate::txn::{Bump, Ongoing, TxnCoordinator};
use crate::{
    Admin, Consumer, ConsumerConfig, Faults, Producer, ProducerConfig, Record, SimError,
    TopicPartition, TraceEvent,
};

/// Topic-level settings: exists so compacted topics (changelogs, tables) can be simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicConfig {
    /// `cleanup.policy=compact`: keyless records are refused and `Admin::compact` applies.
    pub compacted: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Topic {
    config: TopicConfig,
    partitions: Vec<PartitionLog>,
}

impl Topic {
    pub(crate) fn config(&self) -> TopicConfig {
        self.config
    }

    pub(crate) fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    pub(crate) fn logs_mut(&mut self) -> &mut [PartitionLog] {
        &mut self.partitions
    }
}

/// Everything one simulated cluster holds. Crate-internal: clients reach it through
/// [`Cluster::lock`].
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) now_ms: i64,
    pub(crate) topics: BTreeMap<String, Topic>,
    pub(crate) txns: TxnCoordinator,
    pub(crate) groups: BTreeMap<String, Group>,
    pub(crate) faults: FaultPlan,
    next_client: u64,
}

impl State {
    /// The fault checkpoint every client call passes first.
    pub(crate) fn checkpoint(
        &mut self,
        client: &str,
        client_kind: ClientKind,
        call: crate::Call,
        partitions: &[TopicPartition],
    ) -> Result<Option<crate::Fault>, SimError> {
        let point = Checkpoint {
            client,
            client_kind,
            call,
            partitions,
        };
        self.faults.checkpoint(self.now_ms, &point)
    }

    /// A generated client name when the config gives none.
    pub(crate) fn client_name(&mut self, given: &str, prefix: &str) -> String {
        self.next_client += 1;
        if given.is_empty() {
            format!("{prefix}-{}", self.next_client)
        } else {
            given.to_owned()
        }
    }

    pub(crate) fn create_topic(
        &mut self,
        name: &str,
        partitions: usize,
        config: TopicConfig,
    ) -> Result<(), SimError> {
        if self.topics.contains_key(name) {
            return Err(SimError::TopicAlreadyExists(name.to_owned()));
        }
        if partitions == 0 || partitions > i32::MAX as usize {
            return Err(SimError::InvalidPartitions(format!(
                "{name}: {partitions} partitions"
            )));
        }
        let partitions = (0..partitions)
            .map(|p| PartitionLog::new(name, p as i32))
            .collect();
        self.topics
            .insert(name.to_owned(), Topic { config, partitions });
        Ok(())
    }

    pub(crate) fn topic(&self, name: &str) -> Result<&Topic, SimError> {
        self.topics
            .get(name)
            .ok_or_else(|| SimError::UnknownTopicOrPartition(name.to_owned()))
    }

    pub(crate) fn log(&self, topic: &str, partition: i32) -> Result<&PartitionLog, SimError> {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.topics.get(topic)?.partitions.get(p))
            .ok_or_else(|| SimError::UnknownTopicOrPartition(format!("{topic}-{partition}")))
    }

    pub(crate) fn log_mut(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<&mut PartitionLog, SimError> {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.topics.get_mut(topic)?.partitions.get_mut(p))
            .ok_or_else(|| SimError::UnknownTopicOrPartition(format!("{topic}-{partition}")))
    }

    pub(crate) fn partition_counts(&self) -> BTreeMap<String, usize> {
        self.topics
            .iter()
            .map(|(name, t)| (name.clone(), t.partitions.len()))
            .collect()
    }

    pub(crate) fn group_mut(&mut self, group_id: &str) -> &mut Group {
        self.groups
            .entry(group_id.to_owned())
            .or_insert_with(|| Group::new(group_id))
    }

    /// Writes the markers and settles the held offsets of `producer_id`'s transaction.
    pub(crate) fn end_transaction(&mut self, producer_id: i64, ongoing: &Ongoing, commit: bool) {
        let now = self.now_ms;
        for (topic, partition) in ongoing.partitions() {
            if let Ok(log) = self.log_mut(topic, *partition) {
                log.write_marker(producer_id, commit, now);
            }
        }
        for (group, offsets) in ongoing.offsets() {
            self.group_mut(group)
                .end_pending(producer_id, offsets, commit);
        }
    }

    /// Bumps `transactional_id`'s epoch for `why` and aborts the transaction it had open.
    pub(crate) fn fence(&mut self, transactional_id: &str, why: Bump) {
        if let Some((producer_id, ongoing)) = self.txns.fence(transactional_id, why) {
            self.end_transaction(producer_id, &ongoing, false);
        }
    }

    fn advance(&mut self, ms: i64) {
        self.now_ms = self.now_ms.saturating_add(ms.max(0));
        for transactional_id in self.txns.expired(self.now_ms) {
            self.fence(&transactional_id, Bump::Timeout);
        }
        let now = self.now_ms;
        for group in self.groups.values_mut() {
            group.expire(now);
        }
    }
}

/// A handle to one simulated cluster: cheap to clone, every clone sees the same cluster.
/// It exists to create clients, move virtual time, control faults and give checkers an
/// oracle view of the logs that no client call (and no fault) can distort.
#[derive(Debug, Clone)]
pub struct Cluster {
    inner: Arc<Mutex<State>>,
}

impl Cluster {
    /// A new, empty cluster at virtual time 0 whose random faults are drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(State {
                now_ms: 0,
                topics: BTreeMap::new(),
                txns: TxnCoordinator::default(),
                groups: BTreeMap::new(),
                faults: FaultPlan::new(seed),
                next_client: 0,
            })),
        }
    }

    /// The state, recovered if a panicking test poisoned the mutex (the state is never left
    /// half-updated by a panic inside this crate: no code here panics while holding it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates a topic (setup, no fault checkpoint; `Admin::create_topics` is the client
    /// call).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: usize,
        config: TopicConfig,
    ) -> Result<(), SimError> {
        self.lock().create_topic(name, partitions, config)
    }

    /// The partition count of `topic`, if it exists.
    pub fn partition_count(&self, topic: &str) -> Option<usize> {
        self.lock().topics.get(topic).map(Topic::partition_count)
    }

    /// Every topic and its partition count.
    pub fn topics(&self) -> BTreeMap<String, usize> {
        self.lock().partition_counts()
    }

    /// A producer client (see [`ProducerConfig`]).
    pub fn producer(&self, config: ProducerConfig) -> Producer {
        Producer::new(self.clone(), config)
    }

    /// A consumer client (see [`ConsumerConfig`]).
    pub fn consumer(&self, config: ConsumerConfig) -> Consumer {
        Consumer::new(self.clone(), config)
    }

    /// An admin client named `admin-N`.
    pub fn admin(&self) -> Admin {
        Admin::new(self.clone())
    }

    /// The fault-injection controls.
    pub fn faults(&self) -> Faults {
        Faults {
            cluster: self.clone(),
        }
    }

    /// Every fault injected so far, in order.
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.lock().faults.trace().to_vec()
    }

    /// Virtual time in milliseconds (starts at 0).
    pub fn now_ms(&self) -> i64 {
        self.lock().now_ms
    }

    /// Moves virtual time forward by `ms` and fires what fell due: open transactions past
    /// their timeout are aborted (epoch bumped), members past their session timeout are
    /// removed (rebalance), a broker pause that ran out ends.
    pub fn advance(&self, ms: i64) {
        self.lock().advance(ms);
    }

    /// Oracle: every record a `read_committed` consumer could ever read from the partition
    /// (committed transactions and non-transactional records, from the log start).
    pub fn committed_records(&self, topic: &str, partition: i32) -> Vec<Record> {
        self.lock()
            .log(topic, partition)
            .map(PartitionLog::committed_records)
            .unwrap_or_default()
    }

    /// Oracle: every data record in the partition from the log start, including those of
    /// open and aborted transactions (never markers).
    pub fn all_records(&self, topic: &str, partition: i32) -> Vec<Record> {
        self.lock()
            .log(topic, partition)
            .map(PartitionLog::all_records)
            .unwrap_or_default()
    }

    /// Oracle: the partition's log start offset.
    pub fn log_start_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.lock()
            .log(topic, partition)
            .ok()
            .map(PartitionLog::log_start)
    }

    /// Oracle: the partition's high watermark (its log end offset: no replication).
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.lock()
            .log(topic, partition)
            .ok()
            .map(PartitionLog::high_watermark)
    }

    /// Oracle: the partition's last stable offset (first offset of its earliest open
    /// transaction, else the high watermark).
    pub fn last_stable_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.lock()
            .log(topic, partition)
            .ok()
            .map(PartitionLog::last_stable)
    }

    /// Oracle: the group's committed offsets (transactional ones only once committed).
    pub fn group_offsets(&self, group: &str) -> BTreeMap<TopicPartition, i64> {
        self.lock()
            .groups
            .get(group)
            .map(|g| g.committed_all().clone())
            .unwrap_or_default()
    }
}
