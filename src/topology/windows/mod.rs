//! Event-time windows: tumbling, hopping, sliding and session windows over a keyed stream,
//! aggregated into a windowed store, with a grace period for out-of-order records, emitted on
//! every update or once when the window closes, and late records sent to the DLT — never
//! dropped. Kafka Streams' `windowedBy(TimeWindows…|SlidingWindows…|SessionWindows…)
//! .aggregate(…)` plus `suppress(untilWindowCloses)`, built on stream time and durable
//! event-time timers.
//!
//! - A **window** belongs to one key and covers `[start, end)` of event time (a sliding window
//!   `[start, end]` with `end = start + timeDifference`, see [`SlidingWindows`]; a session
//!   `[start, end]`: its first and last record).
//! - It is **open** while the partition's stream time is before its *close time*: `end + grace`
//!   (sliding windows, whose end is inclusive: `end + grace + 1`; sessions, whose end is
//!   inclusive too: `end + inactivity gap + grace + 1`, Kafka Streams' `end >= streamTime -
//!   gap - grace`). A record is aggregated into each of its windows
//!   that is open; one whose windows are all closed is **late**: it goes to the input's DLT
//!   (`eosflow.dlt.error.class: late-record`, the windows and stream time in headers) or to the
//!   node's late-record sink, and is counted in `eosflow_late_records_total{node}`.
//! - [`EmitStrategy::OnWindowUpdate`] forwards the window's aggregate after every record;
//!   [`EmitStrategy::OnWindowClose`] forwards it once, when stream time reaches its close time
//!   (a durable timer: exactly once across crashes and rebalances).
//! - **Retention**: a window is deleted from the store once stream time reaches its close time
//!   plus [`WindowedAggregate::retention`] (default 0: at close; sliding windows at least
//!   `2 · timeDifference`, which later records within grace read).
//! - Results are keyed by [`Windowed<K>`] (the key and its window; [`WindowedSerde`] writes
//!   `key bytes · start · end`, 8 big-endian bytes each) and carry the window's last
//!   millisecond as their timestamp (`end - 1`; a sliding window's or a session's `end`).
//!
//! ```
//! use std::time::Duration;
//! use eosflow::serdes::{I64Serde, StringSerde};
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//! use eosflow::topology::windows::{
//!     EmitStrategy, TimeWindows, WindowStoreHandle, Windowed, WindowedAggregate, WindowedSerde,
//! };
//! use eosflow::topology::Topology;
//!
//! // Clicks per user per minute, one final count per window, 10 s for stragglers.
//! let minute = TimeWindows::of_size_with_grace(Duration::from_secs(60), Duration::from_secs(10));
//! let store = WindowStoreHandle::new("clicks-per-minute", StringSerde, I64Serde);
//! let count = WindowedAggregate::time(store, minute, || 0, |_user, _click: &String, n: i64| n + 1)
//!     .emit(EmitStrategy::OnWindowClose);
//! let topology = Topology::builder()
//!     .add_source("clicks", &["clicks"], StringSerde, StringSerde)
//!     .add_windowed_aggregate("count", count, &["clicks"])
//!     .add_sink("out", "clicks-per-minute", WindowedSerde::new(StringSerde), I64Serde, &["count"])
//!     .build()?;
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! let click = |ms: i64| TestRecord::new("clicks", Some("ann"), Some("click")).timestamp(ms);
//! driver.pipe(click(1_000))?;
//! driver.pipe(click(59_000))?;
//! driver.pipe(click(65_000))?; // stream time 65 s: the first minute is still in its grace
//! driver.pipe(click(30_000))?; // out of order, within grace: counted
//! driver.pipe(click(70_000))?; // stream time 70 s: the first minute closes
//! driver.pipe(click(2_000))?; // too late: to clicks.DLT, not counted
//! let out = driver.read_output("clicks-per-minute", &WindowedSerde::new(StringSerde), &I64Serde)?;
//! let first = Windowed::new("ann".to_string(), 0, 60_000);
//! assert_eq!(out, vec![(Some(first), Some(3))]);
//! let dead = driver.read_raw_output("clicks.DLT");
//! assert_eq!(dead[0].dlt_class(), Some("late-record"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod aggregate;
#[cfg(test)]
mod aggregate_tests;
#[cfg(test)]
mod sliding_tests;
pub(crate) mod store;

