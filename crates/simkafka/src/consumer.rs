//! The consumer: group membership through `poll`, fetch positions, isolation, offsets.
//!
//! Modelled: subscription-based group membership (join, rebalance events, static
//! membership, expiry), fetch positions starting at the group's committed offset or the
//! reset policy, `read_committed`/`read_uncommitted` fetches, pause/resume, seek, offset
//! commits with the generation check, `committed` with `require_stable` (KIP-447), and
//! `max.poll.records`.
//!
//! A fetch position outside `[log start, high watermark]` (after `delete_records`, or a seek
//! past the end) is reset by `auto_offset_reset`: `Earliest` to the log start, `Latest` to
//! the end (the LSO for `read_committed`); with `AutoOffsetReset::None` the partition is
//! skipped and `OffsetOutOfRange` is reported for it in [`Poll::errors`] until the caller
//! seeks.
//!
//! Not modelled: manual `assign()`, fetch sessions and prefetching (a poll reads the log as
//! it is at that moment), `max.poll.interval.ms` (polls are the heartbeats), offset metadata,
//! and the KIP-848 protocol. Dropping a consumer without `close` is a crash: its member stays
//! until its session times out.

use std::collections::{BTreeMap, BTreeSet};

use crate::faults::ClientKind;
use crate::{Call, Cluster, Fault, Record, SimError, TopicPartition};

/// Which records a consumer sees: exists because exactly-once depends on `read_committed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Only committed transactional data (and non-transactional data), up to the LSO.
    #[default]
    ReadCommitted,
    /// Everything up to the high watermark, aborted and open transactions included.
    ReadUncommitted,
}

/// The rebalance protocol of a group's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RebalanceProtocol {
    /// Every rebalance revokes every partition of every member first.
    #[default]
    Eager,
    /// Incremental (KIP-429): only moving partitions are revoked, then assigned to their new
    /// owner after the old owner has revoked them.
    Cooperative,
}

/// Where a partition without a usable position starts (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// The log start offset.
    Earliest,
    /// The end of the log (the LSO for `read_committed`).
    #[default]
    Latest,
    /// No reset: `OffsetOutOfRange` is reported for the partition.
    None,
}

/// Consumer settings: exists to choose the group, isolation and rebalance behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// `group.id`.
    pub group_id: String,
    /// `isolation.level` (default `ReadCommitted`).
    pub isolation: Isolation,
    /// `group.instance.id`: static membership.
    pub group_instance_id: Option<String>,
    /// The rebalance protocol (default `Eager`).
    pub protocol: RebalanceProtocol,
    /// `session.timeout.ms`: a member that does not poll for longer is removed.
    pub session_timeout_ms: i64,
    /// `auto.offset.reset` (default `Latest`, as in Kafka).
    pub auto_offset_reset: AutoOffsetReset,
    /// `max.poll.records`.
    pub max_poll_records: usize,
    /// `client.id`: names the client in the trace, in scripted faults and in member ids
    /// (empty: `consumer-N`).
    pub client_id: String,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            group_id: String::new(),
            isolation: Isolation::ReadCommitted,
            group_instance_id: None,
            protocol: RebalanceProtocol::Eager,
            session_timeout_ms: 45_000,
            auto_offset_reset: AutoOffsetReset::Latest,
            max_poll_records: 500,
            client_id: String::new(),
        }
    }
}

/// A change of the consumer's partitions, reported by `poll` in the order the rebalance
/// listener callbacks would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// The partitions are taken away: commit their work now (the generation still accepts
    /// commits until the rebalance completes).
    Revoked(Vec<TopicPartition>),
    /// The partitions are given (eager: the whole new assignment, once per generation;
    /// cooperative: only the added ones).
    Assigned(Vec<TopicPartition>),
    /// The member was removed (its session expired) and the partitions already belong to
    /// someone else: do not commit their work. The consumer rejoins as a new member.
    Lost(Vec<TopicPartition>),
}

