//! The typed read API: [`ReadOnlyKeyValueStore`] and [`ReadOnlyWindowStore`] over this
//! instance's open tasks, each answer [`Queried`] with the input offsets it reflects.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use super::local::{Here, LocalStores, Positions};
use super::partitioner::Partitioner;
use crate::processor::timers::committed_expiry;
use crate::processor::{StoreHandle, TtlClock};
use crate::serdes::SerdeError;
use crate::state::merge::{prefix_bounds, KeyBounds};
use crate::state::{StateError, StoreReader};
use crate::topology::windows::{Window, WindowStoreHandle};

/// Why a query has no answer here.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// No processing loop has joined the group yet: the inputs' partition count is unknown.
    #[error(
        "the instance has not joined its group yet: no partition is known; ask again in a moment"
    )]
    NotStarted,
    /// The key's partition is assigned here and its stores are still restoring.
    #[error("partition {partition} is restoring on this instance; ask again in a moment")]
    Restoring {
        /// The key's partition.
        partition: i32,
    },
    /// The key's partition is not open on this instance (another instance owns it, or the
    /// group is rebalancing): see [`crate::query::QueryService`] for routing.
    #[error("partition {partition} is not open on this instance")]
    NotLocal {
        /// The key's partition.
        partition: i32,
    },
    /// No task of this instance has a store of that name.
    #[error("no store named {store:?} on this instance (its topology's stores are the names of their StoreHandles)")]
    UnknownStore {
        /// The name asked for.
        store: String,
    },
    /// The key could not be serialized, or a stored value not read with the handle's serde.
    #[error("store {store}: {source}")]
    Serde {
        /// The store.
        store: String,
        /// The serde's error.
        source: SerdeError,
    },
    /// A stored entry is not what the store's kind lays out (a key-value handle on a window
    /// store, or the reverse).
    #[error("store {store}: an entry is not a {kind} entry: is the handle of the right kind?")]
    Layout {
        /// The store.
        store: String,
        /// `window`.
        kind: &'static str,
    },
    /// The request's deadline (`queries.request_timeout_ms`) passed before the scan ended.
    #[error("the request's deadline passed before the scan ended: narrow it (limit=, prefix=, from=/to=) or resume with after=")]
    DeadlineExceeded,
    /// RocksDB failed.
    #[error(transparent)]
    State(#[from] StateError),
}

/// An answer and what it reflects: the next input offset of each (topic, partition) whose
/// records that reach the store read are all in it (from the sub-topology writing the store;
/// behind a repartition, the inputs its records came from), so a client that wrote a record at offset `n` of
/// `(topic, p)` reads its own write once `reached(topic, p, n)` — "wait until offset ≥ n".
#[derive(Debug, Clone, PartialEq)]
pub struct Queried<T> {
    /// The answer.
    pub value: T,
    /// The partitions read.
    pub partitions: Vec<i32>,
    /// Next input offset reflected, per (topic, partition) of the active partitions read.
    pub positions: Positions,
    /// The partitions read from a standby copy (only when asked for with
    /// `with_standbys(max_lag)`), with how many changelog records the copy was behind its
    /// changelog when read: their state may be that much older than the active owner's, and
    /// they have no input positions.
    pub standby_lags: BTreeMap<i32, i64>,
}

impl<T> Queried<T> {
    /// Whether the record at `offset` of `topic`'s `partition` is reflected.
    pub fn reached(&self, topic: &str, partition: i32, offset: i64) -> bool {
        self.positions
            .get(&(topic.to_string(), partition))
            .is_some_and(|next| *next > offset)
    }
}

/// No bound on the entries one multi-partition read of the library returns (the HTTP endpoint
/// sets its own `limit`).
const NO_LIMIT: usize = usize::MAX;

/// Entries one scan step reads under a task's read lock: a revocation (which takes that lock
/// to withdraw the task's readers) waits for at most one such step, never a whole scan.
pub(crate) const SCAN_CHUNK: usize = 256;

