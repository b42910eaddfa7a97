//! The Kafka-free half of the runtime: what one record does inside an open batch (dedup,
//! per-key order behind the retry ladder, the handler call, routing a failure up the ladder
//! or to the DLT — see `handle.rs`), written against an [`Output`] instead of a producer.
//!
//! The exactly-once runtime drives it with the transactional producer as its output; the
//! [`crate::testing::TopologyTestDriver`] drives the same code with an in-memory output and
//! its own clock, so a test sees exactly the routing the runtime would do.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use super::runtime::{RunSummary, RuntimeOptions};
use super::stores::{ExpiryClocks, StoreView};
use super::timers::{self, Lane, TimerKind};
use crate::record::{Emit, ProcessError};
use crate::retry::dlt::DltClass;
use crate::sink::SinkError;
use crate::state::{Overlay, Store};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Where the per-record logic sends records: the transactional producer in the runtime, the
/// driver's in-memory topics in tests.
pub(crate) trait Output {
    /// A handler's output (headers: its own, then the envelope).
    fn emit<'h>(
        &mut self,
        topic: &str,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    ) -> Result<(), SinkError>;

    /// A forward to a retry level or a dead-letter topic, to the input's partition.
    fn forward(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(String, Vec<u8>)],
    ) -> Result<(), SinkError>;
}

/// The envelope's fresh values of each output: its `occurred_at` text and its id.
pub(crate) trait Stamps {
    /// Now as RFC 3339 text with milliseconds.
    fn occurred_at(&mut self) -> &str;
    /// A new output id.
    fn new_id(&mut self) -> uuid::Uuid;
}

/// One assigned partition number: its stores and the open batch's writes, shared by the
/// tasks of its sub-topologies — each sub-topology on this partition number is a task of its
/// own, with its own stream time, timer lanes and (in the runtime) timestamp alignment.
pub(crate) struct Task {
    /// The partition number.
    pub(crate) partition: i32,
    pub(crate) store: Store,
    pub(crate) overlay: Overlay,
    pub(crate) last_purge: Instant,
    /// Whether the committed store holds any parked key: almost never, and then the per-record
    /// lookup of the record's key in `parked` is skipped.
    pub(crate) store_has_parked: bool,
    /// Parked keys whose followers are drained a chunk per transaction (see `drain_parked`).
    pub(crate) draining: BTreeSet<Vec<u8>>,
    /// The processor's named stores of this partition, in [`super::Application::stores`] order.
    pub(crate) named: Vec<NamedStore>,
    /// Per named store (same order): where its expiry index's next due entries are (see
    /// [`super::expiry`]).
    pub(crate) expiry: Vec<StoreExpiry>,
    /// Entries expired in the open batch, against [`super::expiry::MAX_EXPIRED_PER_BATCH`].
    pub(crate) expired_in_batch: usize,
    /// Per sub-topology: its task's clocks (stream time, timers, upstream watermarks).
    pub(crate) clocks: Vec<TaskClock>,
    /// How many partitions the tasks writing to this partition's repartition topics have
    /// (the inputs' count): a task reading a repartition topic takes the least stream time
    /// of all of them as its own. `None` (the test driver, which pipes every repartition
    /// record back at once): a record's own event time moves it, as for any input.
    pub(crate) upstream_partitions: Option<usize>,
    /// The next offset of each input record the open batch processed behind a repartition
    /// ([`Origin`]), by (sub-topology, topic, partition): published to the task's query
    /// positions once the batch commits.
    pub(crate) batch_origins: BTreeMap<(usize, String, i32), i64>,
}

/// The expiry index of one named store of a partition (entries of stores with a TTL, see
/// [`super::StoreHandle::with_ttl`]), as the open batch sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoreExpiry {
    /// The committed store holds expiry entries, or the open batch wrote some: without, the
    /// store is never swept and writes through handles without a TTL read no index.
    pub(crate) indexed: bool,
    /// Per sub-topology, per clock ([`TimerKind::index`]): no entry due before this is
    /// pending, so a sweep starts here and "is anything due" is one compare. Exact after each
    /// commit, like [`TaskClock::scan_from`].
    pub(crate) scan_from: Vec<[i64; 2]>,
}

