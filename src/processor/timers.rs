//! Durable timers: what a processor schedules to be called back at a time, in event time (when
//! the partition's stream time reaches it) or in wall-clock time (when the runtime's clock does).
//!
//! A timer is identified by its kind, a name and a key: scheduling the same identity again
//! moves it, cancelling removes it. Timers live in the partition's default store, in two
//! columns written through the batch overlay like any state — so they are changelogged in the
//! batch's transaction, survive `kill -9` and move with the partition:
//!
//! - [`Column::Timer`], the queue: `kind · due (sign-flipped, big-endian) · name length · name ·
//!   key` → payload. RocksDB keeps it in due order, so what is due is a scan from the start of a
//!   kind up to now: firing costs memory proportional to what is due, never to what is pending.
//! - [`Column::TimerIndex`], the reverse index: `kind · name length · name · key` → due, so a
//!   reschedule or cancel finds the queue entry with one read.
//!
//! The `kind` byte is the timer's *lane*: its kind and the sub-topology whose task scheduled
//! it (`e`/`w` for sub-topology 0, the layout of stores written before sub-topologies). An
//! event-time timer fires when the stream time of *its* task reaches it, never another
//! sub-topology's, and its callback runs in that task.
//!
//! ```
//! use eosflow::processor::{Timer, TimerKind};
//!
//! let t = Timer::event_time(b"order-7".to_vec(), 1_700_000_900_000)
//!     .named("payment-timeout")
//!     .with_payload(b"attempt=1".to_vec());
//! assert_eq!(t.kind, TimerKind::EventTime);
//! assert_eq!(t.kind.as_str(), "event-time");
//! assert_eq!(t.name, "payment-timeout");
//! ```

use std::ops::Bound;

use super::stores::layered_get;
use crate::record::ProcessError;
use crate::state::merge::{above_lower, prefix_bounds, KeyBounds, Layer, Merged};
use crate::state::{Column, Overlay, StateError, Store};

/// Which clock a timer waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerKind {
    /// Fires once the partition's stream time (the largest event time it has seen) reaches the
    /// due time, after the record that moved it there is processed.
    EventTime,
    /// Fires once the runtime's wall clock (the test driver's, in tests) reaches the due time,
    /// also on a partition that receives no record.
    WallClock,
}

impl TimerKind {
    /// Both kinds, event time first.
    pub const ALL: [TimerKind; 2] = [TimerKind::EventTime, TimerKind::WallClock];

    /// `event-time` or `wall-clock`, as in logs, metrics and dead-letter headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EventTime => "event-time",
            Self::WallClock => "wall-clock",
        }
    }

    /// The kind's slot in per-kind arrays.
    pub(crate) fn index(self) -> usize {
        match self {
            Self::EventTime => 0,
            Self::WallClock => 1,
        }
    }

    fn tag(self) -> u8 {
        match self {
            Self::EventTime => b'e',
            Self::WallClock => b'w',
        }
    }

    fn of_tag(tag: u8) -> Option<Self> {
        match tag {
            b'e' => Some(Self::EventTime),
            b'w' => Some(Self::WallClock),
            _ => None,
        }
    }
}

/// The most sub-topologies a topology may have: each has its own timer lanes, one tag byte.
pub(crate) const MAX_SUB_TOPOLOGIES: usize = 32;

/// A timer queue of one kind in one sub-topology's task: the first byte of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Lane {
    /// The clock it waits for.
    pub(crate) kind: TimerKind,
    /// The sub-topology whose task owns it.
    pub(crate) sub: usize,
}

impl Lane {
    /// The lane of `kind` in sub-topology `sub` (clamped to [`MAX_SUB_TOPOLOGIES`]; the
    /// topology builder refuses more).
    pub(crate) fn new(kind: TimerKind, sub: usize) -> Self {
        Self {
            kind,
            sub: sub.min(MAX_SUB_TOPOLOGIES - 1),
        }
    }

    /// Sub-topology 0 keeps the tags of stores written before sub-topologies (`e`, `w`);
    /// the others are `0xA0 + sub` (event time) and `0xC0 + sub` (wall clock).
    fn tag(self) -> u8 {
        match (self.kind, self.sub) {
            (kind, 0) => kind.tag(),
            (TimerKind::EventTime, s) => 0xA0 + s as u8,
            (TimerKind::WallClock, s) => 0xC0 + s as u8,
        }
    }

