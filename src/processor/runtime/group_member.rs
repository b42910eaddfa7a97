//! The group member (Kafka Streams' consumer side of a `StreamThread`): the loop's group
//! consumer, what the group assigned it, and the protocol it joined with.
//!
//! # What it owns
//! - The consumer, its rebalance callbacks ([`GroupEvent`]s, acted on by the loop right after
//!   `poll`) and the offsets this member committed through its transactions (for lag).
//! - The assignment: complete partition numbers ([`Assignment`]), the pairs still waiting for the
//!   rest of their number under the consumer protocol, and retry levels paused until due.
//! - The fall-back from the consumer protocol to the classic one when the broker refuses it.
//!
//! Every question the loop asks the group — committed offsets (stable, KIP-447), positions,
//! a partition's last stable offset, the group metadata a transaction commits with — is
//! answered here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata, Rebalance,
};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::{faults, RuntimeError, RuntimeOptions};
use crate::clock::now_ms;
use crate::config::GroupProtocol;
use crate::kafka::{ClientRole, KafkaClients};
use crate::retry::headers as retry_headers;
use crate::telemetry::{self, Health};

#[derive(Debug)]
pub(super) enum GroupEvent {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

/// Records rebalances as they happen inside `poll`; the loop acts on them right after.
#[derive(Default)]
struct GroupContext {
    events: Mutex<Vec<GroupEvent>>,
    /// Next offsets this instance committed through its transactions: librdkafka's own
    /// `consumer_lag` only knows offsets committed by the consumer, never transactional ones.
    committed: Mutex<HashMap<(String, i32), i64>>,
}

fn tpl_pairs(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl GroupContext {
    fn push(&self, e: GroupEvent) {
        if let Ok(mut events) = self.events.lock() {
            events.push(e);
        }
    }
    fn take(&self) -> Vec<GroupEvent> {
        self.events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }
}

impl ClientContext for GroupContext {
    fn stats(&self, stats: rdkafka::Statistics) {
        let Ok(committed) = self.committed.lock() else {
            return;
        };
        for (topic, t) in &stats.topics {
            for (id, part) in &t.partitions {
                // Only partitions this member consumes: another processing thread of the
                // instance reports its own, and a partition this one lost keeps stale figures.
                if *id < 0 || part.hi_offset < 0 || !part.desired {
                    continue;
                }
                let ours = committed.get(&(topic.clone(), *id)).copied().unwrap_or(-1);
                let at = ours.max(part.committed_offset);
                if at >= 0 {
                    telemetry::consumer_lag(topic, *id, (part.hi_offset - at).max(0));
                }
            }
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.push(GroupEvent::Revoked(tpl_pairs(tpl)));
        }
    }
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self.push(GroupEvent::Assigned(tpl_pairs(tpl))),
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
            Rebalance::Revoke(_) => {}
        }
    }
}

/// The (topic, partition) pairs this member owns, by partition, with each topic's retry level
/// (0: an input): asked once per polled record, so it answers from a borrowed topic name
/// without building a key or parsing the name again.
#[derive(Debug, Default)]
struct Assignment(BTreeMap<i32, BTreeMap<String, u32>>);

impl Assignment {
    fn contains(&self, topic: &str, partition: i32) -> bool {
        self.level(topic, partition).is_some()
    }
    /// The retry level of an owned pair; `None` if it is not ours.
    fn level(&self, topic: &str, partition: i32) -> Option<u32> {
        self.0.get(&partition)?.get(topic).copied()
    }
    fn insert(&mut self, topic: String, partition: i32) {
        let level = crate::retry::base_and_level(&topic).1;
        self.0.entry(partition).or_default().insert(topic, level);
    }
    fn remove(&mut self, topic: &str, partition: i32) {
        if let Some(ts) = self.0.get_mut(&partition) {
            ts.remove(topic);
            if ts.is_empty() {
                self.0.remove(&partition);
            }
        }
    }
    /// Partition numbers with at least one topic assigned (their tasks stay open).
    fn partitions(&self) -> BTreeSet<i32> {
        self.0.keys().copied().collect()
    }
}

/// Partition counts of `topics`, as the broker knows them (absent: unknown topic).
fn partition_counts(
    consumer: &BaseConsumer<GroupContext>,
    topics: &[String],
) -> Result<BTreeMap<String, usize>, KafkaError> {
    let md = consumer.fetch_metadata(None, Duration::from_secs(30))?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && topics.iter().any(|n| n == t.name()))
        .map(|t| (t.name().to_string(), t.partitions().len()))
        .collect())
}

/// Fails unless every topic in `counts` has the same partition count, naming each count.
fn check_copartitioned(counts: &BTreeMap<String, usize>) -> Result<(), RuntimeError> {
    let distinct: BTreeSet<usize> = counts.values().copied().collect();
    if distinct.len() <= 1 {
        return Ok(());
    }
    let listed: Vec<String> = counts.iter().map(|(t, n)| format!("{t}={n}")).collect();
    Err(RuntimeError::CoPartitioning(format!(
        "partition counts differ: {}; an input's .retry.<n> levels, its .DLT and the changelog must have the input's partition count (partition i of each holds the same keys and is processed by one task): recreate or extend the odd ones (`eosflow topics plan` shows them) before starting",
        listed.join(", ")
    )))
}

