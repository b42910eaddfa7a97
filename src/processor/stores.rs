//! Named, typed key-value stores beside a processor's default store.
//!
//! A [`StoreHandle`] names a store and carries its key and value serdes; a processor (or a
//! topology node) lists the names it uses, and each gets its own RocksDB store per partition
//! and its own compacted changelog `<app>-<store>-changelog`, written in the batch's
//! transaction and applied to RocksDB only after it committed — the default store's rules.
//! During a call, [`crate::processor::Context::store`] gives a [`KeyValueStore`]: typed
//! `get`/`put`/`delete` and ordered `range`/`prefix` scans that merge the call's and the
//! batch's uncommitted writes with the committed store.
//!
//! A named store's changelog records are keyed like the default store's state (the byte `s`,
//! then the serialized key; see [`crate::state::Column::parse_changelog_key`]), so restore,
//! checkpoints and the stale-store rebuild are the default store's own code.
//!
//! ```
//! use eosflow::processor::StoreHandle;
//! use eosflow::serdes::{I64Serde, StringSerde};
//!
//! let totals: StoreHandle<String, i64> = StoreHandle::new("totals", StringSerde, I64Serde);
//! assert_eq!(totals.name(), "totals");
//! ```
//!
//! A handle may carry a time to live ([`StoreHandle::with_ttl`], docs/ttl.md): each write
//! through it (re)schedules the key's expiry in an *expiry index* kept in the store's own
//! timer columns — the durable timers' queue layout (`processor::timers`), one lane per clock
//! and sub-topology, name empty, the store key as the timer key — written through the same
//! overlays and sent to the store's own changelog, so a restored store and a standby hold the
//! same index as the active one. The runtime sweeps what is due (`processor::expiry`) and
//! deletes each expired key with a tombstone in the batch's transaction.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::time::Duration;

use super::timers::{self, Lane, Layers, Timer, TimerKind};
use crate::record::ProcessError;
use crate::serdes::{Serde, SerdeError};
use crate::state::merge::{prefix_bounds, KeyBounds, Layer, Merged};
use crate::state::versioned::Lookup;
use crate::state::{Column, Overlay, StateError, Store};

/// Which clock a store's time to live counts in ([`StoreHandle::with_ttl`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlClock {
    /// The stream time of the task that wrote the key (the largest event time it has seen):
    /// an entry expires once stream time passes its last write's stream time plus the TTL.
    /// Replays, backlogs and restarts expire exactly what the event times say; a partition
    /// that receives nothing does not move, so nothing of it expires.
    EventTime,
    /// The runtime's wall clock (the test driver's, in tests): an entry expires the TTL after
    /// its last write was processed, also on a partition that receives nothing — the runtime
    /// checks once per commit interval, like a wall-clock timer.
    WallClock,
}

impl TtlClock {
    /// The timer lane kind the expiry index uses for this clock.
    pub(crate) fn kind(self) -> TimerKind {
        match self {
            Self::EventTime => TimerKind::EventTime,
            Self::WallClock => TimerKind::WallClock,
        }
    }
}

/// The longest TTL a store accepts: a century. Longer is almost surely a unit mistake, and a
/// store that must keep its keys needs no TTL at all.
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Why [`StoreHandle::with_ttl`] refused a TTL: caught when the handle is built, naming the
/// store, rather than as a failing record later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    /// Shorter than one millisecond (the clocks' unit): every write would expire at once.
    #[error("store {store}: a TTL shorter than one millisecond would expire every write at once; leave the TTL out to keep the store's entries")]
    TooShort {
        /// The store.
        store: String,
    },
    /// Longer than [`MAX_TTL`].
    #[error("store {store}: a TTL of {ttl_ms} ms is longer than the longest supported ({max_ms} ms, a century); leave the TTL out to keep the store's entries")]
    TooLong {
        /// The store.
        store: String,
        /// The TTL asked for, in milliseconds.
        ttl_ms: u128,
        /// [`MAX_TTL`] in milliseconds.
        max_ms: u128,
    },
}

/// A store's time to live, as its handle carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl {
    /// Milliseconds, 1 ..= [`MAX_TTL`].
    pub(crate) ms: i64,
    /// The clock it counts in.
    pub(crate) clock: TtlClock,
}

