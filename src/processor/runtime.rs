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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::producer::DeliveryFuture;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::Processor;
use crate::config::Config;
use crate::kafka::{ClientRole, KafkaClients};
use crate::retry::depth::DepthWatcher;
use crate::retry::{dlt, headers as retry_headers, ladder_topics, RetryPolicy};
use crate::sink::{SinkError, TxnSink};
use crate::state::{dedup, restore, Column, Overlay, RestoreStats, StateError, Store, StoreCache};
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
    /// `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// Deadline for one partition's restore.
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
}

impl RuntimeOptions {
    /// Reads the options from a validated config.
    pub fn from_config(config: &Config) -> Result<Self, RuntimeError> {
        if config.processor.input_topics.is_empty() {
            return Err(RuntimeError::Config(
                "`processor.input_topics` (EOSFLOW_PROCESSOR_INPUT_TOPICS) is empty: name at least one input topic".into(),
            ));
        }
        let instance_id = config.instance_id();
        Ok(Self {
            app_id: config.app.id.clone(),
            state_dir: config.state.dir.join(&config.app.id).join(&instance_id),
            instance_id,
            input_topics: config.processor.input_topics.clone(),
            commit_interval: Duration::from_millis(config.processor.commit_interval_ms),
            max_batch_records: config.processor.max_batch_records,
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
            exactly_once: config.processor.guarantee != "at_least_once",
        })
    }

    /// The ladder of input topic `base` (the default policy for a topic not configured).
    pub fn retry_for(&self, base: &str) -> &RetryPolicy {
        static DEFAULT: std::sync::OnceLock<RetryPolicy> = std::sync::OnceLock::new();
        self.retry
            .get(base)
            .unwrap_or_else(|| DEFAULT.get_or_init(RetryPolicy::default))
    }

