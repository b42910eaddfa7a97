//! Stream-stream windowed joins (Kafka Streams' `KStream.join/leftJoin/outerJoin(KStream,
//! joiner, JoinWindows)`): two keyed, co-partitioned streams whose records of one key meet
//! when their event times are close enough.
//!
//! - A **left** record at `t` joins the right records of its key with event times in
//!   `[t - before, t + after]`; a right record at `t` joins the left records in
//!   `[t - after, t + before]` ([`JoinWindows`]). Either side triggers results: each record
//!   is joined with the other side's buffered records, then buffered itself. A result is keyed
//!   by the key and stamped with the larger of the two event times.
//! - Each side is buffered in a windowed store of its own
//!   ([`super::windows::WindowStoreHandle`], changelogged as `<app>-<store>-changelog` and
//!   restored like every store), keyed by key · event time; records with the same key and the
//!   same event time are kept side by side (a list under one entry), never overwritten.
//! - **Retention and late records** (Kafka Streams' rule). Nothing bounds the arriving record:
//!   whatever its event time, it joins every buffered record of the other side in its window.
//!   What a side keeps is bounded: each side remembers the newest event time of its records
//!   (Kafka Streams' window store `observedStreamTime`), and a buffered record at `t` is found
//!   by later records while `t + before + after + grace` is after that time (Kafka Streams'
//!   store retention, window size + grace); then it is deleted. A record that joins nothing and
//!   whose own `t + before + after + grace` is not after its side's newest event time could
//!   never be found by a later record: Kafka Streams drops it silently; here it goes to its
//!   input's DLT (`eosflow.dlt.error.class: late-record`) and is counted in
//!   `eosflow_late_records_total{node}`. A record that joins something is never dead-lettered.
//! - **Left and outer joins** ([`StreamJoin::left`], [`StreamJoin::outer`]): a record of an
//!   outer side that never joined is forwarded with `None` for the other side once the
//!   partition's stream time passes `t + before + after + grace`, through a durable event-time
//!   timer, so exactly once across crashes; one that arrives already past that (or that its
//!   side would not keep) and joins nothing is forwarded so at once. There is no early
//!   `(left, None)` result that a later match contradicts (Kafka Streams ≥ 3.1 emits at
//!   `t + after + grace`, an out-of-order record at once, and can, when `before > 0`, still
//!   join that record afterwards; here the unmatched result waits `before` (`after` for a right
//!   record) longer and is final). One exception, as in Kafka Streams: while the record's own
//!   side lags behind stream time (its newest event time has not passed `t + before + after +
//!   grace`), the record stays findable after its unmatched result, and a pair can follow it.
//! - **Causation**: a result caused by a record carries that record's id as `causation_id`
//!   (the runtime stamps it). An unmatched result is forwarded from a timer, which has no input
//!   record: the node sets `causation_id`, `correlation_id` and `tenant` from the envelope the
//!   unmatched record had, kept with it in the buffer.
//! - Records without a key or a value are dropped and counted in
//!   `eosflow_join_dropped_records_total{node, reason="no-key"|"no-value"}`, as Kafka Streams
//!   drops them. The joiner returning `None` forwards nothing.
//!
//! The builder ([`super::TopologyBuilder::add_stream_stream_join`]) adds three nodes:
//! `<name>-left` and `<name>-right` (one per side, both with both stores attached) and `name`,
//! which forwards their results: attach children to `name`.
//!
//! ```
//! use std::time::Duration;
//! use eosflow::serdes::StringSerde;
//! use eosflow::testing::{TestRecord, TopologyTestDriver};
//! use eosflow::topology::windows::WindowStoreHandle;
//! use eosflow::topology::{JoinWindows, StreamJoin, Topology};
//!
//! // Ad impressions joined with the clicks on them at most 10 s later (5 s of grace).
//! let windows = JoinWindows::of_time_difference_and_grace(Duration::from_secs(10), Duration::from_secs(5))
//!     .before(Duration::ZERO);
//! let join = StreamJoin::left(
//!     windows,
//!     WindowStoreHandle::new("impressions-buffer", StringSerde, StringSerde),
//!     WindowStoreHandle::new("clicks-buffer", StringSerde, StringSerde),
//!     |_ad: &String, shown: &String, click: Option<&String>| {
//!         Some(format!("{shown}:{}", click.map_or("no click", String::as_str)))
//!     },
//! );
//! let topology = Topology::builder()
//!     .add_source("impressions", &["impressions"], StringSerde, StringSerde)
//!     .add_source("clicks", &["clicks"], StringSerde, StringSerde)
//!     .add_stream_stream_join("shown-clicked", join, &["impressions"], &["clicks"])
//!     .add_sink("out", "ad-outcomes", StringSerde, StringSerde, &["shown-clicked"])
//!     .build()?;
//! assert_eq!(
//!     topology.changelog_topics("app"),
//!     ["app-state-changelog", "app-impressions-buffer-changelog", "app-clicks-buffer-changelog"]
//! );
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! let at = |topic: &str, ad: &str, v: &str, ms: i64| TestRecord::new(topic, Some(ad), Some(v)).timestamp(ms);
//! driver.pipe(at("impressions", "ad-1", "shown-1", 1_000).id("imp-1"))?;
//! driver.pipe(at("impressions", "ad-2", "shown-2", 2_000).id("imp-2"))?;
//! driver.pipe(at("clicks", "ad-1", "click-1", 4_000).id("click-1"))?; // 3 s after: joins
//! let out = driver.read_raw_output("ad-outcomes");
//! assert_eq!(out.len(), 1);
//! assert_eq!((out[0].value_text(), out[0].timestamp), ("shown-1:click-1".into(), Some(4_000)));
//! assert_eq!(out[0].header("causation_id"), Some("click-1"));
//!
//! // ad-2 can be clicked until 12 s, and such a click may still arrive (out of order, within
//! // the 5 s of grace) until stream time 17 s: only then is "no click" final.
//! driver.pipe(at("clicks", "ad-9", "other", 17_000))?;
//! assert!(driver.read_raw_output("ad-outcomes").is_empty());
//! driver.pipe(at("clicks", "ad-9", "other", 17_001))?;
//! let out = driver.read_raw_output("ad-outcomes");
//! assert_eq!(out[0].value_text(), "shown-2:no click");
//! assert_eq!(out[0].timestamp, Some(2_000));
//! assert_eq!(out[0].header("causation_id"), Some("imp-2"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use super::node::{NodeContext, NodeProcessor, TypedRecord};
use super::tables::JoinInput;
use super::windows::{data_key, parse_data_key, Window, WindowStoreHandle, EXPIRE_PER_CALL};
use crate::codec::envelope::EnvelopeRef;
use crate::processor::StoreHandle;
use crate::processor::Timer;
use crate::record::ProcessError;
use crate::serdes::{BytesSerde, I64Serde, Serde, SerdeError};