/// The name and serdes of one named store: what a handler opens it with. Cheap to clone.
pub struct StoreHandle<K, V> {
    name: Arc<str>,
    keys: Arc<dyn Serde<K>>,
    values: Arc<dyn Serde<V>>,
    ttl: Option<Ttl>,
}

impl<K, V> Clone for StoreHandle<K, V> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            keys: self.keys.clone(),
            values: self.values.clone(),
            ttl: self.ttl,
        }
    }
}

impl<K, V> std::fmt::Debug for StoreHandle<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandle")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl<K, V> StoreHandle<K, V> {
    /// A store called `name` (its changelog is `<app>-<name>-changelog`) whose keys and values
    /// use these serdes.
    pub fn new(
        name: impl Into<String>,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
    ) -> Self {
        Self {
            name: Arc::from(name.into()),
            keys: Arc::new(keys),
            values: Arc::new(values),
            ttl: None,
        }
    }

    /// The same store whose entries expire `ttl` after their last write, counted in `clock`:
    /// for state that is only worth keeping while it is fresh (sessions, recent activity, a
    /// cache of a lookup) without a timer per key of your own. Every `put` through this handle
    /// moves the key's expiry to its clock's time plus `ttl` (saturating at the largest time:
    /// an event time near `i64::MAX` never overflows); `delete` removes it. Once due, the
    /// runtime deletes the key with a changelog tombstone in the batch's transaction, so the
    /// changelog, every restore and every standby agree; a batch expires at most
    /// [`crate::processor::MAX_EXPIRED_PER_BATCH`] entries per partition and the rest follow in
    /// the next batches. Reads through this handle never return an entry that is due, even
    /// before it is deleted. Open the store with this handle everywhere: a `put` through a
    /// handle without a TTL makes the key permanent again. See docs/ttl.md.
    ///
    /// The TTL counts in whole milliseconds (the clocks' unit; a fraction is dropped). Refused
    /// with a [`TtlError`] naming the store when `ttl` is shorter than a millisecond or longer
    /// than [`MAX_TTL`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::processor::{StoreHandle, TtlClock, TtlError};
    /// use eosflow::serdes::{I64Serde, StringSerde};
    ///
    /// // A session's last activity, forgotten after 30 minutes of event time without a write.
    /// let sessions: StoreHandle<String, i64> = StoreHandle::new("sessions", StringSerde, I64Serde)
    ///     .with_ttl(Duration::from_secs(30 * 60), TtlClock::EventTime)?;
    /// assert_eq!(sessions.ttl(), Some((Duration::from_secs(1800), TtlClock::EventTime)));
    ///
    /// let zero = StoreHandle::<String, i64>::new("cache", StringSerde, I64Serde)
    ///     .with_ttl(Duration::ZERO, TtlClock::WallClock);
    /// assert!(matches!(zero, Err(TtlError::TooShort { ref store }) if store == "cache"));
    /// # Ok::<(), TtlError>(())
    /// ```
    pub fn with_ttl(mut self, ttl: Duration, clock: TtlClock) -> Result<Self, TtlError> {
        let ms = ttl.as_millis();
        if ms == 0 {
            return Err(TtlError::TooShort {
                store: self.name.to_string(),
            });
        }
        if ttl > MAX_TTL {
            return Err(TtlError::TooLong {
                store: self.name.to_string(),
                ttl_ms: ms,
                max_ms: MAX_TTL.as_millis(),
            });
        }
        // At most a century of milliseconds: far inside i64.
        let ms = i64::try_from(ms).map_err(|_| TtlError::TooLong {
            store: self.name.to_string(),
            ttl_ms: ms,
            max_ms: MAX_TTL.as_millis(),
        })?;
        self.ttl = Some(Ttl { ms, clock });
        Ok(self)
    }

    /// The store's TTL and its clock, if it has one ([`Self::with_ttl`]).
    pub fn ttl(&self) -> Option<(Duration, TtlClock)> {
        self.ttl
            .map(|t| (Duration::from_millis(t.ms.unsigned_abs()), t.clock))
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key serde (to encode a key the way the store orders it).
    pub fn key_serde(&self) -> &dyn Serde<K> {
        &*self.keys
    }

    /// The value serde.
    pub fn value_serde(&self) -> &dyn Serde<V> {
        &*self.values
    }

    /// Both serdes, shared: for a node that stores its own value type built on this one's (a
    /// stream-stream join buffers lists of values).
    pub(crate) fn serde_arcs(&self) -> (Arc<dyn Serde<K>>, Arc<dyn Serde<V>>) {
        (self.keys.clone(), self.values.clone())
    }
}

