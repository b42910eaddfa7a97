//! The windowed store: a named store whose entries are (key, window) → value, laid out so that
//! RocksDB keeps one key's windows together in time order, with a time index for retention.
//!
//! Inside the named store's state (so it has its own changelog like any named store):
//!
//! - `w · key length (4 bytes, big-endian) · key · start (8 bytes, sign-flipped big-endian)` →
//!   `end (8 bytes, big-endian) · value`: a key's windows are contiguous and sorted by start,
//!   so [`WindowStore::fetch_range`] is one range scan.
//! - `x · end (sign-flipped) · key length · key · start` → empty: the windows in end order, so
//!   [`WindowStore::expire`] deletes what retention lets go with one bounded scan from where
//!   the last one stopped (`m` + `expired`, the end it reached), never a full scan.
//! - Session windows only: `e · key length · key · end (sign-flipped) · start (sign-flipped)` →
//!   empty: a key's sessions in end order, so the sessions a record can merge with (end at or
//!   after `t - gap`, start at or before `t + gap`) are one bounded scan, never every retained
//!   session of the key.
//! - Sliding windows only: `t · key length · key · start (sign-flipped)` → the latest event
//!   time of the records in the window (8 bytes, big-endian): Kafka Streams' `ValueAndTimestamp`
//!   timestamp, which decides whether a record's neighbours need new windows. Kept beside the
//!   data row rather than in it, so the data rows of every kind of window read the same.

use std::ops::Bound;

use super::Window;
use crate::processor::stores::{value_error, StoreView};
use crate::processor::StoreHandle;
use crate::record::ProcessError;
use crate::serdes::Serde;
use crate::state::merge::prefix_bounds;
use crate::state::Column;
use crate::topology::NodeContext;

/// The name and serdes of a windowed store: what a node opens it with
/// ([`crate::topology::ProcessorContext::window_store`]) and what the builder attaches to nodes
/// ([`crate::topology::TopologyBuilder::add_window_store`]). Cheap to clone.
///
/// ```
/// use eosflow::serdes::{I64Serde, StringSerde};
/// use eosflow::topology::windows::WindowStoreHandle;
///
/// let counts: WindowStoreHandle<String, i64> =
///     WindowStoreHandle::new("counts-per-minute", StringSerde, I64Serde);
/// assert_eq!(counts.name(), "counts-per-minute");
/// ```
pub struct WindowStoreHandle<K, V>(StoreHandle<K, V>);

impl<K, V> Clone for WindowStoreHandle<K, V> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K, V> std::fmt::Debug for WindowStoreHandle<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("WindowStoreHandle")
            .field(&self.0.name())
            .finish()
    }
}

impl<K, V> WindowStoreHandle<K, V> {
    /// A windowed store called `name` (changelog `<app>-<name>-changelog`) with these serdes.
    pub fn new(
        name: impl Into<String>,
        keys: impl Serde<K> + 'static,
        values: impl Serde<V> + 'static,
    ) -> Self {
        Self(StoreHandle::new(name, keys, values))
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// The key serde (how the store orders a key's windows).
    pub fn key_serde(&self) -> &dyn Serde<K> {
        self.0.key_serde()
    }

    pub(crate) fn value_serde(&self) -> &dyn Serde<V> {
        self.0.value_serde()
    }

    /// The named store underneath (its name and serdes).
    pub(crate) fn store_handle(&self) -> &StoreHandle<K, V> {
        &self.0
    }
}

const DATA: u8 = b'w';
const INDEX: u8 = b'x';
const WATERMARK: &[u8] = b"mexpired";
const SESSIONS: u8 = b'e';
const LATEST: u8 = b't';

/// What else goes when a window expires: the index entry its kind keeps beside the data row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beside {
    /// Nothing (fixed windows).
    Nothing,
    /// The session index entry.
    Session,
    /// The sliding window's latest record time.
    Latest,
}

