//! The exactly-once read-process-write loop (KIP-447).
//!
//! One consumer-group member and one transactional producer per instance. Each turn:
//! poll a batch (bounded by records and by the commit interval) with no transaction open →
//! begin → process every record (state into the partition's overlay, emits sent pipelined) →
//! changelog records → input offsets with the group's metadata → commit → apply the overlays
//! to RocksDB with the changelog offsets reached. Any failure aborts, drops the overlays and
//! seeks back to the batch's first offsets. Transactions open and close between two polls, so
//! none ever spans a rebalance (rebalance callbacks only run inside `poll`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::DeliveryFuture;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::align;
use super::engine::{Isolated, NamedStore, Task};
use super::Processor;
use crate::config::Config;
use crate::kafka::{ClientRole, KafkaClients};
use crate::retry::depth::DepthWatcher;
use crate::retry::dlt::DltClass;
use crate::retry::{dlt, headers as retry_headers, ladder_topics, RetryPolicy};
use crate::sink::{is_record_error, SinkError, TxnSink};
use crate::state::{
    dedup, restore, restore_table, Column, Overlay, RestoreStats, StateError, Store, StoreCache,
};
use crate::telemetry::{self, Health};

/// Why the runtime stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The consumer could not be created or subscribed.
    #[error("kafka consumer: {0}")]
    Consumer(#[from] KafkaError),
    /// The producer failed in a way that ends this instance.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A store could not be opened, restored or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The configuration cannot run a processor.
    #[error("configuration: {0}")]
    Config(String),
    /// Inputs, retry levels, dead-letter topic and changelog do not share one partition count,
    /// or the group assigned partition `p` of some of them without the others.
    #[error("not co-partitioned: {0}")]
    CoPartitioning(String),
    /// A global table's topic does not exist or cannot be read, or its store cannot be
    /// opened or written: the instance does not start.
    #[error("global table {table:?} (topic {topic:?}): {message}")]
    GlobalTable {
        /// The table's name.
        table: String,
        /// Its topic.
        topic: String,
        /// What went wrong.
        message: String,
    },
    /// A live process with this instance's id took over: this one stops (recreating the
    /// producer would fence the successor).
    #[error("fenced: transactional.id {id} is now used by another instance: {reason}")]
    Superseded {
        /// Our transactional.id.
        id: String,
        /// The evidence.
        reason: String,
    },
}

/// Everything the loop needs, derived from [`Config`].
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Consumer group and topic prefix.
    pub app_id: String,
    /// Stable instance id: suffix of `transactional.id`.
    pub instance_id: String,
    /// Inputs (co-partitioned).
    pub input_topics: Vec<String>,
    /// Longest a batch stays open.
    pub commit_interval: Duration,
    /// Most records per transaction.
    pub max_batch_records: usize,
    /// Most key + value bytes per transaction (the batch's memory bound).
    pub max_batch_bytes: usize,
    /// `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// Deadline for one partition's restore while the broker answers (an unreachable broker
    /// is waited for, see [`crate::state::changelog::BROKER_WAIT_MAX`]).
    pub restore_timeout: Duration,
    /// Join with `group.instance.id` = instance id.
    pub static_membership: bool,
    /// Root of this instance's stores.
    pub state_dir: PathBuf,
    /// RocksDB block cache for all stores.
    pub block_cache_bytes: u64,
    /// Dedup window.
    pub dedup_retention: Duration,
    /// How often expired dedup ids are purged.
    pub dedup_purge_interval: Duration,
    /// The retry ladder of each input topic.
    pub retry: BTreeMap<String, RetryPolicy>,
    /// How often the DLT depth gauges refresh (zero: not watched).
    pub dlt_depth_interval: Duration,
    /// False (`processor.guarantee = "at_least_once"`): no transactions, plain offset commits.
    pub exactly_once: bool,
    /// The processor's tables, `(store name, topic)` ([`Processor::tables`]).
    pub tables: Vec<(String, String)>,
    /// The versioned ones among them, `(store name, history)`
    /// ([`Processor::versioned_tables`]).
    pub versioned_tables: Vec<(String, Duration)>,
    /// This loop's index among the instance's processing threads (`processor.threads`): 0
    /// keeps the ids a one-thread instance has always had.
    pub thread: usize,
    /// `processor.group_protocol`.
    pub group_protocol: crate::config::GroupProtocol,
    /// `processor.max_task_idle_ms` (-1: no timestamp alignment).
    pub max_task_idle_ms: i64,
    /// `processor.repartition_purge_interval_ms` (zero: never purge).
    pub repartition_purge_interval: Duration,
}

impl RuntimeOptions {
    /// Table `name`'s history if it is versioned.
    pub(crate) fn table_history(&self, name: &str) -> Option<Duration> {
        self.versioned_tables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| *h)
    }
}

impl RuntimeOptions {
    /// Reads the options from a validated config.
    pub fn from_config(config: &Config) -> Result<Self, RuntimeError> {
        if config.processor.input_topics.is_empty() {
            return Err(RuntimeError::Config(
                "`processor.input_topics` (EOSFLOW_PROCESSOR_INPUT_TOPICS) is empty: name at least one input topic".into(),
            ));
        }
        let instance_id = config.instance_id().map_err(RuntimeError::Config)?;
        Ok(Self {
            app_id: config.app.id.clone(),
            state_dir: config.state.dir.join(&config.app.id).join(&instance_id),
            instance_id,
            input_topics: config.processor.input_topics.clone(),
            commit_interval: Duration::from_millis(config.processor.commit_interval_ms),
            max_batch_records: config.processor.max_batch_records,
            max_batch_bytes: config.processor.max_batch_bytes,
            transaction_timeout: Duration::from_millis(config.processor.transaction_timeout_ms),
            session_timeout: Duration::from_millis(config.processor.session_timeout_ms),
            restore_timeout: Duration::from_millis(config.processor.restore_timeout_ms),
            static_membership: config.processor.static_membership,
            block_cache_bytes: config.state.block_cache_bytes,
            dedup_retention: Duration::from_secs(config.state.dedup_retention_secs),
            dedup_purge_interval: Duration::from_secs(config.state.dedup_purge_interval_secs),
            retry: config
                .processor
                .input_topics
                .iter()
                .map(|t| (t.clone(), config.retry.policy_for(t)))
                .collect(),
            dlt_depth_interval: Duration::from_millis(config.retry.dlt_depth_interval_ms),
            exactly_once: config.processor.guarantee == crate::config::Guarantee::ExactlyOnce,
            tables: Vec::new(),
            versioned_tables: Vec::new(),
            thread: 0,
            group_protocol: config.processor.group_protocol,
            max_task_idle_ms: config.processor.max_task_idle_ms,
            repartition_purge_interval: Duration::from_millis(
                config.processor.repartition_purge_interval_ms,
            ),
        })
    }

    /// The ladder of input topic `base` (the default policy for a topic not configured).
    pub fn retry_for(&self, base: &str) -> &RetryPolicy {
        static DEFAULT: std::sync::OnceLock<RetryPolicy> = std::sync::OnceLock::new();
        self.retry
            .get(base)
            .unwrap_or_else(|| DEFAULT.get_or_init(RetryPolicy::default))
    }

    /// `transactional.id` of this loop: `<app>-<instance>` for the first processing thread
    /// (the id of a one-thread instance), `<app>-<instance>-t<i>` for thread `i` (KIP-447: one
    /// producer per thread, each fenced by its own id).
    ///
    /// ```
    /// use eosflow::config::Config;
    /// use eosflow::processor::RuntimeOptions;
    /// let mut config = Config::default();
    /// config.app.id = "orders".into();
    /// config.app.instance_id = "pod-0".into();
    /// config.processor.input_topics = vec!["in".into()];
    /// let mut opts = RuntimeOptions::from_config(&config).unwrap();
    /// assert_eq!(opts.transactional_id(), "orders-pod-0");
    /// opts.thread = 2;
    /// assert_eq!(opts.transactional_id(), "orders-pod-0-t2");
    /// assert_eq!(opts.member_instance_id(), "pod-0-t2");
    /// ```
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.app_id, self.member_instance_id())
    }

    /// This loop's `group.instance.id` under static membership: the instance id, suffixed
    /// `-t<i>` for processing thread `i` > 0 (every thread is its own group member).
    pub fn member_instance_id(&self) -> String {
        if self.thread == 0 {
            self.instance_id.clone()
        } else {
            format!("{}-t{}", self.instance_id, self.thread)
        }
    }
}

/// Counters of one run, returned when the loop stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Records handled (processed, dead-lettered or deduplicated) in committed transactions.
    pub records: u64,
    /// Records skipped as already-seen ids.
    pub dedup_hits: u64,
    /// Records sent to a dead-letter topic.
    pub dead_lettered: u64,
    /// Records a windowed aggregate or join found late (older than their window's close):
    /// dead-lettered as `late-record`, and counted in `dead_lettered` too.
    pub late: u64,
    /// Records forwarded up the retry ladder after a transient failure.
    pub retried: u64,
    /// Records forwarded behind their key's head instead of being processed.
    pub parked_followers: u64,
    /// Timers fired (their callbacks run, or dead-lettered when they failed); a batch that
    /// aborted after firing some counts them again when it is redone.
    pub timers_fired: u64,
    /// Table records written into their table's store (a batch that aborted counts its own
    /// again when it is redone).
    pub table_updates: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Transactions aborted.
    pub aborts: u64,
    /// Partition restores and what they replayed: the latest [`MAX_RESTORES_KEPT`] (an
    /// instance rebalanced for weeks must not grow without bound).
    pub restores: Vec<(i32, RestoreStats)>,
}

/// The most restores a [`RunSummary`] keeps (the latest ones).
pub const MAX_RESTORES_KEPT: usize = 1024;

impl RunSummary {
    /// Records one restore, keeping the latest [`MAX_RESTORES_KEPT`].
    pub(crate) fn restored(&mut self, partition: i32, stats: RestoreStats) {
        if self.restores.len() >= MAX_RESTORES_KEPT {
            let excess = self.restores.len() + 1 - MAX_RESTORES_KEPT;
            self.restores.drain(..excess);
        }
        self.restores.push((partition, stats));
    }

    /// Adds another processing thread's counters to these.
    pub fn absorb(&mut self, other: RunSummary) {
        self.records += other.records;
        self.dedup_hits += other.dedup_hits;
        self.dead_lettered += other.dead_lettered;
        self.late += other.late;
        self.retried += other.retried;
        self.parked_followers += other.parked_followers;
        self.timers_fired += other.timers_fired;
        self.table_updates += other.table_updates;
        self.commits += other.commits;
        self.aborts += other.aborts;
        for (p, stats) in other.restores {
            self.restored(p, stats);
        }
    }
}

