//! The task manager (Kafka Streams' `TaskManager`): the loop's tasks by partition number, and
//! their lifecycle — open and restore when assigned, close when revoked, reopen after a commit
//! whose outcome only the changelogs know — with the instance-wide parts a task's stores meet
//! on the way: the shared block cache, the standby tailer and the processing threads' leases.
//!
//! A [`Task`] holds one partition number's stores (default, named, tables) and, per
//! sub-topology, the clocks of that sub-topology's task on the number (stream time, timer
//! lanes, upstream watermarks): see `engine.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::group_member::GroupMember;
use super::{RunSummary, RuntimeError, RuntimeOptions};
use crate::kafka::KafkaClients;
use crate::processor::engine::{NamedStore, Task};
use crate::processor::standby::{Standby, StandbyOptions};
use crate::processor::threads::Leases;
use crate::state::{
    dedup, restore_known_end, restore_table, Column, Overlay, RestoreStats, StateError, Store,
    StoreCache,
};
use crate::telemetry::{self, Health};

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

/// The tasks of one processing loop.
pub(super) struct TaskManager {
    tasks: BTreeMap<i32, Task>,
    clients: KafkaClients,
    /// The block cache every store of the instance shares.
    cache: StoreCache,
    /// The default store's changelog.
    changelog: String,
    /// The named stores: (name, changelog topic), in [`crate::processor::Application::stores`]
    /// order.
    stores: Vec<(String, String)>,
    /// The tables: (store name, topic), with the history of the versioned ones.
    tables: Vec<(String, String)>,
    versioned_tables: Vec<(String, Duration)>,
    app_id: String,
    instance_id: String,
    input: Option<String>,
    state_dir: PathBuf,
    thread: usize,
    restore_timeout: Duration,
    /// How many partitions [`TaskManager::open_all`] opens at once.
    restore_threads: usize,
    dedup_retention: Duration,
    dedup_purge_interval: Duration,
    /// How many sub-topologies each partition number's [`Task`] runs.
    sub_topologies: usize,
    /// Whether changelogs are written in transactions (the standby copies apply whole ones).
    exactly_once: bool,
    health: Arc<Health>,
    /// `processor.standby_replicas`.
    standby_replicas: usize,
    /// The standby tailer while the loop runs, shared by the instance's processing threads.
    standby: Option<Arc<Standby>>,
    /// The partitions the instance's processing threads hold open (more than one thread).
    leases: Option<Arc<Leases>>,
    /// Partition numbers assigned whose tasks are not open yet (their pairs paused): opened
    /// [`TaskManager::step`] at a time between batches, so the restored ones process while the
    /// rest restore.
    pending: BTreeMap<i32, Pending>,
    /// The default store's name (as interactive queries ask for it).
    default_store: String,
    /// The instance's queryable state: tasks are registered when they open and withdrawn
    /// before they close (see [`crate::query`]).
    local: Option<Arc<crate::query::LocalStores>>,
}

/// A partition number assigned whose task is not open yet.
#[derive(Debug, Default)]
struct Pending {
    /// Its (topic, partition) pairs, paused until the task opens.
    pairs: Vec<(String, i32)>,
    /// A record of its pairs was polled (before the pause took effect) and dropped: the
    /// consumer's position passed it, so a pair without a committed offset is read from its
    /// beginning once the task opens (one with a committed offset always is moved to it).
    rewind: bool,
}

/// Partitions opened per restore thread in one step of [`TaskManager::open_pending`]: two keep
/// every thread busy across a step's slower opens, and a step stays a fraction of a second.
const STEP_PER_THREAD: usize = 2;

/// What a step of [`TaskManager::open_pending`] opened: the pairs to resume, and those whose
/// records were dropped while they waited (see [`GroupMember::seek_to_start`]).
#[derive(Debug, Default)]
pub(super) struct Opening {
    /// Pairs of the numbers opened.
    pub(super) resume: Vec<(String, i32)>,
    /// Of those, the pairs whose records were dropped while they waited.
    pub(super) rewind: Vec<(String, i32)>,
}

/// A partition's task opened, with what its restore replayed, or why it could not be.
type Opened = Result<(Task, RestoreStats), RuntimeError>;

/// The end offsets of changelog partitions, asked for in one batch before a restore.
type Ends = BTreeMap<(String, i32), i64>;

