//! The projection's consumer loop: group membership, claims, batches, dead letters.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eosflow_projection::{
    Applied, Batch, DeadLetter, PartitionBatch, ProjectionError, ProjectionStore, RowOp,
    StoreOptions,
};
use rdkafka::consumer::CommitMode;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Offset;

use crate::kafka::seams::{ConsumerSupplier, GroupConsumer, GroupEvent, GroupSettings, Pair};
use crate::kafka::{ClientRole, KafkaClients};
use crate::record::{ProcessError, Record};
use crate::retry::dlt;
use crate::sink::is_record_error;
use crate::telemetry;

/// What a projection function makes of one record: the row operations to apply with its offset,
/// and an optional message id for inbox deduplication.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Projected {
    /// A record whose id the projection already applied (at any offset, in any partition) is
    /// skipped: the inbox pattern, for producers that may send an event twice.
    pub message_id: Option<String>,
    /// Applied in order, in the batch's transaction.
    pub ops: Vec<RowOp>,
}

impl Projected {
    /// `ops` without a message id.
    pub fn ops(ops: Vec<RowOp>) -> Self {
        Self {
            message_id: None,
            ops,
        }
    }
}

/// How a projector runs.
///
/// Exists so the few settings that decide its guarantees and its throughput are named in one
/// place; [`ProjectorOptions::new`] gives production defaults.
#[derive(Debug, Clone)]
pub struct ProjectorOptions {
    /// The projection's name: its rows in `eosflow_offsets`, `eosflow_inbox` and
    /// `eosflow_dead_letters`, and its consumer group unless [`ProjectorOptions::group`] is set.
    pub name: String,
    /// The consumer group (`None`: the name). Only lag monitoring and the assignment use it:
    /// positions live in Postgres.
    pub group: Option<String>,
    /// The topics read.
    pub topics: Vec<String>,
    /// The Postgres URL (`sslmode`, `sslrootcert` as libpq reads them).
    pub postgres_url: String,
    /// The most records one transaction applies.
    pub max_batch_records: usize,
    /// How long a batch is filled before it is applied (the visibility latency it adds).
    pub max_batch_wait: Duration,
    /// The group's session timeout.
    pub session_timeout: Duration,
    /// Reconnects and retries of the store.
    pub store: StoreOptions,
    /// The longest pause between attempts when Postgres keeps failing (the loop never gives up
    /// a batch: it retries until Postgres answers or the partitions move to another member).
    pub max_backoff: Duration,
}

impl ProjectorOptions {
    /// A projection `name` of `topics` into the database at `postgres_url`, with defaults:
    /// batches of up to 1 000 records filled for at most 50 ms, a 10 s session.
    pub fn new(name: &str, topics: &[&str], postgres_url: &str) -> Self {
        Self {
            name: name.to_string(),
            group: None,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            postgres_url: postgres_url.to_string(),
            max_batch_records: 1000,
            max_batch_wait: Duration::from_millis(50),
            session_timeout: Duration::from_secs(10),
            store: StoreOptions::default(),
            max_backoff: Duration::from_secs(5),
        }
    }

    fn group_id(&self) -> &str {
        self.group.as_deref().unwrap_or(&self.name)
    }

    fn check(&self) -> Result<(), ProjectorError> {
        let bad = |key: &str, why: &str| {
            Err(ProjectorError::Config {
                key: key.to_string(),
                message: why.to_string(),
            })
        };
        if self.name.trim().is_empty() {
            return bad(
                "name",
                "a projection needs a name (it keys its bookkeeping rows)",
            );
        }
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            return bad("topics", "name at least one topic, none of them empty");
        }
        if self.max_batch_records == 0 {
            return bad("max_batch_records", "must be at least 1");
        }
        if self.postgres_url.trim().is_empty() {
            return bad(
                "postgres_url",
                "set the Postgres URL the projection writes to",
            );
        }
        Ok(())
    }
}

