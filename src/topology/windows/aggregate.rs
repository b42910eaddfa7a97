//! The windowed aggregate node: assigns each record to its windows (fixed, sliding or
//! session), folds it into the open ones in the windowed store, forwards results as its emit
//! strategy says (on close through one durable event-time timer per window, keyed by the
//! window's store key), expires windows past retention, and routes records too late for every
//! window to the DLT or the late-record sink.

use std::time::Duration;

use super::store::{data_key, parse_data_key, Beside, WindowStoreHandle};
use super::{
    millis, EmitStrategy, LateRecords, SessionWindows, SlidingWindows, TimeWindows, Window,
    Windowed,
};
use crate::processor::{Timer, TimerKind};
use crate::record::ProcessError;
use crate::topology::{NodeContext, NodeProcessor, TypedRecord};

/// Windows expired at most per record (or per closing window): retention's work is spread
/// over the records that move stream time. Hopping windows expire at least twice as many as a
/// record can create (`2 · ceil(size / advance)`), so expiry always keeps up with creation.
pub const EXPIRE_PER_CALL: usize = 64;

type Init<A> = Box<dyn Fn() -> A + Send>;
type Aggregator<K, V, A> = Box<dyn Fn(&K, &V, A) -> A + Send>;
type Merger<K, A> = Box<dyn Fn(&K, A, A) -> A + Send>;

/// Which windows.
enum Kind<K, A> {
    Time(TimeWindows),
    Sliding(SlidingWindows),
    Session(SessionWindows, Merger<K, A>),
}

/// What a sliding-window record found among its key's windows (Kafka Streams'
/// `processInOrder` state): which of its own windows exist, the aggregates its new windows
/// start from, and the latest earlier record.
struct Neighbours<A> {
    /// The existing windows that contain the record, with their aggregates and latest times.
    containing: Vec<(Window, A, i64)>,
    /// Starts of every window found.
    starts: Vec<i64>,
    /// The latest window ending before the record: its aggregate seeds the left window.
    left_agg: Option<A>,
    /// The latest window containing the record and ending after it: its aggregate and latest
    /// time seed the right window.
    right_agg: Option<(A, i64)>,
    left_exists: bool,
    right_exists: bool,
    /// The latest record before this one, when its right window may be missing.
    previous: Option<i64>,
}

/// A windowed aggregation of a keyed stream (Kafka Streams'
/// `groupByKey().windowedBy(…).aggregate(initializer, aggregator[, merger])`): add it with
/// [`crate::topology::TopologyBuilder::add_windowed_aggregate`]; it forwards
/// `TypedRecord<Windowed<K>, A>` to its children. A record without a key, value or event time
/// is dead-lettered as permanent. See [`super`] for the semantics.
///
/// Sessions of activity per user, the number of clicks in each, one result per session:
///
/// ```
/// use std::time::Duration;
/// use eosflow::serdes::{I64Serde, StringSerde};
/// use eosflow::testing::{TestRecord, TopologyTestDriver};
/// use eosflow::topology::windows::{
///     EmitStrategy, SessionWindows, WindowStoreHandle, Windowed, WindowedAggregate, WindowedSerde,
/// };
/// use eosflow::topology::Topology;
///
/// let idle = SessionWindows::with_inactivity_gap_no_grace(Duration::from_secs(30));
/// let store = WindowStoreHandle::new("sessions", StringSerde, I64Serde);
/// let clicks = WindowedAggregate::session(
///     store,
///     idle,
///     || 0,
///     |_user, _click: &String, n: i64| n + 1,
///     |_user, a, b| a + b,
/// )
/// .emit(EmitStrategy::OnWindowClose);
/// let topology = Topology::builder()
///     .add_source("clicks", &["clicks"], StringSerde, StringSerde)
///     .add_windowed_aggregate("sessions", clicks, &["clicks"])
///     .add_sink("out", "sessions", WindowedSerde::new(StringSerde), I64Serde, &["sessions"])
///     .build()?;
/// let mut driver = TopologyTestDriver::new(topology)?;
/// for ms in [0, 20_000, 45_000, 200_000] {
///     driver.pipe(TestRecord::new("clicks", Some("ann"), Some("click")).timestamp(ms))?;
/// }
/// let out = driver.read_output("sessions", &WindowedSerde::new(StringSerde), &I64Serde)?;
/// assert_eq!(out, vec![(Some(Windowed::new("ann".to_string(), 0, 45_000)), Some(3))]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct WindowedAggregate<K, V, A> {
    store: WindowStoreHandle<K, A>,
    kind: Kind<K, A>,
    init: Init<A>,
    aggregate: Aggregator<K, V, A>,
    emit: EmitStrategy,
    retention: i64,
    late: LateRecords,
}