/// One named store as one handler call sees it: the committed store, the open batch's writes
/// and the call's own.
pub(crate) struct StoreView<'a> {
    pub(crate) name: &'a str,
    store: &'a Store,
    batch: &'a Overlay,
    pub(crate) pending: Overlay,
    /// A table's store: only its topic's records write it.
    read_only: bool,
    /// A versioned table's history (ms): [`KeyValueStore::get_as_of`] reads it.
    history_ms: Option<i64>,
    /// The expiry index's clocks, `None` where the caller has none (the driver's reads of
    /// committed state): no expiry is then scheduled or filtered on read.
    expiry: Option<ExpiryClocks>,
}

/// What a view needs to keep a store's expiry index: the call's task and its clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpiryClocks {
    /// The sub-topology of the call's task: its lanes hold the entries it writes.
    pub(crate) sub: usize,
    /// The task's stream time (event-time TTL).
    pub(crate) stream_time_ms: Option<i64>,
    /// The batch's wall-clock time (wall-clock TTL).
    pub(crate) wall_clock_ms: i64,
    /// The committed store holds expiry entries: a write through a handle without a TTL must
    /// then clear the key's, so it is not deleted later.
    pub(crate) indexed: bool,
}

impl ExpiryClocks {
    fn now(&self, clock: TtlClock) -> Option<i64> {
        match clock {
            TtlClock::EventTime => self.stream_time_ms,
            TtlClock::WallClock => Some(self.wall_clock_ms),
        }
    }
}

impl<'a> StoreView<'a> {
    pub(crate) fn new(name: &'a str, store: &'a Store, batch: &'a Overlay) -> Self {
        Self {
            name,
            store,
            batch,
            pending: Overlay::default(),
            read_only: false,
            history_ms: None,
            expiry: None,
        }
    }

    /// Adds the clocks that keep the store's expiry index (see [`StoreHandle::with_ttl`]).
    pub(crate) fn expiring(mut self, clocks: ExpiryClocks) -> Self {
        self.expiry = Some(clocks);
        self
    }

    /// Marks the view as a versioned table's with this history (ms), if any.
    pub(crate) fn versioned(mut self, history_ms: Option<i64>) -> Self {
        self.history_ms = history_ms;
        self
    }

