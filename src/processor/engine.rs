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
use super::stores::StoreView;
use super::timers::{self, TimerKind};
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

/// One assigned partition number: its stores and the open batch's writes.
pub(crate) struct Task {
    pub(crate) store: Store,
    pub(crate) overlay: Overlay,
    pub(crate) last_purge: Instant,
    /// Whether the committed store holds any parked key: almost never, and then the per-record
    /// lookup of the record's key in `parked` is skipped.
    pub(crate) store_has_parked: bool,
    /// Parked keys whose followers are drained a chunk per transaction (see `drain_parked`).
    pub(crate) draining: BTreeSet<Vec<u8>>,
    /// The processor's named stores of this partition, in [`super::Processor::stores`] order.
    pub(crate) named: Vec<NamedStore>,
    /// Stream time as the open batch sees it (the largest event time seen).
    pub(crate) stream_time: Option<i64>,
    /// Stream time as committed.
    committed_stream_time: Option<i64>,
    /// Per timer kind: no timer of that kind due before this is pending (as the open batch sees
    /// it), so a firing scan starts here instead of at the queue's head, where the tombstones of
    /// fired timers wait for compaction. Exact after each commit (the next due time, or
    /// `i64::MAX` with none pending): the idle loop's "is a wall-clock timer due" is one compare.
    pub(crate) scan_from: [i64; 2],
}

/// What a successful handler call did: its default-store writes, each named store's, its
/// emits, and whether it asked for its input to be dead-lettered.
pub(crate) type CallParts = (
    Overlay,
    Vec<Overlay>,
    Vec<Emit>,
    Option<super::api::DeadLetterRequest>,
);

/// The default store's key of the partition's stream time in [`crate::state::Column::Time`].
const STREAM_TIME_KEY: &[u8] = b"stream";

impl Task {
    /// A task over an opened (and restored) default store and its named stores.
    pub(crate) fn open(
        store: Store,
        named: Vec<NamedStore>,
    ) -> Result<Self, crate::state::StateError> {
        let stream_time = store
            .get(crate::state::Column::Time, STREAM_TIME_KEY)?
            .and_then(|v| Some(i64::from_be_bytes(v.as_slice().try_into().ok()?)));
        let mut task = Self {
            store_has_parked: !store.is_empty(crate::state::Column::Parked)?,
            draining: crate::retry::parked::draining_keys(&store)?,
            store,
            overlay: Overlay::default(),
            last_purge: Instant::now(),
            named,
            stream_time,
            committed_stream_time: stream_time,
            scan_from: [i64::MIN; 2],
        };
        task.refresh_timers()?;
        Ok(task)
    }

    /// Moves stream time to `event_time` if it is later (written to the batch, so it commits
    /// with the record that moved it).
    pub(crate) fn observe(&mut self, event_time: Option<i64>) {
        let Some(t) = event_time else { return };
        if self.stream_time.is_some_and(|s| s >= t) {
            return;
        }
        self.stream_time = Some(t);
        self.overlay.put(
            crate::state::Column::Time,
            STREAM_TIME_KEY,
            t.to_be_bytes().to_vec(),
        );
    }

    /// Lowers the scan start of each kind to the earliest timer `writes` schedule.
    pub(crate) fn note_scheduled(&mut self, writes: &Overlay) {
        for kind in TimerKind::ALL {
            if let Some(at) = timers::earliest_scheduled(writes, kind) {
                let from = &mut self.scan_from[kind.index()];
                *from = (*from).min(at);
            }
        }
    }

    /// Sets each kind's scan start to its next pending due time (one seek per kind), as the
    /// open batch sees it.
    pub(crate) fn refresh_timers(&mut self) -> Result<(), crate::state::StateError> {
        for kind in TimerKind::ALL {
            let from = timers::from_due(kind, self.scan_from[kind.index()]);
            let bounds = timers::due_bounds(kind, from, i64::MAX);
            self.scan_from[kind.index()] = timers::first(&self.overlay, &self.store, &bounds)?
                .map_or(i64::MAX, |(_, t)| t.due_ms);
        }
        Ok(())
    }

    /// Runs one handler call (`what`: `handler` or `timer callback`) with a context over this
    /// partition's stores: its writes and emits, or its failure (a panic is a permanent one).
    pub(crate) fn call(
        &self,
        id: Option<&[u8]>,
        now: i64,
        event_time: Option<i64>,
        what: &str,
        f: impl FnOnce(&mut super::Context<'_>) -> Result<(), ProcessError>,
    ) -> Result<CallParts, ProcessError> {
        let views = self
            .named
            .iter()
            .map(|n| {
                StoreView::new(&n.name, &n.store, &n.overlay)
                    .read_only(n.table)
                    .versioned(n.history_ms)
            })
            .collect();
        let mut ctx = super::Context::new(&self.store, &self.overlay, id)
            .with(views, now)
            .at(event_time, self.stream_time);
        match catch_unwind(AssertUnwindSafe(|| f(&mut ctx))) {
            Ok(Ok(())) => Ok(ctx.into_parts()),
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(ProcessError::permanent(format!(
                "{what} panicked: {}",
                panic_message(&panic)
            ))),
        }
    }

    /// Adds a successful call's writes (default store, then each named store) to the batch.
    pub(crate) fn absorb(&mut self, writes: Overlay, named: Vec<Overlay>) {
        self.note_scheduled(&writes);
        self.overlay.absorb(writes);
        for (n, w) in self.named.iter_mut().zip(named) {
            n.overlay.absorb(w);
        }
    }

    /// Whether a timer of this partition is due: a wall-clock one at `now`, or an event-time
    /// one left over by a batch that reached its limit.
    pub(crate) fn timer_due(&self, now: i64) -> bool {
        let [event, wall] = self.scan_from;
        wall <= now || self.stream_time.is_some_and(|s| event <= s)
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
        for (i, n) in self.named.iter_mut().enumerate() {
            if !n.overlay.is_empty() {
                n.store.apply(&n.overlay, next(i + 1))?;
                n.overlay.clear();
            }
        }
        if self.overlay.is_empty() {
            return Ok(());
        }
        self.store.apply(&self.overlay, next(0))?;
        self.committed_stream_time = self.stream_time;
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
        self.stream_time = self.committed_stream_time;
        self.scan_from = [i64::MIN; 2];
        self.overlay.clear();
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