impl<K, V, A> WindowedAggregate<K, V, A> {
    /// Fixed windows (tumbling or hopping) aggregated into `store`: each window starts at
    /// `init()`, and each record `v` of key `k` makes its aggregate `aggregate(k, v, agg)`.
    pub fn time(
        store: WindowStoreHandle<K, A>,
        windows: TimeWindows,
        init: impl Fn() -> A + Send + 'static,
        aggregate: impl Fn(&K, &V, A) -> A + Send + 'static,
    ) -> Self {
        Self::with_kind(
            store,
            Kind::Time(windows),
            Box::new(init),
            Box::new(aggregate),
        )
    }

    /// Sliding windows (Kafka Streams' `windowedBy(SlidingWindows)`) aggregated into `store`:
    /// each new window starts at `init()` (or, as in Kafka Streams, from the aggregate of the
    /// records it shares with an existing window), and each record `v` of key `k` makes the
    /// aggregate of every open window containing it `aggregate(k, v, agg)`. See
    /// [`SlidingWindows`] for which windows exist.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow::serdes::{I64Serde, StringSerde};
    /// use eosflow::testing::{TestRecord, TopologyTestDriver};
    /// use eosflow::topology::windows::{
    ///     SlidingWindows, WindowStoreHandle, Windowed, WindowedAggregate, WindowedSerde,
    /// };
    /// use eosflow::topology::Topology;
    ///
    /// let ten = SlidingWindows::of_time_difference_no_grace(Duration::from_millis(10));
    /// let store = WindowStoreHandle::new("rolling", StringSerde, I64Serde);
    /// let count = WindowedAggregate::sliding(store, ten, || 0, |_k, _v: &String, n: i64| n + 1);
    /// let topology = Topology::builder()
    ///     .add_source("in", &["events"], StringSerde, StringSerde)
    ///     .add_windowed_aggregate("count", count, &["in"])
    ///     .add_sink("out", "rolling", WindowedSerde::new(StringSerde), I64Serde, &["count"])
    ///     .build()?;
    /// let mut driver = TopologyTestDriver::new(topology)?;
    /// for ms in [100, 105] {
    ///     driver.pipe(TestRecord::new("events", Some("k"), Some("e")).timestamp(ms))?;
    /// }
    /// let out = driver.read_output("rolling", &WindowedSerde::new(StringSerde), &I64Serde)?;
    /// let w = |start, end| Some(Windowed::new("k".to_string(), start, end));
    /// assert_eq!(
    ///     out,
    ///     vec![
    ///         (w(90, 100), Some(1)),  // 100's left window
    ///         (w(101, 111), Some(1)), // 100's right window, now that 105 falls in it
    ///         (w(95, 105), Some(2)),  // 105's left window: 100 and 105
    ///     ]
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sliding(
        store: WindowStoreHandle<K, A>,
        windows: SlidingWindows,
        init: impl Fn() -> A + Send + 'static,
        aggregate: impl Fn(&K, &V, A) -> A + Send + 'static,
    ) -> Self {
        let kind = Kind::Sliding(windows);
        Self::with_kind(store, kind, Box::new(init), Box::new(aggregate))
    }

    /// Session windows aggregated into `store`; when a record bridges sessions, their
    /// aggregates are combined with `merge(k, left, right)` (earlier session first, starting
    /// from `init()`) before the record is aggregated.
    pub fn session(
        store: WindowStoreHandle<K, A>,
        windows: SessionWindows,
        init: impl Fn() -> A + Send + 'static,
        aggregate: impl Fn(&K, &V, A) -> A + Send + 'static,
        merge: impl Fn(&K, A, A) -> A + Send + 'static,
    ) -> Self {
        let kind = Kind::Session(windows, Box::new(merge));
        Self::with_kind(store, kind, Box::new(init), Box::new(aggregate))
    }