/// The clocks of one task (one sub-topology on one partition number).
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskClock {
    /// Stream time as the open batch sees it (the largest event time seen; for a task reading
    /// a repartition topic, the upstream tasks' least stream time).
    pub(crate) stream_time: Option<i64>,
    /// Stream time as committed.
    committed_stream_time: Option<i64>,
    /// Per timer kind: no timer of that kind due before this is pending (as the open batch sees
    /// it), so a firing scan starts here instead of at the queue's head, where the tombstones of
    /// fired timers wait for compaction. Exact after each commit (the next due time, or
    /// `i64::MAX` with none pending): the idle loop's "is a wall-clock timer due" is one compare.
    pub(crate) scan_from: [i64; 2],
    /// For a task reading a repartition topic: what each upstream partition said of itself
    /// (its stream time, and whether it is idle), as the open batch sees it.
    upstream: BTreeMap<i32, Upstream>,
    /// The same, as committed.
    committed_upstream: BTreeMap<i32, Upstream>,
}

/// What an upstream task (the writer of a repartition topic on one partition number) said of
/// itself in the headers of its last record to this task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Upstream {
    /// Its stream time (none before it saw an event time).
    pub(crate) stream_time: Option<i64>,
    /// Read to the end of its inputs, with nothing left to write: not waited for.
    pub(crate) idle: bool,
}

impl Upstream {
    fn encode(self) -> Vec<u8> {
        let mut v = self.stream_time.unwrap_or(i64::MIN).to_be_bytes().to_vec();
        v.push(u8::from(self.idle));
        v
    }

    fn decode(v: &[u8]) -> Option<Self> {
        let t = i64::from_be_bytes(v.get(..8)?.try_into().ok()?);
        Some(Self {
            stream_time: (t != i64::MIN).then_some(t),
            idle: v.get(8).is_some_and(|b| *b != 0),
        })
    }
}

/// The watermark headers of a repartition record (see [`crate::topology`]'s repartitions):
/// the writer's partition number and stream time, and whether the record only carries them.
/// Public for the `hot_path` bench only (through `eosflow::internals::processor::engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The writing task's partition number.
    pub(crate) from: i32,
    /// What it says of itself.
    pub(crate) upstream: Upstream,
    /// A record with no key or value that only carries the watermark: never processed.
    pub(crate) only: bool,
}

/// Header: the writing task's partition number (decimal).
pub(crate) const MARK_FROM: &str = "eosflow.wm.from";
/// Header: the writing task's stream time (ms, decimal).
pub(crate) const MARK_TIME: &str = "eosflow.wm";
/// Header: `1` when the writer is idle (read to the end of its inputs).
pub(crate) const MARK_IDLE: &str = "eosflow.wm.idle";
/// Header: `1` on a record that only carries the watermark.
pub(crate) const MARK_ONLY: &str = "eosflow.wm.only";

impl Mark {
    /// The mark a record's headers carry, if any.
    pub(crate) fn of(record: &crate::record::Record<'_>) -> Option<Self> {
        let number = |name: &str| -> Option<i64> {
            std::str::from_utf8(record.header(name)?).ok()?.parse().ok()
        };
        let from = i32::try_from(number(MARK_FROM)?).ok()?;
        Some(Self {
            from,
            upstream: Upstream {
                stream_time: number(MARK_TIME),
                idle: number(MARK_IDLE) == Some(1),
            },
            only: number(MARK_ONLY) == Some(1),
        })
    }

    /// Replaces `headers`' watermark with the writing task's, on a record it writes to a
    /// repartition topic: its partition `from` (none when negative: not a task's) and its
    /// `stream_time`. The reading task's stream time is the least of its writers' (see the
    /// architecture's task model).
    pub fn stamp(headers: &mut Vec<(String, Vec<u8>)>, from: i32, stream_time: Option<i64>) {
        // Every mark header (`MARK_*`) starts so.
        headers.retain(|(k, _)| !k.starts_with("eosflow.wm"));
        if from >= 0 {
            let upstream = Upstream {
                stream_time,
                idle: false,
            };
            headers.extend(Self::headers(from, upstream, false));
        }
    }