    /// Marks the view as a table's: `put` and `delete` fail.
    pub(crate) fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

impl StoreView<'_> {
    /// The newest value of `key` in the store's state: this call's, the batch's, the store's.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ProcessError> {
        layered_get(&self.pending, self.batch, self.store, Column::State, key)
    }

    /// The live entries within `bounds`, in key order, over the three layers.
    pub(crate) fn scan(&self, bounds: &KeyBounds) -> Result<Merged<'_>, ProcessError> {
        layered_scan(&self.pending, self.batch, self.store, Column::State, bounds)
    }

    /// Whether the store may hold an expiry entry for some key: committed ones, or written by
    /// the batch or this call.
    fn may_be_indexed(&self, clocks: &ExpiryClocks) -> bool {
        clocks.indexed
            || self.batch.column(Column::TimerIndex).next().is_some()
            || self.pending.column(Column::TimerIndex).next().is_some()
    }

    /// After a write of `key` (a put when `written`, else a delete): moves its expiry to now
    /// plus `ttl` in `ttl`'s clock, or clears it (a delete, a handle without a TTL, an
    /// event-time TTL before the task has a stream time). One index read per clock, and none
    /// for a store that never had a TTL.
    fn reindex(&mut self, key: &[u8], ttl: Option<Ttl>, written: bool) -> Result<(), ProcessError> {
        let Some(clocks) = self.expiry else {
            return Ok(());
        };
        if ttl.is_none() && !self.may_be_indexed(&clocks) {
            return Ok(());
        }
        let due = ttl
            .filter(|_| written)
            .and_then(|t| Some((t.clock.kind(), clocks.now(t.clock)?.saturating_add(t.ms))));
        let mut layers = Layers {
            pending: &mut self.pending,
            batch: self.batch,
            store: self.store,
        };
        for kind in TimerKind::ALL {
            // The lane a new entry goes to is cleared by `schedule` itself.
            if due.is_some_and(|(k, _)| k == kind) {
                continue;
            }
            layers.cancel(Lane::new(kind, clocks.sub), "", key)?;
        }
        if let Some((kind, due_ms)) = due {
            let entry = match kind {
                TimerKind::EventTime => Timer::event_time(key, due_ms),
                TimerKind::WallClock => Timer::wall_clock(key, due_ms),
            };
            layers.schedule(&entry, clocks.sub)?;
        }
        Ok(())
    }

    /// Whether `key`'s entry is due to expire by `ttl`'s clock (deleted by the next sweep,
    /// or already by this batch's): read through a handle with a TTL, it is not there.
    fn expired(&self, key: &[u8], ttl: Option<Ttl>) -> Result<bool, ProcessError> {
        let (Some(ttl), Some(clocks)) = (ttl, self.expiry) else {
            return Ok(false);
        };
        let Some(now) = clocks.now(ttl.clock) else {
            return Ok(false);
        };
        let lane = Lane::new(ttl.clock.kind(), clocks.sub);
        let due = timers::due((&self.pending, self.batch, self.store), lane, "", key)?;
        Ok(due.is_some_and(|d| d <= now))
    }
}

/// Reads the newest value of `key`: the call's writes, the batch's, then the committed store.
pub(crate) fn layered_get(
    pending: &Overlay,
    batch: &Overlay,
    store: &Store,
    col: Column,
    key: &[u8],
) -> Result<Option<Vec<u8>>, ProcessError> {
    if let Some(v) = pending.get(col, key) {
        return Ok(v.map(<[u8]>::to_vec));
    }
    if let Some(v) = batch.get(col, key) {
        return Ok(v.map(<[u8]>::to_vec));
    }
    store.get(col, key).map_err(read_error)
}

/// A store that cannot be read fails the record transiently (the batch is retried).
pub(crate) fn read_error(e: StateError) -> ProcessError {
    ProcessError::transient(format!("state read: {e}"))
}

/// A value of store `store` that cannot be read (`what`: `value`, `key`): transient when the
/// serde could not reach what it needs (the schema registry down: the record is retried
/// through its retry ladder and read once the registry answers), permanent otherwise (the
/// bytes or the schemas are wrong: the record is dead-lettered with the serde's reason).
pub(crate) fn value_error(store: &str, what: &str, e: SerdeError) -> ProcessError {
    let message = format!("store {store} {what}: {e}");
    if e.is_transient() {
        ProcessError::transient(message)
    } else {
        ProcessError::permanent(message)
    }
}

/// The merged, ordered scan of one column over three layers.
fn layered_scan<'s>(
    pending: &'s Overlay,
    batch: &'s Overlay,
    store: &'s Store,
    col: Column,
    bounds: &KeyBounds,
) -> Result<Merged<'s>, ProcessError> {
    let owned = |(k, v): (&[u8], Option<&[u8]>)| Ok((k.to_vec(), v.map(<[u8]>::to_vec)));
    let layers: Vec<Layer<'s>> = vec![
        Box::new(pending.range(col, bounds).map(owned)),
        Box::new(batch.range(col, bounds).map(owned)),
        Box::new(store.range(col, bounds).map_err(read_error)?),
    ];
    Ok(Merged::new(layers))
}

/// What a versioned table says of a key as of a time ([`KeyValueStore::get_as_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsOf<V> {
    /// The version valid at that time.
    Value {
        /// The row.
        value: V,
        /// The timestamp of the table record that set it: its validity starts there.
        valid_from: i64,
    },
    /// No row was valid at that time: the key was not set yet, or deleted by a tombstone.
    Absent,
    /// The time is older than the table's history cutoff: the versions valid then may have
    /// been pruned, so the table cannot say (Kafka Streams answers `null` here).
    BeyondHistory {
        /// The cutoff: the table's observed stream time less its history.
        cutoff: i64,
    },
}

