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
fn index_key(kind: TimerKind, name: &str, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + name.len() + key.len());
    k.push(kind.tag());
    k.push(name.len() as u8);
    k.extend_from_slice(name.as_bytes());
    k.extend_from_slice(key);
    k
}

/// The queue key: `kind · due · name length · name · key`.
fn queue_key(kind: TimerKind, due: i64, name: &str, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(10 + name.len() + key.len());
    k.push(kind.tag());
    k.extend_from_slice(&flip(due));
    k.push(name.len() as u8);
    k.extend_from_slice(name.as_bytes());
    k.extend_from_slice(key);
    k
}

/// The first queue key of `kind` due at `due` or later.
fn queue_start(kind: TimerKind, due: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(kind.tag());
    k.extend_from_slice(&flip(due));
    k
}

/// A timer back from its queue key and payload; `None` for a key that is not one.
fn parse(key: &[u8], payload: &[u8]) -> Option<Timer> {
    let (&tag, rest) = key.split_first()?;
    let kind = TimerKind::of_tag(tag)?;
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
    kind: TimerKind,
    name: &str,
    key: &[u8],
) -> Result<Option<i64>, ProcessError> {
    let k = index_key(kind, name, key);
    let v = layered_get(pending, batch, store, Column::TimerIndex, &k)?;
    Ok(v.as_deref().and_then(due_value))
}

impl Layers<'_> {
    /// Schedules `timer`, moving the one pending for its identity.
    pub(crate) fn schedule(&mut self, timer: &Timer) -> Result<(), ProcessError> {
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
        self.cancel(timer.kind, &timer.name, &timer.key)?;
        let q = queue_key(timer.kind, timer.due_ms, &timer.name, &timer.key);
        self.pending.put(Column::Timer, &q, timer.payload.clone());
        let i = index_key(timer.kind, &timer.name, &timer.key);
        self.pending
            .put(Column::TimerIndex, &i, flip(timer.due_ms).to_vec());
        Ok(())
    }

    /// Cancels the timer (kind, name, key); whether one was pending.
    pub(crate) fn cancel(
        &mut self,
        kind: TimerKind,
        name: &str,
        key: &[u8],
    ) -> Result<bool, ProcessError> {
        let layers = (&*self.pending, self.batch, self.store);
        let Some(due) = due(layers, kind, name, key)? else {
            return Ok(false);
        };
        self.pending
            .delete(Column::Timer, &queue_key(kind, due, name, key));
        self.pending
            .delete(Column::TimerIndex, &index_key(kind, name, key));
        Ok(true)
    }
}

/// The earliest due time among the timers of `kind` that `writes` schedule (a handler call's
/// writes, before they join the batch).
pub(crate) fn earliest_scheduled(writes: &Overlay, kind: TimerKind) -> Option<i64> {
    let bounds = prefix_bounds(&[kind.tag()]);
    writes
        .range(Column::Timer, &bounds)
        .find(|(_, v)| v.is_some())
        .and_then(|(k, _)| due_value(k.get(1..9)?))
}

/// The scan bounds of `kind`'s queue from `lower` up to timers due at `up_to` included.
pub(crate) fn due_bounds(kind: TimerKind, lower: Bound<Vec<u8>>, up_to: i64) -> KeyBounds {
    let upper = match up_to.checked_add(1) {
        Some(next) => Bound::Excluded(queue_start(kind, next)),
        None => prefix_bounds(&[kind.tag()]).1,
    };
    (lower, upper)
}

/// The lower bound of a scan of `kind`'s queue starting at due time `from`.
pub(crate) fn from_due(kind: TimerKind, from: i64) -> Bound<Vec<u8>> {
    Bound::Included(queue_start(kind, from))
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

/// Removes a timer that fires from the batch: its queue entry and its index entry.
pub(crate) fn remove(batch: &mut Overlay, queue: &[u8], timer: &Timer) {
    batch.delete(Column::Timer, queue);
    batch.delete(
        Column::TimerIndex,
        &index_key(timer.kind, &timer.name, &timer.key),
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
            queue_key(TimerKind::EventTime, 5, "", b"a"),
            queue_key(TimerKind::EventTime, -3, "", b"z"),
            queue_key(TimerKind::WallClock, i64::MIN, "", b"a"),
            queue_key(TimerKind::EventTime, 5, "", b"0"),
            queue_key(TimerKind::EventTime, i64::MAX, "n", b""),
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
            &queue_key(TimerKind::WallClock, 42, "node", b"k\x00y"),
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
        let (lower, upper) =
            due_bounds(TimerKind::EventTime, from_due(TimerKind::EventTime, 0), 10);
        let inside = queue_key(TimerKind::EventTime, 10, "zz", b"\xff\xff");
        let outside = queue_key(TimerKind::EventTime, 11, "", b"");
        assert!(crate::state::merge::above_lower(&inside, &lower));
        assert!(crate::state::merge::below_upper(&inside, &upper));
        assert!(!crate::state::merge::below_upper(&outside, &upper));
        let (_, all) = due_bounds(TimerKind::EventTime, Bound::Unbounded, i64::MAX);
        let wall = queue_key(TimerKind::WallClock, i64::MIN, "", b"");
        assert!(!crate::state::merge::below_upper(&wall, &all));
    }
}