    fn with_kind(
        store: WindowStoreHandle<K, A>,
        kind: Kind<K, A>,
        init: Init<A>,
        aggregate: Aggregator<K, V, A>,
    ) -> Self {
        Self {
            store,
            kind,
            init,
            aggregate,
            emit: EmitStrategy::default(),
            retention: 0,
            late: LateRecords::default(),
        }
    }

    /// Forward on every update (the default) or once per window when it closes.
    pub fn emit(mut self, emit: EmitStrategy) -> Self {
        self.emit = emit;
        self
    }

    /// How long a closed window stays in the store (for a node reading it) before it is
    /// deleted; 0 (the default) deletes it when it closes. Sliding windows stay at least
    /// `2 · timeDifference` after they close, whatever this says: a record still within grace
    /// may need them to seed its own windows.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = millis(retention);
        self
    }

    /// Sends late records to the child `sink` instead of the input's DLT.
    pub fn late_records_to(mut self, sink: &str) -> Self {
        self.late = LateRecords::Forward(sink.to_string());
        self
    }

    /// The child late records are forwarded to, unchanged (`(K, V)` records), if any.
    pub(crate) fn late_child(&self) -> Option<&str> {
        match &self.late {
            LateRecords::Forward(child) => Some(child),
            LateRecords::DeadLetter => None,
        }
    }

    /// The windowed store it aggregates into.
    pub fn store(&self) -> &WindowStoreHandle<K, A> {
        &self.store
    }

    /// What is wrong with its windows, if anything (reported by the builder).
    pub(crate) fn check(&self) -> Result<(), String> {
        match &self.kind {
            Kind::Time(w) => w.check(),
            Kind::Sliding(_) => Ok(()),
            Kind::Session(w, _) => w.check(),
        }
    }

    /// From a window's end to its close time: the grace (plus 1 ms for sliding windows and
    /// sessions, whose end is inclusive; plus the gap, for sessions). Kafka Streams: a time
    /// window is open while `end > streamTime - grace`, a sliding window while
    /// `end >= streamTime - grace`, a session while `end >= streamTime - gap - grace`.
    fn close_delay(&self) -> i64 {
        match &self.kind {
            Kind::Time(w) => w.grace,
            Kind::Sliding(w) => w.grace.saturating_add(1),
            Kind::Session(w, _) => w.gap.saturating_add(w.grace).saturating_add(1),
        }
    }

    fn close_time(&self, w: Window) -> i64 {
        w.end.saturating_add(self.close_delay())
    }

    /// The timestamp of a window's result: its last millisecond.
    fn result_time(&self, w: Window) -> i64 {
        match &self.kind {
            Kind::Time(_) => w.end - 1,
            Kind::Sliding(_) | Kind::Session(..) => w.end,
        }
    }
}