/// The key of a sliding window's latest record time.
fn latest_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = key_prefix(LATEST, key);
    k.extend_from_slice(&flip(start));
    k
}

/// The session index key of `key`'s session `window`.
fn session_key(key: &[u8], window: Window) -> Vec<u8> {
    let mut k = key_prefix(SESSIONS, key);
    k.extend_from_slice(&flip(window.end));
    k.extend_from_slice(&flip(window.start));
    k
}

/// `t` as 8 bytes that sort like the number.
fn flip(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn unflip(b: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// `tag · key length · key`: the prefix of a key's windows (with room for the 8-byte times
/// the data, sliding and session keys append, so they never grow it again).
fn key_prefix(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(21 + key.len());
    k.push(tag);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The data key of `key`'s window starting at `start`.
pub(crate) fn data_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = key_prefix(DATA, key);
    k.extend_from_slice(&flip(start));
    k
}

/// The index key of a window: `x · end · key length · key · start`, built in one allocation.
fn index_key(key: &[u8], window: Window) -> Vec<u8> {
    let mut k = Vec::with_capacity(21 + key.len());
    k.push(INDEX);
    k.extend_from_slice(&flip(window.end));
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&flip(window.start));
    k
}

/// The key bytes and start of a data key.
pub(crate) fn parse_data_key(k: &[u8]) -> Option<(&[u8], i64)> {
    let (&DATA, rest) = k.split_first()? else {
        return None;
    };
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let key = rest.get(4..4 + len)?;
    let start = unflip(rest.get(4 + len..)?)?;
    Some((key, start))
}

/// The key bytes and window of an index key.
fn parse_index_key(k: &[u8]) -> Option<(&[u8], Window)> {
    let (&INDEX, rest) = k.split_first()? else {
        return None;
    };
    let end = unflip(rest.get(..8)?)?;
    let mut data = vec![DATA];
    data.extend_from_slice(rest.get(8..)?);
    let (_, start) = parse_data_key(&data)?;
    let len = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
    Some((rest.get(12..12 + len)?, Window { start, end }))
}

/// A stored value's window end and value bytes.
pub(crate) fn split_value(v: &[u8]) -> Option<(i64, &[u8])> {
    let end = i64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    Some((end, v.get(8..)?))
}

fn corrupt(store: &str) -> ProcessError {
    ProcessError::permanent(format!("window store {store}: an entry is not a window"))
}

/// Typed access to one windowed store during a node call (Kafka Streams' `WindowStore`):
/// writes commit with the record's offset, or not at all; reads see this call's and the
/// batch's writes over the committed store.
pub struct WindowStore<'c, 'a, K, V> {
    view: &'c mut StoreView<'a>,
    handle: &'c WindowStoreHandle<K, V>,
}

impl<'n, 'a> NodeContext<'n, 'a> {
    /// Opens a windowed store attached to this node
    /// ([`crate::topology::TopologyBuilder::add_window_store`]).
    pub(crate) fn window_store<'c, K, V>(
        &'c mut self,
        handle: &'c WindowStoreHandle<K, V>,
    ) -> Result<WindowStore<'c, 'a, K, V>, ProcessError> {
        let name = handle.name();
        let attached = self.stores.iter().any(|s| s == name);
        let node = self.node;
        match self.inner.named_view(name) {
            Some(view) if attached => Ok(WindowStore { view, handle }),
            _ => Err(ProcessError::permanent(format!(
                "window store {name} is not attached to node {node}"
            ))),
        }
    }
}

impl<'c, 'a, K, V> WindowStore<'c, 'a, K, V> {
    /// The store `handle` names over `view` (the test driver's committed view).
    pub(crate) fn new(view: &'c mut StoreView<'a>, handle: &'c WindowStoreHandle<K, V>) -> Self {
        Self { view, handle }
    }

    fn key_bytes(&self, key: &K) -> Result<Vec<u8>, ProcessError> {
        self.handle
            .key_serde()
            .serialize(key)
            .map_err(|e| value_error(self.handle.name(), "key", e))
    }