impl<V> AsOf<V> {
    /// The row, if one is known to have been valid at that time (`None` also for
    /// [`AsOf::BeyondHistory`], as Kafka Streams' `get(key, asOfTimestamp)` answers).
    pub fn into_value(self) -> Option<V> {
        match self {
            AsOf::Value { value, .. } => Some(value),
            AsOf::Absent | AsOf::BeyondHistory { .. } => None,
        }
    }
}

/// Typed access to one named store during a handler call. Writes commit with the record's
/// offset, or not at all.
pub struct KeyValueStore<'c, 'a, K, V> {
    view: &'c mut StoreView<'a>,
    handle: &'c StoreHandle<K, V>,
}

/// Entries of a scan, in the order of their serialized keys.
pub type Entries<'c, K, V> = Box<dyn Iterator<Item = Result<(K, V), ProcessError>> + 'c>;

impl<'c, 'a, K, V> KeyValueStore<'c, 'a, K, V> {
    pub(crate) fn new(view: &'c mut StoreView<'a>, handle: &'c StoreHandle<K, V>) -> Self {
        Self { view, handle }
    }

    fn key_bytes(&self, key: &K) -> Result<Vec<u8>, ProcessError> {
        self.handle
            .keys
            .serialize(key)
            .map_err(|e| ProcessError::permanent(format!("store {} key: {e}", self.handle.name)))
    }

    /// The value of `key`, as this call, the batch and the committed store say (newest first).
    pub fn get(&self, key: &K) -> Result<Option<V>, ProcessError> {
        let k = self.key_bytes(key)?;
        let v = &*self.view;
        match layered_get(&v.pending, v.batch, v.store, Column::State, &k)? {
            None => Ok(None),
            Some(_) if v.expired(&k, self.handle.ttl)? => Ok(None),
            Some(bytes) => self
                .handle
                .values
                .deserialize(&bytes)
                .map(Some)
                .map_err(|e| value_error(&self.handle.name, "value", e)),
        }
    }

    /// When `key` expires (ms since the epoch, in the clock of this handle's TTL): the time of
    /// its last write through a handle with a TTL plus that TTL, saturating at `i64::MAX`.
    /// `None` without a TTL, for a key not written since it was deleted or last expired, or
    /// written through a handle without a TTL (it stays).
    pub fn expires_at(&self, key: &K) -> Result<Option<i64>, ProcessError> {
        let (Some(ttl), Some(clocks)) = (self.handle.ttl, self.view.expiry) else {
            return Ok(None);
        };
        let k = self.key_bytes(key)?;
        let v = &*self.view;
        let lane = Lane::new(ttl.clock.kind(), clocks.sub);
        timers::due((&v.pending, v.batch, v.store), lane, "", &k)
    }

    /// The value `key` had at `timestamp` in a versioned table
    /// ([`crate::topology::TableHandle::versioned`]): the version whose validity — from its
    /// timestamp to the next version's — holds `timestamp`, or [`AsOf::Absent`] when no row
    /// was valid then, or [`AsOf::BeyondHistory`] when `timestamp` is older than the table's
    /// history cutoff (its observed stream time less its history), where the versions valid
    /// then may be gone. Fails (permanent) on any other store: only a versioned table keeps
    /// versions.
    pub fn get_as_of(&self, key: &K, timestamp: i64) -> Result<AsOf<V>, ProcessError> {
        let Some(history_ms) = self.view.history_ms else {
            return Err(ProcessError::permanent(format!(
                "store {} is not a versioned table: it keeps no versions to read as of a time",
                self.handle.name
            )));
        };
        let k = self.key_bytes(key)?;
        let v = &*self.view;
        let layers = [&v.pending, v.batch];
        let found = crate::state::versioned::get_as_of(&layers, v.store, &k, timestamp, history_ms)
            .map_err(read_error)?;
        Ok(match found {
            Lookup::Found { value, timestamp } => AsOf::Value {
                value: self
                    .handle
                    .values
                    .deserialize(&value)
                    .map_err(|e| value_error(&self.handle.name, "value", e))?,
                valid_from: timestamp,
            },
            Lookup::Absent => AsOf::Absent,
            Lookup::TooOld { cutoff } => AsOf::BeyondHistory { cutoff },
        })
    }