    fn of_tag(tag: u8) -> Option<Self> {
        if let Some(kind) = TimerKind::of_tag(tag) {
            return Some(Self { kind, sub: 0 });
        }
        let (kind, base) = match tag {
            0xA1..=0xBF => (TimerKind::EventTime, 0xA0),
            0xC1..=0xDF => (TimerKind::WallClock, 0xC0),
            _ => return None,
        };
        Some(Self {
            kind,
            sub: usize::from(tag - base),
        })
    }
}

/// The longest timer name, in bytes (it is stored with a one-byte length).
pub const MAX_NAME_BYTES: usize = 255;
/// The largest timer payload, in bytes: a timer carries a reminder, not a document (keep the
/// document in a store and the key in the timer).
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// One timer: when, which clock, and what to call back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// The clock it waits for.
    pub kind: TimerKind,
    /// When it is due (ms since the epoch, in its kind's clock).
    pub due_ms: i64,
    /// A name beside the key (a topology uses the node's name; a processor may use it to tell
    /// its timers apart). Empty by default.
    pub name: String,
    /// The key it belongs to: one timer per (kind, name, key).
    pub key: Vec<u8>,
    /// A small payload handed back when it fires (at most [`MAX_PAYLOAD_BYTES`]).
    pub payload: Vec<u8>,
}

impl Timer {
    /// An event-time timer for `key`, due when stream time reaches `due_ms`.
    pub fn event_time(key: impl Into<Vec<u8>>, due_ms: i64) -> Self {
        Self::new(TimerKind::EventTime, key.into(), due_ms)
    }

    /// A wall-clock timer for `key`, due when the wall clock reaches `due_ms`.
    pub fn wall_clock(key: impl Into<Vec<u8>>, due_ms: i64) -> Self {
        Self::new(TimerKind::WallClock, key.into(), due_ms)
    }

    fn new(kind: TimerKind, key: Vec<u8>, due_ms: i64) -> Self {
        Self {
            kind,
            due_ms,
            name: String::new(),
            key,
            payload: Vec::new(),
        }
    }

    /// The same timer under `name`.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The same timer carrying `payload`.
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }
}

/// `due` as 8 bytes that sort like the number (the sign bit flipped).
fn flip(due: i64) -> [u8; 8] {
    ((due as u64) ^ (1 << 63)).to_be_bytes()
}

fn unflip(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// The reverse index key of a timer identity: `kind · name length · name · key`.
fn index_key(lane: Lane, name: &str, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + name.len() + key.len());
    k.push(lane.tag());
    k.push(name.len() as u8);
    k.extend_from_slice(name.as_bytes());
    k.extend_from_slice(key);
    k
}

/// The queue key: `kind · due · name length · name · key`.
fn queue_key(lane: Lane, due: i64, name: &str, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(10 + name.len() + key.len());
    k.push(lane.tag());
    k.extend_from_slice(&flip(due));
    k.push(name.len() as u8);
    k.extend_from_slice(name.as_bytes());
    k.extend_from_slice(key);
    k
}

/// The first queue key of `kind` due at `due` or later.
fn queue_start(lane: Lane, due: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(lane.tag());
    k.extend_from_slice(&flip(due));
    k
}

/// A timer back from its queue key and payload; `None` for a key that is not one.
fn parse(key: &[u8], payload: &[u8]) -> Option<Timer> {
    let (&tag, rest) = key.split_first()?;
    let kind = Lane::of_tag(tag)?.kind;
    let due = unflip(rest.get(..8)?.try_into().ok()?);
    let (&len, rest) = rest.get(8..)?.split_first()?;
    let name = std::str::from_utf8(rest.get(..len as usize)?).ok()?;
    Some(Timer {
        kind,
        due_ms: due,
        name: name.to_string(),
        key: rest.get(len as usize..)?.to_vec(),
        payload: payload.to_vec(),
    })
}

fn due_value(bytes: &[u8]) -> Option<i64> {
    Some(unflip(bytes.try_into().ok()?))
}