impl<K, V, A> WindowedAggregate<K, V, A>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
    A: Clone + Send + 'static,
{
    fn forward(&self, ctx: &mut NodeContext<'_, '_>, key: &K, w: Window, agg: Option<A>) {
        let mut r = TypedRecord::new(
            Some(Windowed {
                key: key.clone(),
                window: w,
            }),
            agg,
        );
        r.timestamp = Some(self.result_time(w));
        let late_sink = match &self.late {
            LateRecords::Forward(sink) => Some(sink.as_str()),
            LateRecords::DeadLetter => None,
        };
        ctx.forward_except(late_sink, r);
    }

    /// Routes a record too late for every window it belongs to.
    fn late(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        record: &TypedRecord<K, V>,
        windows: &[Window],
        ts: i64,
        stream: i64,
    ) -> Result<(), ProcessError> {
        let list = windows
            .iter()
            .map(|w| format!("{}-{}", w.start, w.end))
            .collect::<Vec<_>>()
            .join(",");
        match &self.late {
            LateRecords::DeadLetter => {
                let reason = format!(
                    "late record: event time {ts} is past the close time of every window it belongs to ({list}; close = end + {} ms) at stream time {stream}",
                    self.close_delay()
                );
                ctx.dead_letter_late(reason, &[("late.windows", list)], stream);
            }
            LateRecords::Forward(child) => {
                crate::telemetry::late_record(ctx.node_name());
                let mut record = record.clone();
                record
                    .headers
                    .push(("eosflow.late.windows".into(), list.into_bytes()));
                record.headers.push((
                    "eosflow.late.stream.time".into(),
                    stream.to_string().into_bytes(),
                ));
                ctx.forward_to(child, record);
            }
        }
        Ok(())
    }

    /// Retention: deletes the windows whose close time plus retention is at or before `now`
    /// (retention 0: a window goes as soon as it is closed, as its close timer deletes it).
    /// The store deletes the windows ending before the cutoff.
    fn expire(&self, ctx: &mut NodeContext<'_, '_>, now: i64) -> Result<(), ProcessError> {
        let cutoff = now
            .saturating_sub(self.close_delay())
            .saturating_sub(self.kept())
            .saturating_add(1);
        let mut store = ctx.window_store(&self.store)?;
        match &self.kind {
            Kind::Time(_) => store.expire(cutoff, self.expire_per_call()).map(drop),
            Kind::Sliding(_) => store
                .expire_with(cutoff, EXPIRE_PER_CALL, Beside::Latest)
                .map(drop),
            Kind::Session(..) => store
                .expire_with(cutoff, EXPIRE_PER_CALL, Beside::Session)
                .map(drop),
        }
    }

    /// How long a closed window stays: the retention, for sliding windows at least twice the
    /// time difference (a record within grace reads the windows up to `2 · timeDifference`
    /// before it, Kafka Streams' `fetch(t - 2·timeDifference, t + 1)`).
    fn kept(&self) -> i64 {
        match &self.kind {
            Kind::Sliding(w) => self.retention.max(w.time_difference.saturating_mul(2)),
            _ => self.retention,
        }
    }

    /// At most how many windows one call deletes: [`EXPIRE_PER_CALL`], or twice what one
    /// record can create when that is more (hopping windows with `size / advance > 32`), so
    /// that expiry outruns creation and the store stays bounded by the open windows.
    fn expire_per_call(&self) -> usize {
        match &self.kind {
            Kind::Time(w) => EXPIRE_PER_CALL.max(w.windows_per_record().saturating_mul(2)),
            Kind::Sliding(_) | Kind::Session(..) => EXPIRE_PER_CALL,
        }
    }

    /// A window whose close cannot produce a result (its value or key does not decode): the
    /// window is deleted so no orphan stays in the store, and the timer is dead-lettered
    /// (`permanent`, not redrivable) with the reason.
    fn abandon(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &Timer,
        err: &ProcessError,
    ) -> Result<(), ProcessError> {
        ctx.window_store(&self.store)?.discard_raw(&timer.key)?;
        ctx.give_up_timer(format!(
            "window store {}: the window closing at {} cannot be read ({}); it was deleted without a result",
            self.store.name(),
            timer.due_ms,
            err.message()
        ));
        Ok(())
    }

    /// A record of fixed windows.
    fn process_time(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        windows: &TimeWindows,
        record: &TypedRecord<K, V>,
        (key, value, ts, stream): (&K, &V, i64, i64),
    ) -> Result<(), ProcessError> {
        let all = windows.windows_for(ts);
        let is_open = |w: &Window| self.close_time(*w) > stream;
        if !all.iter().any(is_open) {
            return self.late(ctx, record, &all, ts, stream);
        }
        let k = self.key_bytes(key)?;
        for w in all.into_iter().filter(is_open) {
            // The window's store key, built once: read, write, then moved into its timer.
            let dk = data_key(&k, w.start);
            let mut store = ctx.window_store(&self.store)?;
            // One read per window: its value and end go to the write.
            let previous = store.fetch_raw(&dk)?;
            let previous_end = previous.as_ref().map(|(pw, _)| pw.end);
            let agg = match previous {
                Some((_, a)) => (self.aggregate)(key, value, a),
                None => (self.aggregate)(key, value, (self.init)()),
            };
            store.put_read_at(&k, &dk, w, previous_end, &agg)?;
            self.after_update(ctx, key, (w, dk), agg, previous_end.is_none())?;
        }
        Ok(())
    }

    /// Forwards an update, or schedules the close of a new window.
    /// What follows a window's update: its result forwarded, or its close timer scheduled when
    /// the window is new (`dk`: the window's store key, which the timer carries).
    fn after_update(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        key: &K,
        (w, dk): (Window, Vec<u8>),
        agg: A,
        new: bool,
    ) -> Result<(), ProcessError> {
        match self.emit {
            EmitStrategy::OnWindowUpdate => {
                self.forward(ctx, key, w, Some(agg));
                Ok(())
            }
            EmitStrategy::OnWindowClose if new => {
                ctx.schedule(Timer::event_time(dk, self.close_time(w)))
            }
            EmitStrategy::OnWindowClose => Ok(()),
        }
    }

    fn key_bytes(&self, key: &K) -> Result<Vec<u8>, ProcessError> {
        self.store.key_serde().serialize(key).map_err(|e| {
            ProcessError::permanent(format!("window store {} key: {e}", self.store.name()))
        })
    }

    fn store_key(&self, key: &K, start: i64) -> Result<Vec<u8>, ProcessError> {
        Ok(data_key(&self.key_bytes(key)?, start))
    }

    /// A record of sliding windows: Kafka Streams' `KStreamSlidingWindowAggregate`
    /// (`processInOrder`, then `createWindows`) without its early-record special case. The
    /// key's windows starting in `t - 2·timeDifference ..= t + 1` are read once: those
    /// containing `t` are updated; the previous record's right window, the record's left
    /// window and its right window are created when missing and not empty. A closed window is
    /// neither updated nor created.
    fn process_sliding(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        windows: &SlidingWindows,
        record: &TypedRecord<K, V>,
        (key, value, ts, stream): (&K, &V, i64, i64),
    ) -> Result<(), ProcessError> {
        let td = windows.time_difference;
        let (left_start, _) = windows.span(ts).map_err(ProcessError::permanent)?;
        // The latest window that can contain `t` is `[t, t + td]`: closed, the record is late.
        let last = Window {
            start: ts,
            end: ts + td,
        };
        let own = Window {
            start: left_start,
            end: ts,
        };
        let listed: &[Window] = if td == 0 { &[own] } else { &[own, last] };
        if self.close_time(last) <= stream {
            return self.late(ctx, record, listed, ts, stream);
        }
        let k = self.key_bytes(key)?;
        let found = ctx.window_store(&self.store)?.sliding_range(
            &k,
            left_start.saturating_sub(td),
            ts + 1,
        )?;
        let n = self.neighbours(found, ts)?;
        let fold = |seed: Option<(A, i64)>| match seed {
            Some((agg, latest)) => ((self.aggregate)(key, value, agg), latest.max(ts)),
            None => ((self.aggregate)(key, value, (self.init)()), ts),
        };
        // Whether the record went into any window (each of these contains it).
        let mut counted = false;
        for (w, agg, latest) in n.containing {
            counted |=
                self.put_sliding(ctx, key, (&k, w, stream), fold(Some((agg, latest))), false)?;
        }
        // The previous record's right window, when this record is its first later one.
        if let Some(previous) = n.previous {
            let start = previous + 1;
            if !n.starts.contains(&start) && start + td >= ts {
                let w = Window {
                    start,
                    end: start + td,
                };
                counted |= self.put_sliding(ctx, key, (&k, w, stream), fold(None), true)?;
            }
        }
        if !n.left_exists {
            let w = Window {
                start: left_start,
                end: ts,
            };
            let seed = match (n.previous, n.left_agg) {
                (Some(p), Some(agg)) if p >= left_start => Some((agg, ts)),
                _ => None,
            };
            counted |= self.put_sliding(ctx, key, (&k, w, stream), fold(seed), true)?;
        }
        // The record's right window holds the later records it found: created with their
        // aggregate, without this record.
        if let Some((agg, latest)) = n.right_agg.filter(|(_, l)| *l > ts) {
            if !n.right_exists {
                let start = ts + 1;
                let w = Window {
                    start,
                    end: start + td,
                };
                self.put_sliding(ctx, key, (&k, w, stream), (agg, latest), true)?;
            }
        }
        if !counted {
            // Its left window closed and no open window holds it: aggregated nowhere, it is
            // late (Kafka Streams skips it with a dropped-records count for each closed
            // window, `KStreamSlidingWindowAggregateTest#shouldLogAndMeterWhenSkippingExpiredWindowByGrace`).
            return self.late(ctx, record, listed, ts, stream);
        }
        Ok(())
    }

    /// Sorts the windows a sliding-window record at `ts` found (in start order) as Kafka
    /// Streams' `processInOrder` does.
    fn neighbours(
        &self,
        found: Vec<(Window, A, i64)>,
        ts: i64,
    ) -> Result<Neighbours<A>, ProcessError> {
        let mut n = Neighbours {
            containing: Vec::new(),
            starts: Vec::with_capacity(found.len()),
            left_agg: None,
            right_agg: None,
            left_exists: false,
            right_exists: false,
            previous: None,
        };
        for (w, agg, latest) in found {
            n.starts.push(w.start);
            if w.end < ts {
                n.left_agg = Some(agg);
                n.previous = Some(latest);
            } else if w.end == ts {
                n.left_exists = true;
                if latest < ts {
                    n.previous = Some(latest);
                }
                n.containing.push((w, agg, latest));
            } else if w.start <= ts {
                n.right_agg = Some((agg.clone(), latest));
                n.containing.push((w, agg, latest));
            } else if w.start == ts + 1 {
                n.right_exists = true;
            } else {
                return Err(ProcessError::permanent(format!(
                    "window store {}: unexpected sliding window {}-{} for a record at {ts}",
                    self.store.name(),
                    w.start,
                    w.end
                )));
            }
        }
        Ok(n)
    }

    /// Writes a sliding window's new aggregate and latest record time, and forwards it or
    /// schedules its close (`new`: it was not in the store); a closed window is left alone.
    /// Whether it wrote the window (false: closed).
    fn put_sliding(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        key: &K,
        (k, w, stream): (&[u8], Window, i64),
        (agg, latest): (A, i64),
        new: bool,
    ) -> Result<bool, ProcessError> {
        if self.close_time(w) <= stream {
            return Ok(false);
        }
        let previous_end = (!new).then_some(w.end);
        ctx.window_store(&self.store)?
            .put_sliding(k, w, previous_end, (&agg, latest))?;
        self.after_update(ctx, key, (w, data_key(k, w.start)), agg, new)?;
        Ok(true)
    }

    /// A record of session windows: merged with the open sessions within the gap of it.
    fn process_session(
        &self,
        ctx: &mut NodeContext<'_, '_>,
        (windows, merge): (&SessionWindows, &Merger<K, A>),
        record: &TypedRecord<K, V>,
        (key, value, ts, stream): (&K, &V, i64, i64),
    ) -> Result<(), ProcessError> {
        let own = Window { start: ts, end: ts };
        let k = self.key_bytes(key)?;
        let mut store = ctx.window_store(&self.store)?;
        // Only the sessions within the gap of `ts` (by the session index: bounded by what can
        // merge, never by the key's retained sessions), and of those the open ones.
        let near: Vec<(Window, A)> = store
            .sessions_near(
                &k,
                ts.saturating_sub(windows.gap),
                ts.saturating_add(windows.gap),
            )?
            .into_iter()
            .filter(|(w, _)| self.close_time(*w) > stream)
            .collect();
        let mut session = own;
        for (w, _) in &near {
            session.start = session.start.min(w.start);
            session.end = session.end.max(w.end);
        }
        // Late is judged on the session the record lands in, as Kafka Streams does: a record
        // inside a session still open joins it, however far its own timestamp is behind.
        if self.close_time(session) <= stream {
            return self.late(ctx, record, &[own], ts, stream);
        }
        let mut agg = (self.init)();
        for (_, a) in &near {
            agg = merge(key, agg, a.clone());
        }
        let agg = (self.aggregate)(key, value, agg);
        // Every session the record merged into another window is replaced: on update each is
        // forwarded as a tombstone, as Kafka Streams does (`store.remove(session)` and its
        // forward of `(session, null)`), the one that keeps its start included — a session
        // that grows at its end replaces `[start, end]` by `[start, end']`, and a table keyed
        // by the windowed key must drop the old row. A record that lands exactly on a
        // one-record session (`[t, t]`) replaces nothing.
        let replaced: Vec<Window> = if session == own {
            Vec::new()
        } else {
            near.iter().map(|(w, _)| *w).collect()
        };
        for w in &replaced {
            if w.start != session.start {
                store.remove_session(&k, *w)?;
            }
        }
        store.put_session(&k, session, &agg)?;
        for w in replaced {
            match self.emit {
                EmitStrategy::OnWindowUpdate => self.forward(ctx, key, w, None),
                EmitStrategy::OnWindowClose if w.start != session.start => {
                    ctx.cancel(TimerKind::EventTime, &self.store_key(key, w.start)?)?;
                }
                EmitStrategy::OnWindowClose => {}
            }
        }
        if self.emit == EmitStrategy::OnWindowClose {
            // A session that grew moves its close.
            let k = self.store_key(key, session.start)?;
            return ctx.schedule(Timer::event_time(k, self.close_time(session)));
        }
        // On update (on close returned above): the merged session's result.
        self.forward(ctx, key, session, Some(agg));
        Ok(())
    }
}