/// Read-only access to a key-value store of this instance (Kafka Streams'
/// `ReadOnlyKeyValueStore`), from any thread: committed state only. Cheap to clone.
pub struct ReadOnlyKeyValueStore<K, V> {
    local: Arc<LocalStores>,
    handle: StoreHandle<K, V>,
    standby: Option<i64>,
    partitioner: Partitioner,
}

impl<K, V> Clone for ReadOnlyKeyValueStore<K, V> {
    fn clone(&self) -> Self {
        Self {
            local: self.local.clone(),
            handle: self.handle.clone(),
            standby: self.standby,
            partitioner: self.partitioner,
        }
    }
}

/// One partition's answer: from its active task (with positions) or a standby copy (with
/// its lag).
pub(crate) struct PartitionRead<T> {
    pub(crate) value: T,
    pub(crate) positions: Positions,
    pub(crate) standby_lag: Option<i64>,
}

/// Reads `p`'s store `name` with `f` — from its active task, else (with `standby` =
/// `Some(max_lag)`) from a standby copy at most `max_lag` records behind — or says why it
/// cannot be read here.
pub(crate) fn read_partition<T>(
    local: &LocalStores,
    name: &str,
    p: i32,
    standby: Option<i64>,
    f: impl Fn(&StoreReader) -> Result<T, QueryError>,
) -> Result<PartitionRead<T>, QueryError> {
    let unknown = || QueryError::UnknownStore {
        store: name.to_string(),
    };
    match local.read(p, name, |r| r.map(&f)) {
        Some((Some(answer), positions)) => {
            return Ok(PartitionRead {
                value: answer?,
                positions,
                standby_lag: None,
            })
        }
        Some((None, _)) => return Err(unknown()),
        None => {}
    }
    if let Some((answer, lag)) = standby.and_then(|max| local.read_standby(p, name, max, &f)) {
        return Ok(PartitionRead {
            value: answer?,
            positions: Positions::new(),
            standby_lag: Some(lag),
        });
    }
    match local.here(p) {
        Here::Restoring => Err(QueryError::Restoring { partition: p }),
        _ => Err(QueryError::NotLocal { partition: p }),
    }
}

/// The partition of `key_bytes` among the instance's inputs, placed by `partitioner`.
pub(crate) fn partition_of(
    local: &LocalStores,
    partitioner: Partitioner,
    key_bytes: &[u8],
) -> Result<i32, QueryError> {
    let n = local.partitions().ok_or(QueryError::NotStarted)?;
    Ok(partitioner.partition(key_bytes, n))
}

/// An entry as stored: partition, key bytes, value bytes.
pub(crate) type RawEntry = (i32, Vec<u8>, Vec<u8>);

/// A key's committed expiry in a store with a TTL: the sub-topology whose lane holds it and
/// its due time (`None`: the key does not expire).
pub(crate) type KeyExpiry = Option<(usize, i64)>;

/// The committed expiry of `key` read by `reader` in a store whose TTL counts in `ttl` (none
/// without a TTL: nothing to look up).
pub(crate) fn expiry_of(
    reader: &StoreReader,
    ttl: Option<TtlClock>,
    key: &[u8],
) -> Result<KeyExpiry, QueryError> {
    let Some(clock) = ttl else {
        return Ok(None);
    };
    Ok(committed_expiry(
        |col, k| reader.get_in(col, k),
        clock.kind(),
        key,
    )?)
}

/// Whether entries of one partition's copy have expired by their TTL's clock: the wall clock
/// now, or the copy's committed stream time of the sub-topology that wrote them (read once per
/// sub-topology). An expired key not yet swept is not served (docs/ttl.md).
pub(crate) struct Expiry<'a> {
    local: &'a LocalStores,
    p: i32,
    from_standby: bool,
    clock: Option<TtlClock>,
    now_ms: i64,
    stream_times: BTreeMap<usize, Option<i64>>,
}

impl<'a> Expiry<'a> {
    /// For partition `p`'s active task, or (`from_standby`) its standby copy.
    pub(crate) fn new(
        local: &'a LocalStores,
        p: i32,
        from_standby: bool,
        clock: Option<TtlClock>,
    ) -> Self {
        Self {
            local,
            p,
            from_standby,
            clock,
            now_ms: crate::clock::now_ms(),
            stream_times: BTreeMap::new(),
        }
    }