/// What one `poll` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Poll {
    /// Group changes, to apply before the records.
    pub events: Vec<GroupEvent>,
    /// The records fetched, partition by partition in offset order.
    pub records: Vec<Record>,
    /// Partitions skipped by this poll and why (injected fetch errors, offsets out of range
    /// with no reset policy); their positions did not move.
    pub errors: Vec<(TopicPartition, SimError)>,
}

/// The consumer's group identity for KIP-447 fencing of `send_offsets_to_transaction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group.
    pub group_id: String,
    /// The generation the member last joined (−1: no check).
    pub generation_id: i32,
    /// The member id ("" with generation −1).
    pub member_id: String,
    /// The static instance id, if any.
    pub group_instance_id: Option<String>,
}

impl GroupMetadata {
    /// Metadata naming only the group: offsets sent with it are not fenced (the pre-KIP-447
    /// API).
    pub fn unfenced(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_owned(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// A consumer client in a group.
#[derive(Debug)]
pub struct Consumer {
    cluster: Cluster,
    client: String,
    config: ConsumerConfig,
    subscription: BTreeSet<String>,
    member_id: Option<String>,
    generation: i32,
    /// Assigned partitions and their fetch positions (`None`: not resolved yet).
    positions: BTreeMap<TopicPartition, Option<i64>>,
    paused: BTreeSet<TopicPartition>,
    /// Rotates the partition a fetch starts with, so `max_poll_records` starves none.
    rotation: usize,
}

impl Consumer {
    pub(crate) fn new(cluster: Cluster, config: ConsumerConfig) -> Self {
        let client = cluster.lock().client_name(&config.client_id, "consumer");
        Self {
            cluster,
            client,
            config,
            subscription: BTreeSet::new(),
            member_id: None,
            generation: -1,
            positions: BTreeMap::new(),
            paused: BTreeSet::new(),
            rotation: 0,
        }
    }

    /// The client's name in the trace and member ids.
    pub fn client_id(&self) -> &str {
        &self.client
    }

    fn kind(&self) -> ClientKind {
        if self.member_id.is_some() {
            ClientKind::GroupMember
        } else {
            ClientKind::Consumer
        }
    }

    /// Subscribes to `topics` (replacing the subscription); the group learns of it at the
    /// next poll.
    pub fn subscribe(&mut self, topics: &[&str]) {
        self.subscription = topics.iter().map(|t| (*t).to_owned()).collect();
    }

    /// Drops the subscription and leaves the group (a static member does not leave: its
    /// partitions wait for its session timeout, as in Kafka).
    pub fn unsubscribe(&mut self) {
        self.leave();
        self.subscription.clear();
    }

    fn leave(&mut self) {
        if let Some(member_id) = self.member_id.take() {
            if self.config.group_instance_id.is_none() {
                let mut state = self.cluster.lock();
                if let Some(group) = state.groups.get_mut(&self.config.group_id) {
                    group.remove(&member_id);
                }
            }
        }
        self.positions.clear();
        self.paused.clear();
        self.generation = -1;
    }

    /// Closes the consumer: a dynamic member leaves its group (a rebalance starts at once);
    /// a static member stays until its session times out.
    pub fn close(mut self) {
        self.leave();
    }

    /// Joins or rejoins the group, delivers rebalance events and fetches records.
    pub fn poll(&mut self) -> Result<Poll, SimError> {
        if self.subscription.is_empty() {
            return Err(SimError::InvalidRequest(format!(
                "{}: poll without a subscription",
                self.client
            )));
        }
        let cluster = self.cluster.clone();
        let mut state = cluster.lock();
        let assigned: Vec<TopicPartition> = self.positions.keys().cloned().collect();
        let mut skip: Option<(TopicPartition, SimError)> = None;
        match state.checkpoint(&self.client, self.kind(), Call::Poll, &assigned)? {
            None => {}
            Some(Fault::SessionExpired) => {
                if let (Some(member_id), Some(group)) = (
                    self.member_id.as_deref(),
                    state.groups.get_mut(&self.config.group_id),
                ) {
                    group.remove(member_id);
                }
            }
            Some(fault @ (Fault::NotLeader(Some(_)) | Fault::FetchError(Some(_)))) => {
                let error = fault.error(Call::Poll);
                if let Fault::NotLeader(Some(tp)) | Fault::FetchError(Some(tp)) = fault {
                    skip = Some((tp, error));
                }
            }
            Some(other) => return Err(other.error(Call::Poll)),
        }
        let mut poll = Poll::default();
        self.group_step(&mut state, &mut poll.events)?;
        self.fetch(&state, skip, &mut poll);
        Ok(poll)
    }

    fn group_step(
        &mut self,
        state: &mut crate::cluster::State,
        events: &mut Vec<GroupEvent>,
    ) -> Result<(), SimError> {
        let counts = state.partition_counts();
        let now = state.now_ms;
        let group = state.group_mut(&self.config.group_id);
        if let Some(member_id) = &self.member_id {
            match group.standing(member_id) {
                crate::group::Standing::Active => {}
                crate::group::Standing::Fenced => {
                    return Err(SimError::FencedInstanceId(format!(
                        "{}: member {member_id} replaced by a newer instance",
                        self.client
                    )))
                }
                crate::group::Standing::Gone => {
                    let lost: Vec<TopicPartition> = self.positions.keys().cloned().collect();
                    if !lost.is_empty() {
                        events.push(GroupEvent::Lost(lost));
                    }
                    self.positions.clear();
                    self.paused.clear();
                    self.member_id = None;
                    self.generation = -1;
                }
            }
        }
        let member_id = match &self.member_id {
            Some(id) => {
                group.resubscribe(id, &self.subscription);
                id.clone()
            }
            None => {
                let id = group.join(&crate::group::JoinRequest {
                    instance_id: self.config.group_instance_id.as_deref(),
                    client_id: &self.client,
                    subscription: &self.subscription,
                    protocol: self.config.protocol,
                    session_timeout_ms: self.config.session_timeout_ms,
                    now_ms: now,
                })?;
                self.member_id = Some(id.clone());
                id
            }
        };
        group.heartbeat(&member_id, now);
        group.check_metadata(&counts);
        let sync = group.sync(&member_id, &counts);
        self.generation = group.generation_of(&member_id);
        let revoked: Vec<TopicPartition> = sync
            .revoked
            .into_iter()
            .filter(|tp| self.positions.contains_key(tp))
            .collect();
        if !revoked.is_empty() {
            for tp in &revoked {
                self.positions.remove(tp);
                self.paused.remove(tp);
            }
            events.push(GroupEvent::Revoked(revoked));
        }
        if let Some(assigned) = sync.assigned {
            for tp in &assigned {
                self.positions.insert(tp.clone(), None);
            }
            events.push(GroupEvent::Assigned(assigned));
        }
        let unresolved: Vec<TopicPartition> = self
            .positions
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in unresolved {
            let position = self.start_position(state, &tp);
            self.positions.insert(tp, position);
        }
        Ok(())
    }

    /// The group's committed offset, else the reset policy; `None` while a transaction holds
    /// offsets for the partition (a `read_committed` consumer waits for it to end).
    fn start_position(&self, state: &crate::cluster::State, tp: &TopicPartition) -> Option<i64> {
        let group = state.groups.get(&self.config.group_id);
        if self.config.isolation == Isolation::ReadCommitted
            && group.is_some_and(|g| g.is_pending(tp))
        {
            return None;
        }
        match group.and_then(|g| g.committed(tp)) {
            Some(offset) => Some(offset),
            None => self.reset_position(state, tp),
        }
    }

    fn reset_position(&self, state: &crate::cluster::State, tp: &TopicPartition) -> Option<i64> {
        let log = state.log(&tp.0, tp.1).ok()?;
        match (self.config.auto_offset_reset, self.config.isolation) {
            (AutoOffsetReset::Earliest, _) => Some(log.log_start()),
            (AutoOffsetReset::Latest, Isolation::ReadCommitted) => Some(log.last_stable()),
            (AutoOffsetReset::Latest, Isolation::ReadUncommitted) => Some(log.high_watermark()),
            (AutoOffsetReset::None, _) => None,
        }
    }

    fn fetch(
        &mut self,
        state: &crate::cluster::State,
        skip: Option<(TopicPartition, SimError)>,
        poll: &mut Poll,
    ) {
        let mut order: Vec<TopicPartition> = self
            .positions
            .keys()
            .filter(|tp| !self.paused.contains(*tp))
            .cloned()
            .collect();
        if order.is_empty() {
            return;
        }
        let start = self.rotation % order.len();
        order.rotate_left(start);
        self.rotation = self.rotation.wrapping_add(1);
        let mut budget = self.config.max_poll_records;
        for tp in order {
            if budget == 0 {
                break;
            }
            if let Some((skipped, error)) = &skip {
                if *skipped == tp {
                    poll.errors.push((tp, error.clone()));
                    continue;
                }
            }
            let position = match self.positions.get(&tp).copied().flatten() {
                Some(p) => Some(p),
                None => self.start_position(state, &tp),
            };
            let Some(mut position) = position else {
                if self.config.auto_offset_reset == AutoOffsetReset::None
                    && !state
                        .groups
                        .get(&self.config.group_id)
                        .is_some_and(|g| g.is_pending(&tp))
                {
                    poll.errors.push((
                        tp.clone(),
                        SimError::OffsetOutOfRange(format!("{}-{}: no position", tp.0, tp.1)),
                    ));
                }
                continue;
            };
            let Ok(log) = state.log(&tp.0, tp.1) else {
                continue;
            };
            if position < log.log_start() || position > log.high_watermark() {
                match self.reset_position(state, &tp) {
                    Some(p) => position = p,
                    None => {
                        poll.errors.push((
                            tp.clone(),
                            SimError::OffsetOutOfRange(format!(
                                "{}-{}: position {position} outside [{}, {}]",
                                tp.0,
                                tp.1,
                                log.log_start(),
                                log.high_watermark()
                            )),
                        ));
                        continue;
                    }
                }
            }
            let (records, next) = log.read(position, self.config.isolation, budget);
            budget -= records.len();
            poll.records.extend(records);
            self.positions.insert(tp, Some(next));
        }
    }

    /// The next offset `poll` will fetch from for an assigned partition (`None` if it is not
    /// assigned or its start position is not known yet).
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.positions
            .get(&(topic.to_owned(), partition))
            .copied()
            .flatten()
    }

    /// The partitions this consumer owns now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.positions.keys().cloned().collect()
    }

    /// Moves fetch positions; one result per partition (a partition not assigned, or hit by
    /// an injected `SeekFailed`, reports an error and keeps its position).
    pub fn seek(&mut self, offsets: &[(String, i32, i64)]) -> crate::PartitionResults<()> {
        let tps: Vec<TopicPartition> = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
        let fault = {
            let mut state = self.cluster.lock();
            state.checkpoint(&self.client, self.kind(), Call::Seek, &tps)
        };
        let (failed, all) = match fault {
            Ok(None) => (None, None),
            Ok(Some(Fault::SeekFailed(Some(tp)))) => {
                let error = SimError::RequestTimedOut { call: Call::Seek };
                (Some((tp, error)), None)
            }
            Ok(Some(other)) => (None, Some(other.error(Call::Seek))),
            Err(e) => (None, Some(e)),
        };
        offsets
            .iter()
            .map(|(topic, partition, offset)| {
                let tp = (topic.clone(), *partition);
                let result = if let Some(e) = &all {
                    Err(e.clone())
                } else if let Some((_, e)) = failed.as_ref().filter(|(f, _)| *f == tp) {
                    Err(e.clone())
                } else if let Some(position) = self.positions.get_mut(&tp) {
                    *position = Some(*offset);
                    Ok(())
                } else {
                    Err(SimError::InvalidRequest(format!(
                        "{topic}-{partition}: seek on a partition not assigned"
                    )))
                };
                (tp, result)
            })
            .collect()
    }

    /// Stops fetching from these assigned partitions (others are ignored) until `resume`.
    pub fn pause(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            if self.positions.contains_key(tp) {
                self.paused.insert(tp.clone());
            }
        }
    }