/// How close in event time two records must be to join, and how long out-of-order records are
/// waited for (Kafka Streams' `JoinWindows`). A left record at `t` joins right records in
/// `[t - before, t + after]`; `before` and `after` are both the time difference unless set
/// apart with [`JoinWindows::before`] / [`JoinWindows::after`].
///
/// ```
/// use std::time::Duration;
/// use eosflow::topology::JoinWindows;
///
/// let w = JoinWindows::of_time_difference_and_grace(Duration::from_secs(60), Duration::from_secs(5))
///     .before(Duration::ZERO);
/// assert_eq!((w.before_ms(), w.after_ms(), w.grace_ms()), (0, 60_000, 5_000));
/// // A buffered record is kept (and an unmatched one emitted) after before + after + grace.
/// assert_eq!(w.retention_ms(), 65_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinWindows {
    before: i64,
    after: i64,
    grace: i64,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl JoinWindows {
    /// Records at most `difference` apart join (either one first); each side keeps its
    /// records `grace` longer than the windows need (retention `before + after + grace`), for
    /// records of the other side that arrive out of order.
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        let d = millis(difference);
        Self {
            before: d,
            after: d,
            grace: millis(grace),
        }
    }

    /// Records at most `difference` apart join; each side keeps its records only as long as the
    /// windows need (retention `before + after`).
    pub fn of_time_difference_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// How much earlier than a left record a right record may be.
    pub fn before(mut self, before: Duration) -> Self {
        self.before = millis(before);
        self
    }

    /// How much later than a left record a right record may be.
    pub fn after(mut self, after: Duration) -> Self {
        self.after = millis(after);
        self
    }

    /// `before` (ms).
    pub fn before_ms(&self) -> i64 {
        self.before
    }

    /// `after` (ms).
    pub fn after_ms(&self) -> i64 {
        self.after
    }

    /// The grace period (ms).
    pub fn grace_ms(&self) -> i64 {
        self.grace
    }

    /// How long after its event time a buffered record is kept (measured by its side's newest
    /// event time), and after which (in stream time) an unmatched one of an outer side is
    /// emitted: `before + after + grace`.
    pub fn retention_ms(&self) -> i64 {
        self.before
            .saturating_add(self.after)
            .saturating_add(self.grace)
    }
}