impl<K, V, A> NodeProcessor<K, V> for WindowedAggregate<K, V, A>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
    A: Clone + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        record: TypedRecord<K, V>,
    ) -> Result<(), ProcessError> {
        // The key and value are borrowed from the record, never cloned (a late record, rare,
        // is cloned to be handed on).
        let (Some(key), Some(value)) = (&record.key, &record.value) else {
            return Err(ProcessError::permanent(
                "a windowed aggregate needs a key and a value",
            ));
        };
        let ts = ctx
            .event_time_ms()
            .ok_or_else(|| ProcessError::permanent("a windowed aggregate needs an event time"))?;
        let stream = ctx.stream_time_ms().unwrap_or(ts).max(ts);
        let at = (key, value, ts, stream);
        match &self.kind {
            Kind::Time(w) => self.process_time(ctx, w, &record, at)?,
            Kind::Sliding(w) => self.process_sliding(ctx, w, &record, at)?,
            Kind::Session(w, m) => self.process_session(ctx, (w, m), &record, at)?,
        }
        if self.emit == EmitStrategy::OnWindowUpdate {
            self.expire(ctx, stream)?;
        }
        Ok(())
    }

    /// A window closed: its final result is forwarded; it is deleted now (no retention) or
    /// with the windows whose retention ended.
    fn on_timer(
        &mut self,
        ctx: &mut NodeContext<'_, '_>,
        timer: &Timer,
    ) -> Result<(), ProcessError> {
        let store = ctx.window_store(&self.store)?;
        let found = match store.fetch_raw(&timer.key) {
            Ok(found) => found,
            // A store that cannot be read now: the call is retried, then dead-lettered.
            Err(e @ ProcessError::Transient(_)) => return Err(e),
            Err(e) => return self.abandon(ctx, timer, &e),
        };
        let Some((w, agg)) = found else {
            return Ok(());
        };
        let key = parse_data_key(&timer.key)
            .ok_or_else(|| ProcessError::permanent("a window timer's key is not a window's"))
            .and_then(|(k, _)| {
                self.store.key_serde().deserialize(k).map_err(|e| {
                    ProcessError::permanent(format!("window store {} key: {e}", self.store.name()))
                })
            });
        let key = match key {
            Ok(key) => key,
            Err(e) => return self.abandon(ctx, timer, &e),
        };
        let mut store = ctx.window_store(&self.store)?;
        if self.kept() == 0 {
            match (&self.kind, parse_data_key(&timer.key)) {
                (Kind::Session(..), Some((k, _))) => store.remove_session(k, w)?,
                (Kind::Sliding(_), _) => store.remove_sliding(&timer.key, w)?,
                _ => store.remove_read(&timer.key, w)?,
            }
        } else {
            self.expire(ctx, timer.due_ms)?;
        }
        self.forward(ctx, &key, w, Some(agg));
        Ok(())
    }
}