    fn value_of(&self, bytes: &[u8]) -> Result<V, ProcessError> {
        self.handle
            .value_serde()
            .deserialize(bytes)
            .map_err(|e| value_error(self.handle.name(), "value", e))
    }

    /// The value of `key`'s window starting at `start`.
    pub fn fetch(&self, key: &K, start: i64) -> Result<Option<V>, ProcessError> {
        let k = data_key(&self.key_bytes(key)?, start);
        Ok(self.fetch_raw(&k)?.map(|(_, v)| v))
    }

    /// The window and value under a data key (`None` when absent).
    pub(crate) fn fetch_raw(&self, data: &[u8]) -> Result<Option<(Window, V)>, ProcessError> {
        let Some(bytes) = self.view.get(data)? else {
            return Ok(None);
        };
        let (_, start) = parse_data_key(data).ok_or_else(|| corrupt(self.handle.name()))?;
        let (end, v) = split_value(&bytes).ok_or_else(|| corrupt(self.handle.name()))?;
        Ok(Some((Window { start, end }, self.value_of(v)?)))
    }

    /// `key`'s windows whose start lies in `from..=to`, in start order.
    pub fn fetch_range(
        &self,
        key: &K,
        from: i64,
        to: i64,
    ) -> Result<Vec<(Window, V)>, ProcessError> {
        let k = self.key_bytes(key)?;
        let bounds = (
            Bound::Included(data_key(&k, from)),
            Bound::Included(data_key(&k, to)),
        );
        let mut out = Vec::new();
        for item in self.view.scan(&bounds)? {
            let (dk, bytes) = item.map_err(crate::processor::stores::read_error)?;
            let name = self.handle.name();
            let (_, start) = parse_data_key(&dk).ok_or_else(|| corrupt(name))?;
            let (end, v) = split_value(&bytes).ok_or_else(|| corrupt(name))?;
            out.push((Window { start, end }, self.value_of(v)?));
        }
        Ok(out)
    }

    /// `key`'s sessions that end at or after `from_end` and start at or before `to_start`, in
    /// time order: one scan of the key's session index from `from_end`, which stops at the
    /// first session starting after `to_start` (a key's sessions never overlap, so every later
    /// one does too). Only sessions written with [`Self::put_session`] are indexed.
    pub(crate) fn sessions_near(
        &self,
        k: &[u8],
        from_end: i64,
        to_start: i64,
    ) -> Result<Vec<(Window, V)>, ProcessError> {
        let prefix = key_prefix(SESSIONS, k);
        let mut lower = prefix.clone();
        lower.extend_from_slice(&flip(from_end));
        let bounds = (Bound::Included(lower), prefix_bounds(&prefix).1);
        let name = self.handle.name();
        let mut near = Vec::new();
        for item in self.view.scan(&bounds)? {
            let (ik, _) = item.map_err(crate::processor::stores::read_error)?;
            let times = ik.get(prefix.len()..).ok_or_else(|| corrupt(name))?;
            let (end, start) = match (
                times.get(..8).and_then(unflip),
                times.get(8..).and_then(unflip),
            ) {
                (Some(end), Some(start)) => (end, start),
                _ => return Err(corrupt(name)),
            };
            if start > to_start {
                break;
            }
            let w = Window { start, end };
            // The data row is the truth; an index entry without it (or with another end) is
            // skipped.
            if let Some((found, v)) = self.fetch_raw(&data_key(k, start))? {
                if found == w {
                    near.push((w, v));
                }
            }
        }
        near.sort_by_key(|(w, _)| w.start);
        Ok(near)
    }