/// Which records without a partner are forwarded (with `None` for the missing side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    /// None: only pairs.
    Inner,
    /// Left records that joined nothing.
    Left,
    /// Records of either side that joined nothing.
    Outer,
}

type Joiner<K, V1, V2, R> = Arc<dyn Fn(&K, Option<&V1>, Option<&V2>) -> Option<R> + Send + Sync>;

/// A stream-stream join: its windows, the windowed stores buffering each side (their names
/// and serdes; both changelogged) and the joiner. Add it with
/// [`super::TopologyBuilder::add_stream_stream_join`]; see [`self`](super::stream_joins) for
/// the semantics.
pub struct StreamJoin<K, V1, V2, R> {
    windows: JoinWindows,
    kind: JoinKind,
    left: WindowStoreHandle<K, V1>,
    right: WindowStoreHandle<K, V2>,
    joiner: Joiner<K, V1, V2, R>,
}

impl<K, V1, V2, R> StreamJoin<K, V1, V2, R> {
    /// An inner join: `joiner(key, left, right)` for every pair within the windows.
    pub fn inner(
        windows: JoinWindows,
        left: WindowStoreHandle<K, V1>,
        right: WindowStoreHandle<K, V2>,
        joiner: impl Fn(&K, &V1, &V2) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        let joiner = move |k: &K, l: Option<&V1>, r: Option<&V2>| match (l, r) {
            (Some(l), Some(r)) => joiner(k, l, r),
            _ => None,
        };
        Self::of(windows, JoinKind::Inner, left, right, Arc::new(joiner))
    }

    /// A left join: every pair, and each left record that joined nothing as
    /// `joiner(key, left, None)` once its window (plus grace) is over.
    pub fn left(
        windows: JoinWindows,
        left: WindowStoreHandle<K, V1>,
        right: WindowStoreHandle<K, V2>,
        joiner: impl Fn(&K, &V1, Option<&V2>) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        let joiner = move |k: &K, l: Option<&V1>, r: Option<&V2>| l.and_then(|l| joiner(k, l, r));
        Self::of(windows, JoinKind::Left, left, right, Arc::new(joiner))
    }

    /// An outer join: every pair, and each record of either side that joined nothing, with
    /// `None` for the other side, once its window (plus grace) is over.
    pub fn outer(
        windows: JoinWindows,
        left: WindowStoreHandle<K, V1>,
        right: WindowStoreHandle<K, V2>,
        joiner: impl Fn(&K, Option<&V1>, Option<&V2>) -> Option<R> + Send + Sync + 'static,
    ) -> Self {
        Self::of(windows, JoinKind::Outer, left, right, Arc::new(joiner))
    }