/// Why a projector could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    /// A setting is wrong; `key` names it.
    #[error("projector setting {key}: {message}")]
    Config {
        /// The setting.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The store could not be set up (unreachable Postgres at start, no permission to create
    /// the bookkeeping tables).
    #[error("projection store: {0}")]
    Store(#[from] ProjectionError),
    /// A Kafka client could not be created or subscribed.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The loop's thread or runtime could not be started, or it panicked.
    #[error("projector thread: {0}")]
    Thread(String),
}

/// What a projector did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectorSummary {
    /// Records whose ops were committed.
    pub applied: u64,
    /// Records skipped as replays (below the stored position).
    pub replayed: u64,
    /// Records skipped as inbox duplicates.
    pub duplicates: u64,
    /// Records written to `<topic>.DLT` (or kept in `eosflow_dead_letters` when that failed).
    pub dead_lettered: u64,
    /// Batches committed.
    pub batches: u64,
    /// Claims (assignments) made.
    pub claims: u64,
    /// Times a newer owner fenced this one (it dropped its partitions and rejoined).
    pub fenced: u64,
}

#[derive(Default)]
struct Counters {
    applied: AtomicU64,
    replayed: AtomicU64,
    duplicates: AtomicU64,
    dead_lettered: AtomicU64,
    batches: AtomicU64,
    claims: AtomicU64,
    fenced: AtomicU64,
}

impl Counters {
    fn summary(&self) -> ProjectorSummary {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProjectorSummary {
            applied: g(&self.applied),
            replayed: g(&self.replayed),
            duplicates: g(&self.duplicates),
            dead_lettered: g(&self.dead_lettered),
            batches: g(&self.batches),
            claims: g(&self.claims),
            fenced: g(&self.fenced),
        }
    }
}

/// A running projector: [`ProjectorHandle::stop`] ends it after the batch in flight.
pub struct ProjectorHandle {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<Result<(), ProjectorError>>>,
}

impl std::fmt::Debug for ProjectorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectorHandle")
            .field("summary", &self.counters.summary())
            .finish_non_exhaustive()
    }
}

impl ProjectorHandle {
    /// What it did so far.
    pub fn summary(&self) -> ProjectorSummary {
        self.counters.summary()
    }

    /// Whether the loop has ended (it only ends when stopped, or on a panic).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops after the batch in flight (committed or not: either is safe), leaves the group,
    /// and returns what it did.
    pub fn stop(mut self) -> Result<ProjectorSummary, ProjectorError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| ProjectorError::Thread("the projector thread panicked".into()))??;
        }
        Ok(self.counters.summary())
    }
}

impl Drop for ProjectorHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