    /// The headers that carry `upstream` from partition `from` (`only`: a mark-only record).
    pub(crate) fn headers(from: i32, upstream: Upstream, only: bool) -> Vec<(String, Vec<u8>)> {
        let mut h = vec![(MARK_FROM.to_string(), from.to_string().into_bytes())];
        if let Some(t) = upstream.stream_time {
            h.push((MARK_TIME.to_string(), t.to_string().into_bytes()));
        }
        if upstream.idle {
            h.push((MARK_IDLE.to_string(), b"1".to_vec()));
        }
        if only {
            h.push((MARK_ONLY.to_string(), b"1".to_vec()));
        }
        h
    }
}

/// Header of a repartition record: the input record it comes from, `<partition>:<offset>:<topic>`
/// (a topic name has no `:`). The task reading it records that input's position for its
/// stores' queries, so a client that wrote to the input reads its own write behind the
/// repartition (see [`crate::query::Queried::reached`]).
pub(crate) const ORIGIN: &str = "eosflow.origin";

/// The input record (topic, partition, offset) a repartition record comes from. Public for the
/// `hot_path` bench only (through `eosflow::internals::processor::engine`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

impl Origin {
    /// The origin a record's headers carry, if any.
    pub(crate) fn of(record: &crate::record::Record<'_>) -> Option<Self> {
        let v = std::str::from_utf8(record.header(ORIGIN)?).ok()?;
        let mut parts = v.splitn(3, ':');
        let partition = parts.next()?.parse().ok()?;
        let offset = parts.next()?.parse().ok()?;
        let topic = parts.next().filter(|t| !t.is_empty())?.to_string();
        Some(Self {
            topic,
            partition,
            offset,
        })
    }

    /// Sets `headers`' origin to `input`'s own origin, or else to `input` itself when it was
    /// read from an input (not a retry level: its offset there is not the one written).
    pub fn stamp(headers: &mut Vec<(String, Vec<u8>)>, input: &crate::record::Record<'_>) {
        headers.retain(|(k, _)| k != ORIGIN);
        let value = match Self::of(input) {
            Some(o) => format!("{}:{}:{}", o.partition, o.offset, o.topic),
            None if input.offset >= 0
                && !input.topic.is_empty()
                && crate::retry::base_and_level(input.topic).1 == 0 =>
            {
                format!("{}:{}:{}", input.partition, input.offset, input.topic)
            }
            None => return,
        };
        headers.push((ORIGIN.to_string(), value.into_bytes()));
    }
}

/// The default store's key prefix in [`crate::state::Column::Time`] of the origins sub-topology
/// `sub` has processed: `pos.<sub>.` then `<partition>:<topic>`, the next offset as 8 bytes.
fn origin_prefix(sub: usize) -> String {
    format!("pos.{sub}.")
}

impl TaskClock {
    /// The least stream time of the `n` upstream partitions, the idle ones aside (all idle:
    /// the greatest); none while an upstream partition that is not idle has said nothing.
    fn watermark(&self, n: usize) -> Option<i64> {
        let (mut least, mut greatest, mut active) = (i64::MAX, None::<i64>, false);
        for u in 0..n {
            let up = i32::try_from(u).ok().and_then(|u| self.upstream.get(&u))?;
            greatest = greatest.max(up.stream_time);
            if up.idle {
                continue;
            }
            least = least.min(up.stream_time?);
            active = true;
        }
        if active {
            Some(least)
        } else {
            greatest
        }
    }
}

/// What a successful handler call did: its default-store writes, each named store's, its
/// emits, and whether it asked for its input to be dead-lettered.
pub(crate) type CallParts = (
    Overlay,
    Vec<Overlay>,
    Vec<Emit>,
    Option<super::api::DeadLetterRequest>,
);

/// The default store's key of sub-topology 0's stream time in [`crate::state::Column::Time`]
/// (the key stores written before sub-topologies hold); sub-topology `s` uses `stream.<s>`.
const STREAM_TIME_KEY: &[u8] = b"stream";

/// The key of sub-topology `sub`'s stream time.
pub(crate) fn stream_time_key(sub: usize) -> Vec<u8> {
    if sub == 0 {
        STREAM_TIME_KEY.to_vec()
    } else {
        format!("stream.{sub}").into_bytes()
    }
}