    /// Whether an entry with `expiry` is past it.
    pub(crate) fn expired(&mut self, expiry: KeyExpiry) -> bool {
        let (Some(clock), Some((sub, due))) = (self.clock, expiry) else {
            return false;
        };
        let now = match clock {
            TtlClock::WallClock => Some(self.now_ms),
            TtlClock::EventTime => *self
                .stream_times
                .entry(sub)
                .or_insert_with(|| self.local.stream_time(self.p, sub, self.from_standby)),
        };
        now.is_some_and(|t| due <= t)
    }
}

/// How much a scan may return and for how long it may run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanBudget {
    /// The most entries returned, over all partitions together.
    pub(crate) limit: usize,
    /// When to give up ([`QueryError::DeadlineExceeded`]), checked before every chunk.
    pub(crate) deadline: Option<Instant>,
}

/// The merged answer of a scan: at most `limit` entries in key order, whether any were left
/// out, and from which partitions.
pub(crate) struct Scanned {
    pub(crate) entries: Vec<RawEntry>,
    pub(crate) more: bool,
}

/// Keeps the `limit` smallest keys seen over all partitions (never more in memory, plus one
/// chunk), and whether any were left out.
struct Merge {
    limit: usize,
    kept: BTreeMap<(Vec<u8>, i32), Vec<u8>>,
    more: bool,
}

impl Merge {
    /// Offers one entry; `false` once the partition it came from cannot add anything (its keys
    /// come in order, and this one is already past the kept ones).
    fn offer(&mut self, p: i32, k: Vec<u8>, v: Vec<u8>) -> bool {
        if self.kept.len() >= self.limit {
            let past = self
                .kept
                .last_key_value()
                .is_some_and(|((last, _), _)| k >= *last);
            if past {
                self.more = true;
                return false;
            }
        }
        self.kept.insert((k, p), v);
        if self.kept.len() > self.limit {
            self.kept.pop_last();
            self.more = true;
        }
        true
    }
}

/// Reads every active partition's entries within `bounds` (and, with `standby`, the warm
/// copies' within their lag bound), merged in key order across partitions, at most
/// `budget.limit` of them. Each partition is read [`SCAN_CHUNK`] entries at a time, taking and
/// releasing its task's read lock per chunk; a task that closes meanwhile is left out (its new
/// owner answers for it), with what was read of it.
pub(crate) fn scan_local(
    local: &LocalStores,
    name: &str,
    bounds: &KeyBounds,
    budget: ScanBudget,
    standby: Option<i64>,
    ttl: Option<TtlClock>,
) -> Result<Queried<Scanned>, QueryError> {
    let mut merge = Merge {
        limit: budget.limit.max(1),
        kept: BTreeMap::new(),
        more: false,
    };
    let mut partitions = Vec::new();
    let mut positions = Positions::new();
    let mut standby_lags = BTreeMap::new();
    let mut numbers: std::collections::BTreeSet<i32> = local.active().into_iter().collect();
    if let Some(max) = standby {
        numbers.extend(local.standby_partitions(name, max));
    }
    'partitions: for p in numbers {
        let mut lower = bounds.0.clone();
        let mut first = true;
        loop {
            if budget.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(QueryError::DeadlineExceeded);
            }
            let chunk = (lower.clone(), bounds.1.clone());
            let read = match read_partition(local, name, p, standby, |r| {
                let (entries, more) = r.scan(&chunk, SCAN_CHUNK)?;
                let mut out = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    let e = expiry_of(r, ttl, &k)?;
                    out.push((k, v, e));
                }
                Ok((out, more))
            }) {
                Ok(read) => read,
                // Closed between the listing and the read, or between two chunks: its new
                // owner answers for it.
                Err(QueryError::NotLocal { .. } | QueryError::Restoring { .. }) => {
                    merge.kept.retain(|(_, q), _| *q != p);
                    if !first {
                        partitions.retain(|q| *q != p);
                        standby_lags.remove(&p);
                        positions.retain(|(_, q), _| *q != p);
                    }
                    continue 'partitions;
                }
                Err(e) => return Err(e),
            };
            if first {
                // The positions of the first chunk: every later chunk's state is at or past
                // them.
                partitions.push(p);
                positions.extend(read.positions);
                first = false;
            }
            if let Some(lag) = read.standby_lag {
                let l = standby_lags.entry(p).or_insert(lag);
                *l = (*l).max(lag);
            }
            let (entries, more) = read.value;
            let last = entries.last().map(|(k, _, _)| k.clone());
            let mut expiry = Expiry::new(local, p, read.standby_lag.is_some(), ttl);
            for (k, v, e) in entries {
                if expiry.expired(e) {
                    continue;
                }
                if !merge.offer(p, k, v) {
                    continue 'partitions;
                }
            }
            match (more, last) {
                (true, Some(k)) => lower = Bound::Excluded(k),
                _ => continue 'partitions,
            }
        }
    }
    if partitions.is_empty() && !local.active().is_empty() && !local.knows(name) {
        return Err(QueryError::UnknownStore {
            store: name.to_string(),
        });
    }
    let more = merge.more;
    let entries = merge
        .kept
        .into_iter()
        .map(|((k, p), v)| (p, k, v))
        .collect();
    Ok(Queried {
        value: Scanned { entries, more },
        partitions,
        positions,
        standby_lags,
    })
}