#[derive(Debug)]
enum GroupEvent {
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

/// The exactly-once runtime of one instance.
pub struct Runtime<P: Processor> {
    pub(super) opts: RuntimeOptions,
    clients: KafkaClients,
    pub(super) processor: P,
    consumer: BaseConsumer<GroupContext>,
    pub(super) sink: TxnSink,
    cache: StoreCache,
    changelog: String,
    /// The named stores: (name, changelog topic), in [`Processor::stores`] order.
    stores: Vec<(String, String)>,
    pub(super) tasks: BTreeMap<i32, Task>,
    assigned: Assignment,
    /// Retry-level partitions paused until their head record is due (ms).
    paused: BTreeMap<(String, i32), i64>,
    health: Arc<Health>,
    pub(super) summary: RunSummary,
    /// Outputs sent in the open batch, per topic: counted as produced once it commits.
    pub(super) produced: BTreeMap<String, u64>,
    /// Records the handler processed in the open batch, per input topic (counted at commit).
    pub(super) processed: BTreeMap<String, u64>,
    /// `occurred_at` text of outputs, formatted once per millisecond.
    pub(super) clock: Rfc3339Clock,
    /// Records in the last batch: the next one's starting capacity.
    last_batch_len: usize,
    /// Records isolated from a failed batch, by (topic, partition, offset): the next time they
    /// come they are dead-lettered without running the handler (see [`Isolated`]).
    pub(super) isolated: HashMap<(String, i32, i64), Isolated>,
    /// A record to run in a transaction of its own (suspected of failing its batch).
    alone: Option<(String, i32, i64)>,
    /// While a record error that no send names is being narrowed down: the most records the
    /// next batch may take (halved on each such failure, doubled on each commit).
    batch_cap: Option<usize>,
    /// After a batch was closed early (half the transaction timeout used): the most records the
    /// next batch may take — what fitted — grown by a quarter on each batch that fits.
    time_cap: Option<usize>,
    /// Delivery reports of the open batch's outputs and forwards, with the index in the batch
    /// of the record that caused them: a failed transaction names its culprit from these.
    pub(super) deliveries: Vec<(DeliveryFuture, usize)>,
    /// Index in the batch of the record being handled.
    pub(super) current: usize,
    /// Set by `attempt` for an isolated record: `fail` dead-letters it with this class and
    /// starts at this reduction stage (0 whole, 1 truncated, 2 pointer only).
    pub(super) forced_dead_letter: Option<(DltClass, u8)>,
    /// Topics confirmed to exist: an output to a topic the broker does not know would otherwise
    /// wait in librdkafka's queue past the commit instead of failing on its record.
    pub(super) known_topics: BTreeSet<String>,
    /// When the producer was last recreated in place after a fencing answer (recent ones).
    fence_recoveries: Vec<Instant>,
    /// Every topic of one partition index (inputs, retry levels, DLTs, changelog).
    copartitioned: Vec<String>,
    /// With tables: the latest timestamp committed per input or table (topic, partition)
    /// (see [`super::align`]).
    aligned_seen: HashMap<(String, i32), i64>,
    /// With tables: a lower bound of the timestamps not handled yet per input or table (topic,
    /// partition): the earliest record of it a batch polled and did not handle (records are
    /// assumed in timestamp order within a partition). It lets a partition number progress
    /// when a batch holds records of only one of its topics.
    aligned_head: HashMap<(String, i32), i64>,
    /// The open batch's records held by timestamp alignment (indexes into the batch), the
    /// latest timestamps it handled and the heads it left: applied if it commits (on any
    /// path), dropped if not.
    batch_alignment: (Vec<usize>, align::Times, align::Times),
    /// `processor.standby_replicas`.
    standby_replicas: usize,
    /// The standby tailer while the loop runs (`processor.standby_replicas` > 0), shared by
    /// the instance's processing threads.
    standby: Option<Arc<super::standby::Standby>>,
    /// The partitions the instance's processing threads hold open (more than one thread).
    pub(super) leases: Option<Arc<super::threads::Leases>>,
    /// The topics the group consumer subscribes to when `run` starts (after the global tables
    /// are bootstrapped).
    subscription: Vec<String>,
    /// The processor's global tables, bootstrapped by `run`.
    globals: Vec<crate::topology::GlobalTable>,
    /// Under the consumer protocol: (topic, partition) pairs assigned while other topics of
    /// their partition number are still being released by their previous owner. Paused, and
    /// not processed until the number is complete.
    incoming: Assignment,
    /// Since when each partly assigned partition number has waited for the rest.
    incomplete_since: BTreeMap<i32, Instant>,
    /// The inputs' partition count (one for every co-partitioned topic), once read.
    partitions: Option<usize>,
    /// The topics taking part in timestamp alignment, with their rank (tables first) and
    /// sub-topology: those of sub-topologies reading two or more of them (none with
    /// `processor.max_task_idle_ms = -1`).
    aligned: Vec<(String, u8, usize)>,
    /// With `processor.max_task_idle_ms > 0`: since when each task (sub-topology, partition
    /// number) has waited for a partition that is read to its end.
    idle_since: HashMap<(usize, i32), Instant>,
    /// Each repartition topic this processor writes, with its writing sub-topology.
    writers: Vec<(String, usize)>,
    /// What the upstream tasks broadcast to the repartition topics (see [`super::watermarks`]).
    watermarks: super::watermarks::Watermarks,
    /// Deletes consumed repartition records (see [`super::purge`]).
    purger: super::purge::Purger,
}

/// Test-only faults (hidden): the applications whose next transaction that commits *without
/// input offsets* (due wall-clock timers on an idle partition, parked followers draining) is
/// reported as [`SinkError::CommitUnknown`] right after it landed — what a lost `EndTxn` answer
/// looks like — so a test can prove such a batch is neither lost nor repeated.
#[doc(hidden)]
pub mod faults {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    static OFFSETLESS_COMMIT_UNKNOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

    /// Arms the fault for application `app_id` (once).
    pub fn report_next_offsetless_commit_unknown(app_id: &str) {
        if let Ok(mut s) = OFFSETLESS_COMMIT_UNKNOWN.lock() {
            s.insert(app_id.to_string());
        }
    }

    /// Whether the fault is still armed for `app_id` (not yet fired).
    pub fn offsetless_commit_unknown_armed(app_id: &str) -> bool {
        OFFSETLESS_COMMIT_UNKNOWN
            .lock()
            .is_ok_and(|s| s.contains(app_id))
    }

    /// Fires the fault for `app_id` if armed.
    pub(crate) fn take_offsetless_commit_unknown(app_id: &str) -> bool {
        OFFSETLESS_COMMIT_UNKNOWN
            .lock()
            .is_ok_and(|mut s| s.remove(app_id))
    }
}

/// What an instance runs once beside its processing loops, whatever their number: the global
/// tables' stores and tailing threads, the DLT depth gauges, the standby tailer. Stopped when
/// dropped, after the loops.
pub(super) struct InstanceServices {
    globals: Option<super::globals::Globals>,
    _depth: Option<DepthWatcher>,
    standby: Option<Arc<super::standby::Standby>>,
}

/// Why one batch did not commit, with what the loop needs to find the record to blame.
struct BatchFailure {
    error: SinkError,
    /// Index of the record being handled when a send failed on that record.
    culprit: Option<usize>,
    /// The offsets the transaction would have committed (to learn an unknown outcome).
    next_offsets: Vec<(String, i32, i64)>,
    /// The order records were handled in (indexes into the batch).
    order: Vec<usize>,
    /// Records handled before the failure (a prefix of `order`).
    handled: usize,
    /// The record whose handler call took longest, if it outlived half the transaction timeout.
    slow: Option<(usize, Duration)>,
}

/// A batch whose transaction committed.
struct Committed {
    /// Last changelog offset written per (store, partition); store 0 is the default one,
    /// `i + 1` the named store `i`.
    ends: HashMap<(usize, i32), i64>,
    /// The order records were handled in (indexes into the batch).
    order: Vec<usize>,
    /// Records handled (a prefix of `order`; the rest are read again).
    handled: usize,
    /// Next offsets committed.
    next_offsets: Vec<(String, i32, i64)>,
}

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
pub(super) struct Rfc3339Clock {
    ms: i64,
    text: String,
}

impl Rfc3339Clock {
    /// Now, as `2026-12-03T10:00:00.123Z`.
    pub(super) fn rfc3339_now(&mut self) -> &str {
        let now = chrono::Utc::now();
        let ms = now.timestamp_millis();
        if ms != self.ms || self.text.is_empty() {
            self.ms = ms;
            self.text = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        }
        &self.text
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

/// The order a batch is handled in: round-robin over its (topic, partition) runs, each run in
/// offset order. A batch closed early (half the transaction timeout used) then leaves a little
/// of every partition for the next one, rather than starving the partitions that happen to come
/// last in the poll order. The run of `first` (a record to run alone) goes first, so that record
/// reaches the head of a batch.
fn fair_order(batch: &[OwnedMessage], first: Option<&(String, i32, i64)>) -> Vec<usize> {
    let mut runs: Vec<(&str, i32, Vec<usize>)> = Vec::new();
    // Polled records come in long runs of one partition: the last run is asked first.
    let mut last = 0;
    for (i, m) in batch.iter().enumerate() {
        let same = |(t, p, _): &(&str, i32, Vec<usize>)| *p == m.partition() && *t == m.topic();
        if !runs.get(last).is_some_and(same) {
            last = match runs.iter().position(same) {
                Some(at) => at,
                None => {
                    runs.push((m.topic(), m.partition(), Vec::new()));
                    runs.len() - 1
                }
            };
        }
        runs[last].2.push(i);
    }
    if runs.len() <= 1 {
        return (0..batch.len()).collect();
    }
    if let Some((t, p, _)) = first {
        if let Some(at) = runs.iter().position(|(rt, rp, _)| rt == t && rp == p) {
            let run = runs.remove(at);
            runs.insert(0, run);
        }
    }
    let mut order = Vec::with_capacity(batch.len());
    let longest = runs.iter().map(|r| r.2.len()).max().unwrap_or(0);
    for k in 0..longest {
        order.extend(runs.iter().filter_map(|r| r.2.get(k)));
    }
    order
}

/// Whether `e` is an error of one record (too large, unknown topic …), not of the transaction.
fn record_error_in(e: &SinkError) -> bool {
    let code = match e {
        SinkError::Unwritable { .. } => return true,
        SinkError::Abortable(k) | SinkError::Fatal(k) | SinkError::CommitUnknown(k) => {
            k.rdkafka_error_code()
        }
        SinkError::Fenced { .. }
        | SinkError::NoGroupMetadata
        | SinkError::StateRead(_)
        | SinkError::Stuck(_) => None,
    };
    code.is_some_and(is_record_error)
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

/// Refuses a table whose store name is another store's, whose topic is also an input, or
/// that is listed twice.
fn check_tables(
    opts: &RuntimeOptions,
    default_store: &str,
    stores: &[(String, String)],
) -> Result<(), RuntimeError> {
    let mut names = BTreeSet::from([default_store.to_string()]);
    names.extend(stores.iter().map(|(n, _)| n.clone()));
    let mut topics = BTreeSet::new();
    for (name, topic) in &opts.tables {
        if !names.insert(name.clone()) {
            return Err(RuntimeError::Config(format!(
                "table store name {name:?} is also another store's: every store needs its own name"
            )));
        }
        if opts.input_topics.contains(topic) || !topics.insert(topic.clone()) {
            return Err(RuntimeError::Config(format!(
                "table topic {topic:?} is also an input or another table's topic"
            )));
        }
    }
    Ok(())
}

/// The changelog topic of each named store, refusing a name used twice or the default store's.
fn named_changelogs(
    app_id: &str,
    default_store: &str,
    names: Vec<String>,
) -> Result<Vec<(String, String)>, RuntimeError> {
    let mut seen = BTreeSet::from([default_store.to_string()]);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        if !seen.insert(name.clone()) {
            return Err(RuntimeError::Config(format!(
                "store name {name:?} is used twice (the default store is {default_store:?}): every store needs its own changelog"
            )));
        }
        let topic = format!("{app_id}-{name}-changelog");
        out.push((name, topic));
    }
    Ok(out)
}

/// The loop's group member, with `protocol`.
fn group_consumer(
    clients: &KafkaClients,
    opts: &RuntimeOptions,
    standby_replicas: usize,
    protocol: crate::config::GroupProtocol,
) -> Result<BaseConsumer<GroupContext>, KafkaError> {
    let instance = opts.static_membership.then(|| opts.member_instance_id());
    let mut group_config = clients.config(ClientRole::GroupConsumer {
        group: &opts.app_id,
        session_timeout: opts.session_timeout,
        instance: instance.as_deref(),
    });
    if standby_replicas > 0 {
        // How the standby placement finds this instance among the group's members.
        group_config.set("client.id", super::standby::client_id(&opts.instance_id));
    }
    if protocol == crate::config::GroupProtocol::Consumer {
        crate::kafka::client::consumer_protocol(&mut group_config);
    }
    group_config.create_with_context(GroupContext::default())
}

/// How long a partition number may stay partly assigned under the consumer protocol (some of
/// its topics given, others still being released by their previous owner) before the
/// assignment is refused as not co-partitioned.
const PARTIAL_ASSIGNMENT_LIMIT: Duration = Duration::from_secs(60);

/// Which of `topics` the broker does not know.
fn missing_topics(
    consumer: &BaseConsumer<GroupContext>,
    topics: &[String],
) -> Result<Vec<String>, KafkaError> {
    let md = consumer.fetch_metadata(None, Duration::from_secs(30))?;
    let known: BTreeSet<&str> = md
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| t.name())
        .collect();
    Ok(topics
        .iter()
        .filter(|t| !known.contains(t.as_str()))
        .cloned()
        .collect())
}

pub(super) use crate::clock::now_ms;

impl<P: Processor> Runtime<P> {
    /// Connects: creates the transactional producer (fencing a previous incarnation of this
    /// instance) and subscribes the group consumer.
    pub fn new(config: &Config, processor: P) -> Result<Self, RuntimeError> {
        Self::new_member(config, processor, 0)
    }