/// The committed expiry of `key` in a store's expiry index (the TTL's lanes of `kind`, name
/// empty), as an interactive query reads it through `get` (a read of the store's committed
/// columns): the sub-topology whose lane holds it and its due time, or `None` when the key
/// does not expire. A store is written by one sub-topology; its lane is found by trying each.
pub(crate) fn committed_expiry(
    get: impl Fn(Column, &[u8]) -> Result<Option<Vec<u8>>, crate::state::StateError>,
    kind: TimerKind,
    key: &[u8],
) -> Result<Option<(usize, i64)>, crate::state::StateError> {
    for sub in 0..MAX_SUB_TOPOLOGIES {
        let k = index_key(Lane::new(kind, sub), "", key);
        if let Some(due) = get(Column::TimerIndex, &k)?.as_deref().and_then(due_value) {
            return Ok(Some((sub, due)));
        }
    }
    Ok(None)
}

/// The reverse-index entry (key, value) a write through a TTL handle leaves for `key` in
/// sub-topology `sub`'s lane of `kind`: what [`committed_expiry`] finds (for tests that build
/// a store by hand).
#[cfg(test)]
pub(crate) fn expiry_index_entry(
    kind: TimerKind,
    sub: usize,
    key: &[u8],
    due: i64,
) -> (Vec<u8>, Vec<u8>) {
    (index_key(Lane::new(kind, sub), "", key), flip(due).to_vec())
}

/// The layers a handler call sees: its own writes, the batch's, the committed store.
pub(crate) struct Layers<'l> {
    pub(crate) pending: &'l mut Overlay,
    pub(crate) batch: &'l Overlay,
    pub(crate) store: &'l Store,
}

/// When the timer (kind, name, key) is due, if one is pending: the call's writes, then the
/// batch's, then the committed store.
pub(crate) fn due(
    (pending, batch, store): (&Overlay, &Overlay, &Store),
    lane: Lane,
    name: &str,
    key: &[u8],
) -> Result<Option<i64>, ProcessError> {
    let k = index_key(lane, name, key);
    let v = layered_get(pending, batch, store, Column::TimerIndex, &k)?;
    Ok(v.as_deref().and_then(due_value))
}

impl Layers<'_> {
    /// Schedules `timer` in sub-topology `sub`'s lane, moving the one pending for its
    /// identity.
    pub(crate) fn schedule(&mut self, timer: &Timer, sub: usize) -> Result<(), ProcessError> {
        if timer.name.len() > MAX_NAME_BYTES {
            return Err(ProcessError::permanent(format!(
                "timer name {:?} is longer than {MAX_NAME_BYTES} bytes",
                timer.name
            )));
        }
        if timer.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(ProcessError::permanent(format!(
                "timer payload of {} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit: keep the data in a store and its key in the timer",
                timer.payload.len()
            )));
        }
        let lane = Lane::new(timer.kind, sub);
        self.cancel(lane, &timer.name, &timer.key)?;
        let q = queue_key(lane, timer.due_ms, &timer.name, &timer.key);
        self.pending.put(Column::Timer, &q, timer.payload.clone());
        let i = index_key(lane, &timer.name, &timer.key);
        self.pending
            .put(Column::TimerIndex, &i, flip(timer.due_ms).to_vec());
        Ok(())
    }

    /// Cancels the timer (lane, name, key); whether one was pending.
    pub(crate) fn cancel(
        &mut self,
        lane: Lane,
        name: &str,
        key: &[u8],
    ) -> Result<bool, ProcessError> {
        let layers = (&*self.pending, self.batch, self.store);
        let Some(due) = due(layers, lane, name, key)? else {
            return Ok(false);
        };
        self.pending
            .delete(Column::Timer, &queue_key(lane, due, name, key));
        self.pending
            .delete(Column::TimerIndex, &index_key(lane, name, key));
        Ok(true)
    }
}

/// The earliest due time among the timers of `lane` that `writes` schedule (a handler call's
/// writes, before they join the batch).
pub(crate) fn earliest_scheduled(writes: &Overlay, lane: Lane) -> Option<i64> {
    let bounds = prefix_bounds(&[lane.tag()]);
    writes
        .range(Column::Timer, &bounds)
        .find(|(_, v)| v.is_some())
        .and_then(|(k, _)| due_value(k.get(1..9)?))
}

/// The scan bounds of `lane`'s queue from `lower` up to timers due at `up_to` included.
pub(crate) fn due_bounds(lane: Lane, lower: Bound<Vec<u8>>, up_to: i64) -> KeyBounds {
    let upper = match up_to.checked_add(1) {
        Some(next) => Bound::Excluded(queue_start(lane, next)),
        None => prefix_bounds(&[lane.tag()]).1,
    };
    (lower, upper)
}