pub use aggregate::{WindowedAggregate, EXPIRE_PER_CALL};
pub(crate) use store::{data_key, parse_data_key};
pub use store::{WindowStore, WindowStoreHandle};

use std::time::Duration;

use crate::serdes::{Serde, SerdeError};

/// One window of event time: `[start, end)` for time windows, `[start, end]` for sliding
/// windows and sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// Its first millisecond.
    pub start: i64,
    /// Time windows: the first millisecond after it. Sliding windows: its last millisecond,
    /// `start + timeDifference` (inclusive, the `end()` of Kafka Streams' sliding `Windowed`
    /// keys). Sessions: its last record's time.
    pub end: i64,
}

/// A result's key: the aggregated key and its window (Kafka Streams' `Windowed<K>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Windowed<K> {
    /// The key.
    pub key: K,
    /// The window.
    pub window: Window,
}

impl<K> Windowed<K> {
    /// `key` in the window from `start` to `end` (`end` excluded for time windows, included
    /// for sliding windows and sessions: see [`Window::end`]).
    pub fn new(key: K, start: i64, end: i64) -> Self {
        Self {
            key,
            window: Window { start, end },
        }
    }
}

/// Writes a [`Windowed<K>`] as `key bytes (the inner serde's) · start · end`, each time 8
/// big-endian bytes (two's complement), so a consumer reads the window from the last 16 bytes.
///
/// ```
/// use eosflow::serdes::{Serde, StringSerde};
/// use eosflow::topology::windows::{Windowed, WindowedSerde};
///
/// let serde = WindowedSerde::new(StringSerde);
/// let key = Windowed::new("ann".to_string(), 60_000, 120_000);
/// let bytes = serde.serialize(&key)?;
/// assert_eq!(&bytes[..3], b"ann");
/// assert_eq!(bytes[3..11], 60_000i64.to_be_bytes());
/// assert_eq!(bytes[11..], 120_000i64.to_be_bytes());
/// assert_eq!(serde.deserialize(&bytes)?, key);
/// # Ok::<(), eosflow::serdes::SerdeError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowedSerde<S>(S);

impl<S> WindowedSerde<S> {
    /// Windowed keys whose key part uses `inner`.
    pub fn new(inner: S) -> Self {
        Self(inner)
    }
}

impl<K, S: Serde<K>> Serde<Windowed<K>> for WindowedSerde<S> {
    fn serialize(&self, value: &Windowed<K>) -> Result<Vec<u8>, SerdeError> {
        let mut out = self.0.serialize(&value.key)?;
        out.extend_from_slice(&value.window.start.to_be_bytes());
        out.extend_from_slice(&value.window.end.to_be_bytes());
        Ok(out)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Windowed<K>, SerdeError> {
        let split = bytes
            .len()
            .checked_sub(16)
            .ok_or_else(|| SerdeError::new("a windowed key is at least 16 bytes"))?;
        let (key, times) = bytes.split_at(split);
        let time = |b: &[u8]| b.try_into().map(i64::from_be_bytes);
        let (start, end) = times.split_at(8);
        match (time(start), time(end)) {
            (Ok(start), Ok(end)) => Ok(Windowed::new(self.0.deserialize(key)?, start, end)),
            _ => Err(SerdeError::new("a windowed key ends with two 8-byte times")),
        }
    }
}

/// Milliseconds of a duration, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Fixed-size windows: tumbling (the default: each record in one window) or hopping
/// ([`TimeWindows::advance_by`]: windows every `advance`, overlapping when shorter than the
/// size). Windows are aligned to the epoch: `start` is a multiple of the advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    size: i64,
    advance: i64,
    grace: i64,
}

impl TimeWindows {
    /// Tumbling windows of `size`, accepting records up to `grace` after a window's end (in
    /// stream time).
    pub fn of_size_with_grace(size: Duration, grace: Duration) -> Self {
        let size = millis(size);
        Self {
            size,
            advance: size,
            grace: millis(grace),
        }
    }

    /// Tumbling windows of `size` that close at their end.
    pub fn of_size_no_grace(size: Duration) -> Self {
        Self::of_size_with_grace(size, Duration::ZERO)
    }