    /// The loop of processing thread `thread` (see [`super::threads`]).
    pub(super) fn new_member(
        config: &Config,
        mut processor: P,
        thread: usize,
    ) -> Result<Self, RuntimeError> {
        // A topology names its repartition topics for the application before its inputs are
        // asked for: they are inputs too (retry levels, DLT, co-partitioned, subscribed).
        processor.bind_application(&config.app.id);
        let mut opts = match processor.input_topics() {
            Some(inputs) => {
                let mut config = config.clone();
                config.processor.input_topics = inputs;
                RuntimeOptions::from_config(&config)?
            }
            None => RuntimeOptions::from_config(config)?,
        };
        opts.thread = thread;
        let clients = KafkaClients::new(config.kafka.clone());
        let changelog = format!("{}-{}-changelog", opts.app_id, processor.store_name());
        let stores = named_changelogs(&opts.app_id, processor.store_name(), processor.stores())?;
        opts.tables = processor.tables();
        opts.versioned_tables = processor.versioned_tables();
        check_tables(&opts, processor.store_name(), &stores)?;
        let sink = if opts.exactly_once {
            TxnSink::new(&clients, &opts.transactional_id(), opts.transaction_timeout)?
        } else {
            TxnSink::plain(&clients, &opts.transactional_id(), opts.transaction_timeout)?
        };
        let standby_replicas = config.processor.standby_replicas as usize;
        let consumer = group_consumer(&clients, &opts, standby_replicas, opts.group_protocol)?;
        let mut needed: Vec<String> = opts
            .input_topics
            .iter()
            .flat_map(|t| ladder_topics(std::slice::from_ref(t), opts.retry_for(t).levels()))
            .collect();
        needed.push(changelog.clone());
        needed.extend(stores.iter().map(|(_, t)| t.clone()));
        // A table's topic is consumed with the inputs and co-partitioned with them; it has no
        // retry levels, DLT or changelog of its own.
        needed.extend(opts.tables.iter().map(|(_, t)| t.clone()));
        // Topics created a moment ago (by `topics apply` or a test) may take a few seconds to
        // show in metadata: a missing topic is asked for again before it is reported.
        let mut missing = missing_topics(&consumer, &needed)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !missing.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
            missing = missing_topics(&consumer, &needed)?;
        }
        if !missing.is_empty() {
            return Err(RuntimeError::Config(format!(
                "topics missing on {}: {}; declare them in topics/ and run `eosflow topics apply` (inputs, their .retry.<n> levels and .DLT, and the changelog share one partition count)",
                clients.bootstrap(),
                missing.join(", ")
            )));
        }
        let mut copartitioned = needed.clone();
        copartitioned.extend(opts.input_topics.iter().map(|t| dlt::topic_for(t)));
        let counts = partition_counts(&consumer, &copartitioned)?;
        check_copartitioned(&counts)?;
        let partitions = counts.values().next().copied();
        let aligned = align::aligned_topics(&opts, |t| processor.sub_topology(t));
        let writers: Vec<(String, usize)> = processor
            .repartition_topics()
            .into_iter()
            .filter_map(|t| Some((t.clone(), processor.repartition_writer(&t)?)))
            .collect();
        let purger = super::purge::Purger::new(
            &clients,
            processor.repartition_topics(),
            opts.repartition_purge_interval,
        );
        let subscribed: Vec<String> = needed
            .iter()
            .filter(|t| {
                !t.ends_with(".DLT") && **t != changelog && !stores.iter().any(|s| s.1 == **t)
            })
            .cloned()
            .collect();
        // A global table's topic is read whole, by every instance, before the group is joined
        // (`run`): it must exist now, and is not co-partitioned with anything.
        let globals = processor.global_tables();
        super::globals::check_topics(&clients, &globals, Duration::from_secs(10))?;
        std::fs::create_dir_all(&opts.state_dir).map_err(|source| StateError::Io {
            path: opts.state_dir.display().to_string(),
            source,
        })?;
        tracing::info!(
            transactional_id = %opts.transactional_id(),
            group = %opts.app_id,
            inputs = ?opts.input_topics,
            changelog = %changelog,
            "runtime started"
        );
        Ok(Self {
            cache: StoreCache::new(opts.block_cache_bytes),
            opts,
            clients,
            processor,
            consumer,
            sink,
            changelog,
            stores,
            tasks: BTreeMap::new(),
            assigned: Assignment::default(),
            paused: BTreeMap::new(),
            health: Arc::new(Health::new(Duration::from_secs(60))),
            summary: RunSummary::default(),
            produced: BTreeMap::new(),
            processed: BTreeMap::new(),
            clock: Rfc3339Clock::default(),
            last_batch_len: 0,
            isolated: HashMap::new(),
            alone: None,
            batch_cap: None,
            time_cap: None,
            deliveries: Vec::new(),
            current: 0,
            forced_dead_letter: None,
            known_topics: BTreeSet::new(),
            fence_recoveries: Vec::new(),
            copartitioned,
            aligned_seen: HashMap::new(),
            aligned_head: HashMap::new(),
            batch_alignment: (Vec::new(), HashMap::new(), HashMap::new()),
            standby_replicas,
            standby: None,
            leases: None,
            subscription: subscribed,
            globals,
            incoming: Assignment::default(),
            incomplete_since: BTreeMap::new(),
            partitions,
            aligned,
            idle_since: HashMap::new(),
            writers,
            watermarks: super::watermarks::Watermarks::default(),
            purger,
        })
    }

    /// At-least-once: commits the offsets of every committed batch and waits for the
    /// coordinator (the loop commits them asynchronously), so a clean stop repeats nothing.
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

    /// Reports liveness and readiness to `health` (served on `/healthz` and `/readyz`).
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.health = health;
        self
    }

    /// The changelog topic this runtime writes.
    pub fn changelog_topic(&self) -> &str {
        &self.changelog
    }

    /// Runs until `shutdown` is set (the open batch is committed first) or a fatal error.
    pub fn run(mut self, shutdown: Arc<AtomicBool>) -> Result<RunSummary, RuntimeError> {
        let services = self.start_services()?;
        self.join_services(&services)?;
        self.run_member(&shutdown)
    }

    /// Starts what an instance runs once beside its processing loops, from this loop's
    /// processor and settings. Global tables first, read to their end while `/readyz` says 503
    /// (a restore: alive, not ready); only then is the group joined, so no partition waits on
    /// this instance.
    pub(super) fn start_services(&self) -> Result<InstanceServices, RuntimeError> {
        Ok(InstanceServices {
            globals: self.bootstrap_globals()?,
            _depth: self.watch_dlt_depth(),
            standby: self.start_standby(),
        })
    }

    /// Makes this loop read through `services`: its processor's global tables are bound to
    /// the instance's stores, and its partitions are handed to and from the instance's standby
    /// tailer.
    pub(super) fn join_services(
        &mut self,
        services: &InstanceServices,
    ) -> Result<(), RuntimeError> {
        if let Some(g) = &services.globals {
            g.bind(&self.globals)?;
        }
        self.standby = services.standby.clone();
        Ok(())
    }

    /// Reads the processor's global tables to their end and keeps them current (`None`
    /// without any).
    fn bootstrap_globals(&self) -> Result<Option<super::globals::Globals>, RuntimeError> {
        if self.globals.is_empty() {
            return Ok(None);
        }
        self.health.set_restoring(true);
        let globals = super::globals::bootstrap(
            &self.clients,
            &self.opts.state_dir,
            &self.globals,
            self.opts.restore_timeout,
        );
        self.health.set_restoring(false);
        globals.map(Some)
    }

    /// The DLT depth gauges' watcher (one per instance).
    fn watch_dlt_depth(&self) -> Option<DepthWatcher> {
        if self.opts.dlt_depth_interval.is_zero() {
            return None;
        }
        let dlts = self.opts.input_topics.iter().map(|t| dlt::topic_for(t));
        DepthWatcher::start(&self.clients, dlts.collect(), self.opts.dlt_depth_interval)
            .map_err(|e| tracing::warn!(error = %e, "DLT depth gauges are off"))
            .ok()
    }