    fn of(
        windows: JoinWindows,
        kind: JoinKind,
        left: WindowStoreHandle<K, V1>,
        right: WindowStoreHandle<K, V2>,
        joiner: Joiner<K, V1, V2, R>,
    ) -> Self {
        Self {
            windows,
            kind,
            left,
            right,
            joiner,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> JoinKind {
        self.kind
    }

    /// Its windows.
    pub fn windows(&self) -> JoinWindows {
        self.windows
    }

    /// The names of the left and the right store.
    pub(crate) fn store_names(&self) -> (String, String) {
        (self.left.name().to_string(), self.right.name().to_string())
    }

    /// What is wrong with it, if anything (reported by the builder).
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.left.name() == self.right.name() {
            return Err(format!(
                "both sides are buffered in store {:?}: each side needs its own",
                self.left.name()
            ));
        }
        Ok(())
    }
}

impl<K, V1, V2, R> StreamJoin<K, V1, V2, R>
where
    K: Clone + Send + 'static,
    V1: Clone + Send + 'static,
    V2: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    /// The two side nodes: the left one, then the right one.
    pub(crate) fn into_nodes(self) -> SideNodes<K, V1, V2, R> {
        let left_store = buffer_handle(&self.left);
        let right_store = buffer_handle(&self.right);
        let (left_emits, right_emits) = match self.kind {
            JoinKind::Inner => (false, false),
            JoinKind::Left => (true, false),
            JoinKind::Outer => (true, true),
        };
        let w = self.windows;
        let j = self.joiner.clone();
        let left = Side {
            look_back: w.before,
            look_ahead: w.after,
            windows: w,
            own: left_store.clone(),
            other: right_store.clone(),
            own_seen: seen_handle(self.left.name()),
            other_seen: seen_handle(self.right.name()),
            own_emits: left_emits,
            other_emits: right_emits,
            join: Box::new(move |k, this, other| j(k, Some(this), other)),
        };
        let j = self.joiner;
        let right = Side {
            look_back: w.after,
            look_ahead: w.before,
            windows: w,
            own: right_store,
            other: left_store,
            own_seen: seen_handle(self.right.name()),
            other_seen: seen_handle(self.left.name()),
            own_emits: right_emits,
            other_emits: left_emits,
            join: Box::new(move |k, this, other| j(k, other, Some(this))),
        };
        (left, right)
    }
}

/// The left and the right node of a join.
pub(crate) type SideNodes<K, V1, V2, R> = (Side<K, V1, V2, R>, Side<K, V2, V1, R>);

/// One buffered record: its value, whether it has joined a record of the other side, and the
/// envelope (id, correlation, tenant) an unmatched result caused by it carries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Buffered<V> {
    matched: bool,
    id: Option<Vec<u8>>,
    correlation: Option<Vec<u8>>,
    tenant: Option<Vec<u8>>,
    value: V,
}

/// The records of one key and one event time (a list: duplicates are kept).
type Slot<V> = Vec<Buffered<V>>;

/// Writes a slot as `count (u32) · per record: matched (u8) · id · correlation · tenant ·
/// value`, each a u32 length then bytes (`u32::MAX`: absent), the value with the user's serde.
struct SlotSerde<V>(Arc<dyn Serde<V>>);

const ABSENT: u32 = u32::MAX;

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) -> Result<(), SerdeError> {
    match b {
        Some(b) => {
            let len = u32::try_from(b.len())
                .ok()
                .filter(|l| *l != ABSENT)
                .ok_or_else(|| SerdeError::new("a buffered field is over 4 GiB"))?;
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&ABSENT.to_be_bytes()),
    }
    Ok(())
}

/// Reads what [`put_bytes`] wrote at `at`, moving `at` past it.
pub(crate) fn take_bytes<'b>(
    bytes: &'b [u8],
    at: &mut usize,
) -> Result<Option<&'b [u8]>, SerdeError> {
    let short = || SerdeError::new("a buffered join slot is cut short");
    let len_bytes = bytes.get(*at..*at + 4).ok_or_else(short)?;
    let len = u32::from_be_bytes(len_bytes.try_into().map_err(|_| short())?);
    *at += 4;
    if len == ABSENT {
        return Ok(None);
    }
    let b = bytes.get(*at..*at + len as usize).ok_or_else(short)?;
    *at += len as usize;
    Ok(Some(b))
}

impl<V> Serde<Slot<V>> for SlotSerde<V> {
    fn serialize(&self, slot: &Slot<V>) -> Result<Vec<u8>, SerdeError> {
        let mut out = Vec::new();
        let n = u32::try_from(slot.len()).map_err(|_| SerdeError::new("too many records"))?;
        out.extend_from_slice(&n.to_be_bytes());
        for b in slot {
            out.push(u8::from(b.matched));
            put_bytes(&mut out, b.id.as_deref())?;
            put_bytes(&mut out, b.correlation.as_deref())?;
            put_bytes(&mut out, b.tenant.as_deref())?;
            put_bytes(&mut out, Some(&self.0.serialize(&b.value)?))?;
        }
        Ok(out)
    }