    /// `transactional.id` of this instance.
    pub fn transactional_id(&self) -> String {
        format!("{}-{}", self.app_id, self.instance_id)
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
    /// Records forwarded up the retry ladder after a transient failure.
    pub retried: u64,
    /// Records forwarded behind their key's head instead of being processed.
    pub parked_followers: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Transactions aborted.
    pub aborts: u64,
    /// Partition restores and what they replayed.
    pub restores: Vec<(i32, RestoreStats)>,
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
                if *id < 0 || part.hi_offset < 0 {
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

/// One assigned partition number: its store and the open batch's writes.
pub(super) struct Task {
    pub(super) store: Store,
    pub(super) overlay: Overlay,
    last_purge: Instant,
    /// Whether the committed store holds any parked key: almost never, and then the per-record
    /// lookup of the record's key in `parked` is skipped.
    pub(super) store_has_parked: bool,
    /// Parked keys whose followers are drained a chunk per transaction (see `drain_parked`).
    pub(super) draining: BTreeSet<Vec<u8>>,
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
}

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

pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

impl<P: Processor> Runtime<P> {
    /// Connects: creates the transactional producer (fencing a previous incarnation of this
    /// instance) and subscribes the group consumer.
    pub fn new(config: &Config, processor: P) -> Result<Self, RuntimeError> {
        let opts = RuntimeOptions::from_config(config)?;
        let clients = KafkaClients::new(config.kafka.clone());
        let changelog = format!("{}-{}-changelog", opts.app_id, processor.store_name());
        let sink = if opts.exactly_once {
            TxnSink::new(&clients, &opts.transactional_id(), opts.transaction_timeout)?
        } else {
            TxnSink::plain(&clients, &opts.transactional_id(), opts.transaction_timeout)?
        };
        let consumer: BaseConsumer<GroupContext> = clients
            .config(ClientRole::GroupConsumer {
                group: &opts.app_id,
                session_timeout: opts.session_timeout,
                instance: opts.static_membership.then_some(opts.instance_id.as_str()),
            })
            .create_with_context(GroupContext::default())?;
        let mut needed: Vec<String> = opts
            .input_topics
            .iter()
            .flat_map(|t| ladder_topics(std::slice::from_ref(t), opts.retry_for(t).levels()))
            .collect();
        needed.push(changelog.clone());
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
        let subscribed: Vec<String> = needed
            .iter()
            .filter(|t| !t.ends_with(".DLT") && **t != changelog)
            .cloned()
            .collect();
        let topics: Vec<&str> = subscribed.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
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
            tasks: BTreeMap::new(),
            assigned: Assignment::default(),
            paused: BTreeMap::new(),
            health: Arc::new(Health::new(Duration::from_secs(60))),
            summary: RunSummary::default(),
            produced: BTreeMap::new(),
            processed: BTreeMap::new(),
            clock: Rfc3339Clock::default(),
            last_batch_len: 0,
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
        let _depth = (!self.opts.dlt_depth_interval.is_zero())
            .then(|| {
                let dlts = self.opts.input_topics.iter().map(|t| dlt::topic_for(t));
                DepthWatcher::start(&self.clients, dlts.collect(), self.opts.dlt_depth_interval)
                    .map_err(|e| tracing::warn!(error = %e, "DLT depth gauges are off"))
                    .ok()
            })
            .flatten();
        let result = self.run_loop(&shutdown);
        if !self.opts.exactly_once {
            self.commit_offsets_sync();
        }
        self.consumer.unsubscribe();
        self.tasks.clear();
        match result {
            Ok(()) => Ok(self.summary),
            Err(e) => Err(e),
        }
    }

    fn run_loop(&mut self, shutdown: &AtomicBool) -> Result<(), RuntimeError> {
        while !shutdown.load(Ordering::Relaxed) {
            let batch = self.poll_batch(shutdown)?;
            if batch.is_empty() && !self.parked_drain_pending() {
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
        while batch.len() < self.opts.max_batch_records && !shutdown.load(Ordering::Relaxed) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.resume_due()?;
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
                    match self.assigned.level(m.topic(), m.partition()) {
                        // Input topics (level 0) are never paused.
                        Some(0) => batch.push(m),
                        Some(_) if !self.hold_if_not_due(&m)? => batch.push(m),
                        _ => {}
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "consumer error");
                    telemetry::consumer_error();
                }
                None => {}
            }
        }
        Ok(batch)
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
                        self.paused.remove(p);
                    }
                    batch.retain(|m| self.assigned.contains(m.topic(), m.partition()));
                    let live = self.assigned.partitions();
                    self.tasks.retain(|p, _| live.contains(p));
                }
                GroupEvent::Assigned(parts) => {
                    tracing::info!(partitions = ?parts, "partitions assigned");
                    telemetry::rebalance("assign");
                    let numbers: BTreeSet<i32> = parts.iter().map(|(_, p)| *p).collect();
                    for p in numbers {
                        if !self.tasks.contains_key(&p) {
                            self.open_task(p)?;
                        }
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
        let path = self.opts.state_dir.join(format!("{}-{p}", self.changelog));
        let source = format!("{}[{p}]", self.changelog);
        self.health.set_restoring(true);
        let restored = self.open_and_restore(p, &path, &source);
        self.health.set_restoring(false);
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
        self.summary.restores.push((p, stats));
        self.tasks.insert(
            p,
            Task {
                store_has_parked: !store.is_empty(Column::Parked)?,
                draining: crate::retry::parked::draining_keys(&store)?,
                store,
                overlay: Overlay::default(),
                last_purge: Instant::now(),
            },
        );
        Ok(())
    }

    fn open_and_restore(
        &self,
        p: i32,
        path: &std::path::Path,
        source: &str,
    ) -> Result<(Store, bool, RestoreStats), RuntimeError> {
        let (mut store, mut rebuilt) = Store::open(path, source, &self.cache)?;
        let stats = match restore(
            &self.clients,
            &store,
            &self.changelog,
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
                    &self.changelog,
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
        match self.try_commit_batch(&batch) {
            Ok(changelog_ends) => {
                for (p, task) in self.tasks.iter_mut() {
                    if task.overlay.is_empty() {
                        continue;
                    }
                    let next = changelog_ends.get(p).map(|o| o + 1);
                    task.store.apply(&task.overlay, next)?;
                    if task.overlay.column(Column::Parked).next().is_some() {
                        task.store_has_parked = !task.store.is_empty(Column::Parked)?;
                    }
                    task.overlay.clear();
                }
                self.summary.commits += 1;
                self.summary.records += batch.len() as u64;
                let mut per_partition: BTreeMap<(&str, i32), u64> = BTreeMap::new();
                for m in &batch {
                    *per_partition.entry((m.topic(), m.partition())).or_default() += 1;
                }
                for ((t, p), n) in per_partition {
                    telemetry::consumed(t, p, n);
                }
                telemetry::committed(batch.len(), started.elapsed());
                for (topic, n) in std::mem::take(&mut self.produced) {
                    telemetry::produced(&topic, n);
                }
                for (topic, n) in std::mem::take(&mut self.processed) {
                    telemetry::processed(&topic, n);
                }
                Ok(())
            }
            Err(e) => {
                for task in self.tasks.values_mut() {
                    task.overlay.clear();
                }
                self.produced.clear();
                self.processed.clear();
                self.summary.aborts += 1;
                telemetry::aborted();
                match &e {
                    SinkError::Fenced { .. } => return Err(e.into()),
                    SinkError::Abortable(_)
                    | SinkError::NoGroupMetadata
                    | SinkError::StateRead(_) => {
                        tracing::warn!(error = %e, records = batch.len(), "aborting batch");
                        if let Err(abort_err) = self.sink.abort() {
                            tracing::warn!(error = %abort_err, "abort failed; recreating the producer");
                            self.reset_sink()?;
                        }
                    }
                    SinkError::Fatal(err) => {
                        tracing::warn!(error = %err, "producer unusable; recreating it");
                        self.reset_sink()?;
                    }
                }
                self.seek_back(&batch)?;
                Ok(())
            }
        }
    }

    fn reset_sink(&mut self) -> Result<(), RuntimeError> {
        match self.sink.reset() {
            Ok(()) => Ok(()),
            Err(e @ SinkError::Fenced { .. }) => Err(e.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Rewinds every partition of an aborted batch to its first record.
    fn seek_back(&mut self, batch: &[OwnedMessage]) -> Result<(), RuntimeError> {
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

    /// The transaction of one batch; returns the last changelog offset written per partition.
    fn try_commit_batch(&mut self, batch: &[OwnedMessage]) -> Result<HashMap<i32, i64>, SinkError> {
        self.sink.begin()?;
        // Keyed by the batch's own topic names: no String per record.
        let mut next_offsets: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        let now = now_ms();
        self.drain_parked(now)?;
        for m in batch {
            next_offsets.insert((m.topic(), m.partition()), m.offset() + 1);
            self.handle(m, now)?;
        }
        self.purge_expired_dedup(now);
        let mut last_changelog: HashMap<i32, DeliveryFuture> = HashMap::new();
        for (p, task) in &mut self.tasks {
            dedup::seal(&mut task.overlay, now);
            for (col, key, value) in task.overlay.iter() {
                let Some(k) = dedup::changelog_key(col, key, value) else {
                    continue;
                };
                let f = self
                    .sink
                    .send(&self.changelog, Some(*p), Some(&k), value, &[])?;
                last_changelog.insert(*p, f);
            }
        }
        let mut offsets = TopicPartitionList::new();
        for ((t, p), o) in &next_offsets {
            offsets
                .add_partition_offset(t, *p, Offset::Offset(*o))
                .map_err(SinkError::Abortable)?;
        }
        let committing = Instant::now();
        if self.sink.is_transactional() {
            let group = self
                .consumer
                .group_metadata()
                .ok_or(SinkError::NoGroupMetadata)?;
            self.sink.send_offsets(&offsets, &group)?;
            self.sink.commit()?;
        } else {
            // At-least-once: outputs and changelog acknowledged first, then the offsets,
            // without waiting for the coordinator (a lost commit only repeats records, which
            // at-least-once allows and dedup mostly absorbs); the last ones are committed
            // synchronously at shutdown.
            self.sink.commit()?;
            self.consumer
                .commit(&offsets, rdkafka::consumer::CommitMode::Async)
                .map_err(SinkError::Abortable)?;
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
                None => tracing::warn!(partition = p, "no delivery report for a committed changelog record; the next restore replays more"),
            }
        }
        Ok(ends)
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
