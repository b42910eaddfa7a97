//! The instance's queryable state: every open task's stores, as read-only handles the
//! processing threads register when a task opens and withdraw before it closes, with the input
//! offsets each task's state reflects.
//!
//! The processing threads own their stores; a query reads RocksDB directly through a
//! [`StoreReader`], which sees only what applied commits left (never a batch's overlay, never
//! the record cache). A task's readers are withdrawn under a write lock before its stores close,
//! so a query in flight finishes first and none keeps a closed store's database open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::partitioner::Partitioner;
use crate::state::StoreReader;

/// The next input offset of each (topic, partition) a read's state reflects: every record
/// before it is in the state, none at or after it.
pub type Positions = BTreeMap<(String, i32), i64>;

/// One open task's readers and positions.
#[derive(Debug, Default)]
struct LocalTask {
    /// `None` once withdrawn.
    stores: RwLock<Option<HashMap<String, StoreReader>>>,
    positions: Mutex<Positions>,
    /// The task's default store (registered first): where its stream times are kept.
    default: Option<String>,
}

/// A warm standby copy of one store of one partition (`processor.standby_replicas`): its
/// reader while the standby tailer keeps it open, and how many changelog records it is behind.
#[derive(Debug)]
struct StandbyCopy {
    reader: RwLock<Option<StoreReader>>,
    /// Records between the copy's checkpoint and its changelog's end (`i64::MAX` until the
    /// tailer first measured it).
    lag: AtomicI64,
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
pub struct LocalStores {
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
    /// Whether the application queries this instance (a store handle taken or served): only
    /// then does opening a task ask the group for the input positions its state reflects.
    queried: AtomicBool,
    /// How the inputs' keys were placed (`queries.partitioner`): where a key is looked for.
    partitioner: Mutex<Partitioner>,
    /// The name of the tasks' default store (the first a task registers), whose standby copy
    /// holds a partition's stream times.
    default_store: Mutex<Option<String>>,
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

    /// Keys are looked for where `partitioner` places them (`queries.partitioner`).
    pub(crate) fn set_partitioner(&self, partitioner: Partitioner) {
        *lock(&self.partitioner) = partitioner;
    }

    /// Where keys are looked for, unless a reader says otherwise.
    pub(crate) fn partitioner(&self) -> Partitioner {
        *lock(&self.partitioner)
    }

    /// The application reads this instance's stores: tasks opened from now on start with
    /// their input positions.
    pub(crate) fn mark_queried(&self) {
        self.queried.store(true, Ordering::Relaxed);
    }

    /// Whether the application reads this instance's stores.
    pub(crate) fn is_queried(&self) -> bool {
        self.queried.load(Ordering::Relaxed)
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

    /// Partition number `p`'s task opened with `stores`, its state reflecting `positions`.
    pub(crate) fn opened(&self, p: i32, stores: Vec<(String, StoreReader)>, positions: Positions) {
        lock(&self.names).extend(stores.iter().map(|(n, _)| n.clone()));
        let default = stores.first().map(|(n, _)| n.clone());
        if let Some(d) = &default {
            lock(&self.default_store).get_or_insert_with(|| d.clone());
        }
        let task = Arc::new(LocalTask {
            stores: RwLock::new(Some(stores.into_iter().collect())),
            positions: Mutex::new(positions),
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

    /// A commit of `p`'s task was applied to its stores: its state now reflects `next`.
    pub(crate) fn committed<'a>(&self, p: i32, next: impl Iterator<Item = (&'a str, i64)>) {
        let Some(task) = read(&self.tasks).get(&p).cloned() else {
            return;
        };
        let mut positions = lock(&task.positions);
        for (topic, offset) in next {
            let e = positions.entry((topic.to_string(), p)).or_insert(offset);
            *e = (*e).max(offset);
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
            lag: AtomicI64::new(i64::MAX),
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
        if let Some(copy) = read(&self.standbys).get(&(p, name.to_string())) {
            copy.lag.store(lag, Ordering::Relaxed);
        }
    }

    /// The partitions whose copy of `store` is warm here and at most `max_lag` behind.
    pub(crate) fn standby_partitions(&self, store: &str, max_lag: i64) -> Vec<i32> {
        read(&self.standbys)
            .iter()
            .filter(|((_, n), c)| n == store && c.lag.load(Ordering::Relaxed) <= max_lag)
            .map(|((p, _), _)| *p)
            .collect()
    }

    /// Runs `f` on the standby copy of partition `p`'s `store` if it is at most `max_lag`
    /// records behind its changelog; with the lag measured before the read (the copy is at
    /// most that far behind). `None`: no such copy here, or too far behind.
    pub(crate) fn read_standby<T>(
        &self,
        p: i32,
        store: &str,
        max_lag: i64,
        f: impl FnOnce(&StoreReader) -> T,
    ) -> Option<(T, i64)> {
        let copy = read(&self.standbys).get(&(p, store.to_string())).cloned()?;
        let lag = copy.lag.load(Ordering::Relaxed);
        if lag > max_lag {
            return None;
        }
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
        let positions = lock(&task.positions).clone();
        let stores = read(&task.stores);
        let stores = stores.as_ref()?;
        Some((f(stores.get(store)), positions))
    }
}
