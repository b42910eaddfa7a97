//! The seams between the exactly-once loop and its Kafka clients (Kafka Streams'
//! `KafkaClientSupplier`): the group consumer as a trait, so the loop's group member runs on
//! librdkafka in production and on an in-memory Kafka with injected faults in unit tests and
//! the simulator (issue 50).
//!
//! The trait speaks the loop's vocabulary — `(topic, partition)` pairs, offsets, per-partition
//! outcomes — rather than librdkafka's (`TopicPartitionList` entries whose errors a caller can
//! forget to read): a call on a list answers every partition's failure in its own item, and
//! the caller must say what it does with each.
//!
//! Errors stay [`KafkaError`]s: the loop's decisions (fenced, retriable, unknown outcome) are
//! made on Kafka's error codes, which a simulated broker answers with the same codes.
//!
//! ```no_run
//! use std::time::Duration;
//! use eosflow::kafka::seams::{ConsumerSupplier, GroupConsumer, GroupSettings};
//! use eosflow::kafka::KafkaClients;
//! use eosflow::config::KafkaConfig;
//!
//! // Production: librdkafka behind the trait.
//! let clients = KafkaClients::new(KafkaConfig::default());
//! let settings = GroupSettings::classic("orders-app", Duration::from_secs(10));
//! let consumer = clients.group_consumer(&settings).expect("consumer");
//! consumer.subscribe(&["orders"]).expect("subscribed");
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, ConsumerGroupMetadata, Rebalance,
};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{ClientRole, KafkaClients};

#[cfg(test)]
pub(crate) mod sim;
use crate::config::GroupProtocol;
use crate::telemetry;

/// A topic's partition: what every per-partition call names.
pub type Pair = (String, i32);

/// A rebalance that happened inside [`GroupConsumer::poll`], acted on by the loop right after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// These pairs are now this member's.
    Assigned(Vec<Pair>),
    /// These pairs are no longer this member's (their work must be committed or dropped).
    Revoked(Vec<Pair>),
}

/// The group's view of a member, which a transaction's offsets commit with (KIP-447): the
/// coordinator rejects offsets from a member of an older generation (a zombie).
pub enum GroupMetadata {
    /// librdkafka's own (opaque) metadata, for librdkafka's producer.
    Rdkafka(ConsumerGroupMetadata),
    /// The metadata as plain values, for a producer that is not librdkafka's.
    Member {
        /// The consumer group (eosflow: the application id).
        group_id: String,
        /// The generation the member joined in.
        generation_id: i32,
        /// The member id the coordinator gave it.
        member_id: String,
        /// `group.instance.id` under static membership.
        group_instance_id: Option<String>,
    },
}

impl GroupMetadata {
    /// librdkafka's metadata, which only librdkafka's producer takes (`None` for a member of
    /// another Kafka client).
    pub fn into_rdkafka(self) -> Option<ConsumerGroupMetadata> {
        match self {
            GroupMetadata::Rdkafka(m) => Some(m),
            GroupMetadata::Member { .. } => None,
        }
    }
}

impl std::fmt::Debug for GroupMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupMetadata::Rdkafka(_) => f.write_str("GroupMetadata::Rdkafka(..)"),
            GroupMetadata::Member {
                group_id,
                generation_id,
                member_id,
                ..
            } => write!(
                f,
                "GroupMetadata::Member({group_id}, {generation_id}, {member_id})"
            ),
        }
    }
}

/// What a group consumer is created with: the membership the loop joins with.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// The consumer group (eosflow: the application id).
    pub group: String,
    /// How long the member may be silent before the group reassigns its partitions.
    pub session_timeout: Duration,
    /// `group.instance.id` under static membership.
    pub instance: Option<String>,
    /// `client.id`, naming the instance among the group's members (standby placement, queries).
    pub client_id: Option<String>,
    /// The group protocol (KIP-848 `consumer`, or `classic`).
    pub protocol: GroupProtocol,
}

impl GroupSettings {
    /// A dynamic member of `group` under the classic protocol, with no client id: the
    /// simplest membership (tests, examples).
    pub fn classic(group: &str, session_timeout: Duration) -> Self {
        Self {
            group: group.to_string(),
            session_timeout,
            instance: None,
            client_id: None,
            protocol: GroupProtocol::Classic,
        }
    }
}