    /// Fetches from these partitions again.
    pub fn resume(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.paused.remove(tp);
        }
    }

    /// The partitions paused now.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.paused.iter().cloned().collect()
    }

    /// The group's committed offsets for `partitions`. With `require_stable`, a partition
    /// whose offsets an open transaction holds fails the call with the retriable
    /// `UnstableOffsetCommit` (KIP-447).
    pub fn committed(
        &mut self,
        partitions: &[TopicPartition],
        require_stable: bool,
    ) -> Result<Vec<(TopicPartition, Option<i64>)>, SimError> {
        let mut state = self.cluster.lock();
        if let Some(fault) =
            state.checkpoint(&self.client, self.kind(), Call::Committed, partitions)?
        {
            return Err(fault.error(Call::Committed));
        }
        let group = state.groups.get(&self.config.group_id);
        if require_stable {
            if let Some(tp) = partitions
                .iter()
                .find(|tp| group.is_some_and(|g| g.is_pending(tp)))
            {
                return Err(SimError::UnstableOffsetCommit(format!(
                    "{}-{}: a transaction holding offsets is open",
                    tp.0, tp.1
                )));
            }
        }
        Ok(partitions
            .iter()
            .map(|tp| (tp.clone(), group.and_then(|g| g.committed(tp))))
            .collect())
    }

    /// Commits offsets outside a transaction, checked against this member's generation
    /// (`IllegalGeneration` once the group moved on, `UnknownMemberId` once removed).
    pub fn commit(&mut self, offsets: &[(String, i32, i64)]) -> Result<(), SimError> {
        let cluster = self.cluster.clone();
        let mut state = cluster.lock();
        let offsets: Vec<(TopicPartition, i64)> = offsets
            .iter()
            .map(|(t, p, o)| ((t.clone(), *p), *o))
            .collect();
        let tps: Vec<TopicPartition> = offsets.iter().map(|(tp, _)| tp.clone()).collect();
        let after_effect = match state.checkpoint(&self.client, self.kind(), Call::Commit, &tps)? {
            None => false,
            Some(Fault::TimeoutAfterEffect) => true,
            Some(Fault::SessionExpired) => {
                if let (Some(member_id), Some(group)) = (
                    self.member_id.as_deref(),
                    state.groups.get_mut(&self.config.group_id),
                ) {
                    group.remove(member_id);
                }
                false
            }
            Some(other) => return Err(other.error(Call::Commit)),
        };
        let member_id = self.member_id.clone().unwrap_or_default();
        let generation = if self.member_id.is_some() {
            self.generation
        } else {
            -1
        };
        let group = state.group_mut(&self.config.group_id);
        group.check_member(
            &member_id,
            self.config
                .group_instance_id
                .as_deref()
                .filter(|_| !member_id.is_empty()),
            generation,
        )?;
        group.commit(&offsets);
        if after_effect {
            return Err(SimError::RequestTimedOut { call: Call::Commit });
        }
        Ok(())
    }

    /// This member's identity for `send_offsets_to_transaction`; `None` before it joined.
    pub fn group_metadata(&self) -> Option<GroupMetadata> {
        self.member_id.as_ref().map(|member_id| GroupMetadata {
            group_id: self.config.group_id.clone(),
            generation_id: self.generation,
            member_id: member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
        })
    }

    /// The partition's log start offset and high watermark (a `ListOffsets` call).
    pub fn watermarks(&mut self, topic: &str, partition: i32) -> Result<(i64, i64), SimError> {
        let mut state = self.cluster.lock();
        let tp = (topic.to_owned(), partition);
        if let Some(fault) = state.checkpoint(
            &self.client,
            self.kind(),
            Call::ListOffsets,
            std::slice::from_ref(&tp),
        )? {
            return Err(fault.error(Call::ListOffsets));
        }
        let log = state.log(topic, partition)?;
        Ok((log.log_start(), log.high_watermark()))
    }
}