/// How long a partition number may stay partly assigned under the consumer protocol (some of
/// its topics given, others still being released by their previous owner) before the
/// assignment is refused as not co-partitioned.
const PARTIAL_ASSIGNMENT_LIMIT: Duration = Duration::from_secs(60);

/// How the member joins the group: what [`GroupMember::connect`] and the fall-back to the
/// classic protocol build the consumer from.
struct Membership {
    group: String,
    session_timeout: Duration,
    /// `group.instance.id` under static membership.
    instance: Option<String>,
    /// `client.id` naming the instance for the standby placement (with standbys).
    client_id: Option<String>,
    protocol: GroupProtocol,
}

impl Membership {
    /// The loop's group consumer, with this membership's protocol.
    fn consumer(&self, clients: &KafkaClients) -> Result<BaseConsumer<GroupContext>, KafkaError> {
        let mut group_config = clients.config(ClientRole::GroupConsumer {
            group: &self.group,
            session_timeout: self.session_timeout,
            instance: self.instance.as_deref(),
        });
        if let Some(id) = &self.client_id {
            // How the standby placement finds this instance among the group's members.
            group_config.set("client.id", id);
        }
        if self.protocol == GroupProtocol::Consumer {
            crate::kafka::client::consumer_protocol(&mut group_config);
        }
        group_config.create_with_context(GroupContext::default())
    }
}

/// What one `poll` gave the loop.
pub(super) enum Polled {
    /// A record (not yet checked against the assignment: see [`GroupMember::admit`]).
    Record(OwnedMessage),
    /// Nothing (the deadline passed, or a consumer error that was logged).
    Nothing,
    /// The broker refused the consumer protocol and the member joined again with the classic
    /// one: nothing processed under the refused membership survives, every task must close.
    Rejoined,
}

/// The loop's member of the application's consumer group.
pub(super) struct GroupMember {
    clients: KafkaClients,
    consumer: BaseConsumer<GroupContext>,
    membership: Membership,
    /// Named in the error when a process with this instance's id takes over.
    transactional_id: String,
    exactly_once: bool,
    restore_timeout: Duration,
    /// The topics subscribed to (inputs, their retry levels, tables).
    subscription: Vec<String>,
    /// Every topic of one partition index (inputs, retry levels, DLTs, changelogs, tables).
    copartitioned: Vec<String>,
    /// Their partition count, once read.
    partitions: Option<usize>,
    assigned: Assignment,
    /// Under the consumer protocol: (topic, partition) pairs assigned while other topics of
    /// their partition number are still being released by their previous owner. Paused, and
    /// not processed until the number is complete.
    incoming: Assignment,
    /// Since when each partly assigned partition number has waited for the rest.
    incomplete_since: BTreeMap<i32, Instant>,
    /// Retry-level partitions paused until their head record is due (ms).
    paused: BTreeMap<(String, i32), i64>,
    /// Partitions paused by [`GroupMember::hold`] until [`GroupMember::release`].
    held: BTreeSet<(String, i32)>,
    /// Partitions whose last seek failed: paused, none of their records admitted (so no
    /// transaction commits an offset for them), and sought again until a seek succeeds.
    unseeked: BTreeMap<(String, i32), FailedSeek>,
    /// The application id, for the test faults.
    app_id: String,
}

/// A seek that failed, to be tried again.
#[derive(Debug, Clone, Copy)]
struct FailedSeek {
    /// Where the partition must be moved before it is read again.
    to: Offset,
    /// Failed attempts so far.
    attempts: u32,
    /// When to try again.
    next_at: Instant,
}

/// How long one seek may take.
const SEEK_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before a failed seek is tried again, doubled after each failure up to
/// [`SEEK_BACKOFF_MAX`].
const SEEK_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two attempts of a failing seek.
const SEEK_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The wait before attempt `attempts + 1` of a failing seek.
fn seek_backoff(attempts: u32) -> Duration {
    SEEK_BACKOFF_MIN
        .saturating_mul(1u32 << attempts.saturating_sub(1).min(16))
        .min(SEEK_BACKOFF_MAX)
}

/// The (topic, partition) pairs of `tpl` whose entry in a librdkafka answer carries an error,
/// with it: calls on a list (seek, pause, resume, committed offsets) succeed as a whole and
/// report each partition's failure in its own entry.
fn failed_entries(tpl: &TopicPartitionList) -> Vec<(String, i32, KafkaError)> {
    tpl.elements()
        .iter()
        .filter_map(|e| {
            e.error()
                .err()
                .map(|err| (e.topic().to_string(), e.partition(), err))
        })
        .collect()
}

impl GroupMember {
    /// Creates the group consumer of `opts` (not subscribed yet: see [`GroupMember::subscribe`]).
    pub(super) fn connect(
        clients: &KafkaClients,
        opts: &RuntimeOptions,
    ) -> Result<Self, KafkaError> {
        let membership = Membership {
            group: opts.app_id.clone(),
            session_timeout: opts.session_timeout,
            instance: opts.static_membership.then(|| opts.member_instance_id()),
            // Always named: the standby placement and interactive queries' routing find the
            // instance among the group's members by it.
            client_id: Some(crate::processor::standby::client_id(&opts.instance_id)),
            protocol: opts.group_protocol,
        };
        Ok(Self {
            consumer: membership.consumer(clients)?,
            clients: clients.clone(),
            membership,
            transactional_id: opts.transactional_id(),
            exactly_once: opts.exactly_once,
            restore_timeout: opts.restore_timeout,
            subscription: Vec::new(),
            copartitioned: Vec::new(),
            partitions: None,
            assigned: Assignment::default(),
            incoming: Assignment::default(),
            incomplete_since: BTreeMap::new(),
            paused: BTreeMap::new(),
            held: BTreeSet::new(),
            unseeked: BTreeMap::new(),
            app_id: opts.app_id.clone(),
        })
    }