    fn deserialize(&self, bytes: &[u8]) -> Result<Slot<V>, SerdeError> {
        let short = || SerdeError::new("a buffered join slot is cut short");
        let n = u32::from_be_bytes(
            bytes
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(short)?,
        );
        let mut at = 4;
        let mut out = Vec::with_capacity((n as usize).min(1024));
        for _ in 0..n {
            let matched = *bytes.get(at).ok_or_else(short)? != 0;
            at += 1;
            let id = take_bytes(bytes, &mut at)?.map(<[u8]>::to_vec);
            let correlation = take_bytes(bytes, &mut at)?.map(<[u8]>::to_vec);
            let tenant = take_bytes(bytes, &mut at)?.map(<[u8]>::to_vec);
            let value = take_bytes(bytes, &mut at)?
                .ok_or_else(|| SerdeError::new("a buffered record has no value"))?;
            out.push(Buffered {
                matched,
                id,
                correlation,
                tenant,
                value: self.0.deserialize(value)?,
            });
        }
        Ok(out)
    }
}

/// The store a side is buffered in: the user's store name and key serde, values in slots.
fn buffer_handle<K: 'static, V: 'static>(
    user: &WindowStoreHandle<K, V>,
) -> WindowStoreHandle<K, Slot<V>> {
    let (keys, values) = user.store_handle().serde_arcs();
    WindowStoreHandle::new(user.name(), keys, SlotSerde(values))
}

/// The key, in a side's store, of the newest event time of the side's records (Kafka Streams'
/// window store `observedStreamTime`): an `m` entry like the store's expiry watermark, so
/// neither the windows nor their index see it; changelogged with the store.
const SEEN: &[u8] = b"mjoin-seen";

/// A side's store read as a key-value store: where its newest event time is kept.
fn seen_handle(store: &str) -> StoreHandle<Vec<u8>, i64> {
    StoreHandle::new(store, BytesSerde, I64Serde)
}

type SideJoiner<K, This, Other, R> = Box<dyn Fn(&K, &This, Option<&Other>) -> Option<R> + Send>;

/// The node of one side: `This` is its records' value, `Other` the other side's.
pub(crate) struct Side<K, This, Other, R> {
    windows: JoinWindows,
    /// How far before this record's time the other side's records join it.
    look_back: i64,
    /// How far after.
    look_ahead: i64,
    own: WindowStoreHandle<K, Slot<This>>,
    other: WindowStoreHandle<K, Slot<Other>>,
    /// The newest event time of this side's records, in its store.
    own_seen: StoreHandle<Vec<u8>, i64>,
    /// The other side's.
    other_seen: StoreHandle<Vec<u8>, i64>,
    /// This side's unmatched records are forwarded (left side of a left join, both of outer).
    own_emits: bool,
    other_emits: bool,
    /// The user's joiner seen from this side: (key, this value, the other value).
    join: SideJoiner<K, This, Other, R>,
}

fn key_error(store: &str, e: SerdeError) -> ProcessError {
    ProcessError::permanent(format!("window store {store} key: {e}"))
}

impl<K, This, Other, R> Side<K, This, Other, R>
where
    K: Clone + Send + 'static,
    This: Clone + Send + 'static,
    Other: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    /// A record that joined nothing and that no later record could find: to the DLT, counted,
    /// not buffered (Kafka Streams drops it silently).
    fn late(&self, ctx: &mut NodeContext<'_, '_>, t: i64, seen: i64, stream: i64) {
        let reason = format!(
            "late record: it joined nothing, and event time {t} + {} ms of retention (before + after + grace) is not after {seen}, the newest event time of its side: no later record could join it",
            self.windows.retention_ms()
        );
        ctx.dead_letter_late(reason, &[], stream);
    }

    /// The newest event time of a side's records (`None` before its first), kept in its store.
    fn seen(
        ctx: &mut NodeContext<'_, '_>,
        handle: &StoreHandle<Vec<u8>, i64>,
    ) -> Result<Option<i64>, ProcessError> {
        ctx.store(handle)?.get(&SEEN.to_vec())
    }

    /// Deletes the buffered records no later record can find any more: event time +
    /// retention not after `seen`, their side's newest event time. An outer side's record is
    /// deleted one millisecond later, once its timer (due at event time + retention + 1, at
    /// most `seen`, which stream time has reached before this record) has emitted it if it
    /// was unmatched: `seen` is then a time stream time reached before this record (the
    /// other side's, or this side's before this record), so every timer due by then has fired.
    fn expire_store<V>(
        ctx: &mut NodeContext<'_, '_>,
        store: &WindowStoreHandle<K, Slot<V>>,
        emits: bool,
        seen: Option<i64>,
        retention: i64,
    ) -> Result<(), ProcessError> {
        let Some(seen) = seen else {
            return Ok(());
        };
        let cutoff = seen
            .saturating_sub(retention)
            .saturating_add(i64::from(!emits));
        ctx.window_store(store)?.expire(cutoff, EXPIRE_PER_CALL)?;
        Ok(())
    }

    /// [`Self::expire_store`] of both stores: this side's by its newest event time (before
    /// this record if it is an outer side), the other side's by its own.
    fn expire(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        (before, own_seen): (Option<i64>, i64),
        other_seen: Option<i64>,
    ) -> Result<(), ProcessError> {
        let retention = self.windows.retention_ms();
        let own = if self.own_emits {
            before
        } else {
            Some(own_seen)
        };
        Self::expire_store(ctx, &self.own, self.own_emits, own, retention)?;
        Self::expire_store(ctx, &self.other, self.other_emits, other_seen, retention)
    }
}