type ProjectFn = dyn Fn(&Record<'_>) -> Result<Projected, ProcessError> + Send + Sync;

/// Starts projection loops.
#[derive(Debug, Clone, Copy)]
pub struct Projector;

impl Projector {
    /// Connects to Postgres (creating the bookkeeping tables), joins the group and starts the
    /// loop on its own thread. `project` turns a record into row operations; an `Err` sends the
    /// record to `<topic>.DLT` with its message (transient or permanent alike: the record is
    /// not retried, the partition moves on).
    pub fn start<F>(
        clients: KafkaClients,
        opts: ProjectorOptions,
        project: F,
    ) -> Result<ProjectorHandle, ProjectorError>
    where
        F: Fn(&Record<'_>) -> Result<Projected, ProcessError> + Send + Sync + 'static,
    {
        let producer: FutureProducer = clients.config(ClientRole::Idempotent).create()?;
        Self::start_with(
            Arc::new(clients),
            Box::new(producer),
            opts,
            Arc::new(project),
        )
    }

    fn start_with(
        supplier: Arc<dyn ConsumerSupplier>,
        producer: Box<FutureProducer>,
        opts: ProjectorOptions,
        project: Arc<ProjectFn>,
    ) -> Result<ProjectorHandle, ProjectorError> {
        opts.check()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProjectorError::Thread(format!("tokio runtime: {e}")))?;
        let store = rt.block_on(async {
            let store = ProjectionStore::connect_with_options(
                &opts.postgres_url,
                &opts.name,
                opts.store.clone(),
            )
            .await?;
            store.ensure_schema().await?;
            Ok::<_, ProjectionError>(store)
        })?;
        let mut settings = GroupSettings::classic(opts.group_id(), opts.session_timeout);
        settings.client_id = Some(format!("eosflow-projection-{}", opts.name));
        let consumer = supplier.group_consumer(&settings)?;
        let topics: Vec<&str> = opts.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let mut lp = Loop {
            opts,
            rt,
            store,
            consumer,
            producer,
            project,
            stop: stop.clone(),
            counters: counters.clone(),
            owned: BTreeMap::new(),
            epoch: None,
            buffered: Vec::new(),
            leftovers: HashMap::new(),
            rejections_published: HashSet::new(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("eosflow-projection-{}", lp.opts.name))
            .spawn(move || lp.run())
            .map_err(|e| ProjectorError::Thread(e.to_string()))?;
        Ok(ProjectorHandle {
            stop,
            counters,
            thread: Some(thread),
        })
    }
}

/// A partition this member owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owned {
    /// Claimed, the consumer at `next` (`None`: from the beginning, nothing stored yet).
    Reading { next: Option<i64> },
    /// Claimed and to be sought to `to` (`None`: the beginning) — or its seek failed and is
    /// tried again: paused meanwhile, its records dropped until a seek lands.
    Seeking { to: Option<i64> },
    /// Assigned, not claimed yet (Postgres did not answer).
    Unclaimed,
}

struct Loop {
    opts: ProjectorOptions,
    rt: tokio::runtime::Runtime,
    store: ProjectionStore,
    consumer: Box<dyn GroupConsumer>,
    producer: Box<FutureProducer>,
    project: Arc<ProjectFn>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    owned: BTreeMap<Pair, Owned>,
    epoch: Option<i64>,
    buffered: Vec<OwnedMessage>,
    /// Dead letters committed (by a predecessor that crashed before publishing them) to be
    /// published when their records come by again: the claim seeks back to the first of them.
    leftovers: HashMap<(String, i32, i64), DeadLetter>,
    /// Buffered records the function rejected whose dead letters are on the DLT already: a
    /// batch tried again (Postgres away) does not publish them again.
    rejections_published: HashSet<(String, i32, i64)>,
}

/// How long a Kafka call of the loop (seek, pause, commit) may take.
const KAFKA_CALL: Duration = Duration::from_secs(10);
/// How long one poll waits when nothing is buffered.
const IDLE_POLL: Duration = Duration::from_millis(100);

impl Loop {
    fn run(&mut self) -> Result<(), ProjectorError> {
        tracing::info!(projection = %self.opts.name, topics = ?self.opts.topics, "projector started");
        let mut backoff = Duration::from_millis(100);
        while !self.stop.load(Ordering::Relaxed) {
            self.fill();
            if self
                .owned
                .values()
                .any(|o| !matches!(o, Owned::Reading { .. }))
            {
                self.settle_claims();
            }
            if self.buffered.is_empty() {
                continue;
            }
            match self.apply_buffered() {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(e) => {
                    // Kept buffered: the same records are applied again after the pause (the
                    // stored positions skip whatever did commit).
                    tracing::error!(projection = %self.opts.name, error = %e, backoff_ms = backoff.as_millis() as u64, "projection batch failed; retrying");
                    telemetry::projection_retry(&self.opts.name);
                    self.pause_for(backoff);
                    backoff = (backoff * 2).min(self.opts.max_backoff);
                }
            }
        }
        self.consumer.unsubscribe();
        tracing::info!(projection = %self.opts.name, summary = ?self.counters.summary(), "projector stopped");
        Ok(())
    }

    /// Sleeps `d` while polling nothing (short steps, so a stop is seen).
    fn pause_for(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(
                Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())),
            );
        }
    }

    /// Polls until the batch is full or its wait (from its first record) is over, acting on
    /// rebalances as they come. Returns at once when a poll finds nothing to buffer.
    fn fill(&mut self) {
        let mut deadline =
            (!self.buffered.is_empty()).then(|| Instant::now() + self.opts.max_batch_wait);
        while self.buffered.len() < self.opts.max_batch_records {
            let wait = deadline.map_or(IDLE_POLL, |d| d.saturating_duration_since(Instant::now()));
            let polled = self.consumer.poll(wait);
            let events = self.consumer.take_events();
            if !events.is_empty() {
                self.rebalance(events);
            }
            let polled_nothing = polled.is_none();
            let got = match polled {
                Some(Ok(m)) => self.accept(m),
                Some(Err(e)) => {
                    tracing::warn!(projection = %self.opts.name, error = %e, "consumer error");
                    false
                }
                None => false,
            };
            if got && deadline.is_none() {
                deadline = Some(Instant::now() + self.opts.max_batch_wait);
            }
            let due = deadline.is_some_and(|d| Instant::now() >= d);
            if self.stop.load(Ordering::Relaxed)
                || due
                || (polled_nothing && self.buffered.is_empty())
            {
                break;
            }
        }
    }

    /// Buffers `m` when its partition is ours, claimed and sought, and it is not before the
    /// partition's next offset.
    fn accept(&mut self, m: OwnedMessage) -> bool {
        let pair = (m.topic().to_string(), m.partition());
        match self.owned.get_mut(&pair) {
            Some(Owned::Reading { next }) => {
                if next.is_some_and(|n| m.offset() < n) {
                    return false;
                }
                *next = Some(m.offset() + 1);
                self.buffered.push(m);
                true
            }
            // Not ours, not claimed, or its seek failed: whatever the consumer fetched there is
            // read again once the partition is claimed and sought.
            _ => false,
        }
    }

    /// Acts on the group's rebalances: revoked partitions drop their buffered records (their
    /// new owner reads them from Postgres' positions); assigned ones are claimed.
    fn rebalance(&mut self, events: Vec<GroupEvent>) {
        let mut assigned = false;
        for e in events {
            match e {
                GroupEvent::Revoked(pairs) => {
                    let gone: BTreeSet<Pair> = pairs.into_iter().collect();
                    self.buffered
                        .retain(|m| !gone.contains(&(m.topic().to_string(), m.partition())));
                    for p in &gone {
                        self.owned.remove(p);
                    }
                    self.leftovers
                        .retain(|(t, p, _), _| !gone.contains(&(t.clone(), *p)));
                    tracing::info!(projection = %self.opts.name, revoked = ?gone, "partitions revoked");
                }
                GroupEvent::Assigned(pairs) => {
                    for p in pairs {
                        self.owned.insert(p, Owned::Unclaimed);
                    }
                    assigned = true;
                }
            }
        }
        if assigned {
            // Every owned partition is claimed again with the new epoch (a batch carries one):
            // what is buffered is dropped, and its partitions read again from the first record
            // not applied.
            let mut first: HashMap<Pair, i64> = HashMap::new();
            for m in self.buffered.drain(..) {
                first
                    .entry((m.topic().to_string(), m.partition()))
                    .or_insert(m.offset());
            }
            self.rejections_published.clear();
            for (pair, o) in self.owned.iter_mut() {
                if let Owned::Reading { next } = *o {
                    *o = Owned::Seeking {
                        to: first.get(pair).copied().or(next),
                    };
                }
            }
            self.epoch = None;
            self.settle_claims();
        }
    }

    /// Claims what is unclaimed and seeks what is not sought; failures stay for the next turn
    /// (their partitions paused: nothing read there is buffered meanwhile).
    fn settle_claims(&mut self) {
        let unsettled: Vec<Pair> = self
            .owned
            .iter()
            .filter(|(_, o)| !matches!(o, Owned::Reading { .. }))
            .map(|(p, _)| p.clone())
            .collect();
        if unsettled.is_empty() {
            return;
        }
        // A partition whose pause fails keeps fetching, harmlessly: `accept` drops records of
        // partitions not yet claimed and sought, and they are read again from the seek.
        match self.consumer.pause(&unsettled) {
            Ok(failed) => {
                for (pair, e) in failed {
                    tracing::warn!(projection = %self.opts.name, topic = %pair.0, partition = pair.1, error = %e, "pausing a partition to claim it failed; its records are dropped until it is sought");
                }
            }
            Err(e) => {
                tracing::warn!(projection = %self.opts.name, error = %e, "pausing partitions to claim failed; their records are dropped until they are sought")
            }
        }
        if self.epoch.is_none() || self.owned.values().any(|o| *o == Owned::Unclaimed) {
            match self.claim() {
                Ok(None) => {}
                Ok(Some(newer)) => {
                    // The group's view here is stale: rejoin rather than leave the partition
                    // with nobody reading it.
                    self.rejoin(&newer);
                    return;
                }
                Err(e) => {
                    tracing::error!(projection = %self.opts.name, error = %e, "claiming partitions failed; retrying");
                    telemetry::projection_retry(&self.opts.name);
                    self.pause_for(Duration::from_millis(200));
                    return;
                }
            }
        }
        let to_seek: Vec<(String, i32, Offset)> = self
            .owned
            .iter()
            .filter_map(|(p, o)| match o {
                Owned::Seeking { to } => Some((
                    p.0.clone(),
                    p.1,
                    to.map_or(Offset::Beginning, Offset::Offset),
                )),
                _ => None,
            })
            .collect();
        let failed: BTreeSet<Pair> = match self.consumer.seek(&to_seek, KAFKA_CALL) {
            Ok(failed) => {
                for (pair, e) in &failed {
                    tracing::warn!(projection = %self.opts.name, topic = %pair.0, partition = pair.1, error = %e, "seek failed; the partition stays paused and is sought again");
                }
                failed.into_iter().map(|(p, _)| p).collect()
            }
            Err(e) => {
                tracing::warn!(projection = %self.opts.name, error = %e, "seek failed; sought again");
                to_seek.iter().map(|(t, p, _)| (t.clone(), *p)).collect()
            }
        };
        let mut sought = Vec::new();
        for (pair, o) in self.owned.iter_mut() {
            if let Owned::Seeking { to } = *o {
                if !failed.contains(pair) {
                    *o = Owned::Reading { next: to };
                    sought.push(pair.clone());
                }
            }
        }
        if !sought.is_empty() {
            match self.consumer.resume(&sought) {
                Ok(failed) => {
                    for (pair, e) in failed {
                        tracing::warn!(projection = %self.opts.name, topic = %pair.0, partition = pair.1, error = %e, "resume failed; claimed again");
                        self.owned.insert(pair, Owned::Unclaimed);
                    }
                }
                Err(e) => {
                    tracing::warn!(projection = %self.opts.name, error = %e, "resume failed; claimed again");
                    for p in sought {
                        self.owned.insert(p, Owned::Unclaimed);
                    }
                }
            }
        }
    }

    /// Takes a fresh epoch and claims every owned partition with it; unclaimed ones get their
    /// stored positions to seek to. A partition a newer owner already claimed is dropped and
    /// its `Fenced` error returned (the caller rejoins the group).
    fn claim(&mut self) -> Result<Option<ProjectionError>, ProjectionError> {
        let store = &self.store;
        let epoch = self.rt.block_on(store.next_epoch())?;
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (t, p) in self.owned.keys() {
            by_topic.entry(t.clone()).or_default().push(*p);
        }
        let mut positions: HashMap<Pair, Option<i64>> = HashMap::new();
        let mut lost: Vec<Pair> = Vec::new();
        let mut newer: Option<ProjectionError> = None;
        for (topic, parts) in &by_topic {
            let mut parts = parts.clone();
            while !parts.is_empty() {
                match self.rt.block_on(store.open(topic, &parts, epoch)) {
                    Ok(pos) => {
                        for (p, n) in pos {
                            positions.insert((topic.clone(), p), n);
                        }
                        break;
                    }
                    Err(e) => {
                        // A member assigned after us claimed it already: our view is stale.
                        let &ProjectionError::Fenced { partition, .. } = &e else {
                            return Err(e);
                        };
                        tracing::warn!(projection = %self.opts.name, topic, partition, epoch, error = %e, "a newer owner holds the partition");
                        parts.retain(|p| *p != partition);
                        lost.push((topic.clone(), partition));
                        newer.get_or_insert(e);
                    }
                }
            }
        }
        for p in &lost {
            self.owned.remove(p);
        }
        // Dead letters a predecessor committed but never saw published: their records are read
        // again (the store skips them as replays) and published on the way.
        for (topic, parts) in &by_topic {
            let left = self
                .rt
                .block_on(store.unpublished_dead_letters(topic, parts))?;
            for d in left {
                let pair = (d.topic.clone(), d.partition);
                if self.owned.get(&pair) != Some(&Owned::Unclaimed) {
                    continue;
                }
                let at = positions.entry(pair).or_insert(None);
                if at.is_none_or(|n| d.offset < n) {
                    *at = Some(d.offset);
                }
                self.leftovers
                    .insert((d.topic.clone(), d.partition, d.offset), d);
            }
        }
        for (pair, o) in self.owned.iter_mut() {
            if *o == Owned::Unclaimed {
                *o = Owned::Seeking {
                    to: positions.get(pair).copied().flatten(),
                };
            }
        }
        self.epoch = Some(epoch);
        self.counters.claims.fetch_add(1, Ordering::Relaxed);
        tracing::info!(projection = %self.opts.name, epoch, partitions = ?self.owned.keys().collect::<Vec<_>>(), "claimed");
        Ok(newer)
    }

    /// Applies the buffered records in one transaction; dead letters go to the DLT after it.
    fn apply_buffered(&mut self) -> Result<(), ProjectorError> {
        let Some(epoch) = self.epoch else {
            // Not claimed (yet): kept for after the claim. (Records are only buffered from
            // claimed partitions and every claim's loss drops them, so this is not expected;
            // dropping them here would skip them, their partitions being read past them.)
            return Ok(());
        };
        let started = Instant::now();
        let mut parts: BTreeMap<Pair, PartitionBatch> = BTreeMap::new();
        let mut rejected: Vec<(usize, ProcessError)> = Vec::new();
        for (i, m) in self.buffered.iter().enumerate() {
            let headers = headers_of(m);
            let record = Record::of_message(m, &headers);
            let (message_id, ops) = match (self.project)(&record) {
                Ok(p) => (p.message_id, p.ops),
                Err(e) => {
                    rejected.push((i, e));
                    (None, Vec::new())
                }
            };
            parts
                .entry((m.topic().to_string(), m.partition()))
                .or_insert_with(|| PartitionBatch {
                    topic: m.topic().to_string(),
                    partition: m.partition(),
                    records: Vec::new(),
                })
                .records
                .push(eosflow_projection::Record {
                    offset: m.offset(),
                    message_id,
                    ops,
                });
        }
        // Records the function rejected reach the DLT before the commit that moves past them:
        // a crash in between publishes them again, never loses them.
        let at = |m: &OwnedMessage| (m.topic().to_string(), m.partition(), m.offset());
        rejected.retain(|(i, _)| !self.rejections_published.contains(&at(&self.buffered[*i])));
        if !rejected.is_empty() {
            let letters: Vec<(usize, ProcessError, Option<String>)> =
                rejected.into_iter().map(|(i, e)| (i, e, None)).collect();
            self.publish(&letters)?;
            for (i, _, _) in &letters {
                self.rejections_published.insert(at(&self.buffered[*i]));
            }
        }
        let batch = Batch {
            epoch,
            partitions: parts.into_values().collect(),
        };
        let store = &self.store;
        let applied = match self.rt.block_on(store.apply_retrying(&batch)) {
            Ok(a) => a,
            Err(e @ (ProjectionError::Fenced { .. } | ProjectionError::NotClaimed { .. })) => {
                self.rejoin(&e);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        telemetry::projection_batch(&self.opts.name, started.elapsed(), applied.applied);
        self.count(&applied);
        let mut letters = applied.dead_lettered.clone();
        if !self.leftovers.is_empty() {
            for m in &self.buffered {
                let at = (m.topic().to_string(), m.partition(), m.offset());
                if let Some(d) = self.leftovers.remove(&at) {
                    tracing::info!(projection = %self.opts.name, topic = %d.topic, partition = d.partition, offset = d.offset, "publishing a dead letter committed before a crash");
                    letters.push(d);
                }
            }
        }
        self.dead_letter(&letters);
        self.buffered.clear();
        self.rejections_published.clear();
        let offsets: Vec<(String, i32, i64)> = applied.positions.clone();
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            // Kafka's offsets only feed lag monitoring: Postgres holds the positions.
            tracing::debug!(projection = %self.opts.name, error = %e, "committing offsets to Kafka for lag failed");
        }
        Ok(())
    }

    fn count(&self, a: &Applied) {
        let c = &self.counters;
        c.applied.fetch_add(a.applied as u64, Ordering::Relaxed);
        c.replayed.fetch_add(a.replayed as u64, Ordering::Relaxed);
        c.duplicates
            .fetch_add(a.duplicates as u64, Ordering::Relaxed);
        c.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// A newer owner holds partitions of this member: everything buffered is dropped, nothing
    /// is ours until the group assigns again (the consumer rejoins).
    fn rejoin(&mut self, e: &ProjectionError) {
        tracing::error!(projection = %self.opts.name, error = %e, "fenced by a newer owner: dropping what is buffered and rejoining the group");
        telemetry::projection_fenced(&self.opts.name);
        self.counters.fenced.fetch_add(1, Ordering::Relaxed);
        self.buffered.clear();
        self.rejections_published.clear();
        self.owned.clear();
        self.epoch = None;
        self.consumer.unsubscribe();
        let topics: Vec<&str> = self.opts.topics.iter().map(String::as_str).collect();
        if let Err(e) = self.consumer.subscribe(&topics) {
            tracing::error!(projection = %self.opts.name, error = %e, "rejoining the group failed");
        }
    }

    /// Publishes the records the store dead-lettered (a constraint, a bad value) and marks them
    /// published; a publish that fails leaves them in `eosflow_dead_letters`, said loudly (the
    /// next owner of the partition publishes them).
    fn dead_letter(&mut self, dead: &[DeadLetter]) {
        if dead.is_empty() {
            return;
        }
        let index: HashMap<(&str, i32, i64), usize> = self
            .buffered
            .iter()
            .enumerate()
            .map(|(i, m)| ((m.topic(), m.partition(), m.offset()), i))
            .collect();
        let letters: Vec<(usize, ProcessError, Option<String>)> = dead
            .iter()
            .filter_map(|d| {
                let i = index.get(&(d.topic.as_str(), d.partition, d.offset))?;
                Some((
                    *i,
                    ProcessError::permanent(format!("postgres {}: {}", d.sqlstate, d.message)),
                    Some(d.sqlstate.clone()),
                ))
            })
            .collect();
        match self.publish(&letters) {
            Ok(()) => {
                if let Err(e) = self.rt.block_on(self.store.mark_published(dead)) {
                    tracing::warn!(projection = %self.opts.name, error = %e, "marking dead letters published failed (they are on the DLT; a later owner publishes them again)");
                }
            }
            Err(e) => {
                tracing::error!(projection = %self.opts.name, error = %e, count = dead.len(), first = ?dead.first(), "dead letters committed to eosflow_dead_letters could not be published to the DLT; the partition's next owner publishes them");
                telemetry::projection_unpublished_dead_letters(&self.opts.name, dead.len());
            }
        }
    }

    /// Writes buffered records `letters` (index, reason, SQLSTATE) to their topics' DLTs and
    /// waits for the acknowledgements. A letter Kafka refuses as a record (too large, no such
    /// topic) is cut down as the runtime's dead letters are ([`dlt::truncated`]: the value
    /// truncated with only the `eosflow.dlt.*` headers, then a pointer alone); one that not even
    /// a pointer fits is skipped, loudly, so its partition does not stall behind it. Any other
    /// failure fails the call (the caller tries the batch again).
    fn publish(
        &self,
        letters: &[(usize, ProcessError, Option<String>)],
    ) -> Result<(), ProjectorError> {
        let now = crate::clock::now_ms();
        let group = self.opts.group_id();
        // Per letter: the record, its DLT and the dead letter's full headers.
        let mut prepared: Vec<(&OwnedMessage, String, HeaderPairs)> = Vec::new();
        for (i, err, sqlstate) in letters {
            let Some(m) = self.buffered.get(*i) else {
                continue;
            };
            let headers = headers_of(m);
            let record = Record::of_message(m, &headers);
            let mut hs = crate::processor::dead_letter_headers(&record, group, err, now);
            hs.push((
                "eosflow.dlt.projection".into(),
                self.opts.name.clone().into_bytes(),
            ));
            if let Some(s) = sqlstate {
                hs.push(("eosflow.dlt.sqlstate".into(), s.clone().into_bytes()));
            }
            tracing::warn!(projection = %self.opts.name, topic = m.topic(), partition = m.partition(), offset = m.offset(), reason = %err, "record dead-lettered");
            telemetry::projection_dead_lettered(&self.opts.name);
            self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
            prepared.push((m, crate::kafka::topics::dlt_topic(m.topic()), hs));
        }
        // Stage 0 whole, 1 truncated, 2 a pointer alone.
        let mut todo: Vec<(usize, u8)> = (0..prepared.len()).map(|i| (i, 0)).collect();
        while !todo.is_empty() {
            let deliveries: Vec<_> = todo
                .iter()
                .map(|&(i, stage)| {
                    let (m, dlt, hs) = &prepared[i];
                    let (key, value, cut) = match stage {
                        0 => (m.key(), m.payload(), None),
                        s => {
                            let (value, h) = dlt::truncated(m.payload(), hs, s >= 2);
                            (if s >= 2 { None } else { m.key() }, value, Some(h))
                        }
                    };
                    let mut oh = OwnedHeaders::new_with_capacity(hs.len());
                    for (k, v) in cut.as_ref().unwrap_or(hs) {
                        oh = oh.insert(Header {
                            key: k,
                            value: Some(v.as_slice()),
                        });
                    }
                    let mut rec: FutureRecord<'_, [u8], [u8]> =
                        FutureRecord::to(dlt.as_str()).headers(oh);
                    if let Some(k) = key {
                        rec = rec.key(k);
                    }
                    if let Some(v) = value {
                        rec = rec.payload(v);
                    }
                    self.producer.send(rec, KAFKA_CALL)
                })
                .collect();
            let results = self.rt.block_on(futures::future::join_all(deliveries));
            let mut again = Vec::new();
            for (&(i, stage), r) in todo.iter().zip(results) {
                let (m, dlt, _) = &prepared[i];
                let e = match r {
                    Ok(_) => {
                        if stage > 0 {
                            let what = if stage == 1 { "truncated" } else { "pointer" };
                            tracing::error!(projection = %self.opts.name, topic = m.topic(), partition = m.partition(), offset = m.offset(), dlt = %dlt, kept = what, "dead letter cut down to fit; the full record stays at its original offset");
                            telemetry::dead_letter_reduced(dlt, what);
                        }
                        continue;
                    }
                    Err((e, _)) => e,
                };
                if !e.rdkafka_error_code().is_some_and(is_record_error) {
                    return Err(ProjectorError::Kafka(e));
                }
                if stage < 2 {
                    again.push((i, stage + 1));
                } else {
                    tracing::error!(projection = %self.opts.name, topic = m.topic(), partition = m.partition(), offset = m.offset(), dlt = %dlt, error = %e, "not even a pointer could be dead-lettered: record SKIPPED so its partition moves on; redrive it from its original offset");
                    telemetry::record_skipped_unwritable(m.topic());
                }
            }
            todo = again;
        }
        Ok(())
    }
}

/// Record headers as owned pairs (what [`Record`] and the dead-letter helpers take).
type HeaderPairs = Vec<(String, Vec<u8>)>;

fn headers_of(m: &OwnedMessage) -> HeaderPairs {
    m.headers()
        .map(|h| {
            h.iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