    /// Hopping windows: one starts every `advance` (at most the size).
    pub fn advance_by(mut self, advance: Duration) -> Self {
        self.advance = millis(advance);
        self
    }

    /// The grace period (ms).
    pub fn grace_ms(&self) -> i64 {
        self.grace
    }

    /// What is wrong with these windows, if anything.
    fn check(&self) -> Result<(), String> {
        if self.size <= 0 {
            return Err("the window size must be positive".into());
        }
        if self.advance <= 0 || self.advance > self.size {
            return Err(format!(
                "the advance ({} ms) must be positive and at most the size ({} ms)",
                self.advance, self.size
            ));
        }
        Ok(())
    }

    /// The windows a record at `ts` belongs to, earliest start first. As in Kafka Streams, a
    /// record at or after 0 belongs to no window starting before 0; a record before 0 (which
    /// Kafka Streams never sees) belongs to all its epoch-aligned windows.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::topology::windows::{TimeWindows, Window};
    ///
    /// let hopping = TimeWindows::of_size_no_grace(Duration::from_millis(10))
    ///     .advance_by(Duration::from_millis(5));
    /// assert_eq!(
    ///     hopping.windows_for(12),
    ///     vec![Window { start: 5, end: 15 }, Window { start: 10, end: 20 }]
    /// );
    /// assert_eq!(hopping.windows_for(3), vec![Window { start: 0, end: 10 }]);
    /// assert_eq!(
    ///     hopping.windows_for(-1),
    ///     vec![Window { start: -10, end: 0 }, Window { start: -5, end: 5 }]
    /// );
    /// ```
    pub fn windows_for(&self, ts: i64) -> Vec<Window> {
        if self.check().is_err() {
            return Vec::new();
        }
        // In i128: no start or step can wrap, whatever `ts` (the runtime dead-letters times
        // outside years 1 to 9999 before they get here, but a node of your own may call this
        // with anything). A window whose start is below `i64::MIN` does not exist; an end past
        // `i64::MAX` saturates. At most `ceil(size / advance)` windows.
        let (ts, size, advance) = (
            i128::from(ts),
            i128::from(self.size),
            i128::from(self.advance),
        );
        let lowest = i128::from(i64::MIN);
        let mut out = Vec::new();
        let mut start = ts - ts.rem_euclid(advance);
        // Kafka Streams' `TimeWindows#windowsFor`: a record at or after 0 belongs to no window
        // that starts before 0 (its hopping windows start at `max(0, t - size + advance)`).
        // Before 0, which Kafka Streams never sees, every epoch-aligned window: a window
        // starting before 0 and ending after it holds only the records before 0.
        let first = if ts >= 0 { 0 } else { lowest };
        while start > ts - size && start >= first {
            if let Ok(s) = i64::try_from(start) {
                let end = i64::try_from(start + size).unwrap_or(i64::MAX);
                out.push(Window { start: s, end });
            }
            start -= advance;
        }
        out.reverse();
        out
    }

    /// How many windows a record belongs to at most: `ceil(size / advance)`.
    pub(crate) fn windows_per_record(&self) -> usize {
        if self.check().is_err() {
            return 0;
        }
        let n = self.size / self.advance + i64::from(self.size % self.advance != 0);
        usize::try_from(n).unwrap_or(usize::MAX)
    }
}

/// Session windows: a key's records closer than the inactivity gap in event time form one
/// session; a record that bridges two sessions merges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    gap: i64,
    grace: i64,
}

impl SessionWindows {
    /// Sessions split by `gap` of inactivity, accepting records up to `grace` after a
    /// session could last have been extended (its end plus the gap).
    pub fn with_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> Self {
        Self {
            gap: millis(gap),
            grace: millis(grace),
        }
    }

    /// Sessions that close as soon as their gap has passed.
    pub fn with_inactivity_gap_no_grace(gap: Duration) -> Self {
        Self::with_inactivity_gap_and_grace(gap, Duration::ZERO)
    }

    fn check(&self) -> Result<(), String> {
        if self.gap <= 0 {
            return Err("the inactivity gap must be positive".into());
        }
        Ok(())
    }
}