/// `key`'s committed value and, in a store with a TTL, its expiry (decided by [`Expiry`] once
/// the read's lock is released).
pub(crate) fn get_live(
    r: &StoreReader,
    ttl: Option<TtlClock>,
    key: &[u8],
) -> Result<(Option<Vec<u8>>, KeyExpiry), QueryError> {
    let value = r.get(key)?;
    let expiry = match value {
        Some(_) => expiry_of(r, ttl, key)?,
        None => None,
    };
    Ok((value, expiry))
}

/// `Some(p → lag)` for an answer read from a standby copy.
fn lags(p: i32, lag: Option<i64>) -> BTreeMap<i32, i64> {
    lag.map(|l| BTreeMap::from([(p, l)])).unwrap_or_default()
}

impl<K, V> ReadOnlyKeyValueStore<K, V> {
    pub(crate) fn new(local: Arc<LocalStores>, handle: &StoreHandle<K, V>) -> Self {
        let partitioner = local.partitioner();
        Self {
            local,
            handle: handle.clone(),
            standby: None,
            partitioner,
        }
    }

    /// Finds keys with `partitioner` instead of `queries.partitioner`: the one the inputs'
    /// keys were produced with (see [`Partitioner`]).
    pub fn with_partitioner(mut self, partitioner: Partitioner) -> Self {
        self.partitioner = partitioner;
        self
    }

    /// Also answers from this instance's standby copies (`processor.standby_replicas`) of
    /// partitions it does not own, when a copy is at most `max_lag` changelog records behind
    /// (Kafka Streams' `enableStaleStores`, with a bound). Such answers say so in
    /// [`Queried::standby_lags`].
    pub fn with_standbys(mut self, max_lag: i64) -> Self {
        self.standby = Some(max_lag.max(0));
        self
    }

    fn serde_err(&self, source: SerdeError) -> QueryError {
        QueryError::Serde {
            store: self.handle.name().to_string(),
            source,
        }
    }

    fn key_bytes(&self, key: &K) -> Result<Vec<u8>, QueryError> {
        self.handle
            .key_serde()
            .serialize(key)
            .map_err(|e| self.serde_err(e))
    }

    /// The partition `key` lives in (where its records were written).
    pub fn partition_of(&self, key: &K) -> Result<i32, QueryError> {
        partition_of(&self.local, self.partitioner, &self.key_bytes(key)?)
    }

