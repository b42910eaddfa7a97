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

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::record::ProcessError;
use crate::serdes::Serde;
use crate::state::merge::{prefix_bounds, KeyBounds, Layer, Merged};
use crate::state::{Column, Overlay, StateError, Store};

/// The name and serdes of one named store: what a handler opens it with. Cheap to clone.
pub struct StoreHandle<K, V> {
    name: Arc<str>,
    keys: Arc<dyn Serde<K>>,
    values: Arc<dyn Serde<V>>,
}

impl<K, V> Clone for StoreHandle<K, V> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            keys: self.keys.clone(),
            values: self.values.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for StoreHandle<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandle")
            .field("name", &self.name)
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
        }
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
}

impl<'a> StoreView<'a> {
    pub(crate) fn new(name: &'a str, store: &'a Store, batch: &'a Overlay) -> Self {
        Self {
            name,
            store,
            batch,
            pending: Overlay::default(),
            read_only: false,
        }
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
            Some(bytes) => self
                .handle
                .values
                .deserialize(&bytes)
                .map(Some)
                .map_err(|e| {
                    ProcessError::permanent(format!("store {} value: {e}", self.handle.name))
                }),
        }
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

    /// Writes `key` (committed with the record's offset). Fails on a table's store.
    pub fn put(&mut self, key: &K, value: &V) -> Result<(), ProcessError> {
        self.writable()?;
        let k = self.key_bytes(key)?;
        let bytes = self.handle.values.serialize(value).map_err(|e| {
            ProcessError::permanent(format!("store {} value: {e}", self.handle.name))
        })?;
        self.view.pending.put(Column::State, &k, bytes);
        Ok(())
    }

    /// Deletes `key` (a changelog tombstone at commit). Fails on a table's store.
    pub fn delete(&mut self, key: &K) -> Result<(), ProcessError> {
        self.writable()?;
        let k = self.key_bytes(key)?;
        self.view.pending.delete(Column::State, &k);
        Ok(())
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
        Ok(Box::new(merged.map(move |item| {
            let (k, v) = item.map_err(read_error)?;
            let bad = |what: &str, e| {
                ProcessError::permanent(format!("store {} {what}: {e}", handle.name))
            };
            let key = handle.keys.deserialize(&k).map_err(|e| bad("key", e))?;
            let value = handle.values.deserialize(&v).map_err(|e| bad("value", e))?;
            Ok((key, value))
        })))
    }
}