    /// `key`'s sliding windows whose start lies in `from..=to`, in start order, each with the
    /// time of its latest record (written by [`Self::put_sliding`]).
    pub(crate) fn sliding_range(
        &self,
        k: &[u8],
        from: i64,
        to: i64,
    ) -> Result<Vec<(Window, V, i64)>, ProcessError> {
        let bounds = (
            Bound::Included(data_key(k, from)),
            Bound::Included(data_key(k, to)),
        );
        let name = self.handle.name();
        let mut rows = Vec::new();
        for item in self.view.scan(&bounds)? {
            let (dk, bytes) = item.map_err(crate::processor::stores::read_error)?;
            let (_, start) = parse_data_key(&dk).ok_or_else(|| corrupt(name))?;
            let (end, v) = split_value(&bytes).ok_or_else(|| corrupt(name))?;
            rows.push((Window { start, end }, self.value_of(v)?));
        }
        let mut out = Vec::with_capacity(rows.len());
        for (w, v) in rows {
            let latest = self
                .view
                .get(&latest_key(k, w.start))?
                .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                .map(i64::from_be_bytes)
                .ok_or_else(|| {
                    ProcessError::permanent(format!(
                        "window store {name}: the sliding window {}-{} has no latest record time",
                        w.start, w.end
                    ))
                })?;
            out.push((w, v, latest));
        }
        Ok(out)
    }

    /// Writes `key`'s sliding `window` (`previous_end` as in [`Self::put_read`]) and the time
    /// of its latest record.
    pub(crate) fn put_sliding(
        &mut self,
        k: &[u8],
        window: Window,
        previous_end: Option<i64>,
        (value, latest): (&V, i64),
    ) -> Result<(), ProcessError> {
        self.view.pending.put(
            Column::State,
            &latest_key(k, window.start),
            latest.to_be_bytes().to_vec(),
        );
        self.put_read(k, window, previous_end, value)
    }

    /// [`Self::remove_read`] of a sliding window: its latest record time goes too.
    pub(crate) fn remove_sliding(
        &mut self,
        data: &[u8],
        window: Window,
    ) -> Result<(), ProcessError> {
        let (key, _) = parse_data_key(data).ok_or_else(|| corrupt(self.handle.name()))?;
        let latest = latest_key(key, window.start);
        self.view.pending.delete(Column::State, &latest);
        self.remove_read(data, window)
    }

    /// Writes `key`'s session `window` and indexes it by end ([`Self::sessions_near`]),
    /// replacing the session with the same start.
    pub(crate) fn put_session(
        &mut self,
        k: &[u8],
        window: Window,
        value: &V,
    ) -> Result<(), ProcessError> {
        let dk = data_key(k, window.start);
        let previous_end = self
            .view
            .get(&dk)?
            .and_then(|b| split_value(&b).map(|(end, _)| end));
        if previous_end != Some(window.end) {
            if let Some(end) = previous_end {
                let old = Window { end, ..window };
                self.view
                    .pending
                    .delete(Column::State, &session_key(k, old));
            }
            self.view
                .pending
                .put(Column::State, &session_key(k, window), Vec::new());
        }
        self.put_read(k, window, previous_end, value)
    }

    /// Deletes `key`'s session `window` with its index entries.
    pub(crate) fn remove_session(&mut self, k: &[u8], window: Window) -> Result<(), ProcessError> {
        self.view
            .pending
            .delete(Column::State, &session_key(k, window));
        self.remove_read(&data_key(k, window.start), window)
    }

    /// Writes `key`'s `window` (replacing the one with the same start, whatever its end).
    pub fn put(&mut self, key: &K, window: Window, value: &V) -> Result<(), ProcessError> {
        let k = self.key_bytes(key)?;
        let dk = data_key(&k, window.start);
        let previous_end = self
            .view
            .get(&dk)?
            .and_then(|b| split_value(&b).map(|(end, _)| end));
        self.put_read(&k, window, previous_end, value)
    }