    /// A write to a table's store fails: a table changes only through its topic, which is its
    /// changelog (a write here would never reach it and be lost on the next restore).
    fn writable(&self) -> Result<(), ProcessError> {
        if self.view.read_only {
            return Err(ProcessError::permanent(format!(
                "store {} is a table: it changes only through its topic",
                self.handle.name
            )));
        }
        Ok(())
    }

    /// Writes `key` (committed with the record's offset). Fails on a table's store. With a
    /// TTL ([`StoreHandle::with_ttl`]) the key expires the TTL after this write.
    pub fn put(&mut self, key: &K, value: &V) -> Result<(), ProcessError> {
        self.writable()?;
        let k = self.key_bytes(key)?;
        let bytes = self.handle.values.serialize(value).map_err(|e| {
            ProcessError::permanent(format!("store {} value: {e}", self.handle.name))
        })?;
        self.view.pending.put(Column::State, &k, bytes);
        self.view.reindex(&k, self.handle.ttl, true)
    }

    /// Deletes `key` (a changelog tombstone at commit), and its pending expiry. Fails on a
    /// table's store.
    pub fn delete(&mut self, key: &K) -> Result<(), ProcessError> {
        self.writable()?;
        let k = self.key_bytes(key)?;
        self.view.pending.delete(Column::State, &k);
        self.view.reindex(&k, self.handle.ttl, false)
    }

    /// Every live entry whose serialized key starts with `prefix`'s serialized bytes, in key
    /// order (with [`crate::serdes::StringSerde`]: every key starting with that text).
    pub fn prefix(&self, prefix: &K) -> Result<Entries<'_, K, V>, ProcessError> {
        let p = self.key_bytes(prefix)?;
        self.scan(prefix_bounds(&p))
    }

    /// Every live entry whose serialized key starts with `prefix`, in key order.
    pub fn prefix_bytes(&self, prefix: &[u8]) -> Result<Entries<'_, K, V>, ProcessError> {
        self.scan(prefix_bounds(prefix))
    }

    /// Every live entry whose key lies in `range` (compared as serialized bytes), in key order:
    /// `store.range(&from..&to)`, `store.range(&from..)`, `store.range(..)`.
    pub fn range<'r, R: RangeBounds<&'r K>>(
        &self,
        range: R,
    ) -> Result<Entries<'_, K, V>, ProcessError>
    where
        K: 'r,
    {
        let bound = |b: Bound<&&K>| -> Result<Bound<Vec<u8>>, ProcessError> {
            Ok(match b {
                Bound::Included(k) => Bound::Included(self.key_bytes(k)?),
                Bound::Excluded(k) => Bound::Excluded(self.key_bytes(k)?),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        let bounds = (bound(range.start_bound())?, bound(range.end_bound())?);
        self.scan(bounds)
    }

    /// Every live entry, in key order.
    pub fn all(&self) -> Result<Entries<'_, K, V>, ProcessError> {
        self.scan((Bound::Unbounded, Bound::Unbounded))
    }

    fn scan(&self, bounds: KeyBounds) -> Result<Entries<'_, K, V>, ProcessError> {
        let v = &*self.view;
        let merged = layered_scan(&v.pending, v.batch, v.store, Column::State, &bounds)?;
        let handle = self.handle;
        Ok(Box::new(merged.filter_map(move |item| {
            let decoded = (|| {
                let (k, bytes) = item.map_err(read_error)?;
                // One index read per entry, only through a handle with a TTL.
                if v.expired(&k, handle.ttl)? {
                    return Ok(None);
                }
                let bad = |what: &str, e| value_error(&handle.name, what, e);
                let key = handle.keys.deserialize(&k).map_err(|e| bad("key", e))?;
                let value = handle
                    .values
                    .deserialize(&bytes)
                    .map_err(|e| bad("value", e))?;
                Ok(Some((key, value)))
            })();
            decoded.transpose()
        })))
    }
}