impl TaskManager {
    /// The manager of `opts`' tasks, with the default store `store_name`, the named stores
    /// `store_names` and `sub_topologies` sub-topologies; refuses stores or tables named twice.
    pub(super) fn new(
        clients: &KafkaClients,
        opts: &RuntimeOptions,
        store_name: &str,
        store_names: Vec<String>,
        sub_topologies: usize,
        standby_replicas: usize,
    ) -> Result<Self, RuntimeError> {
        let stores = named_changelogs(&opts.app_id, store_name, store_names)?;
        check_tables(opts, store_name, &stores)?;
        std::fs::create_dir_all(&opts.state_dir).map_err(|source| StateError::Io {
            path: opts.state_dir.display().to_string(),
            source,
        })?;
        Ok(Self {
            tasks: BTreeMap::new(),
            clients: clients.clone(),
            cache: StoreCache::new(opts.memory_bytes).with_record_cache(opts.cache_bytes),
            changelog: format!("{}-{store_name}-changelog", opts.app_id),
            stores,
            tables: opts.tables.clone(),
            versioned_tables: opts.versioned_tables.clone(),
            app_id: opts.app_id.clone(),
            instance_id: opts.instance_id.clone(),
            input: opts.input_topics.first().cloned(),
            state_dir: opts.state_dir.clone(),
            thread: opts.thread,
            restore_timeout: opts.restore_timeout,
            restore_threads: opts.restore_threads.max(1),
            dedup_retention: opts.dedup_retention,
            dedup_purge_interval: opts.dedup_purge_interval,
            sub_topologies,
            exactly_once: opts.exactly_once,
            health: Arc::new(Health::new(Duration::from_secs(60))),
            standby_replicas,
            standby: None,
            leases: None,
            pending: BTreeMap::new(),
            default_store: store_name.to_string(),
            local: None,
        })
    }

    /// The default store's changelog topic.
    /// What this thread's record cache did so far (`None`: `state.cache_bytes` = 0).
    pub(super) fn record_cache_stats(&self) -> Option<crate::state::record_cache::CacheStats> {
        self.cache.record_cache_stats()
    }

    pub(super) fn changelog(&self) -> &str {
        &self.changelog
    }

