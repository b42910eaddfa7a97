//! The instance's queryable state: every open task's stores, as read-only handles the
//! processing threads register when a task opens and withdraw before it closes, with the input
//! offsets each task's state reflects.
//!
//! The processing threads own their stores; a query reads RocksDB directly through a
//! [`StoreReader`], which sees only what applied commits left (never a batch's overlay, never
//! the record cache). A task's readers are withdrawn under a write lock before its stores close,
//! so a query in flight finishes first and none keeps a closed store's database open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::partitioner::Partitioner;
use crate::state::StoreReader;

/// The next input offset of each (topic, partition) a read's state reflects: every record
/// before it that reaches the store's partition is in the state (records at or after it may
/// be too: the state is read after its positions).
pub type Positions = BTreeMap<(String, i32), i64>;

/// What one task's state reflects, by sub-topology: the next offsets of the topics each
/// reads ([`TaskPositions::direct`], by topic) and of the inputs behind its repartitions.
#[derive(Debug, Default, Clone)]
struct TaskPositions {
    /// The next offset of each (topic, partition) the task's sub-topologies read (a topic
    /// belongs to the one sub-topology reading it).
    direct: Positions,
    /// Per sub-topology reading a repartition topic: the next offset of each input record
    /// its repartitioned records came from (see `engine::Origin`).
    origins: BTreeMap<usize, Positions>,
}

fn advance(into: &mut Positions, key: (String, i32), next: i64) {
    let e = into.entry(key).or_insert(next);
    *e = (*e).max(next);
}

/// One open task's readers and positions.
#[derive(Debug, Default)]
struct LocalTask {
    /// `None` once withdrawn.
    stores: RwLock<Option<HashMap<String, StoreReader>>>,
    positions: Mutex<TaskPositions>,
    /// The task's default store (registered first): where its stream times are kept.
    default: Option<String>,
}

/// A warm standby copy of one store of one partition (`processor.standby_replicas`): its
/// reader while the standby tailer keeps it open, and how many changelog records it is behind.
#[derive(Debug)]
struct StandbyCopy {
    reader: RwLock<Option<StoreReader>>,
    /// Records between the copy's checkpoint and its changelog's end (`i64::MAX` until the
    /// tailer first measured it), and when it was measured.
    lag: Mutex<(i64, Instant)>,
}

/// How old a standby copy's measured lag may be when a query reads the copy (the tailer
/// measures it every second): an older one is unknown — the tailer may be stuck, and the
/// changelog has moved on since — so the copy is not read.
pub(crate) const STANDBY_LAG_MAX_AGE: Duration = Duration::from_secs(10);

impl StandbyCopy {
    /// The copy's lag if measured within [`STANDBY_LAG_MAX_AGE`] and at most `max_lag`.
    fn lag_within(&self, max_lag: i64) -> Option<i64> {
        let (lag, at) = *lock(&self.lag);
        (lag <= max_lag && at.elapsed() <= STANDBY_LAG_MAX_AGE).then_some(lag)
    }
}

/// Where a partition stands on this instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Here {
    /// Open: its stores can be read.
    Active,
    /// Assigned here, its stores still restoring.
    Restoring,
    /// Not assigned here.
    Elsewhere,
}

/// The instance's open tasks, shared by its processing threads and its query readers.
#[derive(Debug, Default)]
pub(crate) struct LocalStores {
    /// The inputs' partition count (0: not known yet).
    partitions: AtomicUsize,
    /// An input topic: whose assignment says which member owns a partition number.
    input: Mutex<Option<String>>,
    tasks: RwLock<BTreeMap<i32, Arc<LocalTask>>>,
    restoring: Mutex<BTreeSet<i32>>,
    /// The names of the stores a task registers (for "unknown store" answers).
    names: Mutex<BTreeSet<String>>,
    /// Standby copies, by (partition, store name).
    standbys: RwLock<BTreeMap<(i32, String), Arc<StandbyCopy>>>,
    /// How the inputs' keys were placed (`queries.partitioner`): where a key is looked for.
    partitioner: Mutex<Partitioner>,
    /// The name of the tasks' default store (the first a task registers), whose standby copy
    /// holds a partition's stream times.
    default_store: Mutex<Option<String>>,
    /// The sub-topology of each topic the tasks read, and of each store's writer: a store's
    /// positions are its writer's (a topic or store not listed: sub-topology 0).
    subs: RwLock<SubTopologies>,
}