/// The lower bound of a scan of `lane`'s queue starting at due time `from`.
pub(crate) fn from_due(lane: Lane, from: i64) -> Bound<Vec<u8>> {
    Bound::Included(queue_start(lane, from))
}

/// The first pending timer within `bounds`, as the open batch sees it (its writes over the
/// committed store), with its queue key.
pub(crate) fn first(
    batch: &Overlay,
    store: &Store,
    bounds: &KeyBounds,
) -> Result<Option<(Vec<u8>, Timer)>, StateError> {
    let owned = |(k, v): (&[u8], Option<&[u8]>)| Ok((k.to_vec(), v.map(<[u8]>::to_vec)));
    let layers: Vec<Layer<'_>> = vec![
        Box::new(batch.range(Column::Timer, bounds).map(owned)),
        Box::new(store.range(Column::Timer, bounds)?),
    ];
    for item in Merged::new(layers) {
        let (k, v) = item?;
        match parse(&k, &v) {
            Some(t) => return Ok(Some((k, t))),
            None => tracing::warn!(key = ?k, "not a timer key in the timers column; skipped"),
        }
    }
    Ok(None)
}

/// Reads one kind's queue in due order through a firing round: the committed entries a chunk
/// at a time with one RocksDB iterator (the committed store does not change inside a batch),
/// merged at each step with the batch's writes, which the round's own firing changes.
#[derive(Default)]
pub(crate) struct QueueReader {
    /// Committed entries read ahead, in key order.
    chunk: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    /// The last committed key read.
    fetched_to: Option<Vec<u8>>,
    /// No committed entry lies past `fetched_to`.
    exhausted: bool,
    /// The lower bound of the previous step: a lower one starts the read-ahead again.
    previous: Option<(Vec<u8>, bool)>,
}

/// Committed entries read with one iterator.
const READ_AHEAD: usize = 256;

impl QueueReader {
    /// The first pending timer within `(lower, upper)` as the batch sees it, with its queue key.
    pub(crate) fn next(
        &mut self,
        batch: &Overlay,
        store: &Store,
        (lower, upper): &KeyBounds,
    ) -> Result<Option<(Vec<u8>, Timer)>, StateError> {
        let at = match lower {
            Bound::Included(k) => Some((k.clone(), false)),
            Bound::Excluded(k) => Some((k.clone(), true)),
            Bound::Unbounded => None,
        };
        if at < self.previous {
            *self = Self::default();
        }
        self.previous = at;
        let committed = loop {
            // A committed entry the batch wrote is the batch's to report (or deleted).
            while let Some((k, _)) = self.chunk.front() {
                if above_lower(k, lower) && batch.get(Column::Timer, k).is_none() {
                    break;
                }
                self.chunk.pop_front();
            }
            if !self.chunk.is_empty() || self.exhausted {
                break self.chunk.front().cloned();
            }
            let from = match &self.fetched_to {
                Some(k) if above_lower(k, lower) => Bound::Excluded(k.clone()),
                _ => lower.clone(),
            };
            let mut n = 0;
            for item in store
                .range(Column::Timer, &(from, upper.clone()))?
                .take(READ_AHEAD)
            {
                let (k, v) = item?;
                self.fetched_to = Some(k.clone());
                self.chunk.push_back((k, v.unwrap_or_default()));
                n += 1;
            }
            self.exhausted = n < READ_AHEAD;
        };
        let bounds = (lower.clone(), upper.clone());
        let written = batch
            .range(Column::Timer, &bounds)
            .find_map(|(k, v)| Some((k.to_vec(), v?.to_vec())));
        let head = match (committed, written) {
            (Some(c), Some(w)) => Some(if c.0 < w.0 { c } else { w }),
            (c, w) => c.or(w),
        };
        Ok(head.and_then(|(k, v)| {
            let t = parse(&k, &v);
            if t.is_none() {
                tracing::warn!(key = ?k, "not a timer key in the timers column; skipped");
            }
            Some((k, t?))
        }))
    }
}

/// Removes a timer of `lane` that fires from the batch: its queue entry and its index entry.
pub(crate) fn remove(batch: &mut Overlay, lane: Lane, queue: &[u8], timer: &Timer) {
    batch.delete(Column::Timer, queue);
    batch.delete(
        Column::TimerIndex,
        &index_key(lane, &timer.name, &timer.key),
    );
}