    /// `key`'s committed value, from the partition that holds it; [`QueryError::NotLocal`]
    /// when another instance owns that partition, [`QueryError::Restoring`] while it restores
    /// here.
    pub fn get(&self, key: &K) -> Result<Queried<Option<V>>, QueryError> {
        let k = self.key_bytes(key)?;
        let p = partition_of(&self.local, self.partitioner, &k)?;
        let ttl = self.handle.ttl().map(|(_, clock)| clock);
        let read = read_partition(&self.local, self.handle.name(), p, self.standby, |r| {
            get_live(r, ttl, &k)
        })?;
        let (value, expiry) = read.value;
        let expired = Expiry::new(&self.local, p, read.standby_lag.is_some(), ttl).expired(expiry);
        let value = value
            .filter(|_| !expired)
            .map(|b| self.handle.value_serde().deserialize(&b))
            .transpose()
            .map_err(|e| self.serde_err(e))?;
        Ok(Queried {
            value,
            partitions: vec![p],
            positions: read.positions,
            standby_lags: lags(p, read.standby_lag),
        })
    }

    fn scan(&self, bounds: KeyBounds) -> Result<Queried<Vec<(K, V)>>, QueryError> {
        let budget = ScanBudget {
            limit: NO_LIMIT,
            deadline: None,
        };
        let ttl = self.handle.ttl().map(|(_, clock)| clock);
        let q = scan_local(
            &self.local,
            self.handle.name(),
            &bounds,
            budget,
            self.standby,
            ttl,
        )?;
        let entries = q.value.entries;
        let mut out = Vec::with_capacity(entries.len());
        for (_, k, v) in entries {
            let key = self
                .handle
                .key_serde()
                .deserialize(&k)
                .map_err(|e| self.serde_err(e))?;
            let value = self
                .handle
                .value_serde()
                .deserialize(&v)
                .map_err(|e| self.serde_err(e))?;
            out.push((key, value));
        }
        Ok(Queried {
            value: out,
            partitions: q.partitions,
            positions: q.positions,
            standby_lags: q.standby_lags,
        })
    }

    /// The committed entries with keys in `from..=to` (a `None` end is open) of every
    /// partition open here, in the order of their serialized keys. Read a chunk at a time per
    /// partition: a revocation meanwhile waits for one chunk, not the whole read.
    pub fn range(
        &self,
        from: Option<&K>,
        to: Option<&K>,
    ) -> Result<Queried<Vec<(K, V)>>, QueryError> {
        let lower = match from {
            Some(k) => Bound::Included(self.key_bytes(k)?),
            None => Bound::Unbounded,
        };
        let upper = match to {
            Some(k) => Bound::Included(self.key_bytes(k)?),
            None => Bound::Unbounded,
        };
        self.scan((lower, upper))
    }

    /// The committed entries whose serialized key starts with `prefix`'s.
    pub fn prefix(&self, prefix: &K) -> Result<Queried<Vec<(K, V)>>, QueryError> {
        self.scan(prefix_bounds(&self.key_bytes(prefix)?))
    }

    /// Every committed entry of the partitions open here.
    pub fn all(&self) -> Result<Queried<Vec<(K, V)>>, QueryError> {
        self.scan((Bound::Unbounded, Bound::Unbounded))
    }
}

/// Read-only access to a windowed store of this instance (Kafka Streams'
/// `ReadOnlyWindowStore`): committed windows only. Cheap to clone.
pub struct ReadOnlyWindowStore<K, V> {
    local: Arc<LocalStores>,
    handle: WindowStoreHandle<K, V>,
    standby: Option<i64>,
    partitioner: Partitioner,
    _v: PhantomData<fn() -> V>,
}

impl<K, V> Clone for ReadOnlyWindowStore<K, V> {
    fn clone(&self) -> Self {
        Self {
            local: self.local.clone(),
            handle: self.handle.clone(),
            standby: self.standby,
            partitioner: self.partitioner,
            _v: PhantomData,
        }
    }
}