/// The key prefix of sub-topology `sub`'s upstream watermarks: `wm.<sub>.` then the upstream
/// partition number (decimal).
fn upstream_prefix(sub: usize) -> String {
    format!("wm.{sub}.")
}

impl Task {
    /// The task of partition `partition` over an opened (and restored) default store and its
    /// named stores, for `subs` sub-topologies.
    pub(crate) fn open(
        partition: i32,
        store: Store,
        named: Vec<NamedStore>,
        subs: usize,
    ) -> Result<Self, crate::state::StateError> {
        let mut clocks = Vec::with_capacity(subs.max(1));
        for sub in 0..subs.max(1) {
            let stream_time = store
                .get(crate::state::Column::Time, &stream_time_key(sub))?
                .and_then(|v| Some(i64::from_be_bytes(v.as_slice().try_into().ok()?)));
            let prefix = upstream_prefix(sub);
            let mut upstream = BTreeMap::new();
            let bounds = crate::state::merge::prefix_bounds(prefix.as_bytes());
            for item in store.range(crate::state::Column::Time, &bounds)? {
                let (k, v) = item?;
                let v = v.unwrap_or_default();
                let from = std::str::from_utf8(k.get(prefix.len()..).unwrap_or_default())
                    .ok()
                    .and_then(|u| u.parse::<i32>().ok());
                if let (Some(from), Some(up)) = (from, Upstream::decode(&v)) {
                    upstream.insert(from, up);
                }
            }
            clocks.push(TaskClock {
                stream_time,
                committed_stream_time: stream_time,
                scan_from: [i64::MIN; 2],
                committed_upstream: upstream.clone(),
                upstream,
            });
        }
        let mut expiry = Vec::with_capacity(named.len());
        for n in &named {
            expiry.push(StoreExpiry {
                indexed: !n.table && !n.store.is_empty(crate::state::Column::TimerIndex)?,
                scan_from: vec![[i64::MIN; 2]; clocks.len()],
            });
        }
        let mut task = Self {
            partition,
            store_has_parked: !store.is_empty(crate::state::Column::Parked)?,
            draining: crate::retry::parked::draining_keys(&store)?,
            store,
            overlay: Overlay::default(),
            last_purge: Instant::now(),
            named,
            expiry,
            expired_in_batch: 0,
            clocks,
            upstream_partitions: None,
            batch_origins: BTreeMap::new(),
        };
        task.refresh_timers()?;
        for i in 0..task.named.len() {
            task.refresh_expiry(i)?;
        }
        Ok(task)
    }

    /// Sets named store `i`'s expiry scan starts to its next due entries (one seek per lane
    /// of a store with an index; none for a store without).
    pub(crate) fn refresh_expiry(&mut self, i: usize) -> Result<(), crate::state::StateError> {
        let (Some(n), Some(e)) = (self.named.get(i), self.expiry.get_mut(i)) else {
            return Ok(());
        };
        for (sub, from) in e.scan_from.iter_mut().enumerate() {
            for kind in TimerKind::ALL {
                let slot = &mut from[kind.index()];
                if !e.indexed {
                    *slot = i64::MAX;
                    continue;
                }
                let lane = Lane::new(kind, sub);
                let bounds = timers::due_bounds(lane, timers::from_due(lane, *slot), i64::MAX);
                *slot = timers::first(&n.overlay, &n.store, &bounds)?
                    .map_or(i64::MAX, |(_, t)| t.due_ms);
            }
        }
        Ok(())
    }

    /// Whether an entry of a named store's expiry index is due: a wall-clock one at `now`, an
    /// event-time one at its task's stream time.
    pub(crate) fn expiry_due(&self, now: i64) -> bool {
        self.expiry.iter().filter(|e| e.indexed).any(|e| {
            e.scan_from.iter().enumerate().any(|(sub, [event, wall])| {
                *wall <= now || self.stream_time(sub).is_some_and(|s| *event <= s)
            })
        })
    }

    /// The stream time of sub-topology `sub`'s task, as the open batch sees it.
    pub(crate) fn stream_time(&self, sub: usize) -> Option<i64> {
        self.clocks.get(sub).and_then(|c| c.stream_time)
    }

    /// The latest stream time of this partition number's tasks.
    pub(crate) fn latest_stream_time(&self) -> Option<i64> {
        self.clocks.iter().filter_map(|c| c.stream_time).max()
    }

