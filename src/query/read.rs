//! The typed read API: [`ReadOnlyKeyValueStore`] and [`ReadOnlyWindowStore`] over this
//! instance's open tasks, each answer [`Queried`] with the input offsets it reflects.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

use super::local::{Here, LocalStores, Positions};
use super::partitioner::partition_for;
use crate::processor::StoreHandle;
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
    /// RocksDB failed.
    #[error(transparent)]
    State(#[from] StateError),
}

/// An answer and what it reflects: the next input offset of each (topic, partition) whose
/// records are all in it (none after), so a client that wrote a record at offset `n` of
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

/// Upper bound on entries one multi-partition read collects per partition before it stops
/// (the HTTP endpoint sets its own `limit`).
const NO_LIMIT: usize = usize::MAX;

/// Read-only access to a key-value store of this instance (Kafka Streams'
/// `ReadOnlyKeyValueStore`), from any thread: committed state only. Cheap to clone.
pub struct ReadOnlyKeyValueStore<K, V> {
    local: Arc<LocalStores>,
    handle: StoreHandle<K, V>,
    standby: Option<i64>,
}

impl<K, V> Clone for ReadOnlyKeyValueStore<K, V> {
    fn clone(&self) -> Self {
        Self {
            local: self.local.clone(),
            handle: self.handle.clone(),
            standby: self.standby,
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

/// The partition of `key_bytes` among the instance's inputs.
pub(crate) fn partition_of(local: &LocalStores, key_bytes: &[u8]) -> Result<i32, QueryError> {
    let n = local.partitions().ok_or(QueryError::NotStarted)?;
    Ok(partition_for(key_bytes, n))
}

/// An entry as stored: partition, key bytes, value bytes.
pub(crate) type RawEntry = (i32, Vec<u8>, Vec<u8>);

/// Reads every active partition's entries within `bounds` (up to `limit` per partition, and
/// whether any had more), skipping tasks that close meanwhile.
pub(crate) fn scan_local(
    local: &LocalStores,
    name: &str,
    bounds: &KeyBounds,
    limit: usize,
    standby: Option<i64>,
) -> Result<Queried<(Vec<RawEntry>, bool)>, QueryError> {
    let mut out = Vec::new();
    let mut more = false;
    let mut partitions = Vec::new();
    let mut positions = Positions::new();
    let mut standby_lags = BTreeMap::new();
    let mut numbers: std::collections::BTreeSet<i32> = local.active().into_iter().collect();
    if let Some(max) = standby {
        numbers.extend(local.standby_partitions(name, max));
    }
    for p in numbers {
        match read_partition(local, name, p, standby, |r| Ok(r.scan(bounds, limit)?)) {
            Ok(read) => {
                let (entries, m) = read.value;
                more |= m;
                partitions.push(p);
                positions.extend(read.positions);
                if let Some(lag) = read.standby_lag {
                    standby_lags.insert(p, lag);
                }
                out.extend(entries.into_iter().map(|(k, v)| (p, k, v)));
            }
            // Closed between the listing and the read: its new owner answers for it.
            Err(QueryError::NotLocal { .. } | QueryError::Restoring { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if partitions.is_empty() && !local.active().is_empty() && !local.knows(name) {
        return Err(QueryError::UnknownStore {
            store: name.to_string(),
        });
    }
    Ok(Queried {
        value: (out, more),
        partitions,
        positions,
        standby_lags,
    })
}

/// `Some(p → lag)` for an answer read from a standby copy.
fn lags(p: i32, lag: Option<i64>) -> BTreeMap<i32, i64> {
    lag.map(|l| BTreeMap::from([(p, l)])).unwrap_or_default()
}

impl<K, V> ReadOnlyKeyValueStore<K, V> {
    pub(crate) fn new(local: Arc<LocalStores>, handle: &StoreHandle<K, V>) -> Self {
        Self {
            local,
            handle: handle.clone(),
            standby: None,
        }
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
        partition_of(&self.local, &self.key_bytes(key)?)
    }

    /// `key`'s committed value, from the partition that holds it; [`QueryError::NotLocal`]
    /// when another instance owns that partition, [`QueryError::Restoring`] while it restores
    /// here.
    pub fn get(&self, key: &K) -> Result<Queried<Option<V>>, QueryError> {
        let k = self.key_bytes(key)?;
        let p = partition_of(&self.local, &k)?;
        let read = read_partition(&self.local, self.handle.name(), p, self.standby, |r| {
            Ok(r.get(&k)?)
        })?;
        let value = read
            .value
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
        let q = scan_local(
            &self.local,
            self.handle.name(),
            &bounds,
            NO_LIMIT,
            self.standby,
        )?;
        let (entries, _) = q.value;
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
    /// partition open here, partition by partition in key order.
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
    _v: PhantomData<fn() -> V>,
}

impl<K, V> Clone for ReadOnlyWindowStore<K, V> {
    fn clone(&self) -> Self {
        Self {
            local: self.local.clone(),
            handle: self.handle.clone(),
            standby: self.standby,
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
        Self {
            local,
            handle: handle.clone(),
            standby: None,
            _v: PhantomData,
        }
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
        let p = partition_of(&self.local, &k)?;
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