/// `key`'s windows starting in `from..=to` as (window, value bytes), from a window store's
/// reader.
pub(crate) fn fetch_windows(
    r: &StoreReader,
    store: &str,
    key: &[u8],
    from: i64,
    to: i64,
) -> Result<Vec<(Window, Vec<u8>)>, QueryError> {
    use crate::topology::windows::store::{data_key, parse_data_key, split_value};
    let layout = || QueryError::Layout {
        store: store.to_string(),
        kind: "window",
    };
    if from > to {
        return Ok(Vec::new());
    }
    let bounds = (
        Bound::Included(data_key(key, from)),
        Bound::Included(data_key(key, to)),
    );
    let (entries, _) = r.scan(&bounds, NO_LIMIT)?;
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let (_, start) = parse_data_key(&k).ok_or_else(layout)?;
        let (end, value) = split_value(&v).ok_or_else(layout)?;
        out.push((Window { start, end }, value.to_vec()));
    }
    Ok(out)
}

impl<K, V> ReadOnlyWindowStore<K, V> {
    pub(crate) fn new(local: Arc<LocalStores>, handle: &WindowStoreHandle<K, V>) -> Self {
        let partitioner = local.partitioner();
        Self {
            local,
            handle: handle.clone(),
            standby: None,
            partitioner,
            _v: PhantomData,
        }
    }

    /// Finds keys with `partitioner` instead of `queries.partitioner` (see
    /// [`ReadOnlyKeyValueStore::with_partitioner`]).
    pub fn with_partitioner(mut self, partitioner: Partitioner) -> Self {
        self.partitioner = partitioner;
        self
    }

    /// Also answers from standby copies at most `max_lag` changelog records behind (see
    /// [`ReadOnlyKeyValueStore::with_standbys`]).
    pub fn with_standbys(mut self, max_lag: i64) -> Self {
        self.standby = Some(max_lag.max(0));
        self
    }

    fn serde_err(&self, source: SerdeError) -> QueryError {
        QueryError::Serde {
            store: self.handle.name().to_string(),
            source,
        }
    }