/// The group consumer the exactly-once loop drives: every call its group member makes.
///
/// A call on several partitions answers `Err` when the call as a whole failed (none of them
/// can be trusted to have changed) and otherwise the partitions whose own outcome failed; a
/// caller must act on each one (issue 49: an ignored seek failure skipped records).
pub trait GroupConsumer: Send + Sync {
    /// Every topic the cluster knows, with its partition count (topics with an error omitted).
    fn topics(&self, timeout: Duration) -> Result<BTreeMap<String, usize>, KafkaError>;
    /// The ids of the consumer groups the cluster knows (ListGroups).
    fn group_names(&self, timeout: Duration) -> Result<BTreeSet<String>, KafkaError>;
    /// Joins the group with these topics.
    fn subscribe(&self, topics: &[&str]) -> Result<(), KafkaError>;
    /// Leaves the group.
    fn unsubscribe(&self);
    /// One record, or nothing within `timeout`; rebalances happen inside (take them with
    /// [`GroupConsumer::take_events`]).
    fn poll(&self, timeout: Duration) -> Option<Result<OwnedMessage, KafkaError>>;
    /// The rebalances that happened inside the polls since the last call.
    fn take_events(&self) -> Vec<GroupEvent>;
    /// The consumer's fatal error, if it has one (e.g. `FENCED_INSTANCE_ID` under static
    /// membership): nothing it does from then on counts.
    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)>;
    /// Stops fetching `parts`; answers the pairs whose own pause failed.
    fn pause(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError>;
    /// Fetches `parts` again; answers the pairs whose own resume failed.
    fn resume(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError>;
    /// Moves each pair's fetch position; answers the pairs whose own seek failed (their
    /// position is unknown: they may be past records never delivered).
    fn seek(
        &self,
        to: &[(String, i32, Offset)],
        timeout: Duration,
    ) -> Result<Vec<(Pair, KafkaError)>, KafkaError>;
    /// The group's committed offsets of `parts` (stable ones under read_committed: KIP-447's
    /// `require_stable`), each with its own outcome (`Ok(None)`: nothing committed).
    #[allow(clippy::type_complexity)]
    fn committed(
        &self,
        parts: &[Pair],
        timeout: Duration,
    ) -> Result<Vec<(Pair, Result<Option<i64>, KafkaError>)>, KafkaError>;
    /// The next offset the consumer fetches of `topic[partition]`, once it has delivered
    /// something (or been sought) there.
    fn position(&self, topic: &str, partition: i32) -> Option<i64>;
    /// The low watermark and, for a read_committed consumer, the last stable offset.
    fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), KafkaError>;
    /// The member's generation and member id as it knows them now.
    fn generation(&self) -> Option<(i32, String)>;
    /// The metadata a transaction's offsets commit with.
    fn group_metadata(&self) -> Option<GroupMetadata>;
    /// Commits offsets outside a transaction (at-least-once).
    fn commit(&self, offsets: &[(String, i32, i64)], mode: CommitMode) -> Result<(), KafkaError>;
    /// Records next offsets committed through a transaction: the consumer's own lag figures
    /// only know offsets it committed itself.
    fn note_committed(&self, next: &[(Pair, i64)]);
    /// The next offsets [`GroupConsumer::note_committed`] recorded.
    fn noted_committed(&self) -> Vec<(Pair, i64)>;
}

/// Creates the loop's group consumers: librdkafka's in production ([`KafkaClients`]), an
/// in-memory Kafka's under simulation.
pub trait ConsumerSupplier: Send + Sync {
    /// A group consumer with `settings`, not subscribed yet.
    fn group_consumer(
        &self,
        settings: &GroupSettings,
    ) -> Result<Box<dyn GroupConsumer>, KafkaError>;
}

impl ConsumerSupplier for KafkaClients {
    fn group_consumer(
        &self,
        settings: &GroupSettings,
    ) -> Result<Box<dyn GroupConsumer>, KafkaError> {
        let mut config = self.config(ClientRole::GroupConsumer {
            group: &settings.group,
            session_timeout: settings.session_timeout,
            instance: settings.instance.as_deref(),
        });
        if let Some(id) = &settings.client_id {
            // How the standby placement finds this instance among the group's members.
            config.set("client.id", id);
        }
        if settings.protocol == GroupProtocol::Consumer {
            super::client::consumer_protocol(&mut config);
        }
        let consumer: BaseConsumer<GroupContext> =
            config.create_with_context(GroupContext::default())?;
        Ok(Box::new(RdGroupConsumer(consumer)))
    }
}

/// Records rebalances as they happen inside `poll`; the loop acts on them right after.
#[derive(Default)]
struct GroupContext {
    events: Mutex<Vec<GroupEvent>>,
    /// Next offsets this instance committed through its transactions: librdkafka's own
    /// `consumer_lag` only knows offsets committed by the consumer, never transactional ones.
    committed: Mutex<HashMap<Pair, i64>>,
}