    /// Moves sub-topology `sub`'s stream time to `event_time` if it is later (written to the
    /// batch, so it commits with the record that moved it).
    pub(crate) fn observe(&mut self, sub: usize, event_time: Option<i64>) {
        let Some(t) = event_time else { return };
        let Some(clock) = self.clocks.get_mut(sub) else {
            return;
        };
        if clock.stream_time.is_some_and(|s| s >= t) {
            return;
        }
        clock.stream_time = Some(t);
        self.overlay.put(
            crate::state::Column::Time,
            &stream_time_key(sub),
            t.to_be_bytes().to_vec(),
        );
    }

    /// Takes what an upstream task says of itself (a repartition record's [`Mark`]) and moves
    /// sub-topology `sub`'s stream time to the upstream tasks' least one, if that is later.
    /// Without a known upstream partition count, the record's own `event_time` moves it.
    pub(crate) fn observe_upstream(&mut self, sub: usize, mark: &Mark, event_time: Option<i64>) {
        let Some(n) = self.upstream_partitions else {
            self.observe(sub, event_time);
            return;
        };
        let Some(clock) = self.clocks.get_mut(sub) else {
            return;
        };
        let said = mark.upstream;
        let before = clock.upstream.get(&mark.from).copied();
        let merged = Upstream {
            // Never back: a replayed or reordered mark says nothing newer.
            stream_time: said.stream_time.max(before.and_then(|b| b.stream_time)),
            idle: said.idle,
        };
        if before != Some(merged) {
            clock.upstream.insert(mark.from, merged);
            let key = format!("{}{}", upstream_prefix(sub), mark.from);
            self.overlay
                .put(crate::state::Column::Time, key.as_bytes(), merged.encode());
        }
        let watermark = clock.watermark(n);
        self.observe(sub, watermark);
    }

    /// Sub-topology `sub` processes a record coming from input record `origin` (through a
    /// repartition): its position is kept with the batch's writes, so it commits with them.
    pub(crate) fn note_origin(&mut self, sub: usize, origin: Origin) {
        let next = origin.offset.saturating_add(1);
        let key = format!(
            "{}{}:{}",
            origin_prefix(sub),
            origin.partition,
            origin.topic
        );
        let e = self
            .batch_origins
            .entry((sub, origin.topic, origin.partition))
            .or_insert(next);
        *e = (*e).max(next);
        let next = *e;
        self.overlay.put(
            crate::state::Column::Time,
            key.as_bytes(),
            next.to_be_bytes().to_vec(),
        );
    }

    /// The committed origins' next offsets, by sub-topology (what a task opened over this
    /// store reflects behind its repartitions).
    pub(crate) fn committed_origins(
        &self,
    ) -> Result<BTreeMap<usize, crate::query::Positions>, crate::state::StateError> {
        let mut out: BTreeMap<usize, crate::query::Positions> = BTreeMap::new();
        let bounds = crate::state::merge::prefix_bounds(b"pos.");
        for item in self.store.range(crate::state::Column::Time, &bounds)? {
            let (k, v) = item?;
            let parsed = std::str::from_utf8(k.get(4..).unwrap_or_default())
                .ok()
                .and_then(|rest| {
                    let (sub, rest) = rest.split_once('.')?;
                    let (p, topic) = rest.split_once(':')?;
                    let next = i64::from_be_bytes(v.as_deref()?.try_into().ok()?);
                    Some((sub.parse().ok()?, p.parse().ok()?, topic.to_string(), next))
                });
            if let Some((sub, p, topic, next)) = parsed {
                out.entry(sub).or_default().insert((topic, p), next);
            }
        }
        Ok(out)
    }

    /// Lowers sub-topology `sub`'s scan starts to the earliest timer `writes` schedule.
    pub(crate) fn note_scheduled(&mut self, sub: usize, writes: &Overlay) {
        let Some(clock) = self.clocks.get_mut(sub) else {
            return;
        };
        // Most calls schedule nothing: no bounds built per record then.
        if writes.column(crate::state::Column::Timer).next().is_none() {
            return;
        }
        for kind in TimerKind::ALL {
            if let Some(at) = timers::earliest_scheduled(writes, Lane::new(kind, sub)) {
                let from = &mut clock.scan_from[kind.index()];
                *from = (*from).min(at);
            }
        }
    }