/// Sliding windows (Kafka Streams' `SlidingWindows`, KIP-450): for each key, a window of
/// `timeDifference` for every distinct set of records that lie within `timeDifference` of
/// each other, without the empty or duplicate windows hopping windows of advance 1 ms would
/// make. Use them for "the records within 10 s of each other" aggregates (a rolling
/// count or sum whose result changes only when a record enters or leaves it).
///
/// Windows are **inclusive at both ends**: `[start, start + timeDifference]`. A record at
/// `t` creates its *left* window `[t - timeDifference, t]` (if not there), updates every
/// existing window that contains `t`, and creates its *right* window
/// `[t + 1, t + 1 + timeDifference]` only once a later record of the key falls in it; as in
/// Kafka Streams, windows are created from the records' times, never aligned to the epoch.
/// A window closes when stream time passes `end + grace`: its close time is
/// `end + grace + 1`. A record is late when even the latest window that could hold it,
/// `[t, t + timeDifference]`, is closed (`t + timeDifference + grace < stream time`).
///
/// Unlike Kafka Streams, whose timestamps cannot be negative and which puts the records
/// before `timeDifference` into one window `[0, timeDifference]`, every record gets its own
/// left window, whatever its time (negative included). A record whose windows cannot be
/// represented in `i64` milliseconds (`t - timeDifference` or `t + 1 + timeDifference` out
/// of range, possible only with a huge time difference) is dead-lettered as permanent,
/// naming why.
///
/// Logins per user within 10 s of each other, each window's final count (the example of
/// `docs/windows.md`):
///
/// ```
/// use std::time::Duration;
/// use eosflow::serdes::{I64Serde, StringSerde};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::windows::{
///     EmitStrategy, SlidingWindows, WindowStoreHandle, Windowed, WindowedAggregate, WindowedSerde,
/// };
/// use eosflow::topology::Topology;
///
/// let ten = SlidingWindows::of_time_difference_and_grace(
///     Duration::from_secs(10),
///     Duration::from_secs(2),
/// );
/// let store = WindowStoreHandle::new("logins-within-10s", StringSerde, I64Serde);
/// let count = WindowedAggregate::sliding(store, ten, || 0, |_user, _login: &String, n: i64| n + 1)
///     .emit(EmitStrategy::OnWindowClose);
/// let topology = Topology::builder()
///     .add_source("logins", &["logins"], StringSerde, StringSerde)
///     .add_windowed_aggregate("count", count, &["logins"])
///     .add_sink("out", "login-bursts", WindowedSerde::new(StringSerde), I64Serde, &["count"])
///     .build()?;
///
/// let mut driver = TopologyTestDriver::new(topology)?;
/// let login = |ms: i64| TestRecord::new("logins", Some("ann"), Some("login")).timestamp(ms);
/// driver.pipe(login(20_000))?;
/// driver.pipe(login(26_000))?;
/// driver.pipe(login(24_000))?; // out of order, within grace
/// driver.pipe(login(60_000))?; // stream time 60 s: every window of ann's first logins closes
/// driver.pipe(login(5_000))?; // [5 s, 15 s] closed at 17 s: late, to logins.DLT
/// let out = driver.read_output("login-bursts", &WindowedSerde::new(StringSerde), &I64Serde)?;
/// let w = |start, end| Some(Windowed::new("ann".to_string(), start, end));
/// assert_eq!(
///     out,
///     vec![
///         (w(10_000, 20_000), Some(1)), // 20 s's left window
///         (w(14_000, 24_000), Some(2)), // 24 s's: 20 s and 24 s
///         (w(16_000, 26_000), Some(3)), // 26 s's: all three
///         (w(20_001, 30_001), Some(2)), // 20 s's right window: 24 s and 26 s
///         (w(24_001, 34_001), Some(1)), // 24 s's right window: 26 s
///     ]
/// );
/// assert_eq!(driver.read_raw_output("logins.DLT")[0].dlt_class(), Some("late-record"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindows {
    time_difference: i64,
    grace: i64,
}

impl SlidingWindows {
    /// Windows holding records at most `time_difference` apart, accepting records up to
    /// `grace` after a window's end (in stream time). Durations beyond `i64::MAX` ms saturate.
    pub fn of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> Self {
        Self {
            time_difference: millis(time_difference),
            grace: millis(grace),
        }
    }