    /// Every changelog topic: the default store's, then the named stores' in order.
    pub(super) fn changelogs(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.changelog).chain(self.stores.iter().map(|(_, t)| t))
    }

    /// The named stores' changelogs, in order.
    pub(super) fn store_changelogs(&self) -> impl Iterator<Item = &str> {
        self.stores.iter().map(|(_, t)| t.as_str())
    }

    /// Reports restores (not ready while they run) to `health`.
    pub(super) fn set_health(&mut self, health: Arc<Health>) {
        self.health = health;
    }

    /// The block cache this loop's stores share (one per instance).
    pub(super) fn cache(&self) -> &StoreCache {
        &self.cache
    }

    /// Shares `cache` with the instance's other processing threads.
    pub(super) fn set_cache(&mut self, cache: StoreCache) {
        self.cache = cache;
    }

    /// Opens partitions only under `leases` (the instance's processing threads hand them to
    /// each other).
    pub(super) fn set_leases(&mut self, leases: Option<Arc<Leases>>) {
        self.leases = leases;
    }

    /// Registers the tasks in the instance's queryable state from now on.
    pub(super) fn set_local_stores(&mut self, local: Arc<crate::query::LocalStores>) {
        self.local = Some(local);
    }

    /// Withdraws `partitions`' stores from queries (waiting for reads in flight) before they
    /// close.
    fn withdraw(&self, partitions: &[i32]) {
        if let Some(l) = &self.local {
            l.closing(partitions);
        }
    }

    /// Registers partition `p`'s open task for queries, its state reflecting `positions` and
    /// the input positions behind its repartitions its default store committed.
    fn register(&self, p: i32, positions: crate::query::Positions) {
        let (Some(l), Some(task)) = (&self.local, self.tasks.get(&p)) else {
            return;
        };
        let origins = task.committed_origins().unwrap_or_else(|e| {
            tracing::warn!(partition = p, error = %e, "query positions behind repartitions unknown until the next commit");
            BTreeMap::new()
        });
        let mut readers = vec![(self.default_store.clone(), task.store.reader())];
        readers.extend(
            task.named
                .iter()
                .map(|n| (n.name.clone(), n.store.reader())),
        );
        l.opened(p, readers, positions, origins);
    }

    /// Hands partitions to and from the instance's standby tailer.
    pub(super) fn set_standby(&mut self, standby: Option<Arc<Standby>>) {
        self.standby = standby;
    }

    /// The open tasks, by partition number.
    pub(super) fn tasks(&self) -> &BTreeMap<i32, Task> {
        &self.tasks
    }

    /// The open tasks, by partition number, for the engine to run records and timers on.
    pub(super) fn tasks_mut(&mut self) -> &mut BTreeMap<i32, Task> {
        &mut self.tasks
    }

    /// Whether partition number `p`'s task is open.
    pub(super) fn contains(&self, p: i32) -> bool {
        self.tasks.contains_key(&p)
    }

    /// Starts the standby tailer (`processor.standby_replicas` > 0); without it the instance
    /// runs as before, its takeovers restoring whole changelogs.
    pub(super) fn start_standby(&self) -> Option<Arc<Standby>> {
        if self.standby_replicas == 0 {
            return None;
        }
        let opts = StandbyOptions {
            replicas: self.standby_replicas,
            group: self.app_id.clone(),
            me: crate::processor::standby::client_id(&self.instance_id),
            input: self.input.clone().unwrap_or_default(),
            changelogs: self.changelogs().cloned().collect(),
            names: std::iter::once(self.default_store.clone())
                .chain(self.stores.iter().map(|(n, _)| n.clone()))
                .collect(),
            local: self.local.clone(),
            state_dir: self.state_dir.clone(),
            transactional: self.exactly_once,
        };
        let owned = self.tasks.keys().copied().collect();
        match Standby::start(self.clients.clone(), self.cache.clone(), opts, owned) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::error!(error = %e, "standby replicas could not start; running without them");
                None
            }
        }
    }

    /// Tells the standby tailer that `partitions` are about to be opened here: its warm
    /// copies close first.
    pub(super) fn claim(&self, partitions: &[i32]) {
        if let Some(s) = &self.standby {
            s.own(partitions);
        }
    }

    /// `partitions`' stores are closed: the standby tailer and the instance's other processing
    /// threads may open them now.
    fn closed(&self, partitions: &[i32]) {
        if let Some(s) = &self.standby {
            s.disown(partitions);
        }
        if let Some(l) = &self.leases {
            l.release(partitions, self.thread);
        }
    }

    /// Closes every task whose partition number is not in `live`.
    pub(super) fn retain(&mut self, live: &BTreeSet<i32>) {
        let gone: Vec<i32> = self
            .tasks
            .keys()
            .filter(|p| !live.contains(p))
            .copied()
            .collect();
        self.withdraw(&gone);
        self.tasks.retain(|p, _| live.contains(p));
        self.closed(&gone);
    }

    /// Closes every task; returns their partition numbers.
    pub(super) fn close_all(&mut self) -> Vec<i32> {
        let closed: Vec<i32> = self.tasks.keys().copied().collect();
        self.withdraw(&closed);
        self.tasks.clear();
        self.closed(&closed);
        closed
    }

    /// Drops the open batch's writes of every task.
    pub(super) fn drop_batch(&mut self) {
        for task in self.tasks.values_mut() {
            task.drop_batch();
        }
    }

    /// Opens the tasks of `partitions`: each one's stores restored from its changelogs' tails,
    /// and its tables up to the group's committed offsets (asked from `member`), before any
    /// record is processed. Up to `processor.restore_threads` partitions are opened at once, so
    /// many partitions with little to restore are ready in about the time of one, and a tail
    /// costs its own time, not the sum of all. The first failure is returned after the others
    /// finished; the partitions that opened are kept.
    pub(super) fn open_all(
        &mut self,
        partitions: &[i32],
        member: &GroupMember,
        summary: &mut RunSummary,
    ) -> Result<(), RuntimeError> {
        if let Some(leases) = &self.leases {
            for &p in partitions {
                // Another processing thread of this instance that had `p` closes its stores
                // right after its own poll saw the revocation.
                if let Err(e) = leases.acquire(p, self.thread, self.restore_timeout) {
                    self.closed(partitions);
                    return Err(e);
                }
            }
        }
        self.health.set_restoring(true);
        if let Some(l) = &self.local {
            partitions.iter().for_each(|p| l.restoring(*p));
        }
        let ends = self.changelog_ends(partitions);
        let opened = self.open_in_parallel(partitions, member, &ends);
        self.health.set_restoring(!self.pending.is_empty());
        // What the opened stores reflect: the group's committed offsets, read once for all
        // (one request per rebalance that opened a task), whether or not the application has
        // asked for a store yet: a query may come at any time.
        let opened_any = opened.iter().any(|(_, r)| r.is_ok());
        let mut positions = match &self.local {
            Some(_) if opened_any => member.committed_positions(partitions),
            _ => BTreeMap::new(),
        };
        let mut first_error = None;
        for (p, result) in opened {
            match result {
                Ok((task, stats)) => {
                    summary.restored(p, stats);
                    self.tasks.insert(p, task);
                    self.register(p, positions.remove(&p).unwrap_or_default());
                }
                Err(e) => {
                    if let Some(l) = &self.local {
                        l.not_restoring(p);
                    }
                    self.closed(&[p]);
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// [`TaskManager::open_stores`] of every partition, on up to `restore_threads` threads
    /// taking the partitions in order; the results in the order of `partitions`.
    fn open_in_parallel(
        &self,
        partitions: &[i32],
        member: &GroupMember,
        ends: &Ends,
    ) -> Vec<(i32, Opened)> {
        let width = self.restore_threads.min(partitions.len());
        if width <= 1 {
            return partitions
                .iter()
                .map(|&p| (p, self.open_stores(p, member, ends)))
                .collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(Vec::with_capacity(partitions.len()));
        std::thread::scope(|scope| {
            for _ in 0..width {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&p) = partitions.get(i) else { break };
                    let opened = self.open_stores(p, member, ends);
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((i, p, opened));
                });
            }
        });
        let mut results = results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        results.sort_by_key(|(i, _, _)| *i);
        results.into_iter().map(|(_, p, r)| (p, r)).collect()
    }

    /// How many partition numbers one step of [`TaskManager::open_pending`] opens; an
    /// assignment of at most this many is opened at once, before any record (as before
    /// partitions were restored in steps).
    pub(super) fn step(&self) -> usize {
        self.restore_threads * STEP_PER_THREAD
    }

    /// Queues the pairs of partition numbers whose tasks are not open yet (the caller paused
    /// them): [`TaskManager::open_pending`] opens them a step at a time. Not ready meanwhile.
    pub(super) fn queue(&mut self, pairs: Vec<(String, i32)>) {
        if pairs.is_empty() {
            return;
        }
        for (t, p) in pairs {
            if let Some(l) = &self.local {
                l.restoring(p);
            }
            self.pending.entry(p).or_default().pairs.push((t, p));
        }
        self.health.set_restoring(true);
        self.health.set_ready(false);
    }

    /// Whether some assigned partition numbers still wait for their tasks to open.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// How many partition numbers wait for their tasks to open.
    pub(super) fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Partition number `p` is queued to open.
    pub(super) fn is_pending(&self, p: i32) -> bool {
        self.pending.contains_key(&p)
    }

    /// A record of queued partition number `p` was polled and dropped: its pairs are read from
    /// their committed offsets, or their beginning, once the task opens.
    pub(super) fn dropped_pending(&mut self, p: i32) {
        if let Some(pending) = self.pending.get_mut(&p) {
            pending.rewind = true;
        }
    }

    /// Forgets the `revoked` pairs of queued numbers; a number left with none is given back
    /// (standby tailer, other processing threads) without ever opening.
    pub(super) fn forget_pending(&mut self, revoked: &[(String, i32)]) {
        let mut gone = Vec::new();
        for (t, p) in revoked {
            if let Some(pending) = self.pending.get_mut(p) {
                pending.pairs.retain(|(pt, _)| pt != t);
                if pending.pairs.is_empty() {
                    self.pending.remove(p);
                    gone.push(*p);
                }
            }
        }
        self.withdraw(&gone);
        self.closed(&gone);
        if self.pending.is_empty() {
            self.health.set_restoring(false);
        }
    }

    /// Forgets every queued number (the membership they were assigned under is gone).
    pub(super) fn clear_pending(&mut self) {
        let gone: Vec<i32> = std::mem::take(&mut self.pending).into_keys().collect();
        self.withdraw(&gone);
        self.closed(&gone);
        self.health.set_restoring(false);
    }

    /// Opens the next [`TaskManager::step`] queued partition numbers (lowest first). Returns the
    /// pairs to resume, and those of them whose records were dropped while they waited. A
    /// failure is returned after the step, as [`TaskManager::open_all`] does.
    pub(super) fn open_pending(
        &mut self,
        member: &GroupMember,
        summary: &mut RunSummary,
    ) -> Result<Opening, RuntimeError> {
        let numbers: Vec<i32> = self.pending.keys().take(self.step()).copied().collect();
        let mut opening = Opening::default();
        for p in &numbers {
            if let Some(pending) = self.pending.remove(p) {
                if pending.rewind {
                    opening.rewind.extend(pending.pairs.iter().cloned());
                }
                opening.resume.extend(pending.pairs);
            }
        }
        let opened = self.open_all(&numbers, member, summary);
        // The pairs of a number that did not open stay paused; the error ends the loop.
        opening.resume.retain(|(_, p)| self.tasks.contains_key(p));
        opening.rewind.retain(|(_, p)| self.tasks.contains_key(p));
        opened.map(|()| opening)
    }

    /// Closes every task and opens it again, restored from its changelogs to their last
    /// stable offset: the truth after a commit whose outcome is unknown.
    pub(super) fn reopen_all(
        &mut self,
        member: &GroupMember,
        summary: &mut RunSummary,
    ) -> Result<(), RuntimeError> {
        let partitions = self.close_all();
        self.open_all(&partitions, member, summary)
    }

    /// The high watermark of every changelog partition of `partitions` (the default store's and
    /// the named stores'), in one request per leader: a store already at its changelog's end, or
    /// with an empty changelog, is then opened without a consumer of its own. Empty when the
    /// broker does not answer in time: every store is then restored the long way.
    fn changelog_ends(&self, partitions: &[i32]) -> Ends {
        let pairs: Vec<(String, i32)> = partitions
            .iter()
            .flat_map(|&p| {
                std::iter::once(&self.changelog)
                    .chain(self.stores.iter().map(|(_, topic)| topic))
                    .map(move |topic| (topic.clone(), p))
            })
            .collect();
        let timeout = self.restore_timeout.min(Duration::from_secs(10));
        crate::kafka::reader::end_offsets(&self.clients, &pairs, timeout).unwrap_or_else(|e| {
            tracing::warn!(error = %e, partitions = pairs.len(), "the changelogs' end offsets are not known: every store is restored by reading its changelog");
            Ends::new()
        })
    }

    fn open_stores(&self, p: i32, member: &GroupMember, ends: &Ends) -> Opened {
        let end_of = |topic: &str| ends.get(&(topic.to_string(), p)).copied();
        let restored = self.open_and_restore(p, &self.changelog, end_of(&self.changelog));
        let mut named = Vec::with_capacity(self.stores.len());
        for (name, topic) in &self.stores {
            let (store, rebuilt, stats) = self.open_and_restore(p, topic, end_of(topic))?;
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
        if !self.tables.is_empty() {
            named.extend(self.open_tables(p, member)?);
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
        let mut task = Task::open(p, store, named, self.sub_topologies)?;
        task.upstream_partitions = member.partitions();
        Ok((task, stats))
    }

    /// Table `name`'s history if it is versioned.
    fn table_history(&self, name: &str) -> Option<Duration> {
        self.versioned_tables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| *h)
    }

    /// Opens partition `p`'s store of every table and restores it from the table's topic up to
    /// the group's committed offset, so it holds exactly the table records processed before
    /// (the ones after are read as input, in order with the stream). A store whose checkpoint
    /// cannot be trusted (stale, past the committed offset, from another topic) is rebuilt
    /// from the topic alone; with no committed offset the group reads the topic from its start,
    /// so the store starts empty.
    fn open_tables(&self, p: i32, member: &GroupMember) -> Result<Vec<NamedStore>, RuntimeError> {
        let offsets =
            member.committed_offsets_of(self.tables.iter().map(|(_, t)| t.as_str()), p)?;
        let mut out = Vec::with_capacity(offsets.len());
        for ((name, topic), until) in self.tables.iter().zip(offsets) {
            let path = self
                .state_dir
                .join(format!("{}-{name}-table-{p}", self.app_id));
            let path = path.as_path();
            let history = self.table_history(name);
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
                    store = self.reopen_empty(store, path, &source)?;
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
            let timeout = self.restore_timeout;
            let restore = |store: &Store| {
                restore_table(&self.clients, store, topic, p, until, history, timeout)
            };
            let stats = match restore(&store) {
                Err(
                    e @ (StateError::CheckpointAhead { .. } | StateError::StaleCheckpoint { .. }),
                ) => {
                    tracing::warn!(partition = p, table = %name, error = %e, "rebuilding the table from its topic alone");
                    store = self.reopen_empty(store, path, &source)?;
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
    /// (rebuilding it from the changelog alone when its checkpoint cannot be trusted); `end`,
    /// when known, spares the read of a changelog with nothing beyond the checkpoint.
    fn open_and_restore(
        &self,
        p: i32,
        changelog: &str,
        end: Option<i64>,
    ) -> Result<(Store, bool, RestoreStats), RuntimeError> {
        let path = self.state_dir.join(format!("{changelog}-{p}"));
        let path = path.as_path();
        let source = format!("{changelog}[{p}]");
        let source = source.as_str();
        let (mut store, mut rebuilt) = Store::open(path, source, &self.cache)?;
        let restore = |store: &Store| {
            restore_known_end(
                &self.clients,
                store,
                changelog,
                p,
                self.restore_timeout,
                end,
            )
        };
        let stats = match restore(&store) {
            Err(e @ (StateError::CheckpointAhead { .. } | StateError::StaleCheckpoint { .. })) => {
                tracing::warn!(partition = p, error = %e, "rebuilding the store from the changelog alone");
                store = self.reopen_empty(store, path, source)?;
                rebuilt = true;
                restore(&store)?
            }
            other => other?,
        };
        Ok((store, rebuilt, stats))
    }

    /// Closes `store`, deletes it at `path` and opens it again empty, for `source`: a store whose
    /// checkpoint cannot be trusted is rebuilt from its topic alone.
    fn reopen_empty(
        &self,
        store: Store,
        path: &std::path::Path,
        source: &str,
    ) -> Result<Store, RuntimeError> {
        drop(store);
        Store::wipe(path)?;
        Ok(Store::open(path, source, &self.cache)?.0)
    }

    /// After a commit: every task's overlays go to RocksDB with the checkpoints reached — the
    /// last changelog offset written per (store, partition) in `ends` (store 0 the default one,
    /// `i + 1` the named store `i`), and for a table the topic's next offset the transaction
    /// committed (`next_offsets`).
    pub(super) fn apply_committed(
        &mut self,
        ends: &HashMap<(usize, i32), i64>,
        next_offsets: &[(String, i32, i64)],
    ) -> Result<(), RuntimeError> {
        let named = self.stores.len();
        for (p, task) in self.tasks.iter_mut() {
            // A table's checkpoint is its topic's next offset committed in this transaction.
            let table_next = |i: usize| {
                let (_, topic) = self.tables.get(i - 1 - named)?;
                next_offsets
                    .iter()
                    .find(|(t, q, _)| t == topic && q == p)
                    .map(|(_, _, o)| *o)
            };
            task.apply_committed(|store| match store {
                s if s > named => table_next(s),
                s => ends.get(&(s, *p)).map(|o| o + 1),
            })?;
            let origins = std::mem::take(&mut task.batch_origins);
            if let Some(l) = &self.local {
                l.committed(
                    *p,
                    next_offsets
                        .iter()
                        .filter(|(_, q, _)| q == p)
                        .map(|(t, _, o)| (t.as_str(), *o)),
                    origins,
                );
            }
        }
        Ok(())
    }

    /// Expires dedup ids older than the retention window, oldest batch first and a bounded
    /// number of ids per transaction; each expired batch leaves a changelog tombstone.
    pub(super) fn purge_expired_dedup(&mut self, now: i64) {
        const MAX_IDS_PER_BATCH: usize = 10_000;
        let cutoff = now - self.dedup_retention.as_millis() as i64;
        for (p, task) in self.tasks.iter_mut() {
            if task.last_purge.elapsed() < self.dedup_purge_interval {
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
                crate::telemetry::state_expired("dedup", purged);
                tracing::debug!(partition = *p, purged, "expired dedup ids removed");
            }
        }
    }
}