    /// Sets each lane's scan start to its next pending due time (one seek per lane), as the
    /// open batch sees it.
    pub(crate) fn refresh_timers(&mut self) -> Result<(), crate::state::StateError> {
        for (sub, clock) in self.clocks.iter_mut().enumerate() {
            for kind in TimerKind::ALL {
                let lane = Lane::new(kind, sub);
                let from = timers::from_due(lane, clock.scan_from[kind.index()]);
                let bounds = timers::due_bounds(lane, from, i64::MAX);
                clock.scan_from[kind.index()] = timers::first(&self.overlay, &self.store, &bounds)?
                    .map_or(i64::MAX, |(_, t)| t.due_ms);
            }
        }
        Ok(())
    }

    /// Runs one handler call (`what`: `handler` or `timer callback`) in sub-topology `sub`'s
    /// task, with a context over this partition's stores: its writes and emits, or its
    /// failure (a panic is a permanent one).
    pub(crate) fn call(
        &self,
        sub: usize,
        id: Option<&[u8]>,
        now: i64,
        event_time: Option<i64>,
        what: &str,
        f: impl FnOnce(&mut super::Context<'_>) -> Result<(), ProcessError>,
    ) -> Result<CallParts, ProcessError> {
        let views = self
            .named
            .iter()
            .zip(&self.expiry)
            .map(|(n, e)| {
                StoreView::new(&n.name, &n.store, &n.overlay)
                    .read_only(n.table)
                    .versioned(n.history_ms)
                    .expiring(ExpiryClocks {
                        sub,
                        stream_time_ms: self.stream_time(sub),
                        wall_clock_ms: now,
                        indexed: e.indexed,
                    })
            })
            .collect();
        let mut ctx = super::Context::new(&self.store, &self.overlay, id)
            .with(views, now)
            .at(event_time, self.stream_time(sub))
            .in_task(sub, self.partition);
        match catch_unwind(AssertUnwindSafe(|| f(&mut ctx))) {
            Ok(Ok(())) => Ok(ctx.into_parts()),
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(ProcessError::permanent(format!(
                "{what} panicked: {}",
                panic_message(&panic)
            ))),
        }
    }

    /// Adds a successful call's writes in sub-topology `sub`'s task (default store, then
    /// each named store) to the batch.
    pub(crate) fn absorb(&mut self, sub: usize, writes: Overlay, named: Vec<Overlay>) {
        self.note_scheduled(sub, &writes);
        self.overlay.absorb(writes);
        for ((n, e), w) in self.named.iter_mut().zip(&mut self.expiry).zip(named) {
            if w.column(crate::state::Column::TimerIndex).next().is_some() {
                e.indexed = true;
                if let Some(from) = e.scan_from.get_mut(sub) {
                    for kind in TimerKind::ALL {
                        if let Some(at) = timers::earliest_scheduled(&w, Lane::new(kind, sub)) {
                            from[kind.index()] = from[kind.index()].min(at);
                        }
                    }
                }
            }
            n.overlay.absorb(w);
        }
    }

    /// Whether a timer of one of this partition's tasks is due: a wall-clock one at `now`, or
    /// an event-time one left over by a batch that reached its limit.
    pub(crate) fn timer_due(&self, now: i64) -> bool {
        self.clocks.iter().any(|c| {
            let [event, wall] = c.scan_from;
            wall <= now || c.stream_time.is_some_and(|s| event <= s)
        }) || self.expiry_due(now)
    }
}

impl Task {
    /// After the batch's transaction committed: every store's overlay goes to RocksDB with the
    /// next changelog offset `next(store)` reached (store 0 is the default one, `i + 1` the
    /// named store `i`; `None` keeps the checkpoint).
    pub(crate) fn apply_committed(
        &mut self,
        next: impl Fn(usize) -> Option<i64>,
    ) -> Result<(), crate::state::StateError> {
        self.expired_in_batch = 0;
        for i in 0..self.named.len() {
            let Some(n) = self.named.get_mut(i) else {
                continue;
            };
            if !n.overlay.is_empty() {
                let reindexed = n
                    .overlay
                    .column(crate::state::Column::TimerIndex)
                    .next()
                    .is_some();
                n.store.apply(&n.overlay, next(i + 1))?;
                n.overlay.clear();
                if reindexed {
                    let indexed = !n.store.is_empty(crate::state::Column::TimerIndex)?;
                    if let Some(e) = self.expiry.get_mut(i) {
                        e.indexed = indexed;
                    }
                    self.refresh_expiry(i)?;
                }
            }
        }
        if self.overlay.is_empty() {
            return Ok(());
        }
        self.store.apply(&self.overlay, next(0))?;
        for c in &mut self.clocks {
            c.committed_stream_time = c.stream_time;
            c.committed_upstream.clone_from(&c.upstream);
        }
        if self
            .overlay
            .column(crate::state::Column::Parked)
            .next()
            .is_some()
        {
            self.store_has_parked = !self.store.is_empty(crate::state::Column::Parked)?;
        }
        self.overlay.clear();
        self.refresh_timers()
    }