    /// Sliding windows that close at their end (Kafka Streams'
    /// `ofTimeDifferenceWithNoGrace`).
    pub fn of_time_difference_no_grace(time_difference: Duration) -> Self {
        Self::of_time_difference_and_grace(time_difference, Duration::ZERO)
    }

    /// The maximum time difference between two records of one window (ms): a window's
    /// `end - start`.
    pub fn time_difference_ms(&self) -> i64 {
        self.time_difference
    }

    /// The grace period (ms).
    pub fn grace_ms(&self) -> i64 {
        self.grace
    }

    /// The start of a record's left window and the end of its right window, or why they do
    /// not fit in `i64` milliseconds.
    fn span(&self, ts: i64) -> Result<(i64, i64), String> {
        let td = self.time_difference;
        let left = ts.checked_sub(td);
        let right = ts.checked_add(1).and_then(|s| s.checked_add(td));
        match (left, right) {
            (Some(left), Some(right)) => Ok((left, right)),
            _ => Err(format!(
                "sliding windows of {td} ms cannot represent the windows of event time {ts} ms: its left window starts at {ts} - {td} and its right window ends at {ts} + 1 + {td}, which must both lie within i64 milliseconds"
            )),
        }
    }
}

/// When a windowed aggregate forwards its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmitStrategy {
    /// After every record: each update of a window is forwarded (each session a record
    /// replaces — merged away or grown — first as a
    /// tombstone). Kafka Streams' default.
    #[default]
    OnWindowUpdate,
    /// Once per window, when stream time reaches its close time: the final result
    /// (Kafka Streams' `suppress(untilWindowCloses)` / `EmitStrategy.onWindowClose()`).
    OnWindowClose,
}

/// Where records too late for every window go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LateRecords {
    /// The input topic's DLT, class `late-record`, with `eosflow.dlt.late.windows` (the
    /// windows, `start-end` comma-separated), `eosflow.dlt.late.stream.time` and
    /// `eosflow.dlt.late.node` headers.
    #[default]
    DeadLetter,
    /// The node's child of that name (a sink with the input's serdes), the record unchanged
    /// with `eosflow.late.windows` and `eosflow.late.stream.time` headers.
    Forward(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before: `ts - ts.rem_euclid(advance)` and `start -= advance` overflowed near `i64::MIN`
    /// (a debug build panicked, a release build wrapped and allocated windows until it died).
    #[test]
    fn window_assignment_never_overflows_at_extreme_times() {
        let tumbling = TimeWindows::of_size_no_grace(Duration::from_millis(60_000));
        let hopping = tumbling.advance_by(Duration::from_millis(7_000));
        let huge = TimeWindows::of_size_no_grace(Duration::from_millis(u64::MAX));
        let at = [
            i64::MIN,
            i64::MIN + 5,
            i64::MIN + 59_999,
            -1,
            -60_001,
            0,
            i64::MAX - 5,
            i64::MAX,
        ];
        for w in [tumbling, hopping] {
            let most = w.windows_per_record();
            for ts in at {
                let ws = w.windows_for(ts);
                assert!(ws.len() <= most, "{ts}: {} windows", ws.len());
                for win in &ws {
                    assert!(
                        win.start <= ts && (ts < win.end || win.end == i64::MAX),
                        "{ts}: {win:?}"
                    );
                    assert_eq!(win.start.rem_euclid(w.advance), 0, "aligned to the epoch");
                }
                if ts > i64::MIN + w.size && !(0..w.size).contains(&ts) {
                    // floor(size / advance) or ceil, as the alignment falls (from 0 to the
                    // size, fewer: no window starts before 0 for a record at or after 0).
                    let least = usize::try_from(w.size / w.advance).unwrap_or(usize::MAX);
                    assert!(ws.len() >= least, "{ts}: every window of an ordinary time");
                }
            }
        }
        // A size of i64::MAX ms (saturated): one window per record, never a loop.
        for ts in at {
            assert!(huge.windows_for(ts).len() <= 1);
        }
        assert_eq!(
            tumbling.windows_for(-1),
            vec![Window {
                start: -60_000,
                end: 0
            }],
            "negative times floor toward minus infinity"
        );
    }
}
