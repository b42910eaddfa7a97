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
use std::time::{Duration, Instant};

use std::sync::Arc;

use rdkafka::consumer::CommitMode;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::{Message, Offset};

use super::{RuntimeError, RuntimeOptions};
use crate::clock::Clock;
use crate::config::GroupProtocol;
pub(super) use crate::kafka::seams::GroupEvent;
use crate::kafka::seams::{ConsumerSupplier, GroupConsumer, GroupMetadata, GroupSettings, Pair};
use crate::retry::headers as retry_headers;
use crate::telemetry::{self, Health};

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
    consumer: &dyn GroupConsumer,
    topics: &[String],
) -> Result<BTreeMap<String, usize>, KafkaError> {
    let mut all = consumer.topics(Duration::from_secs(30))?;
    all.retain(|t, _| topics.contains(t));
    Ok(all)
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
    /// Creates the consumer (again, on the fall-back to the classic protocol).
    supplier: Arc<dyn ConsumerSupplier>,
    /// Backoffs, due times and deadlines are read on it (virtual under simulation).
    clock: Arc<dyn Clock>,
    consumer: Box<dyn GroupConsumer>,
    membership: GroupSettings,
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

impl GroupMember {
    /// Creates the group consumer of `opts` (not subscribed yet: see [`GroupMember::subscribe`]).
    pub(super) fn connect(
        supplier: Arc<dyn ConsumerSupplier>,
        clock: Arc<dyn Clock>,
        opts: &RuntimeOptions,
    ) -> Result<Self, KafkaError> {
        let membership = GroupSettings {
            group: opts.app_id.clone(),
            session_timeout: opts.session_timeout,
            instance: opts.static_membership.then(|| opts.member_instance_id()),
            // Always named: the standby placement and interactive queries' routing find the
            // instance among the group's members by it.
            client_id: Some(crate::processor::standby::client_id(&opts.instance_id)),
            protocol: opts.group_protocol,
        };
        Ok(Self {
            consumer: supplier.group_consumer(&membership)?,
            supplier,
            clock,
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
        })
    }

    /// Partition counts of those of `topics` the broker knows (metadata only: no admin call).
    pub(super) fn partition_counts(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, usize>, KafkaError> {
        partition_counts(self.consumer.as_ref(), topics)
    }

    /// Every topic the broker knows (metadata only): the start checks the topics it needs
    /// against them, and looks among them for changelogs of stores the topology no longer has
    /// ([`super::internal_topics::warn_orphaned_changelogs`]).
    pub(super) fn topic_names(&self, timeout: Duration) -> Result<Vec<String>, KafkaError> {
        Ok(self.consumer.topics(timeout)?.into_keys().collect())
    }

    /// The ids of the consumer groups the broker knows (ListGroups): an application id is its
    /// group, so a changelog named after a longer (or shorter) id that has a group is that
    /// application's, not an orphan of this one.
    pub(super) fn group_names(&self, timeout: Duration) -> Result<BTreeSet<String>, KafkaError> {
        self.consumer.group_names(timeout)
    }

    /// Sets the topics the member subscribes to and those that must share one partition count
    /// (checked now, and again at every assignment).
    pub(super) fn set_topics(
        &mut self,
        subscription: Vec<String>,
        copartitioned: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let counts = partition_counts(self.consumer.as_ref(), &copartitioned)?;
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
        let offsets: Vec<(String, i32, i64)> = self
            .consumer
            .noted_committed()
            .into_iter()
            .filter(|((t, p), _)| self.assigned.contains(t, *p))
            .map(|((t, p), o)| (t, p, o))
            .collect();
        if !offsets.is_empty() {
            if let Err(e) = self.consumer.commit(&offsets, CommitMode::Sync) {
                tracing::warn!(error = %e, "committing the last offsets at shutdown; their records will be read again");
            }
        }
    }

    /// Polls one record for at most `left`. Rebalances happen inside: take them with
    /// [`GroupMember::take_events`] right after.
    pub(super) fn poll(&mut self, left: Duration) -> Result<Polled, RuntimeError> {
        match self.consumer.poll(left) {
            Some(Ok(m)) => Ok(Polled::Record(m)),
            Some(Err(e)) => {
                if let Some((code, reason)) = self.consumer.fatal_error() {
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
        self.consumer.take_events()
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
        let consumer = self.supplier.group_consumer(&self.membership)?;
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
        let parts: Vec<Pair> = parts.into_iter().cloned().collect();
        if parts.is_empty() {
            return;
        }
        match self.consumer.resume(&parts) {
            Err(e) => tracing::warn!(error = %e, "{what}"),
            Ok(failed) => {
                for ((topic, partition), e) in failed {
                    tracing::warn!(topic, partition, error = %e, "{what}: this partition was not resumed");
                }
            }
        }
    }

    /// Pauses `parts`. A partition's own failure in the answer means the consumer does not
    /// know it (not assigned any more), so it fetches nothing of it anyway: logged only.
    fn pause<'p>(
        &self,
        parts: impl IntoIterator<Item = &'p (String, i32)>,
    ) -> Result<(), RuntimeError> {
        let parts: Vec<Pair> = parts.into_iter().cloned().collect();
        if parts.is_empty() {
            return Ok(());
        }
        for ((topic, partition), e) in self.consumer.pause(&parts)? {
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
            let now = self.clock.instant();
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
        let counts = partition_counts(self.consumer.as_ref(), &self.copartitioned)?;
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
            .filter(|(_, since)| {
                self.clock.instant().saturating_duration_since(**since)
                    >= self.partial_assignment_limit()
            })
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
        let committed = self.committed(pairs, Duration::from_secs(10))?;
        let mut seek = Vec::new();
        for ((topic, partition), at) in committed {
            let at = match at {
                Some(o) => Offset::Offset(o),
                None if from_beginning(&topic, partition) => Offset::Beginning,
                None => continue,
            };
            seek.push((topic, partition, at));
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
        let to: Vec<(String, i32, Offset)> = first
            .into_iter()
            .filter(|((t, p), _)| self.assigned.contains(t, *p))
            .map(|((t, p), o)| (t, p, Offset::Offset(o)))
            .collect();
        self.seek(to);
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

    /// Moves each partition of `wanted` to its offset. The consumer answers each
    /// partition's outcome in its own entry: a partition whose seek failed (there, or the
    /// whole call) may be left past records never processed, and a commit of its next record's
    /// offset would skip them. So it is paused, none of its records is admitted (no
    /// transaction commits an offset for it), and it is sought again with a backoff
    /// ([`GroupMember::retry_seeks`]) until a seek succeeds; then it is resumed unless
    /// something else holds it. A partition sought successfully that was waiting for a retry
    /// stops waiting.
    fn seek(&mut self, wanted: Vec<(String, i32, Offset)>) {
        if wanted.is_empty() {
            return;
        }
        let failed: Vec<(String, i32, String)> = match self.consumer.seek(&wanted, SEEK_TIMEOUT) {
            Ok(failed) => failed
                .into_iter()
                .map(|((t, p), e)| (t, p, e.to_string()))
                .collect(),
            // A timeout or a terminating client: any partition may not have moved.
            Err(e) => wanted
                .iter()
                .map(|(t, p, _)| (t.clone(), *p, e.to_string()))
                .collect(),
        };
        let now = self.clock.instant();
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
        let now = self.clock.instant();
        let due: Vec<(String, i32, Offset)> = self
            .unseeked
            .iter()
            .filter(|(_, f)| f.next_at <= now)
            .map(|((t, p), f)| (t.clone(), *p, f.to))
            .collect();
        self.seek(due);
        Ok(())
    }

    /// `rd_kafka_committed` with each partition's own error as the call's: an entry that
    /// failed carries no offset, which must not read as "nothing committed" (that would send
    /// the partition to its beginning, or call a landed commit lost).
    fn committed(
        &self,
        parts: &[Pair],
        timeout: Duration,
    ) -> Result<BTreeMap<Pair, Option<i64>>, KafkaError> {
        self.consumer
            .committed(parts, timeout)?
            .into_iter()
            .map(|(pair, at)| at.map(|at| (pair, at)))
            .collect()
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
        let parts: Vec<Pair> = parts
            .iter()
            .filter(|(_, p)| new.contains(p))
            .cloned()
            .collect();
        let started = self.clock.instant();
        match self.committed(&parts, self.restore_timeout) {
            Ok(_) => tracing::debug!(
                millis = self
                    .clock
                    .instant()
                    .saturating_duration_since(started)
                    .as_millis() as u64,
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
        let Some(due_at) = due_at.filter(|d| *d > self.clock.now_ms()) else {
            return Ok(false);
        };
        self.pause(std::iter::once(&tp))?;
        self.seek(vec![(tp.0.clone(), tp.1, Offset::Offset(m.offset()))]);
        tracing::debug!(topic = %tp.0, partition = tp.1, offset = m.offset(), due_at, "retry level paused until due");
        self.paused.insert(tp, due_at);
        Ok(true)
    }

    /// Resumes retry-level partitions whose head record is now due.
    pub(super) fn resume_due(&mut self) -> Result<(), RuntimeError> {
        if self.paused.is_empty() {
            return Ok(());
        }
        let now = self.clock.now_ms();
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
        let parts: Vec<Pair> = topics.clone().map(|t| (t.to_string(), p)).collect();
        let deadline = self.clock.instant() + self.restore_timeout.max(Duration::from_secs(10));
        loop {
            match self.committed(&parts, Duration::from_secs(10)) {
                Ok(got) => {
                    return Ok(parts
                        .iter()
                        .map(|pair| got.get(pair).copied().flatten())
                        .collect())
                }
                Err(e) if self.clock.instant() < deadline => {
                    tracing::warn!(partition = p, error = %e, "committed offsets of the table topics unknown; asking again");
                    self.clock.sleep(Duration::from_millis(500));
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
        let parts: Vec<Pair> = self
            .subscription
            .iter()
            .flat_map(|topic| partitions.iter().map(move |p| (topic.clone(), *p)))
            .collect();
        let mut out: BTreeMap<i32, crate::query::Positions> = BTreeMap::new();
        match self.committed(&parts, Duration::from_secs(5)) {
            Ok(got) => {
                for ((topic, partition), at) in got {
                    if let Some(o) = at {
                        out.entry(partition)
                            .or_default()
                            .insert((topic, partition), o);
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
        let parts: Vec<Pair> = next.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
        let deadline = self.clock.instant() + crate::sink::COMMIT_RETRY_FOR * 3;
        loop {
            match self.committed(&parts, Duration::from_secs(10)) {
                Ok(got) => {
                    let landed = next
                        .iter()
                        .filter(|(t, p, o)| {
                            got.get(&(t.clone(), *p)).copied().flatten().unwrap_or(-1) >= *o
                        })
                        .count();
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
                Err(e) if self.clock.instant() < deadline => {
                    tracing::warn!(error = %e, "reading the group's committed offsets to learn a commit's outcome; retrying");
                    health.beat();
                    self.clock.sleep(Duration::from_secs(1));
                }
                Err(e) => return Err(RuntimeError::Consumer(e)),
            }
        }
    }

    /// The member's generation and member id as the consumer knows them now: a change between
    /// a transaction's `send_offsets` and the check of its outcome means another owner may
    /// have moved the offsets since.
    pub(super) fn generation(&self) -> Option<(i32, String)> {
        self.consumer.generation()
    }

    /// Whether this consumer has read `topic[partition]` to its last stable offset: nothing
    /// committed there is left to fetch (markers included, which move the position too).
    pub(super) fn read_to_its_end(&self, topic: &str, partition: i32) -> bool {
        let position = match self.consumer.position(topic, partition) {
            Some(o) => o,
            // Nothing delivered since the assignment (or a seek): the consumer fetches from
            // the group's committed offset.
            None => {
                let pair = (topic.to_string(), partition);
                self.committed(std::slice::from_ref(&pair), Duration::from_secs(5))
                    .ok()
                    .and_then(|c| c.get(&pair).copied().flatten())
                    .unwrap_or(-1)
            }
        };
        // Asked by a read_committed consumer, the broker answers the last stable offset.
        match self
            .consumer
            .watermarks(topic, partition, Duration::from_secs(5))
        {
            Ok((low, stable)) => stable <= position.max(low),
            Err(e) => {
                tracing::warn!(topic, partition, error = %e, "end of a partition unknown; its partition number waits");
                false
            }
        }
    }

    /// The group metadata a transaction's offsets commit with (KIP-447).
    pub(super) fn group_metadata(&self) -> Option<GroupMetadata> {
        self.consumer.group_metadata()
    }

    /// At-least-once: commits `offsets` without waiting for the coordinator.
    pub(super) fn commit_async(&self, offsets: &[(String, i32, i64)]) -> Result<(), KafkaError> {
        self.consumer.commit(offsets, CommitMode::Async)
    }

    /// Records the next offsets a transaction committed (for the lag gauge and the last
    /// synchronous commit at shutdown).
    pub(super) fn note_committed<'t>(&self, next: impl Iterator<Item = ((&'t str, i32), i64)>) {
        let next: Vec<(Pair, i64)> = next.map(|((t, p), o)| ((t.to_string(), p), o)).collect();
        self.consumer.note_committed(&next);
    }

    /// The fatal error of the consumer, if any: under static membership, a process with this
    /// instance's id joined the group (`FENCED_INSTANCE_ID`).
    pub(super) fn fatal_error(&self) -> Option<(rdkafka::types::RDKafkaErrorCode, String)> {
        self.consumer.fatal_error()
    }
}

/// The group member on the in-memory Kafka (`crates/simkafka`) through the consumer seam, with
/// faults injected where a broker test cannot place them and time that moves only when the
/// test moves it (issue 50).
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use eosflow_simkafka::{self as sim, Call, Fault, ProducerConfig, TopicConfig};
    use rdkafka::Message;

    use super::*;
    use crate::clock::ManualClock;
    use crate::kafka::seams::sim::SimSupplier;

    const APP: &str = "gm-test";

    fn options(exactly_once: bool) -> RuntimeOptions {
        let mut config = crate::config::Config::default();
        config.app.id = APP.into();
        config.app.instance_id = "i-0".into();
        config.processor.input_topics = vec!["in".into()];
        let mut opts = RuntimeOptions::from_config(&config).expect("options");
        opts.exactly_once = exactly_once;
        opts.restore_timeout = Duration::from_secs(10);
        opts
    }

    /// A cluster with `topics` (name, partitions), and `n` committed records in `in[0]`.
    fn cluster(topics: &[(&str, usize)], n: i64) -> sim::Cluster {
        let cluster = sim::Cluster::new(7);
        for (t, p) in topics {
            cluster
                .create_topic(t, *p, TopicConfig::default())
                .expect("topic");
        }
        let mut producer = cluster.producer(ProducerConfig::default());
        for i in 0..n {
            producer
                .send(
                    "in",
                    Some(0),
                    None,
                    None,
                    Some(i.to_string().into_bytes()),
                    vec![],
                )
                .expect("sent");
        }
        cluster
    }

    /// A member subscribed to `subscription`, its first assignment taken.
    fn member(cluster: &sim::Cluster, clock: &ManualClock, subscription: &[&str]) -> GroupMember {
        let supplier = Arc::new(SimSupplier {
            cluster: cluster.clone(),
        });
        let mut m = GroupMember::connect(supplier, Arc::new(clock.clone()), &options(true))
            .expect("connects");
        let topics: Vec<String> = subscription.iter().map(|t| t.to_string()).collect();
        m.set_topics(topics.clone(), topics).expect("topics");
        m.subscribe().expect("subscribes");
        for _ in 0..10 {
            let polled = m.poll(Duration::ZERO).expect("polls");
            assert!(
                !matches!(polled, Polled::Record(_)),
                "a record before the assignment"
            );
            for e in m.take_events() {
                if let GroupEvent::Assigned(parts) = e {
                    let ready = m.complete_assignment(parts).expect("complete");
                    m.take(ready);
                    return m;
                }
            }
        }
        panic!("no assignment in 10 polls");
    }

    /// The offsets of the records `m` admits over `polls` polls.
    fn admitted(m: &mut GroupMember, polls: usize) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for _ in 0..polls {
            if let Polled::Record(r) = m.poll(Duration::ZERO).expect("polls") {
                if m.admit(&r).expect("admit") {
                    out.push((r.topic().to_string(), r.offset()));
                }
            }
        }
        out
    }

    fn offsets(records: &[(String, i64)]) -> Vec<i64> {
        records.iter().map(|(_, o)| *o).collect()
    }

    /// Issue 49, item 9: a seek back (after an aborted batch) that fails for the partition
    /// leaves the consumer past records never processed. The member admits none of that
    /// partition's records until a seek succeeds, retries with a backoff on its clock, and
    /// then reads from the batch's first offset again: no record is skipped.
    #[test]
    fn a_failed_seek_back_skips_no_record() {
        let cluster = cluster(&[("in", 1)], 10);
        let clock = ManualClock::new(1_700_000_000_000);
        let mut m = member(&cluster, &clock, &["in"]);
        let batch: Vec<OwnedMessage> = (0..5)
            .filter_map(|_| match m.poll(Duration::ZERO).expect("polls") {
                Polled::Record(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(
            batch.iter().map(|r| r.offset()).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );

        // The batch aborted; its seek back fails for in[0].
        cluster
            .faults()
            .once(Call::Seek, Fault::SeekFailed(Some(("in".into(), 0))));
        m.seek_back(batch.iter()).expect("seek back");
        assert!(
            admitted(&mut m, 10).is_empty(),
            "records admitted while the consumer's position in[0] is unknown"
        );

        // Before the backoff: not sought again, still nothing admitted.
        clock.advance(Duration::from_millis(50));
        m.retry_seeks().expect("retry");
        assert!(admitted(&mut m, 5).is_empty());

        // After it: sought again, and read from the batch's first offset.
        clock.advance(Duration::from_millis(100));
        m.retry_seeks().expect("retry");
        assert_eq!(
            offsets(&admitted(&mut m, 12)),
            (0..10).collect::<Vec<_>>(),
            "after the failed seek the partition must be read again from offset 0"
        );
    }

    /// A seek that keeps failing is tried again with a growing backoff and never admits a
    /// record; the partition is read from the wanted offset once the seeks succeed again.
    #[test]
    fn a_seek_failing_repeatedly_backs_off_and_recovers() {
        let cluster = cluster(&[("in", 1)], 6);
        let clock = ManualClock::new(1_700_000_000_000);
        let mut m = member(&cluster, &clock, &["in"]);
        let batch: Vec<OwnedMessage> = (0..3)
            .filter_map(|_| match m.poll(Duration::ZERO).expect("polls") {
                Polled::Record(r) => Some(r),
                _ => None,
            })
            .collect();
        for _ in 0..4 {
            cluster
                .faults()
                .once(Call::Seek, Fault::SeekFailed(Some(("in".into(), 0))));
        }
        m.seek_back(batch.iter()).expect("seek back");
        // Three more failures, each after its backoff (100, 200, 400 ms).
        for wait in [100, 200, 400] {
            clock.advance(Duration::from_millis(wait));
            m.retry_seeks().expect("retry");
            assert!(admitted(&mut m, 4).is_empty(), "admitted after {wait} ms");
        }
        // The next attempt waits 800 ms, then succeeds.
        clock.advance(Duration::from_millis(799));
        m.retry_seeks().expect("retry");
        assert!(admitted(&mut m, 4).is_empty(), "sought before its backoff");
        clock.advance(Duration::from_millis(1));
        m.retry_seeks().expect("retry");
        assert_eq!(offsets(&admitted(&mut m, 8)), [0, 1, 2, 3, 4, 5]);
    }

    /// A retry-level record not due yet pauses its partition (the input keeps flowing) and is
    /// read again once due, on the member's clock.
    #[test]
    fn a_retry_record_waits_until_due_while_the_input_flows() {
        let cluster = cluster(&[("in", 1), ("in.retry.1", 1)], 3);
        let clock = ManualClock::new(1_700_000_000_000);
        let due = clock.now_ms() + 5_000;
        let mut producer = cluster.producer(ProducerConfig::default());
        producer
            .send(
                "in.retry.1",
                Some(0),
                None,
                None,
                Some(b"again".to_vec()),
                vec![(
                    crate::retry::headers::DUE_AT.into(),
                    Some(due.to_string().into_bytes()),
                )],
            )
            .expect("sent");
        let mut m = member(&cluster, &clock, &["in", "in.retry.1"]);
        let got = admitted(&mut m, 10);
        assert!(
            !got.iter().any(|(t, _)| t == "in.retry.1"),
            "a retry record admitted before it is due: {got:?}"
        );
        assert_eq!(got.len(), 3, "the input must keep flowing: {got:?}");

        clock.advance(Duration::from_millis(4_999));
        m.resume_due().expect("resume");
        assert!(admitted(&mut m, 3).is_empty(), "resumed before due");
        clock.advance(Duration::from_millis(1));
        m.resume_due().expect("resume");
        assert_eq!(admitted(&mut m, 3), [("in.retry.1".to_string(), 0)]);
    }

    /// Whether an unknown commit outcome landed is read from the group's *stable* offsets:
    /// while a transaction holding offsets is open the answer is an error (never "not
    /// committed", which would redo the batch and duplicate its outputs), and once it
    /// commits, the offsets are there.
    #[test]
    fn an_open_transaction_holding_offsets_is_never_read_as_not_committed() {
        let cluster = cluster(&[("in", 1), ("out", 1)], 4);
        let clock = ManualClock::new(1_700_000_000_000);
        let m = member(&cluster, &clock, &["in"]);
        let Some(GroupMetadata::Member {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        }) = m.group_metadata()
        else {
            panic!("no group metadata after joining");
        };
        let mut producer = cluster.producer(ProducerConfig {
            transactional_id: Some("gm-test-0".into()),
            ..ProducerConfig::default()
        });
        producer.init_transactions().expect("init");
        producer.begin_transaction().expect("begin");
        producer
            .send("out", Some(0), None, None, Some(b"x".to_vec()), vec![])
            .expect("sent");
        let next = [("in".to_string(), 0, 4)];
        producer
            .send_offsets_to_transaction(
                &next,
                &sim::GroupMetadata {
                    group_id,
                    generation_id,
                    member_id,
                    group_instance_id,
                },
            )
            .expect("offsets");
        let health = Health::new(Duration::from_secs(60));
        let started = clock.instant();
        assert!(
            m.committed_for_sure(&next, &health).is_err(),
            "an open transaction's offsets were read as settled"
        );
        assert!(
            clock.instant() - started >= crate::sink::COMMIT_RETRY_FOR,
            "asked again for the whole retry window"
        );
        producer.commit_transaction().expect("commit");
        assert!(m.committed_for_sure(&next, &health).expect("known"));
        assert!(!m
            .committed_for_sure(&[("in".to_string(), 0, 5)], &health)
            .expect("known"));
    }

    /// A partition is read to its end only once nothing committed is left before its last
    /// stable offset: an open transaction holds the end back until it settles.
    #[test]
    fn read_to_its_end_waits_for_open_transactions() {
        let cluster = cluster(&[("in", 1)], 2);
        let clock = ManualClock::new(1_700_000_000_000);
        let mut m = member(&cluster, &clock, &["in"]);
        assert!(!m.read_to_its_end("in", 0), "two records left");
        assert_eq!(offsets(&admitted(&mut m, 3)), [0, 1]);
        assert!(m.read_to_its_end("in", 0));

        let mut producer = cluster.producer(ProducerConfig {
            transactional_id: Some("writer".into()),
            ..ProducerConfig::default()
        });
        producer.init_transactions().expect("init");
        producer.begin_transaction().expect("begin");
        producer
            .send("in", Some(0), None, None, Some(b"late".to_vec()), vec![])
            .expect("sent");
        // The open transaction's record is not stable: nothing to read yet.
        assert!(m.read_to_its_end("in", 0));
        producer.commit_transaction().expect("commit");
        assert!(!m.read_to_its_end("in", 0), "a committed record is left");
        assert_eq!(offsets(&admitted(&mut m, 3)), [2]);
        assert!(
            m.read_to_its_end("in", 0),
            "the commit marker moves the position too"
        );
    }

    /// Topics that must be co-partitioned but are not fail the start, naming each count.
    #[test]
    fn inputs_with_different_partition_counts_are_refused_naming_each() {
        let cluster = cluster(&[("in", 2), ("in.retry.1", 3)], 0);
        let clock = ManualClock::new(0);
        let supplier = Arc::new(SimSupplier { cluster });
        let mut m =
            GroupMember::connect(supplier, Arc::new(clock), &options(true)).expect("connects");
        let topics = vec!["in".to_string(), "in.retry.1".to_string()];
        let err = m
            .set_topics(topics.clone(), topics)
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("in=2") && err.contains("in.retry.1=3"),
            "{err}"
        );
    }
}