    /// [`Self::put`] for a caller that has just read the window under the same start
    /// ([`Self::fetch_raw`]): `previous_end` is its end, `None` when there was none. Saves the
    /// store read `put` makes to find it (the aggregate node reads every window it updates).
    pub(crate) fn put_read(
        &mut self,
        k: &[u8],
        window: Window,
        previous_end: Option<i64>,
        value: &V,
    ) -> Result<(), ProcessError> {
        let dk = data_key(k, window.start);
        self.put_read_at(k, &dk, window, previous_end, value)
    }

    /// [`Self::put_read`] for a caller that already holds the window's data key `dk`
    /// (`data_key(k, window.start)`): it is not built again.
    pub(crate) fn put_read_at(
        &mut self,
        k: &[u8],
        dk: &[u8],
        window: Window,
        previous_end: Option<i64>,
        value: &V,
    ) -> Result<(), ProcessError> {
        if previous_end != Some(window.end) {
            if let Some(end) = previous_end {
                let old = Window { end, ..window };
                self.view.pending.delete(Column::State, &index_key(k, old));
            }
            self.view
                .pending
                .put(Column::State, &index_key(k, window), Vec::new());
        }
        let v = self
            .handle
            .value_serde()
            .serialize(value)
            .map_err(|e| value_error(self.handle.name(), "value", e))?;
        let mut bytes = Vec::with_capacity(8 + v.len());
        bytes.extend_from_slice(&window.end.to_be_bytes());
        bytes.extend_from_slice(&v);
        self.view.pending.put(Column::State, dk, bytes);
        Ok(())
    }

    /// Deletes `key`'s window starting at `start`; whether there was one.
    pub fn remove(&mut self, key: &K, start: i64) -> Result<bool, ProcessError> {
        let k = self.key_bytes(key)?;
        self.remove_raw(&data_key(&k, start))
    }

    /// Deletes the window under a data key (and its index entry); whether there was one.
    pub(crate) fn remove_raw(&mut self, data: &[u8]) -> Result<bool, ProcessError> {
        let Some(bytes) = self.view.get(data)? else {
            return Ok(false);
        };
        let name = self.handle.name();
        let (_, start) = parse_data_key(data).ok_or_else(|| corrupt(name))?;
        let (end, _) = split_value(&bytes).ok_or_else(|| corrupt(name))?;
        self.remove_read(data, Window { start, end })?;
        Ok(true)
    }

    /// [`Self::remove_raw`] for a caller that has just read the window under `data`
    /// ([`Self::fetch_raw`]): no second read to find its end.
    pub(crate) fn remove_read(&mut self, data: &[u8], window: Window) -> Result<(), ProcessError> {
        let (key, _) = parse_data_key(data).ok_or_else(|| corrupt(self.handle.name()))?;
        let index = index_key(key, window);
        self.view.pending.delete(Column::State, &index);
        self.view.pending.delete(Column::State, data);
        Ok(())
    }

    /// Deletes the window under a data key and its index entry without decoding its value
    /// (what a close timer that cannot read its window cleans up); an entry too corrupt to
    /// name its end loses its data row only.
    pub(crate) fn discard_raw(&mut self, data: &[u8]) -> Result<(), ProcessError> {
        let end = self
            .view
            .get(data)?
            .and_then(|b| split_value(&b).map(|(end, _)| end));
        if let (Some(end), Some((key, start))) = (end, parse_data_key(data)) {
            let w = Window { start, end };
            self.view.pending.delete(Column::State, &index_key(key, w));
            self.view
                .pending
                .delete(Column::State, &session_key(key, w));
        }
        if let Some((key, start)) = parse_data_key(data) {
            self.view
                .pending
                .delete(Column::State, &latest_key(key, start));
        }
        self.view.pending.delete(Column::State, data);
        Ok(())
    }

    /// Retention: deletes the windows whose end is before `cutoff`, earliest end first, at
    /// most `max` of them (the rest go on the next call); how many went. Each call starts
    /// where the last one stopped: the work is bounded by what expires, never by the store's
    /// size.
    pub fn expire(&mut self, cutoff: i64, max: usize) -> Result<usize, ProcessError> {
        self.expire_with(cutoff, max, Beside::Nothing)
    }