fn tpl_pairs(tpl: &TopicPartitionList) -> Vec<Pair> {
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

/// librdkafka's group consumer behind [`GroupConsumer`].
struct RdGroupConsumer(BaseConsumer<GroupContext>);

/// A list of `pairs`, each without an offset.
fn list_of(pairs: &[Pair]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in pairs {
        tpl.add_partition(t, *p);
    }
    tpl
}

/// The pairs of `tpl` whose entry in a librdkafka answer carries an error, with it: calls on a
/// list (seek, pause, resume, committed offsets) succeed as a whole and report each
/// partition's failure in its own entry.
fn failed_entries(tpl: &TopicPartitionList) -> Vec<(Pair, KafkaError)> {
    tpl.elements()
        .iter()
        .filter_map(|e| {
            e.error()
                .err()
                .map(|err| ((e.topic().to_string(), e.partition()), err))
        })
        .collect()
}

impl GroupConsumer for RdGroupConsumer {
    fn topics(&self, timeout: Duration) -> Result<BTreeMap<String, usize>, KafkaError> {
        let md = self.0.fetch_metadata(None, timeout)?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len()))
            .collect())
    }

    fn group_names(&self, timeout: Duration) -> Result<BTreeSet<String>, KafkaError> {
        let groups = self.0.fetch_group_list(None, timeout)?;
        Ok(groups
            .groups()
            .iter()
            .map(|g| g.name().to_string())
            .collect())
    }

    fn subscribe(&self, topics: &[&str]) -> Result<(), KafkaError> {
        self.0.subscribe(topics)
    }

    fn unsubscribe(&self) {
        self.0.unsubscribe();
    }

    fn poll(&self, timeout: Duration) -> Option<Result<OwnedMessage, KafkaError>> {
        self.0.poll(timeout).map(|r| r.map(|m| m.detach()))
    }

    fn take_events(&self) -> Vec<GroupEvent> {
        self.0
            .context()
            .events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.0.client().fatal_error()
    }

    fn pause(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        let tpl = list_of(parts);
        self.0.pause(&tpl)?;
        Ok(failed_entries(&tpl))
    }

    fn resume(&self, parts: &[Pair]) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        let tpl = list_of(parts);
        self.0.resume(&tpl)?;
        Ok(failed_entries(&tpl))
    }

    fn seek(
        &self,
        to: &[(String, i32, Offset)],
        timeout: Duration,
    ) -> Result<Vec<(Pair, KafkaError)>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in to {
            tpl.add_partition_offset(t, *p, *o)?;
        }
        let answer = self.0.seek_partitions(tpl, timeout)?;
        Ok(failed_entries(&answer))
    }

    fn committed(
        &self,
        parts: &[Pair],
        timeout: Duration,
    ) -> Result<Vec<(Pair, Result<Option<i64>, KafkaError>)>, KafkaError> {
        let got = self.0.committed_offsets(list_of(parts), timeout)?;
        Ok(got
            .elements()
            .iter()
            .map(|e| {
                let pair = (e.topic().to_string(), e.partition());
                let outcome = e.error().map(|()| match e.offset() {
                    Offset::Offset(o) if o >= 0 => Some(o),
                    _ => None,
                });
                (pair, outcome)
            })
            .collect())
    }

    fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        match self
            .0
            .position()
            .ok()?
            .find_partition(topic, partition)?
            .offset()
        {
            Offset::Offset(o) => Some(o),
            _ => None,
        }
    }

    fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), KafkaError> {
        self.0.fetch_watermarks(topic, partition, timeout)
    }

    fn generation(&self) -> Option<(i32, String)> {
        super::describe::member_generation(&self.0)
    }

    fn group_metadata(&self) -> Option<GroupMetadata> {
        self.0.group_metadata().map(GroupMetadata::Rdkafka)
    }

    fn commit(&self, offsets: &[(String, i32, i64)], mode: CommitMode) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in offsets {
            tpl.add_partition_offset(t, *p, Offset::Offset(*o))?;
        }
        self.0.commit(&tpl, mode)
    }

    fn note_committed(&self, next: &[(Pair, i64)]) {
        if let Ok(mut c) = self.0.context().committed.lock() {
            c.extend(next.iter().cloned());
        }
    }

    fn noted_committed(&self) -> Vec<(Pair, i64)> {
        self.0
            .context()
            .committed
            .lock()
            .map(|c| c.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }
}