    /// Joins the group and runs the loop until `shutdown` or a fatal error; then leaves the
    /// group and closes the stores.
    pub(super) fn run_member(mut self, shutdown: &AtomicBool) -> Result<RunSummary, RuntimeError> {
        let topics: Vec<&str> = self.subscription.iter().map(String::as_str).collect();
        self.consumer.subscribe(&topics)?;
        let result = self.run_loop(shutdown);
        if !self.opts.exactly_once {
            self.commit_offsets_sync();
        }
        self.consumer.unsubscribe();
        let closed: Vec<i32> = self.tasks.keys().copied().collect();
        self.tasks.clear();
        self.closed(&closed);
        self.standby = None;
        match result {
            Ok(()) => Ok(self.summary),
            Err(e) => Err(e),
        }
    }

    /// `partitions`' stores are closed: the standby tailer and the instance's other processing
    /// threads may open them now.
    fn closed(&self, partitions: &[i32]) {
        if let Some(s) = &self.standby {
            s.disown(partitions);
        }
        if let Some(l) = &self.leases {
            l.release(partitions, self.opts.thread);
        }
    }

    /// The block cache this loop's stores share (one per instance).
    pub(super) fn cache(&self) -> &StoreCache {
        &self.cache
    }

    /// Shares `cache` with the instance's other processing threads.
    pub(super) fn set_cache(&mut self, cache: StoreCache) {
        self.cache = cache;
    }