    /// [`Self::expire`] of a session or sliding store: what each expired window keeps beside
    /// its data row (`beside`) goes too.
    pub(crate) fn expire_with(
        &mut self,
        cutoff: i64,
        max: usize,
        beside: Beside,
    ) -> Result<usize, ProcessError> {
        let from = match self.view.get(WATERMARK)? {
            Some(b) => unflip(&b).unwrap_or(i64::MIN),
            None => i64::MIN,
        };
        if from >= cutoff {
            return Ok(0);
        }
        let mut lower = vec![INDEX];
        lower.extend_from_slice(&flip(from));
        let mut upper = vec![INDEX];
        upper.extend_from_slice(&flip(cutoff));
        let bounds = (Bound::Included(lower), Bound::Excluded(upper));
        let mut expired = Vec::new();
        for item in self.view.scan(&bounds)?.take(max) {
            let (k, _) = item.map_err(crate::processor::stores::read_error)?;
            expired.push(k);
        }
        let mut reached = cutoff;
        for index in &expired {
            let (key, window) =
                parse_index_key(index).ok_or_else(|| corrupt(self.handle.name()))?;
            let data = data_key(key, window.start);
            self.view.pending.delete(Column::State, &data);
            self.view.pending.delete(Column::State, index);
            match beside {
                Beside::Nothing => {}
                Beside::Session => self
                    .view
                    .pending
                    .delete(Column::State, &session_key(key, window)),
                Beside::Latest => self
                    .view
                    .pending
                    .delete(Column::State, &latest_key(key, window.start)),
            }
            reached = window.end;
        }
        if expired.len() < max {
            reached = cutoff;
        }
        if !expired.is_empty() {
            self.view
                .pending
                .put(Column::State, WATERMARK, flip(reached).to_vec());
        }
        Ok(expired.len())
    }

    /// Every window of the store (any key) and its value, in key then start order: for tests
    /// and tools (it reads them all).
    pub fn all(&self) -> Result<Vec<(K, Window, V)>, ProcessError> {
        let mut out = Vec::new();
        for item in self.view.scan(&prefix_bounds(&[DATA]))? {
            let (dk, bytes) = item.map_err(crate::processor::stores::read_error)?;
            let name = self.handle.name();
            let (key, start) = parse_data_key(&dk).ok_or_else(|| corrupt(name))?;
            let (end, v) = split_value(&bytes).ok_or_else(|| corrupt(name))?;
            let key = self
                .handle
                .key_serde()
                .deserialize(key)
                .map_err(|e| value_error(name, "key", e))?;
            out.push((key, Window { start, end }, self.value_of(v)?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_keys_sort_by_key_then_start_including_negative_starts() {
        let mut keys = [
            data_key(b"b", -5),
            data_key(b"a", 10),
            data_key(b"a", -3),
            data_key(b"ab", i64::MIN),
            data_key(b"a", 2),
        ];
        keys.sort();
        let parsed: Vec<(Vec<u8>, i64)> = keys
            .iter()
            .filter_map(|k| parse_data_key(k).map(|(k, s)| (k.to_vec(), s)))
            .collect();
        assert_eq!(
            parsed,
            vec![
                (b"a".to_vec(), -3),
                (b"a".to_vec(), 2),
                (b"a".to_vec(), 10),
                (b"b".to_vec(), -5),
                (b"ab".to_vec(), i64::MIN),
            ],
            "length-prefixed: a key's windows never interleave with a longer key's"
        );
        let w = Window { start: -7, end: 9 };
        let i = index_key(b"k\x00", w);
        assert_eq!(parse_index_key(&i), Some((b"k\x00".as_slice(), w)));
        assert!(index_key(b"z", Window { start: 0, end: -1 }) < i);
    }
}