    /// `key`'s committed windows whose start lies in `from..=to` (ms), in start order, from
    /// the partition that holds the key.
    pub fn fetch(
        &self,
        key: &K,
        from: i64,
        to: i64,
    ) -> Result<Queried<Vec<(Window, V)>>, QueryError> {
        let k = self
            .handle
            .key_serde()
            .serialize(key)
            .map_err(|e| self.serde_err(e))?;
        let p = partition_of(&self.local, self.partitioner, &k)?;
        let name = self.handle.name();
        let read = read_partition(&self.local, name, p, self.standby, |r| {
            fetch_windows(r, name, &k, from, to)
        })?;
        let mut out = Vec::with_capacity(read.value.len());
        for (w, bytes) in read.value {
            let v = self
                .handle
                .value_serde()
                .deserialize(&bytes)
                .map_err(|e| self.serde_err(e))?;
            out.push((w, v));
        }
        Ok(Queried {
            value: out,
            partitions: vec![p],
            positions: read.positions,
            standby_lags: lags(p, read.standby_lag),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::timers::TimerKind;
    use crate::state::{Column, Overlay, Store, StoreCache};

    /// Two open partitions of store `s`: 0 holds `even`, 1 holds `odd` keys (`k000`…), each
    /// with its value equal to its key. The stores stay open while the result lives.
    fn two_partitions(keys: usize) -> (Arc<LocalStores>, Vec<Store>) {
        let local = LocalStores::new();
        local.set_layout(Some(2), Some("in"));
        let cache = StoreCache::new(8 << 20);
        let mut stores = Vec::new();
        for p in 0..2 {
            let dir = std::env::temp_dir().join(format!("eosflow-query-{}", uuid::Uuid::new_v4()));
            let (s, _) = Store::open(&dir, &format!("cl[{p}]"), &cache).expect("open");
            let mut o = Overlay::default();
            for i in (0..keys).filter(|i| i % 2 == p as usize) {
                let k = format!("k{i:03}").into_bytes();
                o.put(Column::State, &k, k.clone());
            }
            s.apply(&o, None).expect("apply");
            local.opened(
                p,
                vec![("s".to_string(), s.reader())],
                Positions::new(),
                BTreeMap::new(),
            );
            stores.push(s);
        }
        (local, stores)
    }

    fn keys(q: &Queried<Scanned>) -> Vec<String> {
        q.value
            .entries
            .iter()
            .map(|(_, k, _)| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn a_scan_keeps_at_most_limit_entries_over_all_partitions_in_key_order() {
        let (local, _stores) = two_partitions(2 * SCAN_CHUNK + 10);
        let all = (Bound::Unbounded, Bound::Unbounded);
        let budget = ScanBudget {
            limit: 5,
            deadline: None,
        };
        let q = scan_local(&local, "s", &all, budget, None, None).expect("scan");
        assert_eq!(keys(&q), ["k000", "k001", "k002", "k003", "k004"]);
        assert!(q.value.more);
        assert_eq!(q.partitions, [0, 1]);
        // The next page starts after the last key; the whole store, page by page, once.
        let mut seen = keys(&q);
        let mut lower = Bound::Excluded(b"k004".to_vec());
        loop {
            let budget = ScanBudget {
                limit: 97,
                deadline: None,
            };
            let page = scan_local(&local, "s", &(lower, Bound::Unbounded), budget, None, None)
                .expect("page");
            assert!(page.value.entries.len() <= 97);
            seen.extend(keys(&page));
            if !page.value.more {
                break;
            }
            lower = Bound::Excluded(seen.last().expect("a key").clone().into_bytes());
        }
        let want: Vec<String> = (0..2 * SCAN_CHUNK + 10)
            .map(|i| format!("k{i:03}"))
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_scan_past_its_deadline_stops_before_its_next_chunk() {
        let (local, _stores) = two_partitions(10);
        let budget = ScanBudget {
            limit: 5,
            deadline: Some(Instant::now()),
        };
        let all = (Bound::Unbounded, Bound::Unbounded);
        assert!(matches!(
            scan_local(&local, "s", &all, budget, None, None),
            Err(QueryError::DeadlineExceeded)
        ));
    }

    /// Partition 0 with a default store (its stream time of sub-topology 1 at `stream_time`)
    /// and store `s` whose keys `gone` (due at 100), `kept` (due at 10^15) and `forever` (no
    /// expiry) carry expiry index entries of `kind` in sub-topology 1's lane.
    fn ttl_store(kind: TimerKind, stream_time: i64) -> (Arc<LocalStores>, Vec<Store>) {
        ttl_copy(kind, stream_time, false)
    }

    /// [`ttl_store`]'s stores as partition 0's open task or (`standby`) as this instance's
    /// standby copies of them, measured 0 records behind.
    fn ttl_copy(
        kind: TimerKind,
        stream_time: i64,
        standby: bool,
    ) -> (Arc<LocalStores>, Vec<Store>) {
        use crate::processor::timers::expiry_index_entry;
        let local = LocalStores::new();
        local.set_layout(Some(1), Some("in"));
        let cache = StoreCache::new(8 << 20);
        let open = |name: &str| {
            let dir = std::env::temp_dir().join(format!("eosflow-query-{}", uuid::Uuid::new_v4()));
            Store::open(&dir, name, &cache).expect("open").0
        };
        let (default, s) = (open("default"), open("s"));
        let mut o = Overlay::default();
        o.put(
            Column::Time,
            &crate::processor::engine::stream_time_key(1),
            stream_time.to_be_bytes().to_vec(),
        );
        default.apply(&o, None).expect("apply");
        let mut o = Overlay::default();
        for (k, due) in [
            ("gone", Some(100)),
            ("kept", Some(1_000_000_000_000_000)),
            ("forever", None),
        ] {
            o.put(Column::State, k.as_bytes(), b"v".to_vec());
            if let Some(due) = due {
                let (ik, iv) = expiry_index_entry(kind, 1, k.as_bytes(), due);
                o.put(Column::TimerIndex, &ik, iv);
            }
        }
        s.apply(&o, None).expect("apply");
        let readers = vec![
            ("default".to_string(), default.reader()),
            ("s".to_string(), s.reader()),
        ];
        if standby {
            local.set_sub_topologies("default", [], []);
            for (name, reader) in readers {
                local.standby_opened(0, &name, reader);
                local.standby_lag(0, &name, 0);
            }
        } else {
            local.opened(0, readers, Positions::new(), BTreeMap::new());
        }
        (local, vec![default, s])
    }

    fn handle(clock: TtlClock) -> StoreHandle<String, String> {
        StoreHandle::new("s", crate::serdes::StringSerde, crate::serdes::StringSerde)
            .with_ttl(std::time::Duration::from_secs(60), clock)
            .expect("ttl")
    }

    fn served(local: &Arc<LocalStores>, clock: TtlClock) -> Vec<String> {
        let store = ReadOnlyKeyValueStore::new(local.clone(), &handle(clock)).with_standbys(0);
        let mut keys: Vec<String> = store
            .all()
            .expect("all")
            .value
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        keys.sort();
        for k in ["gone", "kept", "forever"] {
            let got = store.get(&k.to_string()).expect("get").value;
            assert_eq!(
                got.is_some(),
                keys.contains(&k.to_string()),
                "{k}: get and all agree"
            );
        }
        keys
    }

    // docs/ttl.md: "an expired value is not seen" — a query neither, swept or not.
    #[test]
    fn a_key_past_its_ttl_is_not_served_before_the_sweep_deletes_it() {
        // Wall clock: "gone" was due at 100 ms after the epoch.
        let (local, _stores) = ttl_store(TimerKind::WallClock, 0);
        assert_eq!(served(&local, TtlClock::WallClock), ["forever", "kept"]);
        // Event time: due at 100, the task's committed stream time 150 / 50.
        let (local, _stores) = ttl_store(TimerKind::EventTime, 150);
        assert_eq!(served(&local, TtlClock::EventTime), ["forever", "kept"]);
        let (local, _stores) = ttl_store(TimerKind::EventTime, 50);
        assert_eq!(
            served(&local, TtlClock::EventTime),
            ["forever", "gone", "kept"]
        );
        // A handle without a TTL reads what is stored.
        let plain: StoreHandle<String, String> =
            StoreHandle::new("s", crate::serdes::StringSerde, crate::serdes::StringSerde);
        let store = ReadOnlyKeyValueStore::new(local, &plain);
        assert_eq!(store.all().expect("all").value.len(), 3);
    }

    // Issue 49 item 7: a standby copy (here on an instance with no active task) answers by the
    // same clocks: its own committed stream time for an event-time TTL.
    #[test]
    fn a_key_past_its_ttl_is_not_served_by_a_standby_copy_either() {
        let (local, _stores) = ttl_copy(TimerKind::WallClock, 0, true);
        assert!(
            local.active().is_empty(),
            "no active task: only the copies answer"
        );
        assert_eq!(served(&local, TtlClock::WallClock), ["forever", "kept"]);
        let (local, _stores) = ttl_copy(TimerKind::EventTime, 150, true);
        assert_eq!(served(&local, TtlClock::EventTime), ["forever", "kept"]);
        let (local, _stores) = ttl_copy(TimerKind::EventTime, 50, true);
        assert_eq!(
            served(&local, TtlClock::EventTime),
            ["forever", "gone", "kept"]
        );
        let store =
            ReadOnlyKeyValueStore::new(local, &handle(TtlClock::EventTime)).with_standbys(0);
        let got = store.get(&"kept".to_string()).expect("get");
        assert_eq!(
            got.standby_lags,
            BTreeMap::from([(0, 0)]),
            "answered by the copy"
        );
    }

    #[test]
    fn the_library_reads_every_entry_in_key_order() {
        let (local, _stores) = two_partitions(2 * SCAN_CHUNK + 3);
        let all = (Bound::Unbounded, Bound::Unbounded);
        let budget = ScanBudget {
            limit: NO_LIMIT,
            deadline: None,
        };
        let q = scan_local(&local, "s", &all, budget, None, None).expect("scan");
        let want: Vec<String> = (0..2 * SCAN_CHUNK + 3)
            .map(|i| format!("k{i:03}"))
            .collect();
        assert_eq!(keys(&q), want);
        assert!(!q.value.more);
    }
}