    /// Partition counts of those of `topics` the broker knows (metadata only: no admin call).
    pub(super) fn partition_counts(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, usize>, KafkaError> {
        partition_counts(&self.consumer, topics)
    }

    /// Every topic the broker knows (metadata only): the start checks the topics it needs
    /// against them, and looks among them for changelogs of stores the topology no longer has
    /// ([`super::internal_topics::warn_orphaned_changelogs`]).
    pub(super) fn topic_names(&self, timeout: Duration) -> Result<Vec<String>, KafkaError> {
        let md = self.consumer.fetch_metadata(None, timeout)?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.name().to_string())
            .collect())
    }

    /// The ids of the consumer groups the broker knows (ListGroups): an application id is its
    /// group, so a changelog named after a longer (or shorter) id that has a group is that
    /// application's, not an orphan of this one.
    pub(super) fn group_names(&self, timeout: Duration) -> Result<BTreeSet<String>, KafkaError> {
        let groups = self.consumer.fetch_group_list(None, timeout)?;
        Ok(groups
            .groups()
            .iter()
            .map(|g| g.name().to_string())
            .collect())
    }

    /// Sets the topics the member subscribes to and those that must share one partition count
    /// (checked now, and again at every assignment).
    pub(super) fn set_topics(
        &mut self,
        subscription: Vec<String>,
        copartitioned: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let counts = partition_counts(&self.consumer, &copartitioned)?;
        check_copartitioned(&counts)?;
        self.partitions = counts.values().next().copied();
        self.subscription = subscription;
        self.copartitioned = copartitioned;
        Ok(())
    }

    /// The inputs' partition count (one for every co-partitioned topic), once read.
    pub(super) fn partitions(&self) -> Option<usize> {
        self.partitions
    }

    /// Joins the group.
    pub(super) fn subscribe(&self) -> Result<(), KafkaError> {
        let topics: Vec<&str> = self.subscription.iter().map(String::as_str).collect();
        self.consumer.subscribe(&topics)
    }

    /// Leaves the group (at-least-once commits its last offsets first, waiting for the
    /// coordinator, so a clean stop repeats nothing).
    pub(super) fn leave(&self) {
        if !self.exactly_once {
            self.commit_offsets_sync();
        }
        self.consumer.unsubscribe();
    }

    fn commit_offsets_sync(&self) {
        let mut tpl = TopicPartitionList::new();
        if let Ok(committed) = self.consumer.context().committed.lock() {
            for ((t, p), o) in committed.iter() {
                if self.assigned.contains(t, *p) {
                    let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*o));
                }
            }
        }
        if tpl.count() > 0 {
            if let Err(e) = self
                .consumer
                .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
            {
                tracing::warn!(error = %e, "committing the last offsets at shutdown; their records will be read again");
            }
        }
    }

    /// Polls one record for at most `left`. Rebalances happen inside: take them with
    /// [`GroupMember::take_events`] right after.
    pub(super) fn poll(&mut self, left: Duration) -> Result<Polled, RuntimeError> {
        match self.consumer.poll(left).map(|r| r.map(|m| m.detach())) {
            Some(Ok(m)) => Ok(Polled::Record(m)),
            Some(Err(e)) => {
                if let Some((code, reason)) = self.consumer.client().fatal_error() {
                    if self.refused_protocol(code) {
                        self.fall_back_to_classic(&reason)?;
                        return Ok(Polled::Rejoined);
                    }
                    // FENCED_INSTANCE_ID: a process with this instance id joined the group.
                    return Err(RuntimeError::Superseded {
                        id: self.transactional_id.clone(),
                        reason: format!("the group fenced this consumer ({code:?}: {reason})"),
                    });
                }
                tracing::warn!(error = %e, "consumer error");
                telemetry::consumer_error();
                Ok(Polled::Nothing)
            }
            None => Ok(Polled::Nothing),
        }
    }

    /// The rebalances that happened inside the last `poll`.
    pub(super) fn take_events(&self) -> Vec<GroupEvent> {
        self.consumer.context().take()
    }

    /// Whether polled record `m` goes into the batch: its pair is assigned, and if it is a
    /// retry level's, it is due (a record not due pauses its partition instead).
    /// A record of a partition whose seek failed is never admitted: the consumer may be past
    /// records not processed yet, which a commit of this one's offset would skip.
    pub(super) fn admit(&mut self, m: &OwnedMessage) -> Result<bool, RuntimeError> {
        if self.unseeked(m.topic(), m.partition()) {
            return Ok(false);
        }
        match self.assigned.level(m.topic(), m.partition()) {
            // Input topics (level 0) are never paused.
            Some(0) => Ok(true),
            Some(_) => Ok(!self.hold_if_not_due(m)?),
            None => Ok(false),
        }
    }

    /// Whether fatal error `code` is the broker refusing the consumer group protocol
    /// (KIP-848 switched off, or a broker too old for `ConsumerGroupHeartbeat` v1).
    fn refused_protocol(&self, code: rdkafka::types::RDKafkaErrorCode) -> bool {
        use rdkafka::types::RDKafkaErrorCode as C;
        self.membership.protocol == GroupProtocol::Consumer
            && matches!(code, C::UnsupportedVersion | C::UnsupportedFeature)
    }

    /// Rejoins with the classic protocol after the broker refused the consumer protocol: the
    /// instance keeps working on an older broker, and says so.
    fn fall_back_to_classic(&mut self, reason: &str) -> Result<(), RuntimeError> {
        tracing::error!(
            %reason,
            "the broker refuses processor.group_protocol = \"consumer\" (KIP-848 needs Kafka ≥ 4.0 with the consumer protocol enabled); falling back to the classic protocol"
        );
        telemetry::consumer_error();
        self.membership.protocol = GroupProtocol::Classic;
        let consumer = self.membership.consumer(&self.clients)?;
        let topics: Vec<&str> = self.subscription.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        self.assigned = Assignment::default();
        self.incoming = Assignment::default();
        self.incomplete_since.clear();
        self.paused.clear();
        self.held.clear();
        // The new consumer starts from the group's committed offsets.
        self.unseeked.clear();
        self.consumer = consumer;
        Ok(())
    }

    /// Forgets `parts` (revoked): they are no longer this member's, waiting or paused. Returns
    /// the partition numbers still assigned (their tasks stay open).
    pub(super) fn revoke(&mut self, parts: &[(String, i32)]) -> BTreeSet<i32> {
        for p in parts {
            self.assigned.remove(&p.0, p.1);
            self.incoming.remove(&p.0, p.1);
            self.paused.remove(p);
            self.held.remove(p);
            // Its next owner starts from the group's committed offset.
            self.unseeked.remove(p);
        }
        let waiting = self.incoming.partitions();
        self.incomplete_since.retain(|p, _| waiting.contains(p));
        self.assigned.partitions()
    }

    /// Whether `topic[partition]` is assigned to this member.
    pub(super) fn owns(&self, topic: &str, partition: i32) -> bool {
        self.assigned.contains(topic, partition)
    }

    /// Holds `parts` paused (complete, their tasks still to open; or records held for
    /// timestamp alignment): no record of theirs is fetched until [`GroupMember::take`] or
    /// [`GroupMember::release`] resumes them, nor when a failed seek of theirs succeeds
    /// meanwhile.
    pub(super) fn hold(&mut self, parts: &[(String, i32)]) -> Result<(), RuntimeError> {
        if parts.is_empty() {
            return Ok(());
        }
        self.held.extend(parts.iter().cloned());
        self.pause(parts.iter())
    }

    /// Resumes `parts` that [`GroupMember::hold`] paused for a batch (records held for
    /// timestamp alignment); a pair revoked meanwhile is not assigned any more and is skipped.
    pub(super) fn release(&mut self, parts: &[(String, i32)]) {
        for p in parts {
            self.held.remove(p);
        }
        let resumable: Vec<&(String, i32)> = parts
            .iter()
            .filter(|(t, p)| self.owns(t, *p) && !self.unseeked(t, *p))
            .collect();
        self.resume(
            resumable,
            "resuming partitions held for timestamp alignment",
        );
    }

    /// Resumes `parts`, logging (as `what`) a failure of the call or of a partition's entry: a
    /// partition left paused shows as its lag growing.
    fn resume<'p>(&self, parts: impl IntoIterator<Item = &'p (String, i32)>, what: &str) {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in parts {
            tpl.add_partition(t, *p);
        }
        if tpl.count() == 0 {
            return;
        }
        if let Err(e) = self.consumer.resume(&tpl) {
            tracing::warn!(error = %e, "{what}");
            return;
        }
        for (topic, partition, e) in failed_entries(&tpl) {
            tracing::warn!(topic, partition, error = %e, "{what}: this partition was not resumed");
        }
    }

    /// Pauses `parts`. A partition's own failure in the answer means the consumer does not
    /// know it (not assigned any more), so it fetches nothing of it anyway: logged only.
    fn pause<'p>(
        &self,
        parts: impl IntoIterator<Item = &'p (String, i32)>,
    ) -> Result<(), RuntimeError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in parts {
            tpl.add_partition(t, *p);
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        self.consumer.pause(&tpl)?;
        for (topic, partition, e) in failed_entries(&tpl) {
            tracing::warn!(topic, partition, error = %e, "pausing a partition the consumer does not know");
        }
        Ok(())
    }

    /// Takes `parts` (complete, their tasks open): resumed — librdkafka keeps a partition's
    /// pause across a rebalance, and a retry level paused before must not stay paused — and
    /// processed from now on.
    /// A partition whose seek to its start failed stays paused until a seek succeeds.
    pub(super) fn take(&mut self, parts: Vec<(String, i32)>) {
        for p in &parts {
            self.paused.remove(p);
            self.held.remove(p);
        }
        let resumable: Vec<&(String, i32)> = parts
            .iter()
            .filter(|(t, p)| !self.unseeked(t, *p))
            .collect();
        self.resume(resumable, "resuming newly assigned partitions");
        for (t, p) in parts {
            self.assigned.insert(t, p);
        }
    }

    /// The topics every partition number's task needs assigned together: inputs, their
    /// retry levels, tables (the subscription).
    fn subscribed_topics(&self) -> &[String] {
        &self.subscription
    }

    /// Of the pairs just assigned and those waiting from earlier assignments, the ones whose
    /// partition number is now complete (every subscribed topic's partition `p` is here: the
    /// task's store and parked set must see the input and all its retry levels); every
    /// co-partitioned topic must also still have one partition count (a topic extended while
    /// running breaks the key → partition mapping).
    ///
    /// An incomplete number is refused under the classic protocol (its assignor hands out
    /// whole assignments). Under the consumer protocol the rest may still be on its way — its
    /// previous owner releases it — so its pairs are paused until the rest arrives, and
    /// refused only after [`GroupMember::partial_assignment_limit`].
    pub(super) fn complete_assignment(
        &mut self,
        parts: Vec<(String, i32)>,
    ) -> Result<Vec<(String, i32)>, RuntimeError> {
        for (t, p) in &parts {
            self.incoming.insert(t.clone(), *p);
        }
        let subscribed = self.subscribed_topics();
        let (mut ready, mut early, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
        let mut missing = Vec::new();
        for (p, topics) in &self.incoming.0 {
            let lacks: Vec<String> = subscribed
                .iter()
                .filter(|t| !topics.contains_key(*t) && !self.assigned.contains(t, *p))
                .map(|t| format!("{t}[{p}]"))
                .collect();
            let pairs = topics.keys().map(|t| (t.clone(), *p));
            if lacks.is_empty() {
                for pair in pairs {
                    if !parts.contains(&pair) {
                        early.push(pair.clone());
                    }
                    ready.push(pair);
                }
            } else {
                waiting.extend(pairs);
                missing.push((*p, lacks));
            }
        }
        for (t, p) in &ready {
            self.incoming.remove(t, *p);
            self.incomplete_since.remove(p);
        }
        if !missing.is_empty() {
            let numbers: Vec<i32> = missing.iter().map(|(p, _)| *p).collect();
            let lacking: Vec<String> = missing.into_iter().flat_map(|(_, l)| l).collect();
            if self.membership.protocol == GroupProtocol::Classic {
                return Err(RuntimeError::CoPartitioning(format!(
                    "the group assigned partitions {numbers:?} without {}: refusing to process them (partition counts must match; check `eosflow topics plan`)",
                    lacking.join(", ")
                )));
            }
            tracing::info!(partitions = ?numbers, waiting_for = ?lacking, "partly assigned partitions wait for the rest of their topics");
            self.pause(&waiting)?;
            let now = Instant::now();
            for p in numbers {
                self.incomplete_since.entry(p).or_insert(now);
            }
        }
        if ready.is_empty() {
            return Ok(ready);
        }
        if !early.is_empty() {
            // A record of theirs polled before the pause was dropped: read from the group's
            // committed offsets again.
            self.seek_to_committed(&early)?;
        }
        let counts = partition_counts(&self.consumer, &self.copartitioned)?;
        check_copartitioned(&counts)?;
        self.partitions = counts.values().next().copied().or(self.partitions);
        Ok(ready)
    }

    /// How long a partition number may stay partly assigned: [`PARTIAL_ASSIGNMENT_LIMIT`], and
    /// never less than the restore timeout plus a minute — a previous owner may be busy
    /// restoring (one partition after another) before its poll releases the rest.
    fn partial_assignment_limit(&self) -> Duration {
        PARTIAL_ASSIGNMENT_LIMIT.max(self.restore_timeout + Duration::from_secs(60))
    }

    /// Refuses partition numbers that stayed partly assigned past
    /// [`GroupMember::partial_assignment_limit`].
    pub(super) fn check_incomplete(&self) -> Result<(), RuntimeError> {
        if self.incomplete_since.is_empty() {
            return Ok(());
        }
        let stuck: Vec<i32> = self
            .incomplete_since
            .iter()
            .filter(|(_, since)| since.elapsed() >= self.partial_assignment_limit())
            .map(|(p, _)| *p)
            .collect();
        if stuck.is_empty() {
            return Ok(());
        }
        Err(RuntimeError::CoPartitioning(format!(
            "the group assigned only some topics of partitions {stuck:?} for {} s (have {:?}): the broker's assignor does not keep partition p of every input, retry level and table together; set the broker's group.consumer.assignors to include range (eosflow asks for group.remote.assignor=range) or use processor.group_protocol = \"classic\"",
            self.partial_assignment_limit().as_secs(),
            self.incoming.0
        )))
    }

    /// Moves the positions of `pairs` to the group's committed offsets (the earliest offset
    /// where the group has none).
    pub(super) fn seek_to_committed(
        &mut self,
        pairs: &[(String, i32)],
    ) -> Result<(), RuntimeError> {
        self.seek_committed(pairs, |_, _| true)
    }

    /// Moves each of `pairs` to the group's committed offset; one without a committed offset
    /// goes to its beginning if `from_beginning(topic, partition)`, else is left where it is.
    fn seek_committed(
        &mut self,
        pairs: &[(String, i32)],
        from_beginning: impl Fn(&str, i32) -> bool,
    ) -> Result<(), RuntimeError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in pairs {
            tpl.add_partition(t, *p);
        }
        let committed = self.committed(tpl, Duration::from_secs(10))?;
        let mut seek = TopicPartitionList::new();
        for e in committed.elements() {
            let at = match e.offset() {
                Offset::Offset(o) if o >= 0 => Offset::Offset(o),
                _ if from_beginning(e.topic(), e.partition()) => Offset::Beginning,
                _ => continue,
            };
            seek.add_partition_offset(e.topic(), e.partition(), at)?;
        }
        self.seek(seek);
        Ok(())
    }

    /// Before resuming `pairs` paused since their assignment: each one with a committed offset
    /// is moved to it, and each of `rewound` (a record of theirs was fetched and dropped
    /// while they waited) without one to its beginning. A pause right after an assignment can
    /// make librdkafka drop the assignment's start (confluentinc/librdkafka#2190, whose
    /// workaround is a seek); a pair with no committed offset and nothing dropped is left to
    /// `auto.offset.reset` (earliest), which is where it starts anyway, and whose seek to the
    /// beginning would cost an offset query per partition.
    pub(super) fn seek_to_start(
        &mut self,
        pairs: &[(String, i32)],
        rewound: &[(String, i32)],
    ) -> Result<(), RuntimeError> {
        self.seek_committed(pairs, |topic, partition| {
            rewound.iter().any(|(t, p)| t == topic && *p == partition)
        })
    }

    /// Rewinds every assigned partition of `records` to its first record there (a partition
    /// whose rewind fails stays paused until it succeeds: see [`GroupMember::seek`]).
    pub(super) fn seek_back<'m>(
        &mut self,
        records: impl Iterator<Item = &'m OwnedMessage>,
    ) -> Result<(), RuntimeError> {
        let mut first: HashMap<(String, i32), i64> = HashMap::new();
        for m in records {
            first
                .entry((m.topic().to_string(), m.partition()))
                .and_modify(|o| *o = (*o).min(m.offset()))
                .or_insert(m.offset());
        }
        let mut tpl = TopicPartitionList::new();
        for ((t, p), o) in &first {
            if self.assigned.contains(t, *p) {
                tpl.add_partition_offset(t, *p, Offset::Offset(*o))?;
            }
        }
        self.seek(tpl);
        Ok(())
    }

    /// Whether the last seek of `topic[partition]` failed (it is paused, waiting for a retry).
    fn unseeked(&self, topic: &str, partition: i32) -> bool {
        !self.unseeked.is_empty()
            && self
                .unseeked
                .keys()
                .any(|(t, p)| *p == partition && t == topic)
    }

    /// Moves each partition of `tpl` to its offset. `rd_kafka_seek_partitions` answers each
    /// partition's outcome in its own entry: a partition whose seek failed (there, or the
    /// whole call) may be left past records never processed, and a commit of its next record's
    /// offset would skip them. So it is paused, none of its records is admitted (no
    /// transaction commits an offset for it), and it is sought again with a backoff
    /// ([`GroupMember::retry_seeks`]) until a seek succeeds; then it is resumed unless
    /// something else holds it. A partition sought successfully that was waiting for a retry
    /// stops waiting.
    fn seek(&mut self, tpl: TopicPartitionList) {
        if tpl.count() == 0 {
            return;
        }
        let wanted: Vec<(String, i32, Offset)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition(), e.offset()))
            .collect();
        let failed: Vec<(String, i32, String)> = if faults::take_seek_failure(&self.app_id) {
            wanted
                .iter()
                .map(|(t, p, _)| (t.clone(), *p, "test fault: seek failed".to_string()))
                .collect()
        } else {
            match self.consumer.seek_partitions(tpl, SEEK_TIMEOUT) {
                Ok(answer) => failed_entries(&answer)
                    .into_iter()
                    .map(|(t, p, e)| (t, p, e.to_string()))
                    .collect(),
                // A timeout or a terminating client: any partition may not have moved.
                Err(e) => wanted
                    .iter()
                    .map(|(t, p, _)| (t.clone(), *p, e.to_string()))
                    .collect(),
            }
        };
        let now = Instant::now();
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        for (topic, partition, to) in wanted {
            let pair = (topic, partition);
            let Some((_, _, error)) = failed.iter().find(|(t, p, _)| *p == pair.1 && *t == pair.0)
            else {
                if let Some(f) = self.unseeked.remove(&pair) {
                    tracing::info!(topic = %pair.0, partition = pair.1, offset = ?to, attempts = f.attempts, "seek succeeded after failing; the partition is read again from there");
                    if self.assigned.contains(&pair.0, pair.1)
                        && !self.paused.contains_key(&pair)
                        && !self.held.contains(&pair)
                    {
                        resume.push(pair);
                    }
                }
                continue;
            };
            let attempts = self.unseeked.get(&pair).map_or(0, |f| f.attempts) + 1;
            let backoff = seek_backoff(attempts);
            tracing::error!(
                topic = %pair.0,
                partition = pair.1,
                offset = ?to,
                attempts,
                retry_in_ms = backoff.as_millis() as u64,
                %error,
                "seek failed: the partition stays paused and nothing past its last committed offset is committed until a seek succeeds"
            );
            telemetry::seek_failed(&pair.0, pair.1);
            self.unseeked.insert(
                pair.clone(),
                FailedSeek {
                    to,
                    attempts,
                    next_at: now + backoff,
                },
            );
            pause.push(pair);
        }
        if let Err(e) = self.pause(&pause) {
            // Its records are not admitted either way: the partition just keeps being fetched.
            tracing::warn!(error = %e, "pausing partitions whose seek failed");
        }
        self.resume(&resume, "resuming partitions sought again");
    }

    /// Tries again the seeks that failed and whose backoff has passed (see
    /// [`GroupMember::seek`]).
    pub(super) fn retry_seeks(&mut self) -> Result<(), RuntimeError> {
        if self.unseeked.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let mut tpl = TopicPartitionList::new();
        for ((t, p), f) in &self.unseeked {
            if f.next_at <= now {
                tpl.add_partition_offset(t, *p, f.to)?;
            }
        }
        self.seek(tpl);
        Ok(())
    }

    /// `rd_kafka_committed` with each partition's own error as the call's: an entry that
    /// failed carries no offset, which must not read as "nothing committed" (that would send
    /// the partition to its beginning, or call a landed commit lost).
    fn committed(
        &self,
        tpl: TopicPartitionList,
        timeout: Duration,
    ) -> Result<TopicPartitionList, KafkaError> {
        let got = self.consumer.committed_offsets(tpl, timeout)?;
        if let Some((_, _, e)) = failed_entries(&got).into_iter().next() {
            return Err(e);
        }
        Ok(got)
    }

    /// Before a new task reads its changelog's end: the group's committed offsets of its
    /// partitions as *stable* offsets (a read_committed consumer asks with `require_stable`, so
    /// the broker answers only once no transaction holding offsets for them is pending). A
    /// zombie's transaction that carries offsets for these partitions is thereby settled —
    /// committed or aborted — before the end is taken, and cannot land between the end and the
    /// first record processed. At-least-once has no transactions to wait for.
    pub(super) fn await_stable_offsets(&self, parts: &[(String, i32)], new: &[i32]) {
        if !self.exactly_once || new.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for (t, p) in parts.iter().filter(|(_, p)| new.contains(p)) {
            tpl.add_partition(t, *p);
        }
        let started = Instant::now();
        match self.committed(tpl, self.restore_timeout) {
            Ok(_) => tracing::debug!(
                millis = started.elapsed().as_millis() as u64,
                "stable committed offsets known before restore"
            ),
            // The restore itself still waits out open transactions on the changelog.
            Err(e) => {
                tracing::warn!(error = %e, "stable committed offsets not known before restore")
            }
        }
    }

    /// A retry-level record that is not due yet: pause its partition and rewind to it, so the
    /// consumer keeps serving every other partition. Returns whether the record was held.
    fn hold_if_not_due(&mut self, m: &OwnedMessage) -> Result<bool, RuntimeError> {
        let tp = (m.topic().to_string(), m.partition());
        if self.paused.contains_key(&tp) {
            // Fetched before the pause took effect: it is read again after the resume.
            return Ok(true);
        }
        let due_at = m.headers().and_then(|hs| {
            hs.iter()
                .find(|h| h.key == retry_headers::DUE_AT)
                .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse::<i64>().ok())
        });
        let Some(due_at) = due_at.filter(|d| *d > now_ms()) else {
            return Ok(false);
        };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&tp.0, tp.1, Offset::Offset(m.offset()))?;
        self.pause(std::iter::once(&tp))?;
        self.seek(tpl);
        tracing::debug!(topic = %tp.0, partition = tp.1, offset = m.offset(), due_at, "retry level paused until due");
        self.paused.insert(tp, due_at);
        Ok(true)
    }

    /// Resumes retry-level partitions whose head record is now due.
    pub(super) fn resume_due(&mut self) -> Result<(), RuntimeError> {
        if self.paused.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let due: Vec<(String, i32)> = self
            .paused
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        for pair in &due {
            self.paused.remove(pair);
        }
        // One whose seek failed is resumed once a seek succeeds.
        let resumable: Vec<&(String, i32)> =
            due.iter().filter(|(t, p)| !self.unseeked(t, *p)).collect();
        self.resume(resumable, "resuming retry levels now due");
        Ok(())
    }

    /// The group's committed offset of each of `topics`' partition `p`, in order (`None`: the
    /// group has not committed one yet). Asked again until the restore timeout: a table cannot
    /// be restored without knowing where its processing stopped.
    pub(super) fn committed_offsets_of<'t>(
        &self,
        topics: impl Iterator<Item = &'t str> + Clone,
        p: i32,
    ) -> Result<Vec<Option<i64>>, RuntimeError> {
        let mut tpl = TopicPartitionList::new();
        for topic in topics.clone() {
            tpl.add_partition(topic, p);
        }
        let deadline = Instant::now() + self.restore_timeout.max(Duration::from_secs(10));
        loop {
            match self.committed(tpl.clone(), Duration::from_secs(10)) {
                Ok(got) => {
                    return Ok(topics
                        .map(
                            |topic| match got.find_partition(topic, p).map(|e| e.offset()) {
                                Some(Offset::Offset(o)) => Some(o),
                                _ => None,
                            },
                        )
                        .collect())
                }
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(partition = p, error = %e, "committed offsets of the table topics unknown; asking again");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The group's committed offsets of the subscribed topics' `partitions` (by partition
    /// number; what an opened task's state reflects, for interactive queries), in one request.
    /// Empty when the coordinator does not answer in time: the positions then fill in with
    /// the task's first commit.
    pub(super) fn committed_positions(
        &self,
        partitions: &[i32],
    ) -> BTreeMap<i32, crate::query::Positions> {
        if partitions.is_empty() {
            // An empty request still goes to the coordinator, and its failure comes back as
            // a consumer-wide error.
            return BTreeMap::new();
        }
        let mut tpl = TopicPartitionList::new();
        for topic in &self.subscription {
            for p in partitions {
                tpl.add_partition(topic, *p);
            }
        }
        let mut out: BTreeMap<i32, crate::query::Positions> = BTreeMap::new();
        match self.committed(tpl, Duration::from_secs(5)) {
            Ok(got) => {
                for e in got.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        out.entry(e.partition())
                            .or_default()
                            .insert((e.topic().to_string(), e.partition()), o);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "committed offsets for query positions unknown");
            }
        }
        out
    }

    /// Whether a transaction committed these next offsets: the group's *stable* committed
    /// offsets (read_committed asks with `require_stable`; the recreated producer has already
    /// settled our own transaction) are at or past every one of them. Asked again while the
    /// coordinator is away — the answer decides between keeping and redoing the batch.
    pub(super) fn committed_for_sure(
        &self,
        next: &[(String, i32, i64)],
        health: &Health,
    ) -> Result<bool, RuntimeError> {
        if next.is_empty() {
            return Ok(false);
        }
        let mut tpl = TopicPartitionList::new();
        for (t, p, _) in next {
            tpl.add_partition(t, *p);
        }
        let deadline = Instant::now() + crate::sink::COMMIT_RETRY_FOR * 3;
        loop {
            match self.committed(tpl.clone(), Duration::from_secs(10)) {
                Ok(got) => {
                    let at = |t: &str, p: i32| match got.find_partition(t, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => -1,
                    };
                    let landed = next.iter().filter(|(t, p, o)| at(t, *p) >= *o).count();
                    if landed != 0 && landed != next.len() {
                        // Another owner moved some of them on: the batch's own partitions
                        // decide; a transaction's offsets commit all or none.
                        tracing::warn!(
                            landed,
                            of = next.len(),
                            "committed offsets partly past the batch"
                        );
                    }
                    return Ok(landed == next.len());
                }
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(error = %e, "reading the group's committed offsets to learn a commit's outcome; retrying");
                    health.beat();
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => return Err(RuntimeError::Consumer(e)),
            }
        }
    }

    /// The member's generation and member id as the consumer knows them now: a change between
    /// a transaction's `send_offsets` and the check of its outcome means another owner may
    /// have moved the offsets since.
    pub(super) fn generation(&self) -> Option<(i32, String)> {
        crate::kafka::describe::member_generation(&self.consumer)
    }

    /// Whether this consumer has read `topic[partition]` to its last stable offset: nothing
    /// committed there is left to fetch (markers included, which move the position too).
    pub(super) fn read_to_its_end(&self, topic: &str, partition: i32) -> bool {
        let position = self
            .consumer
            .position()
            .ok()
            .and_then(|tpl| tpl.find_partition(topic, partition).map(|e| e.offset()));
        let position = match position {
            Some(Offset::Offset(o)) => o,
            // Nothing delivered since the assignment (or a seek): the consumer fetches from
            // the group's committed offset.
            _ => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(topic, partition);
                match self
                    .committed(tpl, Duration::from_secs(5))
                    .map(|c| c.find_partition(topic, partition).map(|e| e.offset()))
                {
                    Ok(Some(Offset::Offset(o))) => o,
                    _ => -1,
                }
            }
        };
        // Asked by a read_committed consumer, the broker answers the last stable offset.
        match self
            .consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(5))
        {
            Ok((low, stable)) => stable <= position.max(low),
            Err(e) => {
                tracing::warn!(topic, partition, error = %e, "end of a partition unknown; its partition number waits");
                false
            }
        }
    }

    /// The group metadata a transaction's offsets commit with (KIP-447).
    pub(super) fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        self.consumer.group_metadata()
    }

    /// At-least-once: commits `offsets` without waiting for the coordinator.
    pub(super) fn commit_async(&self, offsets: &TopicPartitionList) -> Result<(), KafkaError> {
        self.consumer
            .commit(offsets, rdkafka::consumer::CommitMode::Async)
    }

    /// Records the next offsets a transaction committed (for the lag gauge and the last
    /// synchronous commit at shutdown).
    pub(super) fn note_committed<'t>(&self, next: impl Iterator<Item = ((&'t str, i32), i64)>) {
        if let Ok(mut c) = self.consumer.context().committed.lock() {
            c.extend(next.map(|((t, p), o)| ((t.to_string(), p), o)));
        }
    }

    /// The fatal error of the consumer, if any: under static membership, a process with this
    /// instance's id joined the group (`FENCED_INSTANCE_ID`).
    pub(super) fn fatal_error(&self) -> Option<(rdkafka::types::RDKafkaErrorCode, String)> {
        self.consumer.client().fatal_error()
    }
}