/// Which sub-topology reads each topic and writes each store.
#[derive(Debug, Default)]
struct SubTopologies {
    topics: HashMap<String, usize>,
    stores: HashMap<String, usize>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LocalStores {
    /// An empty registry.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The inputs' partition count and the input topic whose assignment places partition
    /// numbers (set when a processing loop joins).
    pub(crate) fn set_layout(&self, partitions: Option<usize>, input: Option<&str>) {
        if let Some(n) = partitions {
            self.partitions.store(n, Ordering::Relaxed);
        }
        if let Some(t) = input {
            *lock(&self.input) = Some(t.to_string());
        }
    }

    /// The sub-topology reading each of `topics` and writing each of `stores` (a topology's;
    /// a processor has one): a store's positions are those of the sub-topology writing it.
    /// `default` is the tasks' default store (where their stream times are, also on an
    /// instance that holds only standby copies).
    pub(crate) fn set_sub_topologies(
        &self,
        default: &str,
        topics: impl IntoIterator<Item = (String, usize)>,
        stores: impl IntoIterator<Item = (String, usize)>,
    ) {
        lock(&self.default_store).get_or_insert_with(|| default.to_string());
        let mut subs = write(&self.subs);
        subs.topics.extend(topics);
        subs.stores.extend(stores);
    }

    /// `store`'s positions out of its task's: those of the sub-topology writing it — the
    /// topics it reads and, behind a repartition, the inputs its records came from (where
    /// both name a topic-partition, the lesser: each is a bound on what is reflected).
    fn positions_of(&self, task: &TaskPositions, store: &str) -> Positions {
        let subs = read(&self.subs);
        let writer = subs.stores.get(store).copied().unwrap_or(0);
        let sub_of = |topic: &str| {
            let base = crate::retry::base_and_level(topic).0;
            subs.topics.get(base).copied().unwrap_or(0)
        };
        let mut out: Positions = task
            .direct
            .iter()
            .filter(|((t, _), _)| sub_of(t) == writer)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (k, v) in task.origins.get(&writer).into_iter().flatten() {
            let e = out.entry(k.clone()).or_insert(*v);
            *e = (*e).min(*v);
        }
        out
    }

    /// Keys are looked for where `partitioner` places them (`queries.partitioner`).
    pub(crate) fn set_partitioner(&self, partitioner: Partitioner) {
        *lock(&self.partitioner) = partitioner;
    }

    /// Where keys are looked for, unless a reader says otherwise.
    pub(crate) fn partitioner(&self) -> Partitioner {
        *lock(&self.partitioner)
    }

    /// The inputs' partition count, once a processing loop has read it.
    pub(crate) fn partitions(&self) -> Option<usize> {
        match self.partitions.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// The input topic whose assignment places partition numbers.
    pub(crate) fn input(&self) -> Option<String> {
        lock(&self.input).clone()
    }

    /// Partition number `p` is assigned here and restoring.
    pub(crate) fn restoring(&self, p: i32) {
        lock(&self.restoring).insert(p);
    }

    /// Partition number `p` is no longer restoring here (opened, or given up).
    pub(crate) fn not_restoring(&self, p: i32) {
        lock(&self.restoring).remove(&p);
    }

    /// Partition number `p`'s task opened with `stores`, its state reflecting `positions`
    /// (the next offsets of the topics it reads, by topic) and `origins` (per sub-topology, of
    /// the inputs behind its repartitions).
    pub(crate) fn opened(
        &self,
        p: i32,
        stores: Vec<(String, StoreReader)>,
        positions: Positions,
        origins: BTreeMap<usize, Positions>,
    ) {
        lock(&self.names).extend(stores.iter().map(|(n, _)| n.clone()));
        let default = stores.first().map(|(n, _)| n.clone());
        if let Some(d) = &default {
            lock(&self.default_store).get_or_insert_with(|| d.clone());
        }
        let task = Arc::new(LocalTask {
            stores: RwLock::new(Some(stores.into_iter().collect())),
            positions: Mutex::new(TaskPositions {
                direct: positions,
                origins,
            }),
            default,
        });
        write(&self.tasks).insert(p, task);
        self.not_restoring(p);
    }

    /// Partition numbers `ps` are about to close: their readers are withdrawn, waiting for the
    /// reads in flight.
    pub(crate) fn closing(&self, ps: &[i32]) {
        let gone: Vec<Arc<LocalTask>> = {
            let mut tasks = write(&self.tasks);
            ps.iter().filter_map(|p| tasks.remove(p)).collect()
        };
        for t in gone {
            write(&t.stores).take();
        }
        let mut restoring = lock(&self.restoring);
        for p in ps {
            restoring.remove(p);
        }
    }

    /// A commit of `p`'s task was applied to its stores: its state now reflects `next` (the
    /// topics' next offsets) and `origins` (by sub-topology, topic and partition: the next
    /// offsets of the input records behind its repartitioned records).
    pub(crate) fn committed<'a>(
        &self,
        p: i32,
        next: impl Iterator<Item = (&'a str, i64)>,
        origins: BTreeMap<(usize, String, i32), i64>,
    ) {
        let Some(task) = read(&self.tasks).get(&p).cloned() else {
            return;
        };
        let mut positions = lock(&task.positions);
        for (topic, offset) in next {
            advance(&mut positions.direct, (topic.to_string(), p), offset);
        }
        for ((sub, topic, q), offset) in origins {
            advance(
                positions.origins.entry(sub).or_default(),
                (topic, q),
                offset,
            );
        }
    }

    /// Where partition number `p` stands here.
    pub(crate) fn here(&self, p: i32) -> Here {
        if read(&self.tasks).contains_key(&p) {
            Here::Active
        } else if lock(&self.restoring).contains(&p) {
            Here::Restoring
        } else {
            Here::Elsewhere
        }
    }

    /// The partition numbers open here.
    pub(crate) fn active(&self) -> Vec<i32> {
        read(&self.tasks).keys().copied().collect()
    }

    /// Whether a task has registered a store called `name`.
    pub(crate) fn knows(&self, name: &str) -> bool {
        lock(&self.names).contains(name)
    }

    /// The standby tailer opened its copy of partition `p`'s store `name`.
    pub(crate) fn standby_opened(&self, p: i32, name: &str, reader: StoreReader) {
        let copy = Arc::new(StandbyCopy {
            reader: RwLock::new(Some(reader)),
            lag: Mutex::new((i64::MAX, Instant::now())),
        });
        write(&self.standbys).insert((p, name.to_string()), copy);
    }

    /// The standby tailer is about to close its copy of partition `p`'s store `name`: its
    /// reader is withdrawn, waiting for the reads in flight.
    pub(crate) fn standby_closing(&self, p: i32, name: &str) {
        let gone = write(&self.standbys).remove(&(p, name.to_string()));
        if let Some(copy) = gone {
            write(&copy.reader).take();
        }
    }

    /// The standby copy of partition `p`'s store `name` is `lag` records behind its changelog.
    pub(crate) fn standby_lag(&self, p: i32, name: &str, lag: i64) {
        self.standby_lag_measured(p, name, lag, Instant::now());
    }

    /// The standby copy of partition `p`'s store `name` was `lag` records behind its
    /// changelog at `at`.
    pub(crate) fn standby_lag_measured(&self, p: i32, name: &str, lag: i64, at: Instant) {
        if let Some(copy) = read(&self.standbys).get(&(p, name.to_string())) {
            *lock(&copy.lag) = (lag, at);
        }
    }

    /// The partitions whose copy of `store` is warm here and, by a lag measured within
    /// [`STANDBY_LAG_MAX_AGE`], at most `max_lag` behind.
    pub(crate) fn standby_partitions(&self, store: &str, max_lag: i64) -> Vec<i32> {
        read(&self.standbys)
            .iter()
            .filter(|((_, n), c)| n == store && c.lag_within(max_lag).is_some())
            .map(|((p, _), _)| *p)
            .collect()
    }

    /// Runs `f` on the standby copy of partition `p`'s `store` if it is at most `max_lag`
    /// records behind its changelog by a lag measured within [`STANDBY_LAG_MAX_AGE`]; with
    /// that lag, measured before the read. `None`: no such copy here, its lag unknown (never
    /// measured, its changelog's end not answered, or measured too long ago), or too far
    /// behind.
    pub(crate) fn read_standby<T>(
        &self,
        p: i32,
        store: &str,
        max_lag: i64,
        f: impl FnOnce(&StoreReader) -> T,
    ) -> Option<(T, i64)> {
        let copy = read(&self.standbys).get(&(p, store.to_string())).cloned()?;
        let lag = copy.lag_within(max_lag)?;
        let reader = read(&copy.reader);
        Some((f(reader.as_ref()?), lag))
    }

    /// Partition `p`'s committed stream time of sub-topology `sub` (the clock of an event-time
    /// TTL), from its open task or — `from_standby` — its default store's standby copy; `None`
    /// when not known (nothing expires by event time then, as in the task itself).
    pub(crate) fn stream_time(&self, p: i32, sub: usize, from_standby: bool) -> Option<i64> {
        let key = crate::processor::engine::stream_time_key(sub);
        let decode = |v: Vec<u8>| Some(i64::from_be_bytes(v.as_slice().try_into().ok()?));
        let get = |r: &StoreReader| {
            r.get_in(crate::state::Column::Time, &key)
                .ok()
                .flatten()
                .and_then(decode)
        };
        if from_standby {
            let name = lock(&self.default_store).clone()?;
            let copy = read(&self.standbys).get(&(p, name)).cloned()?;
            let reader = read(&copy.reader);
            return reader.as_ref().and_then(get);
        }
        let task = read(&self.tasks).get(&p).cloned()?;
        let name = task.default.as_ref()?;
        let stores = read(&task.stores);
        stores.as_ref()?.get(name).and_then(get)
    }

    /// Runs `f` on partition `p`'s reader of `store`, with the positions its answer reflects
    /// at least (read before the store, so the state read is at or past them). `None` when
    /// the task is not open here (or is closing).
    pub(crate) fn read<T>(
        &self,
        p: i32,
        store: &str,
        f: impl FnOnce(Option<&StoreReader>) -> T,
    ) -> Option<(T, Positions)> {
        let task = read(&self.tasks).get(&p).cloned()?;
        let positions = self.positions_of(&lock(&task.positions), store);
        let stores = read(&task.stores);
        let stores = stores.as_ref()?;
        Some((f(stores.get(store)), positions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::engine::{Origin, Task};
    use crate::record::Record;
    use crate::state::{Store, StoreCache};

    fn open(cache: &StoreCache, name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("eosflow-local-{}", uuid::Uuid::new_v4()));
        Store::open(&dir, name, cache).expect("open").0
    }

    fn pos(entries: &[(&str, i32, i64)]) -> Positions {
        entries
            .iter()
            .map(|(t, p, o)| ((t.to_string(), *p), *o))
            .collect()
    }

    // Issue 49: `counts` is written by sub-topology 1, which reads the repartition topic; the
    // input's own position (sub-topology 0's) says nothing of it.
    #[test]
    fn a_store_behind_a_repartition_answers_with_its_writer_s_positions() {
        let cache = StoreCache::new(8 << 20);
        let (state, counts) = (open(&cache, "state"), open(&cache, "counts"));
        let local = LocalStores::new();
        local.set_sub_topologies(
            "state",
            [("in".to_string(), 0), ("app-rk-repartition".to_string(), 1)],
            [("state".to_string(), 0), ("counts".to_string(), 1)],
        );
        let readers = vec![
            ("state".to_string(), state.reader()),
            ("counts".to_string(), counts.reader()),
        ];
        let origins = BTreeMap::from([(1, pos(&[("in", 1, 8)]))]);
        local.opened(
            0,
            readers,
            pos(&[("in", 0, 5), ("app-rk-repartition", 0, 3)]),
            origins,
        );
        let positions = |store: &str| local.read(0, store, |_| ()).expect("open").1;
        assert_eq!(
            positions("counts"),
            pos(&[("app-rk-repartition", 0, 3), ("in", 1, 8)])
        );
        assert_eq!(positions("state"), pos(&[("in", 0, 5)]));
        // A commit moves both: the topics read, and the inputs behind the repartition.
        let origins =
            BTreeMap::from([((1, "in".to_string(), 2), 4), ((1, "in".to_string(), 1), 7)]);
        local.committed(
            0,
            [("in", 9), ("app-rk-repartition", 4), ("in.retry.1", 2)].into_iter(),
            origins,
        );
        assert_eq!(
            positions("counts"),
            pos(&[("app-rk-repartition", 0, 4), ("in", 1, 8), ("in", 2, 4)])
        );
        assert_eq!(
            positions("state"),
            pos(&[("in", 0, 9), ("in.retry.1", 0, 2)])
        );
    }

    fn record<'a>(topic: &'a str, offset: i64, headers: &'a [(String, Vec<u8>)]) -> Record<'a> {
        Record {
            topic,
            partition: 2,
            offset,
            timestamp: None,
            key: None,
            value: None,
            headers,
        }
    }

    // A repartition record names the input record it comes from, through any number of
    // repartitions; the task reading it commits that position with its writes and finds it
    // again when it opens (positions at open, no request).
    #[test]
    fn origins_travel_through_repartitions_and_commit_with_the_task_s_state() {
        let mut h = Vec::new();
        Origin::stamp(&mut h, &record("in", 41, &[]));
        let first = record("app-a-repartition", 3, &h);
        let origin = Origin::of(&first).expect("stamped");
        assert_eq!(
            (origin.topic.as_str(), origin.partition, origin.offset),
            ("in", 2, 41)
        );
        let mut again = vec![(
            crate::processor::engine::ORIGIN.to_string(),
            b"stale".to_vec(),
        )];
        Origin::stamp(&mut again, &first);
        assert_eq!(again.len(), 1);
        assert_eq!(
            Origin::of(&record("app-b-repartition", 0, &again)),
            Some(origin.clone())
        );
        // A retry level's offset is not the one the client wrote: no origin.
        let mut none = Vec::new();
        Origin::stamp(&mut none, &record("in.retry.1", 7, &[]));
        assert!(none.is_empty());

        let cache = StoreCache::new(8 << 20);
        let mut task = Task::open(2, open(&cache, "state"), Vec::new(), 2).expect("task");
        task.note_origin(1, origin.clone());
        task.drop_batch();
        assert!(
            task.batch_origins.is_empty(),
            "an aborted batch's origins are dropped"
        );
        task.note_origin(1, origin);
        task.apply_committed(|_| None).expect("apply");
        assert_eq!(
            std::mem::take(&mut task.batch_origins),
            BTreeMap::from([((1, "in".to_string(), 2), 42)])
        );
        assert_eq!(
            task.committed_origins().expect("read"),
            BTreeMap::from([(1, pos(&[("in", 2, 42)]))])
        );
    }

    // Issue 49 item 6: a lag measured long ago bounds nothing now.
    #[test]
    fn a_standby_copy_is_read_only_while_its_lag_is_known_and_recent() {
        let cache = StoreCache::new(8 << 20);
        let s = open(&cache, "s");
        let local = LocalStores::new();
        local.standby_opened(0, "s", s.reader());
        assert!(
            local.read_standby(0, "s", 10, |_| ()).is_none(),
            "never measured"
        );
        local.standby_lag(0, "s", 3);
        assert_eq!(local.read_standby(0, "s", 10, |_| ()), Some(((), 3)));
        assert!(
            local.read_standby(0, "s", 2, |_| ()).is_none(),
            "too far behind"
        );
        assert_eq!(local.standby_partitions("s", 10), [0]);
        let long_ago = Instant::now()
            .checked_sub(STANDBY_LAG_MAX_AGE + Duration::from_secs(1))
            .expect("a past instant");
        local.standby_lag_measured(0, "s", 3, long_ago);
        assert!(local.read_standby(0, "s", 10, |_| ()).is_none(), "too old");
        assert!(local.standby_partitions("s", 10).is_empty());
        local.standby_lag(0, "s", i64::MAX);
        assert!(
            local.read_standby(0, "s", i64::MAX - 1, |_| ()).is_none(),
            "unknown"
        );
    }
}