    /// Starts the standby tailer (`processor.standby_replicas` > 0); without it the instance
    /// runs as before, its takeovers restoring whole changelogs.
    fn start_standby(&self) -> Option<Arc<super::standby::Standby>> {
        if self.standby_replicas == 0 {
            return None;
        }
        let mut changelogs = vec![self.changelog.clone()];
        changelogs.extend(self.stores.iter().map(|(_, t)| t.clone()));
        let opts = super::standby::StandbyOptions {
            replicas: self.standby_replicas,
            group: self.opts.app_id.clone(),
            me: super::standby::client_id(&self.opts.instance_id),
            input: self.opts.input_topics.first().cloned().unwrap_or_default(),
            changelogs,
            state_dir: self.opts.state_dir.clone(),
        };
        let owned = self.tasks.keys().copied().collect();
        match super::standby::Standby::start(self.clients.clone(), self.cache.clone(), opts, owned)
        {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::error!(error = %e, "standby replicas could not start; running without them");
                None
            }
        }
    }

    fn run_loop(&mut self, shutdown: &AtomicBool) -> Result<(), RuntimeError> {
        while !shutdown.load(Ordering::Relaxed) {
            let batch = self.poll_batch(shutdown)?;
            if batch.is_empty() && !self.work_pending(now_ms()) {
                continue;
            }
            self.commit_batch(batch)?;
        }
        Ok(())
    }

    /// Collects records until the batch is full or the commit interval has passed.
    fn poll_batch(&mut self, shutdown: &AtomicBool) -> Result<Vec<OwnedMessage>, RuntimeError> {
        let deadline = Instant::now() + self.opts.commit_interval;
        let mut batch: Vec<OwnedMessage> = Vec::with_capacity(self.last_batch_len);
        let mut bytes = 0usize;
        let max_records = self.batch_cap.map_or(self.opts.max_batch_records, |c| {
            c.min(self.opts.max_batch_records)
        });
        while batch.len() < max_records
            && bytes < self.opts.max_batch_bytes
            && !shutdown.load(Ordering::Relaxed)
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.resume_due()?;
            if !self.incomplete_since.is_empty() {
                self.check_incomplete()?;
            }
            // Liveness: at every idle poll, and every 256 records while busy (a clock read per
            // record is a measurable share of the loop).
            if batch.len().is_multiple_of(256) {
                self.health.beat();
            }
            let polled = self.consumer.poll(left).map(|r| r.map(|m| m.detach()));
            // Rebalances happened inside poll: drop records of revoked partitions (they were not
            // processed; their new owner reads them from the committed offset) and restore new ones.
            let events = self.consumer.context().take();
            if !events.is_empty() {
                self.on_group_events(events, &mut batch)?;
            }
            match polled {
                Some(Ok(m)) => {
                    bytes += m.payload().map_or(0, <[u8]>::len) + m.key().map_or(0, <[u8]>::len);
                    match self.assigned.level(m.topic(), m.partition()) {
                        // Input topics (level 0) are never paused.
                        Some(0) => batch.push(m),
                        Some(_) if !self.hold_if_not_due(&m)? => batch.push(m),
                        _ => {}
                    }
                }
                Some(Err(e)) => {
                    if let Some((code, reason)) = self.consumer.client().fatal_error() {
                        if self.refused_protocol(code) {
                            self.fall_back_to_classic(&reason)?;
                            continue;
                        }
                        // FENCED_INSTANCE_ID: a process with this instance id joined the group.
                        return Err(RuntimeError::Superseded {
                            id: self.opts.transactional_id(),
                            reason: format!("the group fenced this consumer ({code:?}: {reason})"),
                        });
                    }
                    tracing::warn!(error = %e, "consumer error");
                    telemetry::consumer_error();
                }
                None => {}
            }
        }
        Ok(batch)
    }

    /// Whether fatal error `code` is the broker refusing the consumer group protocol
    /// (KIP-848 switched off, or a broker too old for `ConsumerGroupHeartbeat` v1).
    fn refused_protocol(&self, code: rdkafka::types::RDKafkaErrorCode) -> bool {
        use rdkafka::types::RDKafkaErrorCode as C;
        self.opts.group_protocol == crate::config::GroupProtocol::Consumer
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
        self.opts.group_protocol = crate::config::GroupProtocol::Classic;
        let consumer = group_consumer(
            &self.clients,
            &self.opts,
            self.standby_replicas,
            self.opts.group_protocol,
        )?;
        let topics: Vec<&str> = self.subscription.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        // Nothing processed under the refused membership survives it.
        let closed: Vec<i32> = self.tasks.keys().copied().collect();
        self.tasks.clear();
        self.closed(&closed);
        self.assigned = Assignment::default();
        self.incoming = Assignment::default();
        self.incomplete_since.clear();
        self.paused.clear();
        self.consumer = consumer;
        Ok(())
    }

    fn on_group_events(
        &mut self,
        events: Vec<GroupEvent>,
        batch: &mut Vec<OwnedMessage>,
    ) -> Result<(), RuntimeError> {
        self.health.set_ready(false);
        for event in events {
            match event {
                GroupEvent::Revoked(parts) => {
                    tracing::info!(partitions = ?parts, "partitions revoked");
                    telemetry::rebalance("revoke");
                    for p in &parts {
                        self.assigned.remove(&p.0, p.1);
                        self.incoming.remove(&p.0, p.1);
                        self.paused.remove(p);
                    }
                    let waiting = self.incoming.partitions();
                    self.incomplete_since.retain(|p, _| waiting.contains(p));
                    batch.retain(|m| self.assigned.contains(m.topic(), m.partition()));
                    let live = self.assigned.partitions();
                    let gone: Vec<i32> = self
                        .tasks
                        .keys()
                        .filter(|p| !live.contains(p))
                        .copied()
                        .collect();
                    self.tasks.retain(|p, _| live.contains(p));
                    self.closed(&gone);
                    // What a partition's next owner handled is not known here.
                    self.aligned_seen.retain(|(_, p), _| live.contains(p));
                    self.aligned_head.retain(|(_, p), _| live.contains(p));
                    self.idle_since.retain(|(_, p), _| live.contains(p));
                    self.watermarks.forget();
                }
                // The consumer protocol follows every revocation with an empty assignment.
                GroupEvent::Assigned(parts) if parts.is_empty() => {}
                GroupEvent::Assigned(parts) => {
                    tracing::info!(partitions = ?parts, "partitions assigned");
                    telemetry::rebalance("assign");
                    let parts = self.complete_assignment(parts)?;
                    if parts.is_empty() {
                        continue;
                    }
                    let numbers: BTreeSet<i32> = parts.iter().map(|(_, p)| *p).collect();
                    let new: Vec<i32> = numbers
                        .into_iter()
                        .filter(|p| !self.tasks.contains_key(p))
                        .collect();
                    if let Some(s) = &self.standby {
                        // Its warm copies close before the stores are opened here.
                        s.own(&new);
                    }
                    self.await_stable_offsets(&parts, &new);
                    for p in new {
                        self.open_task(p)?;
                    }
                    // librdkafka keeps a partition's pause across a rebalance: a retry level this
                    // instance paused before must not stay paused when it comes back.
                    let mut tpl = TopicPartitionList::new();
                    for (t, p) in &parts {
                        tpl.add_partition(t, *p);
                        self.paused.remove(&(t.clone(), *p));
                    }
                    if let Err(e) = self.consumer.resume(&tpl) {
                        tracing::warn!(error = %e, "resuming newly assigned partitions");
                    }
                    for (t, p) in parts {
                        self.assigned.insert(t, p);
                    }
                }
            }
        }
        self.health.set_ready(true);
        Ok(())
    }

    /// The topics every partition number's task needs assigned together: inputs, their
    /// retry levels, tables (the group consumer's subscription).
    fn subscribed_topics(&self) -> Vec<&String> {
        self.copartitioned
            .iter()
            .filter(|t| {
                !t.ends_with(".DLT")
                    && **t != self.changelog
                    && !self.stores.iter().any(|s| s.1 == **t)
            })
            .collect()
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
    /// refused only after [`PARTIAL_ASSIGNMENT_LIMIT`].
    fn complete_assignment(
        &mut self,
        parts: Vec<(String, i32)>,
    ) -> Result<Vec<(String, i32)>, RuntimeError> {
        for (t, p) in &parts {
            self.incoming.insert(t.clone(), *p);
        }
        let subscribed: Vec<String> = self.subscribed_topics().into_iter().cloned().collect();
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
            if self.opts.group_protocol == crate::config::GroupProtocol::Classic {
                return Err(RuntimeError::CoPartitioning(format!(
                    "the group assigned partitions {numbers:?} without {}: refusing to process them (partition counts must match; check `eosflow topics plan`)",
                    lacking.join(", ")
                )));
            }
            tracing::info!(partitions = ?numbers, waiting_for = ?lacking, "partly assigned partitions wait for the rest of their topics");
            let mut tpl = TopicPartitionList::new();
            for (t, p) in &waiting {
                tpl.add_partition(t, *p);
            }
            self.consumer.pause(&tpl)?;
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
        PARTIAL_ASSIGNMENT_LIMIT.max(self.opts.restore_timeout + Duration::from_secs(60))
    }

    /// Refuses partition numbers that stayed partly assigned past
    /// [`Runtime::partial_assignment_limit`].
    fn check_incomplete(&self) -> Result<(), RuntimeError> {
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
    fn seek_to_committed(&self, pairs: &[(String, i32)]) -> Result<(), RuntimeError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in pairs {
            tpl.add_partition(t, *p);
        }
        let committed = self
            .consumer
            .committed_offsets(tpl, Duration::from_secs(10))?;
        let mut seek = TopicPartitionList::new();
        for e in committed.elements() {
            let at = match e.offset() {
                Offset::Offset(o) if o >= 0 => Offset::Offset(o),
                _ => Offset::Beginning,
            };
            seek.add_partition_offset(e.topic(), e.partition(), at)?;
        }
        self.consumer
            .seek_partitions(seek, Duration::from_secs(10))?;
        Ok(())
    }

    /// Before a new task reads its changelog's end: the group's committed offsets of its
    /// partitions as *stable* offsets (a read_committed consumer asks with `require_stable`, so
    /// the broker answers only once no transaction holding offsets for them is pending). A
    /// zombie's transaction that carries offsets for these partitions is thereby settled —
    /// committed or aborted — before the end is taken, and cannot land between the end and the
    /// first record processed. At-least-once has no transactions to wait for.
    fn await_stable_offsets(&self, parts: &[(String, i32)], new: &[i32]) {
        if !self.opts.exactly_once || new.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for (t, p) in parts.iter().filter(|(_, p)| new.contains(p)) {
            tpl.add_partition(t, *p);
        }
        let started = Instant::now();
        match self
            .consumer
            .committed_offsets(tpl, self.opts.restore_timeout)
        {
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
    /// Only asked for records of retry levels.
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
        self.consumer.pause(&tpl)?;
        self.consumer
            .seek_partitions(tpl, Duration::from_secs(10))?;
        tracing::debug!(topic = %tp.0, partition = tp.1, offset = m.offset(), due_at, "retry level paused until due");
        self.paused.insert(tp, due_at);
        Ok(true)
    }

    /// Resumes retry-level partitions whose head record is now due.
    fn resume_due(&mut self) -> Result<(), RuntimeError> {
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
        let mut tpl = TopicPartitionList::new();
        for (t, p) in &due {
            tpl.add_partition(t, *p);
            self.paused.remove(&(t.clone(), *p));
        }
        self.consumer.resume(&tpl)?;
        Ok(())
    }

    /// Opens partition `p`'s store and replays its changelog tail before any record is processed.
    fn open_task(&mut self, p: i32) -> Result<(), RuntimeError> {
        if let Some(leases) = &self.leases {
            // Another processing thread of this instance that had `p` closes its stores right
            // after its own poll saw the revocation.
            leases.acquire(p, self.opts.thread, self.opts.restore_timeout)?;
        }
        let opened = self.open_task_stores(p);
        if opened.is_err() {
            self.closed(&[p]);
        }
        opened
    }

    fn open_task_stores(&mut self, p: i32) -> Result<(), RuntimeError> {
        self.health.set_restoring(true);
        let restored = self.open_and_restore(p, &self.changelog);
        let mut named = Vec::with_capacity(self.stores.len());
        let mut named_error = None;
        for (name, topic) in &self.stores {
            match self.open_and_restore(p, topic) {
                Ok((store, rebuilt, stats)) => {
                    tracing::info!(partition = p, store = %name, rebuilt, replayed = stats.records, from = stats.from_offset, to = stats.to_offset, "restored named store");
                    telemetry::restored_records(p, stats.records);
                    named.push(NamedStore {
                        name: name.clone(),
                        store,
                        overlay: Overlay::default(),
                        table: false,
                        history_ms: None,
                    });
                }
                Err(e) => {
                    named_error = Some(e);
                    break;
                }
            }
        }
        if named_error.is_none() && !self.opts.tables.is_empty() {
            match self.open_tables(p) {
                Ok(tables) => named.extend(tables),
                Err(e) => named_error = Some(e),
            }
        }
        self.health.set_restoring(false);
        if let Some(e) = named_error {
            return Err(e);
        }
        let (store, rebuilt, stats) = restored?;
        let keys = store.estimate_keys(Column::State)?;
        tracing::info!(
            partition = p,
            rebuilt,
            from = stats.from_offset,
            to = stats.to_offset,
            replayed = stats.records,
            store_keys = keys,
            millis = stats.millis,
            "restored partition={p} replayed={} store_keys={keys} from={} to={}",
            stats.records,
            stats.from_offset,
            stats.to_offset
        );
        telemetry::restored(p, &stats);
        self.summary.restored(p, stats);
        let mut task = Task::open(p, store, named, self.processor.sub_topology_count())?;
        task.upstream_partitions = self.partitions;
        self.tasks.insert(p, task);
        Ok(())
    }

    /// The group's committed offset of each table topic's partition `p`, in table order
    /// (`None`: the group has not committed one yet). Asked again until the restore timeout:
    /// a table cannot be restored without knowing where its processing stopped.
    fn table_offsets(&self, p: i32) -> Result<Vec<Option<i64>>, RuntimeError> {
        let mut tpl = TopicPartitionList::new();
        for (_, topic) in &self.opts.tables {
            tpl.add_partition(topic, p);
        }
        let deadline = Instant::now() + self.opts.restore_timeout.max(Duration::from_secs(10));
        loop {
            match self
                .consumer
                .committed_offsets(tpl.clone(), Duration::from_secs(10))
            {
                Ok(got) => {
                    return Ok(self
                        .opts
                        .tables
                        .iter()
                        .map(
                            |(_, topic)| match got.find_partition(topic, p).map(|e| e.offset()) {
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

    /// Opens partition `p`'s store of every table and restores it from the table's topic up to
    /// the group's committed offset, so it holds exactly the table records processed before
    /// (the ones after are read as input, in order with the stream). A store whose checkpoint
    /// cannot be trusted (stale, past the committed offset, from another topic) is rebuilt
    /// from the topic alone; with no committed offset the group reads the topic from its start,
    /// so the store starts empty.
    fn open_tables(&self, p: i32) -> Result<Vec<NamedStore>, RuntimeError> {
        let offsets = self.table_offsets(p)?;
        let mut out = Vec::with_capacity(offsets.len());
        for ((name, topic), until) in self.opts.tables.iter().zip(offsets) {
            let path = self
                .opts
                .state_dir
                .join(format!("{}-{name}-table-{p}", self.opts.app_id));
            let path = path.as_path();
            let history = self.opts.table_history(name);
            let history_ms = history.map(crate::state::changelog::history_ms);
            // A versioned table's store holds versions a plain one lacks: switching a table
            // between the two rebuilds it from the topic.
            let source = match history {
                Some(_) => format!("{topic}[{p}] versioned"),
                None => format!("{topic}[{p}]"),
            };
            let (mut store, mut rebuilt) = Store::open(path, &source, &self.cache)?;
            let Some(until) = until else {
                if store.checkpoint()?.is_some() {
                    drop(store);
                    Store::wipe(path)?;
                    (store, _) = Store::open(path, &source, &self.cache)?;
                    rebuilt = true;
                }
                tracing::info!(partition = p, table = %name, topic = %topic, rebuilt, "no committed offset of the table topic yet: the table starts empty");
                out.push(NamedStore {
                    name: name.clone(),
                    store,
                    overlay: Overlay::default(),
                    table: true,
                    history_ms,
                });
                continue;
            };
            let timeout = self.opts.restore_timeout;
            let restore = |store: &Store| {
                restore_table(&self.clients, store, topic, p, until, history, timeout)
            };
            let stats = match restore(&store) {
                Err(
                    e @ (StateError::CheckpointAhead { .. } | StateError::StaleCheckpoint { .. }),
                ) => {
                    tracing::warn!(partition = p, table = %name, error = %e, "rebuilding the table from its topic alone");
                    drop(store);
                    Store::wipe(path)?;
                    (store, _) = Store::open(path, &source, &self.cache)?;
                    rebuilt = true;
                    restore(&store)?
                }
                other => other?,
            };
            tracing::info!(partition = p, table = %name, topic = %topic, rebuilt, replayed = stats.records, from = stats.from_offset, to = stats.to_offset, "restored table");
            telemetry::restored_records(p, stats.records);
            out.push(NamedStore {
                name: name.clone(),
                store,
                overlay: Overlay::default(),
                table: true,
                history_ms,
            });
        }
        Ok(out)
    }

    /// Opens partition `p`'s store of `changelog` and replays the changelog's tail into it
    /// (rebuilding it from the changelog alone when its checkpoint cannot be trusted).
    fn open_and_restore(
        &self,
        p: i32,
        changelog: &str,
    ) -> Result<(Store, bool, RestoreStats), RuntimeError> {
        let path = self.opts.state_dir.join(format!("{changelog}-{p}"));
        let path = path.as_path();
        let source = format!("{changelog}[{p}]");
        let source = source.as_str();
        let (mut store, mut rebuilt) = Store::open(path, source, &self.cache)?;
        let stats = match restore(
            &self.clients,
            &store,
            changelog,
            p,
            self.opts.restore_timeout,
        ) {
            Err(e @ (StateError::CheckpointAhead { .. } | StateError::StaleCheckpoint { .. })) => {
                tracing::warn!(partition = p, error = %e, "rebuilding the store from the changelog alone");
                drop(store);
                Store::wipe(path)?;
                (store, _) = Store::open(path, source, &self.cache)?;
                rebuilt = true;
                restore(
                    &self.clients,
                    &store,
                    changelog,
                    p,
                    self.opts.restore_timeout,
                )?
            }
            other => other?,
        };
        Ok((store, rebuilt, stats))
    }

    fn commit_batch(&mut self, batch: Vec<OwnedMessage>) -> Result<(), RuntimeError> {
        let started = Instant::now();
        self.last_batch_len = batch.len();
        let result = self.try_commit_batch(&batch);
        let deliveries = std::mem::take(&mut self.deliveries);
        self.forced_dead_letter = None;
        match result {
            Ok(done) => {
                drop(deliveries);
                self.on_committed(&batch, done, started)
            }
            Err(failure) => self.on_failed(&batch, *failure, deliveries, started),
        }
    }

    /// After a commit: the overlays go to RocksDB with the changelog offsets reached, the
    /// counters move, and records the batch did not get to (closed early) are read again.
    fn on_committed(
        &mut self,
        batch: &[OwnedMessage],
        done: Committed,
        started: Instant,
    ) -> Result<(), RuntimeError> {
        let named = self.stores.len();
        for (p, task) in self.tasks.iter_mut() {
            // A table's checkpoint is its topic's next offset committed in this transaction.
            let table_next = |i: usize| {
                let (_, topic) = self.opts.tables.get(i - 1 - named)?;
                done.next_offsets
                    .iter()
                    .find(|(t, q, _)| t == topic && q == p)
                    .map(|(_, _, o)| *o)
            };
            task.apply_committed(|store| match store {
                s if s > named => table_next(s),
                s => done.ends.get(&(s, *p)).map(|o| o + 1),
            })?;
        }
        let (handled, rest) = done.order.split_at(done.handled.min(done.order.len()));
        let handled: Vec<&OwnedMessage> = handled.iter().filter_map(|i| batch.get(*i)).collect();
        self.summary.commits += 1;
        self.summary.records += handled.len() as u64;
        let mut per_partition: BTreeMap<(&str, i32), u64> = BTreeMap::new();
        for m in &handled {
            *per_partition.entry((m.topic(), m.partition())).or_default() += 1;
        }
        for ((t, p), n) in per_partition {
            telemetry::consumed(t, p, n);
        }
        telemetry::committed(handled.len(), started.elapsed());
        telemetry::end_to_end_latency(
            crate::clock::now_ms(),
            handled.iter().filter_map(|m| m.timestamp().to_millis()),
        );
        for (topic, n) in std::mem::take(&mut self.produced) {
            telemetry::produced(&topic, n);
        }
        for (topic, n) in std::mem::take(&mut self.processed) {
            telemetry::processed(&topic, n);
        }
        if !self.isolated.is_empty() || self.alone.is_some() {
            let behind = |k: &(String, i32, i64)| {
                done.next_offsets
                    .iter()
                    .any(|(t, p, o)| *t == k.0 && *p == k.1 && k.2 < *o)
            };
            self.isolated.retain(|k, _| !behind(k));
            if self.alone.as_ref().is_some_and(behind) {
                self.alone = None;
            }
        }
        if let Some(cap) = self.batch_cap {
            self.batch_cap = Some(cap * 2).filter(|c| *c < self.opts.max_batch_records);
        }
        let (held, seen, heads) = std::mem::take(&mut self.batch_alignment);
        if !rest.is_empty() || !held.is_empty() {
            // One seek for both: a partition's held records come before its unread rest.
            let again = rest.iter().chain(&held);
            self.seek_back(again.filter_map(|i| batch.get(*i)))?;
        }
        if !rest.is_empty() {
            // Half the timeout was not enough for the batch: poll fewer records next time.
            self.time_cap = Some(handled.len().max(1));
        } else if let Some(cap) = self.time_cap {
            self.time_cap = Some(cap + cap / 4 + 1).filter(|c| *c < self.opts.max_batch_records);
        }
        if !self.aligned.is_empty() {
            self.aligned_seen = seen;
            self.aligned_head.extend(heads);
        }
        self.purger.committed(&done.next_offsets);
        Ok(())
    }

    /// A batch that did not commit (or may have): settle the producer, learn the outcome if it
    /// is unknown, and otherwise drop the batch's writes, blame the record that made it fail
    /// (if one did) and read the batch again. Only a producer superseded by a live process
    /// with this instance's id ends the instance.
    fn on_failed(
        &mut self,
        batch: &[OwnedMessage],
        failure: BatchFailure,
        deliveries: Vec<(DeliveryFuture, usize)>,
        started: Instant,
    ) -> Result<(), RuntimeError> {
        let BatchFailure {
            error,
            culprit,
            next_offsets,
            order,
            handled,
            slow,
        } = failure;
        // What the batch broadcast may not have committed: say it again.
        self.watermarks.forget();
        match &error {
            SinkError::Abortable(_)
            | SinkError::NoGroupMetadata
            | SinkError::Unwritable { .. }
            | SinkError::StateRead(_) => {
                if let Err(abort_err) = self.sink.abort() {
                    tracing::warn!(error = %abort_err, "abort failed; recreating the producer");
                    let cause = match abort_err {
                        SinkError::Stuck(_) => "stuck",
                        _ => "fatal",
                    };
                    self.recover_producer(&abort_err, cause, started.elapsed())?;
                }
            }
            SinkError::Fenced { .. } => {
                self.recover_producer(&error, "epoch-bumped", started.elapsed())?
            }
            SinkError::Fatal(_) => self.recover_producer(&error, "fatal", started.elapsed())?,
            // A stuck call wedged the producer; stuck in the commit, the outcome is unknown.
            SinkError::Stuck(_) if !error.commit_outcome_unknown() => {
                self.recover_producer(&error, "stuck", started.elapsed())?
            }
            SinkError::CommitUnknown(_) | SinkError::Stuck(_) => {
                let cause = match error {
                    SinkError::Stuck(_) => "stuck",
                    _ => "commit-unknown",
                };
                self.recover_producer(&error, cause, started.elapsed())?;
                if next_offsets.is_empty() {
                    // No input offset to ask the group about (due timers, draining followers,
                    // records held for alignment): the changelogs decide. Every task is opened
                    // again and restored to their last stable offset, which holds this batch's
                    // state changes (a fired timer's removal among them) if and only if it
                    // committed.
                    tracing::warn!(error = %error, "the outcome of a commit without input offsets is unknown: restoring every task from its changelogs");
                    telemetry::commit_resolved("restored");
                    return self.restore_after_unknown(batch);
                }
                if self.committed_for_sure(&next_offsets)? {
                    tracing::warn!(error = %error, records = handled, "the commit whose outcome was unknown had landed: keeping the batch");
                    telemetry::commit_resolved("committed");
                    let done = Committed {
                        ends: HashMap::new(),
                        order,
                        handled,
                        next_offsets,
                    };
                    return self.on_committed(batch, done, started);
                }
                tracing::warn!(error = %error, records = batch.len(), "the commit whose outcome was unknown did not land: processing the batch again");
                telemetry::commit_resolved("not-committed");
            }
        }
        for task in self.tasks.values_mut() {
            task.drop_batch();
        }
        self.produced.clear();
        self.processed.clear();
        self.summary.aborts += 1;
        telemetry::aborted();
        tracing::warn!(error = %error, records = batch.len(), "batch aborted");
        self.blame(batch, &error, culprit, deliveries, slow);
        self.seek_back(batch.iter())?;
        Ok(())
    }

    /// Finds the record that made a batch fail, so that reading the batch again does not fail
    /// the same way: a send that failed on one record (over the size limit, unknown topic), a
    /// delivery report naming one, or a handler call that outlived the transaction timeout.
    /// Blamed records are dead-lettered the next time they are read ([`Isolated`]).
    fn blame(
        &mut self,
        batch: &[OwnedMessage],
        error: &SinkError,
        culprit: Option<usize>,
        deliveries: Vec<(DeliveryFuture, usize)>,
        slow: Option<(usize, Duration)>,
    ) {
        let mut blamed: Vec<(usize, String, bool)> = Vec::new();
        if let (Some(i), SinkError::Unwritable { topic, source }) = (culprit, error) {
            blamed.push((
                i,
                format!("output to {topic}: {source}"),
                topic.ends_with(".DLT"),
            ));
        }
        for (f, i) in deliveries {
            use futures::FutureExt;
            let Some(Ok(Err((e, m)))) = f.now_or_never() else {
                continue;
            };
            if e.rdkafka_error_code().is_some_and(is_record_error) {
                let bytes = m.payload().map_or(0, <[u8]>::len) + m.key().map_or(0, <[u8]>::len);
                blamed.push((
                    i,
                    format!("output to {} ({bytes} bytes): {e}", m.topic()),
                    m.topic().ends_with(".DLT"),
                ));
            }
        }
        let mut found = false;
        for (i, reason, dead_letter_failed) in blamed {
            let Some(m) = batch.get(i) else { continue };
            found = true;
            let key = (m.topic().to_string(), m.partition(), m.offset());
            let entry = self.isolated.entry(key).or_insert_with(|| Isolated {
                class: DltClass::Unwritable,
                reason: reason.clone(),
                stage: 0,
            });
            if dead_letter_failed {
                // Its dead letter could not be written as it was: cut it down further.
                entry.stage = (entry.stage + 1).min(2);
            }
            tracing::error!(
                topic = m.topic(),
                partition = m.partition(),
                offset = m.offset(),
                reason = %reason,
                stage = entry.stage,
                "record isolated from its batch: it will be dead-lettered (class unwritable) so the partition moves on"
            );
            telemetry::record_isolated(m.topic(), DltClass::Unwritable.as_str());
        }
        if found {
            return;
        }
        // A record error no send of a record names (a state value too large for its changelog
        // record, say): halve the batch until the record is alone, then isolate it.
        if record_error_in(error) {
            if batch.len() == 1 {
                let m = &batch[0];
                let reason = format!("a record of its transaction could not be written: {error}");
                tracing::error!(topic = m.topic(), partition = m.partition(), offset = m.offset(), %reason, "record isolated by halving its batch: it will be dead-lettered (class unwritable)");
                telemetry::record_isolated(m.topic(), DltClass::Unwritable.as_str());
                self.isolated.insert(
                    (m.topic().to_string(), m.partition(), m.offset()),
                    Isolated {
                        class: DltClass::Unwritable,
                        reason,
                        stage: 0,
                    },
                );
                self.batch_cap = None;
            } else {
                let cap = (batch.len() / 2).max(1);
                tracing::warn!(error = %error, cap, "a record of the batch cannot be written and no send names it: halving the batch to find it");
                self.batch_cap = Some(cap);
            }
            return;
        }
        // No send named a record. A handler call that outlived half the transaction timeout is
        // the suspect (the coordinator aborts a transaction older than its timeout): it runs
        // again in a transaction of its own. Such a transaction only begins at its first send,
        // after the handler returned, so the slow call can no longer outlive it.
        if let Some((i, took)) = slow {
            let Some(m) = batch.get(i) else { return };
            tracing::warn!(
                topic = m.topic(),
                partition = m.partition(),
                offset = m.offset(),
                millis = took.as_millis() as u64,
                timeout_ms = self.opts.transaction_timeout.as_millis() as u64,
                "a handler call outlived half the transaction timeout in a batch that failed: running that record in a transaction of its own"
            );
            telemetry::slow_handler_call(m.topic());
            self.alone = Some((m.topic().to_string(), m.partition(), m.offset()));
        }
    }

    /// Replaces the producer after a fencing answer, a fatal error or an unknown commit
    /// outcome, under the same `transactional.id` — unless a live process with this instance's
    /// id has taken over, which the group tells: its consumer is then fenced too
    /// (`FENCED_INSTANCE_ID` under static membership), and recreating the producer would fence
    /// the successor. An epoch the coordinator bumped itself (it aborts a transaction that
    /// outlived `transaction.timeout.ms`, as after a broker pause) is no successor: the
    /// instance recovers in place. Input offsets stay where the group's committed offsets say,
    /// so nothing that committed is processed again.
    fn recover_producer(
        &mut self,
        error: &SinkError,
        cause: &'static str,
        txn_age: Duration,
    ) -> Result<(), RuntimeError> {
        if error.is_fenced() {
            // A successor's consumer replaces ours within two heartbeats of joining.
            let grace = self.opts.session_timeout * 2 / 5 + Duration::from_millis(500);
            let deadline = Instant::now() + grace;
            loop {
                if let Some((code, reason)) = self.consumer.client().fatal_error() {
                    tracing::error!(?code, %reason, "another process with this instance id took over: stopping");
                    return Err(RuntimeError::Superseded {
                        id: self.opts.transactional_id(),
                        reason: format!("the group fenced this consumer ({code:?}: {reason}) and the producer was fenced ({error})"),
                    });
                }
                if Instant::now() >= deadline {
                    break;
                }
                self.health.beat();
                std::thread::sleep(Duration::from_millis(100));
            }
            // A transaction open longer than the timeout explains the fencing: the coordinator
            // aborted it and bumped the epoch. Only the unexplained ones hint at a second
            // process with this id.
            let now = Instant::now();
            self.fence_recoveries
                .retain(|t| now.duration_since(*t) < FENCE_WINDOW);
            if txn_age < self.opts.transaction_timeout {
                self.fence_recoveries.push(now);
            }
            if self.fence_recoveries.len() > MAX_FENCE_RECOVERIES {
                tracing::error!(
                    recoveries = self.fence_recoveries.len(),
                    window_s = FENCE_WINDOW.as_secs(),
                    "fenced again and again: another live process seems to use transactional.id {}; stopping",
                    self.opts.transactional_id()
                );
                return Err(RuntimeError::Superseded {
                    id: self.opts.transactional_id(),
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

    /// Whether a transaction committed these next offsets: the group's *stable* committed
    /// offsets (read_committed asks with `require_stable`; the recreated producer has already
    /// settled our own transaction) are at or past every one of them. Asked again while the
    /// coordinator is away — the answer decides between keeping and redoing the batch.
    fn committed_for_sure(&self, next: &[(String, i32, i64)]) -> Result<bool, RuntimeError> {
        if next.is_empty() {
            return Ok(false);
        }
        let mut tpl = TopicPartitionList::new();
        for (t, p, _) in next {
            tpl.add_partition(t, *p);
        }
        let deadline = Instant::now() + crate::sink::COMMIT_RETRY_FOR * 3;
        loop {
            match self
                .consumer
                .committed_offsets(tpl.clone(), Duration::from_secs(10))
            {
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
                    self.health.beat();
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => return Err(RuntimeError::Consumer(e)),
            }
        }
    }

    /// After a commit whose outcome is unknown and cannot be read from the group's offsets:
    /// drops every task (its overlays and open stores) and opens it again, restored from its
    /// changelogs to their last stable offset — the truth whatever the outcome — then reads
    /// the batch's records again from the group's committed offsets.
    fn restore_after_unknown(&mut self, batch: &[OwnedMessage]) -> Result<(), RuntimeError> {
        self.produced.clear();
        self.processed.clear();
        self.batch_alignment = (Vec::new(), HashMap::new(), HashMap::new());
        let partitions: Vec<i32> = self.tasks.keys().copied().collect();
        self.tasks.clear();
        self.closed(&partitions);
        for p in &partitions {
            self.open_task(*p)?;
        }
        let mut pairs: Vec<(String, i32)> = batch
            .iter()
            .map(|m| (m.topic().to_string(), m.partition()))
            .collect();
        pairs.sort();
        pairs.dedup();
        if !pairs.is_empty() {
            self.seek_to_committed(&pairs)?;
        }
        Ok(())
    }

    /// Rewinds every partition of `batch` to its first record there.
    fn seek_back<'m>(
        &mut self,
        batch: impl Iterator<Item = &'m OwnedMessage>,
    ) -> Result<(), RuntimeError> {
        let mut first: HashMap<(String, i32), i64> = HashMap::new();
        for m in batch {
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
        if tpl.count() > 0 {
            self.consumer
                .seek_partitions(tpl, Duration::from_secs(10))?;
        }
        Ok(())
    }

    /// The transaction of one batch. Records are handled in order until the batch is done or
    /// half the transaction timeout has gone (the rest is read again), so a batch always
    /// commits well inside `transaction.timeout.ms`.
    fn try_commit_batch(&mut self, batch: &[OwnedMessage]) -> Result<Committed, Box<BatchFailure>> {
        let order = fair_order(batch, self.alone.as_ref());
        let aligning = !self.aligned.is_empty();
        self.batch_alignment = (Vec::new(), HashMap::new(), HashMap::new());
        let mut gate = align::Gate::default();
        // Each aligned record's time, by batch index (what its source's extractor says).
        let times: Vec<i64> = if aligning {
            batch
                .iter()
                .map(|m| match align::rank_of(&self.aligned, m.topic()) {
                    Some(_) => self.alignment_time(m),
                    None => i64::MIN,
                })
                .collect()
        } else {
            Vec::new()
        };
        let order = if aligning {
            let aligned = &self.aligned;
            let order = align::merge(batch, order, &times, |t| align::rank_of(aligned, t));
            for (k, &i) in order.iter().enumerate() {
                let m = &batch[i];
                if align::rank_of(aligned, m.topic()).is_some() {
                    gate.last_slot
                        .insert((m.topic().to_string(), m.partition()), k);
                }
            }
            gate.seen = self.aligned_seen.clone();
            order
        } else {
            order
        };
        // The tasks (partition number, sub-topology) that handled a record: not idle.
        let mut busy: BTreeSet<(i32, usize)> = BTreeSet::new();
        let tracks_busy = !self.writers.is_empty();
        let plain = |error: SinkError, order: Vec<usize>| {
            Box::new(BatchFailure {
                error,
                culprit: None,
                next_offsets: Vec::new(),
                order,
                handled: 0,
                slow: None,
            })
        };
        if aligning {
            // Whether the aligned partitions a held record would wait for are read to their
            // end: asked (a broker round trip each) before the transaction begins, not inside
            // it. Those with a record in the batch are asked only if a record waits for them.
            let present: BTreeSet<(&str, i32)> =
                batch.iter().map(|m| (m.topic(), m.partition())).collect();
            let tasks: BTreeSet<(usize, i32)> = batch
                .iter()
                .filter_map(|m| {
                    align::rank_of(&self.aligned, m.topic()).map(|(_, sub)| (sub, m.partition()))
                })
                .collect();
            for (sub, p) in tasks {
                for (t, _, s) in &self.aligned {
                    if *s == sub && !present.contains(&(t.as_str(), p)) {
                        let c = self.read_to_its_end(t, p);
                        gate.caught_up.insert((t.clone(), p), c);
                    }
                }
            }
        }
        if let Err(e) = self.sink.begin() {
            return Err(plain(e, order));
        }
        // Keyed by the batch's own topic names: no String per record.
        let mut next_offsets: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        let now = now_ms();
        if let Err(e) = self.drain_parked(now) {
            return Err(plain(e, order));
        }
        // Timers fired count like records against the batch's limit.
        let limit = self.opts.max_batch_records.max(1);
        let mut fired = match self.fire_due(limit, now) {
            Ok(n) => n,
            Err(e) => return Err(plain(e, order)),
        };
        let budget = self.opts.transaction_timeout / 2;
        let begun = Instant::now();
        let mut handled = order.len();
        let mut slow: Option<(usize, Duration)> = None;
        let mut last = begun;
        let mut previous = 0;
        for (k, &i) in order.iter().enumerate() {
            let m = &batch[i];
            // One clock read per record: it times the previous record's handler call too.
            let t = Instant::now();
            if k > 0 {
                let took = t.duration_since(last);
                if took >= budget && slow.is_none_or(|(_, s)| took > s) {
                    slow = Some((previous, took));
                }
                if t.duration_since(begun) >= budget {
                    handled = k;
                    tracing::warn!(handled = k, of = batch.len(), "batch closed early: half the transaction timeout is used; the rest is read again");
                    telemetry::batch_closed_early();
                    break;
                }
            }
            if k + fired >= limit {
                handled = k;
                tracing::debug!(
                    handled = k,
                    fired,
                    "batch closed at its limit by timers fired; the rest is read again"
                );
                break;
            }
            last = t;
            previous = i;
            let is_alone = self
                .alone
                .as_ref()
                .is_some_and(|a| a.0 == m.topic() && a.1 == m.partition() && a.2 == m.offset());
            if is_alone && k > 0 {
                // Commit what came before; the suspect starts the next transaction.
                handled = k;
                break;
            }
            let t = times.get(i).copied().unwrap_or(i64::MIN);
            if aligning && !self.may_handle(&mut gate, k, m, t) {
                gate.held_records.push(i);
                continue;
            }
            if tracks_busy {
                busy.insert((m.partition(), self.processor.sub_topology(m.topic())));
            }
            self.current = i;
            let handled_record = self.handle(m, now).and_then(|()| {
                let left = limit.saturating_sub(k + 1 + fired);
                self.fire_event_time(m.partition(), left, now)
            });
            if let Err(error) = handled_record.map(|n| fired += n) {
                let culprit = matches!(error, SinkError::Unwritable { .. }).then_some(i);
                return Err(Box::new(BatchFailure {
                    error,
                    culprit,
                    next_offsets: Vec::new(),
                    order,
                    handled: k,
                    slow,
                }));
            }
            next_offsets.insert((m.topic(), m.partition()), m.offset() + 1);
            if aligning && align::rank_of(&self.aligned, m.topic()).is_some() {
                let seen = gate
                    .seen
                    .entry((m.topic().to_string(), m.partition()))
                    .or_insert(i64::MIN);
                *seen = (*seen).max(times.get(i).copied().unwrap_or(i64::MIN));
            }
            if is_alone {
                handled = 1;
                let took = last.elapsed();
                if took >= budget {
                    slow = Some((i, took));
                }
                break;
            }
        }
        if handled == order.len() {
            let took = last.elapsed();
            if took >= budget && slow.is_none_or(|(_, s)| took > s) {
                slow = Some((previous, took));
            }
        }
        if aligning {
            // The first record (in offset order) of each aligned partition left for later
            // (held, or after the batch closed): in a partition in timestamp order nothing
            // after it is earlier. In one out of order (late stream records beside a
            // versioned table) its timestamp, not the least one left, is what the partition
            // offers next: taking the least could hold two partitions each waiting for the
            // other for good.
            let mut heads: HashMap<(String, i32), i64> = HashMap::new();
            for &i in gate
                .held_records
                .iter()
                .chain(&order[handled.min(order.len())..])
            {
                let m = &batch[i];
                if align::rank_of(&self.aligned, m.topic()).is_some() {
                    heads
                        .entry((m.topic().to_string(), m.partition()))
                        .or_insert(times.get(i).copied().unwrap_or(i64::MIN));
                }
            }
            self.batch_alignment = (gate.held_records, gate.seen, heads);
        }
        let owned_offsets: Vec<(String, i32, i64)> = next_offsets
            .iter()
            .map(|((t, p), o)| (t.to_string(), *p, *o))
            .collect();
        let fail = |error: SinkError, slow| {
            Box::new(BatchFailure {
                error,
                culprit: None,
                next_offsets: owned_offsets.clone(),
                order: order.clone(),
                handled,
                slow,
            })
        };
        self.purge_expired_dedup(now);
        if !self.writers.is_empty() {
            self.broadcast_watermarks(&busy)
                .map_err(|e| fail(e, slow))?;
        }
        let mut last_changelog: HashMap<(usize, i32), DeliveryFuture> = HashMap::new();
        for (p, task) in &mut self.tasks {
            dedup::seal(&mut task.overlay, now);
            for (col, key, value) in task.overlay.iter() {
                let Some(k) = dedup::changelog_key(col, key, value) else {
                    continue;
                };
                let f = self
                    .sink
                    .send(&self.changelog, Some(*p), Some(&k), value, &[])
                    .map_err(|e| fail(e, slow))?;
                last_changelog.insert((0, *p), f);
            }
            // Tables (after the named stores) have no changelog: their topic is one.
            for (i, n) in task.named.iter().enumerate().take(self.stores.len()) {
                let topic = &self.stores[i].1;
                for (key, value) in n.overlay.column(Column::State) {
                    let k = Column::State.changelog_key(key);
                    let f = self
                        .sink
                        .send(topic, Some(*p), Some(&k), value, &[])
                        .map_err(|e| fail(e, slow))?;
                    last_changelog.insert((i + 1, *p), f);
                }
            }
        }
        let mut offsets = TopicPartitionList::new();
        for ((t, p), o) in &next_offsets {
            offsets
                .add_partition_offset(t, *p, Offset::Offset(*o))
                .map_err(|e| fail(SinkError::Abortable(e), slow))?;
        }
        let committing = Instant::now();
        if self.sink.is_transactional() {
            let group = self
                .consumer
                .group_metadata()
                .ok_or_else(|| fail(SinkError::NoGroupMetadata, slow))?;
            self.sink
                .send_offsets(&offsets, group)
                .map_err(|e| fail(e, slow))?;
            self.sink.commit().map_err(|e| fail(e, slow))?;
            if next_offsets.is_empty() && faults::take_offsetless_commit_unknown(&self.opts.app_id)
            {
                tracing::warn!(
                    "test fault: reporting a landed commit without input offsets as unknown"
                );
                let e = KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut);
                return Err(fail(SinkError::CommitUnknown(e), slow));
            }
        } else {
            // At-least-once: outputs and changelog acknowledged first, then the offsets,
            // without waiting for the coordinator (a lost commit only repeats records, which
            // at-least-once allows and dedup mostly absorbs); the last ones are committed
            // synchronously at shutdown.
            self.sink.commit().map_err(|e| fail(e, slow))?;
            self.consumer
                .commit(&offsets, rdkafka::consumer::CommitMode::Async)
                .map_err(|e| fail(SinkError::Abortable(e), slow))?;
        }
        telemetry::commit_latency(committing.elapsed());
        if let Ok(mut c) = self.consumer.context().committed.lock() {
            c.extend(
                next_offsets
                    .into_iter()
                    .map(|((t, p), o)| ((t.to_string(), p), o)),
            );
        }
        let mut ends = HashMap::new();
        for (p, f) in last_changelog {
            match self.sink.delivered(f) {
                Some((_, offset)) => {
                    ends.insert(p, offset);
                }
                None => tracing::warn!(partition = p.1, store = p.0, "no delivery report for a committed changelog record; the next restore replays more"),
            }
        }
        Ok(Committed {
            ends,
            order,
            handled,
            next_offsets: owned_offsets,
        })
    }

    /// Timestamp alignment ([`super::align`]): whether the aligned record `m` (slot `k` of the
    /// order) may be handled now — every other table or input partition of its task (its
    /// sub-topology on its partition number) holds nothing that must come first. If not, the
    /// task is held for the rest of the batch. Records of other topics are always handled.
    fn may_handle(&mut self, gate: &mut align::Gate, k: usize, m: &OwnedMessage, t: i64) -> bool {
        let Some((r, sub)) = align::rank_of(&self.aligned, m.topic()) else {
            return true;
        };
        let p = m.partition();
        if gate.held.contains(&(sub, p)) {
            return false;
        }
        let others: Vec<(String, u8)> = self
            .aligned
            .iter()
            .filter(|(o, _, s)| *s == sub && o != m.topic())
            .map(|(o, r, _)| (o.clone(), *r))
            .collect();
        let mut waited_idle = false;
        for (other, other_rank) in others {
            let key = (other.clone(), p);
            if gate.last_slot.get(&key).is_some_and(|l| *l > k) {
                continue;
            }
            if align::seen_past(gate.seen.get(&key).copied(), t, r, other_rank)
                || align::seen_past(self.aligned_head.get(&key).copied(), t, r, other_rank)
            {
                continue;
            }
            let caught_up = match gate.caught_up.get(&key) {
                Some(c) => *c,
                None => {
                    let c = self.read_to_its_end(&other, p);
                    gate.caught_up.insert(key, c);
                    c
                }
            };
            // Read to its end: with `max_task_idle_ms > 0`, still waited for that long (a
            // producer that lags), then passed.
            let idle_wait = caught_up && self.opts.max_task_idle_ms > 0 && {
                waited_idle = true;
                let since = *self.idle_since.entry((sub, p)).or_insert_with(Instant::now);
                since.elapsed() < Duration::from_millis(self.opts.max_task_idle_ms.unsigned_abs())
            };
            if !caught_up || idle_wait {
                tracing::debug!(
                    topic = m.topic(),
                    partition = p,
                    offset = m.offset(),
                    waits_for = %other,
                    "held for timestamp alignment"
                );
                gate.held.insert((sub, p));
                return false;
            }
        }
        if !waited_idle {
            self.idle_since.remove(&(sub, p));
        }
        true
    }

    /// The time `m` is aligned by: its event time as the processor extracts it (what moves
    /// stream time), or its Kafka timestamp.
    fn alignment_time(&self, m: &OwnedMessage) -> i64 {
        let headers = super::drive::owned_headers(m);
        self.processor
            .event_time(&super::drive::record_of(m, &headers))
            .unwrap_or_else(|| align::kafka_ts(m))
    }

    /// Broadcasts the stream time of this loop's upstream tasks to the repartition topics they
    /// write (see [`super::watermarks`]), in the open transaction. `busy`: the tasks that
    /// handled a record in this batch.
    fn broadcast_watermarks(&mut self, busy: &BTreeSet<(i32, usize)>) -> Result<(), SinkError> {
        let Some(partitions) = self.partitions else {
            return Ok(());
        };
        let mut watermarks = std::mem::take(&mut self.watermarks);
        let inputs_of = |sub: usize| -> Vec<String> {
            self.opts
                .input_topics
                .iter()
                .chain(self.opts.tables.iter().map(|(_, t)| t))
                .filter(|t| self.processor.sub_topology(t) == sub)
                .cloned()
                .collect()
        };
        let mut caught_up =
            |p: i32, sub: usize| inputs_of(sub).iter().all(|t| self.read_to_its_end(t, p));
        let sink = &self.sink;
        let mut send = |topic: &str, q: i32, headers: &[(String, Vec<u8>)], ts: Option<i64>| {
            let h = headers.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
            sink.send_at(topic, Some(q), ts, None, None, h).map(|_| ())
        };
        let sent = watermarks.broadcast(
            &self.tasks,
            &self.writers,
            partitions,
            busy,
            &mut caught_up,
            &mut send,
        );
        self.watermarks = watermarks;
        let sent = sent?;
        if sent > 0 {
            telemetry::watermarks_sent(sent);
        }
        Ok(())
    }

    /// Whether this consumer has read `topic[partition]` to its last stable offset: nothing
    /// committed there is left to fetch (markers included, which move the position too).
    fn read_to_its_end(&self, topic: &str, partition: i32) -> bool {
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
                    .consumer
                    .committed_offsets(tpl, Duration::from_secs(5))
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

    /// Expires dedup ids older than the retention window, oldest batch first and a bounded
    /// number of ids per transaction; each expired batch leaves a changelog tombstone.
    fn purge_expired_dedup(&mut self, now: i64) {
        const MAX_IDS_PER_BATCH: usize = 10_000;
        let cutoff = now - self.opts.dedup_retention.as_millis() as i64;
        for (p, task) in self.tasks.iter_mut() {
            if task.last_purge.elapsed() < self.opts.dedup_purge_interval {
                continue;
            }
            task.last_purge = Instant::now();
            let expired = match task.store.dedup_batches_before(cutoff, MAX_IDS_PER_BATCH) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(partition = *p, error = %e, "listing expired dedup batches");
                    continue;
                }
            };
            let mut purged = 0;
            for key in expired {
                match dedup::remove(&task.store, &mut task.overlay, &key) {
                    Ok(n) => purged += n,
                    Err(e) => {
                        tracing::warn!(partition = *p, error = %e, "expiring a dedup batch");
                        break;
                    }
                }
                if purged >= MAX_IDS_PER_BATCH {
                    break;
                }
            }
            if purged > 0 {
                tracing::debug!(partition = *p, purged, "expired dedup ids removed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(topic: &str, partition: i32, offset: i64) -> OwnedMessage {
        OwnedMessage::new(
            None,
            None,
            topic.to_string(),
            rdkafka::Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    #[test]
    fn a_batch_is_handled_round_robin_over_its_partitions_each_in_offset_order() {
        // As polled: all of partition 0, then partition 1, then the retry level.
        let batch = vec![
            msg("in", 0, 10),
            msg("in", 0, 11),
            msg("in", 0, 12),
            msg("in", 1, 5),
            msg("in", 1, 6),
            msg("in.retry.1", 0, 3),
        ];
        assert_eq!(fair_order(&batch, None), vec![0, 3, 5, 1, 4, 2]);
        // A record to run alone brings its partition's run to the front.
        let alone = ("in".to_string(), 1, 5);
        assert_eq!(fair_order(&batch, Some(&alone)), vec![3, 0, 5, 4, 1, 2]);
        // One partition: poll order.
        assert_eq!(fair_order(&batch[..3], None), vec![0, 1, 2]);
    }

    #[test]
    fn a_run_summary_keeps_only_the_latest_restores() {
        let mut s = RunSummary::default();
        for p in 0..(MAX_RESTORES_KEPT as i32 + 10) {
            s.restored(p, RestoreStats::default());
        }
        assert_eq!(s.restores.len(), MAX_RESTORES_KEPT);
        assert_eq!(s.restores.first().map(|r| r.0), Some(10));
        let mut all = RunSummary::default();
        all.absorb(s.clone());
        all.absorb(s);
        assert_eq!(all.restores.len(), MAX_RESTORES_KEPT);
    }

    #[test]
    fn only_errors_of_one_record_count_as_record_errors() {
        use rdkafka::types::RDKafkaErrorCode as C;
        let abortable = |c| SinkError::Abortable(KafkaError::MessageProduction(c));
        assert!(record_error_in(&abortable(C::MessageSizeTooLarge)));
        assert!(record_error_in(&abortable(C::UnknownTopicOrPartition)));
        assert!(!record_error_in(&abortable(C::RequestTimedOut)));
        assert!(!record_error_in(&SinkError::NoGroupMetadata));
    }
}