    /// Drops the open batch's writes of every store (an aborted batch). Stream time goes back
    /// to the committed one; the timers' scan starts go back to the queues' heads (the next
    /// batch finds what is due from there).
    pub(crate) fn drop_batch(&mut self) {
        self.expired_in_batch = 0;
        for e in &mut self.expiry {
            e.scan_from.iter_mut().for_each(|f| *f = [i64::MIN; 2]);
        }
        for c in &mut self.clocks {
            c.stream_time = c.committed_stream_time;
            c.upstream.clone_from(&c.committed_upstream);
            c.scan_from = [i64::MIN; 2];
        }
        self.overlay.clear();
        self.batch_origins.clear();
        for n in &mut self.named {
            n.overlay.clear();
        }
    }
}

/// One named store of one partition: its own RocksDB store, changelog and batch overlay.
pub(crate) struct NamedStore {
    /// The store's name.
    pub(crate) name: String,
    /// Committed state.
    pub(crate) store: Store,
    /// The open batch's writes.
    pub(crate) overlay: Overlay,
    /// A table's store: written only by its topic's records, read-only to handlers, no
    /// changelog of its own (the topic is one), checkpointed at the topic's offset.
    pub(crate) table: bool,
    /// A versioned table's history in milliseconds (see [`crate::state::versioned`]): its
    /// records are kept as versions, and handlers can read it as of a time.
    pub(crate) history_ms: Option<i64>,
}

/// A record isolated from a batch it made fail: dead-lettered the next time it is read.
#[derive(Debug, Clone)]
pub(crate) struct Isolated {
    /// The DLT class it gets.
    pub(crate) class: DltClass,
    /// What went wrong, for `eosflow.dlt.error.message` and the log.
    pub(crate) reason: String,
    /// 0: dead-letter it whole; 1: truncated; 2: a pointer only.
    pub(crate) stage: u8,
}

/// The per-record logic's borrowed state: the processor, the tasks, the counters, and the
/// output and stamps of whoever drives it.
pub(crate) struct Engine<'e, P, O> {
    pub(crate) opts: &'e RuntimeOptions,
    pub(crate) processor: &'e mut P,
    pub(crate) tasks: &'e mut BTreeMap<i32, Task>,
    pub(crate) summary: &'e mut RunSummary,
    pub(crate) isolated: &'e HashMap<(String, i32, i64), Isolated>,
    pub(crate) forced_dead_letter: &'e mut Option<(DltClass, u8)>,
    /// Outputs sent in the open batch, per topic.
    pub(crate) produced: &'e mut BTreeMap<String, u64>,
    /// Records the handler processed in the open batch, per input topic.
    pub(crate) processed: &'e mut BTreeMap<String, u64>,
    pub(crate) stamps: &'e mut dyn Stamps,
    pub(crate) out: &'e mut O,
}

/// Whether a batch must run even when no record arrived: a parked key still has followers to
/// drain, or a timer is due at `now`.
pub(crate) fn work_pending(tasks: &BTreeMap<i32, Task>, now: i64) -> bool {
    tasks
        .values()
        .any(|t| !t.draining.is_empty() || t.timer_due(now))
}

/// A panic's message, for the failure it becomes.
pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}