impl<K, This, Other, R> NodeProcessor<K, This> for Side<K, This, Other, R>
where
    K: Clone + Send + 'static,
    This: Clone + Send + 'static,
    Other: Clone + Send + 'static,
    R: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, This>,
    ) -> Result<(), ProcessError> {
        let Some(JoinInput { key, value, record }) = JoinInput::of(ctx, record) else {
            return Ok(());
        };
        let t = record
            .timestamp
            .or_else(|| ctx.event_time_ms())
            .ok_or_else(|| ProcessError::permanent("a stream-stream join needs an event time"))?;
        let stream = ctx.stream_time_ms().unwrap_or(t).max(t);
        let retention = self.windows.retention_ms();
        let other_seen = Self::seen(ctx, &self.other_seen)?;
        let seen_before = Self::seen(ctx, &self.own_seen)?;
        let own_seen = match seen_before {
            Some(seen) if seen >= t => seen,
            _ => {
                ctx.store(&self.own_seen)?.put(&SEEN.to_vec(), &t)?;
                t
            }
        };
        let seen = (seen_before, own_seen);
        let k = self
            .own
            .key_serde()
            .serialize(&key)
            .map_err(|e| key_error(self.own.name(), e))?;
        // Join with the other side's buffered records in the window that are still kept
        // (event time + retention after the newest event time of their side), earliest first.
        let kept_from = other_seen.map_or(i64::MIN, |seen| {
            seen.saturating_sub(retention).saturating_add(1)
        });
        let (from, to) = (
            t.saturating_sub(self.look_back).max(kept_from),
            t.saturating_add(self.look_ahead),
        );
        let mut results = Vec::new();
        let mut matched = false;
        if from <= to {
            let mut other = ctx.window_store(&self.other)?;
            for (w, mut slot) in other.fetch_range(&key, from, to)? {
                for b in &slot {
                    matched = true;
                    if let Some(r) = (self.join)(&key, &value, Some(&b.value)) {
                        results.push((r, w.start.max(t)));
                    }
                }
                if self.other_emits && slot.iter().any(|b| !b.matched) {
                    slot.iter_mut().for_each(|b| b.matched = true);
                    other.put_read(&k, w, Some(w.end), &slot)?;
                }
            }
        }
        for (r, ts) in results {
            ctx.forward(TypedRecord {
                key: Some(key.clone()),
                value: Some(r),
                timestamp: Some(ts),
                headers: record.headers.clone(),
            });
        }
        // A later record of the other side finds this one while its event time + retention is
        // after its side's newest event time (Kafka Streams' window store retention). An outer
        // side's record that joined nothing is due once stream time passes that too.
        let found_later = t.saturating_add(retention) > own_seen;
        let due_now = self.own_emits && t.saturating_add(retention) < stream;
        if !matched && (due_now || (self.own_emits && !found_later)) {
            // Unmatched and due already: its result now, with its own event time.
            if let Some(r) = (self.join)(&key, &value, None) {
                ctx.forward(TypedRecord {
                    key: Some(key.clone()),
                    value: Some(r),
                    timestamp: Some(t),
                    headers: record.headers.clone(),
                });
            }
            matched = true;
        }
        if !found_later {
            if !matched {
                self.late(ctx, t, own_seen, stream);
            }
            return self.expire(ctx, seen, other_seen);
        }
        // Buffer this record; a new slot of an outer side gets the timer that emits its
        // unmatched records and deletes it.
        let envelope = if self.own_emits {
            let e = EnvelopeRef::of(ctx.input().headers);
            let own = |b: Option<&[u8]>| b.map(<[u8]>::to_vec);
            (own(e.id), own(e.correlation_id), own(e.tenant))
        } else {
            (None, None, None)
        };
        let entry = Buffered {
            matched,
            id: envelope.0,
            correlation: envelope.1,
            tenant: envelope.2,
            value,
        };
        let dk = data_key(&k, t);
        let mut own = ctx.window_store(&self.own)?;
        let previous = own.fetch_raw(&dk)?;
        let previous_end = previous.as_ref().map(|(w, _)| w.end);
        let mut slot = previous.map(|(_, s)| s).unwrap_or_default();
        slot.push(entry);
        own.put_read(&k, Window { start: t, end: t }, previous_end, &slot)?;
        if self.own_emits && !due_now && previous_end.is_none() {
            let due = t.saturating_add(retention).saturating_add(1);
            ctx.schedule(Timer::event_time(dk, due))?;
        }
        self.expire(ctx, seen, other_seen)
    }

    /// A slot of an outer side is due: its records that joined nothing are forwarded with
    /// `None` for the other side (stamped with their event time and their own envelope as
    /// cause), and the slot is deleted — or, while its side's newest event time has not
    /// passed it by the retention (that side lags behind stream time), kept for the later
    /// records that can still find it, marked as emitted.
    fn on_timer(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let own_seen = Self::seen(ctx, &self.own_seen)?;
        let retention = self.windows.retention_ms();
        let key_bytes = parse_data_key(&timer.key)
            .map(|(k, _)| k.to_vec())
            .ok_or_else(|| ProcessError::permanent("a join timer's key is not a buffer's"))?;
        let mut own = ctx.window_store(&self.own)?;
        let Some((w, mut slot)) = own.fetch_raw(&timer.key)? else {
            return Ok(());
        };
        let unmatched: Vec<_> = slot.iter().filter(|b| !b.matched).cloned().collect();
        let found_later = own_seen.is_some_and(|seen| w.start.saturating_add(retention) > seen);
        if found_later {
            slot.iter_mut().for_each(|b| b.matched = true);
            own.put_read(&key_bytes, w, Some(w.end), &slot)?;
        } else {
            own.remove_read(&timer.key, w)?;
        }
        let key = self
            .own
            .key_serde()
            .deserialize(&key_bytes)
            .map_err(|e| key_error(self.own.name(), e))?;
        for b in unmatched {
            let Some(r) = (self.join)(&key, &b.value, None) else {
                continue;
            };
            let mut headers = Vec::new();
            if let Some(id) = &b.id {
                headers.push(("causation_id".to_string(), id.clone()));
            }
            if let Some(c) = b.correlation.as_ref().or(b.id.as_ref()) {
                headers.push(("correlation_id".to_string(), c.clone()));
            }
            if let Some(t) = b.tenant {
                headers.push(("tenant".to_string(), t));
            }
            ctx.forward(TypedRecord {
                key: Some(key.clone()),
                value: Some(r),
                timestamp: Some(w.start),
                headers,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serdes::StringSerde;

    #[test]
    fn a_slot_round_trips_with_duplicates_and_absent_fields() {
        let serde = SlotSerde::<String>(Arc::new(StringSerde));
        let slot = vec![
            Buffered {
                matched: false,
                id: Some(b"m-1".to_vec()),
                correlation: None,
                tenant: Some(Vec::new()),
                value: "a".to_string(),
            },
            Buffered {
                matched: true,
                id: None,
                correlation: Some(b"c".to_vec()),
                tenant: None,
                value: "a".to_string(),
            },
        ];
        let bytes = serde.serialize(&slot).expect("serializes");
        assert_eq!(serde.deserialize(&bytes).expect("deserializes"), slot);
        assert!(serde.deserialize(&bytes[..bytes.len() - 1]).is_err());
        assert!(serde.deserialize(&[0, 0]).is_err());
    }
}