/// Every committed timer of `store`, in due order per kind (tests and tools; loads them all).
pub fn committed(store: &Store) -> Result<Vec<Timer>, StateError> {
    Ok(store
        .entries(Column::Timer)?
        .iter()
        .filter_map(|(k, v)| parse(k, v))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_sort_by_kind_then_due_including_negative_times() {
        let mut keys = [
            queue_key(Lane::new(TimerKind::EventTime, 0), 5, "", b"a"),
            queue_key(Lane::new(TimerKind::EventTime, 0), -3, "", b"z"),
            queue_key(Lane::new(TimerKind::WallClock, 0), i64::MIN, "", b"a"),
            queue_key(Lane::new(TimerKind::EventTime, 0), 5, "", b"0"),
            queue_key(Lane::new(TimerKind::EventTime, 0), i64::MAX, "n", b""),
        ];
        keys.sort();
        let dues: Vec<(TimerKind, i64)> = keys
            .iter()
            .map(|k| parse(k, b"").map(|t| (t.kind, t.due_ms)).expect("a timer"))
            .collect();
        assert_eq!(
            dues,
            vec![
                (TimerKind::EventTime, -3),
                (TimerKind::EventTime, 5),
                (TimerKind::EventTime, 5),
                (TimerKind::EventTime, i64::MAX),
                (TimerKind::WallClock, i64::MIN),
            ]
        );
        let t = parse(
            &queue_key(Lane::new(TimerKind::WallClock, 0), 42, "node", b"k\x00y"),
            b"p",
        )
        .expect("a timer");
        assert_eq!(
            t,
            Timer::wall_clock(b"k\x00y".to_vec(), 42)
                .named("node")
                .with_payload(b"p".to_vec())
        );
    }

    #[test]
    fn due_bounds_include_up_to_and_exclude_the_next_millisecond() {
        let (lower, upper) = due_bounds(
            Lane::new(TimerKind::EventTime, 0),
            from_due(Lane::new(TimerKind::EventTime, 0), 0),
            10,
        );
        let inside = queue_key(Lane::new(TimerKind::EventTime, 0), 10, "zz", b"\xff\xff");
        let outside = queue_key(Lane::new(TimerKind::EventTime, 0), 11, "", b"");
        assert!(crate::state::merge::above_lower(&inside, &lower));
        assert!(crate::state::merge::below_upper(&inside, &upper));
        assert!(!crate::state::merge::below_upper(&outside, &upper));
        let (_, all) = due_bounds(
            Lane::new(TimerKind::EventTime, 0),
            Bound::Unbounded,
            i64::MAX,
        );
        let wall = queue_key(Lane::new(TimerKind::WallClock, 0), i64::MIN, "", b"");
        assert!(!crate::state::merge::below_upper(&wall, &all));
    }

    #[test]
    fn each_sub_topology_has_lanes_of_its_own_and_sub_topology_zero_keeps_the_old_tags() {
        let old = queue_key(Lane::new(TimerKind::EventTime, 0), 7, "n", b"k");
        assert_eq!(
            old[0], b'e',
            "stores written before sub-topologies still read"
        );
        let mut keys: Vec<Vec<u8>> = (0..MAX_SUB_TOPOLOGIES)
            .flat_map(|s| TimerKind::ALL.map(|kind| queue_key(Lane::new(kind, s), 7, "n", b"k")))
            .collect();
        for k in &keys {
            let lane = Lane::of_tag(k[0]).expect("a lane");
            assert_eq!(queue_key(lane, 7, "n", b"k"), *k, "tag round trip");
            assert_eq!(parse(k, b"").map(|t| t.due_ms), Some(7));
        }
        keys.sort();
        keys.dedup_by(|a, b| a[0] == b[0]);
        assert_eq!(
            keys.len(),
            2 * MAX_SUB_TOPOLOGIES,
            "no two lanes share a tag"
        );
        // A lane's scan never reaches another lane's timers.
        let (_, upper) = due_bounds(
            Lane::new(TimerKind::EventTime, 1),
            Bound::Unbounded,
            i64::MAX,
        );
        let other = queue_key(Lane::new(TimerKind::EventTime, 2), i64::MIN, "", b"");
        assert!(!crate::state::merge::below_upper(&other, &upper));
    }
}
